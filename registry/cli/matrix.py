"""`registry matrix`: on a platform, what each kernel of one kind accepts, which one resolve
picks, and whether it was verified on hardware. --kind linear (default): schemes x linear
kernels; moe: schemes x MoE kernels; qdq: activation keys (the dispatcher's, and each scheme's)
x QDQ kernels. The cells are registry/cli/resolving.py's `matrix_cells`."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from kernels.spec.platform import KNOWN_PLATFORMS
from registry.cli.common import catalog_of
from registry.cli.output import print_json, table
from registry.cli.resolving import kind_argument, matrix_cells, platform_arg

LEGEND = ("[...] the kernel resolve picks; native / emul: runs on MX hardware or emulates; "
          "* not verified on hardware; - rejected ")


def matrix_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--platform", metavar="P", help=f"what-if platform, one of "
                   f"{', '.join(KNOWN_PLATFORMS)}; default: this machine")
    kind_argument(p, "to show (qdq: rows are activation keys)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _matrix_kernels(entries) -> list[dict[str, Any]]:
    return [{"name": e.decl.name, "summary": e.decl.summary, "source": e.source,
             "impl": e.decl.impl} for e in entries]


def _matrix_plugins(ktable) -> dict[str, Any]:
    from kernels.select.kernel_table import ENTRY_POINT_GROUP

    return {"group": ENTRY_POINT_GROUP, "enabled": ktable.plugins_enabled,
            "entry_points": [{"dist": o.dist, "entry_point": o.entry_point, "value": o.value}
                             for o in ktable.plugins],
            "errors": [str(p) for p in ktable.problems], "status": ktable.status()}


def _mark(cell: dict[str, Any]) -> str:
    if not cell["accepted"]:
        return "-"
    mark = ("native" if cell["native"] else "emul") + ("" if cell["verified_on_hardware"] else "*")
    return f"[{mark}]" if cell["chosen"] else mark


def _rows(cells: list[dict[str, Any]], names: list[str], kind: str) -> list[list[str]]:
    """The table: a header, then one row per scheme (qdq: per key, its schemes last)."""
    label = "key" if kind == "qdq" else "scheme"
    by = {(c[label], c["kernel"]): c for c in cells}
    order = list(dict.fromkeys(c[label] for c in cells))
    if kind != "qdq":
        return [["scheme"] + names] + [[s] + [_mark(by[(s, n)]) for n in names]
                                       for s in sorted(order)]
    users = {c["key"]: c["schemes"] for c in cells}
    return [["activation key"] + names + ["schemes"]] + [
        [k] + [_mark(by[(k, n)]) for n in names] + [", ".join(users[k]) or "-"] for k in order]


def matrix_command(args: argparse.Namespace) -> int:
    from kernels.select.kernel_table import BUILTIN, BUILTIN_MODULE, kernel_table

    catalog = catalog_of(args)
    plat, how = platform_arg(args)
    ktable = kernel_table()
    entries = [e for e in ktable.entries if e.decl.kind == args.kind]
    head = {"platform": str(plat), "kind": args.kind}
    if ktable.problems:  # one line each, no matrix: resolve would refuse every scheme
        for p in ktable.problems:
            print(f"registry: error: {p}", file=sys.stderr)
        if args.json:
            print_json(dict(head, cells=[], kernels=_matrix_kernels(entries),
                            plugins=_matrix_plugins(ktable)))
        return 1
    cells = matrix_cells(catalog, plat, args.kind)
    if args.json:
        print_json(dict(head, cells=cells, kernels=_matrix_kernels(entries),
                        plugins=_matrix_plugins(ktable)))
        return 0
    names = [e.decl.name for e in entries]
    kind = "" if args.kind == "linear" else f"; kind: {args.kind}"
    print(f"platform: {plat} ({how}){kind}\n")
    print(table(_rows(cells, names, args.kind)))
    flag = "" if args.kind == "linear" else f" --kind {args.kind}"
    print(f"\n{LEGEND}(`registry matrix{flag} --json` or `registry resolve NAME{flag}` says why)")
    builtin = [e.decl.name for e in entries if e.source == BUILTIN]
    print(f"kernel sources: {', '.join(builtin)}: {BUILTIN} ({BUILTIN_MODULE})")
    for e in entries:
        if e.source != BUILTIN:
            print(f"  {e.decl.name}: {e.source}")
    print(ktable.status())
    return 0
