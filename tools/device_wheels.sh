# Sourced by the GPU scripts (gpu_check, gpu_run, gpu_sweeps, gpu_hardening, ncu_wgmma), from
# the repository root: where pydantic / jsonschema are missing (the lent H200 image) the wheels
# carried in .whl/ are installed into /tmp/site, put first on PYTHONPATH.
# tools/fetch_device_wheels.sh downloads them here (tools/bench_peer.py's humming-kernels too).
if ! python3 -c "import pydantic, jsonschema" 2>/dev/null && [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
