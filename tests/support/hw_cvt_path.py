"""Quantize / dequantize tests through the GPU-instruction paths: hw_cvt's conversions and
fp4_lanes' bf16x2 lanes (both gates on)."""
from __future__ import annotations

import pytest

from kernels.spec.formats import ElemFormat
from kernels.spec.platform import device_platform
from kernels.triton import fp4_lanes, hw_cvt, mx_quant

from support.device import DEVICE


def through_hw_cvt(monkeypatch: pytest.MonkeyPatch, fmt: ElemFormat) -> None:
    """Turn hw_cvt's path on (its gate) and check that quantize takes it here: the
    interpreter's twin on the CPU, the PTX on a GPU of sm_89 or later."""
    monkeypatch.setattr(hw_cvt, "CVT_VERIFIED", True)
    monkeypatch.setattr(fp4_lanes, "FP4_LANES_VERIFIED", True)
    sm = device_platform(DEVICE).sm
    if DEVICE != "cpu" and (sm is None or sm < 90):
        pytest.skip(f"these paths need sm_90 (fp8 conversion: sm_89); this GPU is sm_{sm}")
    assert hw_cvt.enabled(mx_quant._INTERPRETED, sm)
    if hw_cvt.carrier(fmt)[0]:
        assert hw_cvt.cvt_here(fmt, mx_quant._INTERPRETED, sm) != 0
