"""`ocp_mx::grouped_experts`: an MX MoE layer's experts as one torch.library custom op, so
`torch.compile(fullgraph=True)` traces models of MXGroupedExperts as it does MXLinear
(kernels/linear_op.py).

The routing (top-k and softmax of the router logits) stays in the traced graph as torch ops; the
op takes the tokens, the routing, the layer's code / scale / input-scale tensors (what the output
depends on, for the compiler) and an int handle naming the live layer (kernels.op_handles). Its
body runs the layer's eager path: the kernel resolve chose for where the tensors are, the
activation QDQ, and the expert-id range check that traced code cannot do without a host sync.

Eager inference does not go through the op (its dispatch costs host time on every call); eager
calls that autograd records do (kernels.op_handles.takes_op), so every kernel gives the same
gradients: its autograd formula is the reference kernel's, in an op of its own
(`ocp_mx::grouped_experts_backward`) — the tokens' gradient (none through an activation QDQ,
which is piecewise constant) and the routing weights' (so the router trains). The table keeps a
weak reference: the layer's handle dies with it.
"""
from __future__ import annotations

import weakref
from typing import Any, Optional

import torch
from torch import Tensor

from kernels.op_handles import HandleTable
from kernels.reference.moe import grouped_experts_reference_grads

_TABLE = HandleTable("ocp_mx::grouped_experts", "kernels.moe_op.register_layer")


def register_layer(layer: Any) -> int:
    """A new handle naming `layer` (weakly) for `ocp_mx::grouped_experts`; released when the
    layer is garbage collected."""
    handle = _TABLE.register(weakref.ref(layer))
    weakref.finalize(layer, _TABLE.release, handle)
    return handle


def live_handles() -> int:
    """How many layers are registered (the tests' leak check)."""
    return len(_TABLE)


def lookup(handle: int) -> Any:
    """The live layer of `handle`; a one-line UnknownHandleError if there is none."""
    layer = _TABLE.lookup(handle)()
    if layer is None:  # collected, its finalizer not yet run
        _TABLE.release(handle)
        raise _TABLE.unknown(handle)
    return layer


@torch.library.custom_op("ocp_mx::grouped_experts", mutates_args=())
def grouped_experts(x: Tensor, weight: Tensor, weight_scale: Tensor, act_scale: Optional[Tensor],
                    topk_ids: Tensor, topk_weights: Tensor, check_range: bool, handle: int,
                    out_dtype: Optional[torch.dtype]) -> Tensor:
    """[T, K] tokens and their routing [T, top_k] -> [T, N] in out_dtype (None: x's), run by the
    layer `handle` names; `weight` / `weight_scale` / `act_scale` are that layer's buffers
    (inputs for the compiler's dependency tracking). `check_range`: the expert ids came from
    the caller (forward_routed), so their range is checked here, on the real values."""
    return lookup(handle).run_routed(x, topk_ids, topk_weights, out_dtype,
                                     check_range=check_range)


@grouped_experts.register_fake
def _grouped_experts_fake(x: Tensor, weight: Tensor, weight_scale: Tensor,
                          act_scale: Optional[Tensor], topk_ids: Tensor, topk_weights: Tensor,
                          check_range: bool, handle: int,
                          out_dtype: Optional[torch.dtype]) -> Tensor:
    """[T, N] (N = the codes' rows an expert, weight [E, N, K-bytes]) in out_dtype or x's."""
    lookup(handle)  # an unknown handle fails at trace time, not at the first real call
    torch._check(topk_ids.shape[0] == x.shape[0],
                 lambda: f"ocp_mx::grouped_experts: routing for {topk_ids.shape[0]} tokens, "
                         f"x has {x.shape[0]}")
    return x.new_empty((x.shape[0], weight.shape[1]), dtype=out_dtype or x.dtype)


@torch.library.custom_op("ocp_mx::grouped_experts_backward", mutates_args=())
def grouped_experts_backward(grad: Tensor, x: Tensor, weight: Tensor, weight_scale: Tensor,
                             act_scale: Optional[Tensor], topk_ids: Tensor, topk_weights: Tensor,
                             handle: int, need_x: bool, need_w: bool) -> tuple[Tensor, Tensor]:
    """(d/dx, d/d routing weights) of the layer `handle` names, by the reference kernel's
    formula (kernels.reference.moe.grouped_experts_reference_grads); d/dx is zeros through an
    activation QDQ, and either is zeros, not computed, when autograd did not ask for it
    (`need_x` / `need_w` False; the autograd formula returns None there). An op of its own,
    so a traced backward (aot_eager, inductor) does not trace the layer's Python."""
    layer = lookup(handle)
    grad_x, grad_w = grouped_experts_reference_grads(
        grad, x, layer.weight, layer.contract.activation, layer.act_scale, topk_ids, topk_weights,
        need_x=need_x, need_w=need_w)
    return (torch.zeros_like(x) if grad_x is None else grad_x,
            torch.zeros_like(topk_weights) if grad_w is None else grad_w)


@grouped_experts_backward.register_fake
def _grouped_experts_backward_fake(grad: Tensor, x: Tensor, weight: Tensor, weight_scale: Tensor,
                                   act_scale: Optional[Tensor], topk_ids: Tensor,
                                   topk_weights: Tensor, handle: int,
                                   need_x: bool, need_w: bool) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape), topk_weights.new_empty(topk_weights.shape)


def _setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, weight, weight_scale, act_scale, topk_ids, topk_weights, _, handle, _ = inputs
    ctx.save_for_backward(x, weight, weight_scale, act_scale, topk_ids, topk_weights)
    ctx.handle = handle
    ctx.through_qdq = lookup(handle).contract.activation is not None


def _backward(ctx: Any, grad: Tensor) -> tuple:
    """The tokens' gradient (weight-only layers) and the routing weights' (so the router's
    logits train); none for the codes, scales, ids or the handle."""
    x, weight, weight_scale, act_scale, ids, weights = ctx.saved_tensors
    keep_x = ctx.needs_input_grad[0] and not ctx.through_qdq
    keep_w = ctx.needs_input_grad[5]
    if not (keep_x or keep_w):  # only the tokens asked, through a QDQ: no gradient to compute
        return (None,) * 9
    grad_x, grad_w = torch.ops.ocp_mx.grouped_experts_backward(
        grad, x, weight, weight_scale, act_scale, ids, weights, ctx.handle, keep_x, keep_w)
    return (grad_x if keep_x else None, None, None, None, None,
            grad_w if keep_w else None, None, None, None)


grouped_experts.register_autograd(_backward, setup_context=_setup_context)


__all__ = ["grouped_experts", "grouped_experts_backward", "live_handles", "lookup",
           "register_layer"]
