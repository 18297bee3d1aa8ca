"""Storage layouts of MX element codes (see kernels/spec/formats.py for the bit order).

packed fp4: two codes a byte, element 2i in the low nibble, 2i+1 in the high nibble.
packed fp6: four codes in three bytes, w = c0 | c1<<6 | c2<<12 | c3<<18, bytes little-endian.
unpacked:   one code a byte in the low bits (8-bit formats are always this).
"""
from __future__ import annotations

import torch
from torch import Tensor

from kernels.spec.formats import ElemFormat, bytes_per_row


def pack_codes(codes: Tensor, fmt: ElemFormat, layout: str) -> Tensor:
    """[R, K] uint8 codes -> [R, bytes_per_row(fmt, layout, K)] uint8 data."""
    rows, k = codes.shape
    if layout == "unpacked" or fmt.bits == 8:
        return codes
    mask = (1 << fmt.bits) - 1
    if fmt.bits == 4:
        pairs = (codes & mask).view(rows, k // 2, 2)
        return pairs[..., 0] | (pairs[..., 1] << 4)
    if fmt.bits == 6:
        quads = (codes & mask).view(rows, k // 4, 4).to(torch.int32)
        word = quads[..., 0] | quads[..., 1] << 6 | quads[..., 2] << 12 | quads[..., 3] << 18
        triple = torch.stack((word & 0xFF, word >> 8 & 0xFF, word >> 16 & 0xFF), dim=-1)
        return triple.to(torch.uint8).view(rows, k * 3 // 4)
    raise ValueError(f"{fmt.name}: no packed layout for {fmt.bits}-bit codes")


def unpack_codes(data: Tensor, fmt: ElemFormat, layout: str, k: int) -> Tensor:
    """[R, bytes_per_row] uint8 data -> [R, K] uint8 codes (inverse of pack_codes)."""
    rows, width = data.shape
    expected = bytes_per_row(fmt, layout, k)
    if width != expected:
        raise ValueError(
            f"{fmt.name} {layout} data has {width} bytes a row, expected {expected} for K={k}; "
            "pass the K the data was quantized with"
        )
    if layout == "unpacked" or fmt.bits == 8:
        return data
    if fmt.bits == 4:
        return torch.stack((data & 0xF, data >> 4), dim=-1).view(rows, k)
    if fmt.bits == 6:
        triple = data.view(rows, k // 4, 3).to(torch.int32)
        word = triple[..., 0] | triple[..., 1] << 8 | triple[..., 2] << 16
        quads = torch.stack([word >> shift & 0x3F for shift in (0, 6, 12, 18)], dim=-1)
        return quads.to(torch.uint8).view(rows, k)
    raise ValueError(f"{fmt.name}: no packed layout for {fmt.bits}-bit codes")
