"""Lint checks that read the kernel table (data only: no torch, no triton).

- every activation key is one the activation-QDQ dispatcher can quantize, i.e. a qdq kernel
  declares it (kernels/select/declarations.py; error at `activation:`);
- every kernel plugin loaded (error at the plugin's entry point, naming its distribution);
- every scheme resolves on each platform of LINT_PLATFORMS (error listing each kernel's reason).
"""
from __future__ import annotations

from typing import Iterable

from kernels.select.resolve import ResolutionError, describe_keys, resolve
from registry.errors import Finding, error
from registry.files.catalog import Catalog

LINT_PLATFORMS: tuple[str, ...] = ("cpu", "cuda:sm90")


def check_dispatcher_entries(catalog: Catalog) -> Iterable[Finding]:
    """A scheme whose activation key the dispatcher lacks would run unquantized: refuse it."""
    from kernels.select.activation_keys import DISPATCH_KEYS

    for s in catalog.loaded:
        key = s.activation
        if key is not None and key not in DISPATCH_KEYS:
            yield error(str(s.source), s.line("activation"), "activation",
                        f"the activation-QDQ dispatcher has no entry for {key}; use one of its "
                        f"keys ({describe_keys(DISPATCH_KEYS)}, any rounding) or declare a "
                        "qdq kernel that implements it (kernels/select/declarations.py, "
                        "QDQ_KERNELS)")


def check_kernel_plugins(catalog: Catalog) -> Iterable[Finding]:
    """A broken kernel plugin is an error at its entry point (entry_points.txt:line)."""
    from kernels.select.kernel_table import ENTRY_POINT_GROUP, kernel_table

    for p in kernel_table().problems:
        where = p.origin.path or f"<entry-point group {ENTRY_POINT_GROUP}>"
        yield error(where, p.origin.line, "kernel-plugin", str(p))


def check_resolves(catalog: Catalog) -> Iterable[Finding]:
    """Every scheme has a kernel on the reference platforms.

    With a broken kernel plugin nothing resolves: the plugin's own findings
    (check_kernel_plugins), then one short error per scheme naming the plugins (so a
    `registry lint FILE` scoped to a scheme file still shows it), not one per platform.
    """
    from kernels.select.kernel_table import kernel_table

    problems = kernel_table().problems
    if problems:
        # lint.LINT_CHECKS lists check_resolves; listing check_kernel_plugins there as well is
        # harmless (run_lint drops repeated findings)
        yield from check_kernel_plugins(catalog)
        broken = ", ".join(dict.fromkeys(str(p.origin) for p in problems))
        for s in catalog.loaded:
            yield error(str(s.source), s.line("name"), "resolve",
                        f"cannot resolve on {', '.join(LINT_PLATFORMS)} while a kernel plugin "
                        f"is broken: {broken} (see the kernel-plugin errors)")
        return
    for s in catalog.loaded:
        for platform in LINT_PLATFORMS:
            try:
                resolve(s, platform)
            except ResolutionError as e:
                yield error(str(s.source), s.line("name"), "resolve", str(e))
