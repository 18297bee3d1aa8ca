"""The packed layouts' codes in and out of the quantize / dequantize kernels' tiles (mx_quant):
mxfp4 two codes a byte (PACK 1: `byte_cols`, `store_codes`); mxfp6 (PACK 2) four 6-bit codes in
three little-endian bytes, two ways:
- `store_fp6_words`: whole 64-code chunks as int32 words in 16-byte vector stores (in use);
- `load_fp6_halves` / `store_fp6_halves`: 8 codes (6 bytes, half a 16-code group) a thread,
  the 8 elements one 16-byte bf16 vector holds, so the codes need not be re-spread through
  shared memory or shuffles on their way to or from the bf16 side (gated: FP6_HALVES_VERIFIED
  below; docs/benchmarks.md part 27). Half h of group g is bytes 6h..6h+5 of the group's 12:
  h = 0 reads / writes word 3g and bytes 4-5, h = 1 bytes 6-7 and word 3g + 2.
"""
from __future__ import annotations

import triton
import triton.language as tl

# Packed mxfp4's codes moved 4 bytes a thread (`byte_cols`; the kernels' WORD_IO): written
# 2026-12-05 without a GPU. Offline (sm_90a, triton 3.6, benchmarks part 27) it takes out the
# shared-memory round trip between the bytes and the bf16 side: quantize (bf16) 437 -> 429
# SASS a thread and 3 -> 1 barriers, dequantize 40 -> 32 registers and 7 -> 1 barriers. Its
# bits are the same (only a contiguity hint changes); whether it is faster is for the GPU:
# tools/bench_quant.py --word-io both (gpu_sweeps step quant_word_io) times it off / on.
FP4_WORD_IO_VERIFIED = False
# Packed mxfp6 the same way: 8 codes (half a 16-code group, 6 bytes) a thread, one int32 and one
# int16 access (the halves below) in place of the 64-code chunks' gather (quantize: 64 SHFL a
# thread, 5 barriers) and of three strided word loads re-spread through shared memory
# (dequantize). Written 2026-12-05 without a GPU; the bits are checked in the interpreter
# (tests/kernels/triton/test_quant_fp6_store.py), the time is for the GPU (gpu_sweeps step
# quant_word_io).
FP6_HALVES_VERIFIED = False


def word_io_here(pack: int) -> bool:
    """Whether the kernels move a thread's codes as its 8 elements' own bytes for layout code
    `pack` (the gate of that layout)."""
    return {1: FP4_WORD_IO_VERIFIED, 2: FP6_HALVES_VERIFIED}.get(pack, False)


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
def _codes8(c0, c1, c2, c3, c4, c5, c6, c7, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """Eight [BLOCK_R, BLOCK_K / 8] -> [BLOCK_R, BLOCK_K], element 8j + i from c_i[j]: each
    join's new axis is the last, so the outermost join picks the lowest index bit."""
    return tl.reshape(tl.join(tl.join(tl.join(c0, c4), tl.join(c2, c6)),
                              tl.join(tl.join(c1, c5), tl.join(c3, c7))), [BLOCK_R, BLOCK_K])


@triton.jit
def load_fp6_halves(d_row, row_ok, pid_k, K, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """Codes [BLOCK_R, BLOCK_K] (int32) of tile pid_k from packed mxfp6 rows (d_row: int32 word
    pointers of the tile's rows [BLOCK_R, 1]): per half group two word loads, the 48 bits
    shifted into place, eight 6-bit fields."""
    H: tl.constexpr = BLOCK_K // 8
    j = pid_k * H + tl.arange(0, H)  # half groups along the row
    odd = (j % 2 == 1)[None, :]
    w = (3 * (j // 2) + j % 2)[None, :]  # the word holding the half's first byte
    m = row_ok & (j < K // 8)[None, :]
    a = tl.load(d_row + w, mask=m, other=0)
    b = tl.load(d_row + w + 1, mask=m, other=0)
    lo = tl.where(odd, ((a >> 16) & 0xFFFF) | (b << 16), a)  # the half's bits 0..31
    hi = tl.where(odd, (b >> 16) & 0xFFFF, b)  # and 32..47 (b's low 16 for an even half)
    return _codes8(lo & 0x3F, (lo >> 6) & 0x3F, (lo >> 12) & 0x3F, (lo >> 18) & 0x3F,
                   (lo >> 24) & 0x3F, ((lo >> 30) & 0x3) | ((hi & 0xF) << 2), (hi >> 4) & 0x3F,
                   (hi >> 10) & 0x3F, BLOCK_R, BLOCK_K)


@triton.jit
def store_fp6_halves(d_row, row_ok, codes, pid_k, K, BLOCK_R: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """Store codes [BLOCK_R, BLOCK_K] (any int32 whose `pack4` is each four codes' group, as for
    `store_fp6_words`) as packed mxfp6 rows: per half group one int32 and one int16 store
    (the two halves of a group share word 3g + 1: each writes its own two bytes of it)."""
    H: tl.constexpr = BLOCK_K // 8
    g0, g1 = tl.split(tl.reshape(pack4(codes, 6, BLOCK_R, BLOCK_K // 4), [BLOCK_R, H, 2]))
    lo = (g0 & 0xFFFFFF) | (g1 << 24)  # the half's bits 0..31
    hi = (g1 >> 8) & 0xFFFF  # 32..47
    j = pid_k * H + tl.arange(0, H)
    odd = (j % 2 == 1)[None, :]
    m = row_ok & (j < K // 8)[None, :]
    word = tl.where(odd, ((lo >> 16) & 0xFFFF) | (hi << 16), lo)
    half = tl.where(odd, lo & 0xFFFF, hi).to(tl.int16)
    g = (j // 2)[None, :]
    # stored as flat vectors: a [BLOCK_R, H] store of these strided words makes Triton pick a
    # row-major-by-column layout for it and re-spread the values through shared memory; flat,
    # its layout is the values' own (a half group a thread, consecutive halves in a warp)
    n: tl.constexpr = BLOCK_R * H
    tl.store(tl.reshape(d_row + 3 * g + 2 * (j % 2)[None, :], [n]), tl.reshape(word, [n]),
             mask=tl.reshape(m, [n]))
    tl.store(tl.reshape(d_row.to(tl.pointer_type(tl.int16), bitcast=True) + 6 * g + 2 +
                        (j % 2)[None, :], [n]), tl.reshape(half, [n]), mask=tl.reshape(m, [n]))


@triton.jit
def byte_cols(pid_k, BLOCK_K: tl.constexpr, WORD_IO: tl.constexpr):
    """The packed mxfp4 byte columns of tile pid_k; WORD_IO: declared contiguous in runs of 4
    only, so the codes' loads / stores are 4 bytes a thread: the 8 elements a thread holds in
    the bf16 side's 16-byte vectors. (Without it the bytes move 16 to a thread, and Triton
    re-spreads them through shared memory: 3-7 barriers a program, sm_90a, benchmarks part 27.)"""
    cols = pid_k * (BLOCK_K // 2) + tl.arange(0, BLOCK_K // 2)
    if WORD_IO:
        cols = tl.max_contiguous(cols, 4)
    return cols


@triton.jit
def store_codes(codes, d_row, row_ok, pid_k, K, PACK: tl.constexpr, BLOCK_R: tl.constexpr,
                 BLOCK_K: tl.constexpr, WORD_IO: tl.constexpr):
    """Element codes [BLOCK_R, BLOCK_K] stored in layout PACK (int32; uint8 for PACK 0; for
    PACK 2 any int32 whose `pack4` is each four codes' group); WORD_IO: PACK 1
    `byte_cols`, PACK 2 `store_fp6_halves`."""
    if PACK == 0:
        cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
        tl.store(d_row + cols[None, :], codes.to(tl.uint8), mask=row_ok & (cols < K)[None, :])
    elif PACK == 1:
        lo, hi = tl.split(tl.reshape(codes, [BLOCK_R, BLOCK_K // 2, 2]))
        cols = byte_cols(pid_k, BLOCK_K, WORD_IO)
        tl.store(d_row + cols[None, :], (lo | (hi << 4)).to(tl.uint8),
                 mask=row_ok & (cols < K // 2)[None, :])
    elif WORD_IO:
        store_fp6_halves(d_row, row_ok, codes, pid_k, K, BLOCK_R, BLOCK_K)
    else:
        store_fp6_words(d_row[:, :, None], row_ok[:, :, None], codes, pid_k, K, BLOCK_R,
                         BLOCK_K)
