"""mxfp4 quantize of bf16 input on bf16x2 lanes (sm_90): two elements an instruction.
Packed layout (two codes a byte) and one code a byte alike.

Why: the quantize kernel turns each bf16 element into fp32 and rounds it with fp32 "magic
number" adds (mx_codec.encode): 20.8 SASS instructions an element for packed mxfp4 (sm_90a),
which keep the kernel at 70 % of the copy bandwidth (issue 16 asks 85 %; docs/benchmarks.md
part 19: bound by instruction issue). bf16 input needs no fp32 at all: x * 2**-E is exact in
bf16 (a power of two; a result under bf16's normal range is far below the smallest code), and
the same magic-number rounding works in bf16 with 7 mantissa bits in place of 23 — sm_90 has
bf16x2 multiply / add / min and 16-bit-lane integer max, so each step serves two elements.

Steps for a 32-bit word of two elements (`lane_asm`), with F = bf16x2 2**-E of their block:
  v = w * F; a = min(|v|, 6) (floor scales only: `even` and `rceil` keep |v| under 7);
  e = max(a's exponent bits, 1.0's): the binade, 1.0 for the element subnormals;
  p = a + 2**(binade + 6) (e + 6 << 7): bf16's ulp there is the element quantum, so the add
      rounds to nearest even; p's mantissa field n counts quanta;
  code = n + 2 * (binade - 0) = n + (e >> 6) - 254 (the element exponent field, doubled, plus
      the mantissa step: n in 0..4 below 2, 2..4 in [2, 4), 2..3 in [4, 6]), sign from v.
The rounded value is never formed, so no bf16 subnormal arises. Eight elements (four words) an
asm call: their four code bytes (element 2i in the low nibble), each byte twice (elements 2i
and 2i + 1 get byte i), so the kernel's pair split picks them as it picks `encode`'s.

The pairs are a thread's consecutive registers, K-neighbours only in the 16-byte vector layout
Triton picks where it proves the rows aligned: quantize takes the lanes there alone
(mx_quant.rows_16_byte_provable; an unaligned view gave wrong bytes on an H100, 2026-12-05).
In the interpreter (no PTX) the same bytes come from `encode` (`lane_bytes`' twin).
FP4_LANES_VERIFIED gates the path on a GPU: written 2026-12-05 without a GPU (compiled for
sm_90a offline: tests/kernels/triton/test_fp4_lanes.py runs the PTX on a CPU model against the
reference's codes); on since 2026-12-05: its GPU tests (the `hw cvt` cases, every bf16 value
and NaN / Inf / subnormal blocks included) passed in whole-suite runs on an H100 (sm_90), and
tools/bench_quant.py timed packed mxfp4 quantize at 60.3 against 61.8 us (graph, 8192^2;
docs/benchmarks.md part 21).
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.triton.mx_codec import encode, pow2

FP4_LANES_VERIFIED = True


def lanes_fit(fmt_name: str, in_kind: int, pack: int) -> bool:
    """Whether the lanes compute this quantize at all: mxfp4 (packed or one code a byte: pack
    1 / 0) of bf16 input (in_kind 1). (tools/sass_quant.py compiles them where they fit.)"""
    return fmt_name == "mxfp4" and in_kind == 1 and pack in (0, 1)


def lanes_here(fmt_name: str, in_kind: int, pack: int, interpreted: bool,
               sm: int | None) -> bool:
    """Whether a quantize launch takes the lanes: they fit (`lanes_fit`), the gate is on, and
    (compiled) sm_90 or later (bf16x2 add / min, u16x2 max)."""
    if not (FP4_LANES_VERIFIED and lanes_fit(fmt_name, in_kind, pack)):
        return False
    return interpreted or (sm is not None and sm >= 90)


def lane_asm(clamp: bool, packed: bool = True) -> str:
    """PTX of one asm call: $2..$5 four words of two bf16 elements each (elements 2k, 2k + 1
    in word k's low / high half), $6 the bf16x2 factor 2**-E (of eight copies $6..$13), $14
    the keep mask (0 for a NaN / Inf block; $14..$21) -> $0 / $1 the bytes of elements 0..3 /
    4..7: `packed`, the packed code bytes, each twice (module docstring); else each element's
    code. `clamp`: min(|v|, 6) first."""
    body = ("{ .reg .b32 v, a, e, p, c, s, t, six, one, b0, b1, b2, b3; "
            "mov.b32 six, 0x40C040C0; mov.b32 one, 0x3F803F80; ")
    for k in range(4):
        body += f"mul.rn.bf16x2 v, ${2 + k}, $6; and.b32 a, v, 0x7FFF7FFF; "
        if clamp:
            body += "min.bf16x2 a, a, six; "
        body += ("and.b32 e, a, 0x7F807F80; max.u16x2 e, e, one; add.u32 p, e, 0x03000300; "
                 "add.rn.bf16x2 p, a, p; and.b32 p, p, 0x007F007F; shr.b32 e, e, 6; "
                 "add.u32 c, p, e; sub.u32 c, c, 0x00FE00FE; "  # magnitudes 0..7, both halves
                 "shr.b32 s, v, 12; and.b32 s, s, 0x00080008; ")  # signs: bit 3 of a half
        if packed:  # low byte: element 2k | element 2k + 1 << 4
            body += f"or.b32 c, c, s; shr.b32 t, c, 12; or.b32 b{k}, c, t; "
        else:  # element 2k in byte 0, 2k + 1 in byte 2
            body += f"or.b32 b{k}, c, s; "
    sel = "0x4400" if packed else "0x6420"
    return body + (f"prmt.b32 b0, b0, b1, {sel}; prmt.b32 b2, b2, b3, {sel}; "
                   "and.b32 $0, b0, $14; and.b32 $1, b2, $14; }")


_LANES = tl.constexpr(lane_asm(clamp=False))
_LANES_CLAMP = tl.constexpr(lane_asm(clamp=True))
_LANES_CODES = tl.constexpr(lane_asm(clamp=False, packed=False))
_LANES_CODES_CLAMP = tl.constexpr(lane_asm(clamp=True, packed=False))


@triton.jit
def _asm_lanes(h, factor, keep, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(
        ASM_TEXT, "=r,=r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r", [h, factor, keep],
        dtype=tl.uint8, is_pure=True, pack=8)


@triton.jit
def lane_bytes(h, e, bad, CLAMP: tl.constexpr, PACKED: tl.constexpr, ASM: tl.constexpr,
               BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """bf16 bits `h` (int16 [BLOCK_R, NB, 32]), their blocks' shared exponents E and non-finite
    flags [BLOCK_R, NB] (mx_codec.block_exponents) -> uint8 [BLOCK_R, BLOCK_K] (a NaN / Inf
    block's 0): PACKED, elements 2i and 2i + 1 both hold packed mxfp4 byte i; else each
    element's code. CLAMP: the scales may leave |x * 2**-E| above 6 (floor rounding)."""
    if ASM:
        f = (127 - e) << 7  # bf16 2**-E: E in [-127, 126] for bf16 input (module docstring)
        factor = tl.broadcast_to((f | (f << 16))[:, :, None], h.shape)
        keep = tl.broadcast_to(tl.where(bad, 0, -1)[:, :, None], h.shape)
        if PACKED:
            if CLAMP:
                out = _asm_lanes(h, factor, keep, _LANES_CLAMP)
            else:
                out = _asm_lanes(h, factor, keep, _LANES)
        else:
            if CLAMP:
                out = _asm_lanes(h, factor, keep, _LANES_CODES_CLAMP)
            else:
                out = _asm_lanes(h, factor, keep, _LANES_CODES)
        return tl.reshape(out, [BLOCK_R, BLOCK_K])
    else:
        x = ((h.to(tl.int32) & 0xFFFF) << 16).to(tl.float32, bitcast=True)
        codes = encode(x * pow2(-e)[:, :, None], 1, 1, 6.0, 4, False, SATURATE=CLAMP)
        codes = tl.reshape(tl.where(bad[:, :, None], 0, codes), [BLOCK_R, BLOCK_K])
        if PACKED:
            lo, hi = tl.split(tl.reshape(codes, [BLOCK_R, BLOCK_K // 2, 2]))
            byte = (lo | (hi << 4)).to(tl.uint8)
            return tl.reshape(tl.join(byte, byte), [BLOCK_R, BLOCK_K])
        else:
            return codes.to(tl.uint8)


__all__ = ["FP4_LANES_VERIFIED", "lane_asm", "lane_bytes", "lanes_fit", "lanes_here"]
