"""The MX numerics oracle in pure torch (any device): quantize, dequantize and QDQ of [R, K] rows.

Rules (docs/numerics.md; OCP Microscaling Formats v1.0):
- Work in fp32; bf16 / fp16 inputs are upcast exactly. Blocks are 32 consecutive elements of a row.
- Shared exponent E from amax = max |x| of the block, clamped to [-127, 127]; all-zero -> -127:
    floor: floor(log2(amax)) - emax, read exactly from the fp32 bits (fp32 subnormals too).
    even:  the fp32 bit pattern of amax plus 1 << (22 - mbits) as int32, mantissa dropped,
           then as floor (Quark / vLLM). Literally on the bits: an fp32-subnormal amax rounds at
           the fixed position of the 2**-126 binade.
    rceil: the smallest E with amax <= max_normal * 2**E, by comparing mantissa bits (exact).
- Scale byte E + 127. Elements x / 2**E (two exact power-of-two products, so E = +-127 never
  needs the unrepresentable 2**-127 reciprocal), then elements.encode: RNE (ties to the even
  code), saturate to +-max normal, keep subnormals. Negative zero KEEPS its sign: -0.0 and
  negatives that round to zero get the code with only the sign bit set (fp4 0x8, fp6 0x20,
  fp8 0x80; mxint8 has no -0 and writes 0). See elements.py.
- A block holding a NaN or an Inf: scale byte 0xFF and all its codes 0; it dequantizes to NaN.
- Dequantize: code value * 2**E in fp32 (exact unless it overflows to Inf), saturated to
  +-finfo(out dtype).max unless the element code itself is an Inf (E5M2), then a cast to the
  output dtype (RNE): a finite input never comes back as Inf (docs/numerics.md, "Saturation on
  the way back").

Large inputs are processed in row chunks so the temporaries stay a few tens of MB.
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.spec.formats import (BLOCK, E8M0_BIAS, E8M0_NAN, E_MAX, E_MIN, ElemFormat,
                                  bytes_per_row)
from kernels.reference.elements import decode, decode_e8m0, decode_table, encode, f32_mantissa_field, pow2_f32
from kernels.reference.packing import pack_codes, unpack_codes

INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CHUNK_ELEMENTS = 1 << 22  # elements of one row chunk: bounds the memory of the temporaries


def floor_log2_and_fraction(amax: Tensor) -> tuple[Tensor, Tensor]:
    """(floor(log2(a)), the 23-bit fraction of a normalised to [1, 2)) of finite fp32 a > 0,
    exact for fp32 subnormals too (their mantissa integer converts to fp32 exactly)."""
    bits = amax.view(torch.int32)
    exp_field = bits >> 23
    fraction = bits & 0x7FFFFF
    as_float_bits = fraction.to(torch.float32).view(torch.int32)  # value = fraction * 2**-149
    subnormal = exp_field == 0
    log2 = torch.where(subnormal, (as_float_bits >> 23) - 127 - 149, exp_field - 127)
    fraction = torch.where(subnormal, as_float_bits & 0x7FFFFF, fraction)
    return log2, fraction


def shared_exponent(amax: Tensor, fmt: ElemFormat, rounding: str) -> Tensor:
    """int32 E per block from finite fp32 amax >= 0, clamped to [E_MIN, E_MAX]; amax 0 -> E_MIN."""
    if rounding == "even":
        rounded = amax.view(torch.int32) + (1 << (23 - fmt.mbits - 1))
        exponent = ((rounded >> 23) & 0xFF) - 127 - fmt.emax  # exp field 0 lands below E_MIN
    elif rounding == "floor":
        exponent = floor_log2_and_fraction(amax)[0] - fmt.emax
    elif rounding == "rceil":
        log2, fraction = floor_log2_and_fraction(amax)
        exceeds = (fraction > f32_mantissa_field(fmt.max_normal)).to(torch.int32)
        exponent = log2 - fmt.emax + exceeds
    else:
        raise ValueError(f"unknown scale rounding {rounding!r}; valid roundings: floor, even, rceil")
    exponent = exponent.clamp(E_MIN, E_MAX)
    return torch.where(amax == 0, torch.full_like(exponent, E_MIN), exponent)


def _check_rows(x2d: Tensor) -> None:
    if x2d.dim() != 2 or x2d.shape[1] % BLOCK != 0 or x2d.dtype not in INPUT_DTYPES:
        raise ValueError(
            f"reference quantize expects a 2D [R, K] fp32/bf16/fp16 tensor with K % {BLOCK} == 0, "
            f"got shape {tuple(x2d.shape)} dtype {x2d.dtype}; use kernels.mx_quantize for any shape"
        )


def _row_chunks(rows: int, k: int) -> list[tuple[int, int]]:
    step = max(1, CHUNK_ELEMENTS // max(k, 1))
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def _quantize_codes(x2d: Tensor, fmt: ElemFormat, rounding: str) -> tuple[Tensor, Tensor]:
    """[r, K] input -> ([r, K] uint8 codes, [r, K // 32] uint8 scale bytes)."""
    rows, k = x2d.shape
    blocks = x2d.to(torch.float32).view(rows, k // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=-1)  # NaN propagates through amax
    non_finite = ~torch.isfinite(amax)
    exponent = shared_exponent(torch.where(non_finite, torch.zeros_like(amax), amax), fmt, rounding)
    scales = torch.where(non_finite, torch.full_like(exponent, E8M0_NAN), exponent + E8M0_BIAS)
    # x * 2**-E as two exact products: each factor is a normal fp32 power of two in [2**-64, 2**64]
    first = torch.div(-exponent, 2, rounding_mode="floor")
    second = -exponent - first
    y = blocks * pow2_f32(first).unsqueeze(-1) * pow2_f32(second).unsqueeze(-1)
    y = torch.where(non_finite.unsqueeze(-1), torch.zeros_like(y), y)
    codes = encode(y, fmt).view(rows, k)
    return codes, scales.to(torch.uint8)


def saturate(values: Tensor, dtype: torch.dtype) -> Tensor:
    """fp32 `values` clamped to +-finfo(dtype).max, sign and NaN kept (+-Inf too becomes +-max):
    a rounded-up scale times an element may pass the dtype's max (or fp32's), and a finite input
    must not come back as Inf."""
    limit = torch.finfo(dtype).max
    return values.clamp(-limit, limit)


def _dequantize_codes(codes: Tensor, scales: Tensor, fmt: ElemFormat, table: Tensor, out_dtype: torch.dtype) -> Tensor:
    rows, k = codes.shape
    values = decode(codes, fmt, table).view(rows, k // BLOCK, BLOCK)
    out = values * decode_e8m0(scales).unsqueeze(-1)  # NaN scale (0xFF) makes the block NaN
    saturated = saturate(out, out_dtype)
    if fmt.specials == "ieee":  # an Inf element code (E5M2) stays Inf
        saturated = torch.where(values.isinf(), out, saturated)
    return saturated.view(rows, k).to(out_dtype)


def quantize(x2d: Tensor, fmt: ElemFormat, rounding: str, layout: str) -> tuple[Tensor, Tensor]:
    """x2d: [R, K] contiguous fp32/bf16/fp16, K % 32 == 0 -> (data uint8 [R, bytes_per_row(fmt,
    layout, K)], scales uint8 [R, K // 32])."""
    _check_rows(x2d)
    x2d = x2d.contiguous()
    rows, k = x2d.shape
    data = torch.empty(rows, bytes_per_row(fmt, layout, k), dtype=torch.uint8, device=x2d.device)
    scales = torch.empty(rows, k // BLOCK, dtype=torch.uint8, device=x2d.device)
    for start, stop in _row_chunks(rows, k):
        codes, chunk_scales = _quantize_codes(x2d[start:stop], fmt, rounding)
        data[start:stop] = pack_codes(codes, fmt, layout)
        scales[start:stop] = chunk_scales
    return data, scales


def dequantize(data: Tensor, scales: Tensor, fmt: ElemFormat, layout: str, k: int, out_dtype: torch.dtype) -> Tensor:
    """-> [R, K] out_dtype: code_value * 2**E in fp32, saturated to out_dtype's finite range
    (Inf element codes aside), then cast to out_dtype (RNE)."""
    rows = data.shape[0]
    if data.dtype != torch.uint8 or scales.dtype != torch.uint8 or tuple(scales.shape) != (rows, k // BLOCK):
        raise ValueError(
            f"reference dequantize expects uint8 data [R, bytes] and uint8 scales [R, {k // BLOCK}], "
            f"got data {data.dtype} {tuple(data.shape)}, scales {scales.dtype} {tuple(scales.shape)}; "
            "pass the tensors mx_quantize produced"
        )
    data, scales = data.contiguous(), scales.contiguous()
    table = decode_table(fmt, data.device)
    out = torch.empty(rows, k, dtype=out_dtype, device=data.device)
    for start, stop in _row_chunks(rows, k):
        codes = unpack_codes(data[start:stop], fmt, layout, k)
        out[start:stop] = _dequantize_codes(codes, scales[start:stop], fmt, table, out_dtype)
    return out


def qdq(x2d: Tensor, fmt: ElemFormat, rounding: str) -> Tensor:
    """== dequantize(*quantize(x2d, ...), out_dtype=x2d.dtype), bit for bit (fake quantization),
    chunk by chunk so no full-size code tensor is kept."""
    _check_rows(x2d)
    x2d = x2d.contiguous()
    rows, k = x2d.shape
    table = decode_table(fmt, x2d.device)
    out = torch.empty_like(x2d)
    for start, stop in _row_chunks(rows, k):
        codes, scales = _quantize_codes(x2d[start:stop], fmt, rounding)
        out[start:stop] = _dequantize_codes(codes, scales, fmt, table, x2d.dtype)
    return out
