"""Save and load models holding MXLinear layers as one safetensors file.

Tensors: the model's whole `state_dict()`: per MX layer `<name>.weight` (element codes, uint8, in
the layout the metadata names), `<name>.weight_scale` (E8M0 bytes, uint8), `<name>.bias` and, for
static activation keys, `<name>.input_scale` (fp32, 0-dim); every other parameter and buffer as
it is. Metadata (strings): `registry.format_version`, and `registry.layers`, a JSON object
{layer: {scheme, weight, activation, format, rounding, layout, shape, bias}}, plus any user
metadata. Kernels are not stored: `load_quantized` resolves them again for the machine it runs
on. Every mismatch is a one-line error naming the tensor or layer; nothing is changed in the
model before the whole file has been checked.
"""
from __future__ import annotations

import json
import os
from typing import Any, Mapping, Optional, Union

import torch
from torch import Tensor, nn

from kernels.mx import MXTensor
from registry.catalog import Catalog, load_schemes
from registry.contract import Scheme
from registry.layers import MXLinear
from registry.platform import Platform
from registry.quantize import LayerRow, QuantizationReport

FORMAT_VERSION = 1
VERSION_KEY = "registry.format_version"
LAYERS_KEY = "registry.layers"
LAYER_FIELDS = ("scheme", "weight", "activation", "format", "rounding", "layout", "shape", "bias")
PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError):
    """A quantized checkpoint does not fit the model (or is not one)."""


def _layer_meta(layer: MXLinear) -> dict[str, Any]:
    act = layer.scheme.contract.activation
    return {"scheme": layer.scheme_name, "weight": str(layer.scheme.contract.weight),
            "activation": None if act is None else str(act), "format": layer.weight_format,
            "rounding": layer.weight_rounding, "layout": layer.weight_layout,
            "shape": [layer.out_features, layer.in_features], "bias": layer.bias is not None}


def save_quantized(model: nn.Module, path: PathLike,
                   metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write `model`'s state (codes and scale bytes as stored) and its layers' schemes to `path`."""
    from safetensors.torch import save_file

    if not isinstance(model, nn.Module):
        raise TypeError(f"save_quantized takes a torch.nn.Module, got {type(model).__name__}")
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
            LAYERS_KEY: json.dumps({n: _layer_meta(m) for n, m in layers.items()})}
    save_file(tensors, os.fspath(path), metadata=meta)


def _read(path: PathLike) -> tuple[dict[str, Tensor], dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    path = os.fspath(path)
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}
    except SafetensorError as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None


def _check_header(path: PathLike, meta: dict[str, str]) -> dict[str, dict[str, Any]]:
    where = os.fspath(path)
    if VERSION_KEY not in meta or LAYERS_KEY not in meta:
        raise CheckpointError(f"{where}: no '{VERSION_KEY}' / '{LAYERS_KEY}' metadata: not a "
                              "registry quantized checkpoint (write it with save_quantized)")
    try:
        version = int(meta[VERSION_KEY])
    except ValueError:
        raise CheckpointError(f"{where}: {VERSION_KEY} is {meta[VERSION_KEY]!r}, not an "
                              "integer") from None
    if version < 1:
        raise CheckpointError(f"{where}: {VERSION_KEY} is {version}; format versions start at 1: "
                              "the file was not written by save_quantized")
    if version > FORMAT_VERSION:
        raise CheckpointError(f"{where}: format version {version} is newer than this registry "
                              f"reads ({FORMAT_VERSION}); upgrade the registry package")
    try:
        layers = json.loads(meta[LAYERS_KEY])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{where}: {LAYERS_KEY} is not valid JSON ({e})") from None
    if not isinstance(layers, dict) or not layers:
        raise CheckpointError(f"{where}: {LAYERS_KEY} must be a non-empty JSON object of layers "
                              "(save_quantized writes one entry per MXLinear)")
    for name, entry in layers.items():
        lacking = [f for f in LAYER_FIELDS if not isinstance(entry, dict) or f not in entry]
        if lacking:
            raise CheckpointError(f"{where}: layer {name}: metadata lacks {', '.join(lacking)}")
        _check_entry_types(where, name, entry)
    return layers


def _check_entry_types(where: str, name: str, entry: dict[str, Any]) -> None:
    """Each metadata field of a layer has the JSON type save_quantized writes."""
    def bad(field: str, want: str) -> CheckpointError:
        return CheckpointError(f"{where}: layer {name}: metadata field {field} is "
                               f"{entry[field]!r}, expected {want}")

    for field in ("scheme", "weight", "format", "rounding"):
        if not isinstance(entry[field], str):
            raise bad(field, "a string")
    for field in ("activation", "layout"):
        if entry[field] is not None and not isinstance(entry[field], str):
            raise bad(field, "a string or null")
    shape = entry["shape"]
    if not (isinstance(shape, list) and len(shape) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape)):
        raise bad("shape", "[out_features, in_features], two positive integers")
    if not isinstance(entry["bias"], bool):
        raise bad("bias", "true or false")


def _tensor(tensors: dict[str, Tensor], key: str, dtype: Optional[torch.dtype],
            layer: str, why: str) -> Tensor:
    if key not in tensors:
        raise CheckpointError(f"tensor {key!r} is missing from the file ({why} of layer {layer})")
    t = tensors[key]
    if dtype is not None and t.dtype != dtype:
        raise CheckpointError(f"tensor {key!r} is {t.dtype}, expected {dtype} ({why} of layer "
                              f"{layer})")
    return t


def _scheme_for(name: str, entry: dict[str, Any], catalog: Catalog) -> Scheme:
    try:
        scheme = catalog.get(entry["scheme"])
    except KeyError as e:
        raise CheckpointError(f"layer {name}: {e}") from None
    contract = scheme.contract
    act = None if contract.activation is None else str(contract.activation)
    stored = {"weight": entry["weight"], "activation": entry["activation"],
              "format": entry["format"], "rounding": entry["rounding"]}
    wants = {"weight": str(contract.weight), "activation": act,
             "format": contract.weight.format, "rounding": contract.weight.scale.rounding}
    for field, value in stored.items():
        if value != wants[field]:
            raise CheckpointError(
                f"layer {name}: the file's {field} {value!r} differs from scheme "
                f"{scheme.name}'s contract ({wants[field]!r}); the scheme changed since the "
                "file was written: load with the scheme files it was written with")
    return scheme


def _build(name: str, entry: dict[str, Any], module: nn.Module, tensors: dict[str, Tensor],
           catalog: Catalog, platform: Union[str, Platform, None], strict: bool) -> MXLinear:
    if not isinstance(module, (nn.Linear, MXLinear)):
        raise CheckpointError(f"layer {name}: the model holds a {type(module).__name__} there, "
                              "not an nn.Linear / MXLinear")
    shape = [module.out_features, module.in_features]
    if entry["shape"] != shape:
        raise CheckpointError(f"layer {name}: the file's weight is {entry['shape']} [out, in] but "
                              f"the model's layer is {shape}")
    if entry["bias"] != (module.bias is not None):
        file_has, model_has = ("a bias", "none") if entry["bias"] else ("no bias", "one")
        raise CheckpointError(f"layer {name}: the file has {file_has} but the model's layer "
                              f"has {model_has}")
    scheme = _scheme_for(name, entry, catalog)
    device = module.weight.device
    data = _tensor(tensors, f"{name}.weight", torch.uint8, name, "element codes")
    scales = _tensor(tensors, f"{name}.weight_scale", torch.uint8, name, "E8M0 scales")
    try:
        mx = MXTensor(data, scales, entry["format"], entry["rounding"], torch.Size(shape),
                      entry["layout"]).to(device)
    except ValueError as e:
        raise CheckpointError(f"layer {name}: {e}") from None
    bias = None
    if entry["bias"]:
        bias = _tensor(tensors, f"{name}.bias", None, name, "bias").to(device)
    act = scheme.contract.activation
    act_scale = None
    if act is not None and act.static:
        act_scale = _tensor(tensors, f"{name}.input_scale", torch.float32, name,
                            f"static input scale ({act})").to(device)
    elif f"{name}.input_scale" in tensors:
        raise CheckpointError(f"tensor '{name}.input_scale' is in the file but scheme "
                              f"{scheme.name} has no static activation scale")
    act_dtype = module.act_dtype if isinstance(module, MXLinear) else module.weight.dtype
    try:
        return MXLinear(mx, scheme, bias, platform=platform, strict=strict, act_scale=act_scale,
                        act_dtype=act_dtype)
    except ValueError as e:
        raise CheckpointError(f"layer {name}: {e}") from None


def load_quantized(model: nn.Module, path: PathLike, *,
                   platform: Union[str, Platform, None] = None, strict: bool = False,
                   catalog: Optional[Catalog] = None) -> QuantizationReport:
    """Rebuild the file's MX layers in `model` (a skeleton with nn.Linear or MXLinear there),
    resolving kernels for this machine (`platform` must be the layers' device's), and load
    every other tensor; returns the report of the rebuilt layers."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"load_quantized takes a torch.nn.Module, got {type(model).__name__}")
    tensors, meta = _read(path)
    entries = _check_header(path, meta)
    catalog = catalog if catalog is not None else load_schemes()
    modules = dict(model.named_modules())
    paths: dict[int, list[str]] = {}  # a module shared under several names gets one layer
    for n, m in model.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(n)
    built: dict[str, MXLinear] = {}
    for name, entry in entries.items():
        if not name or name not in modules:
            raise CheckpointError(f"layer {name!r} of the file is not a submodule of the model")
        built[name] = _build(name, entry, modules[name], tensors, catalog, platform, strict)
    placed = {alias: layer for name, layer in built.items()
              for alias in paths[id(modules[name])]}

    def in_layer(key: str) -> bool:
        return any(key.startswith(f"{n}.") for n in placed)

    expected = {k: v for k, v in model.state_dict().items() if not in_layer(k)}
    for name, layer in placed.items():
        expected.update({f"{name}.{k}": v for k, v in layer.state_dict().items()})
    _check_keys(expected, tensors)
    for name, layer in placed.items():  # nothing is replaced before the whole file was checked
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
    model.load_state_dict({k: v for k, v in tensors.items() if not in_layer(k)}, strict=False)
    rows = [LayerRow(n, m.in_features, m.out_features, m.scheme_name, m.kernel_name,
                     m.resolution.platform, m.resolution.fallback, True,
                     m.resolution.chosen.reason if m.resolution.chosen else "")
            for n, m in placed.items()]
    return QuantizationReport(rows, applied=True, notes=[
        f"loaded from {os.fspath(path)} (format version {meta[VERSION_KEY]})"])


def _check_keys(expected: dict[str, Tensor], tensors: dict[str, Tensor]) -> None:
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise CheckpointError(f"tensor {missing[0]!r} of the model is missing from the file "
                              f"({len(missing)} missing)")
    unknown = [k for k in tensors if k not in expected]
    if unknown:
        raise CheckpointError(f"tensor {unknown[0]!r} of the file has no place in the model "
                              f"({len(unknown)} such)")
    for key, want in expected.items():
        got = tensors[key]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckpointError(f"tensor {key!r}: the file holds {got.dtype} "
                                  f"{tuple(got.shape)}, the model {want.dtype} "
                                  f"{tuple(want.shape)}")


__all__ = ["CheckpointError", "FORMAT_VERSION", "load_quantized", "save_quantized"]
