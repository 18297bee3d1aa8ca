"""The public API: round trips, packing, validation errors, backend choice, Triton == reference."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import kernels.mx as api
from kernels import MXTensor, mx_dequantize, mx_qdq, mx_quantize
from kernels.reference import mx as reference_backend
from kernels.reference.packing import pack_codes, unpack_codes
from kernels.spec.formats import FORMATS, LAYOUTS, ROUNDINGS

from support.device import DEVICE

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FMT_LAYOUTS = [(name, layout) for name, f in FORMATS.items() for layout in LAYOUTS if f.bits < 8 or layout == "unpacked"]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    int_type = {2: torch.int16, 4: torch.int32}[a.element_size()]
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a.view(int_type)[~nan], b.view(int_type)[~nan])


def mixed_input(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random blocks of very different magnitudes plus zero, NaN, Inf and fp32-subnormal blocks."""
    g = torch.Generator().manual_seed(seed)
    k = shape[-1]
    x = torch.randn(shape, generator=g).view(-1, k)
    x *= torch.exp2(torch.randint(-60, 60, (x.shape[0], 1), generator=g).float())
    rows = x.shape[0]
    x[0, :32] = 0.0
    if rows > 1:
        x[1, 3] = float("nan")
        x[1, -1] = -float("inf")
    if rows > 2:
        x[2, :32] = torch.randn(32, generator=g) * 2.0**-135
        x[2, 32:] = torch.randn(k - 32, generator=g) * 1e38
    return x.view(shape).to(dtype)


# ----------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("fmt,layout", FMT_LAYOUTS)
def test_dequantize_of_quantize_equals_qdq(fmt: str, layout: str, dtype: torch.dtype) -> None:
    x = mixed_input((3, 4, 64), dtype, seed=len(fmt) * 7 + len(layout))
    for rounding in ROUNDINGS:
        t = mx_quantize(x, fmt, rounding=rounding, backend="reference", layout=layout)
        assert t.shape == x.shape and t.layout == layout and t.fmt == fmt and t.rounding == rounding
        assert t.scales.shape == (3, 4, 2) and t.data.dtype == torch.uint8
        y = mx_dequantize(t, dtype, backend="reference")
        assert same_bits(y, mx_qdq(x, fmt, rounding=rounding, backend="reference")), (fmt, layout, rounding)


@pytest.mark.parametrize("fmt,layout", FMT_LAYOUTS)
def test_unpack_of_pack_gives_the_codes_back(fmt: str, layout: str) -> None:
    elem = FORMATS[fmt]
    codes = torch.randint(0, 1 << elem.bits, (5, 96), dtype=torch.uint8)
    data = pack_codes(codes, elem, layout)
    assert data.shape == (5, 96 * (elem.bits if layout == "packed" else 8) // 8)
    assert torch.equal(unpack_codes(data, elem, layout, 96), codes)


def test_packed_and_unpacked_layouts_hold_the_same_codes() -> None:
    x = torch.randn(4, 128)
    for fmt in ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"):
        packed = mx_quantize(x, fmt, layout="packed", backend="reference")
        unpacked = mx_quantize(x, fmt, layout="unpacked", backend="reference")
        assert torch.equal(unpack_codes(packed.data, FORMATS[fmt], "packed", 128), unpacked.data)
        assert torch.equal(packed.scales, unpacked.scales)


def test_fp6_packed_bit_order_by_hand() -> None:
    # E2M3 codes with E = 0 (amax 7.5 -> floor(log2 7.5) - emax = 0): 0.125 -> 1, 0.25 -> 2,
    # 0.375 -> 3, -7.5 -> 0b1_11_111 = 63. w = 1 | 2<<6 | 3<<12 | 63<<18 = 0xFC3081.
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([0.125, 0.25, 0.375, -7.5])
    t = mx_quantize(x, "mxfp6_e2m3", layout="packed", backend="reference")
    assert t.scales.tolist() == [[127]]
    assert t.data[0, :3].tolist() == [0x81, 0x30, 0xFC]
    assert (t.data[0, 3:] == 0).all() and t.data.shape == (1, 24)


def test_fp4_packed_bit_order_by_hand() -> None:
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([0.5, -6.0, 1.0, 3.0])  # codes 0x1, 0xF, 0x2, 0x5 with E = 0
    t = mx_quantize(x, "mxfp4", backend="reference")
    assert t.layout == "packed" and t.scales.tolist() == [[127]]
    assert t.data[0, :2].tolist() == [0xF1, 0x52]


def test_non_contiguous_and_any_leading_shape() -> None:
    base = torch.randn(64, 6, dtype=torch.bfloat16)
    x = base.t()  # [6, 64], not contiguous
    assert not x.is_contiguous()
    expected = mx_qdq(x.contiguous(), "mxfp8_e4m3", "rceil", backend="reference")
    assert same_bits(mx_qdq(x, "mxfp8_e4m3", "rceil", backend="reference"), expected)
    t = mx_quantize(x, "mxfp4", backend="reference")
    assert torch.equal(t.data, mx_quantize(x.contiguous(), "mxfp4", backend="reference").data)
    one_d = torch.randn(96)
    assert mx_qdq(one_d, "mxint8").shape == (96,)
    assert mx_dequantize(mx_quantize(one_d, "mxint8")).shape == (96,)


def test_mxtensor_to_and_nbytes() -> None:
    t = mx_quantize(torch.randn(2, 3, 64), "mxfp4")
    assert t.nbytes == 2 * 3 * 32 + 2 * 3 * 2
    moved = t.to("cpu")
    assert isinstance(moved, MXTensor) and torch.equal(moved.data, t.data) and moved.shape == t.shape


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "x,needles",
    [
        (torch.randn(4, 48), ["(4, 48)", "multiple of", "pad"]),
        (torch.ones(4, 64, dtype=torch.int32), ["torch.int32", "float32", "cast"]),
        (torch.ones(4, 64, dtype=torch.bool), ["torch.bool", "cast"]),
        (torch.randn(4, 64, dtype=torch.float64), ["torch.float64", "x.float()"]),
        (torch.randn(4, 64, dtype=torch.complex64), ["torch.complex64", "cast"]),
        (torch.tensor(1.0), ["0-dim", "last axis"]),
        (torch.randn(4, 0), ["empty", "(4, 0)", "K=0"]),
    ],
    ids=["last-axis", "int", "bool", "fp64", "complex", "0-dim", "empty"],
)
def test_bad_inputs_name_the_problem_and_the_fix(x: torch.Tensor, needles: list[str]) -> None:
    for call in (lambda: mx_quantize(x, "mxfp4"), lambda: mx_qdq(x, "mxfp4")):
        with pytest.raises(ValueError) as info:
            call()
        for needle in needles:
            assert needle in str(info.value), (needle, str(info.value))


@pytest.mark.parametrize(
    "kwargs,needles",
    [
        ({"fmt": "mxfp6"}, ["'mxfp6'", *FORMATS]),
        ({"rounding": "nearest"}, ["'nearest'", *ROUNDINGS]),
        ({"layout": "dense"}, ["'dense'", *LAYOUTS]),
        ({"fmt": "mxfp8_e4m3", "layout": "packed"}, ["mxfp8_e4m3", "unpacked"]),
        ({"backend": "cuda"}, ["'cuda'", *api.BACKENDS]),
    ],
)
def test_bad_names_list_the_valid_values(kwargs: dict, needles: list[str]) -> None:
    args = {"fmt": "mxfp4", "rounding": "floor", "backend": "reference", "layout": None, **kwargs}
    with pytest.raises(ValueError) as info:
        mx_quantize(torch.randn(2, 32), args.pop("fmt"), **args)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    for call in (
        lambda: mx_quantize(torch.randn(2, 32), "mxfp4", backend="triton"),
        lambda: mx_qdq(torch.randn(2, 32), "mxfp4", backend="triton"),
        lambda: mx_dequantize(mx_quantize(torch.randn(2, 32), "mxfp4"), backend="triton"),
    ):
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            call()


def test_auto_backend_is_reference_on_cpu_and_triton_on_gpu() -> None:
    # backend="auto" is resolve's qdq choice (kernels.choice); what-if for a GPU platform
    from kernels.choice import implementation, mx_key
    from kernels.select.resolve import resolve

    assert api.qdq_kernel("auto", "mxfp4", "floor", torch.device("cpu")) == "reference-qdq"
    assert resolve(mx_key("mxfp4", "floor"), "cuda:sm90", kind="qdq").kernel == "triton-qdq"
    assert resolve(mx_key("mxfp4", "floor"), "cuda:sm90", kind="qdq",
                   force="reference-qdq").kernel == "reference-qdq"
    assert implementation("reference-qdq") is reference_backend
    assert implementation("triton-qdq").__name__ == "kernels.triton.mx_quant"


def test_bad_out_dtype() -> None:
    t = mx_quantize(torch.randn(2, 32), "mxfp4")
    with pytest.raises(ValueError, match="torch.int8.*float32"):
        mx_dequantize(t, torch.int8)


def test_mxtensor_checks_its_fields() -> None:
    t = mx_quantize(torch.randn(2, 3, 64), "mxfp6_e3m2")  # unpacked: data (2, 3, 64)
    with pytest.raises(ValueError, match=r"data has shape \(2, 3, 48\).*needs \(2, 3, 64\)"):
        MXTensor(t.data[..., :48], t.scales, t.fmt, t.rounding, t.shape, t.layout)
    with pytest.raises(ValueError, match=r"data has shape \(2, 3, 64\).*needs \(2, 3, 48\).*layout"):
        MXTensor(t.data, t.scales, t.fmt, t.rounding, t.shape, "packed")
    with pytest.raises(ValueError, match=r"scales has shape \(2, 3, 1\).*needs \(2, 3, 2\)"):
        MXTensor(t.data, t.scales[..., :1], t.fmt, t.rounding, t.shape, t.layout)
    with pytest.raises(ValueError, match="data must be a uint8 tensor, got torch.int8"):
        MXTensor(t.data.to(torch.int8), t.scales, t.fmt, t.rounding, t.shape, t.layout)
    with pytest.raises(ValueError, match="scales must be a uint8 tensor, got torch.float32"):
        MXTensor(t.data, t.scales.float(), t.fmt, t.rounding, t.shape, t.layout)
    with pytest.raises(ValueError, match=r"\(2, 3, 60\).*multiple of the MX block"):
        MXTensor(t.data, t.scales, t.fmt, t.rounding, (2, 3, 60), t.layout)
    with pytest.raises(ValueError, match="valid formats"):
        MXTensor(t.data, t.scales, "fp6", t.rounding, t.shape, t.layout)
    assert MXTensor(t.data, t.scales, t.fmt, t.rounding, [2, 3, 64]).layout == "unpacked"


def test_importing_kernels_does_not_import_triton() -> None:
    code = (
        "import sys, torch, kernels; "
        "kernels.mx_qdq(torch.randn(2, 32), 'mxfp4', backend='reference'); "
        "assert 'triton' not in sys.modules, 'triton was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----------------------------------------------------------------------------- triton == reference
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("fmt,layout", FMT_LAYOUTS)
def test_triton_matches_reference(fmt: str, layout: str, rounding: str) -> None:
    """Through the public API on small shapes (the CPU interpreter is slow)."""
    x = mixed_input((4, 64), torch.float32, seed=len(fmt) + 10 * len(rounding)).to(DEVICE)
    ref = mx_quantize(x, fmt, rounding=rounding, backend="reference", layout=layout)
    tri = mx_quantize(x, fmt, rounding=rounding, backend="triton", layout=layout)
    assert torch.equal(tri.scales, ref.scales), (tri.scales, ref.scales)
    assert torch.equal(tri.data, ref.data)
    for dtype in (torch.float32, torch.bfloat16):
        assert same_bits(mx_dequantize(ref, dtype, backend="triton"), mx_dequantize(ref, dtype, backend="reference"))
    xb = x.to(torch.bfloat16)
    assert same_bits(mx_qdq(xb, fmt, rounding, backend="triton"), mx_qdq(xb, fmt, rounding, backend="reference"))
