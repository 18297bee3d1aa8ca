"""The activation keys the QDQ dispatcher handles, as data (no torch import).

The key families live here (MX_DYNAMIC_KEYS, FP8_STATIC_TENSOR_KEY); which of them the
dispatcher serves is what the qdq kernels declare (kernels.select.declarations.QDQ_KERNELS),
so `DISPATCH_KEYS` is derived from those declarations and re-exported here (loaded on first
use). `kernels.dispatch.activation_qdq` serves exactly these keys, kernel declarations say
"every key the dispatcher knows" by naming this set, and `registry lint` reports any scheme
whose activation key is not in it. A key missing here is an error at lint time and at run
time, never a silent pass-through (the "mxfp6" bug).
"""
from __future__ import annotations

from kernels.spec.contract import MX_FORMATS, ROUNDINGS, QuantKey, ScaleDesc

__all__ = ["MX_DYNAMIC_KEYS", "FP8_STATIC_TENSOR_KEY", "DISPATCH_KEYS", "mx_keys"]

#: Dynamic MX activations: every element format x every e8m0 rounding, block 32.
MX_DYNAMIC_KEYS: frozenset[QuantKey] = frozenset(
    QuantKey.mx(fmt, rounding=r, static=False) for fmt in MX_FORMATS for r in ROUNDINGS
)

#: fp8 E4M3 with one static fp32 scale per tensor (the `*_a_fp8` schemes); the scale travels
#: with the prepared weight (from a checkpoint or calibrated).
FP8_STATIC_TENSOR_KEY = QuantKey(
    format="fp8_e4m3", scale=ScaleDesc(format="fp32", granularity="tensor", static=True)
)


def mx_keys(formats, *, static: bool, roundings=ROUNDINGS) -> frozenset[QuantKey]:
    """MX keys (e8m0 block-32 scales) for the given formats and roundings."""
    return frozenset(QuantKey.mx(f, rounding=r, static=static) for f in formats for r in roundings)


def __getattr__(name: str):
    # DISPATCH_KEYS: every key a qdq kernel declares (declarations imports this module)
    if name == "DISPATCH_KEYS":
        from kernels.select.declarations import DISPATCH_KEYS

        return DISPATCH_KEYS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
