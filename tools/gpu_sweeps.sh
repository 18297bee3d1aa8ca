#!/usr/bin/env bash
# The sweeps that decide what is still open, in ONE device call right after tools/gpu_check.sh
# (the whole suite green): every variant is checked against the reference before it is timed,
# bf16 F.linear in the same run; the sweep tools open the gates themselves.
#   1. the wide ws tile at N = 28672, M = 4096, 2 against 3 stages (0.94-0.99x: inside one run's
#      spread on 2026-12-03) and at M = 256 / 512 with split-K 2 (decided 2026-12-03 20:45,
#      benchmarks part 17: split rows at M <= 256 on N < 16384; re-run to re-check the table);
#   2. host: where eager time goes (tools/host_profile.py --ms 256,1024);
#   3. `registry bench` of mxfp8 at M = 1 / 16 / 1024 on the large shapes;
#   4. pdl: W4A4 against W4A16: as shipped and with PDL on (the runs before 2026-12-05 21:30
#      UTC had PDL off in both: the script set it around prepare only, part 31); PDL_MS /
#      PDL_SHAPES narrow it (the gap is at M <= 64 on 8192^2); fused_act: W4A4's QDQ in the
#      GEMM (one launch), whole tile and rows, beside two launches;
#   5. m1_occupancy / m16_occupancy: mxfp4 / mxfp6 at M = 1 / 16 with more programs an SM,
#      and at M = 1 split 1 with 6 / 8 stages (no split-K partials: the last slice's store,
#      fence, counter and partial read sit on the critical path of part 19's ~2 µs of extra
#      fixed time; 128 programs stream the weight with deeper rings instead);
#   6. moe: issue 16's table (three shapes x three schemes x T = 1 / 16 / 256 / 2048), then
#      DeepSeek-like w_mxfp4 with the one-program routing sort beside the many-program one;
#   7. quant_cvt: quantize / dequantize with the GPU-instruction paths (hw_cvt.py, fp4_lanes.py)
#      off and on, every format at 8192², bits checked first.
#   Steps 2-7 ran on an H100 on 2026-12-05 (docs/benchmarks.md part 21; host_profile then failed
#   on a stale memo lookup, fixed since): CVT / FP4_LANES / TILES_BOUND on, PDL kept off.
#   8. moe_tiles (decided 2026-12-05 14:35 on an H100, benchmarks part 23: the 2-stage split-2
#      TMA-x tile and, on K >= 7168, the wide ws tile became mxfp6's experts-only rows; re-run
#      on the H200): MoE tiles at T = 2048, where mxfp6 W6A6 ran at 0.52-0.70 of mxfp4's
#      ratio (target 0.75) and its table row is the plain 128-row one (no TMA x, no rep 2: the
#      rows mxfp4's experts got on the H200): each shape, mxfp6 and mxfp4 apart (a config one
#      format's shared memory cannot hold would stop the other's run), the table's row beside
#      forced candidates — rep 2 + TMA x (mxfp4's experts row), halves + TMA x, TMA x alone, two
#      warpgroups (_WIDE_128: decode of one beside the MMAs of the other), the
#      ws 128 tile and the wide ws 256 tile (half the weight re-reads: rows per expert ~192 at
#      DeepSeek-like T = 2048), and the plain tile with 2 stages, split 1 and split 2 + TMA x
#      (offline, sm_90a, triton 3.6: the table's 3-stage row takes 117.5 KB of shared memory,
#      one program an SM; with 2 stages 78 KB and 196-208 registers, two, as mxfp4's experts
#      row has: benchmarks part 22); every one checked against the reference before timing.
#      Keep as experts-only table rows (linear_configs, experts=True) what wins on all three.
#      TILES_MXFP4=0 leaves mxfp4's candidates out (W6A6's alone: the missed target);
#      TILES_W6 replaces W6A6's candidates (a shorter call).
#      On the H200: re-run steps 6 / 7 there too (the issue's device; the quantize target's
#      issue bound is tighter at its 4.26 TB/s).
# Earlier sweeps (ws at M = 1..128, MoE experts through ws and the wide tile, both wide tiles
# against dequant-gemm, MXFP8 x MXFP8 ws): git history, docs/benchmarks.md parts 13-16. Each
# step has its own time limit; JSON and logs go to $OUT.
#
#   OUT=/tmp/out bash tools/gpu_sweeps.sh                      (steps 2-4: one device call)
#   OUT=/tmp/out STEPS="m1_occupancy m16_occupancy" bash tools/gpu_sweeps.sh   (the next call)
#   OUT=/tmp/out STEPS=moe bash tools/gpu_sweeps.sh             (issue 16's MoE table, alone)
#   OUT=/tmp/out STEPS=quant_cvt bash tools/gpu_sweeps.sh       (step 7, ~2 min; HW_CVT=gate
#     times the gates as committed only, QUANT_KERNELS=quantize,dequantize,qdq adds the QDQ)
#   OUT=/tmp/out STEPS=moe_tiles bash tools/gpu_sweeps.sh       (step 8, alone)
#   OUT=/tmp/out STEPS=moe8 bash tools/gpu_sweeps.sh            (8-bit experts: wgmma against
#     the grouped Triton kernel, after the whole suite ran green with their GPU test)
#   OUT=/tmp/out STEPS=fp8_eager bash tools/gpu_sweeps.sh       (W4A8 eager, its Bound off / on)
#   OUT=/tmp/out STEPS="fused_act pdl" bash tools/gpu_sweeps.sh (W4A4 in one launch; PDL again)
#   OUT=/tmp/out STEPS=qdq_rows bash tools/gpu_sweeps.sh       (the wider one-row QDQ tiles)
#   OUT=/tmp/out STEPS=overlap bash tools/gpu_sweeps.sh        (the overlapped K loop, M = 1 / 16)
#   OUT=/tmp/out STEPS=fused_mid bash tools/gpu_sweeps.sh      (W4A4's QDQ in the kernel at
#     M = 64 / 128 on 8192^2, ~1 min)
#   OUT=/tmp/out STEPS=band bash tools/gpu_sweeps.sh           (the wide tile's programs in bands
#     of M tiles, M = 1024 / 4096; BAND_W / BAND_MS / BAND_SHAPES narrow it)
#   OUT=/tmp/out STEPS=x_ring bash tools/gpu_sweeps.sh         (x in a ring of its own, 3 x slots
#     beside 2 of the weights, against the persistent row, M = 1024 / 4096, ~2-3 min)
#   OUT=/tmp/out STEPS=quant_tiles bash tools/gpu_sweeps.sh     (quantize / dequantize tiles,
#     ~6 min; STEPS=quant_word_io, the packed word moves off / on, a call of its own: both ran
#     past their limits together on an H100, part 29)
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
step pdl "${PDL_S:-150}" python3 tools/bench_pdl.py --compare pdl --ms "${PDL_MS:-1,16,64,1024}" \
  --shapes "${PDL_SHAPES:-8192x8192,28672x8192,8192x28672}" --out "$OUT/pdl.json"
# W4A4 with its activation QDQ inside the GEMM (one launch a call, what eager needs: part 29's
# loop column) on the whole x tile and on the rows a plan can have (wgmma_config.
# ACT_ROWS_VERIFIED, written 2026-12-05 without a GPU, part 31: the M = 1 row's K loop 376 ->
# 422 SASS a thread, where the whole tile's took 971), beside the two launches as shipped;
# graph / eager / loop, bits checked. Put fuse_act in the table's rows where it wins.
# The activation QDQ's one-row tiles widened along K where 1 x 256 programs would queue past a
# wave (qdq_plan.SMALL_ROWS_WIDE_VERIFIED, written 2026-12-05 without device time, part 33: W4A4
# ran 8.9 us past W4A16 at M = 64 on 8192 x 28672); switch on if the whole suite is green and
# W4A4 moves nearer W4A16 here
step qdq_rows "${QROWS_S:-200}" python3 tools/bench_pdl.py --compare qdq --ms 1,16,64,128,256 \
  --shapes "${PDL_SHAPES:-8192x8192,28672x8192,8192x28672}" --out "$OUT/qdq_rows.json"
# K tiles in pairs, each wgmma in flight under the next tile's decode (wgmma_gates.OVERLAP_
# VERIFIED, written 2026-12-05 without a GPU, part 34: ncu put M = 1's time in the decode's
# dependent waits; offline SASS has no write to an in-flight wgmma's registers): the table's
# M = 1 / 16 rows with one stage more and overlap beside them (bits checked against the
# reference first); put overlap in the rows where it wins, once the whole suite is green
O=0:1:1:0:0:1
step overlap "${OVL_S:-300}" python3 tools/tune_linear.py --parts wgmma --ms 1,16 \
  --weights mxfp4,mxfp6_e3m2,mxfp8_e4m3 --open-gates OVERLAP_VERIFIED --out "$OUT/overlap.json" \
  --rounds "${ROUNDS:-3}" \
  --wgmma-specs 8:256:2:3:4,8:256:2:4:4:$O,8:256:2:3:4:$O,8:128:2:4:4,8:128:2:5:4:$O,16:128:2:4:4,16:128:2:5:4:$O,16:256:2:4:4:$O
# The wide tile's programs in bands of M tiles (WgmmaConfig.group_m, wgmma_tiles.tile_ids):
# in the grid's order a wave of 132 programs on N = 28672 holds one M tile, so each weight tile
# comes from DRAM once an M tile (16 times at M = 4096: ~3.8 GB for mxfp8, ~1.3 TB/s beside a
# 2 stage ring); in bands, the programs resident at once share it. The table's wide rows with
# group_m 1 / 4 / 8 at M = 1024 / 4096, where mxfp6 / 8-bit / mxfp4 on N = 28672 missed 1.0x
# (benchmarks parts 15 / 32); keep the band that wins on all three shapes in those rows.
# The specs are 2-stage (mxfp6 / mxfp8's rows); mxfp4's 3-stage rows: BAND_W=mxfp4
# BAND_SPECS=256:128:1:3:4:$B:4,256:128:1:3:4:$B:8 (the table's own row is "auto").
# Measured once on an H100 (2026-12-07, benchmarks part 36): bands of 4 ahead of the grid order
# on N = 28672 in all four cells, but inside the order bias of one pass (the table's row, timed
# first, beat the same config named after it by up to 12 %): ROUNDS rotated passes, medians.
# Then with 3 / 5 rounds on N = 28672 (H100 2026-12-07 07:40, part 37): bands of 4 opened there
# for mxfp4 and 8-bit (the table's _G4 rows). Left: mxfp6 (BAND_W=mxfp6_e3m2) and N = 8192.
B=0:1:1:1:1:0
step band "${BAND_S:-420}" python3 tools/tune_linear.py --parts wgmma --ms "${BAND_MS:-1024,4096}" \
  --weights "${BAND_W:-mxfp8_e4m3,mxfp4,mxfp6_e3m2}" --out "$OUT/band.json" --rounds "${ROUNDS:-3}" \
  --shapes "${BAND_SHAPES:-8192x8192,28672x8192,8192x28672}" \
  --wgmma-specs "${BAND_SPECS:-256:128:1:2:4:$B:1,256:128:1:2:4:$B:4,256:128:1:2:4:$B:8}"
# x in a ring of its own (WgmmaConfig.x_stages, gated wgmma_gates.X_RING_VERIFIED, written
# 2026-12-08 without a GPU): the 2-stage families' persistent row (bands of 4) beside the same
# with 3 x slots (x copied a K tile earlier than its weights), M = 1024 / 4096, ROUNDS rotated
# passes; mxfp4's 3-stage table row beside both as the control. Open the gate and give the
# fp8 / "other" families' LARGE_M rows x_stages=3 where it wins on all three shapes.
P=0:1:1:1:1:0:4:1
step x_ring "${XRING_S:-300}" python3 tools/tune_linear.py --parts wgmma \
  --ms "${XRING_MS:-1024,4096}" --weights "${XRING_W:-mxfp8_e4m3,mxint8,mxfp6_e3m2,mxfp4}" \
  --out "$OUT/x_ring.json" --rounds "${ROUNDS:-2}" --shapes "${XRING_SHAPES:-8192x8192,28672x8192,8192x28672}" \
  --open-gates X_RING_VERIFIED --wgmma-specs "256:128:1:2:4:$P,256:128:1:2:4:$P:3"
# W4A4 with the QDQ inside the kernel at M = 64 / 128 on 8192^2, where W4A4 stays 11-16 % past
# W4A16 with the QDQ launched first (part 37): the plain grid's first two configs with
# fuse_act beside the table (ws rows, QDQ launched first), bits checked against the reference
step fused_mid "${FUSEDM_S:-200}" python3 tools/tune_linear.py --parts wgmma --ms 64,128 \
  --weights mxfp4:mxfp4 --shapes "${FUSEDM_SHAPES:-8192x8192}" --wgmma-grid fused \
  --rounds "${ROUNDS:-3}" --out "$OUT/fused_mid.json"
step fused_act "${FUSED_S:-240}" python3 tools/bench_pdl.py --compare fused \
  --ms "${FUSED_MS:-1,16}" --shapes "${FUSED_SHAPES:-8192x8192,28672x8192,8192x28672}" \
  --out "$OUT/fused_act.json"
# W4A8 (static fp8 activations) eager with its QDQ's Bound launches off / on
# (qdq_plan.FP8_STATIC_BOUND_VERIFIED, written 2026-12-05 without a GPU)
step fp8_eager "${FP8E_S:-150}" python3 tools/bench_pdl.py --act fp8 --compare bound \
  --ms "${PDL_MS:-1,16,64,1024}" --shapes "${PDL_SHAPES:-8192x8192,28672x8192,8192x28672}" --out "$OUT/fp8_eager.json"
step m1_occupancy "${M1_S:-150}" python3 tools/tune_linear.py --parts wgmma --ms 1 \
  --weights mxfp4,mxfp6_e3m2 --out "$OUT/m1_occupancy.json" \
  --wgmma-specs 8:256:2:3:4,8:256:4:3:4,8:256:4:4:4,8:128:4:4:4,8:128:4:6:4,8:128:8:4:4,8:128:2:6:4,8:256:1:6:4,8:256:1:8:4
step m16_occupancy "${M16_S:-150}" python3 tools/tune_linear.py --parts wgmma --ms 16 \
  --weights mxfp4,mxfp6_e3m2 --out "$OUT/m16_occupancy.json" \
  --wgmma-specs 16:512:2:4:$W,16:256:2:6:$W,16:256:1:6:$W,16:128:2:4:4,16:128:4:4:4
step moe "${MOE_S:-400}" bash -c 'for s in "8 2 2048 2048" "32 4 2880 2880" "64 6 2048 7168"; do
  set -- $s; python3 tools/bench_moe.py --backends triton --experts $1 --top-k $2 --n $3 --k $4
done; python3 tools/bench_moe.py --backends triton --experts 64 --top-k 6 --n 2048 --k 7168 \
  --schemes w_mxfp4 --t 256,2048 --one-program-chunks 1000000'
step quant_cvt "${QUANT_S:-300}" python3 tools/bench_quant.py --roundings even \
  --kernels "${QUANT_KERNELS:-quantize,dequantize}" --no-reference-time --hw-cvt "${HW_CVT:-both}" \
  --out "$OUT/quant_cvt.json"
# quantize / dequantize of the --quick cases (mxfp4 and mxfp6 e2m3 packed among them) under
# other tiles beside the shipped ones (16 x 256, 4 warps; packed mxfp6 8 x 512 since 2026-12-05,
# from an H100 sweep: benchmarks part 29, where this step ran past 300 s with seven tiles; kept:
# the shipped tiles and those within 2 % of the best of a layout). The H200 has not timed 8 x 512.
step quant_tiles "${QTILES_S:-420}" python3 tools/bench_quant.py --quick --roundings even \
  --kernels quantize,dequantize --no-reference-time --out "$OUT/quant_tiles.json" \
  --tiles "${QUANT_TILES:-16x256w4,8x512w4,16x512w8,8x256w4}"
# the packed layouts' codes moved as a thread's 8 elements (packed_codes.FP4_WORD_IO_VERIFIED:
# mxfp4's 4-byte moves; FP6_HALVES_VERIFIED: mxfp6's half groups) and bf16 packed mxfp4's lanes
# on whole words (fp4_lanes.LANE_WORDS_VERIFIED, part 30: 437 -> 360 SASS a thread, no
# shared-memory round trip), off / on together, bits checked both ways. H100, part 29: no gain
# for mxfp4's moves; the halves' dequantize gain (16 x 256) the 8 x 512 tile gives alone; the
# halves on 8 x 512 and the lane words not yet timed (the shipped tile: first here)
step quant_word_io "${QWIO_S:-300}" python3 tools/bench_quant.py --quick --roundings even \
  --kernels quantize,dequantize --no-reference-time --word-io both --out "$OUT/quant_word_io.json" \
  --tiles "${WIO_TILES:-16x256w4}"
# 8-bit experts (mxfp8 e4m3 / mxint8) on wgmma (moe_wgmma.EIGHT_BIT_VERIFIED, written
# 2026-12-05 without a GPU) beside the grouped Triton kernel that runs them today, issue 16's
# three shapes; switch the gate on if the whole suite is green and this is faster everywhere
step moe8 "${MOE8_S:-400}" bash -c 'for s in "8 2 2048 2048" "32 4 2880 2880" "64 6 2048 7168"; do
  set -- $s; shape="--experts $1 --top-k $2 --n $3 --k $4 --backends triton"
  schemes="--schemes w_mxfp8_e4m3,w_mxfp8_e4m3_a_mxfp8_e4m3,w_mxint8_a_mxint8"
  python3 tools/bench_moe.py $shape $schemes
  python3 tools/bench_moe.py $shape $schemes --open-gates EIGHT_BIT_VERIFIED
done'
W6=128:128:2:2:4:0:1:2:1,128:128:2:2:4:0:2:1:1,128:128:1:3:4:0:1:1:1,128:128:1:2:8:128:1:1:1
export TILES_W6=${TILES_W6:-$W6,128:128:1:4:4:0:1:1:1:1,256:128:1:2:4:0:1:1:1:1,128:128:1:2:4,128:128:2:2:4:0:1:1:1}
step moe_tiles "${TILES_S:-420}" bash -c 'for s in "8 2 2048 2048" "32 4 2880 2880" "64 6 2048 7168"; do
  set -- $s; shape="--experts $1 --top-k $2 --n $3 --k $4 --t 2048 --backends triton"
  python3 tools/bench_moe.py $shape --schemes w_mxfp6_e3m2_a_mxfp6_e3m2 --wgmma "$TILES_W6"
  [ "${TILES_MXFP4:-1}" != 1 ] || python3 tools/bench_moe.py $shape --schemes w_mxfp4 \
    --wgmma 128:128:1:4:4:0:1:1:1:1,256:128:1:3:4:0:1:1:1:1
done'
