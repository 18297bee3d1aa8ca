"""Lazy reading of a Hugging Face checkpoint directory: config.json + `*.safetensors`.

Why: a 100 GB checkpoint must be inspectable and loadable with memory about one tensor. Names,
dtypes and shapes come from the safetensors headers (`safe_open(...).get_slice`, no data read);
`get_tensor(name)` reads one tensor. A sharded checkpoint is found through
`model.safetensors.index.json` (its `weight_map`); without an index every `*.safetensors` file
of the directory is read, and a tensor stored in two files is refused.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Union

from torch import Tensor

INDEX_NAME = "model.safetensors.index.json"

#: safetensors dtype names -> bytes per element.
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
               "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
               "F8_E8M0": 1, "F4": 0.5}


class CheckpointReadError(ValueError):
    """The directory is not a readable checkpoint (one line naming the file and the fix)."""


@dataclass(frozen=True)
class TensorInfo:
    """A stored tensor's header facts: name, safetensors dtype ("U8", "BF16", ...), shape, file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return int(n * DTYPE_BYTES.get(self.dtype, 1))


class CheckpointReader:
    """One checkpoint directory, read lazily (see the module docstring)."""

    def __init__(self, directory: Union[str, os.PathLike]) -> None:
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise CheckpointReadError(f"{self.directory}: not a directory; pass the checkpoint "
                                      "directory holding config.json and *.safetensors")
        self._handles: dict[str, Any] = {}
        self._files = self._shards()
        self._infos: dict[str, TensorInfo] = {}
        for file in self._files:
            handle = self._open(file)
            for name in handle.keys():
                if name in self._infos:
                    raise CheckpointReadError(
                        f"{self.directory}: tensor {name} is stored in both "
                        f"{self._infos[name].file} and {file}; remove the stale shard")
                piece = handle.get_slice(name)
                self._infos[name] = TensorInfo(name, piece.get_dtype(),
                                               tuple(int(d) for d in piece.get_shape()), file)
        self._check_index()

    # -- files -------------------------------------------------------------------------------

    def _shards(self) -> list[str]:
        index = self.directory / INDEX_NAME
        if index.is_file():
            self._weight_map = self._read_index(index)
            files = sorted(set(self._weight_map.values()))
            for file in files:
                if not (self.directory / file).is_file():
                    raise CheckpointReadError(f"{index}: weight_map names {file}, which is not in "
                                              f"{self.directory}; copy the missing shard")
            return files
        self._weight_map = None
        files = sorted(p.name for p in self.directory.glob("*.safetensors"))
        if not files:
            raise CheckpointReadError(f"{self.directory}: no *.safetensors file and no "
                                      f"{INDEX_NAME}; pass a directory holding the weights")
        return files

    def _read_index(self, index: Path) -> dict[str, str]:
        try:
            data = json.loads(index.read_text())
        except (OSError, ValueError) as e:
            raise CheckpointReadError(f"{index}: unreadable ({e}); re-save the index") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise CheckpointReadError(f"{index}: no weight_map of tensor name -> file name; "
                                      "re-save the index")
        return weight_map

    def _check_index(self) -> None:
        if self._weight_map is None:
            return
        for name, file in self._weight_map.items():
            info = self._infos.get(name)
            if info is None or info.file != file:
                where = "no shard" if info is None else info.file
                raise CheckpointReadError(f"{self.directory / INDEX_NAME}: weight_map puts {name} "
                                          f"in {file}, but it is in {where}; re-save the index")
        extra = sorted(set(self._infos) - set(self._weight_map))
        if extra:
            raise CheckpointReadError(f"{self.directory / INDEX_NAME}: {len(extra)} stored tensors "
                                      f"are missing from weight_map (first: {extra[0]}); re-save "
                                      "the index")

    def _open(self, file: str) -> Any:
        from safetensors import SafetensorError, safe_open

        handle = self._handles.get(file)
        if handle is None:
            path = self.directory / file
            try:
                handle = safe_open(str(path), framework="pt")
            except (SafetensorError, OSError) as e:
                raise CheckpointReadError(f"{path}: not a readable safetensors file ({e}); "
                                          "re-download or re-save it") from None
            self._handles[file] = handle
        return handle

    # -- what is stored ----------------------------------------------------------------------

    @property
    def files(self) -> list[str]:
        return list(self._files)

    def names(self) -> list[str]:
        return sorted(self._infos)

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self._infos[n] for n in self.names())

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise CheckpointReadError(f"{self.directory}: no tensor named {name} in "
                                      f"{', '.join(self._files)}") from None

    def get_tensor(self, name: str) -> Tensor:
        """One stored tensor, read now (nothing else is read)."""
        return self._open(self.info(name).file).get_tensor(name)

    def config(self) -> dict[str, Any]:
        """config.json as a dict (one-line error when missing or broken)."""
        path = self.directory / "config.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise CheckpointReadError(f"{path}: missing; a checkpoint directory needs the "
                                      "config.json its producer wrote") from None
        except (OSError, ValueError) as e:
            raise CheckpointReadError(f"{path}: unreadable ({e})") from None
        if not isinstance(data, dict):
            raise CheckpointReadError(f"{path}: not a JSON object")
        return data

    @property
    def config_path(self) -> Path:
        return self.directory / "config.json"

    def close(self) -> None:
        self._handles.clear()

    def __enter__(self) -> "CheckpointReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["CheckpointReadError", "CheckpointReader", "DTYPE_BYTES", "INDEX_NAME", "TensorInfo"]
