"""Writing safetensors shards one tensor at a time, and the Hugging Face shard index.

Why not `safetensors.torch.save_file`: it takes every tensor of a file at once, so a 5 GB
shard needs 5 GB of memory. `ShardWriter.add` appends one tensor's bytes to a side file and
keeps only its header entry; `finish` writes the header (safetensors' layout: 8-byte
little-endian header length, the JSON header padded with spaces to 8 bytes, then the data in
header order) and streams the data after it into `<name>.tmp`, renamed into place only when
complete. Peak memory is one tensor, and an interrupted write never leaves a file with the
final name. The sha256 of the file is computed while writing (the resume manifest keeps it).

Names follow `transformers.save_pretrained`: one shard is `model.safetensors` (no index);
N shards are `model-0000i-of-0000N.safetensors` plus `model.safetensors.index.json`
({"metadata": {"total_size": bytes of tensor data}, "weight_map": {tensor: shard}}).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Any, Mapping, Optional

import torch
from torch import Tensor

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
#: torch dtype -> the safetensors header's dtype name (safetensors.torch's own table).
DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2", torch.float8_e8m0fnu: "F8_E8M0",
}
_CHUNK = 1 << 24


def shard_names(count: int) -> list[str]:
    """The file names of `count` shards, as transformers names them."""
    if count == 1:
        return [SINGLE_NAME]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def tensor_nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


def sha256_file(path: str) -> str:
    """Hex sha256 of a file, read in 16 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class ShardWriter:
    """One safetensors file written tensor by tensor (module docstring)."""

    def __init__(self, path: str, metadata: Optional[Mapping[str, str]] = None) -> None:
        self.path = path
        self.metadata = dict(metadata or {})
        self.entries: dict[str, dict[str, Any]] = {}
        self.offset = 0
        self._data_path = path + ".data.tmp"
        self._data = open(self._data_path, "wb")

    def add(self, name: str, tensor: Tensor) -> int:
        """Append `tensor` (any device; copied to the CPU) under `name`; its byte count."""
        if name in self.entries:
            raise ValueError(f"{self.path}: tensor {name!r} written twice")
        if tensor.dtype not in DTYPE_NAMES:
            raise ValueError(f"{self.path}: tensor {name!r} has dtype {tensor.dtype}, which "
                             f"safetensors cannot store; cast it first")
        t = tensor.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        self._data.write(raw)
        self.entries[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                              "data_offsets": [self.offset, self.offset + len(raw)]}
        self.offset += len(raw)
        return len(raw)

    def finish(self) -> tuple[int, str]:
        """Write the file (header + data), atomically; (its size in bytes, its sha256)."""
        self._data.close()
        header: dict[str, Any] = {}
        if self.metadata:
            header["__metadata__"] = self.metadata
        header.update(self.entries)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        h = hashlib.sha256()
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as out, open(self._data_path, "rb") as data:
            head = struct.pack("<Q", len(text)) + text
            out.write(head)
            h.update(head)
            for chunk in iter(lambda: data.read(_CHUNK), b""):
                out.write(chunk)
                h.update(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.remove(self._data_path)
        os.replace(tmp, self.path)
        return 8 + len(text) + self.offset, h.hexdigest()

    def abort(self) -> None:
        """Drop what was written (the final file is never created)."""
        self._data.close()
        for p in (self._data_path, self.path + ".tmp"):
            if os.path.exists(p):
                os.remove(p)


def write_json(path: str, data: Any) -> None:
    """JSON written to `path` atomically (indent 2, keys sorted, as the producers write)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def write_index(out_dir: str, weight_map: Mapping[str, str], total_size: int) -> str:
    """`model.safetensors.index.json` as transformers writes it; its path."""
    path = os.path.join(out_dir, INDEX_NAME)
    write_json(path, {"metadata": {"total_size": int(total_size)},
                      "weight_map": dict(sorted(weight_map.items()))})
    return path


__all__ = ["DTYPE_NAMES", "INDEX_NAME", "SINGLE_NAME", "ShardWriter", "sha256_file",
           "shard_names", "tensor_nbytes", "write_index", "write_json"]
