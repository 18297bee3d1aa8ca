"""The `registry` command: a table of subcommands, argparse, exit codes.

Exit codes: 0 clean, 1 findings (or a failed look-up's problems), 2 usage errors (one line on
stderr). Subcommands live in the modules named in COMMAND_MODULES, each calling `register()`
at import; those modules are imported to build the parser, so they must import torch/triton
(or anything slow) only inside their `run` function.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from kernels.spec.env import SettingError, check_env_flags
from registry.errors import Finding
from registry.settings import registry_version

PROG = "registry"
COMMAND_MODULES: list[str] = ["registry.commands", "registry.commands_kernels",
                               "registry.commands_bench", "registry.commands_doctor"]


class UsageError(Exception):
    """A bad command line: reported as one line, exit code 2."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def register(command: Command) -> Command:
    """Add a subcommand to the table (once per name)."""
    existing = COMMANDS.get(command.name)
    if existing is not None and existing != command:
        raise ValueError(f"two subcommands named {command.name!r}")
    COMMANDS[command.name] = command
    return command


class _Version(argparse.Action):
    """`registry --version`: the version is looked up only when asked (no torch import)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"{PROG} {registry_version()}")
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the usage and exit(2)
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    parser = _Parser(prog=PROG, description="A registry of OCP Microscaling (MX) "
                                            "quantization schemes.")
    schemes_help = ("also load the scheme files of DIR (repeatable; also "
                    "$REGISTRY_SCHEMES_PATH, os.pathsep-separated)")
    parser.add_argument("--schemes", action="append", default=[], metavar="DIR",
                        help=schemes_help)
    parser.add_argument("--version", action=_Version,
                        help="print the installed ocp-mx-registry version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS.values():
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        p.add_argument("--schemes", action="append", default=[], dest="sub_schemes",
                       metavar="DIR", help=schemes_help)
        command.add_arguments(p)
        p.set_defaults(_command=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `registry` command; returns the exit code."""
    _tolerant_output()
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"{PROG}: error: missing command; choose from "
                             f"{', '.join(COMMANDS)} (see {PROG} --help)")
        args.schemes = list(args.schemes) + list(getattr(args, "sub_schemes", []))
        check_env_flags()
        return args._command.run(args)
    except SettingError as e:  # REGISTRY_STRICT=enable: refused before anything runs
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(str(e).replace("\n", " "), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BrokenPipeError:  # `registry list | head`
        try:
            sys.stdout = open("/dev/null", "w")  # noqa: SIM115 (silence the flush at exit)
        except OSError:
            pass
        return 0


def _tolerant_output() -> None:
    # Odd characters from a file (lone surrogates, ...) must not crash the report.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


# ---------------------------------------------------------------------------------------------
# Helpers for subcommands
# ---------------------------------------------------------------------------------------------

def print_findings(findings: Iterable[Finding], file: Any = None) -> None:
    for f in findings:
        print(str(f), file=file or sys.stdout)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=True))


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
                     for r in rows)
