#!/usr/bin/env bash
# One batched GPU session: versions, `registry lint --probe`, the quantize benchmark (bits +
# time), the Triton quant tests compiled for real, and the linear benchmark. Logs go to $OUT.
# Each step has its own time limit (seconds) so that one slow step cannot eat the lease.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source "$(dirname "$0")/device_wheels.sh"  # pydantic / jsonschema from .whl/ where missing
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  date -u; } | tee "$OUT/env.txt"
step() { local name=$1 limit=$2; shift 2; echo; echo "=== $name"
         timeout "$limit" "$@"; echo "=== $name rc=$?"; }
step probe "${PROBE_S:-120}" sh -c "python3 -m registry lint --probe --json > $OUT/probe.json 2> $OUT/probe.txt; tail -2 $OUT/probe.txt"
step bench_quant "${QUANT_S:-200}" sh -c "python3 tools/bench_quant.py ${QUANT_ARGS:-} --out $OUT/quant.json > $OUT/quant.md 2>&1; tail -25 $OUT/quant.md"
step pytest "${PYTEST_S:-150}" sh -c "python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_FILES:-tests} > $OUT/pytest.log 2>&1; tail -4 $OUT/pytest.log"
step bench_linear "${LINEAR_S:-90}" sh -c "python3 tools/bench_linear.py ${LINEAR_ARGS:-} --out $OUT/linear.json > $OUT/linear.md 2>&1; tail -40 $OUT/linear.md"
