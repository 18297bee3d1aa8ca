"""`registry inspect DIR`: a checkpoint's layers, tensors, schemes, kernels and findings.

Why: one command answers "is this checkpoint what its config says, and what runs it where"
before it is served (registry.checkpoints.inspect does the work; this module parses and prints).
Exit 0 clean, 1 findings (or a checkpoint that cannot be read), 2 usage.
"""
from __future__ import annotations

import argparse
from collections import defaultdict

from kernels.spec.platform import KNOWN_PLATFORMS


def inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", metavar="DIR",
                   help="checkpoint directory: config.json + *.safetensors (sharded with "
                        "model.safetensors.index.json)")
    p.add_argument("--platform", metavar="P", action="append", default=[],
                   help=f"what-if platform for the kernel column (repeatable), one of "
                        f"{', '.join(KNOWN_PLATFORMS)}; default: this machine's")
    p.add_argument("--tp", metavar="N", nargs="?", const="1,2,4,8", default=None,
                   help="tensor-parallel check: can each layer split N ways without cutting an "
                        "MX block or a packed byte (e.g. --tp 4, --tp 2,8; bare --tp: 1,2,4,8)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _print(report) -> None:
    from registry.cli.output import table

    print(f"checkpoint: {report.directory} ({report.format}; {len(report.files)} file(s))")
    print(f"platforms: {', '.join(report.platforms)}\n")
    groups = defaultdict(list)
    for layer in report.layers:
        groups[(layer.group or "-", layer.scheme or "-", layer.kind)].append(layer)
    rows = [[g, s, k, str(len(ls)), str(sum(t["bytes"] for x in ls for t in x.tensors))]
            for (g, s, k), ls in sorted(groups.items())]
    print(table([["config entry", "scheme", "stored", "layers", "bytes"]] + rows))
    rows = []
    for layer in report.layers:
        kernels = "; ".join(f"{p}: {k}" for p, k in layer.kernels.items()) or "-"
        for i, t in enumerate(layer.tensors):
            rows.append([layer.name if i == 0 else "", layer.scheme or "-" if i == 0 else "",
                         t["name"].removeprefix(layer.name), t["dtype"],
                         "x".join(map(str, t["shape"])), str(t["bytes"]),
                         kernels if i == 0 else ""])
    print()
    print(table([["layer", "scheme", "tensor", "dtype", "shape", "bytes", "kernel"]] + rows))
    if report.other:
        total = sum(t["bytes"] for t in report.other)
        print(f"\n{len(report.other)} other tensors ({total} bytes): "
              f"{', '.join(t['name'] for t in report.other[:6])}"
              f"{', ...' if len(report.other) > 6 else ''}")
    if report.tps:
        rows = [[layer.name, layer.splits[0].kind] + [s.cell for s in layer.splits]
                for layer in report.layers if layer.splits]
        print("\ntensor parallel (row: K split, K/tp a multiple of 32; column: N split):")
        print(table([["layer", "split"] + [f"tp={n}" for n in report.tps]] + rows))
    print()
    for finding in report.findings:
        print(f"finding: {finding}")
    print("ok: no findings" if not report.findings else f"{len(report.findings)} finding(s)")


def inspect_command(args: argparse.Namespace) -> int:
    from registry.checkpoints.inspect import inspect_checkpoint
    from registry.checkpoints.tp import parse_tps
    from registry.cli.common import catalog_of
    from registry.cli.output import print_json

    try:
        tps = parse_tps(args.tp) if args.tp is not None else ()
        for plat in args.platform:
            if plat not in KNOWN_PLATFORMS:
                raise ValueError(f"--platform: unknown platform {plat!r}; one of "
                                 f"{', '.join(KNOWN_PLATFORMS)}")
    except ValueError as e:
        print(f"registry: error: {e}")
        return 2
    try:
        report = inspect_checkpoint(args.directory, platforms=args.platform, tps=tps,
                                    catalog=catalog_of(args) if hasattr(args, "schemes") else None)
    except (ValueError, OSError) as e:
        message = " ".join(str(e).split())
        if args.json:
            print_json({"directory": args.directory, "ok": False, "error": message})
        else:
            print(f"registry inspect: {message}")
        return 1
    if args.json:
        print_json(report.to_dict())
    else:
        _print(report)
    return 1 if report.findings else 0


__all__ = ["inspect_arguments", "inspect_command"]
