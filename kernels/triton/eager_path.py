"""The eager fast path of a planned wgmma linear call: for an input shape seen before, a call is
an output allocation and one or two `launcher.Bound` launches, with no reshape, view or plan
lookup between them, at any M (a Bound a (stream, M tiles): prefill's shapes too).

Why: in eager decoding (transformers' `generate`) a layer's host time is the step's bound once
the GPU's share is short: on the lent H200's host bf16 `F.linear` costs ~16 us a call, the MX
layer's general path 30-50 us (docs/benchmarks.md part 15), of which the launches are ~8 us
each; the rest is Python around them (reshape to 2-D and back, the plan key, strides, a
descriptor object). A `HotCall` is built by fused_linear after a general call it could serve
(the plan's Bound exists; no bias, the default output dtype and strategy; x contiguous) and is
keyed by (x.shape, x.dtype, x.device): the same plan, M, strides and output shape. It declines
(None: the general path runs) where its preconditions do not hold this call — another stream
with no Bound, x misaligned or not contiguous, a CUDA graph being captured with an activation
QDQ (the scratch rows are not the graph's) — so the general path stays the one reference.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from kernels.triton import launcher, qdq_plan
from kernels.triton.wgmma_config import WgmmaPlan
from kernels.triton.wgmma_tiles import XDesc

HOT_CALLS = 32  # input shapes kept a weight (an eager server sees a few M a layer; then reset)


class HotCall:
    """One (weight, input shape, dtype, device)'s eager launches (module docstring)."""

    __slots__ = ("plan", "qdq", "m", "k", "tiles", "out_shape", "dtype", "device", "index",
                 "tma")

    def __init__(self, plan: WgmmaPlan, qdq: Optional[qdq_plan.QdqPlan], x: Tensor) -> None:
        self.plan, self.qdq = plan, qdq
        self.k = plan.k
        self.m = x.numel() // plan.k
        self.tiles = -(-self.m // plan.cfg.block_m)  # the Bound's grid
        self.out_shape = (*x.shape[:-1], plan.n)
        self.dtype, self.device, self.index = x.dtype, x.device, plan.device
        self.tma = plan.cfg.tma_x

    def __call__(self, x: Tensor) -> Optional[Tensor]:
        """x (this key's shape, dtype and device) -> the layer's output, or None (declined)."""
        if x.data_ptr() % 16 or not x.is_contiguous():
            return None
        stream = launcher.current_stream(self.index)
        bound = self.plan.fast.get((stream, self.tiles))
        if bound is None:
            return None
        m, k = self.m, self.k
        out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)  # (before the
        src = x  # first launch: nothing but the second's arguments between the two)
        if self.qdq is not None:
            if torch.cuda.is_current_stream_capturing():
                return None
            src = qdq_plan.scratch(stream, m, k, self.dtype, self.device)
            if not self.qdq.launch_bound(x.data_ptr(), m, k, src, stream):
                return None
        bound(stream, (XDesc.rows(src, m, k) if self.tma else src.data_ptr(), out.data_ptr(), m, k,
                       self.plan.n))
        return out


def remember(hot: dict, plan: WgmmaPlan, qdq: object, x: Tensor) -> None:
    """Keep a HotCall for x's key in `hot` (a weight's), where the general call just made can
    be served by one: its plan has Bounds (a call after the first on a stream; the one of x's
    M tiles is looked up at the call), its QDQ (if any) is a QdqPlan, x is contiguous and
    whole rows of K."""
    if plan.fast and (qdq is None or isinstance(qdq, qdq_plan.QdqPlan)) and \
            x.is_contiguous() and x.dim() >= 2 and x.shape[-1] == plan.k and x.numel():
        if len(hot) >= HOT_CALLS:
            hot.clear()
        hot[(x.shape, x.dtype, x.device)] = HotCall(plan, qdq, x)


__all__ = ["HOT_CALLS", "HotCall", "remember"]
