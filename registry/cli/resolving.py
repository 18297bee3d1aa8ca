"""The kernel subcommands: resolve (a scheme, --all, or every group of a checkpoint config with
--from-config) for each kind of kernel (--kind linear / moe / qdq), and the cells of `registry
matrix` (registry/cli/matrix.py prints them). torch is imported only to detect the platform."""
from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any, Optional

from kernels.select.declarations import KINDS
from kernels.select.resolve import (ENV_DISABLED, Resolution, ResolutionError, env_disabled,
                                    accepts, check_kernel_names, resolve)
from kernels.spec.contract import QuantKey
from kernels.spec.platform import KNOWN_PLATFORMS, Platform, detect
from registry.cli.common import UsageError, catalog_of
from registry.cli.output import print_json, table
from registry.contract import Scheme
from registry.errors import UnknownSchemeError
from registry.files.catalog import Catalog

#: What a kernel of each kind runs (resolve / matrix --kind).
KIND_WHAT: dict[str, str] = {"linear": "a layer's matmul", "moe": "grouped MoE experts",
                             "qdq": "the activation's quantize-dequantize"}
WEIGHT_ONLY_QDQ = "weight-only (activation none): no activation key for a qdq kernel to quantize"


def _mode(res: Optional[Resolution], err: str | None) -> str:
    """`native` / `emulated`, then every deviation kind in capitals (FALLBACK, DISABLED...);
    `weight-only` for a weight-only scheme's qdq view (nothing resolved)."""
    if res is None:
        return "weight-only"
    if err and res.kernel is None:
        return "ERROR"
    c = res.chosen
    words = ["native" if c and c.native else "emulated"]
    words += [d.kind.upper() for d in res.deviations]
    return ("ERROR: " if err else "") + " ".join(words)


def platform_arg(args: argparse.Namespace) -> tuple[Platform, str]:
    """--platform (a usage error if unknown), else this machine's: (platform, how)."""
    if args.platform:
        try:
            return Platform.parse(args.platform), "named"
        except ValueError as e:
            raise UsageError(f"registry: error: --platform: {e}") from None
    return detect(), "detected"


def kind_argument(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--kind", choices=KINDS, default="linear",
                   help=f"which kind of kernel {what}: " + "; ".join(
                       f"{k}: {w}" for k, w in KIND_WHAT.items()) + " (default: linear)")


def _kernel_list(text: str | None) -> list[str]:
    return [k.strip() for k in (text or "").split(",") if k.strip()]


def _check_kernels(args: argparse.Namespace) -> None:
    """Unknown --disable / --force names, and a --force kernel of another kind than --kind, are
    usage errors naming the option used (plugin kernels count as known; a broken plugin is
    reported by resolve itself)."""
    from kernels.select.kernel_table import kernel_table

    kinds = {e.decl.name: e.decl.kind for e in kernel_table().entries}
    try:
        check_kernel_names(_kernel_list(args.disable), "--disable", kinds)
        check_kernel_names([] if args.force is None else [args.force], "--force", kinds)
        check_kernel_names(env_disabled(), ENV_DISABLED, kinds)
    except ValueError as e:
        raise UsageError(f"registry: error: {e}") from None
    if args.force is not None and kinds[args.force] != args.kind:
        raise UsageError(f"registry: error: --force {args.force}: a {kinds[args.force]} kernel, "
                         f"not a {args.kind} one; pass --kind {kinds[args.force]} with it "
                         f"(kinds: {', '.join(KINDS)})")


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
    kind_argument(p, "to resolve (qdq: the scheme's activation key)")
    p.add_argument("--strict", action="store_true",
                   help="a fallback to an emulated kernel, --force, or a --disable that "
                        "changes the kernel is an error (also REGISTRY_STRICT=1)")
    p.add_argument("--disable", metavar="K,...", help="kernels to skip, any kind (also "
                                                      "REGISTRY_DISABLED_KERNELS)")
    p.add_argument("--force", metavar="K", help="use this kernel (of --kind) or fail")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--from-config", metavar="PATH",
                   help="map every layer group of a Hugging Face config.json (Quark, "
                        "compressed-tensors, AutoRound or gpt-oss mxfp4 quantization_config) "
                        "to a scheme and resolve it; exit 1 when a group maps to no scheme or "
                        "does not resolve (--json: a refused config is one row with its error)")
    p.add_argument("--tp", metavar="N", nargs="?", const="1,2,4,8", default=None,
                   help="with --from-config: can each projection of a block (sized by the "
                        "config) split N ways without cutting an MX block or a packed byte, "
                        "and what padding fixes it (e.g. --tp 4, --tp 2,8; bare --tp: 1,2,4,8; "
                        "--json then prints {\"groups\": [...], \"tp\": [...]})")


def _resolve_one(scheme: Scheme, plat: Platform, args
                 ) -> tuple[Optional[Resolution], str | None]:
    """The scheme's resolution for --kind (qdq: of its activation key, labelled with the
    scheme) and the error, if any; (None, None) for a weight-only scheme's qdq view."""
    kind = args.kind
    subject = scheme.activation if kind == "qdq" else scheme
    if subject is None:
        return None, None
    try:
        res, err = resolve(subject, plat, kind=kind, strict=args.strict,
                           disabled=_kernel_list(args.disable), force=args.force), None
    except ResolutionError as e:
        res, err = e.resolution, str(e)
    return (replace(res, scheme=scheme.name) if kind == "qdq" else res), err


def _result_dict(scheme: Scheme, res: Optional[Resolution], err: str | None,
                 plat: Platform) -> dict[str, Any]:
    if res is not None:
        return dict(res.to_dict(), error=err)
    return {"scheme": scheme.name, "kind": "qdq", "platform": str(plat), "key": None,
            "kernel": None, "native": False, "fallback": False, "forced": False, "disabled": [],
            "deviations": [], "candidates": [], "note": WEIGHT_ONLY_QDQ, "error": None}


def _print_resolution(res: Resolution, scheme: Scheme, how: str, error: str | None) -> None:
    aliases = f" (aliases: {', '.join(scheme.aliases)})" if scheme.aliases else ""
    kernel = "NONE" if res.kernel is None else f"{res.kernel} ({_mode(res, None)})"
    rows = [["scheme", f"{scheme.name}{aliases}"], ["source", scheme.location],
            ["platform", f"{res.platform} ({how})"]]
    if res.kind != "linear":
        rows.append(["kind", f"{res.kind} ({KIND_WHAT[res.kind]})"])
    if res.kind == "qdq":
        rows.append(["activation", str(res.contract)])
    else:
        act = res.contract.activation
        rows += [["weight", str(res.contract.weight)],
                 ["activation", "none (weight-only)" if act is None else str(act)]]
    rows += [["kernel", kernel]] + [["deviation", str(d)] for d in res.deviations]
    print(table(rows))
    print("\ncandidates, in priority order:")
    cand = [["->" if c.accepted else "  ", c.kernel, c.reason] for c in res.candidates]
    print(table(cand) if cand else "  (none)")
    if error:
        print(f"\nerror: {error}")


def _all_row(s: Scheme, res: Optional[Resolution], err: str | None) -> list[str]:
    if res is None or res.kind == "qdq":
        key = "none" if res is None else str(res.contract)
        return [s.name, (res and res.kernel) or "-", _mode(res, err), key]
    act = res.contract.activation
    return [s.name, res.kernel or "-", _mode(res, err), str(res.contract.weight),
            "none" if act is None else str(act)]


def resolve_command(args: argparse.Namespace) -> int:
    if args.from_config is not None and (args.all or args.scheme):
        raise UsageError("registry resolve: error: --from-config PATH takes the schemes from the "
                         "config; drop NAME|ALIAS / --all")
    if args.from_config is None and args.all == bool(args.scheme):
        raise UsageError("registry resolve: error: give one scheme NAME|ALIAS or --all "
                         "(or --from-config PATH)")
    if args.tp is not None and args.from_config is None:
        raise UsageError("registry resolve: error: --tp goes with --from-config PATH (for a "
                         "checkpoint's stored shapes: `registry inspect DIR --tp`)")
    if args.from_config is not None and args.kind != "linear":
        raise UsageError("registry resolve: error: --from-config resolves the config's linear "
                         f"layers; drop --kind {args.kind}")
    _check_kernels(args)
    if args.from_config is not None:
        return _run_from_config(args)
    catalog = catalog_of(args)
    plat, how = platform_arg(args)
    schemes = (sorted(catalog.schemes.values(), key=lambda s: s.name) if args.all
               else [_scheme(catalog, args.scheme)])
    results = [(s, *_resolve_one(s, plat, args)) for s in schemes]
    failed = sum(err is not None for _, _, err in results)
    if args.json:
        out = [_result_dict(s, res, err, plat) for s, res, err in results]
        print_json(out if args.all else out[0])
    elif args.all:
        head = ["scheme", "kernel", "mode"] + (["activation key"] if args.kind == "qdq"
                                               else ["weight", "activation"])
        kind = "" if args.kind == "linear" else f"; kind: {args.kind} ({KIND_WHAT[args.kind]})"
        print(f"platform: {plat} ({how}){kind}\n")
        print(table([head] + [_all_row(*r) for r in results]))
        for s, _, err in results:
            if err:
                print(f"\n{s.location}: error: {err}")
    elif results[0][1] is None:
        print(f"{results[0][0].name}: {WEIGHT_ONLY_QDQ}")
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


def _refused_row(config: str, error: str, plat: Platform) -> dict[str, Any]:
    """The `--json` row of a config refused as a whole (status "refused"), with the keys of a
    group's row, so a reader needs no second shape."""
    return {"config": config, "producer": None, "path": None, "kind": None, "targets": [],
            "status": "refused", "scheme": None, "weight": None, "activation": None,
            "error": error, "note": None, "line": None, "caveats": [], "platform": str(plat),
            "kernel": None, "native": False, "fallback": False, "forced": False,
            "deviations": [], "candidates": []}


def _config_splits(args: argparse.Namespace) -> list:
    """`--tp`: the split checks of every projection the config sizes (ValueError: bad --tp,
    or a config without the model's sizes)."""
    from registry.checkpoints.config_shapes import projection_shapes
    from registry.checkpoints.tp import parse_tps, split_table
    from registry.configs.hf_config import load_config

    tps = parse_tps(args.tp)
    src, data = load_config(args.from_config)
    return split_table(projection_shapes(data, str(args.from_config)), tps)


def _run_from_config(args: argparse.Namespace) -> int:
    """`resolve --from-config`: one row per config group, the candidates of each distinct
    scheme, then one line per group that did not map or resolve."""
    import sys

    from registry.configs.hf_config import ConfigError, schemes_from_config

    catalog = catalog_of(args)
    plat, how = platform_arg(args)
    try:
        groups = schemes_from_config(args.from_config, catalog)
    except ConfigError as e:
        error = str(e).replace("\n", " ")
        print(f"registry: error: {error}", file=sys.stderr)
        if args.json:  # a refusal is still JSON: one row, the groups' keys, the error
            print_json([_refused_row(args.from_config, error, plat)])
        return 2 if e.unreadable else 1
    try:
        splits = _config_splits(args) if args.tp is not None else None
    except ValueError as e:
        print(f"registry: error: {e}", file=sys.stderr)
        return 2
    results = _resolve_groups(groups, plat, args)
    errors = list(dict.fromkeys(err for _, _, err in results if err))
    if args.json:
        rows = [_group_dict(*r) for r in results]
        print_json(rows if splits is None else
                   {"groups": rows, "tp": [s.to_dict() for row in splits for s in row]})
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
    if splits:
        print("\ntensor parallel, per block as the config sizes it (row: K split, K/tp a "
              "multiple of 32; column: N split):")
        print(table([["projection", "N x K", "split"] + [f"tp={s.tp}" for s in splits[0]]]
                    + [[r[0].layer, f"{r[0].n}x{r[0].k}", r[0].kind] + [s.cell for s in r]
                       for r in splits]))
    for g in groups:
        for c in g.caveats:
            print(f"\nnote: {g.where}: {g.path}: {c}")
    for e in errors:
        print(f"\nerror: {e}")
    return 1 if errors else 0


# --- the matrix's cells -------------------------------------------------------------------------

def matrix_rows(catalog: Catalog, kind: str) -> list[tuple[dict[str, Any], Any]]:
    """(what names the row, what is resolved) per row of the `kind` matrix: linear / moe, one
    per scheme; qdq, one per activation key, the dispatcher's then any other a scheme has, with
    the schemes that have it."""
    schemes = sorted(catalog.schemes.values(), key=lambda s: s.name)
    if kind != "qdq":
        return [({"scheme": s.name}, s) for s in schemes]
    from kernels.select.activation_keys import DISPATCH_KEYS

    users: dict[QuantKey, list[str]] = {k: [] for k in sorted(DISPATCH_KEYS, key=str)}
    for s in schemes:
        if s.activation is not None:
            users.setdefault(s.activation, []).append(s.name)
    return [({"key": str(k), "schemes": names}, k) for k, names in users.items()]


def matrix_cells(catalog: Catalog, plat: Platform, kind: str = "linear") -> list[dict[str, Any]]:
    """One cell per (row, kernel of `kind`) (rows: matrix_rows): accepted or the reason,
    chosen, verified on hardware, and where the kernel came from (built-in or a plugin).
    KernelPluginError if a plugin is broken."""
    from kernels.select.kernel_table import kernel_table

    ktable = kernel_table()
    ktable.check()
    entries = [e for e in ktable.entries if e.decl.kind == kind]
    listed = {d.name for d in ktable.candidates_for(plat, kind)}
    cells = []
    for row, subject in matrix_rows(catalog, kind):
        try:
            chosen = resolve(subject, plat, kind=kind).kernel
        except ResolutionError:
            chosen = None
        for entry in entries:
            decl = entry.decl
            ok, why = accepts(decl, getattr(subject, "contract", subject), plat)
            if ok and not decl.runs_on(plat):
                ok, why = False, f"does not run on {plat}"
            elif ok and decl.name not in listed:
                ok, why = False, f"not a candidate on {plat}"
            cells.append({
                **row, "kernel": decl.name, "accepted": ok, "reason": why,
                "chosen": decl.name == chosen, "native": decl.is_native_on(plat),
                "verified_on_hardware": ok and decl.is_verified_on(plat),
                "source": entry.source,
            })
    return cells
