"""Which `triton-emulation` strategy and launch config runs a call: measured choices, as data.

Why a table: the fastest kernel depends on the weight format's decode cost, on M and on the
layer's shape, and each choice here was measured on the H200 (docs/benchmarks.md, "Hopper MX
linear"); a new measurement edits a row, not an `if` chain. `choose` reads the first row whose
weight family, M range and shape class match; the interpreter runs the same strategy with a
small config so CPU CI covers the paths the GPU takes.

Weight families: "fp4" (packed mxfp4: the 32-bit word decode), "fp8" (8-bit codes: mxfp8
E4M3 / E5M2 and mxint8 — one byte a weight to stream, a decode of two to four instructions a
bf16x2 pair on wgmma: fp8_words / int8_words), "other" (mxfp6, unpacked fp4: the generic exact
decode or mxfp6's word decode).
Measured on N x K = 8192 x 8192, 28672 x 8192 and 8192 x 28672; a row's shape class (`n_min`,
`k_min`) says where it was measured faster, the rows after it serve the rest.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from kernels.triton.linear_decode import GPU_FMA_CONFIG_8BIT, DecodeConfig
from kernels.triton.linear_gemv import GemvConfig
from kernels.triton.linear_mma import MmaConfig
from kernels.triton.wgmma_config import WgmmaConfig


@dataclass(frozen=True)
class Choice:
    family: str  # "fp4" | "fp8" | "other"
    m_max: int  # rows up to this (inclusive); rows past the last row: dequant-gemm / tiled
    strategy: str  # "wgmma" | "gemv" | "mma" | "decode"
    config: object  # WgmmaConfig / GemvConfig / MmaConfig / DecodeConfig
    n_min: int = 0  # the shape class: layers with at least this many output features (N)
    k_min: int = 0  # ... and at least this many input features (K)
    experts: bool = False  # a row for MoE experts only (moe_wgmma); dense layers pass it over


# H200, triton 3.6, bf16 activations, 2026-12-01 (.scratch experiments, docs/benchmarks.md):
_SMALL = MmaConfig(block_m=16, block_n=64, block_k=256, split=4, warps=4, stages=3)
_MID = MmaConfig(block_m=64, block_n=128, block_k=128, split=4, warps=8, stages=4)
_MID_8 = MmaConfig(block_m=64, block_n=128, block_k=128, split=4, warps=8, stages=3)
_SMALL_GENERIC = MmaConfig(block_m=16, block_n=64, block_k=128, split=4, warps=4, stages=3)
_GEMV = GemvConfig(block_n=64, block_k=256, split=4, warps=4, stages=3)
_WGMMA_1 = WgmmaConfig(block_m=8, block_k=256, split=2, stages=3)
# M = 128 on wide layers (N >= 16384): two warpgroups (the x tile read once for 128 rows), 2
# stages and 128 registers a thread (ptxas: 128 with ~112 bytes of spills outside the K loop,
# was 165), so that two CTAs share an SM; no split-K (224 programs on 28672 x 8192)
# The x tile by TMA (tma_x: one copy of the 16-32 KB tile in place of 16 cp.async a thread;
# 168 -> 128 registers at M = 128) where it won, H200 2026-12-03 09:42 UTC (tune_linear
# --wgmma-specs, docs/benchmarks.md part 10), cp.async -> TMA, us, same run:
#   mxfp4  M = 128 s2 st3 43.7 -> 40.3 (8192^2), 130.5 -> 115.3 (8192 x 28672); _WIDE_128
#          126.6 -> 113.4 (28672 x 8192); M = 64 w8 s1 st4 82.2 -> 81.4, s2 st3 28.0 -> 28.0
#   mxfp6 e3m2  M = 128 _WIDE_128 149.0 -> 124.0, s2 st2 sub2 48.4 -> 48.6 / 134.9 -> 129.8;
#          M = 64 loses (w8 s1 st3 101.3 -> 109.1, sub2 91.7 -> 94.7): cp.async kept
#   mxfp8 e4m3  M = 128 _WIDE_128 139.6 -> 129.1, s2 st3 w8 51.9 -> 50.3 / 155.8 -> 143.5;
#          M = 64 even (89.3 -> 89.0): cp.async kept. At M <= 32 (a 4-8 KB tile) TMA loses
#          (2026-12-02, part 8).
_WIDE_128 = WgmmaConfig(block_m=128, block_k=128, split=1, stages=2, warps=8, maxnreg=128,
                        tma_x=True)
# Warp-specialized (ws: a TMA loader warp, two consumer warpgroups on alternate K tiles, no
# split-K), H200 2026-12-03 13:25 / 13:31 UTC (tune_linear --wgmma-specs, docs/benchmarks.md
# part 13), graph us against the table's row before them, same run; 8192^2 / 28672 x 8192 /
# 8192 x 28672:
#   mxfp4  M = 64  64x256 st4  21.3 / 80.8 / 66.0   (28.0 / 81.2 / 76.5)
#          M = 128 128x128 st4 31.4-33.4 / 121.3-124.5 / 104.3   (39.4-40.0 / 108.5-109.1 / 108.6)
#   mxfp6 e3m2 M = 64 25.7 / 91.8 / 80.5 (30.7 / 102.1 / 91.1); M = 128 36.9 / 141.3 / 123.4
#          (48.9 / 125.5 / 127.6)
#   mxfp8 e4m3 M = 64 25.5 / 92.7 / 79.6 (31.3 / 91.0 / 81.2); M = 128 36.5 / 139.5 / 114.0
#          (50.7 / 110.1 / 135.9)
# On N = 28672 (448 programs of 64 rows, one CTA an SM: 3.4 waves) the wide rows stay first.
# M = 1 it loses (mxfp4 8x256 st6 17.9 against 16.5 us; 8x512 not yet measured); M = 16 / 32
# with long K tiles (512 / 256) it wins on N = 8192 (the rows there). Passed over while
# `wgmma_gates.WS_VERIFIED` is off (on since the whole-suite H200 run of 2026-12-03 17:21 UTC).
# mxfp6 e3m2 / mxfp8 e4m3 at M = 1 / 16 / 32 (17:22-17:23 UTC, tools/gpu_sweeps.sh, part 15),
# ws against the rows before, us:
#   mxfp6 M = 16 16x256 st6 21.7 / 72.0 / 60.5 (23.5 / 66.8 / 67.2); M = 32 32x256 st6
#         22.6 / 77.6 / 70.0 (28.5 / 80.2 / 71.3); M = 1 loses (8x512 st6 22.8 / 71.9 / 59.4
#         against 22.2 / 59.7 / 60.0)
#   mxfp8 M = 16 22.4 / 71.1 / 60.4 (23.1 / 69.5 / 63.7); M = 32 23.2 / 75.8 / 63.0 (25.3 /
#         69.4 / 66.9); M = 1 8x256 st8 22.3 / 67.9 / 59.4 (23.1 / 70.9 / 61.5)
# so ws on N = 8192 at M = 16 / 32 (and mxfp6's M = 32 everywhere), mxfp8's M = 1 everywhere.
_M16 = WgmmaConfig(block_m=16, block_k=128, split=2, stages=4)
_M16_OVERLAP = dataclasses.replace(_M16, stages=5, overlap=True)
_M32 = WgmmaConfig(block_m=32, block_k=128, split=2, stages=4)
_WS_16 = WgmmaConfig(block_m=16, block_k=256, split=1, stages=6, tma_x=True, ws=True)
_WS_32 = WgmmaConfig(block_m=32, block_k=256, split=1, stages=6, tma_x=True, ws=True)
# Large M (several 256-row M tiles a call: the wide ws tile, 128 weight rows a program, wgmma
# N = 256; written 2026-12-03, gated by wgmma_gates.WIDE_M_VERIFIED: passed over until then).
# Shared memory: mxfp4 3 stages (218 KiB), mxfp6 / mxfp8 2 (153 / 161 KiB; 3 are past 227).
# Against dequant-gemm (dequantize, then cuBLAS), H200 2026-12-03 17:56 UTC (gpu_sweeps,
# docs/benchmarks.md part 15), x bf16 on 8192^2 / 28672 x 8192 / 8192 x 28672:
#   mxfp4 M = 256 0.66 / 1.09 / 0.73 (0.54 / 0.58 / 0.56), M = 1024 1.06 / 1.19 / 1.20 (0.85 /
#   0.88 / 0.86), M = 4096 1.02 / 0.94 / 1.06 (0.94 / 0.98 / 0.98); mxfp6 / mxfp8 alike (24 of
#   27 cells faster; the 3 others N = 28672 at M = 4096, within 0-4 %, inside the run's spread).
LARGE_M = 1 << 30  # a row's m_max for every M (m_bucket's bucket past 128)
_WS_WIDE_3 = WgmmaConfig(block_m=256, block_k=128, split=1, stages=3, tma_x=True, ws=True)
_WS_WIDE_2 = WgmmaConfig(block_m=256, block_k=128, split=1, stages=2, tma_x=True, ws=True)
# ... with split-K 2 at M <= 256 on N < 16384 (64 programs of 128 x 256 for 132 SMs; at M = 512
# 128 programs already fill them and split-K only adds the partials' traffic). H200 2026-12-03
# 20:4x UTC (tune_linear, docs/benchmarks.md part 17), us, split 1 -> 2, N x K = 8192^2 /
# 8192 x 28672 (28672 x 8192: split 2 loses, 194-211 -> 251-277):
#   M = 256 mxfp4 st3 82.2 / 274.4 -> 67.1 / 179.2, mxfp8 st2 91.4 / 297.9 -> 77.1 / 199.2;
#   M = 512 mxfp4 st3 95.8 / 309.2 -> 129.1 / 352.4, mxfp8 st2 103.6 / 345.1 -> 139.9 / 380.5
_WS_WIDE_3_S2 = dataclasses.replace(_WS_WIDE_3, split=2)
_WS_WIDE_2_S2 = dataclasses.replace(_WS_WIDE_2, split=2)
# ... in bands of 4 M tiles on wide layers (N >= 16384, group_m: a band of programs walks N
# over 4 M tiles, so each weight tile is read from L2 by 4 M tiles' programs close in time), H100
# 2026-12-07 07:40-07:42 UTC (tune_linear --rounds 3 / 5, two calls; docs/benchmarks.md part
# 37), us, the row without bands -> group_m 4, 28672 x 8192:
#   mxfp8 e4m3 M = 4096 2990.6 / 3014.3 -> 2807.4 / 2865.4, M = 1024 779.1 / 771.4 -> 732.0 /
#   721.7 (5-6 %); mxfp4 M = 4096 2707.7 / 2790.4 -> 2672.0 / 2749.0, M = 1024 691.0 / 698.7
#   -> 691.4 / 690.0 (0-1.5 %, inside the spread; part 36 had 3-5 %). On 8192 x 28672 mxfp8
#   gained 3-4 % and mxfp4 -2 / +2 % in one run (N = 8192 keeps the row without bands).
#   mxfp6 e3m2 (part 38, 3 rounds), M = 1024 / 4096: 748.3 / 3083.7 -> 714.2 / 3003.9 (28672 x
#   8192), 699.0 / 2842.2 -> 695.4 / 2772.0 (8192 x 28672).
_WS_WIDE_3_G4 = dataclasses.replace(_WS_WIDE_3, group_m=4)
_WS_WIDE_2_G4 = dataclasses.replace(_WS_WIDE_2, group_m=4)
# ... persistent (one program an SM walking the output tiles, the ring running on from tile to
# tile) where the ring is shallow: 2 stages (mxfp8, mxfp6, mxint8). H100 2026-12-07 18:50-18:53
# UTC (tune_linear, 4 rounds; docs/benchmarks.md part 41), us, the row before -> g4 pst,
# 8192^2 / 28672 x 8192 / 8192 x 28672:
#   mxfp8 e4m3 M = 4096 837.2 / 2947.0 / 2843.4 -> 800.4 / 2792.0 / 2628.7 (2-8 %, and 2-5 % in
#   a 2-round call), M = 1024 206.9 / 716.9 / 703.2 -> 201.1 / 696.0 / 654.0;
#   mxfp6 e3m2 M = 4096 817.2 / 2912.1 / 2829.7 -> 814.3 / 2873.4 / 2693.6, M = 1024 0.96-1.01.
# mxfp4 (3 stages) gained nothing (0.97-1.05): its rows keep the grid kernel.
_WS_WIDE_2_PST = dataclasses.replace(_WS_WIDE_2_G4, persistent=True)
_WS_64 = WgmmaConfig(block_m=64, block_k=256, split=1, stages=4, tma_x=True, ws=True)
_WS_128 = WgmmaConfig(block_m=128, block_k=128, split=1, stages=4, tma_x=True, ws=True)
TABLE: tuple[Choice, ...] = (
    # mxfp4 on sm_90, bf16 x and output: the Gluon wgmma kernel, block_m = M's bucket (H200
    # 2026-12-01, .scratch/gpu_wg2.py, graph, cold weights; N x K = 8192^2 / 28672 x 8192 /
    # 8192 x 28672; bf16 F.linear 34.6-38 / 109-129 / 115-128 us):
    #   M = 1   16.7 / 43.8 / 44.2 us     M = 16  18.7 / 54.1 / 51.7 us
    #   M = 32  20.1 / 62.9 / 53.6 us     M = 64  28.0 / 89.4 / 78.6 us
    #   M = 128 46.0 / 130.6 (split-K off: 448 tiles) / 127.3 us (mma: 70 / 242 / 211)
    # Where it does not apply (another GPU, fp16 / fp32 x or output, a scale byte past 128, K
    # not a multiple of its K tile) the next row of the family that takes M runs.
    Choice("fp4", 1, "wgmma", _WGMMA_1),
    # ws at M = 16 / 32 (13:37 UTC run, mxfp4): 16x512 st4 16.6 / 53.4 / 42.9 us against
    # 18.8 / 51.6 / 50.3; 32x256 st6 18.6 / 62.1 / 51.4 against 21.2 / 60.5 / 51.3 (the rep
    # row): both lose on N = 28672, which keeps the rows it had (n_min), now with a stage more
    # and the overlapped K loop (wgmma_gates.OVERLAP_VERIFIED): 58.3 -> 53.8 us on 28672 x 8192
    # (H100 2026-12-07 07:41 UTC, gpu_sweeps' overlap step, docs/benchmarks.md part 37; at M = 1
    # and for mxfp6 / mxfp8 it won nowhere by more than 2 %, so those rows keep the plain loop)
    Choice("fp4", 16, "wgmma", _M16_OVERLAP, n_min=16384),
    Choice("fp4", 16, "wgmma", WgmmaConfig(block_m=16, block_k=512, split=1, stages=4,
                                           tma_x=True, ws=True)),
    Choice("fp4", 16, "wgmma", _M16),  # (N < 16384 while ws is passed over)
    # M = 32: block_k 128 / 4 stages, 21.1 / 64.8 us against 256 / 3's 22.8 / 70.1 (H200
    # 2026-12-01 22:50 UTC sweep, .scratch/gpu_sweep.py; deeper pipelines won nowhere)
    # M = 32 / 64 on long K (K >= 16384): 128 weight rows a warpgroup (rep 2, split-K 4),
    # 52.7 against 59.8 us and 74.1 against 77.9 us on 8192 x 28672 (H200 2026-12-02 04:58
    # UTC, tune_linear --wgmma-grid rep; about even elsewhere: 21.6 / 61.0 against 21.3 /
    # 61.3 at M = 32 on the other shapes)
    Choice("fp4", 32, "wgmma", WgmmaConfig(block_m=32, block_k=128, split=4, stages=3, rep=2),
           k_min=16384),
    Choice("fp4", 32, "wgmma", _M32, n_min=16384),
    Choice("fp4", 32, "wgmma", _WS_32),
    Choice("fp4", 32, "wgmma", _M32),
    # M = 64 on wide layers (N >= 16384): two warpgroups without split-K, 81.1 us against
    # 89.3 on 28672 x 8192 (H200 2026-12-02 02:55 UTC, tools/gpu_sweeps.sh); on N = 8192 the
    # same config loses (0.66 / 0.70x against 1.31 / 1.52x: 64 programs for 132 SMs)
    Choice("fp4", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=1, stages=4, warps=8,
                                           tma_x=True), n_min=16384),
    Choice("fp4", 64, "wgmma", _WS_64),
    Choice("fp4", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=4, stages=2, rep=2),
           k_min=16384),
    Choice("fp4", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=2, stages=3,
                                           tma_x=True)),
    # M = 128 on wide layers: two warpgroups capped at 128 registers with 2 stages (two CTAs an
    # SM, was one), 118.7 us against 136.4 on 28672 x 8192 (H200 2026-12-02 04:31 UTC,
    # tune_linear --wgmma-grid occupancy); on N = 8192 it loses (52.5 against 42.5 us)
    # MoE experts at M = 128 (DeepSeek-like, E = 64, top-6, 2048 x 7168, T = 2048; H200
    # 2026-12-02 04:58 UTC, bench_moe): 128 rows a warpgroup, 2 stages, 1432 us (0.80x bf16
    # _grouped_mm) against 1570 us for the dense rows below; on dense N = 8192 the same config
    # loses (52.8 against 42.9 us), hence experts only
    # with the x tile by TMA (2026-12-03 09:49 UTC, bench_moe T = 2048): DeepSeek-like 1425 ->
    # 1340 us (0.84x), gpt-oss-like (E = 32, top-4, 2880^2) 540 -> 482 us (1.47x); on E = 8,
    # 2048^2 (K = 2048: 512 programs of 8 K tiles, 4 waves) it loses to the dense row below
    # (128 rows, TMA): 205 against 144 us at T = 2048, 132 against 122 at T = 1024 -> k_min
    Choice("fp4", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=2, rep=2,
                                            tma_x=True), k_min=2880, experts=True),
    # ... on short K the same without rep 2 (H100 2026-12-05 14:34 UTC, bench_moe W4A4, E = 8,
    # 2048^2, T = 2048: 142.7 against the dense row's 153.4 us; docs/benchmarks.md part 23)
    Choice("fp4", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=2,
                                            tma_x=True), experts=True),
    Choice("fp4", 128, "wgmma", _WIDE_128, n_min=16384),
    Choice("fp4", 128, "wgmma", _WS_128),
    Choice("fp4", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=3,
                                            max_tiles=256, tma_x=True)),
    Choice("fp4", 256, "wgmma", _WS_WIDE_3, n_min=16384),
    Choice("fp4", 256, "wgmma", _WS_WIDE_3_S2),
    Choice("fp4", LARGE_M, "wgmma", _WS_WIDE_3_G4, n_min=16384),
    Choice("fp4", LARGE_M, "wgmma", _WS_WIDE_3),
    # mxfp4 (N x K = 8192^2 / 28672 x 8192 / 8192 x 28672; bf16 34.8 / 110 / 115 us):
    # M = 1 the FMA kernel on words 21.0 / 54.1 / 60.6 us (mma 24.6 / 74.7 / 70.4, the old
    # decode 27.4 / 66.6 / 88.4); M <= 16 mma 23.5 / 73 / 69 (old 45 / 131 / 142)
    Choice("fp4", 1, "gemv", _GEMV),
    Choice("fp4", 16, "mma", _SMALL),
    Choice("fp4", 64, "mma", _MID),  # 38.5 / 137 / 111 us (old: 70.9 / 230 / 218)
    Choice("fp4", 128, "mma", _MID_8),  # 70 / 242 / 211 us (dequant-gemm: 93 / 310 / 305)
    # mxfp8 e4m3 on sm_90, bf16 x and output: the wgmma kernel with fp8_words' decode (H200
    # 2026-12-02 02:55 UTC, tools/gpu_sweeps.sh, graph, cold weights; x bf16 on 8192^2 /
    # 28672 x 8192 / 8192 x 28672, W8A16 | W8A8; the mma rows below: 1.05 / 1.07 / 1.26x at
    # M = 1, 0.78 / 0.78 / 0.92x at M = 64):
    #   M = 1   1.51 / 1.59 / 1.87x | 1.40 / 1.53 / 1.80x
    #   M = 16  1.47 / 1.64 / 1.85x | 1.33 / 1.56 / 1.75x
    #   M = 32  1.37 / 1.87 (two warpgroups, N >= 16384) / 1.77x | 1.22 / 1.77 / 1.70x
    #   M = 64  1.19 / 1.36 (two warpgroups, N >= 16384) / 1.47x | 1.11 / 1.28 / 1.19x
    #   M = 128 0.74 / 0.81 / 0.86x | 0.70 / 0.79 / 0.84x (M = 32 / 128: 03:05 UTC)
    Choice("fp8", 1, "wgmma", WgmmaConfig(block_m=8, block_k=256, split=1, stages=8,
                                          tma_x=True, ws=True)),
    Choice("fp8", 1, "wgmma", WgmmaConfig(block_m=8, block_k=256, split=2, stages=4)),
    Choice("fp8", 16, "wgmma", _M16, n_min=16384),
    Choice("fp8", 16, "wgmma", _WS_16),
    Choice("fp8", 16, "wgmma", _M16),
    Choice("fp8", 32, "wgmma", WgmmaConfig(block_m=32, block_k=128, split=1, stages=4, warps=8),
           n_min=16384),
    Choice("fp8", 32, "wgmma", _WS_32),
    Choice("fp8", 32, "wgmma", WgmmaConfig(block_m=32, block_k=256, split=2, stages=3)),
    Choice("fp8", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=1, stages=3, warps=8),
           n_min=16384),
    Choice("fp8", 64, "wgmma", _WS_64),
    # long K (rep 2, 04:58 UTC, 8192 x 28672): M = 64 79.5 against 97.6 us, M = 128 (in halves)
    # 146.1 against 154.9 us
    Choice("fp8", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=4, stages=3, rep=2),
           k_min=16384),
    Choice("fp8", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=2, stages=3)),
    Choice("fp8", 128, "wgmma", _WIDE_128, n_min=16384),  # 131.1 against 153.8 us (04:31)
    Choice("fp8", 128, "wgmma", _WS_128),
    Choice("fp8", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=4, stages=2, rep=2,
                                            sub_k=2), k_min=16384),
    Choice("fp8", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=3, warps=8,
                                            max_tiles=128, tma_x=True), n_min=8192),
    Choice("fp8", 256, "wgmma", _WS_WIDE_2, n_min=16384),
    Choice("fp8", 256, "wgmma", _WS_WIDE_2_S2),
    Choice("fp8", LARGE_M, "wgmma", _WS_WIDE_2_PST),
    Choice("fp8", LARGE_M, "wgmma", _WS_WIDE_2_G4, n_min=16384),  # (while persistent is gated)
    Choice("fp8", LARGE_M, "wgmma", _WS_WIDE_2),
    # mxfp8 e5m2 (or e4m3 where wgmma does not apply) via the fp8 convert: M = 1 / 16 / 64
    # 31.9 / 32.1 / 45.7 us (old 45.5 / 70.4 / 113)
    Choice("fp8", 16, "mma", _SMALL),
    Choice("fp8", 64, "mma", _MID_8),
    # mxfp6 (e2m3 / e3m2) on sm_90, bf16 x and output: the wgmma kernel with the fp6 word
    # decode (H200 2026-12-01 22:25 UTC, .scratch/gpu_fp6.py, graph, cold weights, the three
    # shapes; bf16 34.7-38 / 110-132 / 115-130 us; e2m3 | e3m2 us):
    #   M = 1   22.4 / 70.0 / 61.0 | 26.3 / 80.3 / 78.8   (8, 256, 2, 3: 23.8 / 62.1 / 65.3)
    #   M = 16  23.9 / 69.1 / 65.4 | 28.3 / 83.4 / 84.9   (generic mma: 45.9 / 129 / 137)
    #   M = 64  35.9 / 111 / 108   | 38.7 / 120 / 119     (generic mma: 69.7 / 229 / 239)
    #   M = 128 56.0 / 212 / 181   | 60.7 / 236 / 204     (split 2: 64.7 / 221 / 190; the
    #   dequant-gemm it replaces: 110 / 373 / 364). mxint8 / unpacked fp4: the rows below.
    # 2026-12-02 04:31 UTC (tune_linear --wgmma-grid occupancy, e3m2): M = 1 on wide layers,
    # block_k 256 in halves (sub_k 2) 58.9 against 66.8 us on 28672 x 8192 (on N = 8192 it
    # loses: 22.6 / 61.6 against 21.9 / 60.1); M = 64 in halves 30.3 against 32.5 us on 8192^2
    # (94.9 / 94.8 on 8192 x 28672); M = 128: wide layers as fp4's 145.2 against 169.2 us, else
    # one warpgroup, 2 stages, halves 46.8 / 146.2 against 52.7 / 160.7 us (8192^2 / 8192 x
    # 28672; without halves 46.3 / 151.0)
    Choice("other", 1, "wgmma", WgmmaConfig(block_m=8, block_k=256, split=2, stages=3, sub_k=2),
           n_min=16384),
    Choice("other", 1, "wgmma", WgmmaConfig(block_m=8, block_k=128, split=2, stages=4)),
    Choice("other", 16, "wgmma", _M16, n_min=16384),
    Choice("other", 16, "wgmma", _WS_16),
    Choice("other", 16, "wgmma", _M16),
    # M = 32 (the sweep): e2m3 23.4 / 80.1, e3m2 29.7 / 94.7 us (the M = 64 row: 34 / 101, 38 / 115)
    # long K (rep 2, 04:58 UTC, e3m2 on 8192 x 28672): M = 32 71.3 against 73.8 us, M = 64
    # 91.5 against 94.5 us (on 8192^2 they lose: 26.7 / 33.0 against 25.2 / 30.5)
    Choice("other", 32, "wgmma", _WS_32),
    Choice("other", 32, "wgmma", WgmmaConfig(block_m=32, block_k=128, split=4, stages=3, rep=2),
           k_min=16384),
    Choice("other", 32, "wgmma", WgmmaConfig(block_m=32, block_k=128, split=2, stages=4)),
    # M = 64 / 128, two warpgroups (H200 2026-12-02 02:55 UTC, tools/gpu_sweeps.sh; e2m3 |
    # e3m2 us): M = 64 on N >= 16384 (split-K off) 103.5 | 96.5 against 111.9 | 111.1 on
    # 28672 x 8192 (on N = 8192 it loses: 0.56-0.59x); M = 128, split-K only up to 128 tiles
    # (on: N = 8192; off: 28672): 54.9 / 176.4 / 156.7 | 54.7 / 173.3 / 155.3 against
    # 54.8 / 212.9 / 179.7 | 55.2 / 209.2 / 176.6
    Choice("other", 64, "wgmma", _WS_64),  # (ws: above; it wins on wide layers too)
    Choice("other", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=1, stages=3,
                                             warps=8), n_min=16384),
    Choice("other", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=4, stages=3, rep=2),
           k_min=16384),
    Choice("other", 64, "wgmma", WgmmaConfig(block_m=64, block_k=128, split=2, stages=3,
                                             sub_k=2)),
    # MoE experts, W6A6 e3m2 at T = 2048 (H100 2026-12-05 14:33 UTC, bench_moe, graph, us,
    # docs/benchmarks.md part 23; E = 8 2048^2 / E = 32 top-4 2880^2 / E = 64 top-6 2048 x
    # 7168): the plain 3-stage row below (one program an SM, part 22) 211.9 / 702.5 / 1689.9;
    # 2 stages 170.6 / 528.2 / 1203.9; split 2, 2 stages, TMA x 159.5 / 469.5 / 1109.5 (two
    # programs an SM); the wide ws tile (256 rows: one weight decode for ~192 rows an expert)
    # 178.1 / 518.8 / 985.6 — it wins on K = 7168 only: the experts-only row with k_min
    # below, which linear_configs.experts_row serves past 128 rows an expert
    Choice("other", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=2,
                                              tma_x=True), experts=True),
    Choice("other", 128, "wgmma", _WIDE_128, n_min=16384),
    Choice("other", 128, "wgmma", _WS_128),
    Choice("other", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=2, stages=2,
                                              sub_k=2, tma_x=True), n_min=8192),
    Choice("other", 128, "wgmma", WgmmaConfig(block_m=128, block_k=128, split=1, stages=3)),
    Choice("other", LARGE_M, "wgmma", _WS_WIDE_2, k_min=7168, experts=True),  # (above)
    Choice("other", 256, "wgmma", _WS_WIDE_2, n_min=16384),
    Choice("other", 256, "wgmma", _WS_WIDE_2_S2),  # (as mxfp8: not measured)
    Choice("other", LARGE_M, "wgmma", _WS_WIDE_2_PST),
    Choice("other", LARGE_M, "wgmma", _WS_WIDE_2_G4, n_min=16384),  # (while persistent is gated)
    Choice("other", LARGE_M, "wgmma", _WS_WIDE_2),
    # mxfp6 / mxint8, generic decode: M = 1 the FMA decode (36.6 us, mma 44.6); M <= 64 mma
    # (44.6 / 68 us against 50.2 / 105.6)
    Choice("other", 1, "decode", GPU_FMA_CONFIG_8BIT),
    Choice("other", 16, "mma", _SMALL_GENERIC),
    Choice("other", 64, "mma", _MID_8),
)
# Interpreter: the same strategies on small tiles (tails, split-K and the K loop all covered).
INTERPRETER_MMA = MmaConfig(block_m=16, block_n=16, block_k=64, split=2, warps=1, stages=1)
INTERPRETER_DECODE = DecodeConfig(block_n=16, block_k=64, split=1, warps=1, stages=1)
INTERPRETER_GEMV = GemvConfig(block_n=16, block_k=64, split=2, warps=1, stages=1)


def weight_family(consts: dict) -> str:
    """The table's family of a prepared weight (its kernel constexprs)."""
    if consts["W_PACK"] == 1 and consts["W_BITS"] == 4:
        return "fp4"
    if consts["W_BITS"] == 8 and consts["W_PACK"] == 0:  # mxfp8 and mxint8 (2026-12-05: on
        return "fp8"  # wgmma as mxfp8; their rows until mxint8's own are measured)
    return "other"


def wgmma_family(fmt: str) -> str:
    """The table's family of a wgmma weight format (wgmma_config.FORMATS, mxfp4 packed):
    `weight_family` of its prepared weight, for callers holding the format's name (MoE experts,
    tools)."""
    return {"mxfp4": "fp4", "mxfp8_e4m3": "fp8", "mxint8": "fp8"}.get(fmt, "other")


def _never(config: object) -> bool:
    return False


def _dense_only(config: object) -> bool:
    """A config that serves dense layers only (`_serves`): warp-specialized, the overlapped K
    loop or programs in bands (`WgmmaConfig.ws` / `overlap` / `group_m`)."""
    return bool(getattr(config, "ws", False) or getattr(config, "overlap", False)
                or getattr(config, "group_m", 1) != 1)


def _serves(row: Choice, family: str, n: int, k: int, experts: bool,
            passed_over: Callable[[object], bool]) -> bool:
    """Whether a row serves a layer of the family and shape: its shape class; experts-only rows
    for MoE experts only; `_dense_only` ones not marked experts-only for dense layers
    only; and not a row the caller passes over (a part of its config still
    gated off)."""
    if experts:  # dense ws rows were measured on dense layers only, and overlap / bands are
        # dense launches' (moe_wgmma refuses them); an experts-only row serves
        kind_ok = row.experts or not _dense_only(row.config)
    else:
        kind_ok = not row.experts
    return (kind_ok and row.family == family and n >= row.n_min and k >= row.k_min
            and not passed_over(row.config))


def choose(family: str, m: int, interpreted: bool, skip: tuple[str, ...] = (), *,
           n: int, k: int, experts: bool = False,
           passed_over: Callable[[object], bool] = _never) -> Optional[Choice]:
    """The first row of the family that takes M rows and an N x K layer (`_serves`) whose
    strategy is not in `skip` (with the interpreter's config
    under TRITON_INTERPRET=1, where Gluon's wgmma rows are skipped: Gluon does not interpret),
    or None past the table's M ranges (the caller's large-M strategy)."""
    if interpreted:
        skip = (*skip, "wgmma")
    for row in TABLE:
        if m <= row.m_max and _serves(row, family, n, k, experts, passed_over) \
                and row.strategy not in skip:
            if interpreted:
                cfg = {"mma": INTERPRETER_MMA, "gemv": INTERPRETER_GEMV}.get(
                    row.strategy, INTERPRETER_DECODE)
                return Choice(row.family, row.m_max, row.strategy, cfg)
            return row
    return None


def experts_row(strategy: str, family: str, m: int, *, n: int, k: int) -> Optional[object]:
    """The config of the first experts-only row of a strategy and family that takes M rows and
    an expert's N x K, or None: what MoE takes past the dense rows' M ranges only where a row
    was measured on experts."""
    return next((r.config for r in TABLE if r.experts and r.strategy == strategy and
                 m <= r.m_max and _serves(r, family, n, k, True, _never)), None)


def config_for(strategy: str, family: str, m: int, interpreted: bool, *, n: int,
               k: int, experts: bool = False,
               passed_over: Callable[[object], bool] = _never) -> object:
    """A strategy's config where the table did not pick it (a forced strategy without a config,
    or gemv falling back to mma): the first row of that strategy and family that takes M rows
    and an N x K layer,
    else that strategy's last row for the family, else the strategy's generic default."""
    if interpreted:
        return {"mma": INTERPRETER_MMA, "gemv": INTERPRETER_GEMV}.get(strategy,
                                                                      INTERPRETER_DECODE)
    rows = [r for r in TABLE if r.strategy == strategy and
            _serves(r, family, n, k, experts, passed_over)]
    row = next((r for r in rows if m <= r.m_max), rows[-1] if rows else None)
    if row is not None:
        return row.config
    return {"mma": _SMALL_GENERIC if m <= 16 else _MID_8, "gemv": _GEMV,
            "wgmma": _WGMMA_1}.get(strategy, GPU_FMA_CONFIG_8BIT)


def m_bucket(m: int) -> int:
    """The M ranges the table distinguishes (plans are cached per bucket)."""
    for top in (1, 16, 32, 64, 128, 256, 512):
        if m <= top:
            return top
    return LARGE_M


__all__ = ["LARGE_M", "Choice", "TABLE", "choose", "config_for", "experts_row", "m_bucket",
           "weight_family", "wgmma_family"]
