"""Programmatic dependent launch from a W*A* layer's activation QDQ to its wgmma GEMM
(kernels/triton/grid_dependency.py, gated by PDL_VERIFIED).

On the CPU (CI): the kernels compiled here for sm_90a — the QDQ kernel releases its dependents
only with TRIGGER, each GEMM kernel waits only with PDL, and before any global memory access —
and the launches recorded: with the gate on, a W*A* layer's QDQ releases and its GEMM is launched
programmatically (the kernel's PDL and the launch's `pdl` alike), a W4A16 layer's GEMM is not,
and with the gate off nothing is. On an sm_90 GPU: with the gate on, W4A4 through the table gives
the bits it gives with the gate off, call after call on fresh rows (a GEMM reading the QDQ's rows
before they are written would not), eager and replayed in a CUDA graph.
"""
from __future__ import annotations

import pytest
import torch

from kernels.base import load_kernel
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import grid_dependency, mx_quant
from kernels.triton import launcher as launcher_mod
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton.linear_emulation import fused_linear
from support.mx_weights import fp4_weight
from support.sm90_compile import case_ids, compile_cases

KERNEL = load_kernel("triton-emulation")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (NaN where NaN: the weights' NaN scale bytes reach the output)."""
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def contract(activation: bool) -> SchemeContract:
    w = QuantKey.mx("mxfp4", rounding="even", static=True)
    a = QuantKey.mx("mxfp4", rounding="even", static=False) if activation else None
    return SchemeContract(weight=w, activation=a)


# ------------------------------------------------------------------ CPU: compiled for sm_90a
_COMPILE = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource
from kernels.spec.formats import get_format
from kernels.triton import mx_quant
from kernels.triton.mx_codec import format_constexprs
from support.sm90_compile import BY16, wgmma_signature

GENERIC = r"\\b(ld|st|atom|red)\\.global"  # loads, stores, atomics
# a cp.async whose source size is a register: x's row / column masked copy (the weight's are
# whole 16 / 4 bytes: immediates)
MASKED = r"cp\\.async\\.c[ag]\\.shared\\.global \\[[^]]*\\], \\[[^]]*\\], 0x10, %r"
found = []
for c in json.loads(sys.stdin.read()):
    if c["kernel"] == "qdq":
        kern = mx_quant._qdq_kernel
        consts = dict(format_constexprs(get_format("mxfp4")), IN_KIND=1, ROUNDING=0,
                      HW_CAST=True, BLOCK_R=16, BLOCK_K=256, TRIGGER=c["flag"])
        ptrs = {"x_ptr": "*i16", "out_ptr": "*i16"}
        sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in kern.arg_names}
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kern.arg_names)
                 if n in ptrs or n in BY16}
        make = lambda: ASTSource(kern, sig, consts, attrs)
    else:
        is_ws = c["kernel"] == "ws"
        consts = dict(HAS_BIAS=False, SPLIT=2, BLOCK_M=c["BLOCK_M"], BLOCK_K=c["BLOCK_K"],
                      STAGES=c.get("STAGES", 4), WARPS=4, K_TAIL=False, GROUPED=False,
                      FMT=c.get("FMT", 0), ACT=(), SUB_K=1, REP=1,
                      X_TMA=is_ws or c.get("X_TMA", False), PDL=c["flag"])
        kern, sig, attrs = wgmma_signature(consts, ws=is_ws)
        make = lambda: GluonASTSource(kern, sig, consts, attrs)
    try:
        compiled = triton.compile(make(), target=GPUTarget("cuda", 90, 32),
                                  options=dict(num_warps=4, launch_pdl=c["flag"]))
    except Exception as e:  # reported by the case's own test
        found.append({"error": f"{type(e).__name__}: {e}"[-3000:]})
        continue
    ptx = compiled.asm["ptx"]
    wait = ptx.find("griddepcontrol.wait")
    before, after = (ptx[:wait], ptx[wait:]) if wait >= 0 else ("", ptx)
    found.append({"wait": ptx.count("griddepcontrol.wait"),
                  "release": ptx.count("griddepcontrol.launch_dependents"),
                  "generic_before": len(re.findall(GENERIC, before)),
                  "cp_async_before": len(re.findall(r"cp\\.async\\.c[ag]", before)),
                  "masked_before": len(re.findall(MASKED, before)),
                  "masked_after": len(re.findall(MASKED, after)),
                  "commit_before": before.count("cp.async.commit_group"),
                  "tma_before": len(re.findall(r"cp\\.async\\.bulk\\.tensor", before)),
                  "tma_after": len(re.findall(r"cp\\.async\\.bulk\\.tensor", after)),
                  "launch_pdl": bool(compiled.metadata.launch_pdl)})
print(json.dumps(found))
"""

COMPILE_CASES = [dict(kernel="qdq", flag=False), dict(kernel="qdq", flag=True),
                 dict(kernel="wgmma", flag=False, BLOCK_M=8, BLOCK_K=256),
                 dict(kernel="wgmma", flag=True, BLOCK_M=8, BLOCK_K=256),
                 dict(kernel="wgmma", flag=True, BLOCK_M=16, BLOCK_K=128, X_TMA=True),
                 dict(kernel="wgmma", flag=True, BLOCK_M=8, BLOCK_K=256, FMT=2),
                 dict(kernel="wgmma", flag=True, BLOCK_M=16, BLOCK_K=128, FMT=3, X_TMA=True),
                 dict(kernel="ws", flag=False, BLOCK_M=16, BLOCK_K=512),
                 dict(kernel="ws", flag=True, BLOCK_M=16, BLOCK_K=512),
                 dict(kernel="ws", flag=True, BLOCK_M=256, BLOCK_K=128, FMT=3, STAGES=2)]


@pytest.fixture(scope="module")
def compiled_cases() -> list:
    return compile_cases(_COMPILE, COMPILE_CASES)


@pytest.mark.parametrize("index", range(len(COMPILE_CASES)), ids=case_ids(COMPILE_CASES))
def test_only_flagged_kernels_release_or_wait_and_weights_alone_go_first(
        index: int, compiled_cases: list) -> None:
    """The GEMM with PDL waits (the ws kernel: on each of the loader's two paths, its first
    round run or empty); before the wait the first tiles' weight copies and nothing else. The
    one-partition kernel: no global load, store or atomic, no x copy (masked cp.async, or TMA:
    its only TMA) and no cp.async group committed before it. The ws loader: weight TMA copies
    before it, x copies after (its consumers touch global memory only to store results, which
    the QDQ never reads: grid_dependency's safety note)."""
    case, found = COMPILE_CASES[index], compiled_cases[index]
    assert "error" not in found, found.get("error")
    flag = case["flag"]
    assert found["launch_pdl"] == flag
    if case["kernel"] == "qdq":
        assert (found["release"], found["wait"]) == (int(flag), 0)
        return
    assert found["release"] == 0 and bool(found["wait"]) == flag
    if not flag:
        return
    if case["kernel"] == "ws":  # the weights by TMA before the wait, the x tiles after it
        assert found["tma_before"] > 0 and found["tma_after"] > 0
        return
    assert found["wait"] == 1 and found["generic_before"] == 0
    assert found["cp_async_before"] > 0 and found["commit_before"] == 0
    assert found["masked_before"] == 0 and found["tma_before"] == 0
    if case.get("X_TMA"):
        assert found["tma_after"] > 0
    else:
        assert found["masked_after"] > 0


# ------------------------------------------------------------------------ CPU: the launches
def record(monkeypatch: pytest.MonkeyPatch) -> list:
    """Each launch as (kernel, its arguments by name, the launch's pdl), launched nowhere."""
    seen: list = []

    def launch(fn, key_, grid, args, num_warps, num_stages, **kw):
        seen.append((fn, dict(zip(fn.arg_names, args)), kw.get("pdl", False)))

    monkeypatch.setattr(launcher_mod, "launch", launch)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: None)  # general path
    monkeypatch.setattr(lw, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(le, "_check_call", lambda *a, **k: None)
    monkeypatch.setattr(le, "_INTERPRETED", False)  # (CI sets TRITON_INTERPRET)
    monkeypatch.setattr(mx_quant, "_INTERPRETED", False)
    return seen


@pytest.mark.parametrize("gate", (False, True))
@pytest.mark.parametrize("ws", (False, True))
def test_a_wa_layers_gemm_follows_its_qdq_programmatically_only_when_gated_on(
        gate: bool, ws: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grid_dependency, "PDL_VERIFIED", gate)
    seen = record(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    n, k, m = 200, 1024, 16
    cfg = lw.WgmmaConfig(block_m=16, block_k=512 if ws else 128, split=1, stages=4,
                         tma_x=ws, ws=ws)
    w = fp4_weight(n, k, gen)
    for activation in (True, False):
        prepared = KERNEL.prepare(w, contract(activation))
        fused_linear(torch.randn(m, k).to(torch.bfloat16), prepared, strategy="wgmma",
                     config=cfg)
        gemm = [(fn, args, pdl) for fn, args, pdl in seen if fn in (
            lw._wgmma_linear_kernel, lw._ws_linear_kernel)]
        qdq = [args for fn, args, _ in seen if fn is mx_quant._qdq_kernel]
        assert len(gemm) == 1 and len(qdq) == int(activation), seen
        fn, args, pdl = gemm[0]
        assert fn is (lw._ws_linear_kernel if ws else lw._wgmma_linear_kernel)
        on = gate and activation
        assert args["PDL"] is on and pdl is on  # the kernel waits exactly when launched so
        if activation:
            assert qdq[0]["TRIGGER"] is gate
        seen.clear()


def test_a_fused_qdq_or_a_moe_launch_is_never_programmatic(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """fuse_act: no QDQ launch before the GEMM to wait for; MoE experts: the token gather runs
    between the QDQ and the GEMM."""
    from support.wgmma_launches import two_experts
    from kernels.triton import moe_wgmma

    monkeypatch.setattr(grid_dependency, "PDL_VERIFIED", True)
    seen = record(monkeypatch)
    gen = torch.Generator().manual_seed(4)
    n, k = 200, 1024
    w = fp4_weight(n, k, gen)
    cfg = lw.WgmmaConfig(block_m=16, block_k=128, split=1, stages=4, fuse_act=True)
    fused_linear(torch.randn(4, k).to(torch.bfloat16), KERNEL.prepare(w, contract(True)),
                 strategy="wgmma", config=cfg)
    ex = two_experts(fp4_weight(n, k, gen), monkeypatch)
    moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex,
                                    contract(True).activation,
                                    torch.randint(0, 2, (30, 1), generator=gen),
                                    torch.ones(30, 1), torch.float32, {},
                                    lw.WgmmaConfig(block_m=16, block_k=128, split=1, stages=4))
    gemms = [(args, pdl) for fn, args, pdl in seen if fn is lw._wgmma_linear_kernel]
    assert len(gemms) == 2 and all(args["PDL"] is False and pdl is False
                                   for args, pdl in gemms)


# --------------------------------------------------------------------------- GPU: the bits
@pytest.mark.skipif(not ON_SM90, reason="programmatic dependent launch: sm_90 (the CPU tests "
                    "above check the compiled instructions and the launches)")
@pytest.mark.parametrize("n,k", ((8192, 8192), (200, 1024)))
def test_programmatic_w4a4_gives_the_same_bits_call_after_call(n: int, k: int,
                                                               monkeypatch) -> None:
    """Gate off, then on, on the same weight: each M's output equal bit for bit, for 20 fresh
    x a row count (eager), and in a CUDA graph replayed on new rows. This test is what switches
    PDL_VERIFIED on."""
    gen = torch.Generator(device="cuda").manual_seed(n + k)
    w = fp4_weight(n, k, torch.Generator().manual_seed(k)).to("cuda")
    xs = {m: [torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
              for _ in range(20)] for m in (1, 16, 64, 300)}
    want = {}
    prepared = KERNEL.prepare(w, contract(True))
    for m, rows in xs.items():
        want[m] = [fused_linear(x, prepared) for x in rows]
    monkeypatch.setattr(grid_dependency, "PDL_VERIFIED", True)
    prepared = KERNEL.prepare(w, contract(True))  # fresh plans: they read the gate
    for m, rows in xs.items():
        got = [fused_linear(x, prepared) for x in rows]
        for i, (g, v) in enumerate(zip(got, want[m])):
            assert same_bits(g, v), (m, i)
    static = xs[16][0].clone()
    graph = torch.cuda.CUDAGraph()
    fused_linear(static, prepared)
    with torch.cuda.graph(graph):
        out = fused_linear(static, prepared)
    for x, v in zip(xs[16][1:], want[16][1:]):
        static.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert same_bits(out, v)
