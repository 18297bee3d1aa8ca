"""Check and time every linear kernel that can run here against the reference and bf16 F.linear.

    python tools/bench_linear.py [--quick] [--shape 8192x8192] [--m 1,16,4096] [--out results.json]

A thin front of `registry.machine.bench` (the runner of `registry bench`) that forces every
kernel this machine runs (each where it accepts the scheme) instead of the resolved one, and also
runs on a CPU to check the logic (`--shape 64x128 --m 3`; Triton kernels only with
TRITON_INTERPRET=1). For each (scheme, kernel, M): the error against the reference emulation on the first rows (a
wrong kernel is marked FAIL and not timed), the CUDA-graph and eager times of `apply` and of
bf16 `F.linear` on the same shape in the same run, and bf16 time / kernel time (>1: faster).
Prints a markdown table (device, versions and date on top); --out writes the JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.spec.platform import detect  # noqa: E402
from registry.machine import bench  # noqa: E402
from registry.cli.bench import parse_grid  # noqa: E402
from registry.machine.probe import runnable_here  # noqa: E402

SCHEMES = ["w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_fp8",
           "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxint8_a_mxint8"]


def _f(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def markdown(data: dict) -> str:
    env = data["environment"]
    lines = [f"# linear kernels on {env['device']} ({env['platform']}), torch {env['torch']}, "
             f"triton {env['triton']}, driver {env['driver']}, {env['date']}",
             f"D2D copy {env['copy_tb_s']:.3f} TB/s; graph timing: {env['graph_timing']}; "
             "bf16 / kernel = bf16 F.linear time / kernel time (graph where both have one)\n",
             "| scheme | kernel | N x K | M | rel err vs reference | graph µs | eager µs "
             "| bf16 graph µs | bf16 eager µs | bf16 / kernel | TB/s | % copy | status |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in data["rows"]:
        status = r["status"] + ("" if not r["notes"] else ": " + "; ".join(r["notes"])[:160])
        lines.append(f"| {r['scheme']} | {r['kernel']} | {r['n']}x{r['k']} | {r['m']} | "
                     f"{_f(r['err'], '.1e')} | {_f(r['graph_us'], '.1f')} | "
                     f"{_f(r['eager_us'], '.1f')} | {_f(r['bf16_graph_us'], '.1f')} | "
                     f"{_f(r['bf16_eager_us'], '.1f')} | {_f(r['ratio'], '.2f')} | "
                     f"{_f(r['tb_s'], '.3f')} | {_f(r['pct_copy'], '.0f')} | {status} |")
    if data["skipped"]:
        lines.append("\nnot run: " + "; ".join(
            f"{s['scheme']} {s['kernel']} {s['shape']}: {s['reason']}" for s in data["skipped"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the first three schemes only")
    ap.add_argument("--shape", default=None, help="NxK[,NxK...], e.g. 8192x8192")
    ap.add_argument("--m", default=None, help="comma-separated M values")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        shapes, ms = parse_grid(args.shape, args.m, device, "1,16,4096")
    except ValueError as e:
        ap.error(str(e))
    schemes = SCHEMES[:3] if args.quick else SCHEMES

    def progress(event: str, index: int, total: int, item) -> None:
        if event == "row":
            print(f"[{index + 1}/{total}] {item.scheme} {item.kernel} M={item.m}: {item.status}",
                  file=sys.stderr, flush=True)

    result = bench.run_bench(schemes, shapes, ms, runnable_here(detect()), device=device,
                             progress=progress, command=" ".join(["tools/bench_linear.py",
                                                                  *sys.argv[1:]]))
    data = result.to_dict()
    print(markdown(data))
    if args.out:
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    return 1 if result.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
