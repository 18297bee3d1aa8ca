"""The activation QDQ as the linear kernels launch it: a plan per (format, rounding, dtype, K)
with its checks and constants done once (`QdqPlan`), the stream's scratch rows it may write
into (`scratch`); mx_quant's public `qdq` builds one a call. The kernel is mx_quant's
`_qdq_kernel`, beside the quantize and dequantize kernels it shares its codec with; this module
is its launch side.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch

from kernels.spec.formats import ElemFormat, check_rounding
from kernels.triton import launcher, mx_quant, mx_tiles, quant_tiles
from kernels.triton.grid_dependency import pdl_here
from kernels.triton.mx_codec import KIND_OF_DTYPE, ROUNDING_CODE, format_constexprs
from kernels.triton.mx_quant import bits_view

# A few rows (a decode step's activation, M <= SMALL_ROWS): one row a program. The general tile
# (16 x 256, 4 warps) gives each thread 32 elements of which, at M = 1, 30 are masked rows'; the
# QDQ then runs ~640 dependent instructions a thread before the GEMM may start (W4A4 paid 2.4 /
# 3.4 us over W4A16 at M = 1 / 16 on 8192^2, H100 2026-12-05, with PDL not hiding it). A 1 x 256
# tile gives each thread 2 elements and M x 32 programs. Written 2026-12-05 without a GPU
# (interpreter: same bits, tests/kernels/triton/test_triton_quant.py); SMALL_ROWS_VERIFIED is
# switched on once its GPU test passes in a whole-suite run and tools/bench_pdl.py times W4A4
# nearer W4A16 with it (the interpreter takes the tile whenever the gate is on). The second
# holds (H100 2026-12-05 14:33 UTC, 8192^2, W4A4 / W4A16 graph 1.14 / 1.19 / 1.16x -> 1.11 /
# 1.12 / 1.13x at M = 1 / 16 / 64, docs/benchmarks.md part 23; H200 2026-12-05 15:17 UTC
# 1.14 / 1.16 / 1.15x -> 1.10 / 1.11 / 1.12x, part 24) and the whole suite ran green on the
# H200 at 3cee91f (2026-12-05 15:11 UTC, docs/verification.md): on since.
SMALL_ROWS = 64
SMALL_ROWS_TILE = {"BLOCK_R": 1, "BLOCK_K": 256}
SMALL_ROWS_VERIFIED = True
# ... wider along K where 1 x 256 programs would queue past one wave: 64 rows of K = 28672 are
# 7168 programs of 2 elements a thread, ~3.4 waves of latency-bound programs (H100 2026-12-05,
# benchmarks part 33: W4A4 ran 8.9 us past W4A16 at M = 64 on 8192 x 28672, 2.4 on 8192^2,
# whose 2048 programs fit one). The narrowest of SMALL_ROWS_WIDTHS that keeps rows x
# ceil(K / width) <= SMALL_ROWS_PROGRAMS (about one wave: 132 SMs x 16 four-warp programs), up
# to SMALL_ROWS_WIDE rows; past both, the general tile. Written 2026-12-05 (the interpreter
# checks each width's bits); gated off until its GPU test (the same test) passes in a
# whole-suite run and tools/bench_pdl.py --compare qdq times W*A* nearer W*A16 with it. Both
# hold: the test passed in the whole-suite run of 294baa0 (H100, 2026-12-07 07:38 UTC), and
# W4A4 / W4A16 graph went 1.08 -> 1.04 / 1.01 / 1.01x at M = 64 / 128 / 256 on 8192 x 28672,
# 1.15 -> 1.11x at M = 128 on 8192^2, within 0.01x elsewhere (H100 07:40 UTC, bench_pdl
# --compare qdq, docs/benchmarks.md part 37): on since.
SMALL_ROWS_WIDE = 256
SMALL_ROWS_WIDTHS = (256, 512, 1024, 2048)
SMALL_ROWS_PROGRAMS = 2048
SMALL_ROWS_WIDE_VERIFIED = True


def small_rows_tile(r: int, k: int) -> Optional[dict]:
    """The one-row-a-program tile for r rows of K (the gates and limits above), or None (the
    general tile)."""
    if not SMALL_ROWS_VERIFIED:
        return None
    if not SMALL_ROWS_WIDE_VERIFIED:
        return SMALL_ROWS_TILE if r <= SMALL_ROWS else None
    if r > SMALL_ROWS_WIDE:
        return None
    width = next((w for w in SMALL_ROWS_WIDTHS if r * -(-k // w) <= SMALL_ROWS_PROGRAMS), None)
    return None if width is None else {"BLOCK_R": 1, "BLOCK_K": width}


class QdqPlan:
    """`qdq` for one (format, rounding, x dtype, K) with its checks and constants done once: a
    call is an output allocation and one direct launch (the linear kernels' activation QDQ,
    where the host time of a call is the budget). With `keep_launches` (a plan that lives as
    long as its layer), a call after the first with the same rows and row stride on a stream
    launches through a `launcher.Bound` (x and out the only arguments that change)."""

    _FIRST_TAIL = "IN_KIND"  # the kernel's first argument past (x, out, R, K, stride_x / _o)

    def __init__(self, fmt: ElemFormat | str, rounding: str, dtype: torch.dtype, k: int,
                 keep_launches: bool = False):
        fmt = mx_quant._format(fmt)
        self.tile = mx_quant._tile("qdq", 0)
        self.consts = format_constexprs(fmt)
        self.consts.update(IN_KIND=KIND_OF_DTYPE[dtype],
                           ROUNDING=ROUNDING_CODE[check_rounding(rounding)],
                           HW_CAST=not mx_quant._INTERPRETED,
                           TRIGGER=pdl_here(mx_quant._INTERPRETED))
        self.k = k
        self._launches: dict[tuple, tuple] = {}  # (BLOCK_R, BLOCK_K) -> (tile, tail, key)
        self.fast: Optional[dict] = {} if keep_launches and not mx_quant._INTERPRETED else None

    @staticmethod
    def kernel():
        """The QDQ kernel this plan launches (its arguments: x, out, R, K, stride_x, stride_o,
        then the plan's tail)."""
        return mx_quant._qdq_kernel

    def _key_of(self, tail: tuple) -> tuple:
        """The part of the launch key the tail decides (its values: all constexprs)."""
        return tail

    def launch_consts(self, r: int) -> tuple[dict, tuple, int]:
        """(tile, the kernel's arguments past the first six, launch key) for r rows: the general
        tile, or a one-row-a-program tile for a few rows (`small_rows_tile`)."""
        tile = small_rows_tile(r, self.k) or self.tile
        got = self._launches.get((tile["BLOCK_R"], tile["BLOCK_K"]))
        if got is None:
            names = self.kernel().arg_names
            consts = dict(self.consts, **tile)
            tail = tuple(consts[name] for name in names[names.index(self._FIRST_TAIL):])
            got = self._launches[(tile["BLOCK_R"], tile["BLOCK_K"])] = (
                tile, tail, launcher.intern((self._key_of(tail), self.k, self.k % 16 == 0)))
        return got

    def __call__(self, x2d: torch.Tensor) -> torch.Tensor:
        """x2d [R, K] (unit stride along K, the plan's dtype: the caller checked) -> QDQ(x2d)."""
        r, k = x2d.shape
        out = torch.empty((r, k), dtype=x2d.dtype, device=x2d.device)
        if r and k:
            self._into(x2d, out, None if self.fast is None else
                       launcher.current_stream(x2d.get_device()))
        return out

    def into_scratch(self, x2d: torch.Tensor, stream: object) -> torch.Tensor:
        """QDQ(x2d) written into `stream`'s scratch rows (`scratch`), for a caller whose next
        kernel on that stream reads it and nothing later (a linear layer's activation): one
        allocation less a call. Where there is no such stream (None: launch hooks set, another
        device) or a CUDA graph is being captured, a fresh tensor as `__call__`."""
        r, k = x2d.shape
        if stream is None or self.fast is None or not (r and k) or \
                torch.cuda.is_current_stream_capturing():
            return self(x2d)
        out = scratch(stream, r, k, x2d.dtype, x2d.device)
        self._into(x2d, out, stream)
        return out

    def _into(self, x2d: torch.Tensor, out: torch.Tensor, stream: object) -> None:
        """One launch: QDQ(x2d) into out (dense rows, x2d's shape); through the plan's `Bound`
        for (stream, rows, row stride) after the first."""
        r, k = x2d.shape
        sx = x2d.stride(0)
        fkey = None
        if stream is not None and x2d.data_ptr() % 16 == 0:
            if self.launch_bound(x2d.data_ptr(), r, sx, out, stream):
                return
            fkey = (stream, r, sx)
        tile, tail, key = self.launch_consts(r)
        grid = (-(-r // tile["BLOCK_R"]), -(-k // tile["BLOCK_K"]))
        xb, ob = bits_view(x2d), bits_view(out)
        args = (xb, ob, r, k, sx, k) + tail
        compiled = launcher.launch(self.kernel(),
                                   (key, launcher.aligned(xb), r == 1, r % 16 == 0, sx == 1,
                                    sx % 16 == 0), grid, args, num_warps=quant_tiles.GPU_WARPS,
                                   num_stages=3)
        if fkey is not None and compiled is not None:
            self.fast[fkey] = launcher.Bound(compiled, grid, args, (0, 1))

    def launch_bound(self, xptr: int, r: int, sx: int, out: torch.Tensor, stream: object) -> bool:
        """QDQ of the r rows at xptr (16-byte aligned, row stride sx) into out through the
        plan's Bound for (stream, r, sx); False where there is none yet (nothing launched)."""
        bound = self.fast.get((stream, r, sx)) if self.fast is not None else None
        if bound is None:
            return False
        bound(stream, (xptr, out.data_ptr()))
        return True


class Fp8StaticQdq(QdqPlan):
    """The static per-tensor fp8 QDQ of a layer's rows (`mx_tiles.fp8_static_qdq_kernel`) as a
    QdqPlan: the scale already on the weight's device (linear_tiles.prepare_tensors) is a fixed
    argument, so a call is one launch with no host copy of the scale and no sync, and a CUDA
    graph captures it (the dispatcher's torch cast copied a CPU scale in each call: capture
    failed, H200 2026-12-05, benchmarks part 24). With `keep_launches` (FP8_STATIC_BOUND_VERIFIED
    for a layer's) later calls go through a Bound and the stream's scratch rows, and the eager
    path serves the layer (eager_path), as for the MX keys: on an H100 at M = 1 the layer's host
    time was 84 us a call without them, 27 us for W4A16 through the eager path (part 25)."""

    _FIRST_TAIL = "s_ptr"

    def __init__(self, scale: torch.Tensor, consts: dict, dtype: torch.dtype, k: int,
                 keep_launches: bool = False):
        self.tile = mx_quant._tile("qdq", 0)
        self.consts = dict(s_ptr=scale, IN_KIND=KIND_OF_DTYPE[dtype],
                           HW_CAST=not mx_quant._INTERPRETED,
                           **{n: consts[n] for n in ("A_MBITS", "A_BIAS", "A_MAX_NORMAL",
                                                     "A_IS_INT")})
        self.scale, self.k = scale, k
        self._launches: dict[tuple, tuple] = {}
        self.fast: Optional[dict] = {} if keep_launches and not mx_quant._INTERPRETED else None

    @staticmethod
    def kernel():
        return mx_tiles.fp8_static_qdq_kernel

    def _key_of(self, tail: tuple) -> tuple:
        """The scale (tail[0]) by its alignment (a fresh 4-byte tensor: 16-byte aligned), not
        by identity: one specialization serves every layer."""
        return (launcher.aligned(tail[0]),) + tail[1:]


# The eager path's Bound launches of Fp8StaticQdq (written 2026-12-05 without a GPU; the same
# Bound / scratch code as the MX keys' QdqPlan, another kernel; K is whole 32-element blocks as
# theirs, so the launch key's K facts hold): on once its GPU test (test_linear_wgmma's
# test_a_static_fp8_activation_layer_replays_in_a_cuda_graph, kept=True) passes in a
# whole-suite run, and tools/bench_pdl.py --act fp8 times eager W4A8 faster with it.
FP8_STATIC_BOUND_VERIFIED = True


# A stream's scratch rows, a host thread's own: (flat buffer, {(rows, K, dtype): its [rows, K]
# view}). Kernels of one stream run in order, so a buffer that one kernel writes and the next
# reads serves every layer one thread runs on the stream; grown (the views rebuilt), never
# shared across streams or threads: two threads on one stream interleave their launches (A's
# QDQ, B's QDQ, A's GEMM, B's GEMM), and one buffer would hand A's GEMM B's rows (H200,
# 2026-12-03: tests/kernels/test_concurrency.py caught it). Thread-local, so a finished
# thread's buffers go with it (freed in its stream's order by the caching allocator).
_SCRATCH = threading.local()


def scratch(stream: object, r: int, k: int, dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """[r, k] rows of `dtype` in this thread's scratch of `stream` on `device` (contents
    undefined): the same memory on every call of the thread on the stream, so it holds only
    until the thread's next use of the stream."""
    mine = getattr(_SCRATCH, "held", None)
    if mine is None:
        mine = _SCRATCH.held = {}
    key = (device, stream)
    held = mine.get(key)
    view = None if held is None else held[1].get((r, k, dtype))
    if view is not None:
        return view
    need = r * k * dtype.itemsize
    if held is None or held[0].numel() < need:
        held = mine[key] = (torch.empty(max(need, 1 << 16), dtype=torch.uint8,
                                        device=device), {})
    view = held[1][(r, k, dtype)] = held[0][:need].view(dtype).view(r, k)
    return view


__all__ = ["Fp8StaticQdq", "QdqPlan", "scratch", "small_rows_tile"]
