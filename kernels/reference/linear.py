"""Pure-torch linear kernels: the emulation oracle and the dequantize-once weight-only path."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.mx import check_device, mx_dequantize


_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_input(x: Tensor, prepared: PreparedWeight, kernel: str) -> None:
    """x [..., in_features], float32 / bfloat16 / float16, on the weight's (real) device."""
    if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != prepared.in_features:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{kernel}: input shape {got} does not end in in_features="
                         f"{prepared.in_features}; pass x of shape [..., {prepared.in_features}]")
    if x.dtype not in _X_DTYPES:
        raise ValueError(f"{kernel}: input dtype {x.dtype} is not float32, bfloat16 or float16; "
                         "cast x first (e.g. x.float())")
    check_device(x.device, f"{kernel}: input")
    if x.device != prepared.weight.data.device:
        raise ValueError(f"{kernel}: input on {x.device} but weight on "
                         f"{prepared.weight.data.device}; move them to one device")


def check_bias(bias: Tensor | None, n: int, device: torch.device, kernel: str) -> None:
    """bias: None, or a float32 / bfloat16 / float16 tensor of shape (n,) on `device` (a bias
    of another shape would broadcast silently in F.linear)."""
    if bias is None:
        return
    if not isinstance(bias, Tensor) or tuple(bias.shape) != (n,) or bias.dtype not in _X_DTYPES \
            or bias.device != device:
        got = (f"{bias.dtype} {tuple(bias.shape)} on {bias.device}" if isinstance(bias, Tensor)
               else type(bias).__name__)
        raise ValueError(f"{kernel}: bias must be a float tensor of shape ({n},) (out_features; "
                         f"float32, bfloat16 or float16) on {device}, got {got}")


def _linear_2d(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """F.linear on x as contiguous [M, K] rows: torch's matmul picks its kernel (and so its
    summation order) from the input's layout and rank, so a transposed or 3-D view would
    otherwise give other bits than the same values in contiguous 2-D rows."""
    out = F.linear(x.reshape(-1, x.shape[-1]).contiguous(), w, b)
    return out.view(*x.shape[:-1], w.shape[0])


class ReferenceEmulationLinear(LinearKernel):
    """QDQ the activation through the dispatcher, dequantize the weight, F.linear in fp32.

    The oracle every other linear kernel is compared with.
    """

    name = "reference-emulation"

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, self.name)
        check_bias(bias, prepared.out_features, x.device, self.name)
        xq = self.qdq_activation(x, prepared, backend="reference-qdq")
        w = mx_dequantize(prepared.weight, torch.float32, backend="reference-qdq")
        b = None if bias is None else bias.float()
        return _linear_2d(xq.float(), w, b).to(x.dtype)


class DequantWeightOnlyLinear(LinearKernel):
    """Weight-only: dequantize the weight once per activation dtype, then F.linear.

    Declared for activation `none` only, so a W4A4 contract can never resolve here.
    """

    name = "dequant-weight-only"

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, self.name)
        check_bias(bias, prepared.out_features, x.device, self.name)
        if prepared.contract.activation is not None:  # guarded by resolve; never pass-through
            raise ValueError(f"{self.name} is weight-only but the contract quantizes activations "
                             f"({prepared.contract.activation}); resolve the scheme again")
        key = f"w_{x.dtype}"
        w = prepared.cache.get(key)
        if w is None:
            w = prepared.cache.setdefault(key, mx_dequantize(prepared.weight, x.dtype))
        return _linear_2d(x, w, None if bias is None else bias.to(x.dtype))
