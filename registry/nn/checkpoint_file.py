"""Reading a quantized checkpoint's file and header, before any tensor meets the model.

Split from `registry.nn.checkpoint` (save / load) so the file-level checks live in one place:
- the path: a directory, a missing file or something that is not a file is named as such
  (safetensors alone says `OSError: No such device` without the path);
- the safetensors header is read again with the strict JSON reader (`registry.configs.json_lines`):
  a key written twice (a tensor, or `registry.layers` itself in `__metadata__`) is refused,
  where safetensors silently keeps the last one; so is a duplicate inside `registry.layers`;
- each layer entry: every field of the JSON type `save_quantized` writes, and its
  `contract_digest` equal to the digest of its own `weight` / `activation` fields.

The contract digest: the first 16 hex digits of sha256 over `W=<weight key> A=<activation key
| none>`, the keys in their short stable form (`QuantKey.__str__`, e.g.
`mxfp4:e8m0/b32:even:dynamic`). It is not a signature: it makes a hand edit of some fields (the
scheme and the activation together turn a W4A4 file into a W4A16 one) a load error instead of a
silently different model.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Optional, Union

from torch import Tensor

from registry.configs.json_lines import JsonProblem, read_json_text
from registry.nn.layers import MXLinear

#: 2: layer entries carry `contract_digest`. Version 1 files are refused (see `check_header`).
FORMAT_VERSION = 2
VERSION_KEY = "registry.format_version"
LAYERS_KEY = "registry.layers"
LAYER_FIELDS = ("scheme", "weight", "activation", "format", "rounding", "layout", "shape", "bias",
                "contract_digest")
MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the header's length
PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError):
    """A quantized checkpoint does not fit the model (or is not one)."""


def contract_digest(weight: str, activation: Optional[str]) -> str:
    """The digest of a contract given by its keys' short forms (module docstring)."""
    text = f"W={weight} A={'none' if activation is None else activation}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def layer_meta(layer: MXLinear) -> dict[str, Any]:
    """The `registry.layers` entry `save_quantized` writes for one layer."""
    contract = layer.scheme.contract
    weight = str(contract.weight)
    act = None if contract.activation is None else str(contract.activation)
    return {"scheme": layer.scheme_name, "weight": weight, "activation": act,
            "format": layer.weight_format, "rounding": layer.weight_rounding,
            "layout": layer.weight_layout, "shape": [layer.out_features, layer.in_features],
            "bias": layer.bias is not None, "contract_digest": contract_digest(weight, act)}


def check_path(path: Any, verb: str) -> str:
    """`path` as a string; a TypeError when it is not a path (save and load alike)."""
    try:
        return os.fspath(path)
    except TypeError:
        raise TypeError(f"{verb} takes the path of a .safetensors file, got "
                        f"{type(path).__name__}") from None


def read_file(path: str) -> tuple[dict[str, Tensor], dict[str, str]]:
    """All tensors and the metadata of the safetensors file at `path`; CheckpointError (one
    line naming the path) when it is not a readable safetensors file with a strict header."""
    from safetensors import SafetensorError, safe_open

    want = "expected a .safetensors file written by save_quantized"
    if os.path.isdir(path):
        held = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        hint = f" (it holds {', '.join(held[:3])}{', ...' if len(held) > 3 else ''})" if held \
            else ""
        raise CheckpointError(f"{path}: is a directory{hint}; {want}")
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no such file; {want}")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: not a regular file; {want}")
    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}
    except SafetensorError as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e}); {want}") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e}); {want}") from None
    _strict_header(path)
    return tensors, meta


def _strict_header(path: str) -> None:
    """Read the (already accepted) header again, refusing duplicate keys safetensors drops."""
    try:
        with open(path, "rb") as fh:
            size = int.from_bytes(fh.read(8), "little")
            raw = fh.read(min(size, MAX_HEADER_BYTES))
        read_json_text(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: safetensors header: cannot read it again ({e})") from None
    except JsonProblem as e:
        raise CheckpointError(f"{path}: safetensors header: {e.message}") from None


def check_header(where: str, meta: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The `registry.layers` entries, each field checked for type and its digest for agreement
    with its weight / activation fields.

    Format version 1 (written before digests) is refused: without a digest a W4A4 file whose
    scheme and activation were edited together reads exactly like a real W4A16 one, so no v1
    file is unambiguous (its entries name a contract the tensors cannot confirm for dynamic
    activations). The message says to re-save from the float model."""
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
    if version < FORMAT_VERSION:
        raise CheckpointError(
            f"{where}: format version {version} stores no contract digest, so a hand edit of a "
            "layer's scheme and activation cannot be told from a real file; re-save it: "
            f"quantize_model the float model again and save_quantized (writes version "
            f"{FORMAT_VERSION})")
    try:
        layers, _ = read_json_text(meta[LAYERS_KEY])
    except JsonProblem as e:
        raise CheckpointError(f"{where}: {LAYERS_KEY} metadata, {e}") from None
    if not isinstance(layers, dict) or not layers:
        raise CheckpointError(f"{where}: {LAYERS_KEY} must be a non-empty JSON object of layers "
                              "(save_quantized writes one entry per MXLinear)")
    for name, entry in layers.items():
        lacking = [f for f in LAYER_FIELDS if not isinstance(entry, dict) or f not in entry]
        if lacking:
            raise CheckpointError(f"{where}: layer {name}: metadata lacks {', '.join(lacking)}")
        _check_entry_types(where, name, entry)
        digest = contract_digest(entry["weight"], entry["activation"])
        if entry["contract_digest"] != digest:
            raise CheckpointError(
                f"{where}: layer {name}: metadata field contract_digest "
                f"{entry['contract_digest']!r} does not match its weight / activation fields "
                f"(they give {digest!r}): the metadata was edited; re-save the model with "
                "save_quantized instead of editing the file")
    return layers


def _check_entry_types(where: str, name: str, entry: dict[str, Any]) -> None:
    """Each metadata field of a layer has the JSON type save_quantized writes."""
    def bad(field: str, want: str) -> CheckpointError:
        return CheckpointError(f"{where}: layer {name}: metadata field {field} is "
                               f"{entry[field]!r}, expected {want}")

    for field in ("scheme", "weight", "format", "rounding", "contract_digest"):
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


__all__ = ["CheckpointError", "FORMAT_VERSION", "LAYERS_KEY", "VERSION_KEY", "check_header",
           "check_path", "contract_digest", "layer_meta", "read_file"]
