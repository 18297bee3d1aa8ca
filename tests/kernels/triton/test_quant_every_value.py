"""Every bf16 and every fp16 bit pattern through the Triton quantize kernel, bit for bit
against kernels.reference (codes and scale bytes), for every fp element format, scale rounding
and layout.

Why: every 16-bit input is few enough to check them all, NaN / Inf / zero / subnormal
included, where random tests sample. Each pattern appears three times: among neighbours of
similar magnitude (runs of 1024 and of 8192 patterns sorted by magnitude, each shuffled: ties,
saturation, element subnormals, blocks at every shared exponent) and in a random permutation
(blocks spanning the whole range: codes rounding to zero).
"""
from __future__ import annotations

import pytest
import torch

from kernels.reference import mx as ref
from kernels.spec.formats import FORMATS, ROUNDINGS
from kernels.triton import fp4_lanes, hw_cvt, mx_quant, quant_tiles

from support.device import DEVICE
from support.hw_cvt_path import through_hw_cvt

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

TILE = {"BLOCK_R": 16, "BLOCK_K": 1024}  # whole rows: few interpreter programs
K = 1024
RUNS = (1024, 8192)  # runs of patterns by magnitude: 4 / 32 bf16 binades (0.5 / 4 for fp16)
FP_LAYOUTS = [(name, layout) for name, f in FORMATS.items() if not f.is_int
              for layout in (("packed", "unpacked") if f.bits < 8 else ("unpacked",))]
# each layout through `encode`, and through the GPU-instruction path where it has one (the fp8
# conversion, mxfp4's bf16x2 lanes; bf16 packed mxfp4 also on the lanes' whole words), bf16
# and fp16
PATHS = [(name, layout, path) for name, layout in FP_LAYOUTS for path in ("encode", "hw cvt")
         if path == "encode" or hw_cvt.carrier(FORMATS[name])[0] or name == "mxfp4"]
CASES = [(*case, dtype) for case in PATHS for dtype in (torch.bfloat16, torch.float16)] + \
    [("mxfp4", "packed", "lane words", torch.bfloat16)]


def every_value(dtype: torch.dtype) -> torch.Tensor:
    """[192, K]: each of the 65536 bit patterns three times (module docstring)."""
    gen = torch.Generator().manual_seed(16)
    bits = torch.arange(65536, dtype=torch.int32)
    by_size = bits[torch.argsort((bits & 0x7FFF) * 2 + (bits >> 15), stable=True)]
    parts = []
    for run in RUNS:
        runs = by_size.view(-1, run)
        parts.append(torch.stack([r[torch.randperm(run, generator=gen)] for r in runs]))
    parts.append(bits[torch.randperm(65536, generator=gen)])
    return torch.cat([p.reshape(-1, K) for p in parts]).to(torch.int16).view(dtype)


def check(got: tuple[torch.Tensor, torch.Tensor], want: tuple[torch.Tensor, torch.Tensor],
          x: torch.Tensor, what: str) -> None:
    for part, g, w in (("scales", got[1].cpu(), want[1]), ("data", got[0].cpu(), want[0])):
        bad = (g != w).nonzero()
        if bad.numel():
            at = tuple(bad[0].tolist())
            col = at[1] * x.shape[1] // g.shape[1]
            pytest.fail(f"{what}: {len(bad)} {part} bytes differ, first at {at}: "
                        f"{g[at].item():#04x} vs {w[at].item():#04x} (input row {at[0]} near "
                        f"column {col}: {x[at[0], col:col + 4].tolist()})")


@pytest.mark.parametrize("name,layout,path,dtype", CASES,
                         ids=[f"{n}-{lay}-{p}-{str(d)[6:]}" for n, lay, p, d in CASES])
def test_every_value(name: str, layout: str, path: str, dtype: torch.dtype,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quant_tiles, "INTERPRETER_TILE", TILE)
    monkeypatch.setattr(quant_tiles, "GPU_TILE", TILE)
    monkeypatch.setattr(quant_tiles, "PACKED_FP6_TILE", TILE)
    fmt = FORMATS[name]
    if path != "encode":
        through_hw_cvt(monkeypatch, fmt)
    monkeypatch.setattr(fp4_lanes, "LANE_WORDS_VERIFIED", path == "lane words")
    x = every_value(dtype)
    xd = x.to(DEVICE)
    for rounding in ROUNDINGS:
        want = ref.quantize(x, fmt, rounding, layout)
        what = f"{name} {layout} {rounding} {dtype}"
        check(mx_quant.quantize(xd, fmt, rounding, layout), want, x, what)
