"""Element casts of the reference (encode with E = 0, decode) against ml_dtypes / numpy.

ml_dtypes is the oracle for the fp element formats: its casts are RNE; it maps E4M3 overflow to
NaN and E5M2 overflow to Inf, so values are clamped to +-max normal first (MX saturates).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from kernels.reference.elements import decode, decode_e8m0, encode
from kernels.reference.mx import quantize
from kernels.spec.formats import FORMATS, ElemFormat

from support.oracles import ML_DTYPES

FP_FORMATS = [FORMATS[name] for name in ML_DTYPES]
INT8 = FORMATS["mxint8"]
F32_MAX = float(np.finfo(np.float32).max)


def ml_values(fmt: ElemFormat) -> np.ndarray:
    """float64 value of every code 0 .. 2**bits - 1, decoded by ml_dtypes."""
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    return codes.view(ML_DTYPES[fmt.name]).astype(np.float64)


def finite_magnitudes(fmt: ElemFormat) -> np.ndarray:
    values = ml_values(fmt)
    return np.unique(np.abs(values[np.isfinite(values)]))


def probe_values(magnitudes: np.ndarray, limit: float, rng: np.random.Generator) -> np.ndarray:
    """Representable values, every midpoint, the fp32 neighbours of both, values beyond `limit`,
    fp32 subnormals, random finite fp32 bit patterns; both signs, as fp32."""
    mids = (magnitudes[:-1] + magnitudes[1:]) / 2
    base = np.concatenate([magnitudes, mids]).astype(np.float32)
    assert np.array_equal(base.astype(np.float64), np.concatenate([magnitudes, mids])), "midpoints not exact in fp32"
    up = np.nextafter(base, np.float32(np.inf))
    down = np.nextafter(base, np.float32(0))
    beyond = np.float32(limit) * np.array([1.0001, 1.03125, 1.5, 2.0, 1e6], dtype=np.float32)
    extremes = np.array([F32_MAX, np.finfo(np.float32).tiny, 1e-45, 0.0], dtype=np.float32)
    sub_bits = rng.integers(1, 1 << 23, size=200, dtype=np.int64).astype(np.uint32)
    random_bits = rng.integers(0, 0x7F800000, size=4000, dtype=np.int64).astype(np.uint32)
    small = rng.uniform(0, float(magnitudes[1]) * 4, size=1000).astype(np.float32)
    values = np.concatenate([base, up, down, beyond, extremes, sub_bits.view(np.float32),
                             random_bits.view(np.float32), small])
    return np.concatenate([values, -values])


def ref_encode(values: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    return encode(torch.from_numpy(values.astype(np.float32)), fmt).numpy()


@pytest.mark.parametrize("fmt", FP_FORMATS, ids=lambda f: f.name)
def test_fp_encode_matches_ml_dtypes(fmt: ElemFormat) -> None:
    rng = np.random.default_rng(1234)
    values = probe_values(finite_magnitudes(fmt), fmt.max_normal, rng)
    clamped = np.clip(values, -fmt.max_normal, fmt.max_normal)
    expected = clamped.astype(ML_DTYPES[fmt.name]).view(np.uint8)
    got = ref_encode(values, fmt)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (
        f"{fmt.name}: {bad.size} mismatches, e.g. x={values[bad[:5]]} got {got[bad[:5]]} want {expected[bad[:5]]}"
    )


@pytest.mark.parametrize("fmt", FP_FORMATS, ids=lambda f: f.name)
def test_fp_every_code_round_trips(fmt: ElemFormat) -> None:
    """Every finite code decodes to a value that encodes back to the same code (incl. -0)."""
    values = ml_values(fmt)
    finite = np.flatnonzero(np.isfinite(values))
    got = ref_encode(values[finite], fmt)
    assert np.array_equal(got, finite.astype(np.uint8))


@pytest.mark.parametrize("fmt", FP_FORMATS, ids=lambda f: f.name)
def test_signed_zero_and_tiny_negatives_keep_the_sign(fmt: ElemFormat) -> None:
    tiny = np.array([-0.0, -1e-30, -fmt.min_subnormal / 2, 0.0, fmt.min_subnormal / 2], dtype=np.float32)
    sign = 1 << fmt.sign_bit
    assert ref_encode(tiny, fmt).tolist() == [sign, sign, sign, 0, 0]


@pytest.mark.parametrize("fmt", FP_FORMATS, ids=lambda f: f.name)
def test_fp_decode_every_byte_matches_ml_dtypes(fmt: ElemFormat) -> None:
    codes = np.arange(1 << fmt.bits, dtype=np.uint8)
    expected = ml_values(fmt).astype(np.float32)
    got = decode(torch.from_numpy(codes), fmt).numpy()
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    ok = ~np.isnan(expected)
    assert np.array_equal(got[ok].view(np.uint32), expected[ok].view(np.uint32))  # -0.0 included


@pytest.mark.parametrize("fmt", [f for f in FP_FORMATS if f.bits < 8], ids=lambda f: f.name)
def test_unpacked_high_bits_are_masked(fmt: ElemFormat) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    low = codes & ((1 << fmt.bits) - 1)
    assert torch.equal(decode(codes, fmt).view(torch.int32), decode(low, fmt).view(torch.int32))


def test_int8_encode_matches_numpy_round_half_even() -> None:
    rng = np.random.default_rng(7)
    grid = np.arange(-128, 128, dtype=np.float64) / 64
    mids = (np.arange(-128, 128, dtype=np.float64) + 0.5) / 64
    base = np.concatenate([grid, mids]).astype(np.float32)
    values = np.concatenate([
        base, np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf)),
        np.array([2.0, 3.0, -2.5, 1e30, -F32_MAX, F32_MAX, -0.0, 1e-40], dtype=np.float32),
        rng.normal(0, 1.5, size=5000).astype(np.float32),
    ])
    expected = np.clip(np.round(values.astype(np.float64) * 64), -127, 127).astype(np.int8).view(np.uint8)
    got = ref_encode(values, INT8)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, f"x={values[bad[:5]]} got {got[bad[:5]]} want {expected[bad[:5]]}"


def test_int8_decode_every_byte() -> None:
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.view(np.int8).astype(np.float32) / 64
    assert np.array_equal(decode(torch.from_numpy(codes), INT8).numpy(), expected)


def test_e8m0_decode_matches_ml_dtypes() -> None:
    codes = np.arange(256, dtype=np.uint8)
    expected = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    got = decode_e8m0(torch.from_numpy(codes)).numpy()
    assert np.isnan(got[255]) and np.isnan(expected[255])
    assert np.array_equal(got[:255].view(np.uint32), expected[:255].view(np.uint32))


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=lambda f: f.name)
def test_scale_bytes_are_e8m0_of_the_shared_exponent(fmt: ElemFormat) -> None:
    """A block with amax = 2**(E + emax) gets E under floor; its byte is ml_dtypes' E8M0 of 2**E."""
    exponents = np.arange(-127, 128)
    rows = np.zeros((exponents.size, 32), dtype=np.float64)
    rows[:, 3] = np.ldexp(1.0, exponents + fmt.emax)
    rows[:, 7] = -rows[:, 3] / 2
    finite = rows[:, 3] <= F32_MAX  # 2**(E + emax) beyond fp32 max: skip the row
    x = torch.from_numpy(rows[finite].astype(np.float32))
    _, scales = quantize(x, fmt, "floor", "unpacked")
    expected = np.ldexp(1.0, exponents[finite]).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    assert np.array_equal(scales[:, 0].numpy(), expected)
    assert finite.sum() >= 255 - fmt.emax
