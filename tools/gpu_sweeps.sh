#!/usr/bin/env bash
# The sweeps that decide what is still open, in ONE device call right after tools/gpu_check.sh
# (the whole suite green): every variant is checked against the reference before it is timed,
# bf16 F.linear in the same run; the sweep tools open the gates themselves.
#   1. the wide ws tile at N = 28672, M = 4096, 2 against 3 stages (0.94-0.99x: inside one run's
#      spread on 2026-12-03) and at M = 256 / 512 with split-K 2 (decided 2026-12-03 20:45,
#      benchmarks part 17: split rows at M <= 256 on N < 16384; re-run to re-check the table);
#   2. where eager time goes past one M tile (M = 1024: eager − graph +12 to +35 µs with the
#      wide rows, none with dequant-gemm): tools/host_profile.py --ms 256,1024 gives eager with
#      and without the L2 flush beside graph (host-bound or not);
#   3. `registry bench` of mxfp8 at M = 1 / 16 on the large shapes (eager +8.5 to +10.2 µs).
#   4. W4A4 against W4A16 with programmatic dependent launch off and on (grid_dependency,
#      gated PDL_VERIFIED: W4A4 was 14 / 18 % past W4A16 at M = 1 / 16 on 8192², target 10 %):
#      tools/bench_pdl.py, bits checked equal; keep the gate on only where it wins.
#   5. mxfp4 / mxfp6 at M = 1: more warps an SM. The table's 8 x 256 split-2 row is 256 programs
#      of 4 warps (115 registers: 4 fit an SM, the grid gives 2), so 2 warps a scheduler hide
#      the decode's latency (part 19: it streams at 76 % of cuBLAS's bf16 rate). Split 4 and
#      block_k 128 (64 registers) give 4 programs an SM; checked against the reference first.
#      M = 16 likewise (the ws 16 x 512 row: one 140 KB program an SM, 128 for 132 SMs): ws
#      with split-K 2 (256 programs) and a 16 x 256 ring of 6 (two an SM).
#   6. issue 16's MoE table as the code stands (last measured whole on 2026-12-01, part 5:
#      mxfp6 at T = 2048 0.70-0.72 of mxfp4's ratio, target 0.75; DeepSeek-like T = 2048 0.84x
#      since part 10): the three shapes x three schemes x T = 1 / 16 / 256 / 2048; then
#      DeepSeek-like w_mxfp4 with the one-program routing sort at every T (what ran before
#      moe_routing's many-program sort) to see what the sort took.
#   7. quantize / dequantize through the GPU-instruction paths (kernels/triton/hw_cvt.py,
#      fp4_lanes.py; gated CVT_VERIFIED, FP4_LANES_VERIFIED): every format at 8192², the gates
#      off and on in one run, bits checked first (offline SASS, bf16: quantize packed mxfp4
#      20.8 -> 13.7 instructions an element, mxfp8 19.0 -> 9.0, packed mxfp6 23.1 -> 16.4;
#      dequantize e4m3 19.4 -> 7.1, packed mxfp6 15.6 -> 11.6). Keep each gate where it wins.
# Earlier sweeps (ws at M = 1..128, MoE experts through ws and the wide tile, both wide tiles
# against dequant-gemm, MXFP8 x MXFP8 ws): git history, docs/benchmarks.md parts 13-16. Each
# step has its own time limit; JSON and logs go to $OUT.
#
#   OUT=/tmp/out bash tools/gpu_sweeps.sh                      (steps 2-4: one device call)
#   OUT=/tmp/out STEPS="m1_occupancy m16_occupancy" bash tools/gpu_sweeps.sh   (the next call)
#   OUT=/tmp/out STEPS=moe bash tools/gpu_sweeps.sh             (issue 16's MoE table, alone)
#   OUT=/tmp/out STEPS=quant_cvt bash tools/gpu_sweeps.sh       (step 7, ~2 min)
# STEPS names the steps to run (default: host bench_fp8 pdl — together under the device tool's
# 600 s a call; "wide" is step 1, decided 2026-12-03).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-sweeps}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
source tools/device_wheels.sh  # pydantic / jsonschema from .whl/ where missing
log=$OUT/sweeps.log
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null || echo "commit: ${COMMIT:-unknown}"; date -u; } | tee "$log"
STEPS=" ${STEPS:-host bench_fp8 pdl} "
step() { local name=$1 limit=$2; shift 2; [[ $STEPS == *" $name "* ]] || return 0
         echo "=== $name" | tee -a "$log"
         timeout "$limit" "$@" 2>&1 | tee -a "$log"; echo "=== $name rc=${PIPESTATUS[0]}" | tee -a "$log"; }
W=4:0:1:1:1:1  # warps 4, no cap, sub_k 1, rep 1, tma_x, ws
step wide "${WIDE_S:-200}" python3 tools/tune_linear.py --parts wgmma,dequant --ms 256,512,4096 \
  --weights mxfp4,mxfp8_e4m3 --out "$OUT/wide.json" \
  --wgmma-specs 256:128:1:3:$W,256:128:1:2:$W,256:128:2:3:$W,256:128:2:2:$W
step host "${HOST_S:-90}" python3 tools/host_profile.py --ms 256,1024
step bench_fp8 "${BENCH_S:-90}" python3 -m registry bench w_mxfp8_e4m3 --m 1,16,1024 \
  --shapes 28672x8192,8192x28672 --quiet --out "$OUT/bench_fp8.json"
step pdl "${PDL_S:-150}" python3 tools/bench_pdl.py --ms 1,16,64,1024 --out "$OUT/pdl.json"
step m1_occupancy "${M1_S:-150}" python3 tools/tune_linear.py --parts wgmma --ms 1 \
  --weights mxfp4,mxfp6_e3m2 --out "$OUT/m1_occupancy.json" \
  --wgmma-specs 8:256:2:3:4,8:256:4:3:4,8:256:4:4:4,8:128:4:4:4,8:128:4:6:4,8:128:8:4:4,8:128:2:6:4
step m16_occupancy "${M16_S:-150}" python3 tools/tune_linear.py --parts wgmma --ms 16 \
  --weights mxfp4,mxfp6_e3m2 --out "$OUT/m16_occupancy.json" \
  --wgmma-specs 16:512:2:4:$W,16:256:2:6:$W,16:256:1:6:$W,16:128:2:4:4,16:128:4:4:4
step moe "${MOE_S:-400}" bash -c 'for s in "8 2 2048 2048" "32 4 2880 2880" "64 6 2048 7168"; do
  set -- $s; python3 tools/bench_moe.py --backends triton --experts $1 --top-k $2 --n $3 --k $4
done; python3 tools/bench_moe.py --backends triton --experts 64 --top-k 6 --n 2048 --k 7168 \
  --schemes w_mxfp4 --t 256,2048 --one-program-chunks 1000000'
step quant_cvt "${QUANT_S:-300}" python3 tools/bench_quant.py --roundings even \
  --kernels quantize,dequantize --no-reference-time --hw-cvt both --out "$OUT/quant_cvt.json"
