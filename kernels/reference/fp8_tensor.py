"""Per-tensor fp8 E4M3 fake quantization with a static fp32 scale (the `*_a_fp8` activations)."""
from __future__ import annotations

import numbers

import torch
from torch import Tensor

from kernels.mx import check_device
from kernels.reference.mx import saturate

FP8_E4M3_MAX = 448.0
_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_values(t: object, what: str, dtypes: tuple, fix: str) -> None:
    """ValueError (one line) unless `t` is a tensor of one of `dtypes` holding values (not meta)."""
    if not isinstance(t, Tensor) or t.dtype not in dtypes:
        got = t.dtype if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{what} has dtype {got}; {fix}")
    check_device(t.device, what)


def fp8_tensor_qdq(x: Tensor, scale: Tensor) -> Tensor:
    """x / scale, saturated to +-448, rounded to E4M3 (RNE), times scale, saturated to x's dtype's
    finite max (448 * scale or a rounded-up value may pass it), in x's dtype.

    NaN stays NaN; +-Inf saturates like any value beyond the range (torch's E4M3 cast would
    turn it into NaN, so clamp first). `scale` is checked like `check_act_scale` (one element,
    finite, > 0) when it is a number or a CPU tensor; a scale already on a GPU is trusted to have
    passed `check_act_scale` at preparation (reading it back would sync every call).
    """
    check_values(x, "fp8_tensor_qdq: x", _X_DTYPES,
                 "pass float32, bfloat16 or float16 activations (cast first, e.g. x.float())")
    if not isinstance(scale, Tensor) or scale.device.type in ("cpu", "meta"):
        scale = check_act_scale(scale)
    elif scale.numel() != 1 or not scale.is_floating_point():
        raise ValueError(f"fp8_tensor_qdq: scale must be one float element, got {scale.dtype} "
                         f"{tuple(scale.shape)}; pass check_act_scale(scale)")
    scale = scale.to(device=x.device, dtype=torch.float32)
    # inference numerics, as mx_qdq: no autograd graph through the rounding
    y = torch.clamp(x.detach().float() / scale.detach(), -FP8_E4M3_MAX, FP8_E4M3_MAX)
    y = y.to(torch.float8_e4m3fn).float() * scale.detach()
    return saturate(y, x.dtype).to(x.dtype)


def check_act_scale(scale: object) -> Tensor:
    """A valid static per-tensor scale as a detached 0-dim fp32 tensor on the scale's device
    (checked once, at preparation): a real number or a one-element int / float tensor, finite
    and > 0 after rounding to fp32. bool, complex, strings and meta tensors are refused."""
    if isinstance(scale, Tensor):
        if scale.dtype == torch.bool or scale.is_complex():
            raise ValueError(f"activation scale has dtype {scale.dtype}; pass a real float scale "
                             "(the checkpoint's input_scale, float32)")
        check_device(scale.device, "activation scale")
        t = scale.detach().to(torch.float32)
    elif isinstance(scale, numbers.Real) and not isinstance(scale, bool):
        t = torch.tensor(float(scale), dtype=torch.float32)
    elif isinstance(scale, (list, tuple)) or type(scale).__module__ == "numpy":
        return check_act_scale(_as_tensor(scale))
    else:
        raise _not_a_scale(scale)
    if t.numel() != 1:
        raise ValueError(
            f"a per-tensor activation scale has one element, got shape {tuple(t.shape)}; "
            "pass the checkpoint's input_scale for this layer"
        )
    value = float(t.reshape(()))
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"activation scale must be finite and > 0 (as float32), got {value}; "
                         "pass the checkpoint's input_scale or calibrate one")
    return t.reshape(())


def _not_a_scale(scale: object) -> ValueError:
    return ValueError(f"activation scale must be a real number or a one-element float tensor, "
                      f"got {type(scale).__name__} {scale!r:.60}")


def _as_tensor(scale: object) -> Tensor:
    """A list / tuple / numpy value as a tensor (then checked like one)."""
    try:
        return torch.as_tensor(scale)
    except (TypeError, ValueError, RuntimeError):
        raise _not_a_scale(scale) from None
