"""Packed mxfp6 codes (PACK 2: four 6-bit codes in three little-endian bytes) in and out of the
quantize / dequantize kernels' tiles (mx_quant) as int32 words, whole 48-byte chunks of 64 codes
at a time, so that neighbouring threads' 16-byte vector accesses fill them end to end.

VECTOR_LOAD_VERIFIED gates the dequantize side (`load_fp6_words`) on a GPU: written 2026-12-05
without a GPU (its bits are checked in the interpreter, tests/kernels/triton/test_fp6_packed.py)
and not yet timed. Why: mx_codec.load_codes reads a tile's words with three word-strided loads
per 16 codes, each warp instruction touching a third of every sector it names; the store side
had the same pattern at 43 % of copy until it went to whole chunks. Packed mxfp6 dequantize is
the one layout below 85 % of copy on the H100 (84.2-84.6 %, docs/benchmarks.md part 21); on
until timed against the strided loads (tools/bench_quant.py --hw-cvt both).
"""
from __future__ import annotations

import triton
import triton.language as tl

VECTOR_LOAD_VERIFIED = False


def vector_load_here(pack: int, rows16b: bool) -> bool:
    """Whether a dequantize of layout `pack` reads its words by whole chunks: packed mxfp6 whose
    row stride in words is a multiple of 4 (16-byte aligned rows), the gate open (the
    interpreter too: its tests open the gate to check the bits)."""
    return VECTOR_LOAD_VERIFIED and pack == 2 and rows16b


@triton.jit
def split4(t, BLOCK_R: tl.constexpr, N: tl.constexpr):
    """[BLOCK_R, 4N] -> four [BLOCK_R, N] tensors holding elements 4j, 4j+1, 4j+2, 4j+3."""
    even, odd = tl.split(tl.reshape(t, [BLOCK_R, N, 2, 2]))
    a0, a2 = tl.split(even)
    a1, a3 = tl.split(odd)
    return a0, a1, a2, a3


@triton.jit
def pack4(t, SHIFT: tl.constexpr, BLOCK_R: tl.constexpr, N: tl.constexpr):
    a0, a1, a2, a3 = split4(t, BLOCK_R, N)
    return a0 | (a1 << SHIFT) | (a2 << (2 * SHIFT)) | (a3 << (3 * SHIFT))


@triton.jit
def store_fp6_words(d_row, row_ok, codes, pid_k, K, BLOCK_R: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """Store a tile's codes as packed mxfp6 int32 words with one store whose last axis is
    contiguous in memory, so whole tiles go out as 16-byte vector stores that neighbouring
    threads fill end to end. Why: three word-strided stores (words 3q, 3q+1, 3q+2 of each 16
    codes) reached 43 % of the H200's copy bandwidth. 64 codes make a 48-byte chunk of 12
    words; the tile is [BLOCK_R, BLOCK_K / 64 chunks, 16 slots], slots 12..15 a masked pad
    (Triton's shapes are powers of two). A word takes bytes of two 24-bit code groups (the
    word index divided by 3: no reshape permutes that), so a gather along the slot axis picks
    them; it lowers to warp shuffles."""
    tl.static_assert(BLOCK_K % 64 == 0, "mxfp6 words: BLOCK_K must hold whole 64-code chunks")
    M: tl.constexpr = BLOCK_K // 64
    shape: tl.constexpr = [BLOCK_R, M, 16]
    g = tl.reshape(pack4(codes, 6, BLOCK_R, BLOCK_K // 4), shape)  # c0|c1<<6|c2<<12|c3<<18
    # word s of a chunk = bytes 4s..4s+3 = group s + s // 3 from its byte s % 3 on, then the next
    s = tl.arange(0, 16)
    lo_i = tl.broadcast_to(tl.minimum(s + s // 3, 15)[None, None, :], shape)
    lo = tl.gather(g, lo_i, 2)
    hi = tl.gather(g, tl.minimum(lo_i + 1, 15), 2)
    words = (lo >> (8 * (s % 3))) | (hi << (24 - 8 * (s % 3)))
    word = (pid_k * M + tl.arange(0, M))[None, :, None] * 12 + s[None, None, :]
    mask = row_ok & (s < 12)[None, None, :]
    # Whole tiles need no K mask; a tail's (its last chunk may end mid-vector: K % 64 == 32)
    # is stored apart so that the whole tiles' mask stays constant over 4 words (v4 stores).
    if (pid_k + 1) * BLOCK_K <= K:
        tl.store(d_row + word, words, mask=mask)
    else:
        tl.store(d_row + word, words, mask=mask & (word < 6 * (K // 32)))


@triton.jit
def load_fp6_words(d_row, row_ok, pid_k, K, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """A tile's codes [BLOCK_R, BLOCK_K] (int32) from packed mxfp6 words read with one load
    whose last axis is contiguous: [BLOCK_R, BLOCK_K / 64 chunks, 16 slots] (slots 12..15 a
    masked pad), `d_row` [BLOCK_R, 1, 1] the rows' first words. Group t of a chunk (codes
    4t..4t+3) is bytes 3t..3t+2: word 3t // 4 from its byte 3t % 4 on, then the next word (a
    gather along the slot axis, as store_fp6_words'); words past K's last block read as 0."""
    tl.static_assert(BLOCK_K % 64 == 0, "mxfp6 words: BLOCK_K must hold whole 64-code chunks")
    M: tl.constexpr = BLOCK_K // 64
    shape: tl.constexpr = [BLOCK_R, M, 16]
    s = tl.arange(0, 16)
    word = (pid_k * M + tl.arange(0, M))[None, :, None] * 12 + s[None, None, :]
    mask = row_ok & (s < 12)[None, None, :] & (word < 6 * (K // 32))
    words = tl.load(d_row + word, mask=mask, other=0).to(tl.uint32, bitcast=True)
    lo_i = tl.broadcast_to((3 * s // 4)[None, None, :], shape)
    lo = tl.gather(words, lo_i, 2)
    hi = tl.gather(words, tl.minimum(lo_i + 1, 15), 2)
    byte = ((3 * s) % 4)[None, None, :]  # 0, 3, 2, 1, ...: the group's first byte in `lo`
    # logical shifts (uint32); `hi` shifted in two steps so that byte 0 (all of it in `lo`)
    # never shifts by 32
    g = ((lo >> (8 * byte)) | ((hi << (31 - 8 * byte)) << 1)).to(tl.int32, bitcast=True)
    c0, c1, c2, c3 = g & 0x3F, (g >> 6) & 0x3F, (g >> 12) & 0x3F, (g >> 18) & 0x3F
    codes = tl.join(tl.join(c0, c2), tl.join(c1, c3))  # [..., i, j]: code 2i + j of a group
    return tl.reshape(codes, [BLOCK_R, BLOCK_K])
