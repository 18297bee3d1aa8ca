"""Which stored tensors are which layer, and what the config says each layer is.

Why: `registry inspect` and `load_checkpoint` decide the same thing: for every quantized layer
stored in a checkpoint, the config entry that claims it (`registry.configs.hf_config`, the
producers' own claiming rules) and the scheme it maps to; for every float 2-D `*.weight`, whether
the config says it should have been quantized. Nothing here reads tensor data (headers only).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from registry.checkpoints.formats import CheckpointFormat, LayerTensors, format_for_quant_method
from registry.checkpoints.reader import CheckpointReader, TensorInfo
from registry.configs.hf_config import ConfigGroup, group_for_module, schemes_from_config
from registry.contract import Scheme
from registry.files.catalog import Catalog

FLOAT_DTYPES = ("F32", "F16", "BF16")
TypeOf = Callable[[str], Optional[str]]


@dataclass
class StoredLayer:
    """One layer of the checkpoint: its name, kind ("quantized" / "float"), the config entry
    deciding it (None: none claims it), its scheme (mapped entries only) and stored tensors."""

    name: str
    kind: str
    group: Optional[ConfigGroup]
    tensors: list[TensorInfo] = field(default_factory=list)
    names: Optional[LayerTensors] = None
    problem: Optional[str] = None  # why it cannot be read as its config says (one line)

    @property
    def scheme(self) -> Optional[Scheme]:
        return None if self.group is None else self.group.scheme

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


@dataclass
class CheckpointPlan:
    """A checkpoint read as layers: the format, the config groups, the layers, the rest."""

    reader: CheckpointReader
    fmt: CheckpointFormat
    groups: list[ConfigGroup]
    layers: list[StoredLayer]
    other: list[TensorInfo]  # tensors of no layer (norms, embeddings' extras, ...)


def guess_type(name: str) -> str:
    """The module class a checkpoint name most likely belongs to, for the producers' target
    rules when no model is at hand ("Embedding" for *embed* names, else "Linear")."""
    return "Embedding" if "embed" in name.rsplit(".", 1)[-1] else "Linear"


def decide(groups: list[ConfigGroup], name: str, type_name: str) -> Optional[ConfigGroup]:
    """The config entry deciding module `name`; for an expert stem ("...experts.gate_up_proj")
    the stem first, then its module ("...experts")."""
    group = group_for_module(groups, name, type_name)
    if group is None and "." in name:
        group = group_for_module(groups, name.rsplit(".", 1)[0], type_name)
    return group


def plan_checkpoint(reader: CheckpointReader, catalog: Optional[Catalog] = None,
                    type_of: Optional[TypeOf] = None) -> CheckpointPlan:
    """Read `reader`'s config and headers into a CheckpointPlan. `type_of(name)`: the module
    class name of a layer (a model at hand), else guess_type."""
    config = reader.config()
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        raise ValueError(f"{reader.config_path}: no quantization_config object; this is not a "
                         "quantized checkpoint (load it with transformers, or quantize it with "
                         "`registry quantize-checkpoint`)")
    fmt = format_for_quant_method(qc.get("quant_method"))
    groups = schemes_from_config(reader.config_path, catalog)
    names = reader.names()
    claimed: set[str] = set()
    layers: list[StoredLayer] = []
    for layer in fmt.layers(names):
        tensors = [reader.info(n) for n in fmt.claimed(layer) if n in reader]
        claimed.update(t.name for t in tensors)
        type_name = (type_of(layer) if type_of else None) or guess_type(layer)
        group = decide(groups, layer, type_name)
        entry = StoredLayer(layer, "quantized", group, tensors)
        if group is not None and group.scheme is not None:
            try:
                entry.names = fmt.tensor_names(layer, group.scheme.contract.weight.format)
            except ValueError as e:
                entry.problem = str(e)
        layers.append(entry)
    for name in names:
        if name in claimed or not name.endswith(".weight"):
            continue
        info = reader.info(name)
        if info.dtype not in FLOAT_DTYPES or len(info.shape) != 2:
            continue
        layer = name[: -len(".weight")]
        type_name = (type_of(layer) if type_of else None) or guess_type(layer)
        claimed.add(name)
        group = decide(groups, layer, type_name)
        if group is not None and group.kind == "global" and type_name != "Linear":
            group = None  # a producer's global spec quantizes linear layers only
        layers.append(StoredLayer(layer, "float", group, [info]))
    by_layer = {entry.name: entry for entry in layers}
    other = []
    for name in names:
        if name in claimed:
            continue
        owner = by_layer.get(name.rsplit(".", 1)[0])
        if owner is not None and name.rsplit(".", 1)[-1] in ("bias", "input_scale"):
            owner.tensors.append(reader.info(name))
        else:
            other.append(reader.info(name))
    layers.sort(key=lambda e: e.name)
    return CheckpointPlan(reader, fmt, groups, layers, other)


__all__ = ["CheckpointPlan", "StoredLayer", "decide", "guess_type", "plan_checkpoint"]
