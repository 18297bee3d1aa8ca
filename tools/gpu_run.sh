#!/usr/bin/env bash
# One batched GPU session: versions, the kernel tests compiled for real, the quantize
# benchmark, `registry lint --probe` and the linear benchmark. Logs go to $OUT.
# Usage on the device machine: bash tools/gpu_run.sh [quick]
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton, pydantic; print('torch', torch.__version__, 'triton', triton.__version__, 'pydantic', pydantic.__version__)"
date -u
step() { echo; echo "=== $1"; shift; "$@"; echo "=== rc=$?"; }
step pytest python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_FILES:-tests} 2>&1 | tee "$OUT/pytest.log" | tail -25
step probe python3 -m registry lint --probe --json > "$OUT/probe.json" 2> "$OUT/probe.txt"; tail -3 "$OUT/probe.txt"
step bench_quant python3 tools/bench_quant.py ${QUANT_ARGS:-} --out "$OUT/quant.json" 2>&1 | tee "$OUT/quant.md" | tail -60
step bench_linear python3 tools/bench_linear.py ${LINEAR_ARGS:-} --out "$OUT/linear.json" 2>&1 | tee "$OUT/linear.md" | tail -60
