"""Public MX API: mx_quantize / mx_dequantize / mx_qdq and the MXTensor they exchange.

This module validates inputs, flattens them to [R, K] rows, runs the qdq kernel resolve chooses
(kernels.choice: `backend="auto"` resolves the format's dynamic MX key with kind "qdq" for the
tensor's platform; "triton" / "reference" force one; a qdq kernel's name runs it as is) and
wraps the result. Both qdq kernels implement quantize / dequantize / qdq with the signatures of
kernels/reference/mx.py. Triton is imported only when triton-qdq actually runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import torch
from torch import Tensor

from kernels import choice
from kernels.spec.formats import (BLOCK, ElemFormat, bytes_per_row, check_rounding, get_format,
                                  resolve_layout)

#: The `backend=` values (from the qdq declarations): "auto" and each kernel's short name.
BACKENDS: tuple[str, ...] = choice.backends("qdq")
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
_DTYPE_NAMES = "torch.float32, torch.bfloat16 or torch.float16"


@dataclass(frozen=True, eq=False)
class MXTensor:
    """Quantized MX data: element codes in `layout` plus one E8M0 scale byte per 32 elements.

    data:   uint8, shape[:-1] + (bytes_per_row(fmt, layout, K),)
    scales: uint8 E8M0 bytes (E + 127; 0xFF = NaN block), shape[:-1] + (K // 32,)
    fmt, rounding: names from kernels.spec.formats; shape: the original torch.Size;
    layout: "packed" / "unpacked" (None -> the format's default).
    """

    data: Tensor
    scales: Tensor
    fmt: str
    rounding: str
    shape: torch.Size
    layout: str | None = None

    def __post_init__(self) -> None:
        elem = get_format(self.fmt)
        check_rounding(self.rounding)
        object.__setattr__(self, "layout", resolve_layout(elem, self.layout))
        try:
            shape = torch.Size(self.shape)
        except TypeError:
            raise ValueError(f"MXTensor.shape must be a sequence of ints, got {self.shape!r}") from None
        object.__setattr__(self, "shape", shape)
        _check_shape(shape, "MXTensor.shape")
        for field, tensor in (("data", self.data), ("scales", self.scales)):
            if not isinstance(tensor, Tensor) or tensor.dtype != torch.uint8:
                got = tensor.dtype if isinstance(tensor, Tensor) else type(tensor).__name__
                raise ValueError(f"MXTensor.{field} must be a uint8 tensor, got {got}; store raw bytes as uint8 "
                                 "(e.g. t.view(torch.uint8) for float8_e8m0fnu scales)")
        k = shape[-1]
        want_data = shape[:-1] + (bytes_per_row(elem, self.layout, k),)
        want_scales = shape[:-1] + (k // BLOCK,)
        if self.data.shape != want_data:
            raise ValueError(
                f"MXTensor.data has shape {tuple(self.data.shape)}, but shape {tuple(shape)} in "
                f"{self.fmt} {self.layout} layout needs {tuple(want_data)}; pass the data "
                "mx_quantize produced for this shape, or fix shape / layout"
            )
        if self.scales.shape != want_scales:
            raise ValueError(
                f"MXTensor.scales has shape {tuple(self.scales.shape)}, but shape {tuple(shape)} "
                f"needs {tuple(want_scales)} (one scale per {BLOCK} elements of the last axis); "
                "pass the scales mx_quantize produced for this shape"
            )
        if self.data.device != self.scales.device:
            raise ValueError(
                f"MXTensor.data is on {self.data.device} but scales on {self.scales.device}; "
                "move both to one device (MXTensor.to(device))"
            )

    @property
    def elem_format(self) -> ElemFormat:
        return get_format(self.fmt)

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def nbytes(self) -> int:
        """Bytes of storage: element data plus scales."""
        return self.data.numel() * self.data.element_size() + self.scales.numel() * self.scales.element_size()

    def to(self, device: torch.device | str) -> MXTensor:
        return MXTensor(self.data.to(device), self.scales.to(device), self.fmt, self.rounding, self.shape, self.layout)


def _check_shape(shape: torch.Size, what: str) -> None:
    """MX shapes: >= 1-D, last axis K a positive multiple of 32; leading dims may be 0 (no rows)."""
    if len(shape) == 0:
        raise ValueError(
            f"{what} is 0-dim (shape ()); MX blocks of {BLOCK} run along the last axis: "
            f"pass a tensor whose last axis holds a multiple of {BLOCK} elements"
        )
    if any(n < 0 for n in shape):
        raise ValueError(f"{what} {tuple(shape)} has a negative dimension; pass the tensor's real shape")
    k = shape[-1]
    if k == 0:
        raise ValueError(
            f"{what} has shape {tuple(shape)}: the last axis is empty (K=0); MX needs K a positive "
            f"multiple of the block size {BLOCK} (rows may be 0, K may not)"
        )
    if k % BLOCK != 0:
        pad = BLOCK - k % BLOCK
        raise ValueError(
            f"{what} has shape {tuple(shape)}: the last axis ({k}) must be a multiple of the MX block "
            f"size {BLOCK}; pad it to {k + pad} (e.g. torch.nn.functional.pad(x, (0, {pad})))"
        )


def check_device(device: torch.device, what: str) -> None:
    """The meta device holds shapes but no values: nothing here can quantize or compute on it."""
    if device.type == "meta":
        raise ValueError(
            f"{what} is on the meta device (shapes only, no values); MX kernels read the values: "
            "materialize it first (e.g. module.to_empty(device='cpu') and load the weights)"
        )


def check_float_input(x: Tensor, what: str = "x") -> None:
    """A tensor MX quantization can read: fp32 / bf16 / fp16, real device, MX-shaped."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{what} has dtype {x.dtype} (shape {tuple(x.shape)}); MX quantization takes {_DTYPE_NAMES}: "
            f"cast first, e.g. {what}.float()"
        )
    check_device(x.device, what)
    _check_shape(x.shape, what)


def _check_input(x: Tensor) -> None:
    check_float_input(x, "x")


def _check_out_dtype(dtype: torch.dtype) -> None:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"output dtype {dtype} is not supported; use {_DTYPE_NAMES}")


def qdq_kernel(backend: str, fmt: str, rounding: str, device: torch.device,
               what: str = "x") -> str:
    """The qdq kernel that runs `fmt` / `rounding` on `device` for `backend` (kernels.choice):
    a qdq kernel's name as is, else resolve's choice (cached; KernelChoiceError, a one-line
    ValueError, when it refuses: nothing here, or strict mode and a forced backend)."""
    choice.check_backend("qdq", backend)
    check_device(device, what)
    if backend in _QDQ_KERNELS:
        return backend
    return choice.choose("qdq", choice.mx_key(fmt, rounding), device, backend).kernel


_QDQ_KERNELS = choice.kernel_names("qdq")


def _module(backend: str, fmt: str, rounding: str, device: torch.device,
            what: str = "x") -> ModuleType:
    """The module implementing quantize / dequantize / qdq (the chosen kernel's impl)."""
    name = qdq_kernel(backend, fmt, rounding, device, what)
    try:
        return choice.implementation(name)
    except ImportError as error:
        raise ImportError(f"qdq kernel {name} could not be imported ({error}); install triton, "
                          "or use backend='reference'") from error


def mx_quantize(
    x: Tensor, fmt: str, rounding: str = "floor", backend: str = "auto", layout: str | None = None
) -> MXTensor:
    """Quantize `x` (fp32/bf16/fp16, any leading shape, last axis a multiple of 32) to MX `fmt`."""
    _check_input(x)
    elem = get_format(fmt)
    check_rounding(rounding)
    layout = resolve_layout(elem, layout)
    module = _module(backend, fmt, rounding, x.device)
    k = x.shape[-1]
    data, scales = module.quantize(x.contiguous().view(-1, k), elem, rounding, layout)
    lead = x.shape[:-1]
    return MXTensor(data.view(*lead, data.shape[-1]), scales.view(*lead, k // BLOCK), fmt, rounding, x.shape, layout)


def mx_dequantize(t: MXTensor, dtype: torch.dtype = torch.float32, backend: str = "auto") -> Tensor:
    """Values of `t` as `dtype`, shape t.shape: code value * 2**E in fp32, clamped to
    +-finfo(dtype).max (a finite value never becomes Inf; Inf codes and NaN blocks stay), then
    cast (RNE)."""
    if not isinstance(t, MXTensor):
        raise TypeError(f"mx_dequantize takes an MXTensor (from mx_quantize), got {type(t).__name__}")
    _check_out_dtype(dtype)
    module = _module(backend, t.fmt, t.rounding, t.device, "MXTensor t")
    k = t.shape[-1]
    data = t.data.contiguous().view(-1, t.data.shape[-1])
    scales = t.scales.contiguous().view(-1, k // BLOCK)
    out = module.dequantize(data, scales, t.elem_format, t.layout, k, dtype)
    return out.view(t.shape)


def mx_qdq(x: Tensor, fmt: str, rounding: str = "floor", backend: str = "auto") -> Tensor:
    """Fake-quantize `x`: equal, bit for bit, to mx_dequantize(mx_quantize(x, ...), x.dtype)
    (so results past x.dtype's max, from a rounded-up scale, saturate to +-max, not Inf)."""
    _check_input(x)
    elem = get_format(fmt)
    check_rounding(rounding)
    module = _module(backend, fmt, rounding, x.device)
    k = x.shape[-1]
    return module.qdq(x.contiguous().view(-1, k), elem, rounding).view(x.shape)


__all__ = ["MXTensor", "mx_quantize", "mx_dequantize", "mx_qdq", "BACKENDS", "check_float_input",
           "qdq_kernel"]
