"""Quantize a model the way its checkpoint's `quantization_config` says, in one call.

Why: a Quark or compressed-tensors `config.json` already names, per group of layers, the MX
formats the weights were exported with; `registry resolve --from-config` shows the mapping, and
this applies it. Each nn.Linear is decided by the config entry that claims it under the
producer's own rules (`hf_config.group_for_module`: exclude / ignore first, then the most
specific group): mapped -> that registry scheme; excluded -> left in float, listed in the
report's notes; an entry that maps to no scheme -> one error naming the layer, the entry's JSON
path and the field that did not match; a layer two compressed-tensors config groups claim alike
-> one error naming both groups' lines (`registry.configs.hf_claims`). Nothing is replaced
unless every layer could be built.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from torch import nn

from kernels.spec.platform import Platform
from registry.configs.hf_config import group_for_module, schemes_from_config
from registry.configs.json_lines import one_line
from registry.files.catalog import Catalog
from registry.nn.quantize import QuantizationReport, quantize_model


def quantize_model_from_config(
        model: nn.Module, config: Union[str, os.PathLike, Mapping[str, Any]], *,
        platform: Union[str, Platform, None] = None, strict: bool = False,
        act_scales: Optional[Mapping[str, Any]] = None, calibration: Any = None,
        catalog: Optional[Catalog] = None) -> QuantizationReport:
    """Replace every nn.Linear of `model` that `config` quantizes by an MXLinear of the mapped
    scheme (see the module docstring); the report of `quantize_model`, with one note per layer
    the config leaves in float."""
    groups = schemes_from_config(config, catalog)
    schemes: dict[str, Any] = {}
    kept, notes = [], []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        group = group_for_module(groups, name, type(module).__name__)
        if group is None:
            kept.append(name)
            notes.append(f"{name}: no entry of the config claims it; left in float")
        elif group.status == "mapped":
            schemes[name] = group.scheme
        elif group.status == "unmapped":
            raise ValueError(f"layer {name}: {group.error}")
        else:  # exclude / ignore
            kept.append(name)
            shown = ", ".join(one_line(t) for t in group.targets)
            notes.append(f"{name}: not quantized ({group.path}: {shown})")
    if not schemes:
        raise ValueError(f"{groups[0].source if groups else config}: the config quantizes none "
                         "of the model's nn.Linear layers; check the module names against its "
                         "targets / layer_quant_config patterns")
    report = quantize_model(model, schemes, targets=tuple(schemes), ignore=tuple(kept),
                            platform=platform, strict=strict, act_scales=act_scales,
                            calibration=calibration, catalog=catalog)
    report.notes = list(report.notes) + notes
    return report
