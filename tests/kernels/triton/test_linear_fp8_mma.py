"""`triton-fp8-mma` (MXFP8 x MXFP8, fp8 MMA per 32-wide K slice) against the reference oracle."""
from __future__ import annotations

import zlib

import pytest
import torch
import torch.nn.functional as F

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_dequantize
from kernels.select.declarations import KERNELS_BY_NAME
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton.linear_fp8_mma import MMAConfig, fp8_mma_linear

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DECL = KERNELS_BY_NAME["triton-fp8-mma"]
CONTRACTS = sorted({(w, a) for f in DECL.accepts for w in f.weights for a in f.activations},
                   key=str)
KERNEL = load_kernel("triton-fp8-mma")
REFERENCE = load_kernel("reference-emulation")
# The products are exact; only the fp32 summation order differs from the reference (and, on
# Hopper, the tensor core's own adds inside one 32-wide slice): see support.emulation_cases.
ACC_BOUND = 1e-5 if DEVICE == "cpu" else 1e-4


def oracle(x, prepared, bias):
    xq = REFERENCE.qdq_activation(x, prepared, backend="reference")
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq.float(), w, None if bias is None else bias.float())


def rel_err(got, want) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm())


@pytest.mark.parametrize("m", (17, 40))
@pytest.mark.parametrize("wkey,akey", CONTRACTS, ids=[f"W={w}-A={a}" for w, a in CONTRACTS])
def test_matches_reference(wkey, akey, m: int) -> None:
    gen = torch.Generator().manual_seed(zlib.crc32(f"{wkey}{akey}{m}".encode()))
    n, k = 40, 160
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    bias = torch.randn(n, generator=gen).to(DEVICE) if m == 17 else None
    prepared = KERNEL.prepare(torch.randn(n, k, generator=gen).to(DEVICE),
                              SchemeContract(weight=wkey, activation=akey))
    acc = fp8_mma_linear(x, prepared, bias, out_dtype=torch.float32)
    assert rel_err(acc, oracle(x, prepared, bias)) <= ACC_BOUND
    assert torch.equal(KERNEL.apply(x, prepared, bias), acc.to(torch.bfloat16))


def test_nan_blocks_and_small_m() -> None:
    gen = torch.Generator().manual_seed(3)
    wkey = QuantKey.mx("mxfp8_e4m3", rounding="even", static=True)
    akey = QuantKey.mx("mxfp8_e4m3", rounding="rceil", static=False)
    prepared = KERNEL.prepare(torch.randn(24, 96, generator=gen).to(DEVICE),
                              SchemeContract(weight=wkey, activation=akey))
    w = prepared.weight
    scales = w.scales.clone()
    scales[5, 1] = 0xFF
    prepared.weight = MXTensor(w.data, scales, w.fmt, w.rounding, w.shape, w.layout)
    prepared.cache.clear()
    x = torch.randn(20, 96, generator=gen).to(torch.bfloat16)
    x[3, 7] = float("inf")
    x = x.to(DEVICE)
    out = fp8_mma_linear(x, prepared, out_dtype=torch.float32,
                         config=MMAConfig(16, 16, 2, 1, 1) if DEVICE == "cpu" else None)
    want = oracle(x, prepared, None)
    assert torch.equal(out.isnan(), want.isnan()) and out[:, 5].isnan().all()
    assert out[3].isnan().all()
    # M <= 16 takes the emulation decode kernel: same numbers
    small = fp8_mma_linear(x[:4], prepared, out_dtype=torch.float32)
    assert torch.equal(small.isnan(), want[:4].isnan())


def test_refuses_other_contracts() -> None:
    prepared = load_kernel("triton-emulation").prepare(
        torch.randn(16, 64).to(DEVICE),
        SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                       activation=QuantKey.mx("mxfp4", rounding="even", static=False)))
    with pytest.raises(ValueError, match="MXFP8 weights x dynamic MXFP8 activations only"):
        fp8_mma_linear(torch.randn(32, 64).to(DEVICE), prepared)
