"""mxfp6 weights for the wgmma kernel (kernels/triton/fp6_words.py): the layout decoded by the
torch twin of the GPU decoder equals the reference dequantization at every code and scale byte
(CPU, in CI); the kernel's own bits are checked on an sm_90 GPU (test_wgmma_formats.py)."""
from __future__ import annotations

import pytest
import torch

from kernels.mx import MXTensor, mx_dequantize
from kernels.triton import fp6_words as f6

FP6 = ("mxfp6_e2m3", "mxfp6_e3m2")


def weight(fmt: str, n: int, k: int, gen: torch.Generator) -> MXTensor:
    """Random codes (all 64 in the first row), scale bytes 100..max with 0, 1, 2, 124, 126, 127,
    128, the format's largest and 0xFF (NaN) planted."""
    top = 254 - f6.SCALE_BIAS[fmt]
    codes = torch.randint(0, 64, (n, k), generator=gen)
    codes[0, :64] = torch.arange(64)
    scales = torch.randint(100, top + 1, (n, k // 32), generator=gen)
    flat = scales.view(-1)
    at = torch.randperm(flat.numel(), generator=gen)[:18]
    flat[at] = torch.tensor([0, 1, 2, 124, 126, 127, 128, top, 255] * 2)
    return MXTensor(codes.to(torch.uint8), scales.to(torch.uint8), fmt, "even",
                    torch.Size((n, k)), "unpacked")


@pytest.mark.parametrize("fmt", FP6)
@pytest.mark.parametrize("n,k,block_k,warps", [(64, 256, 256, 4), (200, 512, 128, 4),
                                               (40, 2880, 256, 4), (16, 384, 128, 4),
                                               (200, 512, 128, 8), (72, 2880, 128, 8)])
def test_layout_decodes_to_the_reference(fmt: str, n: int, k: int, block_k: int,
                                         warps: int) -> None:
    """warps = 8: two warpgroups, [128, block_k] tiles (linear_wgmma.WgmmaConfig.warps)."""
    w = weight(fmt, n, k, torch.Generator().manual_seed(n + k + block_k + len(fmt) + warps))
    assert f6.scale_fits(w.scales, fmt)
    a, b, s = f6.wgmma_layout_fp6(w.data, w.scales, fmt, block_k, warps)
    rows, k_pad = -(-n // (16 * warps)) * 16 * warps, -(-k // block_k) * block_k
    assert (a.numel(), b.numel(), s.numel()) == (rows * k_pad // 8, rows * k_pad // 16,
                                                 rows * k_pad // 32)  # 6 bits an element
    got = f6.wgmma_decode_fp6(a, b, s, fmt, n, k, block_k, warps)
    want = mx_dequantize(w, torch.float32, backend="reference")
    nan = want.isnan()
    assert torch.equal(got[:, :k].isnan(), nan)
    assert torch.equal(got[:, :k][~nan], want[~nan])
    assert torch.equal(torch.signbit(got[:, :k][~nan]), torch.signbit(want[~nan]))
    assert not got[:, k:].any()


@pytest.mark.parametrize("fmt", FP6)
def test_scale_bytes_past_the_bf16_range_are_refused(fmt: str) -> None:
    top = 254 - f6.SCALE_BIAS[fmt]
    assert f6.scale_fits(torch.tensor([0, top, 255], dtype=torch.uint8), fmt)
    assert not f6.scale_fits(torch.tensor([top + 1], dtype=torch.uint8), fmt)
