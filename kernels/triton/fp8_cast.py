"""MX element codes through the GPU's fp8 conversion (`cvt.rn.satfinite.{e4m3,e5m2}x2.f32`,
sm_89 and later): the quantize kernel's element rounding for mxfp8 and mxfp6.

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
tests/kernels/triton/test_fp8_cast.py (a model of the instruction runs the PTX) and against the
reference on the GPU.

CVT_VERIFIED gates the path on a GPU as linear_wgmma's gates do: written 2026-12-05 without a
GPU (compiled for sm_90a offline); switched on once its GPU tests pass in a whole-suite H200
run, and kept only where tools/bench_quant.py measures it faster.
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.spec.formats import ElemFormat
from kernels.triton.mx_codec import encode

CVT_VERIFIED = False

# fp8 formats the conversion targets: name -> (kernel code CVT, mantissa bits, bias, max finite)
CARRIERS: dict[str, tuple[int, int, int, float]] = {
    "e4m3": (1, 3, 7, 448.0),
    "e5m2": (2, 2, 15, 57344.0),
}


def carrier(fmt: ElemFormat) -> tuple[int, int]:
    """(CVT, SHIFT) of `fmt`: CVT 1 / 2 converts through fp8 e4m3 / e5m2 after scaling by
    2**-SHIFT; (0, 0): the format keeps `encode` (mxfp4, mxint8). Read from the formats' fields:
    the fp8 format of the same mantissa width, whose bias is not smaller."""
    if fmt.is_int:
        return 0, 0
    for code, mbits, bias, _ in CARRIERS.values():
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


def cvt_here(fmt: ElemFormat, interpreted: bool, sm: int | None) -> int:
    """The CVT code a quantize launch uses now: the format's carrier where the gate is on and
    (compiled) the GPU converts to fp8 (CUDA sm_89+: `sm` 89 or more; None off CUDA); in the
    interpreter the gate alone decides."""
    if not CVT_VERIFIED:
        return 0
    if not interpreted and (sm is None or sm < 89):
        return 0
    return carrier(fmt)[0]


def cvt_asm(fp8: str, out: str) -> str:
    """PTX of one asm call: values $4..$7 (groups: $4..$7, bytes: $1..$4), a keep mask (0 for a
    NaN / Inf block, else all ones) after them -> `out`:
    'bytes': $0 the four fp8 bytes (value j in byte j);
    'fp6 bytes': the same with each sign moved from bit 7 to bit 5 (mxfp6 codes);
    'fp6 groups': $0 the 24-bit group c0 | c1 << 6 | c2 << 12 | c3 << 18 of those codes, $1..$3
    zero (so that fp6_store.pack4 of the four outputs is the group)."""
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


_E4M3_BYTES = tl.constexpr(cvt_asm("e4m3", "bytes"))
_E5M2_BYTES = tl.constexpr(cvt_asm("e5m2", "bytes"))
_E2M3_BYTES = tl.constexpr(cvt_asm("e4m3", "fp6 bytes"))
_E3M2_BYTES = tl.constexpr(cvt_asm("e5m2", "fp6 bytes"))
_E2M3_GROUPS = tl.constexpr(cvt_asm("e4m3", "fp6 groups"))
_E3M2_GROUPS = tl.constexpr(cvt_asm("e5m2", "fp6 groups"))


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
    fp6_store.pack4 is each four codes' 24-bit group. The block's factor 2**(-E - SHIFT) is one
    multiply (exact: a power of two; a product below fp32's normal range is far below the
    smallest code). CLAMP: `clamp_of`'s bound, or 0.0."""
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


__all__ = ["CARRIERS", "CVT_VERIFIED", "carrier", "clamp_of", "cvt_asm", "cvt_codes",
           "cvt_here", "pow2_wide"]
