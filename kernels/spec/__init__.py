"""The shared vocabulary at the bottom of the house: every layer above reads it, it reads none.

    formats    the MX element formats, roundings, block size and storage layouts (plain data)
    contract   ScaleDesc / QuantKey / SchemeContract, the names derived from the format table,
               the validity rules (`*_problems`) and name suggestions
    platform   Platform values, KNOWN_PLATFORMS, requirement strings, detection
    env        the REGISTRY_* on/off switches (`env_flag`)

Nothing here imports torch or triton (detection imports torch when it is called), nor the
`registry` package. The common names are importable from here and load on first use:
`from kernels.spec import QuantKey, Platform`.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ScaleDesc": "contract", "QuantKey": "contract", "SchemeContract": "contract",
    "HasContract": "contract", "MX_BLOCK": "contract", "MX_FORMATS": "contract",
    "ELEMENT_FORMATS": "contract", "ROUNDINGS": "contract",
    "Platform": "platform", "KNOWN_PLATFORMS": "platform", "platform_of": "platform",
    "env_flag": "env", "SettingError": "env",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernels.spec' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kernels.spec.{module}"), name)
    globals()[name] = value
    return value
