"""mxint8 weights laid out for the Gluon wgmma kernel (linear_wgmma.py, FMT 4), and the torch
twin of its decoder: the CPU check of the GPU bits.

Why: mxint8 weights took the generic decode (0.79-0.97x bf16 at M = 1 / 16, ~0.4x at M = 128,
H200 2026-12-05, docs/benchmarks.md part 24) while the other 8-bit format ran on wgmma at
1.4-1.9x. An int8 code b (|b| <= 127) stored in sign-magnitude, its magnitude at bf16 bits
6..0 and its sign at bit 15, is a bf16 subnormal of value b * 2**-133 exactly; one bf16x2
multiply by the scale word 2**(E - 127 + 133 - 6) = 2**E' (scale byte stored E + 127) gives
b * 2**-6 * 2**(E - 127), the mxint8 value. A thread's 8 codes of one row and one 32-column
block fill two words in fp8_words' order (A: codes 0..3, B: codes 4..7); in each word codes
0 / 1 sit in place (pair = word & MASK) and codes 2 / 3 a byte up, so that rotr(word, 8) &
MASK is their pair: two instructions a pair besides the multiply (mxfp8 e4m3 needs four).
The layout's limits, checked once per weight by `int8_fits` (else the table's next strategy
runs the layer): every finite scale byte at most 127 (the scale word 2**E' a finite bf16: E8M0
scales up to 1.0, |weights| < 2, which real checkpoints hold) and no code -128 (0x80: a
magnitude of 128 takes 8 bits; our quantizer never writes it). NaN blocks (0xFF) keep 0xFF
with codes zeroed (0 * inf = NaN, as the other formats').
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.triton.fp4_words import WGMMA_WARPS, _rotr, wgmma_scaled
from kernels.triton.fp8_words import two_word_layout

SCALE_BIAS = 127  # stored scale byte: E + 127, the bf16 exponent of 2**(E - 127 + 127)
MASK = 0x807F807F  # a bf16x2 of two sign-magnitude codes: sign at 15 / 31, magnitude 6..0 / 22..16
ROT = 8  # codes 2 / 3 sit this many bits above where the pair wants them
# code c's bits (m0..m6, s) of a word: codes 0 / 1 where the bf16x2 wants them, codes 2 / 3
# where rotr 8 brings them there
WGMMA_BITS_INT8 = ((0, 1, 2, 3, 4, 5, 6, 15), (16, 17, 18, 19, 20, 21, 22, 31),
                   (8, 9, 10, 11, 12, 13, 14, 23), (24, 25, 26, 27, 28, 29, 30, 7))
MAX_SCALE_BYTE = 254 - SCALE_BIAS  # the largest finite E8M0 byte the layout holds (127)


def int8_fits(codes: Tensor, scales: Tensor) -> bool:
    """Whether the layout holds a weight exactly: every finite scale byte at most 127 and no
    code -128 (byte 0x80) (one device sync; checked once per weight)."""
    finite = scales[scales != 255]
    ok = finite.numel() == 0 or int(finite.max()) <= MAX_SCALE_BYTE
    return bool(ok and not (codes.view(torch.uint8) == 0x80).any())


def sign_magnitude(codes: Tensor) -> Tensor:
    """Two's complement int8 codes (uint8 / int8 bytes) -> int64 sign-magnitude bytes: the sign
    at bit 7, |b| in bits 6..0 (b = -128 has no such byte: `int8_fits` refuses it)."""
    b = codes.view(torch.int8).to(torch.int64)
    return ((b < 0).to(torch.int64) << 7) | b.abs()


def wgmma_layout_int8(codes: Tensor, scales: Tensor, block_k: int,
                      warps: int = WGMMA_WARPS, align: tuple[int, int] = (1, 1)
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """mxint8 codes [N, K] (uint8 bytes, two's complement) + E8M0 bytes [N, K/32] -> (A words,
    B words, prepared scale bytes) in sign-magnitude (fp8_words.two_word_layout). Needs
    K % 32 == 0, block_k % 128 == 0 and `int8_fits`."""
    return two_word_layout(sign_magnitude(codes), scales, SCALE_BIAS, WGMMA_BITS_INT8, block_k,
                           warps, align, "wgmma_layout_int8")


def int8_pairs(a_words: Tensor, b_words: Tensor) -> tuple[Tensor, ...]:
    """The four bf16x2 patterns (before the scale multiply) of A + B words: the PTX's steps
    (pair = word & MASK; rotr(word, 8) & MASK), one for one."""
    pairs = []
    for words in (a_words, b_words):
        w = words.to(torch.int64) & 0xFFFFFFFF
        pairs += [w & MASK, _rotr(w, ROT) & MASK]
    return tuple(pairs)


def wgmma_decode_int8(a_words: Tensor, b_words: Tensor, sbytes: Tensor, n: int, k: int,
                      block_k: int, warps: int = WGMMA_WARPS) -> Tensor:
    """fp32 [n, K padded] by the kernel's bit operations, step for step (integer torch)."""
    return wgmma_scaled(int8_pairs(a_words, b_words), sbytes, n, k, block_k, warps)


__all__ = ["MASK", "MAX_SCALE_BYTE", "ROT", "SCALE_BIAS", "WGMMA_BITS_INT8", "int8_fits",
           "int8_pairs", "sign_magnitude", "wgmma_decode_int8", "wgmma_layout_int8"]
