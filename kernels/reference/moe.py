"""Grouped MoE experts in pure torch: top-k routing and the oracle every MoE kernel matches.

One expert here is ONE linear layer [N, K] (an MX weight). A SwiGLU expert MLP is three of them
(gate and up on x, down on silu(gate) * up), each a grouped-experts call of its own; this module
does not build the MLP.

Numerics (the contract the Triton kernel keeps, see kernels/triton/moe_grouped.py):
  xq   = dispatcher QDQ of x for the activation key (kernels.dispatch.activation_qdq; the qdq
         kernel the caller resolved, reference-qdq by default), in x's dtype; weight-only (key
         None) leaves x as it is;
  y_k  = F.linear(xq.float(), dequantized expert weight in fp32)     (fp32, per routed slot k)
  out  = (((w_0 * y_0) + w_1 * y_1) + ...)  in fp32, slots in order k = 0, 1, ..., top_k - 1
  then ONE cast to the output dtype (x's dtype by default, RNE).
The routing weights w_k are fp32. Keeping every step in fp32 until the single final cast is
what lets another implementation match this one up to the matmul's summation order.

The dispatcher is looked up through the module (`dispatch.activation_qdq`) at call time, so a
key it does not know raises UnknownActivationKey here too — never a pass-through.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels import dispatch
from kernels.mx import MXTensor, check_device, mx_dequantize
from kernels.spec.contract import QuantKey

_WHERE = "kernels.reference.moe"


def route(router_logits: Tensor, top_k: int, *, renormalize: bool = True) -> tuple[Tensor, Tensor]:
    """(topk_ids int64 [T, top_k], topk_weights fp32 [T, top_k]) from router logits [T, E].

    The experts are the top_k largest logits (torch.topk, ids in descending logit order).
    renormalize=True  (Mixtral; Qwen-MoE with norm_topk_prob): softmax over the top_k logits
                      only, so each token's weights sum to 1 (= top-k of the full softmax,
                      divided by their sum).
    renormalize=False (e.g. Qwen-MoE without norm_topk_prob): the full softmax over all E
                      logits, read at the top_k experts (weights sum to <= 1).
    Both in fp32 whatever the logits' dtype.
    """
    if not isinstance(router_logits, Tensor) or router_logits.dim() != 2:
        got = tuple(router_logits.shape) if isinstance(router_logits, Tensor) else \
            type(router_logits).__name__
        raise ValueError(f"{_WHERE}.route: router_logits must be 2-D [tokens, experts], got {got}")
    if not router_logits.is_floating_point():
        raise ValueError(f"{_WHERE}.route: router_logits has dtype {router_logits.dtype}; pass "
                         "float logits (float32, bfloat16 or float16)")
    num_experts = router_logits.shape[1]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"{_WHERE}.route: top_k={top_k!r} must be an int in [1, {num_experts}] "
                         f"(the number of experts)")
    logits = router_logits.float()
    if renormalize:
        top_logits, ids = torch.topk(logits, top_k, dim=-1)
        weights = torch.softmax(top_logits, dim=-1)
    else:
        probs = torch.softmax(logits, dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
    return ids, weights


def check_routing(topk_ids: Tensor, topk_weights: Tensor, tokens: int, num_experts: int,
                  *, check_range: bool = True) -> tuple[Tensor, Tensor]:
    """Validated (int64 ids, fp32 weights), both [tokens, top_k]; one-line ValueErrors.

    check_range reads the ids' min / max (a device sync on a GPU); skip it only for ids that
    `route` made."""
    for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if not isinstance(t, Tensor) or t.dim() != 2 or t.shape[0] != tokens:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{_WHERE}: {name} must be 2-D [tokens={tokens}, top_k], got {got}")
    if topk_ids.shape != topk_weights.shape:
        raise ValueError(f"{_WHERE}: topk_ids {tuple(topk_ids.shape)} and topk_weights "
                         f"{tuple(topk_weights.shape)} must have the same shape [tokens, top_k]")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype.is_complex or \
            topk_ids.dtype == torch.bool:
        raise ValueError(f"{_WHERE}: topk_ids has dtype {topk_ids.dtype}; pass integer expert ids "
                         "(torch.int64 or torch.int32)")
    if not topk_weights.is_floating_point():
        raise ValueError(f"{_WHERE}: topk_weights has dtype {topk_weights.dtype}; pass float "
                         "routing weights")
    if topk_ids.shape[1] < 1 or topk_ids.shape[1] > num_experts:
        raise ValueError(f"{_WHERE}: top_k={topk_ids.shape[1]} must be in [1, {num_experts}] "
                         "(the number of experts)")
    for name, t in (("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        check_device(t.device, f"{_WHERE}: {name}")
    if check_range and topk_ids.numel():
        lo, hi = int(topk_ids.min()), int(topk_ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"{_WHERE}: topk_ids hold expert {lo if lo < 0 else hi}, outside "
                             f"[0, {num_experts - 1}] ({num_experts} experts)")
    return topk_ids.long(), topk_weights.float()


def combine_slots(weighted: Tensor) -> Tensor:
    """[T, top_k, N] fp32 weighted expert outputs -> [T, N]: slots added in order k = 0, 1, ...

    A fixed left-to-right order (not torch.sum, whose order may change with shapes / builds),
    shared by every backend, so the combine never adds a difference between them."""
    out = weighted[:, 0].clone()
    for k in range(1, weighted.shape[1]):
        out += weighted[:, k]
    return out


def grouped_experts_reference(x: Tensor, weight: MXTensor, activation: QuantKey | None,
                              act_scale: Tensor | None, topk_ids: Tensor, topk_weights: Tensor,
                              out_dtype: torch.dtype | None = None, *,
                              qdq: str = "reference-qdq") -> Tensor:
    """x [T, K], weight MXTensor [E, N, K], routing [T, top_k] (validated) -> [T, N] out_dtype
    (default x's dtype). out_dtype float32 gives the fp32 result before the final cast.
    `qdq`: the qdq kernel that quantizes the activation (kernels.moe passes the layer's
    resolved one; every qdq kernel gives the same bits)."""
    tokens = x.shape[0]
    num_experts, n, _ = weight.shape
    top_k = topk_ids.shape[1]
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if tokens == 0:
        return torch.empty((0, n), dtype=out_dtype, device=x.device)
    xq, w = _fp32_operands(x, weight, activation, act_scale, qdq)
    weighted = torch.empty((tokens, top_k, n), dtype=torch.float32, device=x.device)
    for k in range(top_k):
        y = torch.empty((tokens, n), dtype=torch.float32, device=x.device)
        for e, rows in _expert_rows(topk_ids[:, k], num_experts):
            y[rows] = F.linear(xq[rows], w[e])
        weighted[:, k] = topk_weights[:, k, None] * y
    return combine_slots(weighted).to(out_dtype)


def grouped_experts_reference_grads(grad: Tensor, x: Tensor, weight: MXTensor,
                                    activation: QuantKey | None, act_scale: Tensor | None,
                                    topk_ids: Tensor, topk_weights: Tensor,
                                    qdq: str = "reference-qdq",
                                    need_x: bool = True,
                                    need_w: bool = True) -> tuple[Tensor | None, Tensor | None]:
    """The gradients of `grouped_experts_reference`'s output (grad [T, N]) with respect to the
    tokens and the routing weights, by the same per-slot, per-expert loop in fp32:
        d/dw[t, k] = <grad[t], QDQ(x[t]) @ W[ids[t, k]].T>
        d/dx[t]    = sum_k w[t, k] * grad[t] @ W[ids[t, k]]   (weight-only; None through an
                                                                activation QDQ: piecewise constant)
    Each token meets one expert a slot, so no row is written twice (no scatter-add: the sum
    over slots runs in order k = 0, 1, ..., deterministic). In x's / the weights' dtypes.
    need_x / need_w False skip d/dx / d/dw (None: autograd did not ask for it)."""
    tokens, top_k = topk_ids.shape
    xq, w = _fp32_operands(x, weight, activation, act_scale, qdq)
    g = grad.float()
    grad_w = torch.zeros((tokens, top_k), dtype=torch.float32, device=x.device) \
        if need_w else None
    grad_x = torch.zeros((tokens, x.shape[1]), dtype=torch.float32, device=x.device) \
        if activation is None and need_x else None
    for k in range(top_k):
        for e, rows in _expert_rows(topk_ids[:, k], weight.shape[0]):
            if grad_w is not None:
                grad_w[rows, k] = (g[rows] * F.linear(xq[rows], w[e])).sum(-1)
            if grad_x is not None:  # (rows distinct within a slot: slot k's term added once)
                grad_x[rows] += topk_weights[rows, k, None].float() * (g[rows] @ w[e])
    return (None if grad_x is None else grad_x.to(x.dtype),
            None if grad_w is None else grad_w.to(topk_weights.dtype))


def _fp32_operands(x: Tensor, weight: MXTensor, activation: QuantKey | None,
                   act_scale: Tensor | None, qdq: str) -> tuple[Tensor, Tensor]:
    """QDQ(x) (x itself for weight-only) and the dequantized experts [E, N, K], both fp32:
    what the forward and its gradients multiply."""
    xq = x if activation is None else dispatch.activation_qdq(activation, backend=qdq)(x, act_scale)
    return xq.float(), mx_dequantize(weight, torch.float32, backend="reference-qdq")


def _expert_rows(ids: Tensor, num_experts: int) -> Iterator[tuple[int, Tensor]]:
    """(expert, the rows whose id it is) for each expert one slot's ids [T] name: every token
    meets exactly one expert a slot, so the rows of different experts are disjoint."""
    for e in range(num_experts):
        rows = (ids == e).nonzero().squeeze(1)
        if rows.numel():
            yield e, rows


__all__ = ["check_routing", "combine_slots", "grouped_experts_reference",
           "grouped_experts_reference_grads", "route"]
