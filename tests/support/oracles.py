"""Independent oracles shared by the numerics tests: ml_dtypes' element casts, and the MX
quantizer computed without kernels/reference (python `math` on float64 for the shared exponent,
a brute-force nearest search over the code table decoded by ml_dtypes, ties -> the even code)."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from kernels.spec.formats import ElemFormat

#: ml_dtypes' element types: the test oracle for every MX floating-point element cast.
ML_DTYPES = {
    "mxfp4": ml_dtypes.float4_e2m1fn,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
}


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
