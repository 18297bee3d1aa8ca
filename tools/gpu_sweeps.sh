#!/usr/bin/env bash
# The sweeps that decide the gated wgmma paths' table rows, in ONE device call (after
# tools/gpu_check.sh has run the whole suite green, gated tests included): every variant is
# checked against the reference before it is timed, bf16 F.linear / _grouped_mm in the same run.
#   1. two warpgroups (warps 8) at M = 32 / 64 / 128, mxfp4 / e3m2 / e2m3 (three dense shapes);
#   2. the W4A4 activation QDQ in the kernel (fuse_act) at M = 1 / 16, graph and eager;
#   3. mxfp8 e4m3 weights on wgmma at M = 1 / 16 / 64 (W8A16 and W8A8);
#   4. MoE, DeepSeek-like shape, forced two-warpgroup configs at T = 256 / 2048.
# Each step has its own time limit so one slow step cannot eat the call; JSON and logs go to
# $OUT (the device tool brings back 8 files: 4 JSON + 1 log here).
#
#   OUT=/tmp/out bash tools/gpu_sweeps.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-sweeps}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source tools/device_wheels.sh  # pydantic / jsonschema from .whl/ where missing
log=$OUT/sweeps.log
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null || echo "commit: ${COMMIT:-unknown}"; date -u; } | tee "$log"
step() { local name=$1 limit=$2; shift 2; echo "=== $name" | tee -a "$log"
         timeout "$limit" "$@" 2>&1 | tee -a "$log"; echo "=== $name rc=${PIPESTATUS[0]}" | tee -a "$log"; }
step warps8 "${WARPS_S:-240}" python3 tools/tune_linear.py --parts wgmma --ms 32,64,128 \
  --weights mxfp4,mxfp6_e3m2,mxfp6_e2m3 --wgmma-grid warps8 --out "$OUT/warps8.json"
step fused_act "${ACT_S:-90}" python3 tools/tune_linear.py --parts wgmma --ms 1,16 \
  --weights mxfp4:mxfp4 --wgmma-grid fused --eager --out "$OUT/fused_act.json"
step fp8 "${FP8_S:-150}" python3 tools/tune_linear.py --parts wgmma --ms 1,16,64 \
  --weights mxfp8_e4m3,mxfp8_e4m3:mxfp8_e4m3 --out "$OUT/fp8.json"
step moe "${MOE_S:-100}" python3 tools/bench_moe.py --t 256,2048 --experts 64 --top-k 6 \
  --n 2048 --k 7168 --schemes w_mxfp4 --backends triton \
  --wgmma 64:128:2:3:8,128:128:1:3:8,128:128:2:3:8
