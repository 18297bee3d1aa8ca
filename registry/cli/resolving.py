"""The kernel subcommands: resolve (a scheme, --all, or every group of a checkpoint config with
--from-config) and matrix. torch is imported only to detect the platform."""
from __future__ import annotations

import argparse
from typing import Any

from kernels.select.resolve import (ENV_DISABLED, Resolution, ResolutionError, env_disabled,
                                    accepts, check_kernel_names, resolve)
from kernels.spec.platform import KNOWN_PLATFORMS, Platform, detect
from registry.cli.common import UsageError, catalog_of
from registry.cli.output import print_json, table
from registry.contract import Scheme
from registry.errors import UnknownSchemeError
from registry.files.catalog import Catalog


def _mode(res: Resolution, err: str | None) -> str:
    """`native` / `emulated`, then every deviation kind in capitals (FALLBACK, DISABLED...)."""
    if err and res.kernel is None:
        return "ERROR"
    c = res.chosen
    words = ["native" if c and c.native else "emulated"]
    words += [d.kind.upper() for d in res.deviations]
    return ("ERROR: " if err else "") + " ".join(words)


def _platform(args: argparse.Namespace) -> tuple[Platform, str]:
    if args.platform:
        try:
            return Platform.parse(args.platform), "named"
        except ValueError as e:
            raise UsageError(f"registry: error: --platform: {e}") from None
    return detect(), "detected"


def _kernel_list(text: str | None) -> list[str]:
    return [k.strip() for k in (text or "").split(",") if k.strip()]


def _check_kernels(args: argparse.Namespace) -> None:
    """Unknown --disable / --force names are usage errors naming the option used (plugin
    kernels count as known; a broken plugin is reported by resolve itself)."""
    from kernels.select.kernel_table import kernel_table

    known = kernel_table().names
    try:
        check_kernel_names(_kernel_list(args.disable), "--disable", known)
        check_kernel_names([] if args.force is None else [args.force], "--force", known)
        check_kernel_names(env_disabled(), ENV_DISABLED, known)
    except ValueError as e:
        raise UsageError(f"registry: error: {e}") from None


def _scheme(catalog: Catalog, name: str) -> Scheme:
    try:
        return catalog.get(name)
    except (UnknownSchemeError, KeyError) as e:
        raise UsageError(f"registry: error: {e}".replace("\n", " ")) from None


# --- resolve ------------------------------------------------------------------------------------

def resolve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scheme", nargs="?", metavar="NAME|ALIAS", help="a scheme name or alias")
    p.add_argument("--all", action="store_true", help="resolve every scheme")
    p.add_argument("--platform", metavar="P",
                   help=f"what-if platform, one of {', '.join(KNOWN_PLATFORMS)}; default: "
                        "this machine")
    p.add_argument("--strict", action="store_true",
                   help="a fallback to an emulated kernel, --force, or a --disable that "
                        "changes the kernel is an error (also REGISTRY_STRICT=1)")
    p.add_argument("--disable", metavar="K,...", help="kernels to skip (also "
                                                      "REGISTRY_DISABLED_KERNELS)")
    p.add_argument("--force", metavar="K", help="use this kernel or fail")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--from-config", metavar="PATH",
                   help="map every layer group of a Hugging Face config.json (Quark or "
                        "compressed-tensors quantization_config) to a scheme and resolve it; "
                        "exit 1 when a group maps to no scheme or does not resolve")


def _resolve_one(scheme: Scheme, plat: Platform, args) -> tuple[Resolution, str | None]:
    try:
        return resolve(scheme, plat, strict=args.strict, disabled=_kernel_list(args.disable),
                       force=args.force), None
    except ResolutionError as e:
        return e.resolution, str(e)


def _print_resolution(res: Resolution, scheme: Scheme, how: str, error: str | None) -> None:
    aliases = f" (aliases: {', '.join(scheme.aliases)})" if scheme.aliases else ""
    kernel = "NONE" if res.kernel is None else f"{res.kernel} ({_mode(res, None)})"
    act = res.contract.activation
    print(table([
        ["scheme", f"{scheme.name}{aliases}"],
        ["source", scheme.location],
        ["platform", f"{res.platform} ({how})"],
        ["weight", str(res.contract.weight)],
        ["activation", "none (weight-only)" if act is None else str(act)],
        ["kernel", kernel],
    ] + [["deviation", str(d)] for d in res.deviations]))
    print("\ncandidates, in priority order:")
    rows = [["", c.kernel, c.reason] for c in res.candidates]
    for row, c in zip(rows, res.candidates):
        row[0] = "->" if c.accepted else "  "
    print(table(rows) if rows else "  (none)")
    if error:
        print(f"\nerror: {error}")


def resolve_command(args: argparse.Namespace) -> int:
    if args.from_config is not None and (args.all or args.scheme):
        raise UsageError("registry resolve: error: --from-config PATH takes the schemes from the "
                         "config; drop NAME|ALIAS / --all")
    if args.from_config is None and args.all == bool(args.scheme):
        raise UsageError("registry resolve: error: give one scheme NAME|ALIAS or --all "
                         "(or --from-config PATH)")
    _check_kernels(args)
    if args.from_config is not None:
        return _run_from_config(args)
    catalog = catalog_of(args)
    plat, how = _platform(args)
    schemes = (sorted(catalog.schemes.values(), key=lambda s: s.name) if args.all
               else [_scheme(catalog, args.scheme)])
    results = [(s, *_resolve_one(s, plat, args)) for s in schemes]
    failed = sum(err is not None for _, _, err in results)
    if args.json:
        out = [dict(res.to_dict(), error=err) for _, res, err in results]
        print_json(out if args.all else out[0])
    elif args.all:
        rows = [["scheme", "kernel", "mode", "weight", "activation"]]
        for s, res, err in results:
            act = res.contract.activation
            rows.append([s.name, res.kernel or "-", _mode(res, err), str(res.contract.weight),
                         "none" if act is None else str(act)])
        print(f"platform: {plat} ({how})\n")
        print(table(rows))
        for s, _, err in results:
            if err:
                print(f"\n{s.location}: error: {err}")
    else:
        s, res, err = results[0]
        _print_resolution(res, s, how, err)
    return 1 if failed else 0


def _resolve_groups(groups: list, plat: Platform, args) -> list[tuple]:
    """(config group, its scheme's Resolution or None, one-line error or None); each scheme is
    resolved once, exactly as `resolve NAME` would."""
    done: dict[str, tuple[Resolution, str | None]] = {}
    out = []
    for g in groups:
        if g.scheme is None:
            out.append((g, None, g.error))
            continue
        if g.scheme.name not in done:
            done[g.scheme.name] = _resolve_one(g.scheme, plat, args)
        res, err = done[g.scheme.name]
        out.append((g, res, f"{g.where}: {g.path}: {err}" if err else None))
    return out


def _group_dict(g, res: Resolution | None, err: str | None) -> dict[str, Any]:
    """The same keys for every group: the group's, then its resolution's (None if none)."""
    r = res.to_dict() if res is not None else {}
    extra = {k: r.get(k) for k in ("platform", "kernel", "native", "fallback", "forced",
                                   "deviations")}
    return dict(g.to_dict(), **extra, candidates=r.get("candidates", []), error=err)


def _run_from_config(args: argparse.Namespace) -> int:
    """`resolve --from-config`: one row per config group, the candidates of each distinct
    scheme, then one line per group that did not map or resolve."""
    import sys

    from registry.configs.hf_config import ConfigError, schemes_from_config

    catalog = catalog_of(args)
    plat, how = _platform(args)
    try:
        groups = schemes_from_config(args.from_config, catalog)
    except ConfigError as e:
        print(f"registry: error: {e}".replace("\n", " "), file=sys.stderr)
        return 2 if e.unreadable else 1
    results = _resolve_groups(groups, plat, args)
    errors = list(dict.fromkeys(err for _, _, err in results if err))
    if args.json:
        print_json([_group_dict(*r) for r in results])
        return 1 if errors else 0
    first = groups[0] if groups else None
    print(f"config: {first.source if first else args.from_config} "
          f"({first.producer if first else '?'})\nplatform: {plat} ({how})\n")
    rows = [["group (JSON path)", "targets", "scheme", "kernel", "mode", "fallback"]]
    shown: dict[str, Resolution] = {}
    for g, res, err in results:
        row = [g.path, ", ".join(g.targets) or "-"]
        if g.note is not None:
            row += [g.note, "-", "-", "-"]
        elif g.scheme is None:
            row += ["NO MATCH", "-", "ERROR", "-"]
        else:
            row += [g.scheme.name, res.kernel or "NONE", _mode(res, err),
                    "yes" if res.fallback else "no"]
            shown.setdefault(g.scheme.name, res)
        rows.append(row)
    print(table(rows))
    for name, res in shown.items():
        print(f"\ncandidates for {name} on {res.platform}, in priority order:")
        cand = [["->" if c.accepted else "  ", c.kernel, c.reason] for c in res.candidates]
        print(table(cand) if cand else "  (none)")
    for e in errors:
        print(f"\nerror: {e}")
    return 1 if errors else 0



# --- matrix -------------------------------------------------------------------------------------

def matrix_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--platform", metavar="P", help=f"what-if platform, one of "
                   f"{', '.join(KNOWN_PLATFORMS)}; default: this machine")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def matrix_cells(catalog: Catalog, plat: Platform) -> list[dict[str, Any]]:
    """One cell per (scheme, kernel): accepted or the reason, chosen, verified on hardware,
    and where the kernel came from (built-in or a plugin). KernelPluginError if one is broken."""
    from kernels.select.kernel_table import kernel_table

    ktable = kernel_table()
    ktable.check()
    cells = []
    listed = {d.name for d in ktable.candidates_for(plat)}
    for s in sorted(catalog.schemes.values(), key=lambda s: s.name):
        try:
            chosen = resolve(s, plat).kernel
        except ResolutionError:
            chosen = None
        for entry in ktable.entries:
            decl = entry.decl
            ok, why = accepts(decl, s.contract, plat)
            if ok and not decl.runs_on(plat):
                ok, why = False, f"does not run on {plat}"
            elif ok and decl.name not in listed:
                ok, why = False, f"not a candidate on {plat}"
            cells.append({
                "scheme": s.name, "kernel": decl.name, "accepted": ok, "reason": why,
                "chosen": decl.name == chosen, "native": decl.is_native_on(plat),
                "verified_on_hardware": ok and decl.is_verified_on(plat),
                "source": entry.source,
            })
    return cells


def _matrix_kernels(ktable) -> list[dict[str, Any]]:
    return [{"name": e.decl.name, "summary": e.decl.summary, "source": e.source,
             "impl": e.decl.impl} for e in ktable.entries]


def _matrix_plugins(ktable) -> dict[str, Any]:
    from kernels.select.kernel_table import ENTRY_POINT_GROUP

    return {"group": ENTRY_POINT_GROUP, "enabled": ktable.plugins_enabled,
            "entry_points": [{"dist": o.dist, "entry_point": o.entry_point, "value": o.value}
                             for o in ktable.plugins],
            "errors": [str(p) for p in ktable.problems], "status": ktable.status()}


def matrix_command(args: argparse.Namespace) -> int:
    import sys

    from kernels.select.kernel_table import BUILTIN, BUILTIN_MODULE, kernel_table

    catalog = catalog_of(args)
    plat, how = _platform(args)
    ktable = kernel_table()
    if ktable.problems:  # one line each, no matrix: resolve would refuse every scheme
        for p in ktable.problems:
            print(f"registry: error: {p}", file=sys.stderr)
        if args.json:
            print_json({"platform": str(plat), "cells": [], "kernels": _matrix_kernels(ktable),
                        "plugins": _matrix_plugins(ktable)})
        return 1
    cells = matrix_cells(catalog, plat)
    if args.json:
        print_json({"platform": str(plat), "cells": cells, "kernels": _matrix_kernels(ktable),
                    "plugins": _matrix_plugins(ktable)})
        return 0
    names = [e.decl.name for e in ktable.entries]
    rows = [["scheme"] + names]
    by = {(c["scheme"], c["kernel"]): c for c in cells}
    for s in sorted(catalog.schemes):
        row = [s]
        for n in names:
            c = by[(s, n)]
            if not c["accepted"]:
                row.append("-")
                continue
            mark = ("native" if c["native"] else "emul") + ("" if c["verified_on_hardware"] else "*")
            row.append(("[" + mark + "]") if c["chosen"] else mark)
        rows.append(row)
    print(f"platform: {plat} ({how})\n")
    print(table(rows))
    print("\n[...] the kernel resolve picks; native / emul: runs on MX hardware or emulates; "
          "* not verified on hardware; - rejected (`registry matrix --json` or "
          "`registry resolve NAME` says why)")
    builtin = [e.decl.name for e in ktable.entries if e.source == BUILTIN]
    print(f"kernel sources: {', '.join(builtin)}: {BUILTIN} ({BUILTIN_MODULE})")
    for e in ktable.entries:
        if e.source != BUILTIN:
            print(f"  {e.decl.name}: {e.source}")
    print(ktable.status())
    return 0
