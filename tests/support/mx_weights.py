"""Random MX weights that reach every code and the edge scale bytes, shared by the wgmma
layout tests (CPU) and the kernel tests (GPU)."""
from __future__ import annotations

import torch

from kernels.mx import MXTensor
from kernels.reference.packing import pack_codes
from kernels.spec.formats import FORMATS

#: every e4m3 code but the two NaNs (0x7F, 0xFF)
E4M3_CODES = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F])
#: every mxint8 byte but -128 (0x80: int8_words' layout has no magnitude 128)
INT8_CODES = torch.tensor([c for c in range(256) if c != 0x80])


def e4m3_weight(n: int, k: int, gen: torch.Generator) -> MXTensor:
    """Random mxfp8 e4m3 codes (every non-NaN code in the first row) and scale bytes 100..134
    with 3, 4, 126, 127, 128, 134 and 0xFF (NaN) planted: the range fp8_words' layout holds."""
    codes = E4M3_CODES[torch.randint(0, E4M3_CODES.numel(), (n, k), generator=gen)]
    codes[0, :min(k, E4M3_CODES.numel())] = E4M3_CODES[:k]
    scales = torch.randint(100, 135, (n, k // 32), generator=gen)
    flat = scales.view(-1)
    at = torch.randperm(flat.numel(), generator=gen)[:14]
    flat[at] = torch.tensor([3, 4, 126, 127, 128, 134, 255] * 2)
    return MXTensor(codes.to(torch.uint8), scales.to(torch.uint8), "mxfp8_e4m3", "even",
                    torch.Size((n, k)), "unpacked")


def int8_weight(n: int, k: int, gen: torch.Generator) -> MXTensor:
    """Random mxint8 codes (every byte but 0x80 in the first row) and scale bytes 90..127 with
    0, 1, 2, 126, 127 and 0xFF (NaN) planted: the range int8_words' layout holds."""
    codes = INT8_CODES[torch.randint(0, INT8_CODES.numel(), (n, k), generator=gen)]
    codes[0, :min(k, INT8_CODES.numel())] = INT8_CODES[:k]
    scales = torch.randint(90, 128, (n, k // 32), generator=gen)
    flat = scales.view(-1)
    at = torch.randperm(flat.numel(), generator=gen)[:12]
    flat[at] = torch.tensor([0, 1, 2, 126, 127, 255] * 2)[:at.numel()]
    return MXTensor(codes.to(torch.uint8), scales.to(torch.uint8), "mxint8", "even",
                    torch.Size((n, k)), "unpacked")


def fp4_weight(n: int, k: int, gen: torch.Generator, specials: bool = True) -> MXTensor:
    """Random mxfp4 codes (all 16 in every row) and scale bytes 100..128, with the bytes 0, 1,
    2, 126, 127, 128 and 0xFF (NaN) planted."""
    codes = torch.randint(0, 16, (n, k), generator=gen)
    codes[:, :16] = torch.arange(16)
    scales = torch.randint(100, 129, (n, k // 32), generator=gen)
    if specials:
        flat = scales.view(-1)
        at = torch.randperm(flat.numel(), generator=gen)[:21]
        flat[at] = torch.tensor([0, 1, 2, 126, 127, 128, 255] * 3)
    data = pack_codes(codes.to(torch.uint8), FORMATS["mxfp4"], "packed")
    return MXTensor(data, scales.to(torch.uint8), "mxfp4", "even", torch.Size((n, k)), "packed")


def fp6_weight(fmt: str, n: int, k: int, layout: str, gen: torch.Generator) -> MXTensor:
    """Random codes (all 64 in the first row) and scale bytes 100..120 with 0, 1, 2, 126, 127,
    128 and 0xFF (NaN) planted, in `layout`."""
    codes = torch.randint(0, 64, (n, k), generator=gen)
    codes[0, :64] = torch.arange(64)
    scales = torch.randint(100, 121, (n, k // 32), generator=gen)
    flat = scales.view(-1)
    flat[torch.randperm(flat.numel(), generator=gen)[:14]] = torch.tensor([0, 1, 2, 126, 127,
                                                                             128, 255] * 2)
    data = pack_codes(codes.to(torch.uint8), FORMATS[fmt], layout)
    return MXTensor(data, scales.to(torch.uint8), fmt, "even", torch.Size((n, k)), layout)
