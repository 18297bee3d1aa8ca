"""The wgmma kernel's host-side data (linear_wgmma.py): its launch config (`WgmmaConfig`, the
tiles it is verified at), a prepared weight's plan (`WgmmaPlan`: the weight laid out once per K
tile and row groups, split-K fitted, the launch's key) and which weight formats it decodes.

Why apart from the kernel: the config table (linear_configs) and the tools read configs without
importing the Gluon kernel, and the kernel module stays the kernel and its launch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from kernels.reference.packing import unpack_codes
from kernels.spec.formats import get_format
from kernels.triton import grid_dependency, launcher
from kernels.triton.fit import k_slices
from kernels.triton.fp4_words import ALIGN, CHUNK_K, WGMMA_WARPS, wgmma_layout
from kernels.triton.fp6_words import scale_fits, wgmma_layout_fp6
from kernels.triton.fp8_words import fp8_fits, wgmma_layout_fp8
from kernels.triton.int8_words import int8_fits, wgmma_layout_int8
from kernels.triton.linear_decode import checked_once, fast_fp4_scale, fp4_scale_fits
from kernels.triton.linear_mma import _LOCK_TILES

# wgmma's N (activation rows a program) the kernel is verified at on the H200 (every config of
# the 2026-12-01 sweeps, N x K 200 x 1024 and 28672 x 8192, three calls each, bit-identical).
BLOCK_M_VERIFIED = (8, 16, 32, 64, 128)
# Large M (several M tiles a call): 256 activation rows and 128 weight rows a program, the ws
# kernel's two consumers on 64 weight rows each (linear_wgmma_ws); gated by
# wgmma_gates.WIDE_M_VERIFIED.
BLOCK_M_WIDE = 256


@dataclass(frozen=True)
class WgmmaConfig:
    block_m: int  # activation rows a program: one of BLOCK_M_VERIFIED, or BLOCK_M_WIDE (ws)
    block_k: int  # 128, 256 or 512 (whole 128-code chunks of the layout, up to its K padding)
    split: int  # K slices (1: none)
    stages: int  # shared-memory buffers (>= 2): stages - 1 K tiles in flight
    max_tiles: int = 0  # split-K only while output tiles <= this (0: always); data, not a rule
    warps: int = WGMMA_WARPS  # 4 or 8: 16 weight rows a warp (WARPS_VERIFIED)
    fuse_act: bool = False  # W*A* with a dynamic MX key: the x tile's QDQ in the kernel
    sub_k: int = 1  # 2: each K tile in two halves, one decoded under the other's wgmma
    maxnreg: int = 0  # a register cap a thread (0: ptxas' choice): two 8-warp CTAs an SM at 128
    rep: int = 1  # 64-row blocks a warpgroup (2: 128 rows a warpgroup, one x tile for both)
    tma_x: bool = False  # the x tile by one TMA copy (M >= 64: a 16-32 KB tile) not cp.async
    ws: bool = False  # warp-specialized (linear_wgmma_ws): a TMA loader warp, two consumers
    overlap: bool = False  # K tiles in pairs, each wgmma in flight under the next tile's decode
    group_m: int = 1  # M tiles a band of programs walks N with (wgmma_tiles.tile_ids; 1: N first)
    persistent: bool = False  # wide tile, no split: a program an SM walks output tiles in turn
    # persistent only: x tiles in a ring of their own this deep (> stages; 0: the weights' ring).
    # Why: the wide tile's 64 KB x slot is most of a stage, so 8-bit / mxfp6 weights fit 2 stages
    # (161 / 153 KiB) and 3 x slots beside 2 weight slots do (225 / 217 KiB of sm_90's 227)
    x_stages: int = 0

    @property
    def groups(self) -> int:
        """16-row groups a program's weight tile (the layouts' `warps`; the wide ws tile: two
        consumers of 64 rows)."""
        return 8 if self.block_m == BLOCK_M_WIDE else self.warps * self.rep

    @property
    def parts(self) -> int:
        """Output tiles a program finishes, each with a split-K counter of its own (the wide ws
        tile: one a consumer, wgmma_tiles.finish_tile's PARTS)."""
        return 2 if self.block_m == BLOCK_M_WIDE else 1

    def __post_init__(self) -> None:
        if self.block_m == BLOCK_M_WIDE:
            if not self.ws:
                raise ValueError(f"WgmmaConfig: block_m={BLOCK_M_WIDE} (large M: two consumers of "
                                 "64 weight rows on all 256 rows) runs the warp-specialized "
                                 "kernel only (got ws=False)")
        elif self.block_m not in BLOCK_M_VERIFIED:
            raise ValueError(f"WgmmaConfig: block_m={self.block_m} is not one of "
                             f"{BLOCK_M_VERIFIED} (verified on the H200) or {BLOCK_M_WIDE} (ws)")
        if self.block_k not in (128, 256, 512) or self.stages < 2 or self.split < 1 or \
                self.max_tiles < 0:
            raise ValueError(f"WgmmaConfig: block_k={self.block_k} (128, 256 or 512: whole "
                             "chunks of the one layout, fp4_words.ALIGN), "
                             f"stages={self.stages} (>= 2), split={self.split} (>= 1), "
                             f"max_tiles={self.max_tiles} (>= 0)")
        if not 1 <= self.group_m <= 64 or (self.group_m > 1 and self.block_m != BLOCK_M_WIDE):
            raise ValueError(f"WgmmaConfig: group_m={self.group_m} needs 1..64 and, past 1, "
                             f"block_m={BLOCK_M_WIDE} (got {self.block_m}): M tiles a band of "
                             "programs shares each weight tile with; a smaller tile runs one M "
                             "tile a call, nothing to group")
        if self.persistent and (self.block_m != BLOCK_M_WIDE or self.split != 1):
            raise ValueError(f"WgmmaConfig: persistent=True needs block_m={BLOCK_M_WIDE} and "
                             f"split=1 (got block_m={self.block_m}, split={self.split}): its "
                             "programs walk the wide tile's output tiles, each whole")
        if self.x_stages and (not self.persistent or self.x_stages <= self.stages):
            raise ValueError(f"WgmmaConfig: x_stages={self.x_stages} (x tiles in a ring of their "
                             f"own) needs persistent=True and more slots than stages="
                             f"{self.stages} (got persistent={self.persistent}); 0: one ring")
        if self.warps not in (4, 8):
            raise ValueError(f"WgmmaConfig: warps={self.warps} is not 4 or 8 (one or two "
                             "warpgroups)")
        if self.sub_k not in (1, 2) or self.rep not in (1, 2) or \
                not (self.maxnreg == 0 or 64 <= self.maxnreg <= 255):
            raise ValueError(f"WgmmaConfig: sub_k={self.sub_k} (1 or 2), rep={self.rep} (1 or 2), "
                             f"maxnreg={self.maxnreg} (0, or 64..255 registers a thread)")
        if self.ws and self.stages % 2 and self.block_m != BLOCK_M_WIDE:
            raise ValueError(f"WgmmaConfig: ws=True needs an even number of stages (got "
                             f"{self.stages}): each consumer owns every other ring slot, so it "
                             "sees every phase of its slots' barriers")
        if self.overlap and (self.sub_k != 1 or self.fuse_act or self.ws or self.stages < 3):
            raise ValueError(f"WgmmaConfig: overlap=True keeps a wgmma in flight into the next K "
                             f"tile: it needs sub_k=1, fuse_act=False (one QDQ buffer), ws=False "
                             f"and stages >= 3 (the slot in flight is not refilled) (got "
                             f"sub_k={self.sub_k}, fuse_act={self.fuse_act}, ws={self.ws}, "
                             f"stages={self.stages})")
        if self.ws and (self.warps != 4 or self.rep != 1 or self.sub_k != 1 or self.fuse_act
                        or not self.tma_x):
            raise ValueError(f"WgmmaConfig: ws=True runs two 4-warp consumers of 64 rows with x by "
                             f"TMA: it needs warps=4, rep=1, sub_k=1, fuse_act=False, tma_x=True "
                             f"(got warps={self.warps}, rep={self.rep}, sub_k={self.sub_k}, "
                             f"fuse_act={self.fuse_act}, tma_x={self.tma_x})")


@dataclass(frozen=True)
class WgmmaPlan:
    """A call's launch, built once per (weight, M bucket, bias?): one direct launch a call."""

    cfg: WgmmaConfig
    grid_n: int
    per_split: int
    split: int
    words: Tensor
    sbytes: Tensor
    n: int
    k: int
    key: int
    bwords: Optional[Tensor] = None  # mxfp6: the codes' low bits (fp6_words)
    fmt: int = 0  # the kernel's FMT: 0 mxfp4, 1 / 2 mxfp6 e2m3 / e3m2, 3 mxfp8 e4m3, 4 mxint8
    act: tuple = ()  # the kernel's ACT: the activation QDQ it runs (wgmma_tiles.act_facts)
    fast: dict = field(default_factory=dict, compare=False)  # (stream, M tiles) -> Bound
    descs: tuple = ()  # ws: TMA descriptors of words, B words, scale bytes (ws_descriptors)
    device: Optional[int] = None  # the weight's CUDA device index (a torch.device a call: ~1 us)
    pdl: bool = False  # launched programmatically after its activation QDQ (grid_dependency)
    act_rows: int = 0  # the kernel's ACT_ROWS: x rows its fused QDQ covers (`act_rows`)
    overlap: bool = False  # the kernel's OVERLAP: cfg.overlap where `overlap_fits`


FORMATS = ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8")  # by the kernel's FMT


def weight_format(consts: dict) -> Optional[str]:
    """The wgmma layout a prepared weight's constexprs take (None: none)."""
    if consts.get("W_SAT"):
        return None
    if consts["W_PACK"] == 1 and consts["W_BITS"] == 4:
        return "mxfp4"
    if consts["W_BITS"] == 6 and consts["W_PACK"] in (0, 2) and not consts.get("W_IS_INT"):
        return {3: "mxfp6_e2m3", 2: "mxfp6_e3m2"}.get(consts.get("W_MBITS"))
    if consts["W_BITS"] == 8 and consts["W_PACK"] == 0 and not consts.get("W_IS_INT") and \
            consts.get("W_MBITS") == 3:
        return "mxfp8_e4m3"
    if consts["W_BITS"] == 8 and consts["W_PACK"] == 0 and consts.get("W_IS_INT"):
        return "mxint8"
    return None


def weight_programs(cfg: WgmmaConfig, n: int, who: str) -> int:
    """Programs along N (grid axis 0) for `n` weight rows, each reading 16 x groups rows of the
    one layout, whose rows are padded to whole ALIGN[0] (128): a 256-row program (warps 8 x
    rep 2) on rows padded to an odd count of 128 would read past the layout's end (the last
    program; an MoE expert's, into the next expert's) — compute-sanitizer found such reads on
    the H200 (2026-12-03), which faulted in one run in many. Refused, with the fix."""
    rows = 16 * cfg.groups
    padded = -(-n // ALIGN[0]) * ALIGN[0]
    if padded % rows:
        raise ValueError(f"{who}: a program of {rows} weight rows (warps={cfg.warps}, "
                         f"rep={cfg.rep}) reads past N = {n}'s layout ({padded} rows: whole "
                         f"{ALIGN[0]}); use warps=4 or rep=1 (128 rows a program), or a weight "
                         f"of whole {rows} rows")
    return -(-n // rows)


# The fused QDQ on the rows a call can have, not the whole x tile (`act_rows`): written
# 2026-12-05 without a GPU (offline sm_90a: docs/benchmarks.md part 31); off, a plan QDQs all
# block_m rows. On since the whole-suite run of 085757d (H100, 2026-12-05 21:25 UTC):
# test_fused_activation_qdq_is_the_dispatchers passed with it on, bit for bit the two launches'
# output. No table row takes fuse_act: measured (part 31), it loses graph time to the two
# launches at M = 1 on 8192^2 and K = 28672 (the QDQ sits on each K tile's critical path).
ACT_ROWS_VERIFIED = True


def act_rows(block_m: int, m_max: int) -> int:
    """The kernel's ACT_ROWS for a plan of up to m_max rows on block_m-row tiles: 1 for one row;
    else the rows a tile can hold (a power of two, at least the 8 rows the x tile's swizzle
    repeats over: wgmma_tiles._qdq_rows_view) where that is below block_m; else block_m."""
    if not ACT_ROWS_VERIFIED or m_max >= block_m:
        return block_m
    return 1 if m_max == 1 else max(8, 1 << (m_max - 1).bit_length())


def overlap_fits(ktiles: int, split: int, per_split: int) -> bool:
    """Whether every K slice of a launch holds an even count of tiles (the overlapped loop runs
    them in pairs): the slices of per_split tiles and the last one, what is left."""
    return per_split % 2 == 0 and (ktiles - (split - 1) * per_split) % 2 == 0


def wgmma_plan(cached: dict, n: int, k: int, m_max: int, has_bias: bool,
               cfg: WgmmaConfig, act: tuple = ()) -> Optional[WgmmaPlan]:
    """The plan for up to `m_max` rows of a call `unavailable` accepted, or None where the
    layout cannot hold the weight (`layout_fits`, checked once per weight). `act`: the
    activation QDQ the kernel runs (with `cfg.fuse_act`: wgmma_tiles.act_facts of the
    contract's key; () otherwise)."""
    fmt = weight_format(cached["consts"])
    layout = one_layout(cached, fmt, k)
    if layout is None:
        return None
    ktiles = -(-k // cfg.block_k)
    split, per_split = k_slices(ktiles, cfg.split)
    grid_n = weight_programs(cfg, n, "wgmma")
    tiles = grid_n * -(-m_max // cfg.block_m) * cfg.parts
    if split > 1 and (tiles > _LOCK_TILES or 0 < cfg.max_tiles < tiles):
        split, per_split = 1, ktiles
    words, sbytes, bwords = layout
    pdl = bool(act) and not cfg.fuse_act and grid_dependency.PDL_VERIFIED  # (QDQ launched first)
    act = act if cfg.fuse_act else ()
    rows = act_rows(cfg.block_m, m_max) if act else 0
    overlap = cfg.overlap and overlap_fits(ktiles, split, per_split)  # (else the plain loop)
    key = launcher.intern(("wgmma", words.device.index, has_bias, split, cfg, n, k, fmt, act,
                           pdl, rows, overlap))
    descs = ()
    if cfg.ws:  # (the Gluon module only where a ws config is planned)
        from kernels.triton.linear_wgmma_ws import ws_descriptors
        descs = ws_descriptors(cached, ("wgmma_ws", cfg.block_k), words, bwords, sbytes,
                               cfg.block_k)
    return WgmmaPlan(cfg, grid_n, per_split, split, words, sbytes, n, k, key, bwords,
                     FORMATS.index(fmt), act, device=words.device.index, descs=descs, pdl=pdl,
                     act_rows=rows, overlap=overlap)


def one_layout(cached: dict, fmt: str, k: int) -> Optional[tuple]:
    """(words, scale bytes, B words or None) of a prepared weight in the one wgmma layout every
    config reads (fp4_words.ALIGN: 64-row blocks of 128-code chunks), built once."""
    found = cached.get(_LAYOUT_KEY)
    if found is not None:
        return found
    data, scales = cached["data"], cached["scales"]
    fits = fp4_scale_fits(cached) if fmt == "mxfp4" else (  # (mxfp4's: shared with gemv / mma)
        checked_once(cached, "wgmma_layout_fits", lambda: layout_fits(fmt, data, scales)))
    if not fits:
        return None
    if fmt.startswith("mxfp6") and cached["consts"]["W_PACK"] != 0:
        data = unpack_codes(data.view(torch.uint8), get_format(fmt), "packed", k)
    return cached.setdefault(_LAYOUT_KEY, layout_of(fmt, data, scales))


def layout_fits(fmt: str, codes: Tensor, scales: Tensor) -> bool:
    """Whether the one layout of `fmt` holds a weight exactly (a device sync: callers check once
    per weight): mxfp4 scale bytes up to 128 (`fast_fp4_scale`), mxfp6's `scale_fits`, mxfp8's
    `fp8_fits`, mxint8's `int8_fits`; dense weights (`one_layout`) and experts
    (moe_wgmma.layout_holds) alike."""
    fits = _FITS.get(fmt)
    return fits(codes, scales) if fits is not None else scale_fits(scales, fmt)


_FITS = {"mxfp4": lambda codes, scales: fast_fp4_scale(scales), "mxfp8_e4m3": fp8_fits,
         "mxint8": int8_fits}  # (else mxfp6: scale_fits, its format named)


def layout_of(fmt: str, data: Tensor, scales: Tensor) -> tuple[Tensor, Tensor, Optional[Tensor]]:
    """(words, scale bytes, B words or None) of [N, K] weight rows in the one layout: mxfp4 as
    packed data, mxfp6 as one code a byte, mxfp8 / mxint8 as their codes; the caller checked
    `layout_fits` (one_layout for a dense weight, moe_wgmma for every expert at once)."""
    shape = (CHUNK_K, WGMMA_WARPS)
    if fmt == "mxfp4":
        return (*wgmma_layout(data, scales, *shape, ALIGN), None)
    if fmt == "mxfp8_e4m3":
        a, b, s = wgmma_layout_fp8(data, scales, *shape, ALIGN)
    elif fmt == "mxint8":
        a, b, s = wgmma_layout_int8(data, scales, *shape, ALIGN)
    else:
        a, b, s = wgmma_layout_fp6(data, scales, fmt, *shape, ALIGN)
    return a, s, b


_LAYOUT_KEY = "wgmma_layout"


__all__ = ["ACT_ROWS_VERIFIED", "BLOCK_M_VERIFIED", "BLOCK_M_WIDE", "FORMATS", "WgmmaConfig",
           "WgmmaPlan", "act_rows", "layout_fits", "layout_of", "one_layout", "overlap_fits",
           "weight_format",
           "weight_programs", "wgmma_plan"]
