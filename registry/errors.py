"""Findings (one located problem in a scheme file) and the errors the public API raises.

A Finding prints as one `file:line: severity: field: message` line, the shape compilers and
editors understand, so every problem points at the line to fix.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, order=True)
class Finding:
    """One problem: where (`path`, 1-based `line`, None for a whole directory or a file's
    name), how bad, which dotted `field` (empty when the problem is the file itself) and what
    to do about it."""

    path: str
    line: int | None
    severity: Severity
    field: str
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [where, self.severity] + ([self.field] if self.field else []) + [self.message]
        return ": ".join(parts)

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_dict(self) -> dict:
        return asdict(self)


def error(path: str, line: int | None, field: str, message: str) -> Finding:
    return Finding(path, line, "error", field, message)


def warning(path: str, line: int | None, field: str, message: str) -> Finding:
    return Finding(path, line, "warning", field, message)


def display_path(path: str | os.PathLike) -> str:
    """`path` relative to the working directory when it lies under it, else as given."""
    p = Path(path)
    if p.is_absolute():
        try:
            return str(p.relative_to(Path.cwd()))
        except ValueError:
            return str(p)
    return str(p)


class SchemeLoadError(Exception):
    """Raised by `Catalog.raise_for_errors()`: the scheme files hold errors (all listed)."""

    def __init__(self, findings: Iterable[Finding]):
        self.findings = [f for f in findings if f.is_error]
        lines = "\n".join(str(f) for f in self.findings)
        super().__init__(f"{len(self.findings)} error(s) in scheme files:\n{lines}")


class UnknownSchemeError(KeyError):
    """The name or alias does not name one loaded scheme; the message says why (unknown: the
    close matches; the subclasses below: the files involved)."""

    def __init__(self, name: str, message: str):
        super().__init__(name)
        self.name = name
        self.message = message

    def __str__(self) -> str:  # KeyError would print the repr of its argument
        return self.message


class AmbiguousSchemeError(UnknownSchemeError):
    """The name or alias is defined in more than one file; the message names each."""


class BrokenSchemeError(UnknownSchemeError):
    """The file that defines the name or alias has errors; the message names it and the first."""
