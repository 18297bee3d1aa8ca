"""mxint8 weights for the wgmma kernel (kernels/triton/int8_words.py): the layout decoded by the
torch twin of the GPU decoder equals the reference dequantization at every code and scale byte
the layout takes (CPU, in CI), and the weights it cannot hold exactly are refused; the kernel's
own bits are checked on an sm_90 GPU (test_wgmma_formats.py)."""
from __future__ import annotations

import pytest
import torch

from kernels.triton import int8_words as i8
from support.mx_weights import int8_weight as weight
from support.word_layouts import assert_two_word_layout_decodes


def test_bits_fill_each_word_once_and_the_rotation_brings_codes_2_3_home() -> None:
    assert sorted(p for bits in i8.WGMMA_BITS_INT8 for p in bits) == list(range(32))
    for j in (0, 1):  # codes 0 / 1 in place; codes 2 / 3 rotr 8 onto the same bits
        assert i8.WGMMA_BITS_INT8[j] == tuple((p - i8.ROT) % 32 for p in i8.WGMMA_BITS_INT8[j + 2])
        assert sum(1 << p for p in i8.WGMMA_BITS_INT8[j]) & ~i8.MASK == 0
    assert bin(i8.MASK).count("1") == 16


def test_sign_magnitude_of_every_code() -> None:
    codes = torch.tensor([c for c in range(256) if c != 0x80], dtype=torch.uint8)
    sm = i8.sign_magnitude(codes)
    b = codes.view(torch.int8).to(torch.int64)
    assert torch.equal(torch.where(sm >= 128, -(sm & 0x7F), sm & 0x7F), b)
    assert int(sm[codes == 0]) == 0  # +0: mxint8 has no negative zero


@pytest.mark.parametrize("n,k,block_k,warps", [(64, 256, 256, 4), (200, 512, 128, 4),
                                               (40, 2880, 256, 4), (200, 384, 128, 8),
                                               (72, 2880, 128, 8)])
def test_layout_decodes_to_the_reference(n: int, k: int, block_k: int, warps: int) -> None:
    w = weight(n, k, torch.Generator().manual_seed(n + k + block_k + warps + 1))
    assert i8.int8_fits(w.data, w.scales)
    assert_two_word_layout_decodes(w, i8.wgmma_layout_int8, i8.wgmma_decode_int8, block_k,
                                   warps)


def test_weights_the_layout_cannot_hold_are_refused() -> None:
    w = weight(16, 64, torch.Generator().manual_seed(5))
    assert i8.int8_fits(w.data, w.scales)
    assert i8.int8_fits(w.data, w.scales.clone().fill_(i8.MAX_SCALE_BYTE))
    for byte in (128, 200, 254):  # a scale word past bf16's finite range
        assert not i8.int8_fits(w.data, w.scales.clone().fill_(byte)), byte
    codes = w.data.clone()
    codes[3, 7] = 0x80  # -128: no 7-bit magnitude
    assert not i8.int8_fits(codes, w.scales)
    with pytest.raises(ValueError, match=r"K=48 must hold whole 32-element blocks"):
        i8.wgmma_layout_int8(w.data[:, :48], w.scales[:, :2], 128)
