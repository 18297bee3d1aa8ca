"""@triton.jit building blocks of MX quantization: shared exponent, element encode / decode.

Why a module of its own: the quantize / dequantize / QDQ kernels (mx_quant.py) and later fused
linear kernels (weight dequant + activation QDQ + matmul) must round exactly alike, so the bit
rules of DESIGN.md §3 live here once. Format facts arrive as tl.constexpr values made by
`format_constexprs(fmt)`; the scale rounding as the int constexpr `ROUNDING` (`ROUNDING_CODE`).

Bit-exactness rules kept by every helper (the same on the CPU interpreter and a GPU):
- exponents come from fp32 bit patterns, never from log2;
- float arithmetic is used only where it is exact (multiplying by a power of two; the
  "add a power-of-two magic number" rounding, which is IEEE round-to-nearest-even) — Triton's
  NVIDIA backend keeps fp32 subnormals for plain mul / add (ftz applies only to libdevice);
- no float conversions the interpreter gets wrong (bf16 is converted with integer arithmetic).
"""
from __future__ import annotations

import struct

import triton
import triton.language as tl

from kernels.formats import ElemFormat

ROUNDING_CODE: dict[str, int] = {"floor": 0, "even": 1, "rceil": 2}
SPECIALS_CODE: dict[str, int] = {"none": 0, "nan_only_all_ones": 1, "ieee": 2}
# Element dtypes of kernel inputs / outputs, as the int constexprs IN_KIND / OUT_KIND.
KIND_FP32, KIND_BF16, KIND_FP16 = 0, 1, 2


def _f32_bits(value: float) -> int:
    return struct.unpack("<i", struct.pack("<f", value))[0]


def format_constexprs(fmt: ElemFormat) -> dict[str, object]:
    """The tl.constexpr keyword arguments that describe `fmt` to the helpers below."""
    maxn_bits = _f32_bits(fmt.max_normal)
    # rceil for an fp32-subnormal amax: E = -127 unless amax > max_normal * 2**-127 (then -126).
    sub_threshold = fmt.max_normal * 2.0**149 * 2.0**-127  # max_normal * 2**-127 in 2**-149 units
    maxn_sub = int(sub_threshold) if sub_threshold < 2**23 else 0x7FFFFFFF
    return dict(
        MBITS=fmt.mbits,
        BIAS=fmt.bias,
        EMAX=fmt.emax,
        MAX_NORMAL=float(fmt.max_normal),
        MAXN_MANT=maxn_bits & 0x7FFFFF,
        MAXN_SUB=maxn_sub,
        BITS=fmt.bits,
        IS_INT=bool(fmt.is_int),
        SPECIALS=SPECIALS_CODE[fmt.specials],
    )


@triton.jit
def _nan_like(t):
    """fp32 quiet NaN (0x7FC00000) in the shape of the int32 tensor `t`."""
    return (tl.zeros_like(t) + 0x7FC00000).to(tl.float32, bitcast=True)


@triton.jit
def _pow2(e):
    """fp32 2**e for int32 e in [-127, 127], built from bits (2**-127 is an fp32 subnormal)."""
    bits = tl.where(e > -127, (e + 127) << 23, 0x00400000)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _shared_exponent(amax_bits, EMAX: tl.constexpr, MBITS: tl.constexpr,
                     MAXN_MANT: tl.constexpr, MAXN_SUB: tl.constexpr, ROUNDING: tl.constexpr):
    """Shared exponent E (int32, clamped to [-127, 127]) of blocks whose max |x| has the fp32
    bit pattern `amax_bits` (finite, sign cleared). An all-zero block gets -127.

    ROUNDING 0 floor: floor(log2 amax) - emax; 1 even: amax rounded to MBITS mantissa bits
    first; 2 rceil: the smallest E with amax <= max_normal * 2**E."""
    if ROUNDING == 1:
        e = ((amax_bits + (1 << (22 - MBITS))) >> 23) - 127 - EMAX
    else:
        e = (amax_bits >> 23) - 127 - EMAX
    if ROUNDING == 2:
        # amax = m * 2**f with m in [1, 2): max_normal * 2**(f - emax) >= amax iff m <= mantissa
        # of max_normal; otherwise one more. An fp32-subnormal amax is compared as a whole.
        e = e + ((amax_bits & 0x7FFFFF) > MAXN_MANT).to(tl.int32)
        e = tl.where((amax_bits >> 23) == 0, -127 + (amax_bits > MAXN_SUB).to(tl.int32), e)
    return tl.minimum(tl.maximum(e, -127), 127)


@triton.jit
def _fp_magic(av, MBITS: tl.constexpr, BIAS: tl.constexpr):
    """The power of two whose fp32 ulp is the element quantum of `av` (>= 0, <= max normal):
    av + magic rounds av to the element grid, ties to even (the subnormal quantum below the
    element's smallest normal)."""
    emin_bits: tl.constexpr = (128 - BIAS) << 23  # 2**emin, emin = 1 - bias
    exp_bits = tl.maximum(av.to(tl.int32, bitcast=True) & 0x7F800000, emin_bits)
    return (exp_bits + ((23 - MBITS) << 23)).to(tl.float32, bitcast=True)


@triton.jit
def _encode(v, MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr,
            BITS: tl.constexpr, IS_INT: tl.constexpr):
    """Element codes (int32 in [0, 2**BITS)) of v = x * 2**-E (fp32): round to nearest even,
    saturate at +-max normal, keep subnormals; the sign of v (also of -0.0) is kept.
    mxint8: two's complement byte of clamp(rne(v * 64), -127, 127)."""
    if IS_INT:
        w = tl.minimum(tl.maximum(v * 64.0, -127.0), 127.0)
        # 1.5 * 2**23 has ulp 1: the sum's low bits are rne(w) in two's complement.
        code = ((w + 12582912.0).to(tl.int32, bitcast=True) - 0x4B400000) & 0xFF
    else:
        av = tl.minimum(tl.abs(v), MAX_NORMAL)
        magic = _fp_magic(av, MBITS, BIAS)
        magic_bits = magic.to(tl.int32, bitcast=True)
        steps = (av + magic).to(tl.int32, bitcast=True) - magic_bits  # quanta above 0 (or 2**e)
        # exponent field offset: (e - emin) << MBITS, read from magic's exponent
        base: tl.constexpr = (127 + 23 - MBITS + 1 - BIAS) << MBITS
        code = steps + ((magic_bits >> 23) << MBITS) - base
        sign = (v.to(tl.int32, bitcast=True) >> (32 - BITS)) & (1 << (BITS - 1))
        code = code | sign
    return code


@triton.jit
def _round_value(v, MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr,
                 IS_INT: tl.constexpr):
    """The value of _encode(v)'s code (fp32, sign kept): QDQ without materialising codes."""
    if IS_INT:
        w = tl.minimum(tl.maximum(v * 64.0, -127.0), 127.0)
        r = ((w + 12582912.0) - 12582912.0) * 0.015625
    else:
        av = tl.minimum(tl.abs(v), MAX_NORMAL)
        magic = _fp_magic(av, MBITS, BIAS)
        mag = (av + magic) - magic
        sign = (v.to(tl.int32, bitcast=True) >> 31) << 31
        r = (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return r


@triton.jit
def _decode(codes, MBITS: tl.constexpr, BIAS: tl.constexpr, BITS: tl.constexpr,
            IS_INT: tl.constexpr, SPECIALS: tl.constexpr):
    """fp32 value of element codes (int32, only the low BITS bits are read), per the spec:
    E4M3 S.1111.111 -> NaN; E5M2 exponent 31 -> +-Inf / NaN; mxint8 -128 decodes to -2."""
    if IS_INT:
        signed = ((codes & 0xFF) ^ 0x80) - 0x80
        val = ((signed + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0) * 0.015625
    else:
        mag = codes & ((1 << (BITS - 1)) - 1)
        sign = (codes & (1 << (BITS - 1))) << (32 - BITS)
        # The code's exponent/mantissa fields placed into fp32 bits read as 2**(127 - bias)
        # too small (an element subnormal lands on an fp32 subnormal): one exact multiply.
        bits = sign | (mag << (23 - MBITS))
        val = bits.to(tl.float32, bitcast=True) * (2.0 ** (127 - BIAS))
        if SPECIALS == 1:
            pass
        if SPECIALS == 2:
            top: tl.constexpr = ((1 << (BITS - 1 - MBITS)) - 1) << MBITS  # exponent all ones
            inf = (sign | 0x7F800000).to(tl.float32, bitcast=True)
            val = tl.where(mag >= top, tl.where(mag == top, inf, _nan_like(codes)), val)
    return val


@triton.jit
def _fp32_to_bf16_bits(f):
    """int16 bits of bf16(f), round to nearest even (integer arithmetic: the interpreter's
    float cast truncates). NaN payloads are not kept; the kernels only produce 0x7FC00000."""
    b = f.to(tl.int32, bitcast=True)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).to(tl.int16)


@triton.jit
def _load_fp32(ptrs, mask, IN_KIND: tl.constexpr):
    """Load a tile as fp32. fp32 / bf16 tensors arrive as int32 / int16 views (exact bits)."""
    if IN_KIND == 0:
        x = tl.load(ptrs, mask=mask, other=0).to(tl.float32, bitcast=True)
    elif IN_KIND == 1:
        x = (tl.load(ptrs, mask=mask, other=0).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _store_fp32(ptrs, f, mask, OUT_KIND: tl.constexpr):
    """Store fp32 `f` as the output dtype (RNE): fp32 / bf16 outputs are int32 / int16 views."""
    if OUT_KIND == 0:
        tl.store(ptrs, f.to(tl.int32, bitcast=True), mask=mask)
    elif OUT_KIND == 1:
        tl.store(ptrs, _fp32_to_bf16_bits(f), mask=mask)
    else:
        tl.store(ptrs, f.to(tl.float16), mask=mask)
