"""Save and load models holding MXLinear layers as one safetensors file.

Tensors: the model's whole `state_dict()`: per MX layer `<name>.weight` (element codes, uint8, in
the layout the metadata names), `<name>.weight_scale` (E8M0 bytes, uint8), `<name>.bias` and, for
static activation keys, `<name>.input_scale` (fp32, 0-dim); every other parameter and buffer as
it is. Metadata (strings): `registry.format_version`, and `registry.layers`, a JSON object
{layer: {scheme, weight, activation, format, rounding, layout, shape, bias, contract_digest}},
plus any user metadata. Kernels are not stored: `load_quantized` resolves them again for the
machine it runs on. Every mismatch is a one-line error naming the file and the tensor or layer
(and field); nothing is changed in the model before the whole file has been checked. Reading
the file and its header (paths, duplicate keys, the contract digest, format versions) is
`registry.nn.checkpoint_file`.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Union

import torch
from torch import Tensor, nn

from kernels.mx import MXTensor
from kernels.spec.formats import BLOCK, bytes_per_row, get_format, resolve_layout
from registry.files.catalog import Catalog, load_schemes
from registry.nn.checkpoint_file import (
    FORMAT_VERSION, LAYERS_KEY, VERSION_KEY, CheckpointError, PathLike, check_header, check_path,
    contract_digest, layer_meta, read_file,
)
from kernels.spec.platform import Platform
from registry.contract import Scheme
from registry.nn.layers import MXLinear
from registry.nn.quantize import LayerRow, QuantizationReport


def save_quantized(model: nn.Module, path: PathLike,
                   metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write `model`'s state (codes and scale bytes as stored) and its layers' schemes to `path`."""
    from safetensors.torch import save_file

    if not isinstance(model, nn.Module):
        raise TypeError(f"save_quantized takes a torch.nn.Module, got {type(model).__name__}")
    path = check_path(path, "save_quantized")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory; save_quantized writes one .safetensors file: "
                         f"give a file path such as {os.path.join(path, 'model.safetensors')}")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise ValueError(f"{path}: the directory {parent} does not exist; create it first")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, MXLinear)}
    if not layers:
        raise ValueError("the model has no MXLinear layer; quantize it first "
                         "(registry.quantize_model)")
    extra = dict(metadata or {})
    for key, value in extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"metadata must map strings to strings; {key!r}: "
                             f"{type(value).__name__}")
        if key.startswith("registry."):
            raise ValueError(f"metadata key {key!r}: the 'registry.' prefix is reserved")
    tensors: dict[str, Tensor] = {}
    storages: set[int] = set()
    for name, t in model.state_dict().items():
        if t.device.type == "meta":
            raise ValueError(f"tensor {name!r} is on the meta device (no values to save); "
                             "materialize or load it before saving")
        t = t.detach().to("cpu").contiguous()
        if t.numel() and t.untyped_storage().data_ptr() in storages:
            t = t.clone()  # tied / overlapping tensors: safetensors refuses shared memory
        storages.add(t.untyped_storage().data_ptr())
        tensors[name] = t
    meta = {**extra, VERSION_KEY: str(FORMAT_VERSION),
            LAYERS_KEY: json.dumps({n: layer_meta(m) for n, m in layers.items()})}
    save_file(tensors, path, metadata=meta)


def _tensor(where: str, tensors: dict[str, Tensor], key: str, dtype: Optional[torch.dtype],
            layer: str, why: str) -> Tensor:
    if key not in tensors:
        raise CheckpointError(f"{where}: tensor {key!r} is missing from the file ({why} of layer "
                              f"{layer})")
    t = tensors[key]
    if dtype is not None and t.dtype != dtype:
        raise CheckpointError(f"{where}: tensor {key!r} is {t.dtype}, expected {dtype} ({why} of "
                              f"layer {layer})")
    return t


def _scheme_for(where: str, name: str, entry: dict[str, Any], catalog: Catalog) -> Scheme:
    """The entry's scheme from `catalog`, its contract equal to the entry's fields and digest."""
    try:
        scheme = catalog.get(entry["scheme"])
    except KeyError as e:
        raise CheckpointError(f"{where}: layer {name}: {e}") from None
    contract = scheme.contract
    act = None if contract.activation is None else str(contract.activation)
    wants = {"weight": str(contract.weight), "activation": act,
             "format": contract.weight.format, "rounding": contract.weight.scale.rounding,
             "contract_digest": contract_digest(str(contract.weight), act)}
    for field, want in wants.items():
        if entry[field] != want:
            raise CheckpointError(
                f"{where}: layer {name}: the file's {field} {entry[field]!r} differs from scheme "
                f"{scheme.name}'s contract ({want!r}); the scheme changed since the file was "
                "written: load with the scheme files it was written with")
    return scheme


def _weight(where: str, name: str, entry: dict[str, Any], tensors: dict[str, Tensor]
            ) -> MXTensor:
    """The layer's codes and scale bytes, their shapes and code range checked against the
    entry's [out, in] shape, format and layout (what save_quantized can have written)."""
    data = _tensor(where, tensors, f"{name}.weight", torch.uint8, name, "element codes")
    scales = _tensor(where, tensors, f"{name}.weight_scale", torch.uint8, name, "E8M0 scales")
    out, k = entry["shape"]
    try:
        elem = get_format(entry["format"])
        layout = resolve_layout(elem, entry["layout"])
    except ValueError as e:
        raise CheckpointError(f"{where}: layer {name}: metadata field layout: {e}") from None
    needs = ((f"{name}.weight", data, (out, bytes_per_row(elem, layout, k)), "element codes"),
             (f"{name}.weight_scale", scales, (out, k // BLOCK), "E8M0 scales"))
    for key, t, want, what in needs:
        if tuple(t.shape) != want:
            raise CheckpointError(
                f"{where}: layer {name}: tensor {key!r} ({what}) has shape {tuple(t.shape)}, but "
                f"a [{out}, {k}] weight in {elem.name} {layout} layout needs {want}")
    if layout == "unpacked" and elem.bits < 8:
        top = int(data.max())
        if top >= 1 << elem.bits:
            raise CheckpointError(
                f"{where}: layer {name}: tensor '{name}.weight' holds code byte {top:#04x}, "
                f"which is not a {elem.bits}-bit {elem.name} code: the codes are of another "
                "format; re-save the model with save_quantized")
    try:
        return MXTensor(data, scales, elem.name, entry["rounding"], torch.Size((out, k)), layout)
    except ValueError as e:
        raise CheckpointError(f"{where}: layer {name}: {e}") from None


def _build(where: str, name: str, entry: dict[str, Any], module: nn.Module,
           tensors: dict[str, Tensor], catalog: Catalog, platform: Union[str, Platform, None],
           strict: bool) -> MXLinear:
    if not isinstance(module, (nn.Linear, MXLinear)):
        raise CheckpointError(f"{where}: layer {name}: the model holds a "
                              f"{type(module).__name__} there, not an nn.Linear / MXLinear")
    shape = [module.out_features, module.in_features]
    if entry["shape"] != shape:
        raise CheckpointError(f"{where}: layer {name}: the file's weight is {entry['shape']} "
                              f"[out, in] but the model's layer is {shape}")
    if entry["bias"] != (module.bias is not None):
        file_has, model_has = ("a bias", "none") if entry["bias"] else ("no bias", "one")
        raise CheckpointError(f"{where}: layer {name}: the file has {file_has} but the model's "
                              f"layer has {model_has}")
    scheme = _scheme_for(where, name, entry, catalog)
    device = module.weight.device
    mx = _weight(where, name, entry, tensors).to(device)
    bias = None
    if entry["bias"]:
        bias = _tensor(where, tensors, f"{name}.bias", None, name, "bias").to(device)
    act = scheme.contract.activation
    act_scale = None
    if act is not None and act.static:
        act_scale = _tensor(where, tensors, f"{name}.input_scale", torch.float32, name,
                            f"static input scale ({act})").to(device)
    elif f"{name}.input_scale" in tensors:
        raise CheckpointError(f"{where}: tensor '{name}.input_scale' is in the file but scheme "
                              f"{scheme.name} has no static activation scale")
    act_dtype = module.act_dtype if isinstance(module, MXLinear) else module.weight.dtype
    try:
        return MXLinear(mx, scheme, bias, platform=platform, strict=strict, act_scale=act_scale,
                        act_dtype=act_dtype)
    except ValueError as e:
        raise CheckpointError(f"{where}: layer {name}: {e}") from None


def load_quantized(model: nn.Module, path: PathLike, *,
                   platform: Union[str, Platform, None] = None, strict: bool = False,
                   catalog: Optional[Catalog] = None) -> QuantizationReport:
    """Rebuild the file's MX layers in `model` (a skeleton with nn.Linear or MXLinear there),
    resolving kernels for this machine (`platform` must be the layers' device's), and load
    every other tensor; returns the report of the rebuilt layers.

    Each layer entry must agree with its tensors (shapes, code range) and with the scheme it
    names in `catalog` (weight and activation keys, format, rounding, contract digest); files
    of format version 1 (no digest) are refused (registry.nn.checkpoint_file.check_header)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"load_quantized takes a torch.nn.Module, got {type(model).__name__}")
    where = check_path(path, "load_quantized")
    tensors, meta = read_file(where)
    entries = check_header(where, meta)
    catalog = catalog if catalog is not None else load_schemes()
    modules = dict(model.named_modules())
    paths: dict[int, list[str]] = {}  # a module shared under several names gets one layer
    for n, m in model.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(n)
    built: dict[str, MXLinear] = {}
    for name, entry in entries.items():
        if not name or name not in modules:
            raise CheckpointError(f"{where}: layer {name!r} of the file is not a submodule of "
                                  "the model")
        built[name] = _build(where, name, entry, modules[name], tensors, catalog, platform,
                             strict)
    placed = {alias: layer for name, layer in built.items()
              for alias in paths[id(modules[name])]}

    def in_layer(key: str) -> bool:
        return any(key.startswith(f"{n}.") for n in placed)

    expected = {k: v for k, v in model.state_dict().items() if not in_layer(k)}
    for name, layer in placed.items():
        expected.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    _check_keys(where, expected, tensors)
    for name, layer in placed.items():  # nothing is replaced before the whole file was checked
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
    model.load_state_dict({k: v for k, v in tensors.items() if not in_layer(k)}, strict=False)
    rows = [LayerRow(n, m.in_features, m.out_features, m.scheme_name, m.kernel_name,
                     m.resolution.platform, m.resolution.fallback, True,
                     m.resolution.chosen.reason if m.resolution.chosen else "")
            for n, m in placed.items()]
    return QuantizationReport(rows, applied=True, notes=[
        f"loaded from {where} (format version {meta[VERSION_KEY]})"])


def _check_keys(where: str, expected: dict[str, Tensor], tensors: dict[str, Tensor]) -> None:
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise CheckpointError(f"{where}: tensor {missing[0]!r} of the model is missing from the "
                              f"file ({len(missing)} missing)")
    unknown = [k for k in tensors if k not in expected]
    if unknown:
        raise CheckpointError(f"{where}: tensor {unknown[0]!r} of the file has no place in the "
                              f"model ({len(unknown)} such)")
    for key, want in expected.items():
        got = tensors[key]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckpointError(f"{where}: tensor {key!r}: the file holds {got.dtype} "
                                  f"{tuple(got.shape)}, the model {want.dtype} "
                                  f"{tuple(want.shape)}")


__all__ = ["CheckpointError", "FORMAT_VERSION", "load_quantized", "save_quantized"]
