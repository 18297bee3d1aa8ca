"""Packed mxfp4 with its codes moved 4 bytes a thread (packed_codes.FP4_WORD_IO_VERIFIED, the
kernels' WORD_IO: a contiguity hint on the byte columns, nothing else), bit for bit against
kernels.reference: quantize through `encode` and through the GPU-instruction paths, dequantize
to every dtype, K tails inside a tile and rows that are not 16-byte aligned. On a GPU the
hinted kernels are compiled and run (this test is what the gate waits on); in the interpreter
the same code runs with the hint a no-op."""
from __future__ import annotations

import zlib

import pytest
import torch

from kernels.reference import mx as ref
from kernels.spec.formats import FORMATS, ROUNDINGS
from kernels.triton import fp4_lanes, hw_cvt, mx_quant, packed_codes

from support.device import DEVICE
from support.hw_cvt_path import through_hw_cvt

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

FMT = FORMATS["mxfp4"]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
SHAPES = [(1, 32), (3, 96), (17, 288), (16, 1024), (5, 2080)]  # K % 256 != 0 tails


def blocks(r: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[r, k]: randn blocks at per-block scales across the dtype's range, plus a NaN, an Inf,
    a zero and a subnormal block where the shape has room."""
    gen = torch.Generator().manual_seed(seed)
    lo, hi = (-24, 12) if dtype == torch.float16 else (-140, 120)
    e = torch.randint(lo, hi, (r, k // 32, 1), generator=gen).double()
    x = (torch.randn(r, k // 32, 32, generator=gen).double() * torch.exp2(e)).float()
    specials = [float("nan"), float("inf"), 0.0, 2.0 ** -130]
    for i, v in enumerate(specials[: r * (k // 32) - 1]):
        x.view(-1, 32)[1 + i] = torch.randn(32, generator=gen) * v if v else 0.0
        if v != v or v == float("inf"):
            x.view(-1, 32)[1 + i, 3] = v
    return x.view(r, k).to(dtype)


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bit for bit, NaNs compared by position only."""
    nan = want.isnan()
    ints = {4: torch.int32, 2: torch.int16}[want.element_size()]
    return torch.equal(got.isnan(), nan) and torch.equal(got.view(ints)[~nan],
                                                         want.view(ints)[~nan])


@pytest.fixture
def word_io(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packed_codes, "FP4_WORD_IO_VERIFIED", True)


def test_the_gates_reach_the_packed_layouts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """WORD_IO is the packed layouts' (mxfp4's 4-byte moves, mxfp6's half groups), each
    layout under its own gate."""
    for name in ("mxfp4", "mxfp6_e2m3"):
        for layout, want in (("packed", True), ("unpacked", False)):
            fmt = FORMATS[name]
            q = mx_quant.quantize_constexprs(fmt, layout, torch.bfloat16, "even", True,
                                             word_io=True)
            d = mx_quant.dequantize_constexprs(fmt, layout, torch.bfloat16, True, word_io=True)
            assert q["WORD_IO"] is want and d["WORD_IO"] is want, (name, layout)
    monkeypatch.setattr(packed_codes, "FP4_WORD_IO_VERIFIED", True)
    monkeypatch.setattr(packed_codes, "FP6_HALVES_VERIFIED", False)
    assert [packed_codes.word_io_here(p) for p in (0, 1, 2)] == [False, True, False]
    monkeypatch.setattr(packed_codes, "FP4_WORD_IO_VERIFIED", False)
    monkeypatch.setattr(packed_codes, "FP6_HALVES_VERIFIED", True)
    assert [packed_codes.word_io_here(p) for p in (0, 1, 2)] == [False, False, True]


@pytest.mark.parametrize("path", ["encode", "hw cvt"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_quantize_and_dequantize_match_the_reference(dtype: torch.dtype, path: str, word_io,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if path == "hw cvt":
        through_hw_cvt(monkeypatch, FMT)
    else:
        monkeypatch.setattr(hw_cvt, "CVT_VERIFIED", False)
        monkeypatch.setattr(fp4_lanes, "FP4_LANES_VERIFIED", False)
    seed = zlib.crc32(f"word io {dtype} {path}".encode())
    for i, (r, k) in enumerate(SHAPES):
        x = blocks(r, k, dtype, seed + i)
        for rounding in ROUNDINGS:
            where = f"{dtype} {path} {rounding} [{r}, {k}]"
            data, scales = mx_quant.quantize(x.to(DEVICE), FMT, rounding, "packed")
            want_data, want_scales = ref.quantize(x, FMT, rounding, "packed")
            assert torch.equal(scales.cpu(), want_scales), f"scales {where}"
            assert torch.equal(data.cpu(), want_data), f"codes {where}"
        for out in DTYPES:
            got = mx_quant.dequantize(data, scales, FMT, "packed", k, out).cpu()
            want = ref.dequantize(want_data, want_scales, FMT, "packed", k, out)
            assert same_bits(got, want), f"dequantize {where} -> {out}"


def test_rows_not_16_byte_aligned(word_io) -> None:
    """A view one row in (input rows 64 + 2 bytes apart; codes rows odd strides)."""
    x = blocks(9, 544, torch.bfloat16, 7)
    padded = torch.zeros(9, 544 + 1, dtype=torch.bfloat16)
    padded[:, 1:] = x
    view = padded.to(DEVICE)[:, 1:]
    data, scales = mx_quant.quantize(view, FMT, "even", "packed")
    want_data, want_scales = ref.quantize(x, FMT, "even", "packed")
    assert torch.equal(data.cpu(), want_data) and torch.equal(scales.cpu(), want_scales)
    wide = torch.zeros(9, 273, dtype=torch.uint8)
    wide[:, 1:] = want_data
    got = mx_quant.dequantize(wide.to(DEVICE)[:, 1:], want_scales.to(DEVICE), FMT, "packed",
                              544, torch.bfloat16).cpu()
    want = ref.dequantize(want_data, want_scales, FMT, "packed", 544, torch.bfloat16)
    assert same_bits(got, want)
