"""Check and time every linear kernel that can run here against the reference and bf16 F.linear.

    python tools/bench_linear.py [--quick] [--out results.json]

For each (scheme, kernel) pair the kernel accepts and this machine runs: the relative error
against the reference emulation (fp32 accumulation) on the benchmark shape, then the median
time of `apply` and of bf16 `F.linear` on the same shape, measured in the same run, and their
ratio. Prints a markdown table (device, versions and date on top) and writes JSON with --out.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.base import load_kernel  # noqa: E402
from kernels.declarations import KERNELS_BY_NAME  # noqa: E402
from registry import load_schemes  # noqa: E402
from registry.platform import detect  # noqa: E402
from registry.probe import runnable_here  # noqa: E402
from registry.resolve import accepts  # noqa: E402
from timing import median_ms  # noqa: E402

SCHEMES = ["w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_fp8",
           "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxint8_a_mxint8"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one shape, fewer schemes")
    ap.add_argument("--shape", default=None, help="NxK, e.g. 8192x8192")
    ap.add_argument("--m", default=None, help="comma-separated M values")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    plat = detect()
    n, k = (int(v) for v in (args.shape or ("8192x8192" if device == "cuda" else "64x128"))
            .split("x"))
    ms = [int(v) for v in (args.m or ("1,16,4096" if device == "cuda" else "3")).split(",")]
    schemes = SCHEMES[:3] if args.quick else SCHEMES
    catalog = load_schemes()
    kernels = runnable_here(plat)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    import triton

    print(f"# linear kernels on {name} ({plat}), torch {torch.__version__}, triton "
          f"{triton.__version__}, {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"N x K = {n} x {k}; time = median of apply(); ratio = kernel time / bf16 F.linear time\n")
    print("| scheme | kernel | M | rel err vs reference | time ms | bf16 ms | time / bf16 |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    g = torch.Generator(device="cpu").manual_seed(0)
    w = (torch.randn(n, k, generator=g) * 0.02).to(device)
    bias = torch.randn(n, generator=g).to(device)
    w_bf16, b_bf16 = w.to(torch.bfloat16), bias.to(torch.bfloat16)  # the baseline's operands
    for sname in schemes:
        s = catalog.schemes[sname]
        for kname in kernels:
            if not accepts(KERNELS_BY_NAME[kname], s.contract)[0]:
                continue
            kern, ref = load_kernel(kname), load_kernel("reference-emulation")
            for m in ms:
                x = torch.randn(m, k, generator=g).to(device=device, dtype=torch.bfloat16)
                static = s.activation is not None and s.activation.static
                try:
                    p = kern.prepare(w, s.contract, calibration=x if static else None)
                    out = kern.apply(x, p, bias)
                    want = ref.apply(x, p, bias)
                    err = float((out.float() - want.float()).norm() / want.float().norm())
                    t = median_ms(lambda: kern.apply(x, p, bias), device, 50, 200)
                    tb = median_ms(lambda: F.linear(x, w_bf16, b_bf16), device, 50, 200)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"| {sname} | {kname} | {m} | ERROR {type(e).__name__}: "
                          f"{str(e)[:120]} | | | |")
                    rows.append({"scheme": sname, "kernel": kname, "m": m, "error": str(e)})
                    continue
                print(f"| {sname} | {kname} | {m} | {err:.1e} | {t:.3f} | {tb:.3f} | "
                      f"{t / tb:.2f} |")
                rows.append({"scheme": sname, "kernel": kname, "m": m, "n": n, "k": k,
                             "rel_err": err, "ms": t, "bf16_ms": tb})
                sys.stdout.flush()
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "platform": str(plat),
                                              "torch": torch.__version__,
                                              "triton": triton.__version__, "rows": rows},
                                             indent=1))
    bad = [r for r in rows if "error" in r or r["rel_err"] > 2.0**-8]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
