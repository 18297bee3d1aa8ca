"""Shared by the one-partition wgmma kernel's tests (test_linear_wgmma.py, test_wgmma_layout.py,
test_wgmma_launches.py, test_wgmma_formats.py): the kernel, its quant keys, the sm_90 check and
GPU mark, the bit-for-bit value check and the M tile a call of M rows takes."""
from __future__ import annotations

import pytest
import torch

from kernels.base import load_kernel
from kernels.spec.contract import QuantKey
from kernels.triton import linear_configs
from kernels.triton import linear_wgmma as lw

KERNEL = load_kernel("triton-emulation")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
FP4 = {"W_PACK": 1, "W_BITS": 4, "W_SAT": False}
gpu = pytest.mark.skipif(not ON_SM90, reason="wgmma runs on sm_90 only; the CPU tests "
                         "(test_wgmma_layout, test_wgmma_launches) check its layout and decoder")


def key(name: str, static: bool = True) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=static)


def same_values(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bit for bit as values: NaN where NaN, signed zeros kept."""
    nan = want.isnan()
    return (torch.equal(got.isnan(), nan) and torch.equal(got[~nan], want[~nan])
            and torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan])))


def tile_for(m: int) -> int:
    """The smallest verified block_m that takes M's bucket (plans are cached per bucket, so a
    tile smaller than the bucket is refused: test_unavailable_says_why)."""
    return next(b for b in lw.BLOCK_M_VERIFIED if b >= linear_configs.m_bucket(m))
