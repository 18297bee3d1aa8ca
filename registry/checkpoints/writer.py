"""`save_checkpoint(model, DIR, format=...)`: a quantized model as a checkpoint directory in a
producer's own conventions (config.json + sharded safetensors + index), so the producer's
loader, and the engines using it, read it back unchanged.

Why a directory writer beside `registry.nn.checkpoint.save_quantized` (one file, our format):
engines load directories of shards whose config.json names the producer. The MX bytes are
the layers' own (`MXLinear.weight_mx`, `MXGroupedExperts.weight`), renamed and repacked by the
producer's layout (`registry.checkpoints.formats.<fmt>.from_mx`): never re-quantized. The
config is `registry.checkpoints.producer_configs`; a scheme the format cannot express is
refused before anything is written.

Formats: "compressed-tensors", "quark", "auto-round", "gpt-oss" (expert stacks only: an
`MXGroupedExperts` at module path P is stored as `P_blocks` / `P_scales`; linear layers must be
left unquantized), and "registry": the model's state dict as `save_quantized` stores it, each
shard carrying the `registry.*` metadata (a one-shard directory is loadable with
`registry.load_quantized(model, DIR/model.safetensors)`).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Union

from torch import Tensor, nn

from registry.checkpoints.producer_configs import WRITERS, producer_config
from registry.checkpoints.shards import (INDEX_NAME, ShardWriter, shard_names, tensor_nbytes,
                                         write_index, write_json)
from registry.nn.checkpoint_file import FORMAT_VERSION, LAYERS_KEY, VERSION_KEY, layer_meta
from registry.nn.layers import MXGroupedExperts, MXLinear

PathLike = Union[str, "os.PathLike[str]"]
FORMAT_NAMES: tuple[str, ...] = WRITERS + ("registry",)
DEFAULT_MAX_SHARD_BYTES = 5 * 1024 ** 3  # transformers' save_pretrained default ("5GB")
#: Files a checkpoint writer owns in its output directory (removed by overwrite=True).
OWNED_SUFFIXES = (".safetensors", ".tmp")
OWNED_NAMES = ("config.json", INDEX_NAME, "quantization_config.json")


@dataclass
class WriteReport:
    """What was written: the directory, its files, the quantized layers, and notes."""

    out_dir: str
    format: str
    files: list[str]
    layers: list[str]
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"wrote {self.format} checkpoint {self.out_dir}: {len(self.layers)} quantized "
                 f"layer(s), {len(self.files)} file(s)"]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def check_format(fmt: Any) -> str:
    if fmt not in FORMAT_NAMES:
        raise ValueError(f"unknown checkpoint format {fmt!r}; choose one of "
                         f"{', '.join(FORMAT_NAMES)}")
    return fmt


def prepare_out_dir(out_dir: PathLike, overwrite: bool, keep: tuple[str, ...] = ()) -> str:
    """`out_dir` created (parents too), or refused when it holds files, unless `overwrite`:
    then the files a checkpoint writer owns are removed (others are left); `keep` names files
    the caller handles itself (the resume manifest)."""
    path = os.fspath(out_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{path}: exists and is not a directory; give a directory path")
    if not os.path.isdir(path):
        os.makedirs(path)
        return path
    held = sorted(n for n in os.listdir(path) if n not in keep)
    if held and not overwrite:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise ValueError(f"{path}: already holds {len(held)} file(s) ({shown}); refusing to "
                         "overwrite: choose an empty directory or pass --overwrite "
                         "(overwrite=True)")
    for name in held:
        if name in OWNED_NAMES or name.endswith(OWNED_SUFFIXES):
            os.remove(os.path.join(path, name))
    return path


def model_config(model: nn.Module, config: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The config.json body: `config` if given, else a transformers model's `config.to_dict()`,
    else {} (a plain module: only the quantization_config is written)."""
    if config is not None:
        return dict(config)
    cfg = getattr(model, "config", None)
    to_dict = getattr(cfg, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else {}


class _Named:
    """A scheme-like (name + contract) for an MXGroupedExperts built from a bare contract."""

    def __init__(self, name: str, contract: Any) -> None:
        self.name, self.contract = name, contract


def _mx_modules(model: nn.Module) -> dict[str, tuple[Any, Any, bool]]:
    """{module path: (MXTensor, scheme, is_experts)} of every MX module of `model`."""
    out: dict[str, tuple[Any, Any, bool]] = {}
    for name, m in model.named_modules():
        if isinstance(m, MXLinear):
            out[name] = (m.weight_mx, m.scheme, False)
        elif isinstance(m, MXGroupedExperts):
            scheme = getattr(m, "_scheme", None)
            if not hasattr(scheme, "contract"):
                scheme = _Named(str(m.contract), m.contract)
            out[name] = (m.weight, scheme, True)
    return out


def _stored(model: nn.Module, mx_modules: Mapping[str, tuple[Any, Any, bool]], fmt: str
            ) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) of the checkpoint in state-dict order; MX weights in `fmt`'s layout."""
    from registry.checkpoints.formats import get_format

    layout = None if fmt == "registry" else get_format(fmt)
    mx_keys = {}
    for name, (_, _, experts) in mx_modules.items():
        pre = f"{name}." if name else ""
        for key in ((pre + "weight_data", pre + "weight_scales") if experts
                    else (pre + "weight", pre + "weight_scale")):
            mx_keys[key] = name
    written: set[str] = set()
    for key, t in model.state_dict().items():
        if t.device.type == "meta":
            raise ValueError(f"tensor {key!r} is on the meta device (no values to save); "
                             "materialize or load it before saving")
        owner = mx_keys.get(key)
        if layout is None or owner is None:
            yield key, t
            continue
        if owner in written:
            continue
        written.add(owner)
        mx, scheme, _ = mx_modules[owner]
        yield from layout.from_mx(owner, mx.to("cpu"), scheme.contract).items()


def save_checkpoint(model: nn.Module, out_dir: PathLike, format: str = "registry", *,
                    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
                    config: Optional[Mapping[str, Any]] = None,
                    overwrite: bool = False) -> WriteReport:
    """Write `model` (holding MXLinear / MXGroupedExperts layers) to directory `out_dir` as a
    `format` checkpoint (module docstring); shards of at most `max_shard_bytes` of tensor data
    (a bigger tensor gets a shard of its own). Refuses a non-empty `out_dir` unless
    `overwrite`. `config`: the config.json body (default: the model's HF config)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"save_checkpoint takes a torch.nn.Module, got {type(model).__name__}")
    check_format(format)
    if not isinstance(max_shard_bytes, int) or max_shard_bytes <= 0:
        raise ValueError(f"max_shard_bytes must be a positive integer, got {max_shard_bytes!r}")
    mx_modules = _mx_modules(model)
    if not mx_modules:
        raise ValueError("the model has no MXLinear / MXGroupedExperts layer; quantize it first "
                         "(registry.quantize_model)")
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    notes: list[str] = []
    body = model_config(model, config)
    meta: dict[str, str] = {"format": "pt"}
    if format == "registry":
        entries = {n: layer_meta(m) for n, m in model.named_modules() if isinstance(m, MXLinear)}
        meta.update({VERSION_KEY: str(FORMAT_VERSION), LAYERS_KEY: json.dumps(entries)})
        quant = {"quant_method": "registry", "format_version": FORMAT_VERSION,
                 "layers": entries}
        experts = [n for n, v in mx_modules.items() if v[2]]
        if experts:
            notes.append(f"expert stacks ({', '.join(experts[:3])}) are stored as their "
                         "weight_data / weight_scales buffers; load_quantized rebuilds only "
                         "MXLinear layers")
    else:
        if format == "gpt-oss":
            linear_mx = [n for n, v in mx_modules.items() if not v[2]]
            if linear_mx:
                raise ValueError(f"{linear_mx[0]}: gpt-oss checkpoints quantize only expert "
                                 "stacks (MXGroupedExperts); leave linear layers unquantized or "
                                 "choose another --format")
        quant, notes = producer_config(format, {n: v[1] for n, v in mx_modules.items()},
                                       sorted(linears))
    path = prepare_out_dir(out_dir, overwrite)
    files = _write_shards(path, _stored(model, mx_modules, format), max_shard_bytes, meta)
    write_json(os.path.join(path, "config.json"), {**body, "quantization_config": quant})
    files.append("config.json")
    if format == "auto-round":  # auto-round writes its config twice, as here
        write_json(os.path.join(path, "quantization_config.json"), quant)
        files.append("quantization_config.json")
    return WriteReport(path, format, files, sorted(mx_modules), notes)


def _write_shards(path: str, tensors: Iterator[tuple[str, Tensor]], max_bytes: int,
                  meta: Mapping[str, str]) -> list[str]:
    """Stream `tensors` into shards of at most `max_bytes` of data; the files written."""
    temps: list[tuple[str, dict[str, int]]] = []
    writer: Optional[ShardWriter] = None
    sizes: dict[str, int] = {}
    try:
        for name, t in tensors:
            n = tensor_nbytes(t)
            if writer is None or (writer.offset and writer.offset + n > max_bytes):
                if writer is not None:
                    writer.finish()
                tmp = os.path.join(path, f".shard-{len(temps) + 1:05d}.safetensors")
                writer, sizes = ShardWriter(tmp, meta), {}
                temps.append((tmp, sizes))
            sizes[name] = writer.add(name, t)
        if writer is None:
            raise ValueError("the model has no tensors to save")
        writer.finish()
    except BaseException:
        if writer is not None:
            writer.abort()
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    names = shard_names(len(temps))
    weight_map, total = {}, 0
    for (tmp, sizes), final in zip(temps, names):
        os.replace(tmp, os.path.join(path, final))
        weight_map.update({k: final for k in sizes})
        total += sum(sizes.values())
    if len(names) > 1:
        write_index(path, weight_map, total)
        names.append(INDEX_NAME)
    return names


__all__ = ["DEFAULT_MAX_SHARD_BYTES", "FORMAT_NAMES", "WriteReport", "check_format",
           "model_config", "prepare_out_dir", "save_checkpoint"]
