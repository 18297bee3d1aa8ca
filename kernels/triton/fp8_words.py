"""mxfp8 (e4m3) weights laid out for the Gluon wgmma kernel (linear_wgmma.py, FMT 3), and the
torch twin of its decoder: the CPU check of the GPU bits.

Why: an 8-bit weight read through the generic decode ran at 0.77x bf16 at M = 1 (issue 14);
wgmma with the decoded tile in its register operand is what made mxfp4 / mxfp6 2x. An e4m3
code [s e3 e2 e1 e0 m2 m1 m0] placed at bf16 bits {15, 10..7, 6..4} is its value * 2**-120,
subnormals included (exponent field 0 is a bf16 subnormal with the same mantissa), so one
bf16x2 multiply by the scale word 2**(E - 7) (scale byte stored E + 120) finishes a pair.
A thread's 8 codes of one row and one 32-column block (fp4_words' order: columns 16 c0 + 8 q +
2 t + e, code j = 4 c0 + 2 q + e) fill two words: A (codes 0..3), B (codes 4..7). In each word
code 0 / 1 sit in place (pair = word & FULL, one instruction); code 2 / 3 are split so that
pair = (rotr(word, 4) & EXP_SIGN) | (rotl(word, 4) & MANT): a 32-bit word holds 4 codes in
exactly its 32 bits, which no single rotation can bring to a bf16x2 twice (FULL's runs of 7
bits cannot land on the complement's runs of 4), two can.
Scale bytes: NaN blocks (0xFF) keep 0xFF with codes zeroed (0 * inf = NaN, as mxfp4's);
every finite byte must be in [3, 134] (the scale word a finite bf16, and the smallest value
2**-9 * 2**(E - 127) at least bf16's 2**-133) and no code may be an e4m3 NaN (0x7F / 0xFF):
`fp8_fits` says so once per weight (real checkpoints hold neither), else the table's next
strategy runs the layer.
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.triton.fp4_words import (WGMMA_WARPS, _rotr, place_bits, wgmma_order, wgmma_pad,
                                      wgmma_scaled, wgmma_scales)

SCALE_BIAS = 120  # stored scale byte: E + 120, the bf16 exponent of 2**(E - 127 + 120)
FULL, EXP_SIGN, MANT = 0x87F087F0, 0x87808780, 0x00700070
# code c's bits (m0, m1, m2, e0, e1, e2, e3, s) of a word: codes 0 / 1 where the bf16x2 wants
# them; codes 2 / 3 where rotr 4 (exponent, sign) and rotl 4 (mantissa) bring them there
WGMMA_BITS_E4M3 = ((4, 5, 6, 7, 8, 9, 10, 15), (20, 21, 22, 23, 24, 25, 26, 31),
                   (0, 1, 2, 11, 12, 13, 14, 19), (16, 17, 18, 27, 28, 29, 30, 3))


def fp8_fits(codes: Tensor, scales: Tensor) -> bool:
    """Whether the layout holds a weight exactly: every finite scale byte in [3, 134] and no
    e4m3 NaN code (one device sync; checked once per weight)."""
    finite = scales[scales != 255]
    ok = finite.numel() == 0 or (int(finite.min()) >= 3
                                 and int(finite.max()) + SCALE_BIAS <= 254)
    return bool(ok and not ((codes & 0x7F) == 0x7F).any())


def two_word_layout(codes: Tensor, scales: Tensor, scale_bias: int, bit_places: tuple,
                    block_k: int, warps: int, align: tuple[int, int], who: str
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """An 8-bit format's codes [N, K] (int64, as the words hold them) + E8M0 bytes [N, K/32] ->
    (A words: codes 0..3 of a thread's 8, B words: codes 4..7, prepared scale bytes: E +
    scale_bias, NaN blocks 0xFF with their codes zeroed), tile by tile as fp4_words.wgmma_layout
    (N and K padded with +0; `align`: as there); code j of a word at bit_places[j]."""
    n, k = codes.shape
    if block_k % 128 or k % 32:
        raise ValueError(f"{who}: K={k} must hold whole 32-element blocks and the K "
                         f"tile {block_k} be a multiple of 128")
    nan = scales == 255
    codes = codes.masked_fill(nan.repeat_interleave(32, dim=1), 0)
    sbytes = torch.where(nan, scales, scales + scale_bias)
    codes, sbytes = wgmma_pad(codes, sbytes, block_k, warps, align)
    c = wgmma_order(codes, block_k, warps)  # (word, code j)
    return (place_bits(c[:, :4], bit_places), place_bits(c[:, 4:], bit_places),
            wgmma_scales(sbytes, block_k, warps))


def wgmma_layout_fp8(codes: Tensor, scales: Tensor, block_k: int,
                     warps: int = WGMMA_WARPS, align: tuple[int, int] = (1, 1)
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """e4m3 codes [N, K] (uint8) + E8M0 bytes [N, K/32] -> (A words, B words, prepared scale
    bytes) (`two_word_layout`). Needs K % 32 == 0, block_k % 128 == 0 and `fp8_fits`."""
    return two_word_layout(codes.to(torch.int64), scales, SCALE_BIAS, WGMMA_BITS_E4M3, block_k,
                           warps, align, "wgmma_layout_fp8")


def fp8_pairs(a_words: Tensor, b_words: Tensor) -> tuple[Tensor, ...]:
    """The four bf16x2 patterns (before the scale multiply) of A + B words: the PTX's steps
    (pair = word & FULL; (rotr 4 & EXP_SIGN) | (rotl 4 & MANT)), one for one."""
    pairs = []
    for words in (a_words, b_words):
        w = words.to(torch.int64) & 0xFFFFFFFF
        pairs += [w & FULL, (_rotr(w, 4) & EXP_SIGN) | (_rotr(w, 28) & MANT)]
    return tuple(pairs)


def wgmma_decode_fp8(a_words: Tensor, b_words: Tensor, sbytes: Tensor, n: int, k: int,
                     block_k: int, warps: int = WGMMA_WARPS) -> Tensor:
    """fp32 [n, K padded] by the kernel's bit operations, step for step (integer torch)."""
    return wgmma_scaled(fp8_pairs(a_words, b_words), sbytes, n, k, block_k, warps)


__all__ = ["EXP_SIGN", "FULL", "MANT", "SCALE_BIAS", "WGMMA_BITS_E4M3", "fp8_fits", "fp8_pairs",
           "two_word_layout", "wgmma_decode_fp8", "wgmma_layout_fp8"]
