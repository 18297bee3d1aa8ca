"""Pure-torch linear kernels: the emulation oracle and the dequantize-once weight-only path."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from kernels.base import LinearKernel, PreparedWeight
from kernels.mx import mx_dequantize


def check_input(x: Tensor, prepared: PreparedWeight, kernel: str) -> None:
    if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != prepared.in_features:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{kernel}: input shape {got} does not end in in_features="
                         f"{prepared.in_features}")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"{kernel}: input dtype {x.dtype} is not float32, bfloat16 or float16")
    if x.device != prepared.weight.data.device:
        raise ValueError(f"{kernel}: input on {x.device} but weight on "
                         f"{prepared.weight.data.device}; move them to one device")


class ReferenceEmulationLinear(LinearKernel):
    """QDQ the activation through the dispatcher, dequantize the weight, F.linear in fp32.

    The oracle every other linear kernel is compared with.
    """

    name = "reference-emulation"

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, self.name)
        xq = self.qdq_activation(x, prepared, backend="reference")
        w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
        b = None if bias is None else bias.float()
        return F.linear(xq.float(), w, b).to(x.dtype)


class DequantWeightOnlyLinear(LinearKernel):
    """Weight-only: dequantize the weight once per activation dtype, then F.linear.

    Declared for activation `none` only, so a W4A4 contract can never resolve here.
    """

    name = "dequant-weight-only"

    def apply(self, x: Tensor, prepared: PreparedWeight, bias: Tensor | None = None) -> Tensor:
        check_input(x, prepared, self.name)
        if prepared.contract.activation is not None:  # guarded by resolve; never pass-through
            raise ValueError(f"{self.name} is weight-only but the contract quantizes activations "
                             f"({prepared.contract.activation}); resolve the scheme again")
        key = f"w_{x.dtype}"
        w = prepared.cache.get(key)
        if w is None:
            w = prepared.cache.setdefault(key, mx_dequantize(prepared.weight, x.dtype))
        return F.linear(x, w, None if bias is None else bias.to(x.dtype))
