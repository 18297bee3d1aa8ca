"""Plain-text helpers shared by the CLI and the model code (a report's `__str__`).

Kept out of registry/cli/ so that model code (registry/nn, registry/machine) never imports the
command line. No torch, no other registry module.
"""
from __future__ import annotations


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
                     for r in rows)
