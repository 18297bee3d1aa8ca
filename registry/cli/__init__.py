"""The `registry` command (console script `registry.cli:main`, and `python -m registry`).

    app.py       argparse over the table, exit codes (0 clean, 1 findings, 2 usage)
    commands.py  COMMANDS: every subcommand, declared as data in one table
    schemes.py   list, show, lint, schema (look-ups: no torch, no triton)
    resolving.py resolve (also --from-config; --kind linear / moe / qdq), the matrix's cells
    matrix.py    matrix (--kind)
    bench.py     bench          doctor.py   doctor
    common.py    UsageError, the catalog a command sees, the probe record
    output.py    findings, JSON and tables, as every command prints them
"""
from __future__ import annotations

from registry.cli.app import main
from registry.cli.commands import COMMANDS, Command

__all__ = ["COMMANDS", "Command", "main"]
