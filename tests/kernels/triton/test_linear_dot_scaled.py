"""The `triton-dot-scaled` linear kernel against the reference emulation, every declared contract.

Runs in Triton's CPU interpreter when there is no GPU (tests/conftest.py). Two comparisons:
- the fp32 accumulator (`dot_scaled_linear(..., out_dtype=float32)`) against F.linear in fp32 of
  the reference's QDQ'd activation and dequantized weight: ||out - ref|| / ||ref|| <= 1e-5. Both
  sides multiply the same exact values (an MX value and a bf16 / fp16 activation are exact in
  fp32 and in the dot's bf16 / fp16 inputs, their products exact in fp32), so only the order of
  the fp32 additions differs: a few 2**-24 relative for random data and K <= 256 (the worst
  case, K * 2**-24 times sum |x||w|, is only reached with heavy cancellation);
- `apply` (output in x's dtype) against `ReferenceEmulationLinear.apply`, element by element:
  the two fp32 sums differ by at most (K + 1) * 2**-23 * sum_k |x_k w_k| (+ |bias|) (each has
  the recursive-summation error bound (K + 1) * 2**-24 * sum |terms|), and rounding both to
  bf16 / fp16 adds at most one unit in the last place.
NaN / Inf positions must match exactly.
"""
from __future__ import annotations

import math
import zlib

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_dequantize, mx_quantize
from kernels.reference.linear import ReferenceEmulationLinear
from kernels.select.declarations import KERNELS_BY_NAME
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.spec.formats import get_format
from kernels.triton import linear_dot_scaled as lds

DECL = KERNELS_BY_NAME[lds.NAME]
CONTRACTS = sorted(
    {SchemeContract(weight=w, activation=a) for fam in DECL.accepts
     for w in fam.weights for a in fam.activations}, key=str)
DTYPES = (torch.bfloat16, torch.float16)
REF = ReferenceEmulationLinear()
KERNEL = load_kernel(lds.NAME)
ULP = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}  # one ulp, relative to the binade
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (conftest.py)


def _randn(*shape: int, gen: torch.Generator | None = None,
           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Seeded on the CPU, then moved to DEVICE."""
    return torch.randn(*shape, generator=gen).to(DEVICE, dtype)


def _gen(*parts: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(repr(parts).encode()))


def _block_scaled(shape: tuple[int, ...], lo: int, hi: int, gen: torch.Generator) -> torch.Tensor:
    """randn with every 32-block scaled by 2**U[lo, hi]: many shared exponents per tensor."""
    k = shape[-1]
    x = torch.randn(*shape, generator=gen)
    e = torch.randint(lo, hi + 1, (*shape[:-1], k // 32, 1), generator=gen).float()
    return (x.view(*shape[:-1], k // 32, 32) * torch.exp2(e)).view(shape).to(DEVICE)


def _case(contract: SchemeContract, dtype: torch.dtype, seed: str):
    """Fresh shapes and data for one case: (prepared, x [B, M, K], bias or None)."""
    g = _gen(str(contract), dtype, seed)
    pick = lambda options: options[int(torch.randint(len(options), (), generator=g))]  # noqa: E731
    m, n, k = pick((1, 3, 17)), pick((16, 48)), pick((64, 128))
    lead = pick(((), (2,), (2, 1)))
    w = _block_scaled((n, k), -9, 1, g)
    prepared = KERNEL.prepare(w, contract)
    x = _block_scaled((*lead, m, k), -3, 3, g).to(dtype)
    bias = _randn(n, gen=g, dtype=pick((torch.float32, dtype))) if pick((0, 1)) else None
    return prepared, x, bias


def _ref_fp32(x: torch.Tensor, prepared, bias) -> torch.Tensor:
    xq = REF.qdq_activation(x, prepared, backend="reference").float()
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq, w, None if bias is None else bias.float())


def assert_specials_match(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN positions differ"
    assert torch.equal(got.isinf() & (got > 0), want.isinf() & (want > 0)), f"{what}: +Inf differ"
    assert torch.equal(got.isinf() & (got < 0), want.isinf() & (want < 0)), f"{what}: -Inf differ"


def assert_close_fp32(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert_specials_match(got, want, what)
    ok = torch.isfinite(want)
    err = (got[ok] - want[ok]).norm() / want[ok].norm().clamp_min(1e-30)
    assert err <= 1e-5, f"{what}: relative error {err.item():.3g} > 1e-5"


def assert_matches_reference(got: torch.Tensor, want: torch.Tensor, x: torch.Tensor, prepared,
                             bias, what: str) -> None:
    """got / want in x's dtype: equal up to the summation-order bound plus one ulp (docstring)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    assert_specials_match(got, want, what)
    xq = REF.qdq_activation(x, prepared, backend="reference").double().abs()
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference").double().abs()
    absdot = xq @ w.T + (0.0 if bias is None else bias.double().abs())
    k = prepared.in_features
    ok = torch.isfinite(want)
    g, r = got[ok].double(), want[ok].double()
    tol = (ULP[got.dtype] * torch.maximum(g.abs(), r.abs()) + 2.0**-24
           + (k + 1) * 2.0**-23 * absdot[ok])
    bad = ((g - r).abs() > tol).nonzero()
    assert bad.numel() == 0, (f"{what}: {len(bad)} elements beyond one ulp + the summation "
                              f"bound, e.g. {g[bad[0]].item()} vs {r[bad[0]].item()}")


# ------------------------------------------------------------------------------ every contract
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("contract", CONTRACTS, ids=str)
def test_matches_reference(contract: SchemeContract, dtype: torch.dtype) -> None:
    prepared, x, bias = _case(contract, dtype, "apply")
    got = KERNEL.apply(x, prepared, bias)
    want = REF.apply(x, prepared, bias)
    assert got.shape == x.shape[:-1] + (prepared.out_features,)
    assert_matches_reference(got, want, x, prepared, bias, f"{contract} {dtype} x{tuple(x.shape)}")
    x2d = x.reshape(-1, x.shape[-1])
    got32 = lds.dot_scaled_linear(x2d, prepared, bias, torch.float32)
    assert_close_fp32(got32, _ref_fp32(x2d, prepared, bias), f"{contract} {dtype} fp32 acc")


def _other_mode(key: QuantKey, dtype: torch.dtype) -> str:
    return "decoded" if lds.default_lhs_mode(key, dtype, torch.device(DEVICE)) == "mx" else "mx"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("act", sorted(lds.DOT_FORMAT))
@pytest.mark.parametrize("rounding", ["floor", "even", "rceil"])
def test_other_lhs_mode(rounding: str, act: str, dtype: torch.dtype) -> None:
    """The lhs mode the default does not pick here ("mx": codes + scales into dot_scaled;
    "decoded": codes decoded in the kernel) gives the same result."""
    wfmt = sorted(lds.DOT_FORMAT)[(zlib.crc32(f"{rounding}{act}".encode()) >> 3) % 3]
    key = QuantKey.mx(act, rounding=rounding, static=False)
    contract = SchemeContract(weight=QuantKey.mx(wfmt, rounding="even", static=True),
                              activation=key)
    prepared, x, bias = _case(contract, dtype, "other-mode")
    x2d = x.reshape(-1, x.shape[-1])
    mode = _other_mode(key, dtype)
    got32 = lds.dot_scaled_linear(x2d, prepared, bias, torch.float32, lhs_mode=mode)
    assert_close_fp32(got32, _ref_fp32(x2d, prepared, bias), f"{contract} {dtype} {mode}")


def test_several_k_tiles() -> None:
    """K = 192 runs three 64-wide K tiles, K = 256 two 128-wide ones (the loop, not one tile)."""
    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=QuantKey.mx("mxfp8_e4m3", rounding="even", static=False))
    g = _gen("k-tiles")
    for k in (192, 256):
        prepared = KERNEL.prepare(_block_scaled((16, k), -9, 1, g), contract)
        x = _block_scaled((5, k), -3, 3, g).to(torch.bfloat16)
        got32 = lds.dot_scaled_linear(x, prepared, None, torch.float32)
        assert_close_fp32(got32, _ref_fp32(x, prepared, None), f"K={k}")


# ------------------------------------------------------------------------------ NaN / Inf blocks
NAN_CONTRACTS = [
    SchemeContract(weight=QuantKey.mx(w, rounding="even", static=True),
                   activation=None if a is None else QuantKey.mx(a, rounding="floor", static=False))
    for w in lds.DOT_FORMAT for a in (None, "mxfp4", "mxfp8_e4m3")
]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NaN on purpose
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("contract", NAN_CONTRACTS, ids=str)
def test_nan_and_inf_blocks(contract: SchemeContract, dtype: torch.dtype) -> None:
    """A NaN / Inf in x (an 0xFF block when quantized), an 0xFF weight scale, and the weight
    formats' NaN / Inf codes give NaN / Inf exactly where the reference has them."""
    g = _gen(str(contract), dtype, "nan")
    n, k, m = 48, 256, 5
    w = _block_scaled((n, k), -9, 1, g)
    mx = mx_quantize(w, contract.weight.format, rounding=contract.weight.scale.rounding)
    data, scales = mx.data.clone(), mx.scales.clone()
    scales[3, 6] = 0xFF  # a NaN weight block (in the second K tile): column 3 is NaN
    if mx.fmt == "mxfp8_e4m3":
        data[7, 5] = 0x7F  # E4M3 S.1111.111 is NaN: column 7
    if mx.fmt == "mxfp8_e5m2":
        data[7, 5] = 0x7C  # +Inf: column 7 is +-Inf (or NaN where an x element is 0)
        data[9, 200] = 0x7E  # NaN: column 9
    weight = MXTensor(data, scales, mx.fmt, mx.rounding, mx.shape, mx.layout)
    prepared = KERNEL.prepare(weight, contract)
    x = _block_scaled((m, k), -3, 3, g)
    x[1, 40] = float("nan")
    x[2, 150] = float("inf")
    x[4, 10] = float("-inf")
    x = x.to(dtype)
    got = KERNEL.apply(x, prepared)
    want = REF.apply(x, prepared)
    assert want[:, 3].isnan().all() and want[1].isnan().all()  # the cases exercise something
    assert_matches_reference(got, want, x, prepared, None, f"{contract} {dtype}")
    if contract.activation is not None:
        assert got[2].isnan().all() and got[4].isnan().all()  # an Inf makes its block NaN
        other = _other_mode(contract.activation, dtype)
        got32 = lds.dot_scaled_linear(x, prepared, None, torch.float32, lhs_mode=other)
        assert_specials_match(got32, _ref_fp32(x, prepared, None), f"{contract} {other}")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0 * Inf
def test_inf_weight_code_with_split_fp16_lhs() -> None:
    """fp16 x with e5m2 weights outside fp16's exact range takes the split (hi + lo bf16) path;
    x values exact in bf16 (lo would be 0) must still give +-Inf, not NaN, against an Inf code."""
    contract = SchemeContract(weight=QuantKey.mx("mxfp8_e5m2", rounding="floor", static=True),
                              activation=None)
    g = _gen("split-inf")
    mx = mx_quantize(_randn(16, 64, gen=g) * 0.01, "mxfp8_e5m2", rounding="floor")
    data = mx.data.clone()
    data[2, 7] = 0x7C  # +Inf
    data[5, 33] = 0xFC  # -Inf
    prepared = KERNEL.prepare(MXTensor(data, mx.scales, mx.fmt, mx.rounding, mx.shape), contract)
    assert not prepared.cache[lds.CACHE_KEY].fp16_exact  # so the split path runs
    x = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float16, device=DEVICE).repeat(4, 16)
    # (all exact in bf16)
    x[3, 7] = 0.0  # 0 * Inf is NaN
    got, want = KERNEL.apply(x, prepared), REF.apply(x, prepared)
    assert got[:2, 2].isinf().all() and want[3, 2].isnan()
    assert_matches_reference(got, want, x, prepared, None, "split path with Inf codes")


# ------------------------------------------------------------------------------ paths and layout
@pytest.mark.parametrize("fmt", list(lds.DOT_FORMAT))
def test_fp16_exact_scale_range(fmt: str) -> None:
    """The byte range equals a brute-force check: every finite code * 2**E exact in fp16."""
    elem = get_format(fmt)
    names = {"mxfp4": "float4_e2m1fn", "mxfp8_e4m3": "float8_e4m3fn", "mxfp8_e5m2": "float8_e5m2"}
    codes = np.arange(1 << elem.bits, dtype=np.uint8).view(getattr(ml_dtypes, names[fmt]))
    values = codes.astype(np.float64)
    values = values[np.isfinite(values)]
    with np.errstate(over="ignore"):  # values past fp16's range become Inf: not exact
        exact = [b for b in range(255)
                 if np.array_equal((values * 2.0 ** (b - 127)).astype(np.float16).astype(float),
                                   values * 2.0 ** (b - 127))]
    lo, hi = lds.fp16_exact_scale_range(fmt)
    assert exact == list(range(lo, hi + 1))


def test_unpacked_mxfp4_weight_is_repacked() -> None:
    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=QuantKey.mx("mxfp4", rounding="even", static=False))
    g = _gen("unpacked")
    w = mx_quantize(_randn(16, 128, gen=g), "mxfp4", rounding="even",
                    layout="unpacked")
    prepared = KERNEL.prepare(w, contract)
    assert prepared.cache[lds.CACHE_KEY].data.shape == (16, 64)
    x = _randn(3, 128, gen=g, dtype=torch.bfloat16)
    got, want = KERNEL.apply(x, prepared), REF.apply(x, prepared)
    assert_matches_reference(got, want, x, prepared, None, "unpacked mxfp4")


def test_strided_input_and_empty_batch() -> None:
    contract = SchemeContract(weight=QuantKey.mx("mxfp8_e4m3", rounding="rceil", static=True),
                              activation=None)
    g = _gen("strided")
    prepared = KERNEL.prepare(_randn(16, 64, gen=g), contract)
    x = _randn(64, 6, gen=g, dtype=torch.float16).t()[::2]  # [3, 64], non-unit strides
    got, want = KERNEL.apply(x, prepared), REF.apply(x, prepared)
    assert_matches_reference(got, want, x, prepared, None, "strided x")
    empty = KERNEL.apply(torch.zeros(0, 64, dtype=torch.bfloat16, device=DEVICE), prepared)
    assert empty.shape == (0, 16) and empty.dtype == torch.bfloat16


# ------------------------------------------------------------------------------ bad inputs
def _w4a16() -> SchemeContract:
    return SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                          activation=None)


def test_load_kernel_and_declaration() -> None:
    assert isinstance(KERNEL, lds.DotScaledLinear) and KERNEL.decl is DECL
    assert len(CONTRACTS) == 3 * 3 * (3 * 3 + 1)  # weights x (dynamic keys + none)


@pytest.mark.parametrize("contract", [
    SchemeContract(weight=QuantKey.mx("mxfp6_e3m2", rounding="even", static=True),
                   activation=None),
    SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                   activation=QuantKey.mx("mxfp6_e2m3", rounding="even", static=False)),
    SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                   activation=QuantKey.parse("fp8_e4m3:fp32/tensor:static")),
], ids=str)
def test_rejects_contracts_it_does_not_declare(contract: SchemeContract) -> None:
    kwargs = {"act_scale": 1.0} if contract.activation and contract.activation.static else {}
    with pytest.raises(ValueError, match="does not implement"):
        KERNEL.prepare(_randn(16, 64), contract, **kwargs)


def test_bad_inputs_raise_clear_errors() -> None:
    prepared = KERNEL.prepare(_randn(16, 64), _w4a16())
    with pytest.raises(ValueError, match="float32 is not bfloat16 or float16"):
        KERNEL.apply(_randn(2, 64), prepared)
    with pytest.raises(ValueError, match="does not end in in_features=64"):
        KERNEL.apply(_randn(2, 32, dtype=torch.bfloat16), prepared)
    with pytest.raises(ValueError, match=r"bias must be .* shape \(16,\)"):
        KERNEL.apply(_randn(2, 64, dtype=torch.bfloat16), prepared, _randn(8))
    with pytest.raises(ValueError, match="lhs_mode 'mx' does not fit"):
        lds.dot_scaled_linear(_randn(2, 64, dtype=torch.bfloat16), prepared, lhs_mode="mx")
    with pytest.raises(ValueError, match="not a multiple of 64"):
        KERNEL.prepare(_randn(16, 96), _w4a16())
    stranger = REF.prepare(_randn(16, 64), _w4a16())
    with pytest.raises(ValueError, match="was not made by triton-dot-scaled"):
        KERNEL.apply(_randn(2, 64, dtype=torch.bfloat16), stranger)


def test_error_bound_is_meaningful() -> None:
    """The 1e-5 bound catches a one-code change of one weight element (so it can fail)."""
    contract = SchemeContract(weight=QuantKey.mx("mxfp8_e4m3", rounding="even", static=True),
                              activation=QuantKey.mx("mxfp8_e4m3", rounding="even", static=False))
    g = _gen("bound")
    prepared = KERNEL.prepare(_randn(16, 128, gen=g), contract)
    x = _randn(4, 128, gen=g, dtype=torch.bfloat16)
    want32 = _ref_fp32(x, prepared, None)
    data = prepared.cache[lds.CACHE_KEY].data
    mag = data[5] & 0x7F
    j = int(((mag >= 0x30) & (mag < 0x60)).nonzero()[0])  # a normal code: 0x08 stays finite
    data[5, j] ^= 0x08  # one exponent step of one e4m3 element
    got32 = lds.dot_scaled_linear(x, prepared, None, torch.float32)
    with pytest.raises(AssertionError, match="relative error"):
        assert_close_fp32(got32, want32, "perturbed")
    assert math.isfinite(got32.sum().item())


@pytest.mark.parametrize("fmt", ["mxfp8_e5m2", "mxfp8_e4m3"])
def test_no_special_code_reaches_dot_scaled(fmt: str) -> None:
    """On Hopper (triton 3.6) dot_scaled's e5m2 -> bf16 upcast is a bit trick that turns Inf
    into 2**16 and NaN into 1.5 * 2**16 (issue 12: compiled and interpreted results differed).
    So the operands handed to dot_scaled hold no Inf / NaN code: a NaN code's block is an 0xFF
    scale, an Inf code is 0 and listed (n, k, +-inf) for the exact IEEE pass after the kernel."""
    contract = SchemeContract(weight=QuantKey.mx(fmt, rounding="even", static=True),
                              activation=None)
    g = _gen("specials", fmt)
    mx = mx_quantize(_randn(8, 64, gen=g), fmt, rounding="even")
    data = mx.data.clone()
    if fmt == "mxfp8_e5m2":
        specials = {(1, 3): 0x7C, (1, 40): 0xFC, (6, 7): 0x7C, (2, 33): 0x7E, (4, 0): 0xFF}
    else:
        specials = {(2, 33): 0x7F, (4, 0): 0xFF}
    for (n, k), code in specials.items():
        data[n, k] = code
    prepared = KERNEL.prepare(MXTensor(data, mx.scales, mx.fmt, mx.rounding, mx.shape), contract)
    ops = prepared.cache[lds.CACHE_KEY]
    mag = ops.data.cpu() & 0x7F
    assert not bool(((mag >= 0x7C) if fmt == "mxfp8_e5m2" else (mag == 0x7F)).any())
    nan_blocks = {(n, k // 32) for (n, k), c in specials.items() if (c & 0x7F) > 0x7C}
    got_nan = {tuple(i) for i in (ops.scales.cpu() == 0xFF).nonzero().tolist()}
    assert got_nan == nan_blocks
    infs = {(n, k): c for (n, k), c in specials.items() if (c & 0x7F) == 0x7C}
    if fmt == "mxfp8_e4m3":
        assert ops.inf_codes is None
    else:
        cols, ks, vals = (t.cpu() for t in ops.inf_codes)
        listed = {(int(n), int(k)): float(v) for n, k, v in zip(cols, ks, vals)}
        assert listed == {nk: (-1.0 if c & 0x80 else 1.0) * float("inf") for nk, c in infs.items()}
        assert all(int(ops.data[n, k]) == 0 for n, k in infs)
    # and the layer still gives the reference's specials (finite elsewhere)
    x = _randn(3, 64, gen=g).to(device=DEVICE, dtype=torch.bfloat16)
    assert_matches_reference(KERNEL.apply(x, prepared), REF.apply(x, prepared), x, prepared, None,
                             f"{fmt} specials")
