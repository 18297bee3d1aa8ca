"""mxfp6 weights laid out for the Gluon wgmma kernel (linear_wgmma.py), and the torch twin of its
decoder: the CPU check of the GPU bits.

Why this split: a 6-bit code [s, x4, x3, x2, x1, x0] (e2m3: s e1 e0 m2 m1 m0; e3m2: s e2 e1 e0
m1 m0) is its top 4 bits plus 2 low bits. The top 4 go into mxfp4's wgmma words (fp4_words:
the same layout and the same ~11 instructions per 8 codes put them at bf16 bits {15, 8, 7, 6});
the low 2 go into B words, two 32-column blocks a word, 16 bits each, where one rotation and one
mask put a bf16x2 pair's 4 bits in place. So an mxfp6 weight costs 6 bits an element in memory
(A: 4, B: 2) and the decode stays on 32-bit lanes:
- e2m3: the low bits belong at {5, 4}; the bf16 is then the value * 2**-126, as mxfp4's, so
  the scale byte is stored E + 126 and one multiply finishes (every finite E <= 128);
- e3m2: the 3 exponent bits belong one higher, {9, 8, 7}, the low bits at {6, 5}; the bf16 is
  the value * 2**-124: scale byte E + 124 (every finite E <= 130). Its A words place the bits
  differently (WGMMA_BITS_E3M2), so that the same count of instructions as mxfp4's (pairs 0 and
  1 one rotation and mask, pairs 2 and 3 a rotation for the exponents and a shift for the signs)
  lands them at {15, 9, 8, 7}: 16 fewer instructions a word than moving mxfp4's placement up.
B word of blocks (2i, 2i + 1) of one thread's row: block 2i's pair p (codes 2p, 2p + 1) at bits
{4 + 2p, 5 + 2p} and {20 + 2p, 21 + 2p}; block 2i + 1's at the same bits rotated left by 8.
Rotating right by 8 * (block % 2) + 2p (- 1 for e3m2) brings either to {4, 5} / {20, 21} (+1).
A NaN block (0xFF) keeps 0xFF with its codes zeroed: 0 * inf = NaN, as mxfp4's.
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.triton.fp4_words import (WGMMA_BITS, WGMMA_WARPS, _rotr, to_int32, wgmma_order,
                                      wgmma_pad, wgmma_pairs, wgmma_scaled, wgmma_scales,
                                      wgmma_words)

SCALE_BIAS = {"mxfp6_e2m3": 126, "mxfp6_e3m2": 124}  # stored scale byte: E + this
B_MASK = {"mxfp6_e2m3": 0x00300030, "mxfp6_e3m2": 0x00600060}  # a pair's low bits, in place
B_ROT = {"mxfp6_e2m3": 0, "mxfp6_e3m2": 31}  # added to the rotation (31: one to the left)
# e3m2 A words: code j's (e0, e1, e2, sign) bits. Pair 0: word & FULL; pair 1: rotr 4 & FULL;
# pair 2: (rotr 9 & EXP3) | (shl 5 & SIGN); pair 3: (rotr 13 & EXP3) | (shl 1 & SIGN).
WGMMA_BITS_E3M2 = ((7, 8, 9, 15), (23, 24, 25, 31), (11, 12, 13, 19), (27, 28, 29, 3),
                   (16, 17, 18, 10), (0, 1, 2, 26), (20, 21, 22, 14), (4, 5, 6, 30))
SIGN, EXP3, FULL_E3M2 = 0x80008000, 0x03800380, 0x83808380


def wgmma_pairs_e3m2(words: Tensor) -> tuple[Tensor, ...]:
    """The four bf16x2 patterns of e3m2 A words (uint32 in int64), codes 2p / 2p + 1 at bits
    {15, 9..7} / {31, 25..23} of pair p: the PTX's steps."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    return (w & FULL_E3M2, _rotr(w, 4) & FULL_E3M2,
            (_rotr(w, 9) & EXP3) | ((w << 5) & SIGN), (_rotr(w, 13) & EXP3) | ((w << 1) & SIGN))


def fp6_pairs(a_words: Tensor, b_words: Tensor, fmt: str) -> tuple[Tensor, ...]:
    """The four bf16x2 patterns (before the scale multiply) of A words + their B words (one B
    word serves two A words, blocks 2i and 2i + 1): the PTX's steps, one for one."""
    b = (b_words.to(torch.int64) & 0xFFFFFFFF).repeat_interleave(2)  # one per A word
    base = 8 * (torch.arange(b.numel(), device=b.device) % 2) + B_ROT[fmt]
    tops = wgmma_pairs_e3m2(a_words) if fmt == "mxfp6_e3m2" else wgmma_pairs(a_words)
    return tuple(a | (_rotr(b, (base + 2 * p) % 32) & B_MASK[fmt]) for p, a in enumerate(tops))


def scale_fits(scales: Tensor, fmt: str) -> bool:
    """Whether every finite scale byte E keeps E + SCALE_BIAS a finite bf16 exponent (<= 254)."""
    finite = scales[scales != 255]
    return bool(finite.numel() == 0 or int(finite.max()) + SCALE_BIAS[fmt] <= 254)


def wgmma_layout_fp6(codes: Tensor, scales: Tensor, fmt: str, block_k: int,
                     warps: int = WGMMA_WARPS, align: tuple[int, int] = (1, 1)
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """6-bit codes [N, K] (one a byte) + E8M0 bytes [N, K/32] -> (A words: 8 codes' top bits,
    B words: 16 codes' low bits, prepared scale bytes), tile by tile as fp4_words.wgmma_layout
    (N and K padded with +0; `align`: as there). Needs K % 32 == 0, block_k % 128 == 0 and
    `scale_fits`."""
    n, k = codes.shape
    if block_k % 128 or k % 32:
        raise ValueError(f"wgmma_layout_fp6: K={k} must hold whole 32-element blocks and the K "
                         f"tile {block_k} be a multiple of 128")
    nan = scales == 255
    codes = codes.masked_fill(nan.repeat_interleave(32, dim=1), 0)
    sbytes = torch.where(nan, scales, scales + SCALE_BIAS[fmt])
    codes, sbytes = wgmma_pad(codes, sbytes, block_k, warps, align)
    low = wgmma_order(codes & 3, block_k, warps).reshape(-1, 2, 8)  # (B word, block % 2, j)
    word = torch.zeros(low.shape[0], dtype=torch.int64, device=codes.device)
    for y in (0, 1):
        for j in range(8):  # code j = pair j // 2, half j % 2
            word |= low[:, y, j] << ((4 + 2 * (j // 2) + 16 * (j % 2) + 8 * y) % 32)
    places = WGMMA_BITS_E3M2 if fmt == "mxfp6_e3m2" else WGMMA_BITS
    return (wgmma_words(codes >> 2, block_k, warps, places), to_int32(word),
            wgmma_scales(sbytes, block_k, warps))


def wgmma_decode_fp6(a_words: Tensor, b_words: Tensor, sbytes: Tensor, fmt: str, n: int,
                     k: int, block_k: int, warps: int = WGMMA_WARPS) -> Tensor:
    """fp32 [n, K padded] by the kernel's bit operations, step for step (integer torch)."""
    return wgmma_scaled(fp6_pairs(a_words, b_words, fmt), sbytes, n, k, block_k, warps)


__all__ = ["B_MASK", "B_ROT", "SCALE_BIAS", "WGMMA_BITS_E3M2", "fp6_pairs", "scale_fits",
           "wgmma_decode_fp6", "wgmma_pairs_e3m2",
           "wgmma_layout_fp6"]
