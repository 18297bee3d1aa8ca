"""Quantize tests through fp8_cast's path (the elements rounded by the fp8 conversion)."""
from __future__ import annotations

import pytest

from kernels.spec.formats import ElemFormat
from kernels.spec.platform import device_platform
from kernels.triton import fp8_cast, mx_quant

from support.device import DEVICE


def through_fp8_cvt(monkeypatch: pytest.MonkeyPatch, fmt: ElemFormat) -> None:
    """Turn fp8_cast's path on (its gate) and check that quantize takes it here: the
    interpreter's twin on the CPU, the PTX on a GPU of sm_89 or later."""
    monkeypatch.setattr(fp8_cast, "CVT_VERIFIED", True)
    sm = device_platform(DEVICE).sm
    if DEVICE != "cpu" and (sm is None or sm < 89):
        pytest.skip(f"the fp8 conversion needs sm_89 or later; this GPU is sm_{sm}")
    assert fp8_cast.cvt_here(fmt, mx_quant._INTERPRETED, sm) != 0
