"""Compile Gluon kernels for sm_90a on a machine without a GPU, in a fresh process (the tests run
under TRITON_INTERPRET, which patches triton): a script reads the cases as JSON on stdin and
prints one JSON list of what it found (PTX counts, or {"error": ...} a case)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


SM90_SHARED = 232448  # bytes of shared memory a block may take on sm_90 (227 KiB)


def compile_cases(script: str, cases: list) -> list:
    """Run `script` on `cases`; its last line of output, as JSON."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "tests"),
                                         env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=900, input=json.dumps(cases))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def case_ids(cases: list) -> list:
    """A readable test id a case."""
    return ["-".join(f"{k}{v}" for k, v in c.items()) for c in cases]


def gluon_sm90(kern, sig: dict, consts: dict, attrs: dict, warps: int = 4):
    """(In the script's process) `kern` compiled for sm_90a (Triton's compiled kernel: .asm,
    .metadata); raises where it does not compile."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    return triton.compile(GluonASTSource(kern, sig, consts, attrs),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))


def ptx_facts(kern, sig: dict, consts: dict, attrs: dict, patterns: tuple) -> dict:
    """(In the script's process) `kern` compiled for sm_90a with 4 warps: how often each regex
    of `patterns` occurs in its PTX, the byte counts its mbarriers expect ("expect") and its
    setmaxnreg register counts ("setmaxnreg"), its shared memory in bytes ("shared");
    {"error": ...} where it does not compile."""
    import re

    try:
        compiled = gluon_sm90(kern, sig, consts, attrs)
    except Exception as e:  # reported by the case's own test
        return {"error": f"{type(e).__name__}: {e}"[-3000:]}
    ptx = compiled.asm["ptx"]
    got = {p: len(re.findall(p, ptx)) for p in patterns}
    got["shared"] = compiled.metadata.shared  # bytes a program (sm_90: at most SM90_SHARED)
    expect = r"expect_tx\.shared(?:::cta)?\.b64 _, \[%r\d+\], (\d+)"
    regs = r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)"
    got["expect"] = sorted(set(int(b) for b in re.findall(expect, ptx)))
    got["setmaxnreg"] = sorted(set(int(r) for r in re.findall(regs, ptx)))
    return got


# the integer arguments the host keeps multiples of 16 (the launch's specialization)
BY16 = frozenset({"K", "stride_x", "stride_o", "stride_we", "stride_se"})


def wgmma_signature(consts: dict, ws: bool = False) -> tuple:
    """(In the script's process) linear_wgmma's one-partition kernel (linear_wgmma_ws's with
    `ws`) and its (signature, attributes) for these constexprs (the kernel's defaulted ones
    that `consts` leaves out are added to it) as a launch specializes them:
    16-byte aligned pointers, BY16's integers multiples of 16; x a TMA descriptor of
    [BLOCK_M, BLOCK_K] boxes where X_TMA (always in ws), and in ws the weight words, B words
    and scale bytes too; the output fp32 where GROUPED (the experts' weighted rows)."""
    from kernels.triton import linear_wgmma, linear_wgmma_ws
    from kernels.triton.wgmma_tiles import X_SMEM

    kern = linear_wgmma_ws._ws_linear_kernel if ws else linear_wgmma._wgmma_linear_kernel
    bm, bk = consts["BLOCK_M"], consts["BLOCK_K"]
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "b_ptr": "*i32", "s_ptr": "*u8",
            "bias_ptr": "*fp32", "out_ptr": "*fp32" if consts["GROUPED"] else "*bf16",
            "part_ptr": "*fp32", "lock_ptr": "*i32", "grp_ptr": "*i32", "dest_ptr": "*i32",
            "rw_ptr": "*fp32"}
    if ws or consts.get("X_TMA"):
        ptrs["x_ptr"] = f"tensordesc<bf16[{bm}, {bk}],{X_SMEM!r}>"
    if ws:
        rows = 8 * bk // 256  # weight words: 8 rows of 256 a 256-wide K tile
        b_rows = rows if consts["FMT"] in (0, 3, 4) else rows // 2
        w_flat, s_flat = linear_wgmma_ws.W_FLAT.value, linear_wgmma_ws.S_FLAT.value
        ptrs.update(w_ptr=f"tensordesc<i32[{rows}, 256],{w_flat!r}>",
                    b_ptr=f"tensordesc<i32[{b_rows}, 256],{w_flat!r}>",
                    s_ptr=f"tensordesc<u8[{2 * bk // 256}, 256],{s_flat!r}>")
    names = kern.arg_names
    _fill_defaults(kern, consts)
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if (n in ptrs or n in BY16) and not sig[n].startswith("tensordesc")}
    return kern, sig, attrs


def _fill_defaults(kern, consts: dict) -> None:
    """The kernel's constexpr parameters with a default (ACT_ROWS, OVERLAP, ...) that `consts`
    leaves out, added to it at their defaults, as a launch that omits them gets them (else the
    signature would make them i32 arguments)."""
    import inspect

    for name, param in inspect.signature(kern.fn).parameters.items():
        if name not in consts and param.default is not inspect.Parameter.empty and \
                "constexpr" in str(param.annotation):
            consts[name] = param.default


def ws_consts(case: dict) -> dict:
    """The ws kernel's constexprs for one of its compile cases (test_linear_wgmma_ws): 4 warps,
    x by TMA, weight-only, no K tail, rep 1; bias, split, tile, stages and format the case's;
    not grouped, no PDL, no bands, not persistent unless the case says; X_STAGES only where
    the case has it (the kernel's default otherwise: an older tree's kernel, for
    tools/ptx_same, has no such parameter)."""
    return dict(HAS_BIAS=case["HAS_BIAS"], SPLIT=case["SPLIT"], BLOCK_M=case["BLOCK_M"],
                BLOCK_K=case["BLOCK_K"], STAGES=case["STAGES"], WARPS=4, K_TAIL=False,
                GROUPED=case.get("GROUPED", False), FMT=case["FMT"], ACT=(), SUB_K=1, REP=1,
                X_TMA=True, PDL=case.get("PDL", False), GROUP_M=case.get("GROUP_M", 1),
                PERSIST=case.get("PERSIST", False),
                **({"X_STAGES": case["X_STAGES"]} if "X_STAGES" in case else {}))


def wgmma_consts(case: dict) -> dict:
    """The wgmma kernels' constexprs for a compile case: the defaults (bias, 4 warps, no K
    tail, not grouped, mxfp4, one K part, rep 1, x by cp.async, no PDL; the kernel's own
    defaults past those: `wgmma_signature`), the case's own, and
    ACT's facts from its "format:rounding" key name (no ACT: weight-only)."""
    from kernels.spec.contract import QuantKey
    from kernels.triton import fp4_words
    from kernels.triton.wgmma_tiles import act_facts

    consts = {**dict(HAS_BIAS=True, WARPS=fp4_words.WGMMA_WARPS, K_TAIL=False, GROUPED=False,
                     FMT=0, SUB_K=1, REP=1, X_TMA=False, PDL=False), **case}
    fmt, _, rounding = case.get("ACT", "").partition(":")
    consts["ACT"] = act_facts(QuantKey.mx(fmt, rounding=rounding, static=False)) if fmt else ()
    return consts
