"""What every command group shares: the usage error, the catalog a command sees, and the probe
record that `lint --probe` and `doctor --probe` both write. No torch at import."""
from __future__ import annotations

import argparse
import sys

from registry.cli.output import print_findings
from registry.files.catalog import Catalog, load_files
from registry.files.loader import scheme_dirs


class UsageError(Exception):
    """A bad command line: reported as one line, exit code 2."""


def catalog_of(args: argparse.Namespace) -> Catalog:
    """The shipped schemes plus --schemes / $REGISTRY_SCHEMES_PATH (every subcommand's view).
    Every finding (a missing directory, a broken file, a clash) is said here, once, one line
    each on stderr, so no command can work on a partial catalog without saying so."""
    catalog = load_files(scheme_dirs(args.schemes))
    print_findings(catalog.findings, sys.stderr)
    return catalog


def record_or_warn(probed: list, who: str) -> str | None:
    """Record a probe run for `registry doctor`; a failure is a one-line warning, not a crash."""
    from kernels.spec.platform import detect
    from registry.machine.probe import record_path, record_probe

    plat = detect()
    try:
        return str(record_probe(probed, plat))
    except (OSError, ValueError) as e:
        print(f"{who}: warning: could not record the probe in {record_path(plat)}: "
              f"{type(e).__name__}: {e}; set REGISTRY_CACHE_DIR to a writable directory or "
              "pass --no-record".replace("\n", " "), file=sys.stderr)
        return None
