"""`quantize_checkpoint(IN_DIR, OUT_DIR, scheme, format=...)`: a bf16 / fp16 Hugging Face
checkpoint quantized shard by shard, without building the model.

Why: a model too big for this machine's memory still fits one tensor at a time. Each input
shard becomes the output shard of the same name; its tensors are read lazily
(`safetensors.safe_open`), a linear weight is quantized (`kernels.mx.mx_quantize`, on the GPU
when `torch.cuda.is_available()`, else the CPU) and written in the format's layout
(`registry.checkpoints.formats`), every other tensor is copied as stored, and the shard is
streamed to disk (`registry.checkpoints.shards.ShardWriter`): peak memory is about one tensor.
Finished shards are recorded in a resume manifest (`registry.checkpoints.progress`).

Which tensors are linear weights (no model is built, so names decide, as the producers'
recipes do): a 2-D floating `*.weight` whose module is not an embedding (`embed`, `wte`,
`wpe` in its last name part), matched against `ignore` patterns with
`registry.nn.layer_patterns.LayerPatterns` (the rules of `quantize_model(ignore=...)`) plus
DEFAULT_IGNORE (lm_head, MoE routers). gpt-oss format: the 3-D expert stacks
`*.experts.gate_up_proj` / `*.experts.down_proj` ([E, K, N] in the bf16 checkpoint, stored
[E, N, K/32, 16] as gpt-oss does) and nothing else. A 3-D expert stack met with another
format is copied in float and named in the notes.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

import torch
from torch import Tensor, nn

from kernels.mx import mx_quantize
from registry.checkpoints.producer_configs import producer_config
from registry.checkpoints.progress import MANIFEST, Manifest, Progress, header_digest
from registry.checkpoints.shards import (INDEX_NAME, ShardWriter, write_index, write_json)
from registry.checkpoints.writer import check_format, prepare_out_dir
from registry.contract import Scheme
from registry.files.catalog import Catalog
from registry.nn.checkpoint_file import FORMAT_VERSION, LAYERS_KEY, VERSION_KEY, contract_digest
from registry.nn.layer_patterns import LayerPatterns
from registry.nn.layers import scheme_of

DEFAULT_IGNORE: tuple[str, ...] = ("lm_head", r"re:.*\.mlp\.gate$", r"re:.*\.router$",
                                   r"re:.*shared_expert_gate$")
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_EXPERTS = (".experts.gate_up_proj", ".experts.down_proj")
_NOT_COPIED = (".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
_PLACEHOLDER = nn.Linear(1, 1, device="meta")  # lets class-name patterns ("Linear") match


@dataclass
class Plan:
    """Per tensor what happens: quantized (its layer name) or copied."""

    quantize: dict[str, str] = field(default_factory=dict)  # tensor -> layer / stem
    kept_linear: list[str] = field(default_factory=list)  # linear modules left in float
    other_modules: list[str] = field(default_factory=list)  # embeddings etc. (gpt-oss list)
    experts_copied: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class QuantizeCheckpointReport:
    out_dir: str
    format: str
    scheme: str
    device: str
    layers: int
    shards: list[str]
    resumed: list[str]
    notes: list[str]

    def __str__(self) -> str:
        lines = [f"quantized {self.layers} layer(s) with {self.scheme} into {self.format} "
                 f"checkpoint {self.out_dir} ({len(self.shards)} shard(s) on {self.device}"
                 + (f", {len(self.resumed)} kept from an earlier run" if self.resumed else "")
                 + ")"]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


def _is_embedding(module: str) -> bool:
    last = module.rsplit(".", 1)[-1].lower()
    return "embed" in last or last in ("wte", "wpe")


def input_shards(in_dir: str) -> list[str]:
    """The input's safetensors files: the index's, else model.safetensors, else all."""
    index = os.path.join(in_dir, INDEX_NAME)
    if os.path.isfile(index):
        try:
            with open(index) as fh:
                names = sorted(set(json.load(fh)["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as e:
            raise ValueError(f"{index}: not a shard index with a weight_map ({e})") from None
        missing = [n for n in names if not os.path.isfile(os.path.join(in_dir, n))]
        if missing:
            raise ValueError(f"{os.path.join(in_dir, missing[0])}: named by {INDEX_NAME} but "
                             "missing; download every shard of the checkpoint")
        return names
    names = sorted(n for n in os.listdir(in_dir) if n.endswith(".safetensors"))
    if not names:
        raise ValueError(f"{in_dir}: no *.safetensors file; quantize-checkpoint reads a Hugging "
                         "Face checkpoint (config.json + model.safetensors, or shards and "
                         f"{INDEX_NAME})")
    return names


def read_input_config(in_dir: str) -> dict[str, Any]:
    path = os.path.join(in_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: missing; quantize-checkpoint needs the checkpoint's "
                         "config.json (the output's config is it plus quantization_config)")
    try:
        with open(path) as fh:
            cfg = json.load(fh)
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    if "quantization_config" in cfg:
        method = (cfg["quantization_config"] or {}).get("quant_method", "?") \
            if isinstance(cfg["quantization_config"], dict) else "?"
        raise ValueError(f"{path}: the checkpoint is already quantized (quant_method "
                         f"{method!r}); quantize-checkpoint reads bf16 / fp16 checkpoints: "
                         "give the unquantized original")
    return cfg


def plan_tensors(headers: dict[str, dict[str, tuple[str, tuple[int, ...]]]], fmt: str,
                 ignore: LayerPatterns) -> Plan:
    """Decide every tensor of every shard (headers: shard -> tensor -> (dtype, shape))."""
    plan = Plan()
    bad: list[str] = []
    for shard, tensors in headers.items():
        for name, (dtype, shape) in tensors.items():
            floating = dtype in ("BF16", "F16", "F32")
            if len(shape) == 3 and floating and name.endswith(_EXPERTS):
                if fmt == "gpt-oss" and ignore.first(name, _PLACEHOLDER) is None:
                    plan.quantize[name] = name
                    if shape[1] % 32:
                        bad.append(f"{name} (K={shape[1]})")
                else:
                    plan.experts_copied.append(name)
                continue
            if not (name.endswith(".weight") and len(shape) == 2 and floating):
                continue
            module = name[: -len(".weight")]
            if _is_embedding(module):
                plan.other_modules.append(module)
            elif fmt == "gpt-oss" or ignore.first(module, _PLACEHOLDER) is not None:
                plan.kept_linear.append(module)
            else:
                plan.quantize[name] = module
                if shape[1] % 32:
                    bad.append(f"{name} (in_features {shape[1]})")
    if bad:
        bad.sort()
        raise ValueError(f"cannot quantize {', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}"
                         ": in_features must be a multiple of the MX block 32; add these layers "
                         "to --ignore")
    if not plan.quantize:
        what = "expert stacks (*.experts.gate_up_proj / down_proj, 3-D)" if fmt == "gpt-oss" \
            else "2-D linear *.weight tensors"
        raise ValueError(f"no tensor to quantize: the checkpoint has no floating {what} left "
                         "after --ignore; check the checkpoint and the ignore patterns")
    if plan.experts_copied:
        plan.notes.append(f"{len(plan.experts_copied)} 3-D expert stack(s) (e.g. "
                          f"{plan.experts_copied[0]}) were copied unquantized: the {fmt} "
                          "format stores per-expert linear layers; use --format gpt-oss")
    return plan


def _read_headers(in_dir: str, shards: list[str]) -> dict[str, dict[str, tuple[str, tuple]]]:
    from safetensors import safe_open

    out = {}
    for shard in shards:
        path = os.path.join(in_dir, shard)
        try:
            with safe_open(path, framework="pt", device="cpu") as f:
                out[shard] = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape()))
                              for k in f.keys()}
        except Exception as e:  # safetensors raises its own error types
            raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
    return out


def _quantize_tensor(fmt: str, layer: str, t: Tensor, scheme: Scheme, device: torch.device,
                     experts: bool) -> dict[str, Tensor]:
    """The stored tensors of one quantized weight (on the CPU)."""
    from registry.checkpoints.formats import get_format

    w = t.to(device)
    if experts:
        w = w.transpose(-1, -2).contiguous()  # gpt-oss bf16 [E, K, N] -> [E, N, K]
    key = scheme.contract.weight
    mx = mx_quantize(w, key.format, rounding=key.scale.rounding).to("cpu")
    if fmt == "registry":
        return {f"{layer}.weight": mx.data, f"{layer}.weight_scale": mx.scales}
    return get_format(fmt).from_mx(layer, mx, scheme.contract)


def _registry_entries(plan: Plan, headers: dict, scheme: Scheme) -> dict[str, dict[str, Any]]:
    """The `registry.layers` entries (registry.nn.checkpoint_file.layer_meta's fields)."""
    from kernels.spec.formats import DEFAULT_LAYOUT

    c = scheme.contract
    weight, act = str(c.weight), None if c.activation is None else str(c.activation)
    names = {n for t in headers.values() for n in t}
    shapes = {n: s for t in headers.values() for n, (_, s) in t.items()}
    return {layer: {"scheme": scheme.name, "weight": weight, "activation": act,
                    "format": c.weight.format, "rounding": c.weight.scale.rounding,
                    "layout": DEFAULT_LAYOUT[c.weight.format], "shape": list(shapes[t]),
                    "bias": f"{layer}.bias" in names,
                    "contract_digest": contract_digest(weight, act)}
            for t, layer in sorted(plan.quantize.items())}


def quantize_checkpoint(in_dir: Union[str, "os.PathLike[str]"],
                        out_dir: Union[str, "os.PathLike[str]"], scheme: Union[Scheme, str], *,
                        format: str = "registry", ignore: Iterable[str] = (),
                        overwrite: bool = False, device: Union[str, torch.device, None] = None,
                        progress: bool = True, catalog: Optional[Catalog] = None
                        ) -> QuantizeCheckpointReport:
    """Quantize checkpoint `in_dir` into `out_dir` (module docstring); resumes an interrupted
    run of the same job, refuses a non-empty `out_dir` otherwise unless `overwrite`."""
    in_dir, out_dir = os.fspath(in_dir), os.fspath(out_dir)
    check_format(format)
    if not os.path.isdir(in_dir):
        raise ValueError(f"{in_dir}: not a directory; give the checkpoint's directory")
    if os.path.realpath(in_dir) == os.path.realpath(out_dir):
        raise ValueError(f"{out_dir}: is the input directory; write to another directory")
    scheme = scheme_of(scheme, catalog)
    act = scheme.contract.activation
    if act is not None and act.static:
        raise ValueError(f"scheme {scheme.name}: activation {act} needs a calibrated input "
                         "scale per layer, which quantize-checkpoint cannot measure without "
                         "running the model; use quantize_model(..., calibration=...) and "
                         "save_checkpoint")
    user_ignore = list(ignore)
    patterns = LayerPatterns("ignore", DEFAULT_IGNORE + tuple(user_ignore))
    config = read_input_config(in_dir)
    shards = input_shards(in_dir)
    headers = _read_headers(in_dir, shards)
    plan = plan_tensors(headers, format, patterns)
    plan.notes += [f"--ignore entry {p!r} matched no tensor" for p in user_ignore
                   if p not in patterns.used]
    layers = sorted(set(plan.quantize.values()))
    meta: dict[str, str] = {"format": "pt"}
    if format == "registry":
        entries = _registry_entries(plan, headers, scheme)
        quant: dict[str, Any] = {"quant_method": "registry", "format_version": FORMAT_VERSION,
                                 "layers": entries}
        meta.update({VERSION_KEY: str(FORMAT_VERSION), LAYERS_KEY: json.dumps(entries)})
    else:
        kept = sorted(plan.kept_linear + (plan.other_modules if format == "gpt-oss" else []))
        quant, notes = producer_config(format, {n: scheme for n in layers}, kept)
        plan.notes += notes
    job = {"in_dir": os.path.realpath(in_dir), "scheme": scheme.name,
           "contract": str(scheme.contract), "format": format, "ignore": user_ignore,
           "inputs": {s: {"size": os.path.getsize(os.path.join(in_dir, s)),
                          "header_sha256": header_digest(os.path.join(in_dir, s))}
                      for s in shards}}
    manifest = Manifest(out_dir, job)
    resumed_notes: list[str] = []
    if os.path.isdir(out_dir) and Manifest.exists(out_dir) and not overwrite:
        resumed_notes = manifest.resume()
    else:
        prepare_out_dir(out_dir, overwrite)
        manifest.remove()
    manifest.save()
    dev = torch.device(device) if device is not None else \
        torch.device("cuda" if torch.cuda.is_available() else "cpu")
    total = sum(os.path.getsize(os.path.join(in_dir, s)) for s in shards)
    bar = Progress(total, len(shards), progress)
    resumed = []
    for shard in shards:
        bar.start_shard(shard)
        if shard in manifest.done:
            resumed.append(shard)
            bar.advance(os.path.getsize(os.path.join(in_dir, shard)))
            bar.end_shard("(kept from an earlier run)")
            continue
        _quantize_shard(in_dir, out_dir, shard, plan, format, scheme, dev, meta, manifest, bar)
        bar.end_shard()
    weight_map = {n: s for s, e in manifest.done.items() for n in e["tensors"]}
    if len(shards) > 1:
        write_index(out_dir, weight_map, sum(sum(e["tensors"].values())
                                             for e in manifest.done.values()))
    write_json(os.path.join(out_dir, "config.json"), {**config, "quantization_config": quant})
    if format == "auto-round":
        write_json(os.path.join(out_dir, "quantization_config.json"), quant)
    plan.notes += _copy_side_files(in_dir, out_dir, set(shards))
    manifest.remove()
    return QuantizeCheckpointReport(out_dir, format, scheme.name, str(dev), len(layers),
                                    list(shards), resumed, resumed_notes + plan.notes)


def _quantize_shard(in_dir: str, out_dir: str, shard: str, plan: Plan, fmt: str,
                    scheme: Scheme, dev: torch.device, meta: dict[str, str],
                    manifest: Manifest, bar: Progress) -> None:
    from safetensors import safe_open

    writer = ShardWriter(os.path.join(out_dir, shard), meta)
    sizes: dict[str, int] = {}
    try:
        with safe_open(os.path.join(in_dir, shard), framework="pt", device="cpu") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                layer = plan.quantize.get(name)
                if layer is None:
                    out = {name: t}
                else:
                    try:
                        out = _quantize_tensor(fmt, layer, t, scheme, dev,
                                               name.endswith(_EXPERTS))
                    except ValueError as e:
                        raise ValueError(f"{shard}: tensor {name!r}: {e}") from None
                for key, value in out.items():
                    sizes[key] = writer.add(key, value)
                bar.advance(t.numel() * t.element_size())
                del t, out
        size, digest = writer.finish()
    except BaseException:
        writer.abort()
        raise
    manifest.finished(shard, size, digest, sizes)


def _copy_side_files(in_dir: str, out_dir: str, shards: set[str]) -> list[str]:
    """Tokenizer, generation config and other small files copied; other weights named."""
    skipped = []
    for name in sorted(os.listdir(in_dir)):
        src = os.path.join(in_dir, name)
        if not os.path.isfile(src) or name in shards or name in ("config.json", INDEX_NAME,
                                                                   MANIFEST):
            continue
        if name.endswith(_NOT_COPIED) or name.endswith(".safetensors"):
            skipped.append(name)
            continue
        if not os.path.exists(os.path.join(out_dir, name)):
            shutil.copyfile(src, os.path.join(out_dir, name))
    return [f"not copied (other weight files): {', '.join(skipped)}"] if skipped else []


__all__ = ["DEFAULT_IGNORE", "QuantizeCheckpointReport", "input_shards", "plan_tensors",
           "quantize_checkpoint"]
