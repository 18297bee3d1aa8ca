"""A declarative registry of OCP Microscaling (MX) quantization schemes.

    from registry import load_schemes
    catalog = load_schemes()                  # shipped + $REGISTRY_SCHEMES_PATH
    scheme = catalog.get("mxfp4")             # by name or alias
    scheme.contract.activation                # QuantKey.parse('mxfp4:e8m0/b32:even:dynamic')

Attributes are imported on first use, so `import registry` stays cheap; nothing here imports
torch or triton.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "QuantKey": "registry.contract",
    "ScaleDesc": "registry.contract",
    "SchemeContract": "registry.contract",
    "Scheme": "registry.contract",
    "Finding": "registry.errors",
    "SchemeLoadError": "registry.errors",
    "UnknownSchemeError": "registry.errors",
    "Catalog": "registry.catalog",
    "load_schemes": "registry.catalog",
    "json_schema": "registry.schema",
    "run_lint": "registry.lint",
    "LINT_CHECKS": "registry.lint",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'registry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
