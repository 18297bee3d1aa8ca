"""What the three test_bad_tensors_* files share: the one-line-error check, bit views, the bad
dtypes, and the skip for cases that mix cuda and cpu tensors."""
from __future__ import annotations

import pytest
import torch

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="mixing cuda and cpu tensors needs a GPU (none here)")

#: tensors that are not float activations: each is a one-line error
BAD_DTYPES = {
    "int32": torch.int32, "bool": torch.bool, "float64": torch.float64,
    "complex64": torch.complex64, "float8": torch.float8_e4m3fn, "uint8-codes": torch.uint8,
}


def one_line_error(exc_type, call, *needles: str) -> str:
    with pytest.raises(exc_type) as info:
        call()
    text = str(info.value)
    assert "\n" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


def bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor, NaNs canonicalised (payload / sign of a NaN is not part
    of the contract; where the NaNs are is)."""
    t = torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)
    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()])
