"""Sweep the linear kernels' strategies and tile configs on a GPU; check each against the reference.

    python tools/tune_linear.py [--quick] [--out tune.json]
    python tools/tune_linear.py --parts wgmma --ms 32,64,128 --weights mxfp4,mxfp6_e3m2 \
        --out wgmma.json   # the wgmma grid (two warpgroups included) beside the table's pick

Why a separate script: `registry bench` times what the resolver picks; this one times every
strategy / config of the fast kernels (the Gluon wgmma kernel, the mma kernel, decode split-K,
tiled, dequant-gemm, fp8 MMA, dot_scaled) so that the defaults (kernels/triton/linear_configs.py's
TABLE, the kernel modules) and the priority order in kernels/select/declarations.py are
measured choices. Times are CUDA-graph replays cycling
through enough weight copies to defeat the L2 cache (registry.machine.bench's rule); the baseline is
bf16 F.linear on the same shape in the same run. Prints one line per variant.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.base import load_kernel  # noqa: E402
from kernels.spec.contract import QuantKey, SchemeContract  # noqa: E402
from kernels.triton.linear_decode import DecodeConfig  # noqa: E402
from kernels.triton.linear_emulation import fused_linear  # noqa: E402
from kernels.triton.linear_fp8_mma import MMAConfig, fp8_mma_linear  # noqa: E402
from kernels.triton.linear_mma import MmaConfig  # noqa: E402
from kernels.triton import linear_wgmma  # noqa: E402
from kernels.triton.linear_wgmma import (BLOCK_M_VERIFIED, BLOCK_M_WIDE,  # noqa: E402
                                         WgmmaConfig)
from gates import open_gates  # noqa: E402
from sweep_variants import SPEC_FIELDS, forced_spec, interleaved, wgmma_name  # noqa: E402
from registry.cli.bench import parse_shapes  # noqa: E402
from registry.machine.timing import (  # noqa: E402
    _copies_needed, copy_bandwidth, graph_ms, median_ms)

SHAPES = [(8192, 8192), (28672, 8192), (8192, 28672)]
MS = [1, 16, 32, 64, 128, 1024, 4096]


def key(fmt: str | None, static: bool) -> QuantKey | None:
    return None if fmt is None else QuantKey.mx(fmt, rounding="even", static=static)


def contract(w: str, a: str | None) -> SchemeContract:
    return SchemeContract(weight=key(w, True), activation=key(a, False))


def rel(out: torch.Tensor, want: torch.Tensor) -> float:
    return float((out.double() - want.double()).norm() / want.double().norm())


AUTO = "auto (the table)"  # the variant that runs what the table picks


class Case:
    """One (contract, N, K): prepared weight copies, the reference output per M."""

    def __init__(self, w: str, a: str | None, n: int, k: int, dev: str) -> None:
        self.name, self.n, self.k = f"W={w} A={a or 'bf16'}", n, k
        gen = torch.Generator(device=dev).manual_seed(n + k)
        base = torch.randn(n, k, device=dev, generator=gen, dtype=torch.bfloat16) * 0.05
        self.c = contract(w, a)
        kern = load_kernel("triton-emulation")
        first = kern.prepare(base, self.c)
        wbytes = first.weight.data.numel() + first.weight.scales.numel()
        self.copies = [first] + [kern.prepare(base.roll(i, 0), self.c)
                                 for i in range(1, _copies_needed(wbytes, dev))]
        self.wbytes = wbytes
        self.ref = load_kernel("reference-emulation")
        self.w32 = None

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        p = self.copies[0]
        if self.w32 is None:
            from kernels.mx import mx_dequantize
            self.w32 = mx_dequantize(p.weight, torch.float32)
        xq = self.ref.qdq_activation(x, p)
        return F.linear(xq.float(), self.w32)


def time_variant(case: Case, x: torch.Tensor, call, want: torch.Tensor, dev: str,
                 eager: bool = False) -> dict:
    """Graph time (the kernels' own); with `eager`, also one eager call's (host included, L2
    flushed: registry bench's rule)."""
    try:
        out = call(x, case.copies[0])
        err = rel(out.float(), want)
        ms = graph_ms(lambda: [call(x, p) for p in case.copies], dev) / len(case.copies)
        res = {"err": err, "us": ms * 1e3}
        if eager:
            res["eager_us"] = median_ms(lambda: call(x, case.copies[0]), dev) * 1e3
        return res
    except Exception as e:  # noqa: BLE001 — a failed variant is reported, the sweep goes on
        return {"err": None, "us": None, "error": f"{type(e).__name__}: {str(e)[:200]}"}


def bf16_us(n: int, k: int, m: int, dev: str) -> float:
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    return graph_ms(lambda: [F.linear(x, w) for w in ws], dev) / len(ws) * 1e3


def config_name(c: DecodeConfig) -> str:
    return (f"decode {c.block_n}x{c.block_k} s{c.split} w{c.warps} st{c.stages}"
            f"{' fp4split' if c.split_fp4 else ''}{' acc2d' if c.acc2d else ''}"
            f"{'' if c.fast_fp4 else ' generic-decode'}")


def decode_configs(quick: bool) -> list[DecodeConfig]:
    grid = [(64, 256, 1, 4, 3), (32, 256, 1, 4, 3), (128, 256, 1, 8, 3), (64, 512, 1, 4, 2),
            (64, 128, 1, 4, 4), (32, 512, 1, 4, 3), (64, 256, 2, 4, 3), (32, 256, 2, 4, 3),
            (64, 256, 4, 4, 3), (16, 256, 1, 2, 3), (32, 128, 1, 2, 4), (128, 128, 1, 4, 4)]
    return [DecodeConfig(*g) for g in (grid[:4] if quick else grid)]


def mma_name(c: MmaConfig) -> str:
    return (f"mma {c.block_m}x{c.block_n}x{c.block_k} s{c.split} w{c.warps} st{c.stages}"
            f"{f' maxnreg{c.maxnreg}' if c.maxnreg else ''}")


def mma_configs(m: int, quick: bool) -> list[MmaConfig]:
    """The swap-AB tensor-core kernel's grid (2026-12-01 sweeps: docs/benchmarks.md)."""
    C = MmaConfig
    if m <= 16:
        grid = [C(16, 64, 256, 4, 4, 3), C(16, 64, 256, 2, 4, 3), C(16, 64, 256, 8, 4, 3),
                C(16, 32, 512, 4, 2, 3), C(16, 64, 512, 4, 4, 3), C(16, 128, 256, 4, 8, 3),
                C(16, 64, 128, 8, 4, 4), C(16, 64, 256, 4, 4, 2, 80)]
    elif m <= 64:
        grid = [C(64, 128, 128, 4, 8, 4), C(64, 128, 256, 2, 8, 3), C(64, 128, 128, 4, 8, 3, 128),
                C(64, 64, 128, 8, 4, 4), C(64, 128, 64, 4, 8, 4)]
    else:
        grid = [C(64, 128, 128, 4, 8, 3), C(128, 64, 128, 2, 4, 3), C(128, 128, 128, 4, 8, 3),
                C(128, 128, 64, 4, 8, 4)]
    return grid[:2] if quick else grid


def tile_of(m: int) -> int:
    """The wgmma kernel's M tile for M rows: the smallest verified block_m >= M; past them the
    wide tile (several a call)."""
    return next((b for b in BLOCK_M_VERIFIED if b >= m), BLOCK_M_WIDE)


def wgmma_configs(m: int, quick: bool) -> list[WgmmaConfig]:
    """The Gluon kernel's grid for M's bucket (2026-12-01 sweep: docs/benchmarks.md part 4);
    from block_m 32, two-warpgroup variants (warps 8: the x tile read once for 128 rows)."""
    block_m = tile_of(m)
    grid = {8: [(256, 2, 3), (256, 2, 4), (256, 4, 4), (128, 2, 4), (512, 2, 3)],
            16: [(128, 2, 4), (256, 2, 3), (256, 2, 4), (256, 4, 4)],
            32: [(256, 2, 3), (128, 2, 4), (256, 2, 4), (128, 4, 4), (128, 2, 4, 0, 8),
                 (256, 2, 3, 0, 8), (128, 1, 4, 0, 8)],
            64: [(128, 2, 3), (128, 2, 4), (128, 1, 4), (128, 4, 4), (256, 2, 3),
                 (128, 1, 3, 0, 8), (128, 2, 3, 0, 8), (128, 1, 4, 0, 8), (256, 1, 3, 0, 8)],
            128: [(128, 2, 3), (128, 1, 3), (128, 4, 3), (128, 2, 4), (128, 1, 3, 0, 8),
                  (128, 2, 3, 0, 8), (128, 1, 4, 0, 8), (128, 1, 2, 0, 8)]}[block_m]
    return [WgmmaConfig(block_m, *g) for g in (grid[:2] if quick else grid)]


def occupancy_configs(m: int) -> list[WgmmaConfig]:
    """The "occupancy" grid (2026-12-02): K tiles in halves (sub_k 2: one half decoded under
    the other's wgmma) and, at M >= 64, more CTAs an SM — two warpgroups capped at 128
    registers a thread with 2 stages (2 CTAs an SM instead of 1: ptxas -v, sm_90a) and one
    warpgroup with 2 stages (3 instead of 2) — beside the table's rows."""
    W = WgmmaConfig
    grid = {8: [W(8, 256, 2, 3, sub_k=2), W(8, 256, 2, 4, sub_k=2)],
            16: [W(16, 128, 2, 4, sub_k=2), W(16, 256, 2, 3, sub_k=2)],
            32: [W(32, 128, 2, 4, sub_k=2), W(32, 128, 2, 3, warps=8, maxnreg=128),
                 W(32, 128, 4, 2, warps=8, maxnreg=128)],
            64: [W(64, 128, 2, 3, sub_k=2), W(64, 128, 2, 2), W(64, 128, 2, 2, warps=8,
                 maxnreg=128), W(64, 128, 4, 2, warps=8, maxnreg=128),
                 W(64, 128, 2, 3, warps=8, maxnreg=128), W(64, 128, 2, 2, warps=8,
                 maxnreg=128, sub_k=2)],
            128: [W(128, 128, 2, 3, sub_k=2), W(128, 128, 2, 2), W(128, 128, 4, 2),
                  W(128, 128, 2, 2, sub_k=2), W(128, 128, 2, 2, warps=8, maxnreg=128),
                  W(128, 128, 4, 2, warps=8, maxnreg=128), W(128, 128, 1, 2, warps=8,
                  maxnreg=128), W(128, 128, 2, 2, warps=8, maxnreg=128, sub_k=2),
                  W(128, 128, 2, 3, warps=8, sub_k=2)]}
    return grid[tile_of(m)]


def rep_configs(m: int) -> list[WgmmaConfig]:
    """The "rep" grid (2026-12-02): 128 weight rows a warpgroup (rep 2: two wgmmas a K step on
    one x tile, half the programs re-reading x from L2), 2 / 3 stages, split-K 1 / 2 / 4."""
    W = WgmmaConfig
    grid = {8: [W(8, 256, 2, 3, rep=2), W(8, 256, 4, 3, rep=2)],
            16: [W(16, 128, 2, 4, rep=2), W(16, 128, 4, 4, rep=2)],
            32: [W(32, 128, 2, 4, rep=2), W(32, 128, 4, 3, rep=2), W(32, 256, 2, 3, rep=2)],
            64: [W(64, 128, 2, 3, rep=2), W(64, 128, 4, 3, rep=2), W(64, 128, 1, 3, rep=2),
                 W(64, 128, 4, 2, rep=2)],
            128: [W(128, 128, 4, 2, rep=2), W(128, 128, 2, 2, rep=2), W(128, 128, 1, 2, rep=2),
                  W(128, 128, 8, 2, rep=2), W(128, 128, 4, 2, rep=2, sub_k=2)]}
    return grid[tile_of(m)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--parts", default="wgmma,mma,decode,large,dot,fp8,others")
    ap.add_argument("--wgmma-grid", default="all",
                    choices=("all", "warps8", "fused", "occupancy", "rep"),
                    help="wgmma variants: the whole grid, only two-warpgroup ones, or only the "
                    "fused-QDQ twins of the bucket's first two, the occupancy grid (K halves, "
                    "register caps) or the rep grid (128 rows a warpgroup); beside the table's "
                    "own pick")
    ap.add_argument("--wgmma-specs", help="instead of --wgmma-grid: these wgmma configs, "
                    f"comma-separated {SPEC_FIELDS} "
                    "(each M takes those whose block_m is its tile: the smallest >= M)")
    ap.add_argument("--eager", action="store_true",
                    help="also time each variant eager (host time included)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time the main sweep's variants this many times each, in rotated "
                    "order, and keep each one's median (a fixed order favours the first)")
    ap.add_argument("--ms", help="comma-separated M values of the main sweep (default: "
                    + ",".join(map(str, MS)) + ")")
    ap.add_argument("--shapes", help="the main sweep's NxK shapes, comma-separated (default: "
                    + ",".join(f"{n}x{k}" for n, k in SHAPES) + ")")
    ap.add_argument("--weights", default="mxfp4,mxfp4:mxfp4,mxfp8_e4m3:mxfp8_e4m3",
                    help="the main sweep's contracts, W[:A] (e.g. mxfp4,mxfp6_e3m2)")
    ap.add_argument("--open-gates", default="", metavar="NAME,...",
                    help="switch on these *_VERIFIED gates for the run (e.g. OVERLAP_VERIFIED: "
                    "the overlapped K loop's specs), every variant still checked first")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be 1 or more, got {args.rounds}")
    open_gates([g for g in args.open_gates.split(",") if g], ap)
    # parsed (and checked: WgmmaConfig's one-line errors) before any GPU work
    specs = [forced_spec(c) for c in args.wgmma_specs.split(",")] if args.wgmma_specs else []
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else SHAPES[:1] if args.quick else SHAPES
    except ValueError as e:
        ap.error(str(e))
    dev = "cuda"
    parts = set(args.parts.split(","))
    # every variant is checked against the reference here (err column); a part still gated
    # off is swept with --open-gates (the gates this script once opened itself are all on)
    rows: list[dict] = []
    t0 = time.time()
    print(f"{torch.cuda.get_device_name()} copy {copy_bandwidth(dev):.3f} TB/s", flush=True)

    def emit(case: Case, m: int, variant: str, res: dict, base: float) -> None:
        us = res.get("us")
        tbs = (case.wbytes + 2 * m * (case.k + case.n)) / (us * 1e-6) / 1e12 if us else None
        row = dict(case=case.name, n=case.n, k=case.k, m=m, variant=variant, bf16_us=base,
                   ratio=(base / us if us else None), tb_s=tbs, **res)
        rows.append(row)
        err = "-" if res.get("err") is None else f"{res['err']:.1e}"
        extra = f"eager {res['eager_us']:.1f} us " if "eager_us" in res else ""
        if res.get("route"):
            extra += f"[{res['route']}] "
        if "us_rounds" in res:  # median of the rounds: their range beside it
            extra += f"rounds {min(res['us_rounds']):.1f}-{max(res['us_rounds']):.1f} us "
        print(f"[{time.time() - t0:6.0f}s] {case.name:28s} {case.n}x{case.k} M={m:<5d} "
              f"{variant:34s} {us or float('nan'):9.1f} us  bf16 {base:8.1f}  "
              f"x{(base / us) if us else float('nan'):5.2f}  {tbs or 0:5.2f} TB/s err {err} "
              f"{extra}"
              f"{res.get('error', '')}", flush=True)

    ms = [int(v) for v in args.ms.split(",")] if args.ms else MS
    contracts = [(w, a or None) for w, _, a in (c.partition(":") for c in args.weights.split(","))]
    for n, k in shapes:
        base = {m: bf16_us(n, k, m, dev) for m in ms}
        for w, a in contracts:
            if w == "mxfp8_e4m3" and not {"fp8", "large", "wgmma"} & parts:
                continue
            case = Case(w, a, n, k, dev)
            for m in ms:
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                want = case.reference(x)
                variants = [(AUTO, lambda x, p: fused_linear(x, p))]
                if m <= 16 and "decode" in parts:
                    cfgs = decode_configs(args.quick) if (n, k) == SHAPES[0] else \
                        decode_configs(True)
                    variants += [(config_name(c), lambda x, p, c=c: fused_linear(
                                      x, p, strategy="decode", config=c)) for c in cfgs]
                if (m <= 128 or specs) and "wgmma" in parts and w in linear_wgmma.FORMATS:
                    if specs:  # those whose tile is M's (the table's tiles; past 128: the wide)
                        cfgs = [c for c in specs if c.block_m == tile_of(m)]
                    else:
                        cfgs = wgmma_configs(m, args.quick)
                        # W*A*: the QDQ in the kernel, up to M = 128 (at M = 64 / 128 the
                        # ws rows W4A16 runs cannot take it: the plain grid's first two can)
                        fused = [dataclasses.replace(c, fuse_act=True) for c in cfgs[:2]] \
                            if a is not None else []
                        cfgs = {"all": cfgs + fused, "fused": fused,
                                "warps8": [c for c in cfgs if c.warps == 8],
                                "occupancy": occupancy_configs(m),
                                "rep": rep_configs(m)}[args.wgmma_grid]
                    variants += [(wgmma_name(c), lambda x, p, c=c: fused_linear(
                        x, p, strategy="wgmma", config=c)) for c in cfgs]
                if m <= 128 and "mma" in parts:
                    variants += [(mma_name(c), lambda x, p, c=c: fused_linear(
                        x, p, strategy="mma", config=c)) for c in mma_configs(m, args.quick)]
                if m >= 16 and "large" in parts:
                    variants += [("tiled", lambda x, p: fused_linear(x, p, strategy="tiled"))]
                    for t in [(128, 128, 64, 8, 3), (64, 256, 64, 8, 3), (128, 128, 128, 8, 3)]:
                        variants += [(f"tiled {t}", lambda x, p, t=t: fused_linear(
                            x, p, strategy="tiled", config=t))]
                if m >= 128 and {"large", "dequant"} & parts:  # dequant: that one alone
                    variants += [("dequant-gemm", lambda x, p: fused_linear(
                        x, p, strategy="dequant-gemm"))]
                if "dot" in parts and (w != "mxfp8_e4m3" or "fp8" in parts):
                    ds = load_kernel("triton-dot-scaled")
                    variants += [("dot-scaled", lambda x, p: ds.apply(x, p))]
                if w == "mxfp8_e4m3" and m >= 128 and "fp8" in parts:
                    for c in [MMAConfig(128, 128, 8, 8, 4), MMAConfig(128, 256, 8, 8, 3),
                              MMAConfig(128, 128, 8, 4, 4), MMAConfig(64, 128, 8, 4, 4),
                              MMAConfig(128, 64, 8, 4, 5)]:
                        variants += [(f"fp8-mma {c.block_m}x{c.block_n} w{c.warps} "
                                      f"st{c.stages}", lambda x, p, c=c: fp8_mma_linear(
                                          x, p, config=c))]
                for name, res in interleaved(variants, args.rounds, lambda call: time_variant(
                        case, x, call, want, dev, args.eager)):
                    if name == AUTO:  # which row the table ran (the kernel's route)
                        res = dict(res, route=load_kernel("triton-emulation").route(
                            x, case.copies[0]))
                    emit(case, m, name, res, base[m])
            del case
            torch.cuda.empty_cache()
    if "decode2" in parts:  # second round: split fp4 layout, 2-D accumulator, M up to 64
        D = DecodeConfig
        m1 = [D(32, 512, 1, 4, 3), D(32, 512, 1, 8, 3, acc2d=True), D(16, 512, 1, 4, 3, acc2d=True),
              D(32, 256, 1, 4, 3, acc2d=True), D(32, 512, 1, 4, 3, split_fp4=True),
              D(32, 512, 1, 8, 3, split_fp4=True, acc2d=True),
              D(16, 512, 1, 4, 3, split_fp4=True, acc2d=True),
              D(32, 256, 1, 4, 3, split_fp4=True, acc2d=True), D(64, 256, 4, 4, 3, split_fp4=True),
              D(32, 1024, 1, 8, 3, split_fp4=True, acc2d=True)]
        m16 = [D(32, 512, 1, 4, 3), D(32, 512, 1, 4, 3, split_fp4=True),
               D(64, 256, 2, 4, 3, split_fp4=True), D(16, 512, 1, 4, 3, split_fp4=True),
               D(32, 256, 1, 4, 4, split_fp4=True), D(64, 512, 1, 8, 3, split_fp4=True)]
        for (n, k) in (SHAPES[:2] if not args.quick else SHAPES[:1]):
            for w, a in [("mxfp4", None), ("mxfp4", "mxfp4"), ("mxfp8_e4m3", None)]:
                case = Case(w, a, n, k, dev)
                for m in (1, 16, 32, 64):
                    base_us = bf16_us(n, k, m, dev)
                    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    want = case.reference(x)
                    cfgs = m1 if m == 1 else m16
                    if w == "mxfp8_e4m3":
                        cfgs = [c for c in cfgs if not c.split_fp4][:3]
                    for c in cfgs:
                        name = config_name(c)
                        emit(case, m, name, time_variant(case, x, lambda x, p, c=c: fused_linear(
                            x, p, strategy="decode", config=c), want, dev), base_us)
                    if m >= 32:
                        emit(case, m, "dequant-gemm", time_variant(
                            case, x, lambda x, p: fused_linear(x, p, strategy="dequant-gemm"),
                            want, dev), base_us)
                del case
                torch.cuda.empty_cache()
    if "decode3" in parts:  # third round: the short mxfp4 decode (fast_fp4) against the generic
        D = DecodeConfig
        m1 = [D(32, 512, 1, 4, 3, fast_fp4=False), D(32, 512, 1, 4, 3),
              D(16, 512, 1, 4, 3, acc2d=True), D(32, 512, 1, 8, 3, acc2d=True),
              D(32, 256, 2, 4, 3), D(64, 256, 4, 4, 3), D(16, 256, 1, 4, 4)]
        mdot = [D(64, 256, 2, 4, 3, split_fp4=True), D(64, 256, 2, 4, 3),
                D(64, 512, 2, 8, 3), D(32, 512, 1, 4, 3)]
        for (n, k) in SHAPES[:2]:
            for w, a in [("mxfp4", None), ("mxfp4", "mxfp4")]:
                case = Case(w, a, n, k, dev)
                for m in (1, 16, 32, 64):
                    base_us = bf16_us(n, k, m, dev)
                    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    want = case.reference(x)
                    for c in (m1 if m == 1 else mdot):
                        name = config_name(c)
                        emit(case, m, name, time_variant(case, x, lambda x, p, c=c: fused_linear(
                            x, p, strategy="decode", config=c), want, dev), base_us)
                del case
                torch.cuda.empty_cache()
    if "others" in parts:  # fused emulation of the other formats; reference at M = 1
        n, k = SHAPES[0]
        base = {m: bf16_us(n, k, m, dev) for m in (1, 4096)}
        for w, a in [("mxfp6_e3m2", "mxfp6_e3m2"), ("mxint8", "mxint8"),
                     ("mxfp6_e2m3", None)]:
            case = Case(w, a, n, k, dev)
            for m in (1, 4096):
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                want = case.reference(x)
                emit(case, m, "emulation (auto)",
                     time_variant(case, x, lambda x, p: fused_linear(x, p), want, dev), base[m])
                if m == 1:
                    emit(case, m, "reference-emulation", time_variant(
                        case, x, lambda x, p: case.ref.apply(x, p), want, dev), base[m])
            del case
            torch.cuda.empty_cache()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
