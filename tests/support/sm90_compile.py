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


def ptx_facts(kern, sig: dict, consts: dict, attrs: dict, patterns: tuple) -> dict:
    """(In the script's process) `kern` compiled for sm_90a with 4 warps: how often each regex
    of `patterns` occurs in its PTX, the byte counts its mbarriers expect ("expect") and its
    setmaxnreg register counts ("setmaxnreg"), its shared memory in bytes ("shared");
    {"error": ...} where it does not compile."""
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    try:
        compiled = triton.compile(GluonASTSource(kern, sig, consts, attrs),
                                  target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
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
