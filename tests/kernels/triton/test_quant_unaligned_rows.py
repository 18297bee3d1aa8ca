"""Quantize of inputs whose rows Triton cannot prove 16-byte aligned (a view one element in, a
row stride that is not a multiple of 16 elements), bit for bit against the reference, through
the GPU-instruction paths and with the packed layouts' word moves off and on.

Why: the PTX that takes a thread's consecutive elements together (fp4_lanes' bf16x2 pairs,
hw_cvt's packed mxfp6 groups) is right only in the vector layout Triton picks where it can prove
the rows aligned; on an H100 (2026-12-05) a bf16 view one element in gave wrong packed mxfp4
codes. quantize takes the elementwise paths there (launcher.rows_aligned), or, for the
lanes, whole words (fp4_lanes.LANE_WORDS_VERIFIED: each word its own factor, any layout)."""
from __future__ import annotations

import pytest
import torch

from kernels.reference import mx as ref
from kernels.spec.formats import FORMATS
from kernels.triton import fp4_lanes, launcher, mx_quant, packed_codes

from support.device import DEVICE
from support.hw_cvt_path import through_hw_cvt

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

CASES = [("mxfp4", "packed"), ("mxfp4", "unpacked"), ("mxfp6_e2m3", "packed"),
         ("mxfp6_e3m2", "packed"), ("mxfp8_e4m3", "unpacked")]
R, K = 9, 544  # K: two 256 tiles and a 32-element tail


def rows(dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[R, K] randn blocks at per-block scales, a NaN block and a zero block."""
    gen = torch.Generator().manual_seed(seed)
    e = torch.randint(-20, 20, (R, K // 32, 1), generator=gen).double()
    x = (torch.randn(R, K // 32, 32, generator=gen).double() * torch.exp2(e)).float()
    x[0, 1, 5] = float("nan")
    x[1, 2] = 0.0
    return x.view(R, K).to(dtype)


def views(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """x inside wider buffers on DEVICE: one element in (pointer and stride unaligned), two in
    (rows 4-byte aligned for bf16: whole words), and a row stride of K + 8 (16-byte rows for
    bf16, yet not a multiple of 16 elements)."""
    found = {}
    for name, (col, width) in {"one element in": (1, K + 1), "two elements in": (2, K + 2),
                               "row stride K + 8": (0, K + 8)}.items():
        wide = torch.zeros(R, width, dtype=x.dtype, device=DEVICE)
        wide[:, col:col + K] = x.to(DEVICE)
        found[name] = wide[:, col:col + K]
    return found


@pytest.mark.parametrize("word_io", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("name,layout", CASES)
def test_views_quantize_like_their_dense_copies(name: str, layout: str, dtype: torch.dtype,
                                                word_io: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """word_io: the packed layouts' word moves and the lanes' whole words, on / off together."""
    fmt = FORMATS[name]
    through_hw_cvt(monkeypatch, fmt)
    monkeypatch.setattr(packed_codes, "FP4_WORD_IO_VERIFIED", word_io)
    monkeypatch.setattr(packed_codes, "FP6_HALVES_VERIFIED", word_io)
    monkeypatch.setattr(fp4_lanes, "LANE_WORDS_VERIFIED", word_io)
    x = rows(dtype, seed=len(name) + 3 * len(layout))
    want_data, want_scales = ref.quantize(x, fmt, "even", layout)
    for where, view in views(x).items():
        assert not launcher.rows_aligned(view), where
        data, scales = mx_quant.quantize(view, fmt, "even", layout)
        assert torch.equal(scales.cpu(), want_scales), f"{where}: scales"
        bad = (data.cpu() != want_data).nonzero()
        assert not bad.numel(), f"{where}: {len(bad)} code bytes differ, first at {bad[0].tolist()}"


def test_the_grouping_paths_are_taken_where_the_rows_are_provable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Aligned input keeps the lanes and the mxfp6 group PTX (compiled); a view takes neither."""
    for name in ("mxfp4", "mxfp6_e2m3"):
        through_hw_cvt(monkeypatch, FORMATS[name])
    seen = {}
    monkeypatch.setattr(mx_quant, "_launch", lambda fn, ptrs, r, k, strides, consts:
                        seen.update(consts))
    x = rows(torch.bfloat16, seed=1).to(DEVICE)
    one_in = views(x.cpu())["one element in"]
    assert launcher.rows_aligned(x)
    mx_quant.quantize(x, FORMATS["mxfp4"], "even", "packed")
    assert seen["LANES"]
    mx_quant.quantize(one_in, FORMATS["mxfp4"], "even", "packed")
    assert not seen["LANES"] and not seen["LANES_ASM"]
    mx_quant.quantize(x, FORMATS["mxfp6_e2m3"], "even", "packed")
    assert seen["CVT"] and seen["CVT_ASM"] == (not mx_quant._INTERPRETED)
    mx_quant.quantize(one_in, FORMATS["mxfp6_e2m3"], "even", "packed")
    assert seen["CVT"] and not seen["CVT_ASM"]
    mx_quant.quantize(one_in, FORMATS["mxfp8_e4m3"], "even", "unpacked")  # one code an element
    assert seen["CVT_ASM"] == (not mx_quant._INTERPRETED)


def test_the_lanes_on_whole_words_take_rows_4_byte_aligned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With the words' gate on, bf16 packed mxfp4 takes the lanes on whole words wherever its
    rows are 4-byte aligned (a view two elements in too), and the elementwise path elsewhere;
    one code a byte keeps the half-lanes, on provably aligned rows only."""
    through_hw_cvt(monkeypatch, FORMATS["mxfp4"])
    monkeypatch.setattr(fp4_lanes, "LANE_WORDS_VERIFIED", True)
    seen = {}
    monkeypatch.setattr(mx_quant, "_launch", lambda fn, ptrs, r, k, strides, consts:
                        seen.update(consts))
    x = rows(torch.bfloat16, seed=2).to(DEVICE)
    by_view = views(x.cpu())
    for where, view in (("dense", x), ("two elements in", by_view["two elements in"]),
                        ("row stride K + 8", by_view["row stride K + 8"])):
        mx_quant.quantize(view, FORMATS["mxfp4"], "even", "packed")
        assert seen["LANES"] and seen["LANE_WORDS"], where
        mx_quant.quantize(view, FORMATS["mxfp4"], "even", "unpacked")
        assert seen["LANES"] == (where == "dense") and not seen["LANE_WORDS"], where
    mx_quant.quantize(by_view["one element in"], FORMATS["mxfp4"], "even", "packed")
    assert not seen["LANES"] and not seen["LANE_WORDS"]
    monkeypatch.setattr(fp4_lanes, "LANE_WORDS_VERIFIED", False)
    mx_quant.quantize(x, FORMATS["mxfp4"], "even", "packed")
    assert seen["LANES"] and not seen["LANE_WORDS"]
