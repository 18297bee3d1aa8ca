"""The MX quantize tile with whole 32-element blocks per thread (mx_quant._quantize_kernel).

Why: the quantize kernels are bound by instruction issue on an H200, not by DRAM. A block is
loaded as its four 8-column chunks by four loads of one [R, N, 8] shape (chunk c of every
block: columns blk * 32 + 8c + [0, 8)), so one thread holds all 32 elements of a block: the
block max is a thread-local max (no warp shuffles) and the shared exponent, scale byte, NaN /
Inf flag and masks are computed once a block, not in each of the threads that share it.
Codes leave as int32 words in 16-byte vector stores:
  PACK 0 (one code a byte): a chunk's 8 codes are 2 words, two chunks one store;
  PACK 1 (mxfp4, element 2i in the low nibble): a chunk is 1 word, a block one store;
  PACK 2 (mxfp6, four codes in three little-endian bytes): a block is 6 words, so a thread
  owns two adjacent blocks (12 words, three stores) and no word straddles threads.
Elements of bf16 / fp16 inputs round by one multiply and an integer RNE (below:
`encode_shifted`; mxint8: one multiply folds its 2**6 in) when the tile's largest shared
exponent keeps the factor a representable power of two (one CTA-wide check); otherwise, and
for fp32 inputs of fp formats, by `encode` (the fallback). PATH 1 / 2 force one of them
(tools/sass_quant.py counts each path; PATH 1 is exact only where the check would pass).
"""
from __future__ import annotations

import triton
import triton.language as tl

from kernels.triton.mx_codec import _shared_exponent, encode, load_fp32, pow2

# 1.5 * 2**23: its fp32 ulp is 1, so x + MAGIC_INT8 rounds x to an integer (RNE)
MAGIC_INT8 = tl.constexpr(12582912.0)


@triton.jit
def pow2_sub(e):
    """fp32 2**-e for int32 e in [-127, 149], built from bits (2**-127 .. 2**-149 subnormal)."""
    sub = 1 << tl.minimum(tl.maximum(149 - e, 0), 22)  # clamped: no shift past the width
    return tl.where(e < 127, (127 - e) << 23, sub).to(tl.float32, bitcast=True)


@triton.jit
def encode_shifted(x, factor, limit, sign_mask, MBITS: tl.constexpr, BITS: tl.constexpr):
    """`encode` of x * 2**-E for x with at most 11 significant bits (bf16 / fp16 inputs), by
    one multiply and an integer rounding: factor = 2**(BIAS - 127 - E) (pow2_sub) puts the
    element's exponent / mantissa fields where fp32's are (element subnormals on fp32
    subnormals), so the element grid is every 2**(23 - MBITS)-th fp32 bit pattern and RNE
    to it is integer RNE at bit 23 - MBITS. Exact: a product that goes below 2**-149 held
    bits only there, so it is < 2**11 * 2**-149, far below half the element's smallest
    subnormal (2**(22 - MBITS) * 2**-149). `limit` (fp32, broadcast): max normal * 2**(BIAS -
    127), the saturation, and 0 for a NaN / Inf block (min ignores NaN: 0 there too);
    `sign_mask`: the code's sign bit, 0 for such a block."""
    S: tl.constexpr = 23 - MBITS
    yb = tl.minimum(tl.abs(x * factor), limit).to(tl.int32, bitcast=True)
    r = (yb + ((1 << (S - 1)) - 1) + ((yb >> S) & 1)) >> S
    return r | ((x.to(tl.int32, bitcast=True) >> (32 - BITS)) & sign_mask)


@triton.jit
def load_chunk(x_row, blk, ok, C: tl.constexpr, IN_KIND: tl.constexpr, PAIRS: tl.constexpr):
    """fp32 [BR, N, 8]: chunk C (columns blk * 32 + 8C + [0, 8)) of the blocks `blk` [N] of
    the rows whose first elements x_row [BR] points at; ok [BR, N]: blocks inside the tensor.
    PAIRS (bf16 rows 4-byte aligned): read as int32 words of two bf16, which widen by one
    shift or mask each (a 16-bit load costs a mask and a shift)."""
    if IN_KIND == 1 and PAIRS:
        w_row = x_row.to(tl.pointer_type(tl.int32))
        cols = (blk * 16 + 4 * C)[None, :, None] + tl.arange(0, 4)[None, None, :]
        w = tl.load(w_row[:, None, None] + cols, mask=ok[:, :, None], other=0)
        lo = (w << 16).to(tl.float32, bitcast=True)  # element 2i: the low half
        hi = (w & -65536).to(tl.float32, bitcast=True)  # element 2i + 1
        x = tl.reshape(tl.join(lo, hi), [w.shape[0], w.shape[1], 8])
    elif IN_KIND == 0:  # two 16-byte halves, so the chunk stays in one thread
        cols = (blk * 32 + 8 * C)[None, :, None] + tl.arange(0, 4)[None, None, :]
        lo = load_fp32(x_row[:, None, None] + cols, ok[:, :, None], IN_KIND)
        hi = load_fp32(x_row[:, None, None] + cols + 4, ok[:, :, None], IN_KIND)
        x = tl.reshape(tl.permute(tl.join(lo, hi), (0, 1, 3, 2)), [lo.shape[0], lo.shape[1], 8])
    else:
        cols = (blk * 32 + 8 * C)[None, :, None] + tl.arange(0, 8)[None, None, :]
        x = load_fp32(x_row[:, None, None] + cols, ok[:, :, None], IN_KIND)
    return x


@triton.jit
def block_amax_bits(x0, x1, x2, x3):
    """fp32 bits of max |x| of blocks given as four [BR, N, 8] chunks -> [BR, N] (NaN bits
    above Inf's). The signed max of the bits is the largest non-negative element, the
    unsigned max the most negative one: no per-element abs."""
    b0 = x0.to(tl.int32, bitcast=True)
    b1 = x1.to(tl.int32, bitcast=True)
    b2 = x2.to(tl.int32, bitcast=True)
    b3 = x3.to(tl.int32, bitcast=True)
    smax = tl.max(tl.maximum(tl.maximum(b0, b1), tl.maximum(b2, b3)), axis=2)
    u0 = b0.to(tl.uint32, bitcast=True)
    u1 = b1.to(tl.uint32, bitcast=True)
    u2 = b2.to(tl.uint32, bitcast=True)
    u3 = b3.to(tl.uint32, bitcast=True)
    umax = tl.max(tl.maximum(tl.maximum(u0, u1), tl.maximum(u2, u3)), axis=2)
    return tl.maximum(umax.to(tl.int32, bitcast=True) & 0x7FFFFFFF, smax)


@triton.jit
def block_exponent(amax, MBITS: tl.constexpr, EMAX: tl.constexpr, MAXN_MANT: tl.constexpr,
                   MAXN_SUB: tl.constexpr, ROUNDING: tl.constexpr):
    """(E, NaN / Inf flag) of blocks with max |x| bits `amax` [BR, N]; E 0 where flagged
    (keeps the discarded arithmetic of those blocks overflow-free)."""
    bad = amax >= 0x7F800000
    e = _shared_exponent(amax, EMAX, MBITS, MAXN_MANT, MAXN_SUB, ROUNDING)
    return tl.where(bad, 0, e), bad


@triton.jit
def fold_fits(amax, e, BIAS: tl.constexpr, IS_INT: tl.constexpr):
    """Whether every block of the tile may take the folded path: its factor is a normal or
    subnormal fp32 power of two. fp: 2**(BIAS - 127 - E) >= 2**-149; mxint8: 2**(6 - E) <=
    2**127 (an all-zero block may take any factor)."""
    if IS_INT:
        ok = tl.min(tl.where(amax == 0, 0, e)) >= -121
    else:
        ok = tl.max(e) <= BIAS + 22
    return ok


@triton.jit
def _int8_folded(x, factor, keep):
    """mxint8 codes of x * 2**-E: factor = 2**(6 - E), so the clamp and the rounding magic
    follow directly; the sum's low byte is the two's complement code (MAGIC's low bits are 0)."""
    y = tl.minimum(tl.maximum(x * factor, -127.0), 127.0)
    return (y + MAGIC_INT8).to(tl.int32, bitcast=True) & keep


@triton.jit
def block_codes(x0, x1, x2, x3, e, bad, FOLD: tl.constexpr, MBITS: tl.constexpr,
                BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr, MAX_CODE: tl.constexpr,
                BITS: tl.constexpr, IS_INT: tl.constexpr, SATURATE: tl.constexpr):
    """Codes (int32 [BR, N, 8] each) of a block's four chunks; e, bad [BR, N] (e 0 where bad);
    a NaN / Inf block's codes are 0."""
    if FOLD:
        if IS_INT:
            factor = pow2(tl.minimum(6 - e, 127))[:, :, None]
            keep = tl.where(bad, 0, 0xFF)[:, :, None]
            c0 = _int8_folded(x0, factor, keep)
            c1 = _int8_folded(x1, factor, keep)
            c2 = _int8_folded(x2, factor, keep)
            c3 = _int8_folded(x3, factor, keep)
        else:
            factor = pow2_sub(e + 127 - BIAS)[:, :, None]
            limit = tl.where(bad, 0, MAX_CODE << (23 - MBITS)).to(tl.float32, bitcast=True)
            limit = limit[:, :, None]
            sign = tl.where(bad, 0, 1 << (BITS - 1))[:, :, None]
            c0 = encode_shifted(x0, factor, limit, sign, MBITS, BITS)
            c1 = encode_shifted(x1, factor, limit, sign, MBITS, BITS)
            c2 = encode_shifted(x2, factor, limit, sign, MBITS, BITS)
            c3 = encode_shifted(x3, factor, limit, sign, MBITS, BITS)
    else:
        scale = pow2(-e)[:, :, None]
        keep = tl.where(bad, 0, (1 << BITS) - 1)[:, :, None]
        c0 = encode(x0 * scale, MBITS, BIAS, MAX_NORMAL, BITS, IS_INT, SATURATE) & keep
        c1 = encode(x1 * scale, MBITS, BIAS, MAX_NORMAL, BITS, IS_INT, SATURATE) & keep
        c2 = encode(x2 * scale, MBITS, BIAS, MAX_NORMAL, BITS, IS_INT, SATURATE) & keep
        c3 = encode(x3 * scale, MBITS, BIAS, MAX_NORMAL, BITS, IS_INT, SATURATE) & keep
    return c0, c1, c2, c3


@triton.jit
def tile_codes(x0, x1, x2, x3, e, bad, fits, PATH: tl.constexpr, MBITS: tl.constexpr,
               BIAS: tl.constexpr, MAX_NORMAL: tl.constexpr, MAX_CODE: tl.constexpr,
               BITS: tl.constexpr, IS_INT: tl.constexpr, SATURATE: tl.constexpr):
    """block_codes on the path PATH picks: 1 folded, 2 fallback, 0 folded where the tile's
    `fits` (fold_fits, one CTA-wide branch) says so."""
    if PATH == 2:
        c0, c1, c2, c3 = block_codes(x0, x1, x2, x3, e, bad, False, MBITS, BIAS, MAX_NORMAL,
                                     MAX_CODE, BITS, IS_INT, SATURATE)
    elif PATH == 1:
        c0, c1, c2, c3 = block_codes(x0, x1, x2, x3, e, bad, True, MBITS, BIAS, MAX_NORMAL,
                                     MAX_CODE, BITS, IS_INT, SATURATE)
    else:
        if fits:
            c0, c1, c2, c3 = block_codes(x0, x1, x2, x3, e, bad, True, MBITS, BIAS,
                                         MAX_NORMAL, MAX_CODE, BITS, IS_INT, SATURATE)
        else:
            c0, c1, c2, c3 = block_codes(x0, x1, x2, x3, e, bad, False, MBITS, BIAS,
                                         MAX_NORMAL, MAX_CODE, BITS, IS_INT, SATURATE)
    return c0, c1, c2, c3


@triton.jit
def split8(t, BR: tl.constexpr, N: tl.constexpr):
    """[BR, N, 8] -> its eight [BR, N] columns, in order (in-thread register moves)."""
    a, b = tl.split(tl.reshape(t, [BR, N, 4, 2]))  # t[2i], t[2i + 1]
    a0, a1 = tl.split(tl.reshape(a, [BR, N, 2, 2]))  # t[4i], t[4i + 2]
    b0, b1 = tl.split(tl.reshape(b, [BR, N, 2, 2]))  # t[4i + 1], t[4i + 3]
    t0, t4 = tl.split(a0)
    t2, t6 = tl.split(a1)
    t1, t5 = tl.split(b0)
    t3, t7 = tl.split(b1)
    return t0, t1, t2, t3, t4, t5, t6, t7


@triton.jit
def join4(a0, a1, a2, a3):
    """Four [BR, N] -> [BR, N, 4] (a0 first): one 16-byte store's words."""
    j = tl.join(tl.join(a0, a2), tl.join(a1, a3))  # j[.., i, k] = a[2i + k]
    return tl.reshape(j, [a0.shape[0], a0.shape[1], 4])


@triton.jit
def bytes_words(c, BR: tl.constexpr, N: tl.constexpr):
    """PACK 0: a chunk's 8 one-byte codes -> its 2 little-endian words (+: the fields are
    disjoint, and a shift-add is one IMAD / LEA where shift-or is two instructions)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = split8(c, BR, N)
    return t0 + (t1 << 8) + (t2 << 16) + (t3 << 24), t4 + (t5 << 8) + (t6 << 16) + (t7 << 24)


@triton.jit
def nibbles_word(c, BR: tl.constexpr, N: tl.constexpr):
    """PACK 1: a chunk's 8 fp4 codes -> 1 word (element 2i in the low nibble of byte i)."""
    t0, t1, t2, t3, t4, t5, t6, t7 = split8(c, BR, N)
    return (t0 | (t1 << 4) | (t2 << 8) | (t3 << 12) | (t4 << 16) | (t5 << 20) | (t6 << 24)
            | (t7 << 28))


@triton.jit
def fp6_groups(c, BR: tl.constexpr, N: tl.constexpr):
    """PACK 2: a chunk's 8 fp6 codes -> two 24-bit groups c0 | c1 << 6 | c2 << 12 | c3 << 18."""
    t0, t1, t2, t3, t4, t5, t6, t7 = split8(c, BR, N)
    return (t0 | (t1 << 6) | (t2 << 12) | (t3 << 18), t4 | (t5 << 6) | (t6 << 12) | (t7 << 18))


@triton.jit
def fp6_words(c0, c1, c2, c3, BR: tl.constexpr, N: tl.constexpr):
    """A block's four chunks of fp6 codes -> its 6 words (four groups make 3 words)."""
    g0, g1 = fp6_groups(c0, BR, N)
    g2, g3 = fp6_groups(c1, BR, N)
    g4, g5 = fp6_groups(c2, BR, N)
    g6, g7 = fp6_groups(c3, BR, N)
    return (g0 | (g1 << 24), (g1 >> 8) | (g2 << 16), (g2 >> 16) | (g3 << 8),
            g4 | (g5 << 24), (g5 >> 8) | (g6 << 16), (g6 >> 16) | (g7 << 8))


@triton.jit
def store4(d_row, word0, words, mask):
    """words [BR, N, 4] at word offsets word0 [N] + 0..3 of the rows at d_row [BR]."""
    offs = word0[None, :, None] + tl.arange(0, 4)[None, None, :]
    tl.store(d_row[:, None, None] + offs, words, mask=mask)


@triton.jit
def store_block_words(d_row, blk, ok, c0, c1, c2, c3, PACK: tl.constexpr, BR: tl.constexpr,
                      N: tl.constexpr):
    """PACK 0 / 1: a block's codes as 8 / 4 words at word blk * 8 / blk * 4 of its row."""
    m = ok[:, :, None]
    if PACK == 0:
        w0, w1 = bytes_words(c0, BR, N)
        w2, w3 = bytes_words(c1, BR, N)
        w4, w5 = bytes_words(c2, BR, N)
        w6, w7 = bytes_words(c3, BR, N)
        store4(d_row, blk * 8, join4(w0, w1, w2, w3), m)
        store4(d_row, blk * 8 + 4, join4(w4, w5, w6, w7), m)
    else:
        store4(d_row, blk * 4, join4(nibbles_word(c0, BR, N), nibbles_word(c1, BR, N),
                                     nibbles_word(c2, BR, N), nibbles_word(c3, BR, N)), m)


@triton.jit
def store_pair_words(d_row, pair, row_ok, whole, nwords, a0, a1, a2, a3, b0, b1, b2, b3,
                     BR: tl.constexpr, N: tl.constexpr):
    """PACK 2: blocks 2 * pair and 2 * pair + 1 (chunks a*, b*) as 12 words at word pair * 12.
    A tile that is not `whole` along K masks words past `nwords` (6 a block of the row):
    K % 64 == 32 ends a block pair halfway, inside its middle 16-byte vector; whole tiles keep
    the mask constant over each vector."""
    p0, p1, p2, p3, p4, p5 = fp6_words(a0, a1, a2, a3, BR, N)
    q0, q1, q2, q3, q4, q5 = fp6_words(b0, b1, b2, b3, BR, N)
    v0 = join4(p0, p1, p2, p3)
    v1 = join4(p4, p5, q0, q1)
    v2 = join4(q2, q3, q4, q5)
    base = pair * 12
    m = row_ok[:, None, None]
    if whole:
        store4(d_row, base, v0, m)
        store4(d_row, base + 4, v1, m)
        store4(d_row, base + 8, v2, m)
    else:
        offs = base[None, :, None] + tl.arange(0, 4)[None, None, :]
        store4(d_row, base, v0, m & (offs < nwords))
        store4(d_row, base + 4, v1, m & (offs + 4 < nwords))
        store4(d_row, base + 8, v2, m & (offs + 8 < nwords))
