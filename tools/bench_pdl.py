"""W4A4 against W4A16 on the wgmma path, with the two changes written to close the gap: the
GEMM launched programmatically after the QDQ (kernels/triton/grid_dependency.py, PDL_VERIFIED)
and the QDQ of a few rows one row a program (kernels/triton/qdq_plan.py, SMALL_ROWS_VERIFIED);
on a GPU machine; issue 14: W4A4 within 10 % of W4A16. With `--act fp8`: W4A8 (a static
per-tensor fp8 scale) with its QDQ's Bound / eager-path launches off and on
(qdq_plan.FP8_STATIC_BOUND_VERIFIED: its eager calls took 84 µs of host time at M = 1 on an
H100, W4A16's 27).

    python tools/bench_pdl.py [--shapes 8192x8192,...] [--ms 1,16,64,1024] [--act mxfp4|fp8]

Per (shape, M): graph and eager (L2 flushed) µs of W4A16 and of W4A4 with each gate setting
(both off; PDL on; small-rows QDQ on; both on), the W4A4 / W4A16 time ratio of each, and
whether each setting gave the both-off bits (it must). Fresh plans a setting (plans read PDL
when built, the QDQ its tile at a plan's first launch of a row count). The gates are opened
here, in this process only; main switches one on after its GPU test passes in a whole-suite
run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.base import load_kernel  # noqa: E402
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY  # noqa: E402
from kernels.spec.contract import QuantKey, SchemeContract  # noqa: E402
from kernels.triton import grid_dependency, qdq_plan  # noqa: E402
from kernels.triton.linear_emulation import fused_linear  # noqa: E402
from registry.machine.timing import _copies_needed, graph_ms, median_ms  # noqa: E402


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


def timed(prepared: list, x: torch.Tensor) -> tuple[float, float, torch.Tensor]:
    """(graph µs, eager µs, the first copy's output) of one call."""
    out = fused_linear(x, prepared[0])
    graph = graph_ms(lambda: [fused_linear(x, p) for p in prepared], "cuda") / len(prepared)
    eager = median_ms(lambda: fused_linear(x, prepared[0]), "cuda")
    return graph * 1e3, eager * 1e3, out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="8192x8192,28672x8192,8192x28672")
    p.add_argument("--ms", default="1,16,64,1024")
    p.add_argument("--act", default="mxfp4", help="the activation format of the W*A* side")
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
    if not torch.cuda.is_available():
        sys.exit("bench_pdl: needs a CUDA GPU (programmatic dependent launch is sm_90's)")
    # (label, PDL, the setting's QDQ gate: SMALL_ROWS_VERIFIED, or for fp8 the Bound's)
    settings = (("both off", False, False), ("PDL on", True, False),
                ("small QDQ", False, True), ("both on", True, True))
    gate = "SMALL_ROWS_VERIFIED"
    if args.act == "fp8":
        settings, gate = (("Bound off", False, False), ("Bound on", False, True)), \
            "FP8_STATIC_BOUND_VERIFIED"
    side = "W4A8" if args.act == "fp8" else "W4A4"
    rows = []
    print(f"{'N x K':>12} {'M':>5} | {'W4A16':>13} | " + " | ".join(
        f"{side + ' ' + label:>20}" for label, _, _ in settings) + " | bits")
    for n, k in shapes:
        shape = f"{n}x{k}"
        gen = torch.Generator(device="cuda").manual_seed(n + k)
        w = torch.randn(n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.05
        copies = _copies_needed(n * k // 2, "cuda")
        base = layers(w, None, copies)
        built = []
        for _, pdl, small in settings:
            grid_dependency.PDL_VERIFIED = pdl
            built.append(layers(w, args.act, copies))
        grid_dependency.PDL_VERIFIED = False
        for m in ms:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            g16, e16, _ = timed(base, x)
            cells, outs = {}, []
            for (label, _, on), prepared in zip(settings, built):
                saved = getattr(qdq_plan, gate)
                setattr(qdq_plan, gate, on)  # (read at the plans' first call of this M)
                g, e, out = timed(prepared, x)
                setattr(qdq_plan, gate, saved)
                cells[label] = (g, e)
                outs.append(out.view(torch.int16))
            same = all(torch.equal(o, outs[0]) for o in outs[1:])
            rows.append(dict(n=n, k=k, m=m, w4a16=(g16, e16), w4a4=cells, same_bits=same))
            print(f"{shape:>12} {m:>5} | {g16:6.1f} {e16:6.1f} | " + " | ".join(
                f"{g:6.1f} {e:6.1f} {g / g16:5.2f}x" for g, e in cells.values())
                + f" | {'ok' if same else 'DIFFER'}")
    print(f"cells: graph µs, eager µs, {side} graph / W4A16 graph")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
