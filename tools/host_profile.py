"""Where an eager MX linear call's host time goes, on a GPU machine (issue 14's eager target:
eager time <= graph time + 8 us).

    python tools/host_profile.py [--shape 8192x8192] [--profile]

Why a separate tool: `registry bench` reports eager beside graph, which says how much the host
costs but not where. This times, on a small layer (1024 x 1024: the GPU finishes each kernel
before the host has queued the next, so a loop of calls measures the host), each piece of a
call back to back — torch.empty, bf16 F.linear, the MXLinear forward per scheme and M, the
Triton launcher with tensors or with the weight's pointers as ints — then eager and graph times
of the same layers on a real shape beside bf16 F.linear, and with --profile the top entries of
cProfile over many calls. Numbers are per call, microseconds.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.triton import launcher  # noqa: E402
from registry import quantize_model  # noqa: E402
from registry.machine.timing import graph_ms, median_ms  # noqa: E402

SCHEMES = ("w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e3m2", "w_mxfp8_e4m3")


def host_us(fn: Callable[[], object], calls: int = 2000) -> float:
    """Host us a call: a loop of calls without syncs (GPU work shorter than the host's)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    took = time.perf_counter() - start
    torch.cuda.synchronize()
    return took / calls * 1e6


def layer(scheme: str, n: int, k: int) -> torch.nn.Module:
    model = torch.nn.Sequential(torch.nn.Linear(k, n, bias=False)).to("cuda", torch.bfloat16)
    quantize_model(model, scheme)
    return model[0]


def captured_launch(mod: torch.nn.Module, x: torch.Tensor) -> tuple:
    """(fn, key, grid, args, options) of the last Triton launch the layer's first forward makes
    (later ones go through the plan's launcher.Bound)."""
    seen = []
    real = launcher.launch

    def spy(fn, key, grid, args, **kw):
        seen.append((fn, key, tuple(grid), tuple(args), kw))
        return real(fn, key, grid, args, **kw)

    launcher.launch = spy
    try:
        mod(x)
    finally:
        launcher.launch = real
    return seen[-1]


def launcher_rows(mod: torch.nn.Module, x: torch.Tensor) -> list[tuple[str, float]]:
    """The launch alone: through launcher.launch, the compiled launcher with tensors, with ints
    (what launcher.Bound passes)."""
    from triton.runtime import driver

    fn, key, grid, args, kw = captured_launch(mod, x)
    launcher.launch(fn, key, grid, args, **kw)
    compiled = launcher.compiled_of(fn, key, **kw)
    device = driver.active.get_current_device()
    stream = driver.active.get_current_stream(device)
    g = (*grid, 1, 1)[:3]
    ints = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
    run, fun, meta = compiled.run, compiled.function, compiled.packed_metadata
    return [
        ("launcher.launch (memo + stream + run)", host_us(
            lambda: launcher.launch(fn, key, grid, args, **kw))),
        ("compiled.run, tensor arguments", host_us(
            lambda: run(g[0], g[1], g[2], stream, fun, meta, None, None, None, *args))),
        ("compiled.run, every pointer an int", host_us(
            lambda: run(g[0], g[1], g[2], stream, fun, meta, None, None, None, *ints))),
        ("driver get_current_device + stream", host_us(
            lambda: driver.active.get_current_stream(driver.active.get_current_device()))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8192x8192", help="NxK of the eager-vs-graph rows")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    torch.manual_seed(0)
    print(f"# host_profile on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows: list[tuple[str, float]] = []
    x1 = torch.randn(1, 1024, device="cuda", dtype=torch.bfloat16)
    wb = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    rows.append(("torch.empty((1, 1024))", host_us(
        lambda: torch.empty((1, 1024), dtype=torch.bfloat16, device="cuda"))))
    rows.append(("bf16 F.linear 1x1024x1024", host_us(lambda: F.linear(x1, wb))))
    small = {s: layer(s, 1024, 1024) for s in SCHEMES}
    for s, mod in small.items():
        for m in ms:
            x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
            rows.append((f"MXLinear {s} M={m} ({mod.kernel_name})",
                         host_us(lambda mod=mod, x=x: mod(x))))
    rows += launcher_rows(layer("w_mxfp4", 1024, 1024), x1)  # a fresh layer: its first call
    print("\n| host piece (1024 x 1024) | us a call |\n|---|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.1f} |")

    n, k = (int(v) for v in args.shape.split("x"))
    print(f"\n| {n}x{k} | M | graph us | eager us | eager, no L2 flush | eager - graph |")
    print("|---|---:|---:|---:|---:|---:|")
    big = {s: layer(s, n, k) for s in SCHEMES}
    wbig = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for m in ms:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        calls = [("bf16 F.linear", lambda x=x: F.linear(x, wbig))]
        calls += [(s, lambda mod=mod, x=x: mod(x)) for s, mod in big.items()]
        for name, call in calls:
            g = graph_ms(call, "cuda") * 1e3
            e = median_ms(call, "cuda", 25, 100) * 1e3
            e0 = median_ms(call, "cuda", 25, 100, flush_l2=False) * 1e3
            print(f"| {name} | {m} | {g:.1f} | {e:.1f} | {e0:.1f} | {e - g:+.1f} |")

    if args.profile:
        for s in ("w_mxfp4", "w_mxfp4_a_mxfp4"):
            mod = small[s]
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(3000):
                mod(x1)
            prof.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
            print(f"\n## cProfile, 3000 calls of MXLinear {s} M=1 (1024 x 1024)")
            print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip()))


if __name__ == "__main__":
    main()
