"""Per-tensor fp8 E4M3 fake quantization with a static fp32 scale (the `*_a_fp8` activations)."""
from __future__ import annotations

import torch
from torch import Tensor

FP8_E4M3_MAX = 448.0


def fp8_tensor_qdq(x: Tensor, scale: Tensor) -> Tensor:
    """x / scale, saturated to +-448, rounded to E4M3 (RNE), times scale; x's dtype.

    NaN stays NaN; +-Inf saturates like any value beyond the range (torch's E4M3 cast would
    turn it into NaN, so clamp first).
    """
    scale = scale.to(device=x.device, dtype=torch.float32)
    y = torch.clamp(x.float() / scale, -FP8_E4M3_MAX, FP8_E4M3_MAX)
    y = y.to(torch.float8_e4m3fn).float() * scale
    return y.to(x.dtype)


def check_act_scale(scale: object) -> Tensor:
    """A valid static per-tensor scale as a 0-dim fp32 tensor (checked once, at preparation)."""
    t = torch.as_tensor(scale, dtype=torch.float32)
    if t.numel() != 1:
        raise ValueError(
            f"a per-tensor activation scale has one element, got shape {tuple(t.shape)}; "
            "pass the checkpoint's input_scale for this layer"
        )
    value = float(t.reshape(()))
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"activation scale must be finite and > 0, got {value}")
    return t.reshape(())
