"""The resume manifest and the progress bar of `registry quantize-checkpoint`.

Why a manifest: quantizing a 100 GB checkpoint takes long enough to be interrupted. The job
writes `OUT/.quantize-checkpoint.json` before the first shard and after each finished one:
the job's settings (input directory, scheme and its contract, format, ignore patterns, and per
input shard its size and the sha256 of its safetensors header, which lists every tensor's
dtype, shape and offsets) and, per finished output shard, its size and sha256. A rerun with
the same settings keeps a finished shard only when its file still has that size and hash;
other settings are refused (the message names the field). The manifest is removed when the
checkpoint is complete, so a finished directory looks like any other checkpoint.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import time
from typing import Any, Optional, TextIO

from registry.checkpoints.shards import sha256_file, write_json

MANIFEST = ".quantize-checkpoint.json"
MANIFEST_VERSION = 1


def header_digest(path: str) -> str:
    """sha256 of a safetensors file's header (length prefix + JSON): cheap, and it changes
    when any tensor's name, dtype, shape or offset changes."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
        (size,) = struct.unpack("<Q", raw)
        return hashlib.sha256(raw + fh.read(min(size, 100_000_000))).hexdigest()


class Manifest:
    """The job's settings and its finished shards (module docstring)."""

    def __init__(self, out_dir: str, job: dict[str, Any]) -> None:
        self.path = os.path.join(out_dir, MANIFEST)
        self.out_dir = out_dir
        self.job = job
        self.done: dict[str, dict[str, Any]] = {}

    @classmethod
    def exists(cls, out_dir: str) -> bool:
        return os.path.isfile(os.path.join(out_dir, MANIFEST))

    def resume(self) -> list[str]:
        """Load the finished shards of an earlier run of the same job; notes on what was
        dropped. ValueError (one line) when the earlier run had other settings."""
        try:
            with open(self.path) as fh:
                old = json.load(fh)
        except (OSError, ValueError) as e:
            raise ValueError(f"{self.path}: unreadable resume manifest ({e}); pass --overwrite "
                             "to start again") from None
        if not isinstance(old, dict) or old.get("version") != MANIFEST_VERSION:
            raise ValueError(f"{self.path}: resume manifest of another version; pass "
                             "--overwrite to start again")
        before = old.get("job", {})
        for key, now in self.job.items():
            if before.get(key) != now:
                shown = "the input shards" if key == "inputs" else repr(before.get(key))
                raise ValueError(
                    f"{self.out_dir}: holds an unfinished quantize-checkpoint run with other "
                    f"settings ({key} was {shown}, now {'changed' if key == 'inputs' else repr(now)}); "
                    "rerun with the same settings to resume, or pass --overwrite to start again")
        notes = []
        for shard, entry in (old.get("done") or {}).items():
            path = os.path.join(self.out_dir, shard)
            ok = isinstance(entry, dict) and os.path.isfile(path) \
                and os.path.getsize(path) == entry.get("size") \
                and sha256_file(path) == entry.get("sha256")
            if ok:
                self.done[shard] = entry
            else:
                notes.append(f"{shard}: finished earlier but its file is missing or changed; "
                             "quantized again")
        return notes

    def finished(self, shard: str, size: int, digest: str, tensors: dict[str, int]) -> None:
        self.done[shard] = {"size": size, "sha256": digest, "tensors": tensors}
        self.save()

    def save(self) -> None:
        write_json(self.path, {"version": MANIFEST_VERSION, "job": self.job, "done": self.done})

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)


class Progress:
    """A one-line progress bar on stderr (bytes of input read); on a non-terminal, one line
    per finished shard instead of redraws."""

    def __init__(self, total: int, shards: int, enabled: bool = True,
                 stream: Optional[TextIO] = None) -> None:
        self.total, self.shards, self.enabled = max(total, 1), shards, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.shard = 0
        self.name = ""
        self._last = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def start_shard(self, name: str) -> None:
        self.shard += 1
        self.name = name

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if self.enabled and self._tty and time.monotonic() - self._last > 0.2:
            self._last = time.monotonic()
            self._draw("\r")

    def end_shard(self, note: str = "") -> None:
        if self.enabled:
            self._draw("\r" if self._tty else "", note)
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, lead: str, note: str = "") -> None:
        frac = min(self.done / self.total, 1.0)
        bar = "#" * int(frac * 30)
        self.stream.write(f"{lead}[{bar:<30}] {frac * 100:5.1f}% {self.done / 2**20:,.1f}/"
                          f"{self.total / 2**20:,.1f} MiB  shard {self.shard}/{self.shards} "
                          f"{self.name}{'  ' + note if note else ''}")
        self.stream.flush()


__all__ = ["MANIFEST", "Manifest", "Progress", "header_digest"]
