"""MX codes and values through the GPU's conversion instructions (sm_89 and later): the
quantize kernel's element rounding for mxfp8 and mxfp6 (`cvt.rn.satfinite.{e4m3,e5m2}x2.f32`),
the dequantize kernel's way back (`cvt.rn.f16x2.{e4m3,e5m2}x2`) and its saturating store
(`cvt.rn.satfinite.{bf16,f16}x2.f32`).

Why: the quantize kernel rounds an element with fp32 "magic number" adds (mx_codec.encode), most
of its 19-23 SASS instructions an element (sm_90a), and it runs at 67-84 % of the copy
bandwidth for these formats (issue 16 asks 85 %). One cvt rounds two fp32 values to nearest
even and saturates at the fp8 format's max finite value (docs/benchmarks.md part 20: 19.0 ->
9.0 instructions an element for mxfp8, 19.0 / 23.1 -> 10.4 / 16.4 for mxfp6 unpacked / packed).
- mxfp8 e4m3 / e5m2 are fp8 e4m3fn / e5m2 with the same rounding and saturation: the byte is
  the code.
- mxfp6 takes the fp8 format of its mantissa width, shifted: the e2m3 grid (bias 1) times 2**-6
  is exactly the e4m3 grid (bias 7) on [0, 7.5 * 2**-6], subnormals included; e3m2 (bias 3)
  times 2**-12 is e5m2's (bias 15) on [0, 28 * 2**-12]. So rounding v * 2**-shift to fp8,
  clamped at the mxfp6 max first where |v| can pass it (`clamp_of`), is the mxfp6 rounding of
  v, and its byte is the mxfp6 code with the sign moved from bit 7 to bit 5 (the exponent
  fields agree: bias_fp8 - bias = shift). The shift rides on the block's scale factor.
mxfp4 has no fp8 format of one mantissa bit on sm_90 (e2m1 conversion is sm_100's) and mxint8
is an integer: both keep `encode`.

On a GPU the codes come from PTX (`cvt_asm`: four values an asm call, their four bytes in one
register); in the interpreter, whose fp8 casts do not round to nearest even, from `encode` with
the fp8 format's constants: the same bytes, checked against each other on the CPU by
tests/kernels/triton/test_hw_cvt.py (a model of the instruction runs the PTX) and against the
reference on the GPU.

Dequantize: an fp8 byte (an mxfp6 code with its sign moved back) becomes f16 in one instruction
(e4m3 / e5m2 values are all f16 values), then fp32 (times 2**shift for mxfp6, exact in f16),
times the block scale; where no code is an Inf (all formats but e5m2) a bf16 / fp16 output is
saturated and rounded by one satfinite conversion, in place of mx_codec.saturate's integer
compares (mxfp4 and mxint8 take that store too). Offline (sm_90a, bf16 out; docs/benchmarks.md
part 20): e4m3 19.4 -> 7.1 instructions an element, e5m2 22.6 -> 14.0, mxfp6 unpacked / packed
16.1 / 15.6 -> 8.3 / 11.6, mxfp4 16.1 / 14.9 -> 11.2 / 9.9, mxint8 15.5 -> 10.6.

CVT_VERIFIED gates the path on a GPU as linear_wgmma's gates do: written 2026-12-05 without a
GPU (compiled for sm_90a offline); on since 2026-12-05: its GPU tests passed in whole-suite runs
on an H100 (sm_90), and tools/bench_quant.py timed dequantize faster (graph, 8192^2: e4m3 81.8
-> 75.1 us, e5m2 89.4 -> 75.2, unpacked mxfp4 77.0 -> 75.0) and quantize the same within
0.5 us (docs/benchmarks.md part 21).
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.spec.formats import ElemFormat
from kernels.triton.mx_codec import decode, encode

CVT_VERIFIED = True

# fp8 formats the conversion targets: name -> (kernel code CVT, mantissa bits, bias); the
# interpreter paths of cvt_codes / cvt_values hold the same facts as constexprs
CARRIERS: dict[str, tuple[int, int, int]] = {
    "e4m3": (1, 3, 7),
    "e5m2": (2, 2, 15),
}


def carrier(fmt: ElemFormat) -> tuple[int, int]:
    """(CVT, SHIFT) of `fmt`: CVT 1 / 2 converts through fp8 e4m3 / e5m2 after scaling by
    2**-SHIFT; (0, 0): the format keeps `encode` (mxfp4, mxint8). Read from the formats' fields:
    the fp8 format of the same mantissa width, whose bias is not smaller."""
    if fmt.is_int:
        return 0, 0
    for code, mbits, bias in CARRIERS.values():
        if mbits == fmt.mbits and bias >= fmt.bias:
            return code, bias - fmt.bias
    return 0, 0


def clamp_of(fmt: ElemFormat, shift: int, rounding: str) -> float:
    """The clamp (scaled: max normal * 2**-shift) the values need before an mxfp6 conversion;
    0.0: none. fp8 saturates at its own max (mxfp8: none). An mxfp6 value passes its max normal
    only with `floor` scales: with `rceil` it cannot, and with `even` the largest value of a
    block is under 2**emax * (2 - 2**-(mbits + 1)), which rounds to at most the max normal when
    that max's mantissa is all ones (e2m3's 7.5, e3m2's 28)."""
    if not shift or rounding == "rceil":
        return 0.0
    all_ones = fmt.max_normal == (2.0 - 2.0 ** -fmt.mbits) * 2.0 ** fmt.emax
    if rounding == "even" and all_ones:
        return 0.0
    return fmt.max_normal * 2.0 ** -shift


def enabled(interpreted: bool, sm: int | None) -> bool:
    """Whether launches made now take these paths: the gate, and (compiled) a GPU with the
    conversions (CUDA sm_89+: `sm` 89 or more; None off CUDA); in the interpreter (the PTX's
    twins) the gate alone decides."""
    return CVT_VERIFIED and (interpreted or (sm is not None and sm >= 89))


def cvt_here(fmt: ElemFormat, interpreted: bool, sm: int | None) -> int:
    """The CVT code a quantize / dequantize launch uses now: the format's carrier, where
    `enabled`; else 0."""
    return carrier(fmt)[0] if enabled(interpreted, sm) else 0


def sat_cast_fits(fmt: ElemFormat, out_kind: int) -> bool:
    """Whether `satfinite_cast` stores this dequantize's output exactly: a bf16 / fp16 output
    (out_kind 1 / 2) of a format without Inf codes (all but e5m2, whose Inf codes stay Inf
    where saturation would make them +-max). (tools/sass_quant.py compiles it where it fits.)"""
    return out_kind != 0 and fmt.specials != "ieee"


def sat_cast_here(fmt: ElemFormat, out_kind: int, interpreted: bool, sm: int | None) -> bool:
    """Whether a dequantize launch stores through `satfinite_cast`: compiled and `enabled`,
    where it fits (`sat_cast_fits`)."""
    return not interpreted and enabled(interpreted, sm) and sat_cast_fits(fmt, out_kind)


def cvt_asm(fp8: str, out: str) -> str:
    """PTX of one asm call: four fp32 values, then four copies of their block's keep mask (0 for
    a NaN / Inf block, else all ones; the first is read), as operands after the outputs ($1..
    for one output, $4.. for 'fp6 groups'' four) -> `out`:
    'bytes': $0 the four fp8 bytes (value j in byte j);
    'fp6 bytes': the same with each sign moved from bit 7 to bit 5 (mxfp6 codes);
    'fp6 groups': $0 the 24-bit group c0 | c1 << 6 | c2 << 12 | c3 << 18 of those codes, $1..$3
    zero (so that packed_codes.pack4 of the four outputs is the group)."""
    ins = 4 if out == "fp6 groups" else 1
    a = [f"${ins + j}" for j in range(5)]
    cvt = f"cvt.rn.satfinite.{fp8}x2.f32"
    body = (f"{{ .reg .b16 lo, hi; .reg .b32 w, t, g; {cvt} lo, {a[1]}, {a[0]}; "
            f"{cvt} hi, {a[3]}, {a[2]}; mov.b32 w, {{lo, hi}}; and.b32 w, w, {a[4]}; ")
    if out == "bytes":
        return body + "mov.b32 $0, w; }"
    if out == "fp6 bytes":
        return body + ("and.b32 g, w, 0x1F1F1F1F; shr.b32 t, w, 2; and.b32 t, t, 0x20202020; "
                       "or.b32 $0, g, t; }")
    # byte k = sign << 7 | magnitude (5 bits): the magnitude goes to bit 6k, the sign to 6k + 5,
    # so one right shift by 2k serves byte k's magnitude and byte k - 1's sign
    steps = "and.b32 g, w, 0x1F; "
    for k, mask in ((1, 0x7E0), (2, 0x1F800), (3, 0x7E0000), (4, 0x800000)):
        steps += f"shr.b32 t, w, {2 * k}; and.b32 t, t, {mask:#x}; or.b32 g, g, t; "
    return body + steps + "mov.b32 $0, g; mov.b32 $1, 0; mov.b32 $2, 0; mov.b32 $3, 0; }"


def cvt_back_asm(fp8: str, shift: int) -> str:
    """PTX of one asm call of the way back (dequantize): $4 four codes a byte (code j in byte
    j) -> $0..$3 their fp32 values. shift > 0 (mxfp6): each code's sign moves from bit 5 to
    bit 7 (the fp8 byte), and the f16 values are times 2**shift (exact)."""
    fix = ""
    if shift:
        fix = ("and.b32 t, $4, 0x20202020; shl.b32 t, t, 2; and.b32 w, $4, 0x1F1F1F1F; "
               "or.b32 w, w, t; ")
    scale = ""
    if shift:
        half = (15 + shift) << 10  # f16 2**shift
        scale = (f"mov.b32 t, {half | half << 16:#010x}; mul.rn.f16x2 f, f, t; "
                 "mul.rn.f16x2 g, g, t; ")
    src = "w" if shift else "$4"
    return ("{ .reg .b16 l, h, a, b, c, d; .reg .b32 w, t, f, g; " + fix
            + f"mov.b32 {{l, h}}, {src}; cvt.rn.f16x2.{fp8}x2 f, l; cvt.rn.f16x2.{fp8}x2 g, h; "
            + scale + "mov.b32 {a, b}, f; mov.b32 {c, d}, g; cvt.f32.f16 $0, a; "
            "cvt.f32.f16 $1, b; cvt.f32.f16 $2, c; cvt.f32.f16 $3, d; }")


_E4M3_BYTES = tl.constexpr(cvt_asm("e4m3", "bytes"))
_E5M2_BYTES = tl.constexpr(cvt_asm("e5m2", "bytes"))
_E2M3_BYTES = tl.constexpr(cvt_asm("e4m3", "fp6 bytes"))
_E3M2_BYTES = tl.constexpr(cvt_asm("e5m2", "fp6 bytes"))
_E2M3_GROUPS = tl.constexpr(cvt_asm("e4m3", "fp6 groups"))
_E3M2_GROUPS = tl.constexpr(cvt_asm("e5m2", "fp6 groups"))
_FROM_E4M3 = tl.constexpr(cvt_back_asm("e4m3", 0))
_FROM_E5M2 = tl.constexpr(cvt_back_asm("e5m2", 0))
_FROM_E2M3 = tl.constexpr(cvt_back_asm("e4m3", 6))
_FROM_E3M2 = tl.constexpr(cvt_back_asm("e5m2", 12))
_TO_BF16 = tl.constexpr("cvt.rn.satfinite.bf16x2.f32 $0, $2, $1;")  # $0 = {hi: $2, lo: $1}
_TO_F16 = tl.constexpr("cvt.rn.satfinite.f16x2.f32 $0, $2, $1;")


@triton.jit
def pow2_wide(e):
    """fp32 2**e for int32 e in [-149, 127] (below -126 an fp32 subnormal; mx_codec.pow2 stops
    at -127, and a block's 2**(-E - SHIFT) reaches -139)."""
    bits = tl.where(e > -127, (e + 127) << 23, 1 << tl.minimum(e + 149, 22))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _asm_bytes(v, keep, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(ASM_TEXT, "=r,r,r,r,r,r,r,r,r", [v, keep], dtype=tl.uint8,
                                     is_pure=True, pack=4)


@triton.jit
def _asm_groups(v, keep, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(ASM_TEXT, "=r,=r,=r,=r,r,r,r,r,r,r,r,r", [v, keep],
                                     dtype=tl.int32, is_pure=True, pack=4)


@triton.jit
def cvt_codes(x, e, bad, CVT: tl.constexpr, SHIFT: tl.constexpr, CLAMP: tl.constexpr,
              ASM: tl.constexpr, GROUPS: tl.constexpr):
    """fp32 blocks [R, NB, 32], their shared exponents E and non-finite flags [R, NB]
    (mx_codec.blocks_scaled) -> the codes of x * 2**-E through fp8 CVT (1 e4m3, 2 e5m2): uint8
    codes [R, NB, 32] (a NaN / Inf block's 0), or with GROUPS (packed mxfp6) int32 parts whose
    packed_codes.pack4 is each four codes' 24-bit group (the PTX's groups are a thread's
    consecutive registers: ASM only where launcher.rows_aligned). The block's factor
    2**(-E - SHIFT) is one multiply (exact: a power of two; a product below fp32's normal range
    is far below the smallest code). CLAMP: `clamp_of`'s bound, or 0.0."""
    v = x * pow2_wide(-e - SHIFT)[:, :, None]
    if CLAMP != 0.0:
        v = tl.minimum(tl.maximum(v, -CLAMP), CLAMP)
    if ASM:
        keep = tl.broadcast_to(tl.where(bad, 0, -1)[:, :, None], v.shape)
        if GROUPS:
            if CVT == 1:
                return _asm_groups(v, keep, _E2M3_GROUPS)
            else:
                return _asm_groups(v, keep, _E3M2_GROUPS)
        elif SHIFT == 0:
            if CVT == 1:
                return _asm_bytes(v, keep, _E4M3_BYTES)
            else:
                return _asm_bytes(v, keep, _E5M2_BYTES)
        else:
            if CVT == 1:
                return _asm_bytes(v, keep, _E2M3_BYTES)
            else:
                return _asm_bytes(v, keep, _E3M2_BYTES)
    else:
        MB: tl.constexpr = 3 if CVT == 1 else 2
        BI: tl.constexpr = 7 if CVT == 1 else 15
        MX: tl.constexpr = 448.0 if CVT == 1 else 57344.0
        c = encode(v, MB, BI, MX, 8, False)
        if SHIFT != 0:
            c = (c & 0x1F) | ((c >> 2) & 0x20)
        c = tl.where(bad[:, :, None], 0, c)
        if GROUPS:
            return c
        else:
            return c.to(tl.uint8)


@triton.jit
def _asm_values(codes, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(ASM_TEXT, "=r,=r,=r,=r,r", [codes], dtype=tl.float32,
                                     is_pure=True, pack=4)


@triton.jit
def cvt_values(codes, CVT: tl.constexpr, SHIFT: tl.constexpr, ASM: tl.constexpr):
    """uint8 element codes (any shape, the last axis a multiple of 4) -> their fp32 values, as
    mx_codec.decode gives them (an e4m3 NaN code NaN, e5m2 Inf / NaN codes Inf / NaN), through
    the fp8 -> f16 conversion of CVT (1 e4m3, 2 e5m2); mxfp6 codes (SHIFT > 0) as the fp8 byte
    of their value times 2**-SHIFT."""
    if ASM:
        if SHIFT == 0:
            if CVT == 1:
                return _asm_values(codes, _FROM_E4M3)
            else:
                return _asm_values(codes, _FROM_E5M2)
        else:
            if CVT == 1:
                return _asm_values(codes, _FROM_E2M3)
            else:
                return _asm_values(codes, _FROM_E3M2)
    else:
        MB: tl.constexpr = 3 if CVT == 1 else 2
        BI: tl.constexpr = 7 if CVT == 1 else 15
        b = codes.to(tl.int32)
        if SHIFT != 0:
            b = (b & 0x1F) | ((b & 0x20) << 2)
        SP: tl.constexpr = 1 if CVT == 1 else 2  # e4m3's NaN code; e5m2's Inf / NaN codes
        val = decode(b, MB, BI, 8, False, SP)
        if SHIFT != 0:
            val = val * (2.0 ** SHIFT)
        return val


@triton.jit
def satfinite_cast(f, OUT_KIND: tl.constexpr):
    """fp32 `f` as the dequantize kernel stores it, bf16 (OUT_KIND 1: int16 bits, the output's
    view) or fp16 (2): rounded to nearest even, a finite value past the max or an Inf -> +-max,
    NaN -> NaN, as mx_codec.saturate and the cast give them (two values an instruction)."""
    if OUT_KIND == 1:
        return tl.inline_asm_elementwise(_TO_BF16, "=r,r,r", [f], dtype=tl.int16, is_pure=True,
                                         pack=2)
    else:
        return tl.inline_asm_elementwise(_TO_F16, "=r,r,r", [f], dtype=tl.float16,
                                         is_pure=True, pack=2)


__all__ = ["CARRIERS", "CVT_VERIFIED", "carrier", "clamp_of", "cvt_asm", "cvt_back_asm",
           "cvt_codes", "cvt_here", "cvt_values", "enabled", "pow2_wide", "sat_cast_fits",
           "sat_cast_here",
           "satfinite_cast"]
