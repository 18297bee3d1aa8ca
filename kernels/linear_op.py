"""`ocp_mx::linear`: an MX linear layer as one torch.library custom op, so `torch.compile`
traces models of MX layers without graph breaks.

Why a handle: a kernel and its PreparedWeight (an MXTensor, a cache of kernel-derived tensors,
Python objects) are not types an op schema can carry. The op takes the weight's code and scale
tensors (so the compiler sees what the output depends on) plus an int `handle`, a key into this
module's table of (kernel, prepared) pairs. A layer registers its pair once
(`register_prepared`), swaps it in place when it re-prepares (`update_prepared`: the handle, a
constant in compiled graphs, stays the same, so nothing recompiles) and releases it when it dies
(`release`, e.g. from a weakref.finalize).

Why `mx_linear` and not the op everywhere: custom-op dispatch costs host time on every call.
Eager inference calls `kernel.apply` directly; code being traced by torch.compile / export, and
eager calls autograd records (an input that requires grad, grad mode on), go through
`torch.ops.ocp_mx.linear`: its formula gives every kernel the same gradients, where a Triton
kernel's output alone has no grad_fn (the input's gradient would be silently missing).

Gradients (`register_autograd`): x gets one through the dequantized weight for weight-only
layers, none through an activation QDQ (piecewise constant); the bias gets the summed output grad.

Limits: the handle is process-local, so a graph exported with it (torch.export) runs only in the
process whose layers registered it. Under CUDA graphs (mode="reduce-overhead") the op's host
work runs only at capture: a replay keeps reading the tensors captured then, so re-prepare
(`update_prepared`) before compiling, or reset the compiled model after.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.mx import mx_dequantize
from kernels.op_handles import HandleTable, UnknownHandleError, takes_op
from kernels.spec.contract import MX_BLOCK

_TABLE = HandleTable("ocp_mx::linear", "kernels.linear_op.register_prepared")


def register_prepared(kernel: LinearKernel, prepared: PreparedWeight) -> int:
    """A new handle naming (kernel, prepared) for `ocp_mx::linear`; `release` it when done."""
    return _TABLE.register((kernel, prepared))


def update_prepared(handle: int, kernel: LinearKernel, prepared: PreparedWeight) -> None:
    """Point an existing handle at a re-prepared weight (or a re-resolved kernel)."""
    _TABLE.update(handle, (kernel, prepared))


def release(handle: int) -> None:
    """Forget `handle` (no error when it is already gone: finalizers may run late)."""
    _TABLE.release(handle)


def live_handles() -> int:
    """How many handles are registered (the tests' leak check)."""
    return len(_TABLE)


def lookup(handle: int) -> tuple[LinearKernel, PreparedWeight]:
    """The (kernel, prepared) pair of `handle`; a one-line UnknownHandleError if there is none."""
    return _TABLE.lookup(handle)


def _shares_storage(out: Tensor, inputs: tuple[Optional[Tensor], ...]) -> bool:
    ptr = out.untyped_storage().data_ptr()
    return any(t is not None and t.untyped_storage().data_ptr() == ptr for t in inputs)


@torch.library.custom_op("ocp_mx::linear", mutates_args=())
def linear(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
           handle: int) -> Tensor:
    """y = kernel(x, prepared weight, bias) for the pair `handle` names. `weight` / `weight_scale`
    are the prepared MX weight's codes and E8M0 scales: inputs for the compiler's dependency
    tracking; the kernel reads them (and its cache) through the registered PreparedWeight."""
    kernel, prepared = lookup(handle)
    out = kernel.apply(x, prepared, bias)
    if _shares_storage(out, (x, weight, weight_scale, bias)):  # a custom op may not alias
        out = out.clone()
    return out


@linear.register_fake
def _linear_fake(x: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor],
                 handle: int) -> Tensor:
    """[..., K] -> [..., N] in x's dtype (every linear kernel's output dtype). The packed codes
    keep one row per output feature in every layout, so N = weight.shape[0]; K is the scales'
    blocks x 32."""
    lookup(handle)  # an unknown handle fails at trace time, not at the first real call
    torch._check(x.shape[-1] == weight_scale.shape[-1] * MX_BLOCK,
                 lambda: f"ocp_mx::linear: input's last dimension {x.shape[-1]} is not the "
                         f"weight's in_features {weight_scale.shape[-1] * MX_BLOCK}")
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


@torch.library.custom_op("ocp_mx::dequantize_weight", mutates_args=())
def dequantize_weight(weight: Tensor, weight_scale: Tensor, handle: int,
                      dtype: torch.dtype) -> Tensor:
    """The prepared weight's values [N, K] in `dtype`: what ocp_mx::linear's backward multiplies
    by (an op, so the traced backward does not trace the qdq kernel chooser)."""
    return mx_dequantize(lookup(handle)[1].weight, dtype)


@dequantize_weight.register_fake
def _dequantize_weight_fake(weight: Tensor, weight_scale: Tensor, handle: int,
                            dtype: torch.dtype) -> Tensor:
    return weight.new_empty((weight.shape[0], weight_scale.shape[-1] * MX_BLOCK), dtype=dtype)


def _setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, weight, weight_scale, bias, handle = inputs
    ctx.save_for_backward(weight, weight_scale)
    ctx.handle, ctx.x_dtype = handle, x.dtype
    ctx.bias_dtype = None if bias is None else bias.dtype


def _backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], None, None, Optional[Tensor],
                                                None]:
    """The layer's math, y = qdq(x) @ dequant(W).T + b, as the eager kernels give it: weight-only
    layers pass grad to x through the dequantized weight (as F.linear on it does; adapters train
    on frozen MX layers); an activation QDQ is piecewise constant, so x gets none (the eager
    reference QDQ gives none either); the bias gets the summed output grad."""
    weight, weight_scale = ctx.saved_tensors
    grad_x = grad_bias = None
    if ctx.needs_input_grad[0] and lookup(ctx.handle)[1].contract.activation is None:
        w = torch.ops.ocp_mx.dequantize_weight(weight, weight_scale, ctx.handle, ctx.x_dtype)
        grad_x = torch.matmul(grad, w)
    if ctx.needs_input_grad[3]:
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0).to(ctx.bias_dtype)
    return grad_x, None, None, grad_bias, None


linear.register_autograd(_backward, setup_context=_setup_context)


def mx_linear(x: Tensor, kernel: LinearKernel, prepared: PreparedWeight, bias: Optional[Tensor],
              handle: int) -> Tensor:
    """The MX linear layer: `kernel.apply` directly in eager inference (no op dispatch: the
    per-call host cost matters), `torch.ops.ocp_mx.linear` while torch.compile / export traces
    and where autograd records the call (`takes_op`)."""
    if takes_op(x, bias):
        mx = prepared.weight
        return torch.ops.ocp_mx.linear(x, mx.data, mx.scales, bias, handle)
    return kernel.apply(x, prepared, bias)


__all__ = ["UnknownHandleError", "dequantize_weight", "linear", "live_handles", "lookup",
           "mx_linear", "register_prepared", "release", "update_prepared"]
