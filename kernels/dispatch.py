"""The one activation-QDQ dispatcher, keyed by the activation `QuantKey`.

Linear and MoE paths call `activation_qdq(key)` and get the function that fake-quantizes
activations for that key. The set of keys it serves is
`kernels.select.activation_keys.DISPATCH_KEYS` (data that lint reads without torch); a key
outside it raises `UnknownActivationKey` naming the key and the known keys. There is no
pass-through: a scheme whose activation key is missing here cannot run (the vLLM bug where
"mxfp6" QDQ was silently skipped).

Which qdq kernel runs a key is resolve's choice (kernels.choice, kind "qdq"), made per call and
cached: `backend="auto"` for the tensor's platform, "triton" / "reference" forced, a qdq
kernel's name as is (kernels that run it inside themselves, and oracles).
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import torch
from torch import Tensor

from kernels import choice
from kernels.mx import mx_qdq
from kernels.reference.fp8_tensor import check_values, fp8_tensor_qdq
from kernels.select.activation_keys import DISPATCH_KEYS, FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.spec.contract import QuantKey

#: (x, act_scale) -> x fake-quantized, same dtype and shape.
ActivationQDQ = Callable[[Tensor, Optional[Tensor]], Tensor]


class UnknownActivationKey(KeyError):
    """The dispatcher has no entry for an activation key (never a pass-through)."""

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return str(self.args[0])


def _mx(x: Tensor, act_scale: Tensor | None, *, key: QuantKey, backend: str) -> Tensor:
    if act_scale is not None:
        raise ValueError(
            f"activation key {key} computes its e8m0 scales from each block at run time; "
            "it takes no static act_scale (remove it)"
        )
    return mx_qdq(x, key.format, rounding=key.scale.rounding, backend=backend)


def _fp8_static(x: Tensor, act_scale: Tensor | None, *, key: QuantKey, backend: str) -> Tensor:
    if act_scale is None:
        raise ValueError(
            f"activation key {key} is static: it needs a per-tensor scale; load it from the "
            "checkpoint (act_scale=...) or calibrate it from a sample batch (calibration=...)"
        )
    if backend == choice.AUTO and isinstance(x, Tensor):
        # every qdq kernel runs this key as the one shared torch cast, so a forced backend
        # changes nothing here; resolve still decides whether a qdq kernel may run (disabled
        # kernels, strict mode)
        choice.choose("qdq", key, x.device, backend)
    return fp8_tensor_qdq(x, act_scale)


def _table() -> dict[QuantKey, Callable[..., Tensor]]:
    table: dict[QuantKey, Callable[..., Tensor]] = {k: _mx for k in MX_DYNAMIC_KEYS}
    table[FP8_STATIC_TENSOR_KEY] = _fp8_static
    assert set(table) == set(DISPATCH_KEYS), "dispatcher table and DISPATCH_KEYS disagree"
    return table


_TABLE = _table()


def known_keys() -> list[str]:
    return sorted(str(k) for k in _TABLE)


def activation_qdq(key: QuantKey, backend: str = "auto") -> ActivationQDQ:
    """The QDQ function for `key`, or UnknownActivationKey naming the key and the known keys.
    `backend`: "auto" (resolve's qdq choice, per call), "triton" / "reference" (forced), or a
    qdq kernel's name (that kernel as is); anything else is a one-line ValueError."""
    fn = _TABLE.get(key)
    if fn is None:
        raise UnknownActivationKey(
            f"the activation-QDQ dispatcher has no entry for {key}; known keys: "
            f"{', '.join(known_keys())}"
        )
    choice.check_backend("qdq", backend)
    return partial(fn, key=key, backend=backend)


_CALIBRATION_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def calibrate_act_scale(key: QuantKey, sample: Tensor) -> Tensor:
    """A static per-tensor activation scale from a sample batch: amax / max normal (fp8 E4M3).

    An all-zero sample gives the smallest normal fp32 scale (2**-126), not 0 (not a valid
    scale); NaN / Inf in the sample is an error."""
    if key != FP8_STATIC_TENSOR_KEY:
        raise ValueError(f"activation key {key} has no static scale to calibrate")
    check_values(sample, "calibration sample", _CALIBRATION_DTYPES,
                 "pass a batch of float activations (float32, bfloat16, float16 or float64)")
    if sample.numel() == 0:
        raise ValueError(f"calibration sample is empty (shape {tuple(sample.shape)}); pass a "
                         "batch of real activations")
    amax = sample.detach().abs().float().amax()
    if not torch.isfinite(amax):
        raise ValueError("calibration sample holds NaN or Inf; pass finite activations")
    return torch.clamp(amax / 448.0, min=torch.finfo(torch.float32).tiny).reshape(())
