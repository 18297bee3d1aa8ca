"""Every `registry` subcommand, declared as data in one table: COMMANDS.

A Command names two functions of its group's module: `add_arguments(parser)` and
`run(args) -> exit code`. The groups: schemes.py (list, show, lint, schema: look-ups, no torch),
resolving.py (resolve, resolve --from-config), matrix.py, bench.py, doctor.py, inspect.py and
quantize_checkpoint.py (checkpoints). They are imported
to build the parser, so they import torch / triton (or anything slow) only inside `run`.
A new command: its two functions in the module of its group, and one row here.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable, Iterable

from registry.cli import bench, doctor, inspect, matrix, quantize_checkpoint, resolving, schemes


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _by_name(commands: Iterable[Command]) -> dict[str, Command]:
    """The table, in order, keyed by name (a name listed twice is a bug here)."""
    table: dict[str, Command] = {}
    for command in commands:
        if command.name in table:
            raise ValueError(f"two subcommands named {command.name!r}")
        table[command.name] = command
    return table


COMMANDS: dict[str, Command] = _by_name([
    Command("list", "list every scheme: name, weight key, activation key, source",
            schemes.list_arguments, schemes.list_command),
    Command("show", "show one scheme's contract, field by field",
            schemes.show_arguments, schemes.show_command),
    Command("lint", "check scheme files; exit 0 clean, 1 findings, 2 usage",
            schemes.lint_arguments, schemes.lint_command),
    Command("schema", "print the JSON Schema of a scheme file, or check files against it "
                      "(--check)", schemes.schema_arguments, schemes.schema_command),
    Command("resolve", "pick the kernel (of --kind) for a scheme on a platform, with every "
                       "reason",
            resolving.resolve_arguments, resolving.resolve_command),
    Command("matrix", "schemes x kernels of one kind (--kind) on a platform: accepted, "
                      "chosen, verified", matrix.matrix_arguments, matrix.matrix_command),
    Command("bench", "time each scheme's kernel against bf16 F.linear on this GPU",
            bench.bench_arguments, bench.bench_command),
    Command("inspect", "read a quantized checkpoint (config.json + safetensors): layers, tensors, "
                       "kernels, checks (exit 1 on findings)",
            inspect.inspect_arguments, inspect.inspect_command),
    Command("quantize-checkpoint", "quantize a bf16 / fp16 checkpoint shard by shard into a "
                                   "producer's format (resumable)",
            quantize_checkpoint.quantize_checkpoint_arguments,
            quantize_checkpoint.quantize_checkpoint_command),
    Command("doctor", "check this machine: versions, which kernels run here, what was verified "
                      "here (exit 0 healthy, 1 problems)",
            doctor.doctor_arguments, doctor.doctor_command),
])
