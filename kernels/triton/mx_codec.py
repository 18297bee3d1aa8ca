"""The shared @triton.jit device helpers of every Triton kernel here, under public names: shared
exponent, element encode / decode, loads / stores, and the tiles built from them (`tile_blocks`,
`blocks_scaled`, `qdq_blocks`, `load_codes`; the linear kernels' `act_tile` / `weight_tile` are
in mx_tiles.py).

Why a module of its own: the quantize / dequantize / QDQ kernels (mx_quant.py) and the fused
linear / MoE kernels (weight dequant + activation QDQ + matmul) must round exactly alike, so the
bit rules of docs/numerics.md ("Shared exponent", "Elements", "Saturation on the way back") live
here once; kernel modules import these helpers and keep private only what they alone use.
Format facts arrive as tl.constexpr values made by `format_constexprs(fmt)`; the scale rounding as the int constexpr `ROUNDING` (`ROUNDING_CODE`).

Bit-exactness rules kept by every helper (the same on the CPU interpreter and a GPU):
- exponents come from fp32 bit patterns, never from log2;
- float arithmetic is used only where it is exact (multiplying by a power of two; the
  "add a power-of-two magic number" rounding, which is IEEE round-to-nearest-even) — Triton's
  NVIDIA backend keeps fp32 subnormals for plain mul / add (ftz applies only to libdevice);
- no float conversion the interpreter gets wrong: bf16 inputs are widened from their bits, and
  fp32 -> bf16 is integer RNE there (HW_CAST=False) or the GPU's RNE convert (HW_CAST=True).
"""
from __future__ import annotations

import struct
from functools import lru_cache

import torch
import triton
import triton.language as tl

from kernels.spec.formats import ElemFormat
from kernels.triton.packed_codes import byte_cols

ROUNDING_CODE: dict[str, int] = {"floor": 0, "even": 1, "rceil": 2}
SPECIALS_CODE: dict[str, int] = {"none": 0, "nan_only_all_ones": 1, "ieee": 2}
# Element dtypes of kernel inputs / outputs, as the int constexprs IN_KIND / OUT_KIND.
KIND_FP32, KIND_BF16, KIND_FP16 = 0, 1, 2
KIND_OF_DTYPE: dict[torch.dtype, int] = {torch.float32: KIND_FP32, torch.bfloat16: KIND_BF16,
                                         torch.float16: KIND_FP16}


def _f32_bits(value: float) -> int:
    return struct.unpack("<i", struct.pack("<f", value))[0]


def format_constexprs(fmt: ElemFormat) -> dict[str, object]:
    """The tl.constexpr keyword arguments that describe `fmt` to the helpers below (a fresh
    dict the caller may extend)."""
    return dict(_format_facts(fmt))


@lru_cache(maxsize=None)
def _format_facts(fmt: ElemFormat) -> tuple[tuple[str, object], ...]:
    maxn_bits = _f32_bits(fmt.max_normal)
    # rceil for an fp32-subnormal amax: E = -127 unless amax > max_normal * 2**-127 (then -126);
    # max_normal * 2**-127 in units of 2**-149 (unreachable when it is not an fp32 subnormal).
    sub_threshold = fmt.max_normal * 2.0**22
    maxn_sub = int(sub_threshold) if sub_threshold < 2**23 else 0x7FFFFFFF
    return tuple(dict(
        MBITS=fmt.mbits,
        BIAS=fmt.bias,
        EMAX=fmt.emax,
        MAX_NORMAL=float(fmt.max_normal),
        MAXN_MANT=maxn_bits & 0x7FFFFF,
        MAXN_SUB=maxn_sub,
        BITS=fmt.bits,
        IS_INT=bool(fmt.is_int),
        SPECIALS=SPECIALS_CODE[fmt.specials],
    ).items())


@triton.jit
def nan_like(t):
    """fp32 quiet NaN (0x7FC00000) in the shape (and layout) of the int32 tensor `t`: bit
    operations on `t` rather than a new tensor, so Gluon kernels can call it too."""
    return ((t & 0) | 0x7FC00000).to(tl.float32, bitcast=True)


@triton.jit
def pow2(e):
    """fp32 2**e for int32 e in [-127, 127], built from bits (2**-127 is an fp32 subnormal)."""
    bits = tl.where(e > -127, (e + 127) << 23, 0x00400000)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_value(byte):
    """fp32 2**(byte - 127) of E8M0 scale bytes (int32 tensor); 0xFF -> NaN (the spec's NaN
    scale: its whole block decodes to NaN)."""
    return tl.where(byte == 255, nan_like(byte), pow2(tl.minimum(byte, 254) - 127))


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
def _fp_round(av, MBITS: tl.constexpr, BIAS: tl.constexpr):
    """av (fp32, 0 <= av <= max normal) rounded to the element grid, ties to even: adding
    magic = 2**(e + 23 - MBITS), e = max(floor(log2 av), emin), whose ulp is the element quantum
    of av (the subnormal quantum below 2**emin), rounds in the fp32 adder; subtracting is exact."""
    emin_bits: tl.constexpr = (128 - BIAS) << 23  # 2**emin, emin = 1 - bias
    exp = tl.maximum(av.to(tl.int32, bitcast=True) & 0x7F800000, emin_bits)
    magic = exp.to(tl.float32, bitcast=True) * (2.0 ** (23 - MBITS))
    return (av + magic) - magic


@triton.jit
def _int8_clamped(v):
    """mxint8: v in units of 2**-6, clamped to the code range [-127, 127] (not yet rounded)."""
    return tl.minimum(tl.maximum(v * 64.0, -127.0), 127.0)


@triton.jit
def _round_magnitude(v, MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr,
                     SATURATE: tl.constexpr):
    """|v| saturated at max normal (unless SATURATE is off) and rounded to the element grid."""
    if SATURATE:
        av = tl.minimum(tl.abs(v), MAX_NORMAL)
    else:
        av = tl.abs(v)
    return _fp_round(av, MBITS, BIAS)


@triton.jit
def encode(v, MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr,
           BITS: tl.constexpr, IS_INT: tl.constexpr, SATURATE: tl.constexpr = True):
    """Element codes (int32 in [0, 2**BITS)) of v = x * 2**-E (fp32): round to nearest even,
    saturate at +-max normal, keep subnormals; the sign of v (also of -0.0) is kept.
    mxint8: two's complement byte of clamp(rne(v * 64), -127, 127).
    SATURATE=False skips the clamp where |v| <= max normal is known (rceil scales)."""
    if IS_INT:
        # 1.5 * 2**23 has ulp 1: the sum's low bits are rne(w) in two's complement.
        code = ((_int8_clamped(v) + 12582912.0).to(tl.int32, bitcast=True) - 0x4B400000) & 0xFF
    else:
        mag = _round_magnitude(v, MBITS, BIAS, MAX_NORMAL, SATURATE)
        # mag * 2**(bias - 127) puts the element's exponent / mantissa fields in the fp32 fields
        # (an element subnormal becomes an fp32 subnormal, exactly): its bits are the code.
        code = (mag * (2.0 ** (BIAS - 127))).to(tl.int32, bitcast=True) >> (23 - MBITS)
        sign = (v.to(tl.int32, bitcast=True) >> (32 - BITS)) & (1 << (BITS - 1))
        code = code | sign
    return code


@triton.jit
def round_value(v, MBITS: tl.constexpr, BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr,
                IS_INT: tl.constexpr, SATURATE: tl.constexpr = True):
    """The value of encode(v)'s code (fp32, sign kept): QDQ without materialising codes."""
    if IS_INT:
        r = ((_int8_clamped(v) + 12582912.0) - 12582912.0) * 0.015625
    else:
        mag = _round_magnitude(v, MBITS, BIAS, MAX_NORMAL, SATURATE)
        sign = (v.to(tl.int32, bitcast=True) >> 31) << 31
        r = (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return r


@triton.jit
def decode(codes, MBITS: tl.constexpr, BIAS: tl.constexpr, BITS: tl.constexpr,
           IS_INT: tl.constexpr, SPECIALS: tl.constexpr):
    """fp32 value of element codes (int32, only the low BITS bits are read), per the spec:
    E4M3 S.1111.111 -> NaN; E5M2 exponent 31 -> +-Inf / NaN; mxint8 -128 decodes to -2."""
    if IS_INT:
        signed = ((codes & 0xFF) ^ 0x80) - 0x80
        val = ((signed + 0x4B400000).to(tl.float32, bitcast=True) - 12582912.0) * 0.015625
    else:
        EBITS: tl.constexpr = BITS - 1 - MBITS
        # code moved to the top (bits above the code width fall off), then an arithmetic shift
        # lines its exponent / mantissa fields up with fp32's and smears the sign, which the
        # mask clears again below bit 31. The fields read as 2**(127 - bias) too small (an
        # element subnormal lands on an fp32 subnormal): one exact multiply rescales.
        keep: tl.constexpr = (1 << (23 + EBITS)) - 1 - 2**31  # bit 31 + the fields, as int32
        bits = ((codes << (32 - BITS)) >> (8 - EBITS)) & keep
        val = bits.to(tl.float32, bitcast=True) * (2.0 ** (127 - BIAS))
        if SPECIALS == 1:  # E4M3: S.1111.111 is NaN
            all_ones: tl.constexpr = (1 << (BITS - 1)) - 1
            val = tl.where((codes & all_ones) == all_ones, nan_like(codes), val)
        if SPECIALS == 2:  # E5M2: exponent 31 is Inf (mantissa 0) or NaN; fp32's likewise
            top: tl.constexpr = ((1 << EBITS) - 1) << MBITS
            special = (bits | 0x7F800000).to(tl.float32, bitcast=True)
            val = tl.where((codes & top) == top, special, val)
    return val


@triton.jit
def fp32_to_bf16_bits(f):
    """int16 bits of bf16(f), round to nearest even (integer arithmetic: the interpreter's
    float cast truncates). A NaN stays NaN when a payload bit sits in its top 7 mantissa bits,
    as in every NaN these kernels make (quiet NaNs, E5M2 NaN codes)."""
    b = f.to(tl.int32, bitcast=True)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).to(tl.int16)


@triton.jit
def saturate(f, OUT_KIND: tl.constexpr):
    """fp32 `f` with every |f| above the output dtype's finite max (+-Inf included) replaced by
    +-max, sign kept, NaN kept: the QDQ / dequantize result must not turn a finite input into
    Inf in the cast (as reference.mx.saturate). Integer compares only, so no float constant or
    min / max NaN rule can differ between the interpreter and a GPU."""
    # the fp32 bit pattern of the dtype's largest finite value
    if OUT_KIND == 0:
        limit = 0x7F7FFFFF  # fp32 3.4028235e38
    elif OUT_KIND == 1:
        limit = 0x7F7F0000  # bf16 3.3895314e38
    else:
        limit = 0x477FE000  # fp16 65504
    bits = f.to(tl.int32, bitcast=True)
    mag = bits & 0x7FFFFFFF
    over = (mag > limit) & (mag <= 0x7F800000)  # beyond the limit, not a NaN
    return tl.where(over, ((bits >> 31) << 31) | limit, bits).to(tl.float32, bitcast=True)


@triton.jit
def scaled_saturated(elem, scale, OUT_KIND: tl.constexpr, SPECIALS: tl.constexpr):
    """Dequantized values: element values `elem` times block scales `scale` (fp32, broadcast),
    saturated to OUT_KIND's finite max (saturate), except that an E5M2 Inf code stays Inf."""
    val = elem * scale  # a NaN scale (0xFF): the whole block NaN
    if SPECIALS == 2:
        inf_code = (elem.to(tl.int32, bitcast=True) & 0x7FFFFFFF) == 0x7F800000
        val = tl.where(inf_code, val, saturate(val, OUT_KIND))
    else:
        val = saturate(val, OUT_KIND)
    return val


@triton.jit
def load_fp32(ptrs, mask, IN_KIND: tl.constexpr):
    """Load a tile as fp32. fp32 / bf16 tensors arrive as int32 / int16 views (exact bits)."""
    if IN_KIND == 0:
        x = tl.load(ptrs, mask=mask, other=0).to(tl.float32, bitcast=True)
    elif IN_KIND == 1:
        h = tl.load(ptrs, mask=mask, other=0).to(tl.int32) & 0xFFFF  # zero-extended bits
        x = (h << 16).to(tl.float32, bitcast=True)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def store_fp32(ptrs, f, mask, OUT_KIND: tl.constexpr, HW_CAST: tl.constexpr = False):
    """Store fp32 `f` as the output dtype (RNE): fp32 / bf16 outputs are int32 / int16 views.
    HW_CAST: bf16 by the hardware's RNE convert (GPU), else by integer arithmetic (the CPU
    interpreter's cast truncates)."""
    if OUT_KIND == 0:
        tl.store(ptrs, f.to(tl.int32, bitcast=True), mask=mask)
    elif OUT_KIND == 1:
        if HW_CAST:
            tl.store(ptrs, f.to(tl.bfloat16).to(tl.int16, bitcast=True), mask=mask)
        else:
            tl.store(ptrs, fp32_to_bf16_bits(f), mask=mask)
    else:
        tl.store(ptrs, f.to(tl.float16), mask=mask)


@triton.jit
def tile_ptrs(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """Tile (pid_r, pid_k)'s element pointers [BLOCK_R, BLOCK_K] of a row-major [R, K] tensor,
    their in-bounds mask and the row indices (fp4_lanes.word_tile: of its int32 view too)."""
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < R)[:, None] & (cols < K)[None, :]
    return x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask, rows


@triton.jit
def tile_blocks(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R: tl.constexpr,
                BLOCK_K: tl.constexpr, IN_KIND: tl.constexpr):
    """A [BLOCK_R, BLOCK_K] tile as fp32 [BLOCK_R, NB, 32] blocks (0 past R / K), row indices."""
    NB: tl.constexpr = BLOCK_K // 32
    ptrs, mask, rows = tile_ptrs(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K)
    return tl.reshape(load_fp32(ptrs, mask, IN_KIND), [BLOCK_R, NB, 32]), rows


@triton.jit
def tile_bits(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """`tile_blocks` of a 16-bit tensor's bits (its int16 view), not converted."""
    NB: tl.constexpr = BLOCK_K // 32
    ptrs, mask, rows = tile_ptrs(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R, BLOCK_K)
    return tl.reshape(tl.load(ptrs, mask=mask, other=0), [BLOCK_R, NB, 32]), rows


@triton.jit
def blocks_scaled(x, MBITS: tl.constexpr, EMAX: tl.constexpr, MAXN_MANT: tl.constexpr,
                  MAXN_SUB: tl.constexpr, ROUNDING: tl.constexpr):
    """fp32 blocks [R, NB, 32] -> (x * 2**-E, E [R, NB], non-finite block flags [R, NB]).
    Elementwise steps and one reduction only: Gluon kernels call it too (any layout)."""
    # max |x| as bits: the sign shifted out, an unsigned max (NaN bits sort above Inf's)
    twice = (x.to(tl.int32, bitcast=True) << 1).to(tl.uint32, bitcast=True)
    amax_bits = (tl.max(twice, axis=2) >> 1).to(tl.int32, bitcast=True)
    e, bad = block_exponents(amax_bits, MBITS, EMAX, MAXN_MANT, MAXN_SUB, ROUNDING)
    return x * pow2(-e)[:, :, None], e, bad


@triton.jit
def block_exponents(amax_bits, MBITS: tl.constexpr, EMAX: tl.constexpr,
                    MAXN_MANT: tl.constexpr, MAXN_SUB: tl.constexpr, ROUNDING: tl.constexpr):
    """Blocks' fp32 max |x| bits (int32 [R, NB]; NaN bits above Inf's) -> (E, non-finite
    flags); a non-finite block's E is 0, which keeps its (discarded) arithmetic overflow-free."""
    bad = amax_bits >= 0x7F800000  # a NaN or an Inf in the block
    e = _shared_exponent(amax_bits, EMAX, MBITS, MAXN_MANT, MAXN_SUB, ROUNDING)
    return tl.where(bad, 0, e), bad


@triton.jit
def qdq_blocks(x, IN_KIND: tl.constexpr, MBITS: tl.constexpr, BIAS: tl.constexpr,
               EMAX: tl.constexpr, MAX_NORMAL: tl.constexpr, MAXN_MANT: tl.constexpr,
               MAXN_SUB: tl.constexpr, IS_INT: tl.constexpr, ROUNDING: tl.constexpr):
    """The dynamic MX QDQ of fp32 blocks [R, NB, 32] (x's dtype IN_KIND): each block scaled,
    rounded to the element grid, scaled back; NaN / Inf blocks -> NaN; saturated to the
    dtype's range (a rounded-up scale may pass it: no Inf from finite input). The one copy of
    these steps: mx_quant's QDQ kernel, the fused linear kernels' activation tiles and the
    Gluon wgmma kernel's fused activation QDQ all call it."""
    v, e, bad = blocks_scaled(x, MBITS, EMAX, MAXN_MANT, MAXN_SUB, ROUNDING)
    # rceil scales keep |v| <= max normal: no clamp needed
    val = round_value(v, MBITS, BIAS, MAX_NORMAL, IS_INT, SATURATE=ROUNDING != 2)
    val = val * tl.where(bad, nan_like(e), pow2(e))[:, :, None]
    return saturate(val, IN_KIND)


@triton.jit
def _join4(a0, a1, a2, a3, BLOCK_R: tl.constexpr, N: tl.constexpr):
    """Four [BLOCK_R, N] -> [BLOCK_R, 4N], element 4j + i from a_i[j]."""
    return tl.reshape(tl.join(tl.join(a0, a2), tl.join(a1, a3)), [BLOCK_R, 4 * N])


@triton.jit
def load_codes(data_ptr, stride_d, rows, pid_k, R, K, BITS: tl.constexpr, PACK: tl.constexpr,
               BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, WORD_IO: tl.constexpr = False):
    """Element codes [BLOCK_R, BLOCK_K] (int32) of a tile, unpacked per the layout. WORD_IO
    (PACK 1): 4-byte loads, so a thread holds the 8 codes one 16-byte bf16 store takes
    (packed_codes.FP4_WORD_IO_VERIFIED)."""
    row_ok = (rows < R)[:, None]
    d_row = data_ptr + rows.to(tl.int64)[:, None] * stride_d
    if PACK == 0:
        cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        codes = tl.load(d_row + cols[None, :], mask=row_ok & (cols < K)[None, :], other=0)
        codes = codes.to(tl.int32)  # bits above the code width: ignored by decode
    elif PACK == 1:
        cols = byte_cols(pid_k, BLOCK_K, WORD_IO)
        b = tl.load(d_row + cols[None, :], mask=row_ok & (cols < K // 2)[None, :], other=0)
        b = b.to(tl.int32)
        codes = tl.reshape(tl.join(b & 0xF, b >> 4), [BLOCK_R, BLOCK_K])
    else:
        q = pid_k * (BLOCK_K // 16) + tl.arange(0, BLOCK_K // 16)
        m = row_ok & (q < K // 16)[None, :]
        p = d_row + 3 * q[None, :]
        x0 = tl.load(p, mask=m, other=0)
        x1 = tl.load(p + 1, mask=m, other=0)
        x2 = tl.load(p + 2, mask=m, other=0)
        w = _join4(x0 & 0xFFFFFF, ((x0 >> 24) & 0xFF) | ((x1 & 0xFFFF) << 8),
                   ((x1 >> 16) & 0xFFFF) | ((x2 & 0xFF) << 16), (x2 >> 8) & 0xFFFFFF,
                   BLOCK_R, BLOCK_K // 16)
        codes = _join4(w & 0x3F, (w >> 6) & 0x3F, (w >> 12) & 0x3F, (w >> 18) & 0x3F,
                       BLOCK_R, BLOCK_K // 4)
    return codes
