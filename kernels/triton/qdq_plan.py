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
from kernels.triton import launcher, mx_quant
from kernels.triton.grid_dependency import pdl_here
from kernels.triton.mx_codec import KIND_OF_DTYPE, ROUNDING_CODE, format_constexprs
from kernels.triton.mx_quant import bits_view


class QdqPlan:
    """`qdq` for one (format, rounding, x dtype, K) with its checks and constants done once: a
    call is an output allocation and one direct launch (the linear kernels' activation QDQ,
    where the host time of a call is the budget). With `keep_launches` (a plan that lives as
    long as its layer), a call after the first with the same rows and row stride on a stream
    launches through a `launcher.Bound` (x and out the only arguments that change)."""

    def __init__(self, fmt: ElemFormat | str, rounding: str, dtype: torch.dtype, k: int,
                 keep_launches: bool = False):
        fmt = mx_quant._format(fmt)
        self.tile = mx_quant._tile("qdq", 0)
        consts = format_constexprs(fmt)
        consts.update(IN_KIND=KIND_OF_DTYPE[dtype],
                      ROUNDING=ROUNDING_CODE[check_rounding(rounding)],
                      HW_CAST=not mx_quant._INTERPRETED,
                      TRIGGER=pdl_here(mx_quant._INTERPRETED), **self.tile)
        names = mx_quant._qdq_kernel.arg_names
        self.tail = tuple(consts[name] for name in names[names.index("IN_KIND"):])
        self.key = launcher.intern((self.tail, k, k % 16 == 0))
        self.fast: Optional[dict] = {} if keep_launches and not mx_quant._INTERPRETED else None

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
        grid = (-(-r // self.tile["BLOCK_R"]), -(-k // self.tile["BLOCK_K"]))
        xb, ob = bits_view(x2d), bits_view(out)
        args = (xb, ob, r, k, sx, k) + self.tail
        compiled = launcher.launch(mx_quant._qdq_kernel,
                                   (self.key, launcher.aligned(xb), r == 1, r % 16 == 0, sx == 1,
                                    sx % 16 == 0), grid, args, num_warps=mx_quant.GPU_WARPS,
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


__all__ = ["QdqPlan", "scratch"]
