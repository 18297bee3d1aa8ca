"""Time the MoE grouped-experts layer (Triton vs reference) against a bf16 baseline on a GPU,
with forced wgmma configs and gates (what the table's rows were measured with); the figures a
user reproduces come from `registry bench --moe` (registry.machine.bench_moe, the same bf16
baseline).

    python tools/bench_moe.py [--experts 8] [--top-k 2] [--n 2048] [--k 2048] [--t 1,16,256,2048]
    python tools/bench_moe.py --t 2048 --wgmma 128:128:1:3:8,64:128:2:3:8  # forced wgmma configs

Why: `MXGroupedExperts` is the MoE path of issue 6; this gives its figures beside the same
computation in bf16 (routing from the same logits, then torch._grouped_mm, or one bf16
F.linear per expert with a weighted index_add) timed by the same rule (registry.machine.timing:
CUDA-graph replay where it captures, else eager). Both sides include the routing (top-k +
softmax) since the layer's forward does; figures before 2026-12-01 23:00 UTC timed the bf16
side without it. Each backend's output is checked against the reference first.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tune_linear's config names

from registry import MXGroupedExperts  # noqa: E402
from kernels.reference.moe import route  # noqa: E402
from registry.machine.bench_moe import bf16_grouped as bf16_moe  # noqa: E402
from registry.machine.timing import graph_ms, median_ms  # noqa: E402
from kernels.triton import moe_wgmma  # noqa: E402
from gates import open_gates, setting  # noqa: E402
from sweep_variants import forced_spec, wgmma_name  # noqa: E402


@contextlib.contextmanager
def forced_config(cfg):
    """The MoE wgmma path with `cfg` in place of its table row, or as is (a part of cfg still
    gated off: --open-gates)."""
    if cfg is None:
        yield
        return
    with setting(moe_wgmma, config_for=lambda *a, **kw: cfg):
        yield


def timed(fn, dev) -> tuple[float, str]:
    try:
        return graph_ms(fn, dev) * 1e3, "graph"
    except Exception:  # noqa: BLE001 — host syncs (routing) cannot be captured: eager then
        torch.cuda.synchronize()
        return median_ms(fn, dev) * 1e3, "eager"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--t", default="1,16,256,2048")
    ap.add_argument("--schemes", default="w_mxfp4,w_mxfp4_a_mxfp4,w_mxfp6_e3m2_a_mxfp6_e3m2")
    ap.add_argument("--backends", default="triton,reference",
                    help="backends timed (each checked against the reference first)")
    ap.add_argument("--wgmma", default="",
                    help="also time the triton backend with each of these wgmma configs forced, "
                    "block_m:block_k:split:stages:warps[:maxnreg[:sub_k[:rep[:tma_x]]]] (gated "
                    "ones with --open-gates; every row is checked against the reference)")
    ap.add_argument("--open-gates", default="", metavar="NAME,...",
                    help="switch on these gates for the run (moe_wgmma / wgmma_gates / "
                    "wgmma_config / wgmma_tiles / qdq_plan attributes, e.g. EIGHT_BIT_VERIFIED: 8-bit experts "
                    "on wgmma), to time a path written without a GPU beside the one it would "
                    "replace (every row is checked against the reference first)")
    ap.add_argument("--one-program-chunks", type=int, default=None, metavar="N",
                    help="moe_routing.ONE_PROGRAM_CHUNKS for this run (the routing sort in one "
                    "program up to N chunks of rows, else a program a chunk); e.g. 1000000 for "
                    "the one-program sort at every T, to compare")
    args = ap.parse_args()
    open_gates([g for g in args.open_gates.split(",") if g], ap)
    if args.one_program_chunks is not None and args.one_program_chunks < 0:
        ap.error(f"--one-program-chunks {args.one_program_chunks}: a chunk count >= 0")
    if args.one_program_chunks is not None:
        from kernels.triton import moe_routing
        moe_routing.ONE_PROGRAM_CHUNKS = args.one_program_chunks
    dev = "cuda"
    forced = [forced_spec(c) for c in args.wgmma.split(",") if c]
    g = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(args.experts, args.n, args.k, device=dev, generator=g,
                    dtype=torch.bfloat16) * 0.05
    print(f"# MoE E={args.experts} top-k={args.top_k} N={args.n} K={args.k}, "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| scheme | T | backend | µs | how | bf16 µs | bf16 / kernel | rel err vs reference "
          "| bf16 vs reference |")
    print("|---|---:|---|---:|---|---:|---:|---:|---:|")
    for name in args.schemes.split(","):
        backends = args.backends.split(",")
        layer = {b: MXGroupedExperts(w, name, backend=b) for b in {*backends, "reference"}}
        for t in map(int, args.t.split(",")):
            x = torch.randn(t, args.k, device=dev, generator=g, dtype=torch.bfloat16)
            logits = torch.randn(t, args.experts, device=dev, generator=g)
            ref = layer["reference"](x, logits, args.top_k).float()
            ids, rw = route(logits, args.top_k)
            # the baseline routes from the same logits as the layer (forward = route + experts)
            base, how_b = timed(lambda: bf16_moe(x, w, *route(logits, args.top_k)), dev)
            dense = bf16_moe(x, w, ids, rw).float()  # the baseline computes the same thing
            berr = float((dense - ref).norm() / ref.norm())
            for b, cfg in [(b, None) for b in backends] + [("triton", c) for c in forced]:
                label = b if cfg is None else f"{b} {wgmma_name(cfg)}"
                try:
                    with forced_config(cfg):
                        out = layer[b](x, logits, args.top_k).float()
                        err = float((out - ref).norm() / ref.norm())
                        us, how = timed(lambda: layer[b](x, logits, args.top_k), dev)
                except Exception as e:  # noqa: BLE001 — a forced config this format cannot
                    if cfg is None:  # run (shared memory, registers): its row says so
                        raise
                    print(f"| {name} | {t} | {label} | failed: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:120]} | | | | | |", flush=True)
                    continue
                print(f"| {name} | {t} | {label} | {us:.1f} | {how} | {base:.1f} ({how_b}) | "
                      f"{base / us:.2f} | {err:.1e} | {berr:.1e} |", flush=True)


if __name__ == "__main__":
    main()
