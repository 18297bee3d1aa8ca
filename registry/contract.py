"""The scheme-file model: `Scheme`, a named contract and where each of its fields was written.

The contract vocabulary itself (`QuantKey`, `ScaleDesc`, `SchemeContract`, the format / scale /
rounding names and the `*_problems` rules) lives at the bottom, in kernels/spec/contract.py,
shared by the kernels and the registry; it is re-exported here so `registry.contract` keeps
answering every name it always did. Nothing here imports torch or triton.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kernels.spec.contract import *  # noqa: F401,F403 - the vocabulary, under its old path
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.spec.contract import __all__ as _VOCABULARY

__all__ = [*_VOCABULARY, "Scheme"]


class Scheme(BaseModel):
    """A named scheme as loaded from one YAML file, with where each field was written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    summary: str
    aliases: tuple[str, ...] = ()
    contract: SchemeContract
    source: Path  # the file, as it is shown in messages
    source_dir: Path  # the scheme directory it was found in
    field_lines: tuple[tuple[str, int], ...] = ()  # dotted field -> 1-based line

    @property
    def weight(self) -> QuantKey:
        return self.contract.weight

    @property
    def activation(self) -> QuantKey | None:
        return self.contract.activation

    def line(self, field: str = "name") -> int:
        """The line of `field` (dotted), or of its nearest written parent, or 1."""
        lines = dict(self.field_lines)
        while field:
            if field in lines:
                return lines[field]
            field = field.rpartition(".")[0]
        return 1

    @property
    def location(self) -> str:
        return f"{self.source}:{self.line('name')}"
