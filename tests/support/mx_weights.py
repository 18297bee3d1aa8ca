"""Random MX weights that reach every code and the edge scale bytes, shared by the wgmma
layout tests (CPU) and the kernel tests (GPU)."""
from __future__ import annotations

import torch

from kernels.mx import MXTensor

#: every e4m3 code but the two NaNs (0x7F, 0xFF)
E4M3_CODES = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F])


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
