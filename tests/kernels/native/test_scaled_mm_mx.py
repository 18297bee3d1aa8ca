"""scaled-mm-mx on CPU: the cuBLAS scale layout, and the whole pipeline except the GEMM itself.

The hardware call (torch._scaled_mm with e8m0 block scales) needs an sm_100 GPU, so the pipeline
tests replace `native_scaled_mm` with a stand-in written here from the documented contract:
it checks the operand dtypes / layouts / scale sizes PyTorch enforces, reads every scale at the
position the documented layout formula gives, decodes the elements independently and multiplies
in fp32, as the tensor cores accumulate.
"""
from __future__ import annotations

import zlib

import pytest
import torch

from kernels.base import load_kernel
from kernels.mx import mx_quantize
from kernels.native import scaled_mm_mx
from kernels.select.declarations import KERNELS_BY_NAME
from kernels.native.scaled_mm_mx import (
    blocked_scales_numel,
    from_blocked_scales,
    to_blocked_scales,
)
from kernels.reference.linear import ReferenceEmulationLinear
from kernels.spec.contract import QuantKey, SchemeContract

DECL = KERNELS_BY_NAME["scaled-mm-mx"]
CONTRACTS = [
    SchemeContract(weight=w, activation=a)
    for family in DECL.accepts
    for w in sorted(family.weights, key=str)
    for a in sorted(family.activations, key=str)
]
FAMILY_CONTRACTS = [  # one contract per family (weights and activations rounded with `even`)
    next(c for c in CONTRACTS if c.weight.format == fmt and c.weight.scale.rounding == "even"
         and c.activation.scale.rounding == "even")
    for fmt in ("mxfp8_e4m3", "mxfp4")
]


def _gen(*parts) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(parts).encode()))


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


# ---------------------------------------------------------------------------------------------
# The documented layout, written as explicit index arithmetic
# (cuBLAS "1D Block Scaling Factors Layout"; nvmath-python get_block_scale_offset)
# ---------------------------------------------------------------------------------------------

def documented_offset(row, col, k_blocks: int):
    """Byte offset of scale (row, col): 128 x 4 tiles, row-tile major, each stored as 32 x 16."""
    col_tiles = -(-k_blocks // 4)
    tile = (row // 128) * col_tiles + col // 4
    return tile * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 + col % 4


def gather_documented(blocked: torch.Tensor, rows: int, k_blocks: int) -> torch.Tensor:
    r = torch.arange(rows).unsqueeze(1)
    c = torch.arange(k_blocks).unsqueeze(0)
    return blocked.view(torch.uint8)[documented_offset(r, c, k_blocks)]


LAYOUT_SHAPES = [(1, 1), (1, 4), (3, 8), (17, 4), (128, 8), (130, 9), (257, 12)]


@pytest.mark.parametrize("rows,k_blocks", LAYOUT_SHAPES, ids=str)
def test_random_positions_follow_the_documented_formula(rows, k_blocks):
    g = _gen("formula", rows, k_blocks)
    scales = torch.randint(0, 256, (rows, k_blocks), generator=g, dtype=torch.uint8)
    blocked = to_blocked_scales(scales)
    assert blocked.dim() == 1 and blocked.dtype == torch.uint8 and blocked.is_contiguous()
    for _ in range(64):
        r = int(torch.randint(0, rows, (1,), generator=g))
        c = int(torch.randint(0, k_blocks, (1,), generator=g))
        assert int(blocked[documented_offset(r, c, k_blocks)]) == int(scales[r, c]), (r, c)
    assert torch.equal(gather_documented(blocked, rows, k_blocks), scales)


def test_nvmath_worked_examples():
    # nvmath-python get_block_scale_offset docs: a 128 x 128 NVFP4 operand has a [128, 8] scale
    # matrix; scale (5, 2) lives at offset 82 and (5, 5) at 593. Block size (16 vs 32) does not
    # change the layout, so the same [128, 8] matrix of MX scales must land there too.
    scales = torch.zeros(128, 8, dtype=torch.uint8)
    scales[5, 2], scales[5, 5] = 11, 22
    blocked = to_blocked_scales(scales)
    assert int(blocked[82]) == 11 and int(blocked[593]) == 22
    assert int(blocked.count_nonzero()) == 2


@pytest.mark.parametrize("rows,k_blocks", LAYOUT_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float8_e8m0fnu], ids=str)
def test_round_trip(rows, k_blocks, dtype):
    scales = torch.randint(0, 256, (rows, k_blocks), generator=_gen("rt", rows, k_blocks),
                           dtype=torch.uint8).view(dtype)
    blocked = to_blocked_scales(scales)
    # the size PyTorch checks: round_up(rows, 128) * round_up(ceil(K / 32), 4)
    assert blocked.numel() == blocked_scales_numel(rows, k_blocks) \
        == _ceil(rows, 128) * _ceil(k_blocks, 4)
    assert blocked.dtype == dtype
    back = from_blocked_scales(blocked, rows, k_blocks)
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), scales.view(torch.uint8))


@pytest.mark.parametrize("rows,k_blocks", [(1, 1), (17, 4), (130, 9)], ids=str)
@pytest.mark.parametrize("pad_value", [0, 127])
def test_padding_values(rows, k_blocks, pad_value):
    scales = torch.randint(0, 256, (rows, k_blocks), generator=_gen("pad", rows, k_blocks),
                           dtype=torch.uint8)
    blocked = to_blocked_scales(scales, pad_value=pad_value)
    is_data = torch.zeros(blocked.numel(), dtype=torch.bool)
    r = torch.arange(rows).unsqueeze(1)
    c = torch.arange(k_blocks).unsqueeze(0)
    is_data[documented_offset(r, c, k_blocks).flatten()] = True
    assert int(is_data.sum()) == rows * k_blocks  # data positions are distinct
    assert (blocked[~is_data] == pad_value).all()
    assert int((~is_data).sum()) == blocked_scales_numel(rows, k_blocks) - rows * k_blocks


def test_layout_rejects_bad_inputs():
    with pytest.raises(ValueError, match="uint8"):
        to_blocked_scales(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="2-D"):
        to_blocked_scales(torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(ValueError, match="not a byte"):
        to_blocked_scales(torch.zeros(4, 4, dtype=torch.uint8), pad_value=256)
    with pytest.raises(ValueError, match="blocks into 512"):
        from_blocked_scales(torch.zeros(511, dtype=torch.uint8), 3, 4)


# ---------------------------------------------------------------------------------------------
# A torch._scaled_mm stand-in, from the documented contract
# ---------------------------------------------------------------------------------------------

# OCP MX v1.0 E2M1 values by code (sign bit 3); fp4x2 holds element 2i in the low nibble
# (pytorch test_scaled_matmul_cuda.py test_pack_uint4).
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def _decode_rows(t: torch.Tensor) -> torch.Tensor:
    """Row-major operand [rows, K (or K / 2 for fp4x2)] -> fp32 element values [rows, K]."""
    if t.dtype == torch.float8_e4m3fn:
        return t.float()  # torch's own E4M3 decode
    raw = t.view(torch.uint8)
    codes = torch.stack((raw & 0xF, raw >> 4), dim=-1).reshape(raw.shape[0], -1)
    return FP4_VALUES[codes.long()]


def fake_scaled_mm(a, b, scale_a, scale_b, out_dtype):
    """What cuBLAS computes, after the checks PyTorch makes (ScaledBlas.cpp) on its inputs."""
    assert a.dtype == b.dtype and a.dtype in (torch.float8_e4m3fn, torch.float4_e2m1fn_x2)
    assert a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0]
    assert a.is_contiguous(), "mat1 must be row-major"
    assert b.t().is_contiguous(), "mat2 must be column-major"
    per_byte = 2 if a.dtype == torch.float4_e2m1fn_x2 else 1
    m, k, n = a.shape[0], a.shape[1] * per_byte, b.shape[1]
    assert a.shape[1] % 16 == 0 and b.shape[0] % 16 == 0 and n % 16 == 0
    for scale, rows in ((scale_a, m), (scale_b, n)):
        assert scale.dtype == torch.float8_e8m0fnu and scale.is_contiguous()
        assert scale.numel() == _ceil(rows, 128) * _ceil(k // 32, 4)
    assert out_dtype == torch.float32
    # the scale of element block (row, j) is read where the documented formula puts it;
    # torch decodes e8m0 (0xFF -> NaN, 0x00 -> 2**-127)
    sa = gather_documented(scale_a, m, k // 32).view(torch.float8_e8m0fnu).float()
    sb = gather_documented(scale_b, n, k // 32).view(torch.float8_e8m0fnu).float()
    av = _decode_rows(a) * sa.repeat_interleave(32, dim=1)
    bv = _decode_rows(b.t()) * sb.repeat_interleave(32, dim=1)
    return (av @ bv.t()).to(out_dtype)  # exact products, fp32 sums


@pytest.fixture
def fake_gemm(monkeypatch):
    monkeypatch.setattr(scaled_mm_mx, "native_scaled_mm", fake_scaled_mm)


def _prepare_both(contract, n, k, g, weight=None):
    """The kernel's and the oracle's prepared weight, from one MXTensor."""
    if weight is None:
        weight = torch.randn(n, k, generator=g) * torch.rand(n, 1, generator=g) * 4
    mx = mx_quantize(weight, contract.weight.format, rounding=contract.weight.scale.rounding)
    return load_kernel("scaled-mm-mx").prepare(mx, contract), \
        ReferenceEmulationLinear().prepare(mx, contract)


def _rel_err(out, ref):
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


# Why 1e-5: both sides multiply the same MX values (code * 2**E, held exactly by bf16 / fp16
# for these inputs), each product is exact in fp32, and both add the bias in fp32 and round to
# x's dtype once; so they may differ only through the order of the fp32 sums (a few 2**-24
# relative for K <= 256). On CPU the stand-in and F.linear even sum in the same order and the
# outputs come out bit-equal. A wrong scale position, nibble order or transpose moves the result
# by O(1); rounding to x's dtype before adding the bias (double rounding) moves it by ~1e-3.
TOL = 1e-5
SHAPES = [(1, 16, 128), (3, 48, 256), (17, 16, 128)]


@pytest.mark.parametrize("contract", CONTRACTS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda s: str(s))
def test_matches_reference_emulation(fake_gemm, contract, dtype, with_bias, m, n, k):
    g = _gen(str(contract), dtype, with_bias, m, n, k)
    prepared, ref_prepared = _prepare_both(contract, n, k, g)
    x = (torch.randn(m, k, generator=g) * torch.exp(torch.randn(m, 1, generator=g))).to(dtype)
    bias = torch.randn(n, generator=g).to(dtype) if with_bias else None
    out = load_kernel("scaled-mm-mx").apply(x, prepared, bias)
    ref = ReferenceEmulationLinear().apply(x, ref_prepared, bias)
    assert out.dtype == dtype and out.shape == (m, n)
    assert torch.isfinite(ref).all()
    assert _rel_err(out, ref) <= TOL


@pytest.mark.parametrize("contract", FAMILY_CONTRACTS, ids=str)
def test_leading_batch_dims(fake_gemm, contract):
    g = _gen("batch", str(contract))
    prepared, ref_prepared = _prepare_both(contract, 32, 128, g)
    x = torch.randn(2, 3, 128, generator=g).to(torch.bfloat16)
    out = load_kernel("scaled-mm-mx").apply(x, prepared)
    ref = ReferenceEmulationLinear().apply(x, ref_prepared)
    assert out.shape == (2, 3, 32) and _rel_err(out, ref) <= TOL
    # each row of the batch is the same as running it alone
    alone = load_kernel("scaled-mm-mx").apply(x[1, 2:3], prepared)
    assert torch.equal(out[1, 2:3], alone)


@pytest.mark.parametrize("contract", FAMILY_CONTRACTS, ids=str)
def test_nan_and_inf_blocks(fake_gemm, contract):
    g = _gen("nan", str(contract))
    n, k = 32, 256
    weight = torch.randn(n, k, generator=g)
    weight[3, 70] = float("nan")  # weight row 3, block 2 -> output column 3
    prepared, ref_prepared = _prepare_both(contract, n, k, g, weight)
    assert int(prepared.weight.scales[3, 2]) == 0xFF
    x = torch.randn(5, k, generator=g).to(torch.bfloat16)
    x[1, 40] = float("nan")  # row 1, block 1
    x[2, 200] = float("inf")  # row 2, block 6
    out = load_kernel("scaled-mm-mx").apply(x, prepared)
    ref = ReferenceEmulationLinear().apply(x, ref_prepared)
    want_nan = torch.zeros(5, n, dtype=torch.bool)
    want_nan[[1, 2], :] = True
    want_nan[:, 3] = True
    assert torch.equal(torch.isnan(ref), want_nan)
    assert torch.equal(torch.isnan(out), want_nan)
    assert _rel_err(out[~want_nan], ref[~want_nan]) <= TOL


def test_weight_is_prepared_once_as_column_major_operand(fake_gemm):
    for contract, dtype, width in ((FAMILY_CONTRACTS[0], torch.float8_e4m3fn, 256),
                                   (FAMILY_CONTRACTS[1], torch.float4_e2m1fn_x2, 128)):
        prepared, _ = _prepare_both(contract, 48, 256, _gen("cache", str(contract)))
        mat2, scale_b = prepared.cache["mat2"], prepared.cache["scale_b"]
        assert mat2.dtype == dtype and mat2.shape == (width, 48) and mat2.t().is_contiguous()
        assert mat2.data_ptr() == prepared.weight.data.data_ptr()  # a view, no copy
        assert scale_b.dtype == torch.float8_e8m0fnu and scale_b.numel() == 128 * 8
        load_kernel("scaled-mm-mx").apply(torch.randn(2, 256).to(torch.bfloat16), prepared)
        assert prepared.cache["mat2"] is mat2 and prepared.cache["scale_b"] is scale_b


def test_real_call_refuses_a_cpu_device():
    prepared, _ = _prepare_both(FAMILY_CONTRACTS[1], 16, 128, _gen("cpu"))
    x = torch.randn(2, 128).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"sm_100.*on cpu.*registry resolve"):
        load_kernel("scaled-mm-mx").apply(x, prepared)


@pytest.mark.parametrize("capability,fmt,refused", [
    ((9, 0), "mxfp8_e4m3", r"sm_100 / sm_120.*platform cuda:sm90.*registry resolve <scheme>"),
    ((9, 0), "mxfp4", r"sm_100 / sm_120.*platform cuda:sm90"),
    ((10, 0), "mxfp8_e4m3", None),
    ((10, 0), "mxfp4", None),
    ((10, 3), "mxfp4", None),
    ((12, 0), "mxfp8_e4m3", None),
    ((12, 0), "mxfp4", r"only on sm_100 / sm_103.*cuda:sm120.*--disable scaled-mm-mx"),
], ids=str)
def test_device_gate_by_compute_capability(monkeypatch, capability, fmt, refused):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    if refused is None:
        scaled_mm_mx.require_mx_gemm_device(torch.device("cuda", 0), fmt)
    else:
        with pytest.raises(RuntimeError, match=refused):
            scaled_mm_mx.require_mx_gemm_device(torch.device("cuda", 0), fmt)


@pytest.mark.parametrize("weight_fmt,act", [
    ("mxfp4", QuantKey.mx("mxfp8_e4m3", rounding="even", static=False)),  # mixed: not declared
    ("mxfp8_e4m3", QuantKey.mx("mxfp4", rounding="even", static=False)),
    ("mxfp4", None),  # weight-only
    ("mxfp8_e5m2", QuantKey.mx("mxfp8_e5m2", rounding="even", static=False)),
], ids=str)
def test_refuses_contracts_it_does_not_declare(weight_fmt, act):
    contract = SchemeContract(weight=QuantKey.mx(weight_fmt, rounding="even", static=True),
                              activation=act)
    with pytest.raises(ValueError, match="scaled-mm-mx does not implement"):
        load_kernel("scaled-mm-mx").prepare(torch.randn(16, 128), contract)


def test_refuses_bad_layer_inputs(fake_gemm):
    contract = FAMILY_CONTRACTS[1]
    kernel = load_kernel("scaled-mm-mx")
    with pytest.raises(ValueError, match="in_features 64 is not a multiple of 128"):
        kernel.prepare(torch.randn(16, 64), contract)
    unpacked = mx_quantize(torch.randn(16, 128), "mxfp4", rounding="even", layout="unpacked")
    with pytest.raises(ValueError, match="layout='packed'"):
        kernel.prepare(unpacked, contract)
    prepared, ref_prepared = _prepare_both(contract, 16, 128, _gen("bad"))
    x = torch.randn(2, 128).to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"bias must be a float tensor of shape \(16,\)"):
        kernel.apply(x, prepared, torch.zeros(15))
    with pytest.raises(ValueError, match="not prepared by this kernel"):
        kernel.apply(x, ref_prepared)
    with pytest.raises(ValueError, match="does not end in in_features=128"):
        kernel.apply(torch.randn(2, 64).to(torch.bfloat16), prepared)
