"""tools/bench_quant.py --tiles: the tile list's parsing and errors, mx_quant's TILE_OVERRIDE
hook (what a GPU launch takes), and one case run under a tile in the interpreter, the hook
restored after it."""
from __future__ import annotations

import pytest
import torch

from kernels.triton import mx_quant, quant_tiles
from support.tools import load_tool

load_tool("timing")  # bench_quant's sibling imports (tools/ is on its path as a script)
load_tool("gates")
bench_quant = load_tool("bench_quant")


def test_tiles_parse_with_the_shipped_tile_first() -> None:
    assert bench_quant.parse_tiles("") == [None]
    assert bench_quant.parse_tiles("16x512w8, 32x256W4") == [None, (16, 512, 8), (32, 256, 4)]


@pytest.mark.parametrize("bad", ["16x256", "16-256w4", "12x256w4", "16x96w4", "16x256w3",
                                 "0x256w4"])
def test_a_bad_tile_names_itself_and_the_form(bad: str) -> None:
    with pytest.raises(ValueError, match=f"--tiles '{bad}'"):
        bench_quant.parse_tiles(f"16x256w4,{bad}")


def test_the_override_sets_tile_and_warps_of_one_kernel_and_layout(monkeypatch) -> None:
    monkeypatch.setattr(quant_tiles, "TILE_OVERRIDE", {("quantize", 2): (32, 256, 8)})
    assert quant_tiles.gpu_tile("quantize", 2) == {"BLOCK_R": 32, "BLOCK_K": 256}
    assert quant_tiles.gpu_warps("quantize", 2) == 8
    assert quant_tiles.gpu_tile("dequantize", 2) == quant_tiles.PACKED_FP6_TILE  # others: as shipped
    assert quant_tiles.gpu_tile("quantize", 1) == quant_tiles.GPU_TILE
    assert quant_tiles.gpu_warps("quantize", 1) == quant_tiles.GPU_WARPS
    monkeypatch.setattr(quant_tiles, "TILE_OVERRIDE", {})
    assert quant_tiles.gpu_tile("quantize", 2) == quant_tiles.PACKED_FP6_TILE
    assert quant_tiles.gpu_tile("qdq", 2) == quant_tiles.GPU_TILE


def test_a_case_under_a_tile_checks_bits_and_restores_the_hook() -> None:
    """(On a GPU the tile is compiled and launched: 32 x 512, 8 warps, bits against the
    reference; in the interpreter the interpreter's tile runs.)"""
    kept = dict(quant_tiles.TILE_OVERRIDE)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows, problems = bench_quant.run_case("mxfp6_e3m2", "packed", "even", (16, 128), device, 1.0,
                                          False, seed=3, tile=(32, 512, 8))
    assert problems == []
    assert [row["kernel"] for row in rows] == ["quantize", "dequantize"]  # qdq: not tiled
    if device == "cuda":
        assert all("'BLOCK_R': 32, 'BLOCK_K': 512}, num_warps 8" in row["config"] for row in rows)
    assert quant_tiles.TILE_OVERRIDE == kept
