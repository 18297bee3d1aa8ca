"""The wgmma paths' gates, in one place: each part of the Gluon kernels written without a GPU
(a config field, a weight format, a launch path) stays off until its GPU tests pass in a
whole-suite run, and `gated` / `table_config` / `passed_over` say what a config may run here.

Why a module of their own: the kernel (linear_wgmma), its MoE launches (moe_wgmma), the table's
chooser (linear_emulation) and the tools that time a gate off and on (tools/gates.py) all read
the same flags; tests switch one with `monkeypatch.setattr(wgmma_gates, NAME, ...)`.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from kernels.triton.wgmma_config import BLOCK_M_WIDE, WgmmaConfig

# Gates: a part written without a GPU runs once its GPU tests pass in a whole-suite run (the
# runs, their commits and what each test covers: docs/verification.md; speeds: the table's rows).
# K past whole tiles and mxfp6 weights (H200, 017ee6a, 2026-12-01).
K_TAIL_VERIFIED = True
FP6_VERIFIED = True
# mxfp8 e4m3 weights (fp8_words' layout) (H200, 19d2a90, 2026-12-02).
FP8_VERIFIED = True
# mxint8 weights (int8_words' layout: sign-magnitude codes as bf16 subnormals) (H100, 365b4b8,
# 2026-12-05 15:50 UTC: the whole suite with it on, test_wgmma_formats' 8-bit test and the ws
# test among the 4091 passed; docs/verification.md).
INT8_VERIFIED = True
# Warps a program: 4 is one warpgroup (64 weight rows); 8, two sharing one x tile (half the x
# re-reads: most of a program's copies at M >= 64) (H200, 19d2a90).
WARPS_VERIFIED = (4, 8)
# SUB_K 2: a K tile in halves, the second's decode under the first's wgmma (H200, 4c47c1e).
SUB_K_VERIFIED = True
# OVERLAP: K tiles in pairs, each wgmma in flight under the next tile's decode
# (WgmmaConfig.overlap), written 2026-12-05 without a GPU after ncu put M = 1's time in the
# decode's dependent waits (benchmarks parts 32 / 34; the SASS checked offline:
# test_wgmma_compile). On since test_overlap_gives_the_same_bits (mxfp4 / mxfp6 e3m2 / mxfp8
# e4m3 / mxint8) passed in the whole-suite run of 294baa0 (H100, 2026-12-07 07:38 UTC).
OVERLAP_VERIFIED = True
# REP 2: two 64-row blocks a warpgroup sharing its x tile (H200, f744bf5, 2026-12-02).
REP_VERIFIED = True
# The x tile by TMA (WgmmaConfig.tma_x) (H200, 7bf79b8, 2026-12-03).
TMA_X_VERIFIED = True
# Warp-specialized (WgmmaConfig.ws, linear_wgmma_ws.py) (H200, b698ccb, 2026-12-03).
WS_VERIFIED = True
# block_m = BLOCK_M_WIDE: 256 activation rows and 128 weight rows a program (the ws kernel's
# consumers on 64 weight rows each, wgmma N = 256) (H200, d7a3d67, 2026-12-03).
WIDE_M_VERIFIED = True
# The wide tile with split-K (M = 129-256 on N < 16384; each consumer's partial parked and
# summed in slice order: wgmma_tiles.finish_tile) (H200, 0406a8b, 2026-12-03).
WIDE_SPLIT_VERIFIED = True
# The wide tile persistent (WgmmaConfig.persistent: a program an SM walks output tiles, its ring
# running on so the next tile's copies land under this tile's output) (H100, 83640d9,
# 2026-12-07: test_persistent_programs_give_the_grid_orders_bits, every format, in the whole
# suite). The 2-stage families' rows past M = 512 take it since 57a22c8 (docs/benchmarks.md
# part 41).
PERSISTENT_VERIFIED = True
# x in a ring of its own, deeper than the weights' (WgmmaConfig.x_stages: the persistent wide
# tile's 3 x slots beside 2 weight slots; written 2026-12-08 without a GPU).
X_RING_VERIFIED = False


def table_config(cfg: object) -> object:
    """A table row's config as it runs here: a row records the measured choice, and a part of
    it still gated off (tma_x, overlap) runs as the same config without it (what ran before
    the part was written); a caller's own config is refused instead (`unavailable`). Other
    configs (the interpreter's stand-in) as they are."""
    if isinstance(cfg, WgmmaConfig) and cfg.tma_x and not TMA_X_VERIFIED:
        cfg = dataclasses.replace(cfg, tma_x=False)
    if isinstance(cfg, WgmmaConfig) and cfg.overlap and not OVERLAP_VERIFIED:
        cfg = dataclasses.replace(cfg, overlap=False)  # the plain loop: the same bits
    return cfg


def passed_over(cfg: object) -> bool:
    """Whether the table passes a row over (the next row that serves the layer runs): a
    warp-specialized row while ws is gated off — the same config without ws is another kernel
    with another speed, not what ran before (unlike tma_x: `table_config`); the wide tile's
    rows (ws, and split-K) likewise. The gates are `gated`'s."""
    return isinstance(cfg, WgmmaConfig) and cfg.ws and gated(cfg) is not None


def gated(cfg: WgmmaConfig) -> Optional[str]:
    """The part of a config still gated off (not yet verified on a GPU), said in words; None:
    every part runs. One list for the dense (`unavailable`) and the MoE launches."""
    if cfg.warps not in WARPS_VERIFIED:
        return f"warps={cfg.warps} (two warpgroups): written, not yet verified on a GPU"
    if cfg.sub_k != 1 and not SUB_K_VERIFIED:
        return "sub_k=2 (K tiles in halves): written, not yet verified on a GPU"
    if cfg.overlap and not OVERLAP_VERIFIED:
        return "overlap (each wgmma in flight under the next K tile's decode): written, not " \
            "yet verified on a GPU"
    if cfg.rep != 1 and not REP_VERIFIED:
        return "rep=2 (128 rows a warpgroup): written, not yet verified on a GPU"
    if cfg.tma_x and not TMA_X_VERIFIED:
        return "tma_x (the x tile by TMA): written, not yet verified on a GPU"
    if cfg.ws and not WS_VERIFIED:
        return "ws (warp-specialized: a TMA loader warp, two consumers): written, not yet " \
            "verified on a GPU"
    if cfg.block_m == BLOCK_M_WIDE and not WIDE_M_VERIFIED:
        return f"block_m={BLOCK_M_WIDE} (large M, two consumers of 64 weight rows): written, " \
            "not yet verified on a GPU"
    if cfg.persistent and not PERSISTENT_VERIFIED:
        return "persistent (a program an SM walking the wide tile's output tiles): written, " \
            "not yet verified on a GPU"
    if cfg.x_stages and not X_RING_VERIFIED:
        return f"x_stages={cfg.x_stages} (x in a ring of its own): written, not yet verified " \
            "on a GPU"
    if cfg.block_m == BLOCK_M_WIDE and cfg.split > 1 and not WIDE_SPLIT_VERIFIED:
        return f"block_m={BLOCK_M_WIDE} with split-K (split={cfg.split}): written, not yet " \
            "verified on a GPU"
    return None


# Bounds past one M tile (a grid of several; the eager path at prefill's M): the same Bound as
# one tile's with another grid. Why: at M = 1024 eager ran 12-35 us past graph on the H200's
# wide ws rows, and the general path has Triton encode the plan's four TMA descriptors
# (cuTensorMapEncodeTiled) on every call, which a Bound does once. Written 2026-12-03 without a
# GPU; on since 2026-12-05: test_bound_launches_give_the_general_paths_bits (M = 200..600)
# passed in whole-suite runs on an H100, where eager at M = 256 / 1024 ran within 0-4 us of
# graph with the gate on or off (a fast host: the H200's gap is not yet re-measured).
TILES_BOUND_VERIFIED = True


__all__ = ["FP6_VERIFIED", "FP8_VERIFIED", "INT8_VERIFIED", "K_TAIL_VERIFIED", "OVERLAP_VERIFIED",
           "PERSISTENT_VERIFIED", "REP_VERIFIED", "SUB_K_VERIFIED", "TILES_BOUND_VERIFIED",
           "TMA_X_VERIFIED", "WARPS_VERIFIED", "WIDE_M_VERIFIED", "WIDE_SPLIT_VERIFIED",
           "WS_VERIFIED", "X_RING_VERIFIED", "gated", "passed_over", "table_config"]
