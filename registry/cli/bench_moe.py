"""`registry bench --moe`: time MoE layers (the kernel resolve picks, routing included) against
bf16 torch._grouped_mm with the same routing, on this machine's GPU.

The arguments are checked first (shapes, tokens, schemes, the output paths, matplotlib for
--plot; --shapes and --kernels belong to the linear benchmark and are refused with --moe), then
torch and the GPU, all before any work, as `registry bench` does. The runner is
registry.machine.bench_moe.
"""
from __future__ import annotations

import argparse
import sys

from registry.cli.bench import (
    _fail, _num, check_outputs, checked_catalog, gpu_device, parse_ms, write_report,
)
from registry.cli.bench_plot import MOE
from registry.cli.output import table
from registry.machine import bench_moe


def moe_command(args: argparse.Namespace) -> int:
    for option, value in (("--shapes", args.shapes), ("--kernels", args.kernels)):
        if value is not None:
            raise _fail(f"{option} is the linear benchmark's; with --moe give the MoE shapes "
                        f"as --moe {bench_moe.SPEC},... (the kernel is the one resolve picks)")
    try:
        shapes = bench_moe.parse_moe_shapes(args.moe) if args.moe \
            else list(bench_moe.DEFAULT_MOE_SHAPES)
        tokens = parse_ms(args.m) if args.m is not None else list(bench_moe.DEFAULT_TOKENS)
    except ValueError as e:
        raise _fail(str(e)) from None
    catalog = checked_catalog(args)
    check_outputs(args)
    device = gpu_device()
    command = " ".join(["registry", "bench", *args.scheme_names, "--moe",
                        ",".join(map(str, shapes)), "--m", ",".join(map(str, tokens)),
                        "--seed", str(args.seed)])
    result = bench_moe.run_moe_bench(args.scheme_names or None, shapes, tokens, device=device,
                                     catalog=catalog, seed=args.seed, command=command,
                                     progress=None if args.quiet else _progress)
    write_report(result.to_dict(), args, render_moe, MOE)
    if not result.rows:
        print("registry bench --moe: nothing ran: no MoE kernel runs the schemes here; the "
              "reasons are in the report's skipped list", file=sys.stderr)
    return 1 if result.failed or not result.rows else 0


def _progress(event: str, index: int, total: int, row) -> None:
    """A line on stderr per finished row."""
    if event != "row":
        return
    how = (f"{_num(row.graph_us, '.1f')} us graph, {_num(row.eager_us, '.1f')} us eager, "
           f"x{_num(row.ratio, '.3g')} vs bf16" if row.status == "ok" else "; ".join(row.notes))
    print(f"[{index + 1}/{total}] {row.scheme} E={row.experts} top-{row.top_k} "
          f"{row.n}x{row.k} T={row.tokens} {row.kernel}: {row.status} ({how})",
          file=sys.stderr, flush=True)


def render_moe(data: dict) -> str:
    """The human report: environment line, table, notes, skipped, legend."""
    env = data["environment"]
    lines = [f"# registry bench --moe on {env['device']} ({env['platform']}), torch "
             f"{env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, driver "
             f"{env['driver']}, {env['date']}",
             f"bf16 tokens; graph timing: {env['graph_timing']}", ""]
    rows = [["scheme", "kernel", "qdq", "E", "top-k", "N x K", "T", "graph us", "eager us",
             "bf16 us", "x bf16", "check err", "status"]]
    for r in data["rows"]:
        graph = r["graph_us"] is not None and r["bf16_graph_us"] is not None  # ratio's basis
        rows.append([r["scheme"], r["kernel"], r["qdq"] or "-", str(r["experts"]),
                     str(r["top_k"]), f"{r['n']}x{r['k']}", str(r["tokens"]),
                     _num(r["graph_us"], ".1f"), _num(r["eager_us"], ".1f"),
                     _num(r["bf16_graph_us"] if graph else r["bf16_eager_us"], ".1f"),
                     _num(r["ratio"], ".3g"), _num(r["err"], ".1e"), r["status"]])
    lines.append(table(rows) if data["rows"] else "(no rows: nothing to run, see skipped)")
    notes: dict[tuple, list[str]] = {}
    for r in data["rows"]:
        for note in r["notes"]:
            key = (r["scheme"], f"E={r['experts']} top-{r['top_k']} {r['n']}x{r['k']}", note)
            notes.setdefault(key, []).append(str(r["tokens"]))
    if notes:
        lines += ["", "notes:"] + [f"  {s} {shape} T={','.join(t)}: {note}"
                                   for (s, shape, note), t in notes.items()]
    if data["skipped"]:
        lines += ["", "skipped:"] + [f"  {s['scheme']} ({s['shape']}): {s['reason']}"
                                     for s in data["skipped"]]
    lines += ["", "x bf16 = bf16 experts' time (torch._grouped_mm, the same routing) / the "
                  "layer's time, same shape, same run (>1: faster); both include the routing. "
                  "graph (CUDA-graph replay) where both capture, else eager (per call, L2 "
                  "flushed). check err = max per-token relative error against the reference "
                  f"backend (FAIL above {env['check_tol']:.1e})."]
    failed = [r for r in data["rows"] if r["status"] != "ok"]
    if failed:
        lines.append(f"{len(failed)} row(s) FAILED or raised: see status and notes")
    return "\n".join(lines)


__all__ = ["moe_command", "render_moe"]
