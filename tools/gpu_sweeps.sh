#!/usr/bin/env bash
# The sweeps that decide what is still open, in ONE device call right after tools/gpu_check.sh
# (the whole suite green with the gates under test on): every variant is checked against the
# reference before it is timed, bf16 F.linear in the same run; the sweep tools open the gates
# themselves.
#   1. the wide ws tile (block_m 256: 128 weight rows a program, two consumers of 64, wgmma
#      N = 256) against dequant-gemm (dequantize + cuBLAS: 0.74-1.06x bf16 at M = 1024 / 4096)
#      at M = 256 / 1024 / 4096, mxfp4 (3 and 2 stages) / mxfp6 / mxfp8 (2), three shapes;
#   2. MoE experts (DeepSeek-like: E 64, top-6, 2048 x 7168; T = 2048 is 0.84x bf16, issue 16's
#      target 1.0x) through the wide tile: ~190 rows an expert at T = 2048, one M tile;
#   3. `registry bench` of the rows new on 2026-12-03 (ws at M = 1 / 16 / 32 for mxfp6 / mxfp8)
#      and of W4A4 (its QDQ into the stream's scratch), graph and eager;
#   4. tools/host_profile.py: the host time of a call per scheme (eager's bound).
# Earlier sweeps (ws at M = 1..128, MoE experts through ws, the first wide tile, MXFP8 x MXFP8
# ws): git history, docs/benchmarks.md parts 13-15. Each step has its own time limit; JSON
# and logs go to $OUT.
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
W=4:0:1:1:1:1  # warps 4, no cap, sub_k 1, rep 1, tma_x, ws
step wide "${WIDE_S:-200}" python3 tools/tune_linear.py --parts wgmma,dequant --ms 256,1024,4096 \
  --weights mxfp4,mxfp6_e3m2,mxfp8_e4m3 --wgmma-specs 256:128:1:3:$W,256:128:1:2:$W \
  --out "$OUT/wide.json"
step moe_wide "${MOE_S:-120}" python3 tools/bench_moe.py --t 2048,4096 --experts 64 --top-k 6 \
  --n 2048 --k 7168 --schemes w_mxfp4 --backends triton --wgmma 256:128:1:3:$W
step bench_rows "${BENCH_S:-120}" python3 -m registry bench w_mxfp4_a_mxfp4 w_mxfp6_e3m2 \
  w_mxfp8_e4m3 --m 1,16,32 --quiet --out "$OUT/bench_rows.json"
step host "${HOST_S:-60}" python3 tools/host_profile.py --ms 1,16
