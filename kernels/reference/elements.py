"""Element codes of the MX formats in pure torch: fp32 -> code (RNE, saturating) and code -> fp32.

These work on already-scaled values (x / 2**E); the block scaling lives in reference/mx.py.
Kept apart so the element casts can be checked on their own against ml_dtypes.

Choices the Triton kernels must match, bit for bit:
- Round to nearest, ties to even code; finite values beyond max normal saturate to the largest
  finite code (never to Inf or NaN, also for E4M3 / E5M2).
- Subnormals are kept (no flush to zero).
- Negative zero keeps its sign: -0.0, and any negative value that rounds to zero, encodes as the
  code with only the sign bit set (fp4 0x8, fp6 0x20, fp8 0x80). mxint8 has no negative zero: 0.
- NaN / Inf inputs are not encoded here (a block holding one gets all-zero codes and the E8M0
  NaN scale in reference/mx.py); passing them to `encode` gives unspecified codes.
- Decoding reads ANY byte per the OCP spec (E4M3 S.1111.111 -> NaN, E5M2 exponent 31 -> Inf /
  NaN, mxint8 byte 0x80 -> -2.0). For fp4 / fp6 codes stored one a byte, bits above the code width
  are masked off (ignored), not checked: checking every call would cost a full pass.
"""
from __future__ import annotations

import struct
from functools import lru_cache

import torch
from torch import Tensor

from kernels.spec.formats import ElemFormat

INT8_FRACTION_BITS = 6  # mxint8: value = code * 2**-6
_F32_EXP_SHIFT = 23
_F32_BIAS = 127


def min_normal_exponent(fmt: ElemFormat) -> int:
    """Exponent of the smallest normal value of an fp element format (1 - bias)."""
    return 1 - fmt.bias


def code_value(fmt: ElemFormat, code: int) -> float:
    """The value of one element code (python float; NaN / Inf per the OCP spec)."""
    code &= (1 << fmt.bits) - 1
    if fmt.is_int:
        signed = code - 256 if code >= 128 else code
        return signed / float(1 << INT8_FRACTION_BITS)
    negative = code >> fmt.sign_bit & 1
    exp_field = code >> fmt.mbits & ((1 << fmt.ebits) - 1)
    mantissa = code & ((1 << fmt.mbits) - 1)
    top_exp = (1 << fmt.ebits) - 1
    if fmt.specials == "nan_only_all_ones" and exp_field == top_exp and mantissa == (1 << fmt.mbits) - 1:
        return float("nan")
    if fmt.specials == "ieee" and exp_field == top_exp:
        value = float("inf") if mantissa == 0 else float("nan")
    elif exp_field == 0:
        value = mantissa * 2.0 ** (min_normal_exponent(fmt) - fmt.mbits)
    else:
        value = (1.0 + mantissa / (1 << fmt.mbits)) * 2.0 ** (exp_field - fmt.bias)
    return -value if negative else value


@lru_cache(maxsize=None)
def max_code_magnitude(fmt: ElemFormat) -> int:
    """The code (sign bit clear) of the largest finite value: where saturation lands."""
    best = max(
        (c for c in range(1 << fmt.sign_bit) if code_value(fmt, c) == fmt.max_normal),
        default=None,
    )
    if best is None:  # the format table and the decoder disagree: a bug, not an input error
        raise AssertionError(f"{fmt.name}: no code decodes to max_normal {fmt.max_normal}")
    return best


def f32_mantissa_field(value: float) -> int:
    """The 23 stored mantissa bits of `value` as an fp32."""
    return struct.unpack("<I", struct.pack("<f", value))[0] & 0x7FFFFF


def decode_table(fmt: ElemFormat, device: torch.device | str = "cpu") -> Tensor:
    """fp32 value of every code 0 .. 2**bits - 1 (a tiny table: at most 256 entries)."""
    return torch.tensor(_code_values(fmt), dtype=torch.float32, device=device)


@lru_cache(maxsize=None)
def _code_values(fmt: ElemFormat) -> tuple[float, ...]:
    return tuple(code_value(fmt, c) for c in range(1 << fmt.bits))


def pow2_f32(exponent: Tensor) -> Tensor:
    """2.0**exponent as fp32 for int32 exponents in [-127, 127], built exactly from the bits
    (2**-127 is the fp32 subnormal 0x00400000)."""
    normal_bits = (exponent + _F32_BIAS) << _F32_EXP_SHIFT
    bits = torch.where(exponent >= -126, normal_bits, torch.full_like(exponent, 0x00400000))
    return bits.view(torch.float32)


def encode(y: Tensor, fmt: ElemFormat) -> Tensor:
    """Codes (uint8, same shape) of fp32 values `y` already divided by the block scale."""
    if y.dtype != torch.float32:
        raise ValueError(f"encode expects fp32 values, got {y.dtype}; upcast with .float() first")
    if fmt.is_int:
        return _encode_int8(y)
    return _encode_fp(y, fmt)


def _encode_int8(y: Tensor) -> Tensor:
    limit = 127
    n = torch.round(y * float(1 << INT8_FRACTION_BITS)).clamp_(-limit, limit)
    return (n.to(torch.int32) & 0xFF).to(torch.uint8)


def _encode_fp(y: Tensor, fmt: ElemFormat) -> Tensor:
    """RNE to the element grid without leaving fp32: n = round(|y| / q) with q the element
    quantum of |y|'s binade (never below the subnormal quantum); then the magnitude code is
    ((e - emin) << mbits) + n, which also carries a round-up into the next binade correctly."""
    bits = y.view(torch.int32)
    negative = (bits >> 31) & 1
    magnitude_bits = bits & 0x7FFFFFFF
    emin = min_normal_exponent(fmt)
    # floor(log2|y|) for fp32 normals; fp32 subnormals and zero read -127 and clamp to emin
    # (max=127 only keeps Inf / NaN, whose codes are unspecified, from wrapping the bits).
    e = ((magnitude_bits >> _F32_EXP_SHIFT) - _F32_BIAS).clamp_(min=emin, max=127)
    inv_quantum = ((fmt.mbits - e + _F32_BIAS) << _F32_EXP_SHIFT).view(torch.float32)
    n = torch.round(magnitude_bits.view(torch.float32) * inv_quantum)  # exact power-of-2 product
    magnitude = ((e - emin) << fmt.mbits) + n.to(torch.int32)
    magnitude = magnitude.clamp_(max=max_code_magnitude(fmt))
    return (magnitude | (negative << fmt.sign_bit)).to(torch.uint8)


def decode(codes: Tensor, fmt: ElemFormat, table: Tensor | None = None) -> Tensor:
    """fp32 values of uint8 `codes` (any byte; fp4 / fp6 high bits masked off)."""
    if table is None:
        table = decode_table(fmt, codes.device)
    index = codes.to(torch.int32)
    if fmt.bits < 8:
        index = index & ((1 << fmt.bits) - 1)
    return table[index]


def decode_e8m0(scales: Tensor) -> Tensor:
    """fp32 2**(byte - 127) of E8M0 scale bytes; 0xFF -> NaN, 0x00 -> 2**-127."""
    exponent = scales.to(torch.int32) - _F32_BIAS
    value = pow2_f32(exponent.clamp(max=127))
    return torch.where(scales == 0xFF, torch.full_like(value, float("nan")), value)
