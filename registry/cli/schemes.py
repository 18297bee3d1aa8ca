"""The look-up subcommands: list, show, lint, schema. None of them imports torch or triton."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernels.spec.contract import QuantKey
from registry.cli.common import UsageError, catalog_of, record_or_warn
from registry.cli.output import print_findings, print_json, table
from registry.contract import Scheme
from registry.errors import Finding, UnknownSchemeError, display_path
from registry.files.catalog import Catalog, load_files
from registry.files.loader import SchemeDir, read_dir, scheme_dirs
from registry.lint.checks import run_lint
from registry.lint.json_schema import json_schema


def _origin(catalog: Catalog, scheme: Scheme) -> str:
    for d in catalog.dirs:
        if Path(display_path(d.path)) == scheme.source_dir:
            return d.origin
    return "argument"


def key_dict(key: QuantKey | None, scheme: Scheme, role: str) -> dict[str, Any] | None:
    """Every field of a key, with the line each was written on (None: implied default)."""
    if key is None:
        return None
    s = key.scale

    def line(field: str) -> int | None:
        return dict(scheme.field_lines).get(f"{role}.{field}")

    return {
        "key": str(key), "format": key.format, "static": key.static,
        "scale": {"format": s.format, "granularity": s.granularity, "block": s.block,
                  "static": s.static, "rounding": s.rounding},
        "lines": {f: line(f) for f in ("format", "static", "scale.format", "scale.granularity",
                                       "scale.block", "scale.rounding")},
    }


def scheme_dict(catalog: Catalog, scheme: Scheme) -> dict[str, Any]:
    return {
        "name": scheme.name, "summary": scheme.summary, "aliases": list(scheme.aliases),
        "weight": key_dict(scheme.weight, scheme, "weight"),
        "activation": key_dict(scheme.activation, scheme, "activation"),
        "contract": str(scheme.contract),
        "source": {"file": str(scheme.source), "line": scheme.line("name"),
                   "dir": str(scheme.source_dir), "origin": _origin(catalog, scheme)},
    }


# --- list --------------------------------------------------------------------------------------

def list_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON: {schemes, findings}")


def list_command(args: argparse.Namespace) -> int:
    catalog = catalog_of(args)
    schemes = sorted(catalog, key=lambda s: s.name)
    if args.json:
        print_json({"schemes": [scheme_dict(catalog, s) for s in schemes],
                    "findings": [f.to_dict() for f in catalog.findings]})
    else:
        rows = [["NAME", "WEIGHT", "ACTIVATION", "SOURCE"]]
        rows += [[s.name, str(s.weight), str(s.activation or "none"), _source_cell(catalog, s)]
                 for s in schemes]
        print(table(rows))
        if any(d.origin != "shipped" for d in catalog.dirs):
            print("\nscheme directories, in load order (the first definition of a name keeps "
                  "it; a second one is an error):")
            print(table([[f"  {d.origin}", display_path(d.path)] for d in catalog.dirs]))
    return 1 if catalog.errors else 0


def _source_cell(catalog: Catalog, scheme: Scheme) -> str:
    """file:line, plus where its directory was named unless it is the shipped one."""
    origin = _origin(catalog, scheme)
    return scheme.location if origin == "shipped" else f"{scheme.location} (from {origin})"


# --- show --------------------------------------------------------------------------------------

def show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="a scheme name or alias")
    p.add_argument("--json", action="store_true", help="print the scheme as JSON")


def show_command(args: argparse.Namespace) -> int:
    catalog = catalog_of(args)
    try:
        scheme = catalog.get(args.name)
    except UnknownSchemeError as e:
        raise UsageError(f"registry show: error: {e}") from None
    data = scheme_dict(catalog, scheme)
    if args.json:
        print_json(data)
        return 0
    print(f"{scheme.name}: {scheme.summary}")
    src = data["source"]
    print(f"  source:     {scheme.location}  ({src['origin']} directory {src['dir']})")
    print(f"  aliases:    {', '.join(scheme.aliases) or '(none)'}")
    print(f"  contract:   {scheme.contract}")
    for role in ("weight", "activation"):
        key = data[role]
        if key is None:
            print(f"  {role + ':':11} none  (weight-only; line {scheme.line(role)})")
            continue
        print(f"  {role + ':':11} {key['key']}  (line {scheme.line(role)})")
        values = {"format": key["format"], "static": key["static"],
                  **{f"scale.{k}": v for k, v in key["scale"].items() if k != "static"}}
        rows = []
        for field, value in values.items():
            line = key["lines"][field]
            shown = "true" if value is True else "false" if value is False else \
                "-" if value is None else str(value)
            rows.append([f"    {field}", shown, f"line {line}" if line else "(implied)"])
        print(table(rows))
    return 0


# --- lint --------------------------------------------------------------------------------------

def lint_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="scheme files or directories (default: every scheme directory)")
    p.add_argument("--json", action="store_true", help="print JSON: {ok, checked, findings}")
    p.add_argument("--probe", action="store_true",
                   help="also run every (scheme, kernel) pair that can run on this machine on "
                        "small random data: it must match the reference emulation and its "
                        "activation quantization must change the output (imports torch); "
                        "with PATHs, only their schemes are probed. The results are recorded "
                        "for `registry doctor` in $REGISTRY_CACHE_DIR (else "
                        "$XDG_CACHE_HOME/registry, else ~/.cache/registry)")
    p.add_argument("--kernels", metavar="K,...",
                   help="with --probe: probe only these kernels (each must run here)")
    p.add_argument("--no-record", action="store_true",
                   help="with --probe: do not record the results for `registry doctor`")


def _lint_scope(dirs: list[Path], files: list[Path]) -> tuple[set[Path], set[Path]]:
    """The files and directories `registry lint PATH...` checks: each directory's files as the
    loader lists them (read_dir), a symlink to a file elsewhere included, as resolved paths."""
    scope = {f.resolve() for f in files}
    for d in dirs:
        scope |= {p.resolve() for p in read_dir(SchemeDir(d, "argument"))[0]}
    return scope, {d.resolve() for d in dirs}


def _in_scope(path: str, files: set[Path], dirs: set[Path]) -> bool:
    """Is `path` (as the loader shows it, not resolved) a file or directory in scope, or an
    entry of a directory in scope (a *.yml warning, a symlink's own name)?"""
    p = Path(path)
    return p.resolve() in files or p.resolve() in dirs or p.parent.resolve() in dirs


def _finding_in_scope(f: Finding, files: set[Path], dirs: set[Path], shown: set[str]) -> bool:
    if _in_scope(f.path, files, dirs):
        return True
    return any(f" {s}:" in f.message for s in shown)  # a clash naming a file in scope


def lint_command(args: argparse.Namespace) -> int:
    if not args.probe and (args.kernels is not None or args.no_record):
        raise UsageError("registry lint: error: --kernels / --no-record go with --probe")
    for p in args.paths:
        if not Path(p).exists():
            raise UsageError(f"registry lint: error: no such file or directory: {p}")
    configured = scheme_dirs(args.schemes)
    if not args.paths:
        catalog = load_files(configured)
        findings = run_lint(catalog)
        checked = catalog.files
    else:
        dirs = [Path(p) for p in args.paths if Path(p).is_dir()]
        files = [Path(p) for p in args.paths if not Path(p).is_dir()]
        catalog = load_files(configured + [SchemeDir(d, "argument") for d in dirs], files)
        rfiles, rdirs = _lint_scope(dirs, files)
        checked = [f for f in catalog.files if _in_scope(f, rfiles, rdirs)]
        findings = [f for f in run_lint(catalog)
                    if _finding_in_scope(f, rfiles, rdirs, set(checked))]
    probed, recorded = None, None
    if args.probe:
        from registry.machine.probe import probe_findings, run_probe

        kernels = _probe_kernels(args.kernels)
        schemes = None
        if args.paths:  # only the schemes of the files checked
            mine = {Path(f).resolve() for f in checked}
            schemes = [s.name for s in catalog if Path(s.source).resolve() in mine]
        probed = run_probe(catalog, kernels=kernels, schemes=schemes)
        findings = findings + probe_findings(catalog, probed)
        if not args.json:
            _print_probe(probed)
        if not args.no_record:
            recorded = record_or_warn(probed, "registry lint")
    return _report(findings, checked, args.json, probed, recorded)


def _probe_kernels(text: str | None) -> list[str] | None:
    """--kernels K,...: names of kernels that run here, else a usage error (None: all)."""
    if text is None:
        return None
    from kernels.select.kernel_table import KernelPluginError, kernel_table
    from kernels.spec.platform import detect
    from registry.machine.probe import runnable_here

    names = [k.strip() for k in text.split(",") if k.strip()]
    if not names:
        raise UsageError("registry lint: error: --kernels is empty; name at least one kernel "
                         "(see registry matrix)")
    known = kernel_table().names
    plat = detect()
    try:
        here = runnable_here(plat)
    except KernelPluginError as e:
        raise UsageError(f"registry lint: error: --kernels: {e}") from None
    for n in names:
        if n not in known:
            raise UsageError(f"registry lint: error: --kernels: unknown kernel {n!r}; known "
                             f"kernels: {', '.join(known)}")
        if n not in here:
            raise UsageError(f"registry lint: error: --kernels: {n} does not run on {plat}; "
                             f"kernels that run here: {', '.join(here)}")
    return list(dict.fromkeys(names))


def _print_probe(results) -> None:
    rows = [["scheme", "kernel", "platform", "rel err", "act effect", "result"]]
    for r in results:
        rows.append([r.scheme, r.kernel, r.platform,
                     "-" if r.rel_err is None else f"{r.rel_err:.1e}",
                     "-" if r.act_effect is None else f"{r.act_effect:.1e}", r.message])
    print(table(rows), file=sys.stderr)
    bad = sum(not r.ok for r in results)
    print(f"probe: {len(results) - bad} of {len(results)} (scheme, kernel) pairs verified",
          file=sys.stderr)


def _report(findings: list[Finding], checked: list[str], as_json: bool,
            probed: list | None = None, recorded: str | None = None) -> int:
    if as_json:
        out = {"ok": not findings, "checked": checked,
               "findings": [f.to_dict() for f in findings]}
        if probed is not None:
            out["probe"] = [r.to_dict() for r in probed]
            out["probe_record"] = recorded
        print_json(out)
    else:
        print_findings(findings)
        if recorded:
            print(f"probe: recorded in {recorded} (read by `registry doctor`)", file=sys.stderr)
    return 1 if findings else 0


# --- schema ------------------------------------------------------------------------------------

def schema_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", nargs="+", metavar="FILE",
                   help="check these scheme files instead, with every lint check (same "
                        "findings, output and exit code as `registry lint FILE...`) except "
                        "name / alias clashes with the scheme directories, which only "
                        "`registry lint` sees")
    p.add_argument("--json", action="store_true", help="with --check: print JSON as lint does")


def schema_command(args: argparse.Namespace) -> int:
    if not args.check:
        if args.json:
            raise UsageError("registry schema: error: --json goes with --check (the schema "
                             "itself is always JSON)")
        print_json(json_schema())
        return 0
    for name in args.check:
        path = Path(name)
        if not path.is_file():
            what = "a directory (use `registry lint DIR`)" if path.is_dir() else "not a file"
            raise UsageError(f"registry schema: error: {name} is {what}")
    # lint's own checks on a catalog of these files alone: no second rule set to drift apart
    catalog = load_files([], args.check)
    return _report(run_lint(catalog), catalog.files, args.json)
