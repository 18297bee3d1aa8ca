"""Lint checks that read the kernels' declarations (data only: no torch, no triton).

- every activation key has an entry in the activation-QDQ dispatcher (error at `activation:`);
- every scheme resolves on each platform of LINT_PLATFORMS (error listing each kernel's reason).
"""
from __future__ import annotations

from typing import Iterable

from registry.catalog import Catalog
from registry.errors import Finding, error
from registry.resolve import ResolutionError, describe_keys, resolve

LINT_PLATFORMS: tuple[str, ...] = ("cpu", "cuda:sm90")


def check_dispatcher_entries(catalog: Catalog) -> Iterable[Finding]:
    """A scheme whose activation key the dispatcher lacks would run unquantized: refuse it."""
    from kernels.activation_keys import DISPATCH_KEYS

    for s in catalog.loaded:
        key = s.activation
        if key is not None and key not in DISPATCH_KEYS:
            yield error(str(s.source), s.line("activation"), "activation",
                        f"the activation-QDQ dispatcher has no entry for {key}; use one of its "
                        f"keys ({describe_keys(DISPATCH_KEYS)}, any rounding) or add an entry "
                        "to kernels/dispatch.py")


def check_resolves(catalog: Catalog) -> Iterable[Finding]:
    """Every scheme has a kernel on the reference platforms."""
    for s in catalog.loaded:
        for platform in LINT_PLATFORMS:
            try:
                resolve(s, platform)
            except ResolutionError as e:
                yield error(str(s.source), s.line("name"), "resolve", str(e))
