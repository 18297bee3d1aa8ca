"""Offline occupancy of wgmma configs on sm_90a, no GPU: each config compiled as a launch
specializes it, then its registers a thread (cuobjdump), shared memory a program, programs an
SM (registers, shared memory, warps: the least of the three), and its K loop's SASS a thread
(nvdisasm, tools/sass_loops.py: the shortest loop holding wgmmas; in ws a consumer's).

Why: a tile 3.5 KB past half an SM's shared memory runs one program an SM where two would fit
with one stage less (the mxfp6 experts' 128-row row, docs/benchmarks.md part 22), and nothing
timed says so. This is the check before a sweep's candidates go to the GPU.

    python tools/wgmma_occupancy.py --format mxfp6_e3m2 --grouped --ops \\
        --wgmma 128:128:1:3:4,128:128:1:2:4,256:128:1:2:4:0:1:1:1:1
A ws config's registers are the launch's count a thread (setmaxnreg then moves them between
its partitions), so its "by registers" is a bound, not the count. Specs as
tools/tune_linear.py's (sweep_variants.SPEC_FIELDS, up to group_m, persistent and x_stages);
the table's rows by default. Needs a triton with Gluon and ptxas (CPU CI's has
both; triton 3.6 compiles what the H200 runs: PYTHONPATH=<3.6 site> python tools/...).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tools")]

# sm_90 (H100 / H200): a multiprocessor's limits (CUDA occupancy rules)
SM_REGISTERS = 65536
SM_SHARED = 233472  # 228 KB
SHARED_RESERVED = 1024  # a program's share the system keeps
SM_WARPS = 64
SM_PROGRAMS = 32
REG_UNIT = 8  # registers a thread are granted in steps of 8 (256 a warp)


def programs_an_sm(registers: int, warps: int, shared: int) -> dict[str, int]:
    """How many programs of a kernel an SM holds, by each limit and overall ("programs")."""
    per_warp = -(-registers // REG_UNIT) * REG_UNIT * 32
    limits = {"by_registers": SM_REGISTERS // (per_warp * warps),
              "by_shared": SM_SHARED // (shared + SHARED_RESERVED),
              "by_warps": min(SM_WARPS // warps, SM_PROGRAMS)}
    return {**limits, "programs": min(limits.values())}


def compile_config(cfg, fmt_index: int, grouped: bool, act: str = "", act_rows: int = 0) -> dict:
    """One WgmmaConfig compiled for sm_90a as moe_wgmma / run_wgmma launch it (no bias, no K
    tail; `act` "format:rounding": the activation QDQ inside it on `act_rows` rows, 0 all):
    registers, shared bytes, its programs an SM, the K loop."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    from sass_loops import loops
    from sass_quant import registers
    from support.sm90_compile import wgmma_consts, wgmma_signature

    consts = wgmma_consts(dict(BLOCK_M=cfg.block_m, BLOCK_K=cfg.block_k, SPLIT=cfg.split,
                               STAGES=cfg.stages, WARPS=cfg.warps, FMT=fmt_index,
                               GROUPED=grouped, HAS_BIAS=False, SUB_K=cfg.sub_k, REP=cfg.rep,
                               X_TMA=cfg.tma_x or cfg.ws, ACT_ROWS=act_rows,
                               OVERLAP=cfg.overlap, GROUP_M=cfg.group_m,
                               PERSIST=cfg.persistent, X_STAGES=cfg.x_stages,
                               **({"ACT": act} if act else {})))
    kern, sig, attrs = wgmma_signature(consts, ws=cfg.ws)
    options = dict(num_warps=cfg.warps, **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
    compiled = triton.compile(GluonASTSource(kern, sig, consts, attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    regs, shared = registers(compiled.asm["cubin"]), compiled.metadata.shared
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        Path(path).write_bytes(compiled.asm["cubin"])
        sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-c", path], capture_output=True,
                              text=True, check=True).stdout
    # the K loop: the shortest loop with wgmmas in it (an outer loop over tiles holds it too)
    body = min((loop for loop in loops(sass, 40) if loop[2].get("HGMMA")),
               key=lambda loop: loop[1], default=None)
    warps = compiled.metadata.num_warps
    return {"registers": regs, "shared": shared, "warps": warps,
            **programs_an_sm(regs, warps, shared), "k_loop": body[1] if body else None,
            "k_loop_ops": dict(sorted(body[2].items(), key=lambda kv: -kv[1])) if body else {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--format", default="mxfp4",
                   help="weight format: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3 or mxint8")
    p.add_argument("--grouped", action="store_true", help="the MoE experts' kernel (GROUPED)")
    p.add_argument("--wgmma", default="", help="configs (tune_linear's specs), comma-separated; "
                   "default: the table's wgmma rows of the format's family")
    p.add_argument("--act", default="",
                   help="an activation key (format:rounding, e.g. mxfp4:even): its QDQ inside "
                        "the kernel (fuse_act)")
    p.add_argument("--act-rows", type=int, default=0,
                   help="with --act: the rows the QDQ covers (the kernel's ACT_ROWS; 0: all)")
    p.add_argument("--ops", action="store_true",
                   help="also the K loop's SASS by opcode (where the decode's instructions go)")
    args = p.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        p.error("TRITON_INTERPRET=1 is set: the compile needs the real backend (unset it)")
    from kernels.triton.linear_configs import TABLE, wgmma_family
    from kernels.triton.wgmma_config import FORMATS
    from sweep_variants import forced_spec, wgmma_name
    if args.format not in FORMATS:
        p.error(f"--format {args.format!r}: one of {', '.join(FORMATS)}")
    family = wgmma_family(args.format)
    try:
        rows = [(spec, forced_spec(spec)) for spec in args.wgmma.split(",") if spec]
    except ValueError as e:
        p.error(f"--wgmma: {e}")
    rows = rows or [(f"table m<={r.m_max if r.m_max < 1 << 20 else 'any'} n>={r.n_min} "
                     f"k>={r.k_min}{' experts' if r.experts else ''}", r.config)
                    for r in TABLE if r.family == family and r.strategy == "wgmma"]
    print(f"{args.format}{' grouped' if args.grouped else ''}, sm_90a: registers a thread, "
          "shared bytes a program, programs an SM (registers / shared / warps), K-loop SASS")
    for label, cfg in rows:
        try:
            got = compile_config(cfg, FORMATS.index(args.format), args.grouped, args.act,
                                 args.act_rows)
        except Exception as e:  # a config this format's kernel cannot build: say so, go on
            print(f"{label}: does not compile: {type(e).__name__}: {str(e)[-300:]}")
            continue
        print(f"{label} ({wgmma_name(cfg)}): {got['registers']} regs, {got['shared']} B, "
              f"{got['programs']} an SM "
              f"({got['by_registers']} / {got['by_shared']} / {got['by_warps']}), "
              f"K loop {got['k_loop']} SASS a thread")
        if args.ops:
            print("  " + " ".join(f"{op} {n}" for op, n in got["k_loop_ops"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
