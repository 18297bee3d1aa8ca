"""The Gluon device helpers of the wgmma kernel (linear_wgmma.py): the weight decoders, whose
outputs land on wgmma's A operand layout with no data movement, and small layout helpers.

Each decoder has a torch twin that replays its PTX step for step: fp4_words.wgmma_decode
(mxfp4), fp6_words.wgmma_decode_fp6 (mxfp6), fp8_words.wgmma_decode_fp8 (mxfp8 e4m3) and
int8_words.wgmma_decode_int8 (mxint8); CPU CI checks the twins against the reference
dequantization at every code and scale byte, the PTX against the twins
(tests/kernels/triton/test_wgmma_ptx.py), the GPU tests the kernel itself.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from kernels.triton.fp6_words import B_MASK, B_ROT
from kernels.triton.fp8_words import EXP_SIGN, FULL, MANT
from kernels.triton.int8_words import MASK as INT8_MASK, ROT as INT8_ROT


# One word -> 8 bf16 (pairs 0..3 as bf16x2), each pair times the scale word $9: the PTX twin of
# fp4_words.wgmma_decode.
_DECODE = gl.constexpr("""
{
.reg .b32 a, b;
and.b32 a, $8, 0x81C081C0; mul.rn.bf16x2 a, a, $9; mov.b32 {$0, $1}, a;
shf.r.wrap.b32 a, $8, $8, 3; and.b32 a, a, 0x81C081C0; mul.rn.bf16x2 a, a, $9; mov.b32 {$2, $3}, a;
shr.b32 a, $8, 6; shf.r.wrap.b32 b, $8, $8, 1; and.b32 a, a, 0x01C001C0; and.b32 b, b, 0x80008000;
or.b32 a, a, b; mul.rn.bf16x2 a, a, $9; mov.b32 {$4, $5}, a;
shf.r.wrap.b32 a, $8, $8, 13; shf.r.wrap.b32 b, $8, $8, 2; and.b32 a, a, 0x01C001C0;
and.b32 b, b, 0x80008000; or.b32 a, a, b; mul.rn.bf16x2 a, a, $9; mov.b32 {$6, $7}, a;
}
""")


@gluon.constexpr_function
def _only(dim, rank, layout):
    """The layout of dim `dim` alone of a rank-`rank` `layout`: the others sliced off, last
    first (so the indices of the lower ones hold)."""
    for d in reversed(range(rank)):
        if d != dim:
            layout = gl.SliceLayout(d, layout)
    return layout


@gluon.constexpr_function
def x_copy_layout(block_k, warps):
    """The x tile's copy layout: 16-byte vectors, lanes along K, warps along rows, so that no
    two threads copy the same vector (for M up to block_m: rows per pass 32 // lanes * warps)."""
    lanes = min(32, block_k // 8)
    return gl.BlockedLayout([1, 8], [32 // lanes, lanes], [warps, 1], [1, 0])


@gluon.constexpr_function
def words_layout(warps, nbh, last=4):
    """A K tile's per-thread words [groups, g, t, h, b_hi, last] (last 4: A words, mxfp8 B
    words; 2: mxfp6 B words): a thread holds its row's 8-code words of every block it owns."""
    return gl.BlockedLayout([1, 1, 1, 2, nbh, last], [1, 8, 4, 1, 1, 1], [warps, 1, 1, 1, 1, 1],
                            [5, 4, 3, 2, 1, 0])


@gluon.constexpr_function
def acc_layout(warps, block_m):
    """The accumulator [16 * warps-row blocks, block_m] of wgmma with the weight as A."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[warps, 1],
                                     instr_shape=[16, block_m, 16])


@gluon.jit
def along(n: gl.constexpr, dim: gl.constexpr, RANK: gl.constexpr, L: gl.constexpr):
    """arange(n) along `dim` of a rank-RANK tensor of layout L (size 1 in the other dims)."""
    v = gl.arange(0, n, layout=_only(dim, RANK, L))
    for d in gl.static_range(RANK):
        if d != dim:
            v = gl.expand_dims(v, d)
    return v


@gluon.jit
def scale_word(sbytes, words):
    """Scale bytes [w, g, h, b_hi, b_lo] -> bf16x2 2**(E' - 127), twice, in the words' shape
    [w, g, t, h, b_hi, b_lo] (the t lanes of a row share them)."""
    sword = gl.expand_dims(sbytes.to(gl.int32) * 0x00800080, 2)
    return gl.broadcast(sword, words)[0]


@gluon.jit
def halves(t, NBH: gl.constexpr):
    """A tile's per-thread operand [w, g, t, h, NBH, 4] (a thread's 32-blocks along K: block
    4 * b_hi + b_lo) -> its K halves, each [w, g, t, h, 1, 2 * NBH]: register renaming only
    (both block dims are the thread's own), so the decode of one half can run while the
    wgmma of the other is in flight (WgmmaConfig.sub_k)."""
    s0: gl.constexpr = t.shape[0]
    s1: gl.constexpr = t.shape[1]
    s2: gl.constexpr = t.shape[2]
    s3: gl.constexpr = t.shape[3]
    t = gl.permute(gl.reshape(t, [s0, s1, s2, s3, 2, 2 * NBH]), (0, 1, 2, 3, 5, 4))
    lo, hi = gl.split(t)
    return (gl.reshape(lo, [s0, s1, s2, s3, 1, 2 * NBH]),
            gl.reshape(hi, [s0, s1, s2, s3, 1, 2 * NBH]))


@gluon.jit
def _to_a(o0, o1, o2, o3, o4, o5, o6, o7, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
          A: gl.constexpr):
    """A decoder's 8 outputs a word -> the bf16 A operand [BLOCK_N, BLOCK_K] in layout A, with
    no data movement (the reshape lands on A's own layout)."""
    t = gl.join(gl.join(gl.join(o0, o1), gl.join(o2, o3)),
                gl.join(gl.join(o4, o5), gl.join(o6, o7)))  # [w, g, t, h, bh, bl, e, q, c0]
    t = gl.permute(t, (0, 3, 1, 4, 5, 8, 7, 2, 6))  # [w, h, g, bh, bl, c0, q, t, e]
    return gl.convert_layout(gl.reshape(t, [BLOCK_N, BLOCK_K]), A, assert_trivial=True)


@gluon.jit
def decode_fp4(words, sword, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, A: gl.constexpr):
    """Words [w, g, t, h, b_hi, b_lo] + their scale words (`scale_word`) -> the bf16 A operand
    [BLOCK_N, BLOCK_K] in layout A."""
    o0, o1, o2, o3, o4, o5, o6, o7 = gl.inline_asm_elementwise(
        _DECODE, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [words, sword], dtype=(gl.bfloat16,) * 8,
        is_pure=True, pack=1)
    return _to_a(o0, o1, o2, o3, o4, o5, o6, o7, BLOCK_N, BLOCK_K, A)


def _fp6_asm(fmt: str) -> str:
    """PTX: A word ($8: top 4 bits of 8 codes; e2m3 in mxfp4's layout, e3m2 in its own) + B
    word ($9: low 2 bits) with its rotation base ($10) -> 8 bf16 times the scale word ($11):
    fp6_words.fp6_pairs' steps, one for one."""
    low = f"and.b32 b, b, {B_MASK[fmt]:#010x}; or.b32 a, a, b; mul.rn.bf16x2 a, a, $11; "
    tops = ("and.b32 a, $8, 0x81C081C0; ",
            "shf.r.wrap.b32 a, $8, $8, 3; and.b32 a, a, 0x81C081C0; ",
            "shr.b32 a, $8, 6; shf.r.wrap.b32 c, $8, $8, 1; and.b32 a, a, 0x01C001C0; "
            "and.b32 c, c, 0x80008000; or.b32 a, a, c; ",
            "shf.r.wrap.b32 a, $8, $8, 13; shf.r.wrap.b32 c, $8, $8, 2; and.b32 a, a, 0x01C001C0; "
            "and.b32 c, c, 0x80008000; or.b32 a, a, c; ")
    if fmt == "mxfp6_e3m2":  # fp6_words.WGMMA_BITS_E3M2's placement: {15, 9, 8, 7}
        tops = ("and.b32 a, $8, 0x83808380; ",
                "shf.r.wrap.b32 a, $8, $8, 4; and.b32 a, a, 0x83808380; ",
                "shf.r.wrap.b32 a, $8, $8, 9; shl.b32 c, $8, 5; and.b32 a, a, 0x03800380; "
                "and.b32 c, c, 0x80008000; or.b32 a, a, c; ",
                "shf.r.wrap.b32 a, $8, $8, 13; shl.b32 c, $8, 1; and.b32 a, a, 0x03800380; "
                "and.b32 c, c, 0x80008000; or.b32 a, a, c; ")
    body = "".join(f"{top}add.u32 r, $10, {2 * p}; shf.r.wrap.b32 b, $9, $9, r; {low}"
                   f"mov.b32 {{${2 * p}, ${2 * p + 1}}}, a;\n" for p, top in enumerate(tops))
    return "{\n.reg .b32 a, b, c, r;\n" + body + "}"


_DECODE_E2M3 = gl.constexpr(_fp6_asm("mxfp6_e2m3"))
_DECODE_E3M2 = gl.constexpr(_fp6_asm("mxfp6_e3m2"))
_ROT_E3M2 = gl.constexpr(B_ROT["mxfp6_e3m2"])


@gluon.jit
def fp6_operands(words, bwords, WL: gl.constexpr, FMT: gl.constexpr):
    """mxfp6 B words [w, g, t, h, b_hi, 2] (two blocks each) -> (B words, rotation bases), both
    in the A words' shape and layout WL (block 2i and 2i + 1 share word i)."""
    s0: gl.constexpr = words.shape[0]
    s4: gl.constexpr = words.shape[4]
    b = gl.reshape(gl.join(bwords, bwords), [s0, 8, 4, 2, s4, 4])
    b = gl.convert_layout(b, WL, assert_trivial=True)
    base = (along(4, 5, 6, WL) % 2) * 8
    if FMT == 2:
        base = base + _ROT_E3M2
    return b, gl.broadcast(base, words)[0]


@gluon.jit
def decode_fp6(words, b, base, sword, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
               A: gl.constexpr, FMT: gl.constexpr):
    """mxfp6 (FMT 1: e2m3, 2: e3m2): A words as mxfp4's + B words and rotation bases
    (`fp6_operands`) + scale words -> the bf16 A operand (fp6_words: the layout)."""
    if FMT == 1:
        o0, o1, o2, o3, o4, o5, o6, o7 = gl.inline_asm_elementwise(
            _DECODE_E2M3, "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r,r", [words, b, base, sword],
            dtype=(gl.bfloat16,) * 8, is_pure=True, pack=1)
    else:
        o0, o1, o2, o3, o4, o5, o6, o7 = gl.inline_asm_elementwise(
            _DECODE_E3M2, "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r,r", [words, b, base, sword],
            dtype=(gl.bfloat16,) * 8, is_pure=True, pack=1)
    return _to_a(o0, o1, o2, o3, o4, o5, o6, o7, BLOCK_N, BLOCK_K, A)


def _two_word_asm(regs: str, pair0, pair1) -> str:
    """PTX of an 8-bit decoder: A word ($8: codes 0..3) and B word ($9: codes 4..7) -> 8 bf16
    times the scale word ($10); pair0 / pair1(src) leave a word's pair 0 / 1 pattern in a."""
    body = ""
    for src, out in (("$8", 0), ("$9", 4)):
        for p, ops in enumerate((pair0, pair1)):
            body += (f"{ops(src)} mul.rn.bf16x2 a, a, $10; "
                     f"mov.b32 {{${out + 2 * p}, ${out + 2 * p + 1}}}, a;\n")
    return "{\n.reg .b32 " + regs + ";\n" + body + "}"


def _fp8_asm() -> str:
    """mxfp8 e4m3: per word, pair 0 = word & FULL, pair 1 = (rotr 4 & EXP_SIGN) | (rotr 28 &
    MANT) — fp8_words.fp8_pairs' steps, one for one."""
    return _two_word_asm(
        "a, b", lambda w: f"and.b32 a, {w}, {FULL:#010x};",
        lambda w: (f"shf.r.wrap.b32 a, {w}, {w}, 4; shf.r.wrap.b32 b, {w}, {w}, 28; "
                   f"and.b32 a, a, {EXP_SIGN:#010x}; and.b32 b, b, {MANT:#010x}; or.b32 a, a, b;"))


_DECODE_E4M3 = gl.constexpr(_fp8_asm())


def _int8_asm() -> str:
    """mxint8 (sign-magnitude codes): per word, pair 0 = word & MASK, pair 1 = rotr(word, 8) &
    MASK — int8_words.int8_pairs' steps, one for one."""
    return _two_word_asm(
        "a", lambda w: f"and.b32 a, {w}, {INT8_MASK:#010x};",
        lambda w: f"shf.r.wrap.b32 a, {w}, {w}, {INT8_ROT}; and.b32 a, a, {INT8_MASK:#010x};")


_DECODE_INT8 = gl.constexpr(_int8_asm())


@gluon.jit
def decode_two_words(words, bwords, sword, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     A: gl.constexpr, ASM: gl.constexpr):
    """An 8-bit format's A words (codes 0..3 of a thread's 8) + B words (codes 4..7), both in
    mxfp4's word order, + scale words -> the bf16 A operand, by its PTX ASM: _DECODE_E4M3
    (mxfp8 e4m3, FMT 3: fp8_words) or _DECODE_INT8 (mxint8, FMT 4: int8_words)."""
    o0, o1, o2, o3, o4, o5, o6, o7 = gl.inline_asm_elementwise(
        ASM, "=h,=h,=h,=h,=h,=h,=h,=h,r,r,r", [words, bwords, sword],
        dtype=(gl.bfloat16,) * 8, is_pure=True, pack=1)
    return _to_a(o0, o1, o2, o3, o4, o5, o6, o7, BLOCK_N, BLOCK_K, A)


@gluon.jit
def decode(words, bw, base, sword, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
           A: gl.constexpr, FMT: gl.constexpr):
    """A K tile's (or half's) A operand from its per-thread operands (`slot_operands`), by the
    kernel's weight format FMT (0 mxfp4, 1 / 2 mxfp6 e2m3 / e3m2, 3 mxfp8 e4m3, 4 mxint8)."""
    if FMT == 4:
        return decode_two_words(words, bw, sword, BLOCK_N, BLOCK_K, A, _DECODE_INT8)
    elif FMT == 3:
        return decode_two_words(words, bw, sword, BLOCK_N, BLOCK_K, A, _DECODE_E4M3)
    elif FMT:
        return decode_fp6(words, bw, base, sword, BLOCK_N, BLOCK_K, A, FMT)
    else:
        return decode_fp4(words, sword, BLOCK_N, BLOCK_K, A)


@gluon.jit
def slot_operands(w_slot, b_slot, s_slot, WL: gl.constexpr, SL: gl.constexpr,
                  WARPS: gl.constexpr, NBH: gl.constexpr, FMT: gl.constexpr):
    """A ring slot's words, B words and scale bytes (shared) -> the decoder's per-thread
    operands (words, B words, rotation bases, scale words) in the words' layout WL (SL: the
    scale bytes', the t lanes of a row sharing them)."""
    words = w_slot.load(WL)
    sword = scale_word(s_slot.load(SL), words)
    if FMT >= 3:  # mxfp8 / mxint8: B words in the A words' own order
        bw = b_slot.load(WL)
        base = bw
    elif FMT:
        bw, base = fp6_operands(words, b_slot.load(words_layout(WARPS, NBH, 2)), WL, FMT)
    else:
        bw, base = words, words
    return words, bw, base, sword


__all__ = ["acc_layout", "along", "decode", "decode_fp4", "decode_fp6", "decode_two_words",
           "fp6_operands", "halves", "scale_word", "slot_operands", "words_layout",
           "x_copy_layout"]
