"""The reference MX quantizer against an independent computation, every format x rounding.

The oracle here shares no code with kernels/reference: the shared exponent comes from python
`math` on float64, elements from a brute-force nearest search over the code table decoded by
ml_dtypes (ties -> the even code), scaling in float64 (exact), dequantization in float64.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from oracles import ML_DTYPES
from kernels.reference.mx import dequantize, qdq, quantize
from kernels.spec.formats import FORMATS, ROUNDINGS, ElemFormat

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
F32_MAX = float(np.finfo(np.float32).max)
K = 64


# ----------------------------------------------------------------------------- the oracle
def all_code_values(fmt: ElemFormat) -> np.ndarray:
    """float64 value of every code (index = code), NaN / Inf included."""
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    if fmt.is_int:
        return codes.view(np.int8).astype(np.float64) / 64
    return codes.view(ML_DTYPES[fmt.name]).astype(np.float64)


def magnitude_table(fmt: ElemFormat) -> np.ndarray:
    """Finite non-negative values by magnitude code 0, 1, ... (the codes with the sign bit clear)."""
    values = all_code_values(fmt)[: 1 << (fmt.bits - 1)]
    return values[np.isfinite(values)]


def oracle_exponent(amax: float, fmt: ElemFormat, rounding: str) -> int:
    if amax == 0:
        return -127
    floor_log2 = math.frexp(amax)[1] - 1
    if rounding == "floor":
        e = floor_log2 - fmt.emax
    elif rounding == "even":
        # add half an ulp at the element's mantissa width, inside fp32's binade (fp32 subnormals
        # live in the 2**-126 binade), then keep only the power of two
        binade = max(floor_log2, -126)
        rounded = amax + math.ldexp(1.0, binade - fmt.mbits - 1)
        e = math.frexp(rounded)[1] - 1 - fmt.emax
    else:  # rceil: the smallest e with amax <= max_normal * 2**e
        e = floor_log2 - fmt.emax - 1
        while amax > math.ldexp(fmt.max_normal, e):
            e += 1
    return min(max(e, -127), 127)


def oracle_codes(y: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    """Nearest magnitude by brute force (ties -> even code), sign attached."""
    table = magnitude_table(fmt)
    distance = np.abs(np.abs(y)[:, None] - table[None, :])
    nearest = distance == distance.min(axis=1, keepdims=True)
    even = (np.arange(table.size) % 2 == 0)[None, :]
    pick = np.where(nearest.sum(axis=1) == 1, nearest.argmax(axis=1), (nearest & even).argmax(axis=1))
    negative = np.signbit(y)
    if fmt.is_int:
        return np.where(negative, -pick, pick).astype(np.int8).view(np.uint8)
    return (pick | (negative.astype(np.int64) << fmt.sign_bit)).astype(np.uint8)


def oracle_quantize(x: np.ndarray, fmt: ElemFormat, rounding: str) -> tuple[np.ndarray, np.ndarray]:
    rows, k = x.shape
    blocks = x.astype(np.float64).reshape(rows, k // 32, 32)
    scales = np.zeros((rows, k // 32), dtype=np.uint8)
    y = np.zeros_like(blocks)
    for r in range(rows):
        for b in range(k // 32):
            amax = float(np.max(np.abs(blocks[r, b])))
            if not math.isfinite(amax):
                scales[r, b] = 0xFF
                continue  # codes stay 0
            e = oracle_exponent(amax, fmt, rounding)
            scales[r, b] = e + 127
            y[r, b] = blocks[r, b] * math.ldexp(1.0, -e)
    return oracle_codes(y.reshape(-1), fmt).reshape(rows, k), scales


def oracle_dequantize(codes: np.ndarray, scales: np.ndarray, fmt: ElemFormat, dtype: torch.dtype) -> torch.Tensor:
    """float64 value * 2**E (exact); a finite element whose value passes dtype's max saturates to
    +-max (an Inf code stays Inf); then fp32 (exact below the limit) and an RNE cast to dtype."""
    rows, k = codes.shape
    values = all_code_values(fmt)[codes].reshape(rows, k // 32, 32)
    power = np.ldexp(1.0, scales.astype(np.int64) - 127)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        exact = values * power
        limit = float(torch.finfo(dtype).max)
        exact = np.where(np.isfinite(values) & (np.abs(exact) > limit), np.copysign(limit, exact), exact)
        out = exact.astype(np.float32)
    out[scales == 0xFF] = np.nan
    return torch.from_numpy(out.reshape(rows, k)).to(dtype)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), "NaN positions differ"
    int_type = {2: torch.int16, 4: torch.int32}[got.element_size()]
    diff = (got.view(int_type) != want.view(int_type)) & ~nan
    if diff.any():
        where = diff.nonzero()[:5].tolist()
        raise AssertionError(f"{int(diff.sum())} values differ, e.g. at {where}: got "
                             f"{[got[tuple(i)].item() for i in where]} want {[want[tuple(i)].item() for i in where]}")


# ----------------------------------------------------------------------------- the inputs
def tie_rows(fmt: ElemFormat, rng: np.random.Generator, count: int) -> np.ndarray:
    """Blocks whose elements sit exactly on element midpoints (and on the scale-rounding edges)."""
    table = magnitude_table(fmt)
    mids = (table[:-1] + table[1:]) / 2
    rows = []
    for _ in range(count):
        e = int(rng.integers(-100, 100))
        block = rng.choice(mids, size=K) * rng.choice([-1.0, 1.0], size=K)
        block[0] = fmt.max_normal  # amax = max_normal * 2**e: E = e under every rounding
        rows.append(np.ldexp(block, e))
    # scale-rounding edges: even's carry point 2 - 2**-(mbits+1), rceil's max_normal, +- one ulp
    m = fmt.mbits
    for amax in (2 - 2.0 ** -(m + 1), fmt.max_normal / 2 ** fmt.emax, 1.0):
        for e in (-126, -3, 0, 5, 126):
            a = np.float32(math.ldexp(amax, e))
            for v in (a, np.nextafter(a, np.float32(0)), np.nextafter(a, np.float32(np.inf))):
                block = rng.normal(size=K) * float(v) / 8
                block[5] = v
                rows.append(block)
    return np.asarray(rows)


def special_rows(rng: np.random.Generator) -> np.ndarray:
    rows = [np.zeros(K), -np.zeros(K)]
    for value in (np.nan, np.inf, -np.inf):
        block = rng.normal(size=K)
        block[rng.integers(0, K)] = value
        rows.append(block)
    sub = rng.integers(1, 1 << 23, size=(4, K)).astype(np.uint32).view(np.float32).astype(np.float64)
    rows.extend(sub * rng.choice([-1.0, 1.0], size=(4, K)))
    near_sub = np.full(K, np.float32(2.0**-126) * np.float32(1 - 2**-7))  # mxint8 even: carries
    rows.append(near_sub)
    rows.append(np.ldexp(rng.normal(size=K), -135))  # E clamped at -127 with non-zero codes
    rows.append(np.ldexp(rng.normal(size=K), -115))
    huge = np.full(K, F32_MAX) * rng.uniform(0.4, 1.0, size=K) * rng.choice([-1.0, 1.0], size=K)
    rows.append(huge)  # E near +127, clamped for mxint8 under even / rceil
    rows.append(np.full(K, np.float32(1.999 * 2.0**127)))
    return np.asarray(rows)


def make_input(fmt: ElemFormat, dtype: torch.dtype, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    sign = lambda n: rng.choice([-1.0, 1.0], size=(n, K))  # noqa: E731
    blocks = [
        rng.normal(size=(8, K)),
        rng.standard_cauchy(size=(8, K)),
        rng.standard_t(df=2, size=(8, K)),
        np.exp(rng.uniform(-100, 100, size=(8, K))) * sign(8),
        np.exp2(rng.uniform(-20, 20, size=(8, 1)) + rng.uniform(-140, 120, size=(8, 1))) * rng.normal(size=(8, K)),
        tie_rows(fmt, rng, 6),
        special_rows(rng),
    ]
    with np.errstate(over="ignore"):
        x = np.concatenate(blocks).astype(np.float32)
    return torch.from_numpy(x).to(dtype)


# ----------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=lambda f: f.name)
def test_reference_matches_oracle(fmt: ElemFormat, rounding: str, dtype: torch.dtype) -> None:
    x = make_input(fmt, dtype, seed=zlib.crc32(f"{fmt.name} {rounding} {dtype}".encode()))
    want_codes, want_scales = oracle_quantize(x.float().numpy(), fmt, rounding)
    codes, scales = quantize(x, fmt, rounding, "unpacked")
    bad = np.argwhere(scales.numpy() != want_scales)
    assert bad.size == 0, f"scales differ at {bad[:5].tolist()}: got {scales.numpy()[tuple(bad[0])]} want {want_scales[tuple(bad[0])]}"
    bad = np.argwhere(codes.numpy() != want_codes)
    assert bad.size == 0, (f"codes differ at {bad[:5].tolist()}: x={x[tuple(bad[0])].item()!r} "
                           f"got {codes.numpy()[tuple(bad[0])]} want {want_codes[tuple(bad[0])]}")
    for out_dtype in DTYPES:
        got = dequantize(codes, scales, fmt, "unpacked", K, out_dtype)
        assert_same_bits(got, oracle_dequantize(want_codes, want_scales, fmt, out_dtype))
    assert_same_bits(qdq(x, fmt, rounding), oracle_dequantize(want_codes, want_scales, fmt, dtype))


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=lambda f: f.name)
def test_inputs_reach_the_edge_cases(fmt: ElemFormat, rounding: str) -> None:
    """The oracle test is only as good as its inputs: they must hit both E clamps with non-zero
    codes, NaN blocks and element ties."""
    x = make_input(fmt, torch.float32, seed=3)
    codes, scales = quantize(x, fmt, rounding, "unpacked")
    blocks_nonzero = (codes.view(-1, K // 32, 32) & ((1 << (fmt.bits - 1)) - 1)).amax(-1) > 0
    assert ((scales == 0) & blocks_nonzero).any(), "no E = -127 block with non-zero codes"
    assert (scales == 0xFF).any(), "no NaN / Inf block"
    top = 254 - fmt.emax  # E = 127 - emax: amax in [2**127, fp32 max]
    assert (scales == top).any(), f"no block with E = {top - 127} (amax near fp32 max)"


def test_nan_inf_blocks_have_nan_scale_and_zero_codes() -> None:
    x = torch.randn(3, 64)
    x[0, 5] = float("nan")
    x[1, 40] = float("inf")
    x[2, 63] = -float("inf")
    for fmt in FORMATS.values():
        codes, scales = quantize(x, fmt, "even", "unpacked")
        assert scales.tolist() == [[255, scales[0, 1].item()], [scales[1, 0].item(), 255], [scales[2, 0].item(), 255]]
        assert scales[0, 1] != 255 and scales[1, 0] != 255
        assert (codes[0, :32] == 0).all() and (codes[1, 32:] == 0).all() and (codes[2, 32:] == 0).all()
        out = dequantize(codes, scales, fmt, "unpacked", 64, torch.float32)
        assert out[0, :32].isnan().all() and not out[0, 32:].isnan().any()


def test_all_zero_block_gets_e_min_and_keeps_signed_zeros() -> None:
    x = torch.zeros(2, 32)
    x[1, ::2] = -0.0
    for fmt in FORMATS.values():
        for rounding in ROUNDINGS:
            out = qdq(x, fmt, rounding)
            _, scales = quantize(x, fmt, rounding, "unpacked")
            assert scales.tolist() == [[0], [0]]
            if not fmt.is_int:  # mxint8 has no negative zero
                assert torch.equal(torch.signbit(out), torch.signbit(x))


def test_chunked_rows_equal_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernels.reference.mx as ref

    x = torch.randn(37, 96) * torch.logspace(-30, 30, 37).unsqueeze(1)
    fmt = FORMATS["mxfp6_e3m2"]
    whole = quantize(x, fmt, "rceil", "packed"), qdq(x, fmt, "rceil")
    monkeypatch.setattr(ref, "CHUNK_ELEMENTS", 200)  # two rows a chunk
    chunked = quantize(x, fmt, "rceil", "packed"), qdq(x, fmt, "rceil")
    assert torch.equal(whole[0][0], chunked[0][0]) and torch.equal(whole[0][1], chunked[0][1])
    assert torch.equal(whole[1], chunked[1])
