"""The `registry` command: argparse over the table of subcommands, exit codes.

Exit codes: 0 clean, 1 findings (or a failed look-up's problems), 2 usage errors (one line on
stderr). The subcommands are the rows of registry/cli/commands.py (COMMANDS).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from kernels.spec.env import SettingError, check_env_flags
from registry.cli.commands import COMMANDS
from registry.cli.common import UsageError
from registry.settings import registry_version

PROG = "registry"


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
