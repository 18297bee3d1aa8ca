"""A declarative registry of OCP Microscaling (MX) quantization schemes.

    from registry import load_schemes
    catalog = load_schemes()                  # shipped + $REGISTRY_SCHEMES_PATH
    scheme = catalog.get("mxfp4")             # by name or alias
    scheme.contract.activation                # QuantKey.parse('mxfp4:e8m0/b32:even:dynamic')

    from registry import quantize_model, save_quantized, load_quantized
    report = quantize_model(model, "w_mxfp4", ignore=["lm_head"])   # nn.Linear -> MXLinear
    print(report)                             # layer, shape, scheme, kernel, fallback, reason
    save_quantized(model, "model.safetensors")

    from registry import MXGroupedExperts
    experts = MXGroupedExperts(weights, "w_mxfp4_a_mxfp4")          # [E, N, K] MoE experts

Attributes are imported on first use, so `import registry` stays cheap; nothing here imports
torch or triton (the model-level names import torch when first used).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "QuantKey": "kernels.spec.contract",
    "ScaleDesc": "kernels.spec.contract",
    "SchemeContract": "kernels.spec.contract",
    "Scheme": "registry.contract",
    "Finding": "registry.errors",
    "SchemeLoadError": "registry.errors",
    "UnknownSchemeError": "registry.errors",
    "AmbiguousSchemeError": "registry.errors",
    "BrokenSchemeError": "registry.errors",
    "Catalog": "registry.files.catalog",
    "load_schemes": "registry.files.catalog",
    "json_schema": "registry.lint.json_schema",
    "run_lint": "registry.lint.checks",
    "LINT_CHECKS": "registry.lint.checks",
    "MXLinear": "registry.nn.layers",
    "MXGroupedExperts": "registry.nn.layers",
    "quantize_model": "registry.nn.quantize",
    "plan_quantization": "registry.nn.quantize",
    "QuantizationReport": "registry.nn.quantize",
    "save_quantized": "registry.nn.checkpoint",
    "load_quantized": "registry.nn.checkpoint",
    "CheckpointError": "registry.nn.checkpoint",
    "load_checkpoint": "registry.checkpoints.load",
    "save_checkpoint": "registry.checkpoints.writer",
    "schemes_from_config": "registry.configs.hf_config",
    "quantize_model_from_config": "registry.nn.quantize_config",
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
