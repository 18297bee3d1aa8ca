"""Checks of a linear kernel's bf16 output against reference-emulation, shared by the wgmma
kernels' GPU tests (one-partition and warp-specialized)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.base import load_kernel
from kernels.mx import mx_dequantize


def reference_bf16(x: torch.Tensor, prepared, bias=None) -> torch.Tensor:
    ref = load_kernel("reference-emulation")
    xq = ref.qdq_activation(x, prepared, backend="reference")
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq.float(), w, None if bias is None else bias.float())


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """bf16 output of an fp32 accumulator: NaN where the reference has NaN, else within one
    bf16 rounding plus summation order (relative to the row's size)."""
    got = got.float()
    fin = want.isfinite()
    if not (torch.equal(got.isnan(), want.isnan()) and torch.equal(got[want.isinf()],
                                                                  want[want.isinf()])):
        return False
    diff = (got - want).masked_fill(~fin, 0)
    scale = want.masked_fill(~fin, 0).abs().amax(dim=-1, keepdim=True).clamp_min(1e-30)
    return bool((diff.abs() / scale).max() <= 2.0 ** -7)


def special_rows(m: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """bf16 activations [m, k] on the GPU with a zero block and a subnormal block in row 0 and,
    from two rows on, an Inf in row 1 and a NaN near the end of the last row."""
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    x[0, :32] = 0.0
    x[0, 32:64] = 2.0 ** -130
    if m > 1:
        x[1, 5] = float("inf")
        x[-1, k - 3] = float("nan")
    return x
