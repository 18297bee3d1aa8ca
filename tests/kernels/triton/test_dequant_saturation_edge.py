"""The dequantize kernel at the output dtype's saturation edge against kernels.reference, bit
for bit: every code of every format and layout, every output dtype, with the scale bytes
around `edge` (the largest byte that takes no code past the dtype's max): edge - 1, edge,
edge + 1 (the largest codes saturate), 0xFF (NaN blocks) and a tile mixing them.

Why: saturation (to +-max, Inf codes kept) is decided per element from the code and the scale;
these rows put every code on both sides of that decision.
"""
from __future__ import annotations

import math

import pytest
import torch

from kernels.reference import mx as ref
from kernels.reference.elements import code_value
from kernels.reference.packing import pack_codes
from kernels.spec.formats import FORMATS
from kernels.triton import mx_quant, quant_tiles

from support.device import DEVICE

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

FMT_LAYOUTS = [(name, layout) for name, f in FORMATS.items()
               for layout in (("packed", "unpacked") if f.bits < 8 else ("unpacked",))]
OUT = (torch.float32, torch.bfloat16, torch.float16)
K = 256  # a row holds every code of an 8-bit format


def edge_byte(name: str, out_dtype: torch.dtype) -> int:
    """The largest E8M0 byte (<= 254) with which no finite code of `name` passes out_dtype's
    max (bf16 / fp32 out: 252 for mxfp4, 246 for E4M3; fp16: 140 / 134)."""
    fmt = FORMATS[name]
    top = max(abs(v) for v in map(lambda c: code_value(fmt, c), range(1 << fmt.bits))
              if math.isfinite(v))
    limit = torch.finfo(out_dtype).max
    return max(b for b in range(255) if top * 2.0 ** (b - 127) <= limit)


def test_edge_bytes() -> None:
    assert [edge_byte(n, d) for n in ("mxfp4", "mxfp8_e4m3")
            for d in (torch.bfloat16, torch.float16)] == [252, 140, 246, 134]


def assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN positions differ"
    ints = torch.int32 if got.element_size() == 4 else torch.int16
    g, w = got.view(ints)[~got.isnan()], want.view(ints)[~want.isnan()]
    bad = (g != w).nonzero()
    assert not bad.numel(), (f"{what}: {len(bad)} values differ, first bits "
                             f"{g[bad[0]].item():#x} vs {w[bad[0]].item():#x}")


@pytest.mark.parametrize("out_dtype", OUT, ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name,layout", FMT_LAYOUTS)
def test_dequantize_around_the_edge(name: str, layout: str, out_dtype: torch.dtype) -> None:
    fmt = FORMATS[name]
    safe = edge_byte(name, out_dtype)
    tile_r = (quant_tiles.INTERPRETER_TILE if DEVICE == "cpu"
              else quant_tiles.gpu_tile("dequantize", 0))["BLOCK_R"]
    n = 1 << fmt.bits
    codes = (torch.arange(K) % n).to(torch.uint8)
    groups = [safe - 1, safe, safe + 1, 255]
    rows = tile_r * (len(groups) + 1)
    scales = torch.tensor(groups, dtype=torch.uint8).repeat_interleave(tile_r)
    scales = scales[:, None].expand(-1, K // 32).clone()
    mixed = torch.full((tile_r, K // 32), safe, dtype=torch.uint8)
    mixed[tile_r // 2, 1] = 255  # one NaN block in a tile at the edge
    mixed[tile_r - 1, -1] = safe + 1
    scales = torch.cat([scales, mixed])
    codes = codes.repeat(rows, 1)
    data = pack_codes(codes, fmt, layout)
    got = mx_quant.dequantize(data.to(DEVICE), scales.to(DEVICE), fmt, layout, K,
                              out_dtype).cpu()
    want = ref.dequantize(data, scales, fmt, layout, K, out_dtype)
    for g, lo in enumerate(range(0, rows, tile_r)):
        what = (f"{name} {layout} -> {out_dtype}, scale bytes "
                f"{(groups + ['mixed'])[g]} (edge {safe})")
        assert_same_bits(got[lo:lo + tile_r], want[lo:lo + tile_r], what)
