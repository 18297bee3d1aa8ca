"""`registry bench`: time the kernels of schemes against bf16 F.linear on this machine's GPU.

Arguments are checked first (schemes, shapes, M, kernels: known, implementing a named scheme,
fitting every shape; output paths writable, matplotlib for --plot), then torch and the GPU:
any of them wrong stops the command with one line and exit 2 before any work. The runner is
registry.machine.bench; this module adds the progress line, the table and the JSON / file
outputs (the plot: registry.cli.bench_plot). torch and matplotlib are imported only inside
`bench_command`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from registry.cli.bench_plot import LINEAR, PlotSpec, plot_results
from registry.cli.common import UsageError, catalog_of
from registry.cli.output import print_json, table
from registry.errors import UnknownSchemeError
from registry.machine import bench, bench_moe

PLOT_INSTALL_HINT = "install matplotlib (pip install 'ocp-mx-registry[plot]')"


def bench_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("scheme_names", nargs="*", metavar="SCHEME",
                   help="scheme names or aliases (default: every scheme of the catalog)")
    p.add_argument("--shapes", metavar="NxK,...",
                   help="weight shapes N x K (default: "
                        + ",".join(f"{n}x{k}" for n, k in bench.DEFAULT_SHAPES) + ")")
    p.add_argument("--m", metavar="M,...", help="activation rows M (default: "
                   + ",".join(map(str, bench.DEFAULT_MS)) + ")")
    p.add_argument("--kernels", metavar="K,...",
                   help="force these kernels (each where it accepts the scheme; the others are "
                        "listed as skipped with the reason); default: the kernel `registry "
                        "resolve` picks on this machine")
    p.add_argument("--out", metavar="FILE", help="write rows + environment as JSON here")
    p.add_argument("--plot", metavar="FILE", help="write a PNG of the ratios to bf16 here "
                                                  "(needs matplotlib)")
    p.add_argument("--json", action="store_true", help="print the JSON to stdout, not the table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs")
    p.add_argument("--moe", metavar="E:TOPK:NxK,...", nargs="?", const="",
                   help="time MoE layers instead (MXGroupedExperts, routing included) against "
                        "bf16 torch._grouped_mm with the same routing: E experts, top-k, each "
                        "N x K (default: " + ",".join(map(str, bench_moe.DEFAULT_MOE_SHAPES))
                        + "); --m is then tokens T (default: "
                        + ",".join(map(str, bench_moe.DEFAULT_TOKENS)) + ")")


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'8192x8192,28672x8192' -> [(8192, 8192), (28672, 8192)] (N x K; K a multiple of 32)."""
    shapes: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        n, sep, k = (t.strip() for t in part.lower().partition("x"))
        if not (sep and n.isascii() and n.isdigit() and k.isascii() and k.isdigit()):
            raise ValueError(f"--shapes: {part!r} is not NxK (e.g. --shapes 8192x8192,"
                             "28672x8192: N output features x K input features)")
        if int(n) <= 0 or int(k) <= 0:
            raise ValueError(f"--shapes: {part!r}: N and K must be positive (e.g. 8192x8192)")
        if int(k) % 32:
            raise ValueError(f"--shapes: {part!r}: K={int(k)} is not a multiple of the MX block "
                             f"32; use e.g. {max(32, int(k) // 32 * 32)}")
        if (int(n), int(k)) in shapes:
            raise ValueError(f"--shapes: {part!r} is given twice; name each shape once")
        shapes.append((int(n), int(k)))
    return shapes


def parse_ms(text: str) -> list[int]:
    """'1,16,4096' -> [1, 16, 4096] (positive)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not (part.isascii() and part.isdigit()) or int(part) <= 0:
            raise ValueError(f"--m: {part!r} is not a positive integer (e.g. --m 1,16,4096)")
        if int(part) in out:
            raise ValueError(f"--m: {part} is given twice; name each M once")
        out.append(int(part))
    return out


def parse_grid(shapes: str | None, ms: str | None, device: str,
               cuda_ms: str) -> tuple[list[tuple[int, int]], list[int]]:
    """The tools' --shape(s) / --m, with their defaults: 8192x8192 and `cuda_ms` on a GPU, a
    64x128 layer at M = 3 on a CPU (a logic check). Raises ValueError naming the option."""
    cuda = device.startswith("cuda")
    return (parse_shapes(shapes or ("8192x8192" if cuda else "64x128")),
            parse_ms(ms or (cuda_ms if cuda else "3")))


def split_list(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def gpu_device() -> str:
    """'cuda' when torch sees a GPU; else the one-line refusal (UsageError, exit 2)."""
    try:
        import torch
    except ImportError as e:
        raise _fail(f"torch does not import ({type(e).__name__}: {e}); the benchmark runs "
                    "torch kernels on a GPU: install a CUDA or ROCm build of torch") from None

    if torch.cuda.is_available():
        return "cuda"
    hip = getattr(torch.version, "hip", None)
    build = (f"built for CUDA {torch.version.cuda}" if torch.version.cuda
             else f"built for ROCm {hip}" if hip else "a CPU-only build")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    hidden = f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    raise UsageError(
        f"registry bench: error: no GPU: torch.cuda.is_available() is False (torch "
        f"{torch.__version__}, {build}{hidden}); the benchmark times GPU kernels against bf16 "
        "F.linear, so run it on a machine with an NVIDIA (CUDA) or AMD (ROCm) GPU and a "
        "matching torch build, e.g. your lab's GPU `device` machine; on a CPU, "
        "registry.machine.bench.run_bench(device='cpu') checks the logic only "
        "(tests/registry/machine/test_bench.py)")


def checked_catalog(args: argparse.Namespace):
    """The catalog with --schemes, every named scheme in it (else the one-line usage error)."""
    catalog = catalog_of(args)
    for name in args.scheme_names:
        try:
            catalog.get(name)
        except UnknownSchemeError as e:
            raise _fail(str(e)) from None
    return catalog


def _fail(message: str) -> UsageError:
    return UsageError(f"registry bench: error: {message}".replace("\n", " "))


def _check_output_path(option: str, path: str | None) -> None:
    """The file can be written: its directory exists and is writable, it is no directory."""
    if path is None:
        return
    if not path.strip():
        raise _fail(f"{option} is empty; give a file name")
    target = Path(path).expanduser()
    parent = target.resolve().parent
    if target.is_dir():
        raise _fail(f"{option} {path} is a directory; give a file name inside it")
    if not parent.is_dir():
        raise _fail(f"{option} {path}: directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists()
                                                     and not os.access(target, os.W_OK)):
        what = f"file {target}" if target.exists() else f"directory {parent}"
        raise _fail(f"{option} {path}: {what} is not writable; choose another path")


def _check_forced_kernels(catalog, schemes: list[str], kernels: list[str],
                          shapes: list[tuple[int, int]]) -> None:
    """--kernels that could never run a row are usage errors: one that implements none of the
    schemes, a named scheme none of them implements, a shape outside a kernel's limits."""
    from kernels.select.kernel_table import kernel_by_name
    from kernels.select.resolve import accepts

    picked = [catalog.get(s) for s in schemes] if schemes else list(catalog.schemes.values())
    decls = [kernel_by_name(k) for k in kernels]
    for d in decls:
        if not any(accepts(d, s.contract)[0] for s in picked):
            which = ", ".join(sorted({s.name for s in picked})) if schemes else "any scheme"
            raise _fail(f"--kernels: {d.name} implements none of {which} (e.g. "
                        f"{picked[0].name}: {accepts(d, picked[0].contract)[1]}); see "
                        "`registry matrix`")
        for n, k in shapes:
            ok, why = d.check_limits(k, n, "bfloat16")
            if not ok:
                raise _fail(f"--shapes {n}x{k} does not fit --kernels {d.name}: {why} (K is "
                            f"in_features, N out_features); choose shapes that fit, or drop "
                            "the kernel")
    for name in schemes:
        s = catalog.get(name)
        if not any(accepts(d, s.contract)[0] for d in decls):
            raise _fail(f"scheme {s.name}: none of --kernels {', '.join(kernels)} implements "
                        f"it; see `registry resolve {s.name}` for the kernels that do")


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise _fail(f"--plot: {PLOT_INSTALL_HINT}") from None


def _command_line(args, shapes, ms) -> str:
    parts = ["registry", "bench", *args.scheme_names,
             "--shapes", ",".join(f"{n}x{k}" for n, k in shapes),
             "--m", ",".join(map(str, ms)), "--seed", str(args.seed)]
    if args.kernels:
        parts += ["--kernels", args.kernels]
    return " ".join(parts)


def bench_command(args: argparse.Namespace) -> int:
    if args.moe is not None:
        from registry.cli.bench_moe import moe_command
        return moe_command(args)
    try:
        shapes = parse_shapes(args.shapes) if args.shapes is not None \
            else list(bench.DEFAULT_SHAPES)
        ms = parse_ms(args.m) if args.m is not None else list(bench.DEFAULT_MS)
    except ValueError as e:
        raise _fail(str(e)) from None
    kernels = split_list(args.kernels) or None
    if args.kernels is not None and not kernels:
        raise _fail("--kernels is empty; name at least one kernel (see registry matrix)")
    if kernels and len(set(kernels)) != len(kernels):
        twice = next(k for k in kernels if kernels.count(k) > 1)
        raise _fail(f"--kernels: {twice} is given twice; name each kernel once")
    catalog = checked_catalog(args)
    from kernels.select.kernel_table import KernelPluginError, kernel_decls

    try:
        known = [d.name for d in kernel_decls()]
    except KernelPluginError as e:
        raise _fail(f"{e}") from None
    for name in kernels or ():
        if name not in known:
            raise _fail(f"--kernels: unknown kernel {name!r}; known kernels: {', '.join(known)}")
    if kernels:
        _check_forced_kernels(catalog, args.scheme_names, kernels, shapes)
    check_outputs(args)
    device = gpu_device()  # catalog_of has said every scheme-file problem on stderr

    progress = ProgressLine(sys.stderr, quiet=args.quiet)
    try:
        result = bench.run_bench(args.scheme_names or None, shapes, ms, kernels, device=device,
                                 catalog=catalog, seed=args.seed, progress=progress,
                                 command=_command_line(args, shapes, ms))
    finally:
        progress.close()
    write_report(result.to_dict(), args, render, LINEAR)
    if not result.rows:
        print("registry bench: nothing ran: every (scheme, shape, kernel) was skipped; the "
              "reasons are in the report's skipped list", file=sys.stderr)
    return 1 if result.failed or not result.rows else 0



def check_outputs(args: argparse.Namespace) -> None:
    """--out and --plot writable, two files, matplotlib importable for --plot: before any
    work (linear and MoE runs alike)."""
    _check_output_path("--out", args.out)
    _check_output_path("--plot", args.plot)
    if args.out and args.plot and Path(args.out).resolve() == Path(args.plot).resolve():
        raise _fail(f"--out and --plot name the same file {args.out}; give two files")
    if args.plot:
        require_matplotlib()


def write_report(data: dict, args: argparse.Namespace, render_text: Any,
                 plot: PlotSpec) -> None:
    """The report on stdout (the JSON with --json, else `render_text(data)`), in --out's file
    and drawn in --plot's (`plot` says how); linear and MoE runs alike."""
    if args.json:
        print_json(data)
    else:
        print(render_text(data))
    if args.out:
        Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    if args.plot:
        plot_results(data, args.plot, plot)
        print(f"wrote {args.plot}", file=sys.stderr)


# --- progress --------------------------------------------------------------------------------

class ProgressLine:
    """One updating line on a terminal; one line per finished row when the stream is not a
    terminal (logs); nothing when quiet."""

    def __init__(self, stream: TextIO, quiet: bool = False):
        self.stream = stream
        tty = bool(getattr(stream, "isatty", lambda: False)())
        self.mode = "off" if quiet else ("line" if tty else "rows")
        self._dirty = False

    def __call__(self, event: str, index: int, total: int, item: Any) -> None:
        if self.mode == "line" and event == "start":
            task, m = item
            self.stream.write(f"\r\x1b[K[{index + 1}/{total}] {task.scheme} {task.n}x{task.k} "
                              f"M={m} {task.kernel}")
            self.stream.flush()
            self._dirty = True
        elif self.mode == "rows" and event == "row":
            r = item
            timing = (f"{_num(r.graph_us, '.1f')} us graph, {_num(r.eager_us, '.1f')} us eager, "
                      f"{_num(r.loop_us, '.1f')} us loop, x{_num(r.ratio, '.3g')} vs bf16"
                      if r.status == "ok" else "; ".join(r.notes))
            print(f"[{index + 1}/{total}] {r.scheme} {r.n}x{r.k} M={r.m} {r.kernel}: "
                  f"{r.status} ({timing})", file=self.stream, flush=True)

    def close(self) -> None:
        if self._dirty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._dirty = False


# --- the report ------------------------------------------------------------------------------

def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render(data: dict) -> str:
    """The human report: environment line, table, notes, skipped pairs, legend."""
    env = data["environment"]
    lines = [f"# registry bench on {env['device']} ({env['platform']}), torch {env['torch']}, "
             f"triton {env['triton']}, CUDA {env['cuda']}, driver {env['driver']}, {env['date']}",
             f"D2D copy bandwidth {env['copy_tb_s']:.3f} TB/s (read + write); bf16 activations; "
             f"graph timing: {env['graph_timing']}", ""]
    head = ["scheme", "kernel", "M", "N x K", "graph us", "eager us", "loop us", "bf16 us",
            "x bf16", "TFLOP/s", "TB/s", "% copy", "check err", "status", "route"]
    rows = [head]
    for r in data["rows"]:
        graph = r["graph_us"] is not None and r["bf16_graph_us"] is not None  # ratio's basis
        bf16 = r["bf16_graph_us"] if graph else r["bf16_eager_us"]
        rows.append([r["scheme"], r["kernel"], str(r["m"]), f"{r['n']}x{r['k']}",
                     _num(r["graph_us"], ".1f"), _num(r["eager_us"], ".1f"),
                     _num(r.get("loop_us"), ".1f"), _num(bf16, ".1f"),
                     _num(r["ratio"], ".3g"), _num(r["tflops"], ".3g"), _num(r["tb_s"], ".3g"),
                     _num(r["pct_copy"], ".0f"), _num(r["err"], ".1e"), r["status"],
                     r.get("route") or "-"])
    lines.append(table(rows) if data["rows"] else "(no rows: nothing to run, see skipped)")
    notes: dict[tuple, list[str]] = {}
    for r in data["rows"]:
        for note in r["notes"]:
            notes.setdefault((r["scheme"], r["kernel"], f"{r['n']}x{r['k']}", note),
                             []).append(str(r["m"]))
    if notes:
        lines += ["", "notes:"] + [f"  {s} {k} {shape} M={','.join(m)}: {note}"
                                   for (s, k, shape, note), m in notes.items()]
    skipped: dict[tuple, list[str]] = {}
    for s in data["skipped"]:
        skipped.setdefault((s["scheme"], s["kernel"], s["reason"]), []).append(s["shape"])
    if skipped:
        lines += ["", "skipped:"] + [f"  {s} {k} ({', '.join(shapes)}): {reason}"
                                     for (s, k, reason), shapes in skipped.items()]
    lines += ["", "x bf16 = bf16 F.linear time / kernel time, same shape, same run (>1: faster); "
                  "graph (CUDA-graph replay, cold weights) where both have one, else eager "
                  "(per call, L2 flushed). loop = a call among back-to-back calls (an eager "
                  "decode loop: the host's time where it exceeds the GPU's). "
                  "TFLOP/s = 2MNK / time; TB/s = (weight codes + scales "
                  f"+ x + out) bytes / time. check err = max row-wise relative error against "
                  f"reference-emulation on the first rows (FAIL above {env['check_tol']:.1e}). "
                  "route = how the kernel ran that M (strategy, launch config; '-': one way)."]
    failed = [r for r in data["rows"] if r["status"] != "ok"]
    if failed:
        lines.append(f"{len(failed)} row(s) FAILED or raised: see status and notes")
    return "\n".join(lines)
