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
(launcher.rows_aligned; an unaligned view gave wrong bytes on an H100, 2026-12-05).
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

from kernels.triton.mx_codec import encode, pow2, tile_ptrs

FP4_LANES_VERIFIED = True
# The lanes on whole words (`lane_word_asm`, `word_tile`, `lane_bytes`' WORDS): each asm call's
# four words carry their own factors and masks, so its bytes are right in any register layout,
# and rows need only 4-byte alignment (`words_here`). Written 2026-12-05 without a GPU after
# the half-lanes gave wrong bytes on unaligned rows (benchmarks part 29); the PTX runs on the
# CPU model of tests/kernels/triton/test_fp4_lanes.py, the data flow in the interpreter. On a
# GPU: test_quant_unaligned_rows and test_quant_every_value force it on (passed: H100,
# b0d55e4's whole suite). Timed (H100, benchmarks part 32): 58.7-58.8 us against 58.8-58.9 off,
# 8192^2 bf16 (the copy bounds it): no gain, so it stays off.
LANE_WORDS_VERIFIED = False


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


def _word_codes(word: str, factor: str, clamp: bool) -> str:
    """PTX of one word's two elements (low / high half) times its bf16x2 factor: their code
    magnitudes 0..7 in c's byte 0 / byte 2, their signs (bit 3 of each half) in s."""
    body = f"mul.rn.bf16x2 v, {word}, {factor}; and.b32 a, v, 0x7FFF7FFF; "
    if clamp:
        body += "min.bf16x2 a, a, six; "
    return body + ("and.b32 e, a, 0x7F807F80; max.u16x2 e, e, one; add.u32 p, e, 0x03000300; "
                   "add.rn.bf16x2 p, a, p; and.b32 p, p, 0x007F007F; shr.b32 e, e, 6; "
                   "add.u32 c, p, e; sub.u32 c, c, 0x00FE00FE; "  # magnitudes, both halves
                   "shr.b32 s, v, 12; and.b32 s, s, 0x00080008; ")  # signs: bit 3 of a half


_HEAD = ("{ .reg .b32 v, a, e, p, c, s, t, six, one, b0, b1, b2, b3; "
         "mov.b32 six, 0x40C040C0; mov.b32 one, 0x3F803F80; ")


def words_here(pack: int, data_ptr: int, row_stride: int) -> bool:
    """Whether a lanes quantize of bf16 rows at `data_ptr`, `row_stride` elements apart, into
    layout code `pack` takes whole words: the gate, packed mxfp4 (pack 1: one code a byte on
    words took 399 SASS a thread against the half-lanes' 341, sm_90a), rows 4-byte aligned."""
    return LANE_WORDS_VERIFIED and pack == 1 and data_ptr % 4 == 0 and row_stride % 2 == 0


def lane_asm(clamp: bool, packed: bool = True) -> str:
    """PTX of one asm call: $2..$5 four words of two bf16 elements each (elements 2k, 2k + 1
    in word k's low / high half), $6 the bf16x2 factor 2**-E (of eight copies $6..$13), $14
    the keep mask (0 for a NaN / Inf block; $14..$21) -> $0 / $1 the bytes of elements 0..3 /
    4..7: `packed`, the packed code bytes, each twice (module docstring); else each element's
    code. `clamp`: min(|v|, 6) first."""
    body = _HEAD
    for k in range(4):
        body += _word_codes(f"${2 + k}", "$6", clamp)
        if packed:  # low byte: element 2k | element 2k + 1 << 4
            body += f"or.b32 c, c, s; shr.b32 t, c, 12; or.b32 b{k}, c, t; "
        else:  # element 2k in byte 0, 2k + 1 in byte 2
            body += f"or.b32 b{k}, c, s; "
    sel = "0x4400" if packed else "0x6420"
    return body + (f"prmt.b32 b0, b0, b1, {sel}; prmt.b32 b2, b2, b3, {sel}; "
                   "and.b32 $0, b0, $14; and.b32 $1, b2, $14; }")


def lane_word_asm(clamp: bool) -> str:
    """PTX of one asm call on whole words (`lane_bytes`' WORDS): four words, each with its own
    factor and keep mask, so the call's four may come from any blocks, rows or columns (the
    words a thread's registers hold in whatever layout Triton picks): $1..$4 words, $5..$8
    factors, $9..$12 keep masks -> $0: word k's packed mxfp4 byte in byte k."""
    body = _HEAD
    for k in range(4):  # byte 0 of b_k: element 2k | element 2k + 1 << 4
        body += _word_codes(f"${1 + k}", f"${5 + k}", clamp)
        body += (f"or.b32 c, c, s; shr.b32 t, c, 12; or.b32 b{k}, c, t; "
                 f"and.b32 b{k}, b{k}, ${9 + k}; ")
    return body + ("prmt.b32 c, b0, b1, 0x0040; prmt.b32 t, b2, b3, 0x0040; "
                   "prmt.b32 $0, c, t, 0x5410; }")


_LANES = tl.constexpr(lane_asm(clamp=False))
_LANES_CLAMP = tl.constexpr(lane_asm(clamp=True))
_LANES_CODES = tl.constexpr(lane_asm(clamp=False, packed=False))
_LANES_CODES_CLAMP = tl.constexpr(lane_asm(clamp=True, packed=False))


@triton.jit
def _asm_lanes(h, factor, keep, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(
        ASM_TEXT, "=r,=r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r,r", [h, factor, keep],
        dtype=tl.uint8, is_pure=True, pack=8)


_WORDS = tl.constexpr(lane_word_asm(clamp=False))
_WORDS_CLAMP = tl.constexpr(lane_word_asm(clamp=True))


@triton.jit
def _asm_word_bytes(w, factor, keep, ASM_TEXT: tl.constexpr):
    return tl.inline_asm_elementwise(ASM_TEXT, "=r,r,r,r,r,r,r,r,r,r,r,r,r", [w, factor, keep],
                                     dtype=tl.uint8, is_pure=True, pack=4)


@triton.jit
def word_tile(x_ptr, stride_x, R, K, pid_r, pid_k, BLOCK_R: tl.constexpr,
              BLOCK_K: tl.constexpr):
    """A bf16 tile (x_ptr: its int16 view; 4-byte aligned rows, `words_here`) as int32 words
    [BLOCK_R, NB, 16] (elements 2i / 2i + 1 in word i's low / high half; 0 past R / K), its
    blocks' max |x| as fp32 bits [BLOCK_R, NB] (NaN's above Inf's, as mx_codec.block_exponents
    takes them), and its row indices."""
    NB: tl.constexpr = BLOCK_K // 32
    ptrs, mask, rows = tile_ptrs(x_ptr.to(tl.pointer_type(tl.int32), bitcast=True),
                                 stride_x // 2, R, K // 2, pid_r, pid_k, BLOCK_R, BLOCK_K // 2)
    w = tl.reshape(tl.load(ptrs, mask=mask, other=0), [BLOCK_R, NB, 16])
    amax = tl.maximum(tl.max(w & 0x7FFF, axis=2), tl.max((w >> 16) & 0x7FFF, axis=2))
    return w, amax << 16, rows


@triton.jit
def lane_bytes(h, e, bad, CLAMP: tl.constexpr, PACKED: tl.constexpr, ASM: tl.constexpr,
               WORDS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """bf16 bits `h` (int16 [BLOCK_R, NB, 32]; WORDS: `word_tile`'s int32 [BLOCK_R, NB, 16]),
    their blocks' shared exponents E and non-finite flags [BLOCK_R, NB]
    (mx_codec.block_exponents) -> PACKED: the packed mxfp4 bytes uint8 [BLOCK_R, BLOCK_K // 2];
    else each element's code, uint8 [BLOCK_R, BLOCK_K] (a NaN / Inf block's 0; WORDS: PACKED
    only). CLAMP: the scales may leave |x * 2**-E| above 6 (floor rounding)."""
    tl.static_assert(PACKED or not WORDS, "the lanes' whole words write packed mxfp4 only")
    if ASM:
        f = (127 - e) << 7  # bf16 2**-E: E in [-127, 126] for bf16 input (module docstring)
        factor = tl.broadcast_to((f | (f << 16))[:, :, None], h.shape)
        keep = tl.broadcast_to(tl.where(bad, 0, -1)[:, :, None], h.shape)
        if WORDS:  # each word its own factor and mask: any four words an asm call
            if CLAMP:
                byte = _asm_word_bytes(h, factor, keep, _WORDS_CLAMP)
            else:
                byte = _asm_word_bytes(h, factor, keep, _WORDS)
            return tl.reshape(byte, [BLOCK_R, BLOCK_K // 2])
        elif PACKED:
            if CLAMP:
                out = _asm_lanes(h, factor, keep, _LANES_CLAMP)
            else:
                out = _asm_lanes(h, factor, keep, _LANES)
            byte, _ = tl.split(tl.reshape(out, [BLOCK_R, BLOCK_K // 2, 2]))
            return byte
        else:
            if CLAMP:
                out = _asm_lanes(h, factor, keep, _LANES_CODES_CLAMP)
            else:
                out = _asm_lanes(h, factor, keep, _LANES_CODES)
            return tl.reshape(out, [BLOCK_R, BLOCK_K])
    else:  # the interpreter's twin: `encode` of each element
        scale = pow2(-e)[:, :, None]
        if WORDS:
            lo = _codes((h & 0xFFFF) << 16, scale, bad, CLAMP)
            hi = _codes((h >> 16) << 16, scale, bad, CLAMP)
        else:
            codes = tl.reshape(_codes((h.to(tl.int32) & 0xFFFF) << 16, scale, bad, CLAMP),
                               [BLOCK_R, BLOCK_K // 2, 2])
            lo, hi = tl.split(codes)
        if PACKED:
            return tl.reshape((lo | (hi << 4)).to(tl.uint8), [BLOCK_R, BLOCK_K // 2])
        else:
            return tl.reshape(tl.join(lo, hi), [BLOCK_R, BLOCK_K]).to(tl.uint8)


@triton.jit
def _codes(bits, scale, bad, CLAMP: tl.constexpr):
    """mxfp4 codes of fp32 `bits` times their block's 2**-E (a NaN / Inf block's 0)."""
    codes = encode(bits.to(tl.float32, bitcast=True) * scale, 1, 1, 6.0, 4, False,
                   SATURATE=CLAMP)
    return tl.where(bad[:, :, None], 0, codes)


__all__ = ["FP4_LANES_VERIFIED", "LANE_WORDS_VERIFIED", "lane_asm", "lane_bytes",
           "lane_word_asm", "lanes_fit", "lanes_here", "word_tile", "words_here"]
