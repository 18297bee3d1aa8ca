"""The check every 8-bit wgmma word layout (fp8_words, int8_words) passes on the CPU: its A / B
words and scale bytes have the layout's sizes, and its decoder's torch twin gives the reference
dequantization bit for bit (NaN blocks, signs of zero, the padding +0)."""
from __future__ import annotations

import torch

from kernels.mx import mx_dequantize


def assert_two_word_layout_decodes(w, layout, decode, block_k: int, warps: int) -> None:
    """`layout(codes, scales, block_k, warps)` -> (A words, B words, scale bytes) of an [n, k]
    weight `w`; `decode(a, b, s, n, k, block_k, warps)` its twin's fp32 [n, K padded]."""
    n, k = w.shape
    a, b, s = layout(w.data, w.scales, block_k, warps)
    rows, k_pad = -(-n // (16 * warps)) * 16 * warps, -(-k // block_k) * block_k
    assert a.dtype == b.dtype == torch.int32 and s.dtype == torch.uint8
    assert (a.numel(), b.numel(), s.numel()) == (rows * k_pad // 8, rows * k_pad // 8,
                                                 rows * k_pad // 32)  # 8 bits an element
    got = decode(a, b, s, n, k, block_k, warps)
    want = mx_dequantize(w, torch.float32, backend="reference")
    nan = want.isnan()
    assert nan.any() and want[~nan].any()  # (the weights plant NaN blocks)
    assert torch.equal(got[:, :k].isnan(), nan)
    assert torch.equal(got[:, :k][~nan], want[~nan])
    assert torch.equal(torch.signbit(got[:, :k][~nan]), torch.signbit(want[~nan]))
    assert not got[:, k:].any() and not got[:, k:].signbit().any()
