"""`load_checkpoint(model, DIR)`: a producer's checkpoint into registry layers, never re-quantizing.

Why: a Quark / compressed-tensors / AutoRound / gpt-oss checkpoint already holds the MX codes
and scales; quantizing its dequantized weights again could change them. Each nn.Linear whose
stored weight is quantized becomes an MXLinear built from the stored bytes
(`registry.checkpoints.formats`) with the scheme its config entry maps to
(`registry.configs.hf_config`); every float tensor (norms, embeddings, layers the config
excludes, biases) is copied into the model as stored. Expert stacks ([E, N, K] MX tensors,
gpt-oss's `*_blocks`) become `MXGroupedExperts`, returned in the report (`report.experts`):
the model's own expert module keeps its routing code, so where to put them is the caller's call.

Refused, one line each, before the model is changed: a quantized layer whose config entry maps
to no scheme, a stored quantized tensor the model has no nn.Linear for, a float weight the
config says is quantized, a stored tensor the model has no place for (`strict=True`, default).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor, nn

from registry.checkpoints.formats import CheckpointFormatError
from registry.checkpoints.plan import CheckpointPlan, StoredLayer, plan_checkpoint
from registry.checkpoints.reader import CheckpointReader
from registry.files.catalog import Catalog
from registry.nn.layers import MXGroupedExperts, MXLinear


class CheckpointLoadError(ValueError):
    """The checkpoint does not fit the model or its config (one line: layer, tensor, fix)."""


@dataclass
class LoadReport:
    """What load_checkpoint did: layers built (name -> scheme), float tensors copied, expert
    stacks built, and notes (layers the config leaves in float)."""

    format: str
    layers: dict[str, str] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)
    experts: dict[str, MXGroupedExperts] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.format} checkpoint: {len(self.layers)} MX layers, "
                 f"{len(self.experts)} expert stacks, {len(self.copied)} float tensors copied"]
        lines += [f"  {name}: {scheme}" for name, scheme in self.layers.items()]
        lines += [f"  {name}: MXGroupedExperts ({e.contract.weight})"
                  for name, e in self.experts.items()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def _check_layer(plan: CheckpointPlan, entry: StoredLayer) -> None:
    where = plan.reader.config_path
    if entry.group is None:
        raise CheckpointLoadError(f"{entry.name}: stored quantized ({', '.join(t.name for t in entry.tensors)}) "
                                  f"but no entry of {where} claims it; fix the config's targets "
                                  "or re-export the layer in float")
    if entry.scheme is None:
        why = entry.group.error or f"the config leaves it unquantized ({entry.group.path})"
        raise CheckpointLoadError(f"{entry.name}: stored quantized but {why}")
    if entry.problem:
        raise CheckpointLoadError(entry.problem)


def _build(plan: CheckpointPlan, entry: StoredLayer, model: nn.Module, modules: dict,
           options: dict) -> tuple[str, nn.Module]:
    """(module name, the MX module) for one quantized stored layer."""
    _check_layer(plan, entry)
    reader, scheme = plan.reader, entry.scheme
    try:
        mx = plan.fmt.to_mx(entry.name, reader.get_tensor, scheme)
    except (CheckpointFormatError, ValueError) as e:
        raise CheckpointLoadError(f"{reader.directory}: {e}") from None
    if len(mx.shape) == 3:
        return entry.name, MXGroupedExperts(mx, scheme, **options)
    module = modules.get(entry.name)
    if not isinstance(module, nn.Linear):
        got = "nothing" if module is None else type(module).__name__
        raise CheckpointLoadError(f"{entry.name}: stored quantized, but the model has {got} "
                                  "there (an nn.Linear is needed); build the model from this "
                                  "checkpoint's config.json")
    if (module.out_features, module.in_features) != tuple(mx.shape):
        raise CheckpointLoadError(f"{entry.name}: stored weight is {tuple(mx.shape)} but the "
                                  f"model's nn.Linear is ({module.out_features}, "
                                  f"{module.in_features}); build the model from this config")
    bias_name = entry.name + ".bias"
    bias = reader.get_tensor(bias_name) if bias_name in reader else None
    if bias is None and module.bias is not None and module.bias.device.type != "meta":
        bias = module.bias.detach()
    device = module.weight.device if module.weight.device.type != "meta" else torch.device("cpu")
    act_dtype = module.weight.dtype if module.weight.is_floating_point() else None
    if bias is not None:
        bias = bias.to(device=device, dtype=act_dtype or bias.dtype)
    act_scale = None
    if entry.name + ".input_scale" in reader:
        act_scale = reader.get_tensor(entry.name + ".input_scale").float()
    layer = MXLinear(mx.to(device), scheme, bias, act_scale=act_scale, name=entry.name,
                     act_dtype=act_dtype, **options)
    return entry.name, layer


def load_checkpoint(model: nn.Module, directory: Union[str, os.PathLike], *,
                    strict: bool = True, kernel_strict: bool = False,
                    catalog: Optional[Catalog] = None) -> LoadReport:
    """Load a producer's checkpoint in `directory` into `model` (see the module docstring).

    `strict`: refuse stored tensors the model has no place for; `kernel_strict`: the layers'
    strict mode (fallback kernels refused)."""
    modules = dict(model.named_modules())
    with CheckpointReader(directory) as reader:
        plan = plan_checkpoint(reader, catalog,
                               type_of=lambda n: type(modules[n]).__name__ if n in modules else None)
        report = LoadReport(plan.fmt.name)
        options: dict[str, Any] = {"strict": kernel_strict, "catalog": catalog}
        built: list[tuple[str, nn.Module]] = []
        floats: list[str] = [t.name for t in plan.other]
        for entry in plan.layers:
            if entry.kind == "quantized":
                built.append(_build(plan, entry, model, modules, options))
                continue
            if entry.scheme is not None:
                raise CheckpointLoadError(
                    f"{entry.name}: stored in float ({entry.tensors[0].dtype} "
                    f"{list(entry.tensors[0].shape)}) but {entry.group.where}: {entry.group.path} "
                    f"says it is quantized ({entry.scheme.name}); exclude it in the config, or "
                    "re-export it quantized")
            if entry.group is not None:
                report.notes.append(f"{entry.name}: not quantized ({entry.group.path})")
            floats += [t.name for t in entry.tensors]
        params = dict(model.named_parameters()) | dict(model.named_buffers())
        missing = [n for n in floats if n not in params]
        if strict and missing:
            raise CheckpointLoadError(f"{reader.directory}: {len(missing)} stored tensors have no "
                                      f"place in the model (first: {missing[0]}); build the model "
                                      "from this checkpoint's config.json, or pass strict=False")
        for name, module in built:  # every layer was built: now change the model
            if isinstance(module, MXGroupedExperts):
                report.experts[name] = module
            else:
                _set_module(model, name, module)
                report.layers[name] = module.scheme.name
        for name in floats:
            if name in params:
                _copy(model, name, params[name], reader.get_tensor(name))
                report.copied.append(name)
    return report


def _copy(model: nn.Module, name: str, target: Tensor, value: Tensor) -> None:
    """Copy one stored float tensor into the model's parameter / buffer `name`."""
    if tuple(target.shape) != tuple(value.shape):
        raise CheckpointLoadError(f"{name}: stored {tuple(value.shape)} but the model has "
                                  f"{tuple(target.shape)}; build the model from this config")
    owner_name, _, attr = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    if target.device.type == "meta":
        new = value.to(target.dtype)
        if isinstance(target, nn.Parameter):
            setattr(owner, attr, nn.Parameter(new, requires_grad=target.requires_grad))
        else:
            owner._buffers[attr] = new
    else:
        with torch.no_grad():
            target.copy_(value)


__all__ = ["CheckpointLoadError", "LoadReport", "load_checkpoint"]
