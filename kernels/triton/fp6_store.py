"""Packed mxfp6 codes out of the quantize kernel's tile (mx_quant._quantize_kernel, PACK 2):
four 6-bit codes in three little-endian bytes, written as int32 words in 16-byte vector stores.
"""
from __future__ import annotations

import triton
import triton.language as tl


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
