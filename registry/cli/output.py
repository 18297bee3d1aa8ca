"""What the `registry` commands print: findings one a line, JSON, and tables.

`table` itself lives in registry/text.py (model code's reports use it too, and must not import
the CLI); it is re-exported here so every command group prints through this one module.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Iterable

from registry.errors import Finding
from registry.text import table

__all__ = ["print_findings", "print_json", "table"]


def print_findings(findings: Iterable[Finding], file: Any = None) -> None:
    for f in findings:
        print(str(f), file=file or sys.stdout)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=True))
