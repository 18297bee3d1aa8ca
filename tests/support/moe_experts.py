"""Random MoE expert weights [E, N, K] for the expert kernels' tests: every code, edge scale
bytes and NaN blocks, in the layouts the wgmma expert layout takes."""
from __future__ import annotations

import torch

from kernels.mx import MXTensor
from kernels.reference.packing import pack_codes
from kernels.spec.formats import FORMATS
from support.mx_weights import e4m3_weight, int8_weight


def experts(e: int, n: int, k: int, gen: torch.Generator, nan_blocks: int = 0) -> MXTensor:
    """E random packed mxfp4 experts [E, N, K] (every code, scale bytes 110..128; NaN blocks)."""
    codes = torch.randint(0, 16, (e, n, k), generator=gen)
    scales = torch.randint(110, 129, (e, n, k // 32), generator=gen)
    if nan_blocks:
        flat = scales.view(-1)
        flat[torch.randperm(flat.numel(), generator=gen)[:nan_blocks]] = 255
    data = torch.stack([pack_codes(c.to(torch.uint8), FORMATS["mxfp4"], "packed") for c in codes])
    return MXTensor(data, scales.to(torch.uint8), "mxfp4", "even", torch.Size((e, n, k)),
                    "packed")


def experts6(fmt: str, e: int, n: int, k: int, layout: str, gen: torch.Generator) -> MXTensor:
    """E random mxfp6 experts (scale bytes 100..128, a few NaN blocks) in `layout`."""
    codes = torch.randint(0, 64, (e, n, k), generator=gen).to(torch.uint8)
    scales = torch.randint(100, 129, (e, n, k // 32), generator=gen)
    scales.view(-1)[torch.randperm(scales.numel(), generator=gen)[:3]] = 255
    data = torch.stack([pack_codes(c, FORMATS[fmt], layout) for c in codes])
    return MXTensor(data, scales.to(torch.uint8), fmt, "even", torch.Size((e, n, k)), layout)


EIGHT_BIT = ("mxfp8_e4m3", "mxint8")


def experts8(fmt: str, e: int, n: int, k: int, gen: torch.Generator) -> MXTensor:
    """E random 8-bit experts (mxfp8 e4m3 / mxint8) with every code and edge scale byte their
    wgmma layout holds (support.mx_weights), NaN blocks among them."""
    one = (e4m3_weight if fmt == "mxfp8_e4m3" else int8_weight)(e * n, k, gen)
    return MXTensor(one.data.reshape(e, n, k), one.scales.reshape(e, n, k // 32), fmt, "even",
                    torch.Size((e, n, k)), "unpacked")
