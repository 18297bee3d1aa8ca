"""W*A* against W4A16 on the wgmma path, with each way of running the activation QDQ; on a GPU
machine; issue 14: W4A4 within 10 % of W4A16, and eager within 8 µs of graph.

    python tools/bench_pdl.py [--shapes 8192x8192,...] [--ms 1,16,64,1024] [--compare fused]
    python tools/bench_pdl.py --act fp8 --compare bound

--compare (the W*A* settings timed beside W4A16, each on fresh plans):
- fused (the default): the QDQ launched before the GEMM, as shipped; inside the GEMM on the
  whole x tile (`fuse_act` on the table's rows at M <= 16 that can take it, the warp-specialized
  ones cannot); inside it on the rows a plan can have (wgmma_config.ACT_ROWS_VERIFIED: row 0
  alone at M = 1). One launch a call is what eager needs (docs/benchmarks.md part 29).
- pdl: as shipped, and the GEMM launched programmatically after the QDQ
  (kernels/triton/grid_dependency.py, PDL_VERIFIED).
- bound (with --act fp8: W4A8, a static per-tensor fp8 scale): its QDQ's Bound / eager-path
  launches off and on (qdq_plan.FP8_STATIC_BOUND_VERIFIED).
- qdq: the QDQ launched first, its one-row tiles as shipped and widened along K up to 256 rows
  (qdq_plan.SMALL_ROWS_WIDE_VERIFIED: one wave of programs at most).

Per (shape, M): graph, eager (L2 flushed) and loop (back to back, the host's pace) µs of W4A16
and of each setting, the setting's graph / W4A16 graph, and whether every setting gave the first
one's bits (it must). A setting's gates hold for all of its calls: plans read them when built,
at a layer's first call of an M bucket (before 2026-12-05 21:30 UTC this script set PDL around
`prepare` only, so its "PDL on" plans were built with PDL off). The gates are opened here, in
this process only; main switches one on after its GPU test passes in a whole-suite run.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gates import setting  # noqa: E402
from kernels.base import load_kernel  # noqa: E402
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY  # noqa: E402
from kernels.spec.contract import QuantKey, SchemeContract  # noqa: E402
from kernels.triton import grid_dependency, linear_configs, qdq_plan, wgmma_config  # noqa: E402
from kernels.triton.linear_emulation import fused_linear  # noqa: E402
from kernels.triton.wgmma_config import WgmmaConfig  # noqa: E402
from registry.machine.timing import _copies_needed, graph_ms, loop_ms, median_ms  # noqa: E402

FUSE_M_MAX = 16  # table rows up to this M take fuse_act in the fused settings


def fused_table() -> tuple:
    """The config table with the activation QDQ inside the kernel on every wgmma row up to
    FUSE_M_MAX rows that can take it (not warp-specialized, not the overlapped K loop: one QDQ
    buffer), for W*A* layers."""
    def fuse(row):
        cfg = row.config
        if row.strategy == "wgmma" and row.m_max <= FUSE_M_MAX and isinstance(cfg, WgmmaConfig) \
                and not cfg.ws and not cfg.overlap:
            return dataclasses.replace(row, config=dataclasses.replace(cfg, fuse_act=True))
        return row
    return tuple(fuse(row) for row in linear_configs.TABLE)


def settings(compare: str) -> tuple:
    """(label, a function giving the setting's context) for --compare."""
    if compare == "bound":
        return (("Bound off", lambda: setting(qdq_plan, FP8_STATIC_BOUND_VERIFIED=False)),
                ("Bound on", lambda: setting(qdq_plan, FP8_STATIC_BOUND_VERIFIED=True)))
    if compare == "qdq":
        return (("shipped", lambda: setting(qdq_plan, SMALL_ROWS_WIDE_VERIFIED=False)),
                ("wide rows", lambda: setting(qdq_plan, SMALL_ROWS_WIDE_VERIFIED=True)))
    if compare == "pdl":
        return (("shipped", lambda: setting(grid_dependency, PDL_VERIFIED=False)),
                ("PDL on", lambda: setting(grid_dependency, PDL_VERIFIED=True)))
    fused = fused_table()

    def in_kernel(rows: bool):
        stack = contextlib.ExitStack()
        stack.enter_context(setting(linear_configs, TABLE=fused))
        stack.enter_context(setting(wgmma_config, ACT_ROWS_VERIFIED=rows))
        return stack
    return (("two launches", lambda: setting(wgmma_config, ACT_ROWS_VERIFIED=False)),
            ("fused tile", lambda: in_kernel(False)), ("fused rows", lambda: in_kernel(True)))


def layers(w: torch.Tensor, act: str | None, copies: int) -> list:
    """`copies` prepared copies of the bf16 weight, rolled (graph replays cycle through them:
    HBM reads, as in a model); act "fp8": the static fp8 key with a scale of 0.02."""
    kernel = load_kernel("triton-emulation")
    static = act == "fp8"
    key = None if act is None else FP8_STATIC_TENSOR_KEY if static else \
        QuantKey.mx(act, rounding="even", static=False)
    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=key)
    extra = {"act_scale": 0.02} if static else {}
    return [kernel.prepare(w.roll(i, 0), contract, **extra) for i in range(copies)]


def timed(prepared: list, x: torch.Tensor) -> tuple[float, float, float, torch.Tensor]:
    """(graph µs, eager µs, loop µs, the first copy's output) of one call."""
    out = fused_linear(x, prepared[0])
    graph = graph_ms(lambda: [fused_linear(x, p) for p in prepared], "cuda") / len(prepared)
    eager = median_ms(lambda: fused_linear(x, prepared[0]), "cuda")
    turn = itertools.cycle(prepared)
    loop = loop_ms(lambda: fused_linear(x, next(turn)), "cuda")
    return graph * 1e3, eager * 1e3, loop * 1e3, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="8192x8192,28672x8192,8192x28672")
    p.add_argument("--ms", default="1,16,64,1024")
    p.add_argument("--act", default="mxfp4", help="the activation format of the W*A* side")
    p.add_argument("--compare", choices=("fused", "pdl", "bound", "qdq"), default=None,
                   help="the settings timed (default: fused; bound with --act fp8)")
    p.add_argument("--out", help="write the rows as JSON here")
    args = p.parse_args()
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
        ms = [int(m) for m in args.ms.split(",")]
    except ValueError:
        p.error(f"--shapes {args.shapes!r} / --ms {args.ms!r}: NxK,... and M,... integers, e.g. "
                "--shapes 8192x8192 --ms 1,16")
    if any(len(s) != 2 or min(s) <= 0 or s[1] % 32 for s in shapes) or min(ms) <= 0:
        p.error(f"--shapes {args.shapes!r} / --ms {args.ms!r}: positive N x K with K a multiple "
                "of 32, positive M")
    compare = args.compare or ("bound" if args.act == "fp8" else "fused")
    if (compare == "bound") != (args.act == "fp8"):
        p.error(f"--compare {compare} with --act {args.act}: 'bound' is W4A8's (--act fp8) "
                "alone; fused, pdl and qdq take an MX activation")
    if not torch.cuda.is_available():
        sys.exit("bench_pdl: needs a CUDA GPU (the wgmma kernels are sm_90's)")
    chosen = settings(compare)
    side = "W4A8" if args.act == "fp8" else "W4A4"
    rows = []
    print(f"{'N x K':>12} {'M':>5} | {'W4A16':>20} | " + " | ".join(
        f"{side + ' ' + label:>27}" for label, _ in chosen) + " | bits")
    for n, k in shapes:
        gen = torch.Generator(device="cuda").manual_seed(n + k)
        w = torch.randn(n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.05
        copies = _copies_needed(n * k // 2, "cuda")
        base = layers(w, None, copies)
        built = [layers(w, args.act, copies) for _ in chosen]
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            g16, e16, l16, _ = timed(base, x)
            cells, outs = {}, []
            for (label, context), prepared in zip(chosen, built):
                with context():  # (for every call: plans read the gates when built)
                    g, e, lp, out = timed(prepared, x)
                cells[label] = (g, e, lp)
                outs.append(out.view(torch.int16))
            same = all(torch.equal(o, outs[0]) for o in outs[1:])
            rows.append(dict(n=n, k=k, m=m, w4a16=(g16, e16, l16), w_a=cells, same_bits=same))
            print(f"{n:>6}x{k:<5} {m:>5} | {g16:6.1f} {e16:6.1f} {l16:6.1f} | " + " | ".join(
                f"{g:6.1f} {e:6.1f} {lp:6.1f} {g / g16:5.2f}x" for g, e, lp in cells.values())
                + f" | {'ok' if same else 'DIFFER'}")
    print(f"cells: graph µs, eager µs, loop µs, {side} graph / W4A16 graph")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
