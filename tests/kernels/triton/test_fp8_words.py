"""mxfp8 e4m3 weights for the wgmma kernel (kernels/triton/fp8_words.py): the layout decoded by
the torch twin of the GPU decoder equals the reference dequantization at every code and scale
byte the layout takes (CPU, in CI), and the weights it cannot hold exactly are refused; the
kernel's own bits are checked on an sm_90 GPU (test_wgmma_formats.py)."""
from __future__ import annotations

import pytest
import torch

from kernels.triton import fp8_words as f8
from support.mx_weights import e4m3_weight as weight
from support.word_layouts import assert_two_word_layout_decodes


def test_bits_fill_each_word_once() -> None:
    assert sorted(p for bits in f8.WGMMA_BITS_E4M3 for p in bits) == list(range(32))
    assert f8.FULL == f8.EXP_SIGN | f8.MANT and not f8.EXP_SIGN & f8.MANT


@pytest.mark.parametrize("n,k,block_k,warps", [(64, 256, 256, 4), (200, 512, 128, 4),
                                               (40, 2880, 256, 4), (200, 384, 128, 8),
                                               (72, 2880, 128, 8)])
def test_layout_decodes_to_the_reference(n: int, k: int, block_k: int, warps: int) -> None:
    w = weight(n, k, torch.Generator().manual_seed(n + k + block_k + warps))
    assert f8.fp8_fits(w.data, w.scales)
    assert_two_word_layout_decodes(w, f8.wgmma_layout_fp8, f8.wgmma_decode_fp8, block_k, warps)


def test_weights_the_layout_cannot_hold_are_refused() -> None:
    w = weight(16, 64, torch.Generator().manual_seed(5))
    assert f8.fp8_fits(w.data, w.scales)
    for byte in (0, 2, 135, 254):  # a scale word past bf16 / values below its subnormals
        assert not f8.fp8_fits(w.data, w.scales.clone().fill_(byte)), byte
    for code in (0x7F, 0xFF):  # an e4m3 NaN element
        codes = w.data.clone()
        codes[3, 7] = code
        assert not f8.fp8_fits(codes, w.scales)
    with pytest.raises(ValueError, match=r"K=48 must hold whole 32-element blocks"):
        f8.wgmma_layout_fp8(w.data[:, :48], w.scales[:, :2], 128)
