#!/usr/bin/env bash
# The sweeps that decide the warp-specialized (ws) rows still open, in ONE device call (after
# tools/gpu_check.sh has run the whole suite green with linear_wgmma.WS_VERIFIED on): every
# variant is checked against the reference before it is timed, bf16 F.linear / _grouped_mm in
# the same run; the sweep tools open the gates themselves.
#   1. ws at M = 1 (only 8x256 st6 measured: 17.9 against 16.5 us; deeper rings, and split-K 2
#      for 256 programs as the one-partition row has) and M = 16 / 32 for mxfp6 /
#      mxfp8 (mxfp4's rows: 16x512 st4, 32x256 st6), three dense shapes;
#   2. MoE experts through ws (GROUPED) at T = 256 / 2048: DeepSeek-like (E 64, top-6,
#      2048 x 7168: 0.84x, issue 16's 1.0x target), gpt-oss-like (E 32, top-4, 2880^2);
#   3. `registry bench` of the table as it runs with the ws rows on (graph and eager: a ws
#      Bound's weight descriptors encoded once, launcher.split_launcher), M = 1..128;
#   4. MXFP8 x MXFP8 (issue 16) through triton-fp8-mma with its warp-specialized kernel
#      (linear_fp8_ws, gate opened for the step) beside triton-emulation, M = 1024 / 4096;
#   5. the wide ws tile (block_m 256, two consumers on 128 rows each) at M = 1024 / 4096
#      against bf16 (today dequant-gemm: 0.99x at M = 4096, issue 14's >= 1.0x).
# Each step has its own time limit so one slow step cannot eat the call; JSON and logs go to
# $OUT (the device tool brings back 8 files: 7 JSON + 1 log here). Earlier sweeps (two
# warpgroups, fused activation QDQ, mxfp8 on wgmma): git history and docs/benchmarks.md.
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
step ws_m1 "${M1_S:-80}" python3 tools/tune_linear.py --parts wgmma --ms 1 --eager \
  --weights mxfp4,mxfp6_e3m2,mxfp8_e4m3 \
  --wgmma-specs 8:512:1:6:$W,8:256:1:8:$W,8:256:2:4:$W,8:512:2:4:$W --out "$OUT/ws_m1.json"
step ws_m16_32 "${M16_S:-90}" python3 tools/tune_linear.py --parts wgmma --ms 16,32 --eager \
  --weights mxfp6_e3m2,mxfp8_e4m3 \
  --wgmma-specs 16:512:1:4:$W,16:256:1:6:$W,32:256:1:6:$W,32:256:1:4:$W --out "$OUT/ws_m16_32.json"
step moe_deepseek "${MOE_S:-90}" python3 tools/bench_moe.py --t 256,2048 --experts 64 --top-k 6 \
  --n 2048 --k 7168 --schemes w_mxfp4 --backends triton \
  --wgmma 128:128:1:4:$W,64:256:1:4:$W,128:128:2:4:$W,32:256:1:6:$W
step moe_gptoss "${MOE2_S:-60}" python3 tools/bench_moe.py --t 256,2048 --experts 32 --top-k 4 \
  --n 2880 --k 2880 --schemes w_mxfp4 --backends triton \
  --wgmma 128:128:1:4:$W,64:256:1:4:$W
step bench_ws "${BENCH_S:-100}" python3 -m registry bench w_mxfp4 w_mxfp4_a_mxfp4 w_mxfp6_e3m2 \
  w_mxfp8_e4m3 --m 1,16,32,64,128 --quiet --out "$OUT/bench_ws.json"
step fp8_ws "${FP8_S:-80}" python3 -c "
import sys
from kernels.triton import linear_fp8_ws
linear_fp8_ws.VERIFIED = True  # the step measures the gated kernel (checked first, as always)
from registry.cli.app import main
sys.exit(main(['bench', 'w_mxfp8_e4m3_a_mxfp8_e4m3', '--kernels', 'triton-fp8-mma,triton-emulation',
               '--m', '1024,4096', '--quiet', '--out', '$OUT/fp8_ws.json']))"
step wide_m "${WIDE_S:-100}" python3 tools/tune_linear.py --parts wgmma --ms 1024,4096 \
  --weights mxfp4,mxfp6_e3m2 --wgmma-specs 256:128:1:2:$W,256:128:1:3:$W --out "$OUT/wide_m.json"
