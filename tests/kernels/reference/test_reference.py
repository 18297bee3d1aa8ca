"""The reference MX quantizer against an independent computation, every format x rounding.

The oracle (tests/support/oracles.py) shares no code with kernels/reference: the shared exponent comes from python
`math` on float64, elements from a brute-force nearest search over the code table decoded by
ml_dtypes (ties -> the even code), scaling in float64 (exact), dequantization in float64.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from kernels.reference.mx import dequantize, qdq, quantize
from kernels.spec.formats import FORMATS, ROUNDINGS, ElemFormat

from support.oracles import assert_same_bits, magnitude_table, oracle_dequantize, oracle_quantize

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
F32_MAX = float(np.finfo(np.float32).max)
K = 64


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
