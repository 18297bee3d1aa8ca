"""Lint: a list of check functions over a loaded catalog.

A check is `Callable[[Catalog], Iterable[Finding]]`; adding one is appending it to
LINT_CHECKS (e.g. "every activation key has a dispatcher entry", added by the kernels side).
"""
from __future__ import annotations

from typing import Callable, Iterable

from registry.errors import Finding, warning
from registry.files.catalog import Catalog
from registry.lint.kernel_checks import check_dispatcher_entries, check_resolves

LintCheck = Callable[[Catalog], Iterable[Finding]]

SUMMARY_WARN_LEN = 100


def check_scheme_files(catalog: Catalog) -> Iterable[Finding]:
    """Everything the loader found: per-file problems and missing directories."""
    return catalog.file_findings


def check_unique_names(catalog: Catalog) -> Iterable[Finding]:
    """Names and aliases are unique across every scheme directory."""
    return catalog.clash_findings


def check_summary_length(catalog: Catalog) -> Iterable[Finding]:
    """A summary is one short line (it is shown in tables)."""
    for s in catalog.loaded:
        if len(s.summary) > SUMMARY_WARN_LEN:
            yield warning(str(s.source), s.line("summary"), "summary",
                          f"is {len(s.summary)} characters long; keep it under "
                          f"{SUMMARY_WARN_LEN} (details go in a comment)")


LINT_CHECKS: list[LintCheck] = [check_scheme_files, check_unique_names, check_summary_length,
                                check_dispatcher_entries, check_resolves]


def run_lint(catalog: Catalog, checks: Iterable[LintCheck] | None = None) -> list[Finding]:
    """Every finding of every check, each once, sorted by file and line."""
    found: dict[Finding, None] = {}
    for check in LINT_CHECKS if checks is None else checks:
        for finding in check(catalog):
            found.setdefault(finding, None)
    return sorted(found, key=lambda f: (f.path, f.line or 0, f.severity, f.field, f.message))
