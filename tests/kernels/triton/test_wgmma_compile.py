"""The one-partition wgmma kernel (kernels/triton/linear_wgmma.py) compiled for sm_90a on the CPU
(CI: this triton's Gluon and ptxas, no GPU needed), in one fresh process: every format, MoE, K
tails, tile sizes, split-K and gated part (two warpgroups, the fused activation QDQ, K halves,
rep 2, x by TMA) compiles with no decoded weight value through shared memory.
"""
from __future__ import annotations

import pytest

from kernels.spec.contract import QuantKey
from kernels.triton import fp4_words as fw
from kernels.triton.wgmma_tiles import act_facts


COMPILE_CASES = [  # every format, grouped (MoE), K tails, block_m 8..128, split-K on / off
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=1),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=3, GROUPED=True, HAS_BIAS=False, K_TAIL=True),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, GROUPED=True, HAS_BIAS=False, FMT=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=1, STAGES=3, WARPS=8),  # two warpgroups (gated)
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, GROUPED=True, HAS_BIAS=False),
    # W*A*: the activation QDQ in the kernel (fuse_act, gated): three formats, every rounding
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even"),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, ACT="mxint8:rceil"),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, K_TAIL=True, ACT="mxfp8_e4m3:floor"),
    # mxfp8 e4m3 weights (FMT 3, gated): A and B words; grouped, K tails, two warpgroups
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, FMT=3, K_TAIL=True, WARPS=8),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=3, GROUPED=True, HAS_BIAS=False),
    # K tiles in halves (sub_k 2, gated): every format, one and two warpgroups, grouped
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, SUB_K=2),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=1, SUB_K=2, K_TAIL=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=2, FMT=2, WARPS=8, SUB_K=2),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3, SUB_K=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, WARPS=8, GROUPED=True, HAS_BIAS=False,
         SUB_K=2),
    # two 64-row blocks a warpgroup (rep 2, gated): every format, split-K, grouped, K halves
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, REP=2, FMT=2, K_TAIL=True),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, REP=2, FMT=3, SUB_K=2),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=3, REP=2, FMT=1, GROUPED=True,
         HAS_BIAS=False),
    # the x tile by TMA (tma_x, gated): every format, K tails, two warpgroups, grouped, the
    # fused QDQ, K halves, rep 2
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, K_TAIL=True, WARPS=8, X_TMA=True),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=2, FMT=3, SUB_K=2, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=1, GROUPED=True, HAS_BIAS=False,
         X_TMA=True),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even", X_TMA=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2, X_TMA=True)]


_COMPILE = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from kernels.triton import linear_wgmma as lw
kern = lw._wgmma_linear_kernel
names = kern.arg_names
by16 = {"K", "stride_x", "stride_o", "stride_we", "stride_se"}
found = []
for consts in json.loads(sys.stdin.read()):
    consts["ACT"] = tuple(consts["ACT"])
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "b_ptr": "*i32", "s_ptr": "*u8",
            "bias_ptr": "*fp32", "out_ptr": "*fp32" if consts["GROUPED"] else "*bf16",
            "part_ptr": "*fp32", "lock_ptr": "*i32", "grp_ptr": "*i32", "dest_ptr": "*i32",
            "rw_ptr": "*fp32"}
    if consts.get("X_TMA"):  # x as a TMA descriptor of [BLOCK_M, BLOCK_K] boxes
        from kernels.triton.wgmma_tiles import X_SMEM
        ptrs["x_ptr"] = f"tensordesc<bf16[{consts['BLOCK_M']}, {consts['BLOCK_K']}],{X_SMEM!r}>"
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if (n in ptrs or n in by16) and not sig[n].startswith("tensordesc")}
    try:
        ptx = triton.compile(GluonASTSource(kern, sig, consts, attrs),
                             target=GPUTarget("cuda", 90, 32),
                             options=dict(num_warps=consts["WARPS"])).asm["ptx"]
    except Exception as e:  # reported by the case's own test
        found.append({"error": f"{type(e).__name__}: {e}"[-3000:]})
        continue
    found.append({p: len(re.findall(p, ptx)) for p in (
        r"wgmma\\.mma_async", r"st\\.shared", r"wgmma\\.wait_group\\.sync\\.aligned 0",
        r"shfl\\.sync", r"cvt\\.rn\\.bf16", r"cp\\.async\\.bulk\\.tensor",
        r"cp\\.async\\.cg\\.shared\\.global", r"mbarrier\\.try_wait")})
print(json.dumps(found))
"""


def compile_consts(case: dict) -> dict:
    """A compile case's constexprs (the defaults, the case, ACT's facts from its key name)."""
    consts = {**dict(HAS_BIAS=True, WARPS=fw.WGMMA_WARPS, K_TAIL=False, GROUPED=False, FMT=0,
                     SUB_K=1, REP=1, X_TMA=False, PDL=False), **case}
    fmt, _, rounding = case.get("ACT", "").partition(":")
    consts["ACT"] = act_facts(QuantKey.mx(fmt, rounding=rounding, static=False)) if fmt else ()
    assert bool(consts["ACT"]) == bool(fmt)
    return consts


@pytest.fixture(scope="module")
def compiled_cases() -> list:
    """Every COMPILE_CASES entry compiled in ONE fresh process (triton imported once: ~3 s a
    case saved). Fresh: the interpreter, once it has run a kernel in this process, has patched
    triton.language."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[3]),
                                         env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE], env=env, capture_output=True,
                         text=True, timeout=900,
                         input=json.dumps([compile_consts(c) for c in COMPILE_CASES]))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index", range(len(COMPILE_CASES)), ids=[
    "-".join(f"{k}{v}" for k, v in c.items()) for c in COMPILE_CASES])
def test_the_kernel_compiles_for_sm90_without_a_shared_round_trip(index: int,
                                                                  compiled_cases: list) -> None:
    """Compiled here for sm_90a (no GPU needed; this triton's Gluon and ptxas) with the launch's
    specialization (16-byte aligned pointers; K and the row strides multiples of 16, as the
    host guarantees): the decoders' layouts convert with no data movement (assert_trivial,
    checked at compile time), one wgmma per 16 of K a tile (and 64-row block: REP), and no
    decoded value goes through shared memory (at most the split-K flag's one st.shared)."""
    case, found = COMPILE_CASES[index], compiled_cases[index]
    assert "error" not in found, found.get("error")
    assert found[r"wgmma\.mma_async"] == case["BLOCK_K"] // 16 * case.get("REP", 1)
    if case.get("ACT"):  # the x tile's QDQ: block maxima by shuffles, an RNE cast, shared stores
        assert found[r"shfl\.sync"] > 0 and found[r"cvt\.rn\.bf16"] > 0
    else:  # no decoded weight value through shared memory
        assert found[r"st\.shared"] <= 1
    assert found[r"wgmma\.wait_group\.sync\.aligned 0"] >= 1
    # X_TMA: x by TMA copies waited on through mbarriers; else no TMA at all
    assert (found[r"cp\.async\.bulk\.tensor"] > 0) == bool(case.get("X_TMA"))
    assert (found[r"mbarrier\.try_wait"] > 0) == bool(case.get("X_TMA"))
