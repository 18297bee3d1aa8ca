"""Determinism: the same inputs give the same bits, run to run (on this machine's device; on a
CPU, Triton kernels run in its interpreter).

Every comparison is bit for bit through integer views (NaN payloads and signed zeros count).
Each case runs once, then other calls are interleaved (other inputs, other ops) so every cache
is warm, then runs again on a FRESH PreparedWeight and a freshly loaded kernel instance (or a
fresh MoE layer), and once more on the first, now-warm, prepared state. Inputs are fresh
seeded random data with zero, subnormal, NaN and Inf 32-blocks.
Covered: every kernel runnable here (registry.machine.probe.runnable_here) x every scheme it
accepts; mx_quantize / mx_dequantize / mx_qdq for both backends, every format, rounding and layout (one
input dtype per case, cycling, so every dtype is covered too); MXGroupedExperts with both
backends for every scheme; triton-emulation's strategies (decode with split-K 1 / 2 / 3, the
split fp4 layout, the 2-D accumulator, the generic fp4 decode, the GPU default configs; tiled;
dequant-gemm); and tools/check_determinism.py's CPU path end to end.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

from kernels.base import load_kernel
from kernels.moe import MXGroupedExperts
from kernels.mx import mx_dequantize, mx_qdq, mx_quantize
from kernels.select.kernel_table import kernel_by_name
from kernels.select.resolve import accepts
from kernels.spec.formats import FORMATS, ROUNDINGS
from registry.files.catalog import load_schemes
from registry.nn.layers import platform_for_device
from registry.machine.probe import runnable_here

from support.device import DEVICE  # the GPU when there is one, else the CPU (Triton interpreter)
from support.paths import REPO, TOOLS
from support.tools import load_tool

cd = load_tool("check_determinism")

HERE = platform_for_device(DEVICE)
CATALOG = load_schemes(env={})
SCHEMES = sorted(CATALOG.schemes.values(), key=lambda s: s.name)
PAIRS = [(k, s) for k in runnable_here(HERE) for s in SCHEMES
         if accepts(kernel_by_name(k), s.contract, HERE)[0]]
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def gen(*parts: object) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(" ".join(map(str, parts)).encode()))


def assert_same(first, *others, what: str) -> None:
    for i, other in enumerate(others):
        assert cd.same_bits(first, other), (
            f"{what}: run {i + 2} differs from run 1 (max ulp {cd.max_ulp(first, other)})")


def special_input(rows: int, k: int, g: torch.Generator, dtype=torch.float32, scale=1.0,
                  nan: bool = True) -> torch.Tensor:
    """Random rows; row 0 holds a zero, a subnormal and (nan=True) a NaN and an Inf block."""
    x = cd.special_blocks(torch.randn(rows, k, generator=g) * scale, 0, nan=nan)
    return x.to(device=DEVICE, dtype=dtype)


def test_the_cases_cover_every_kernel_format_and_activation_kind() -> None:
    """The pair list follows the kernel table; the Triton MoE subset spans every weight format
    and every kind of activation key."""
    assert {k for k, _ in PAIRS} == set(runnable_here(HERE))
    assert len(PAIRS) >= len(SCHEMES) * 2  # reference-emulation + triton-emulation at least
    moe = [s for s, b in MOE if b == "triton"]
    assert {s.contract.weight.format for s in moe} == set(FORMATS) - {"mxfp8_e5m2"} == \
        {s.contract.weight.format for s in SCHEMES}
    kinds = {None if s.activation is None else s.activation.static for s in moe}
    assert kinds == {None, False, True}


# --- every kernel x every scheme it accepts --------------------------------------------------
@pytest.mark.parametrize("kernel_name,scheme", PAIRS,
                         ids=[f"{k}-{s.name}" for k, s in PAIRS])
def test_kernel_gives_the_same_bits_with_fresh_state(kernel_name: str, scheme) -> None:
    g = gen("kernel", kernel_name, scheme.name)
    rng = random.Random(g.initial_seed())
    m = rng.choice((1, 4, 20))  # decode (FMA), decode (dot), tiled on the interpreter
    n, k = 48, 128
    w = special_input(n, k, g, scale=0.05)
    x = special_input(m, k, g, torch.bfloat16, nan=m > 1)  # M = 1 with NaN: all NaN
    other = torch.randn(3, k, generator=g).to(DEVICE, torch.bfloat16)
    bias = torch.randn(n, generator=g).to(DEVICE, torch.bfloat16)
    scale = cd.static_scale(scheme, x)

    kernel = load_kernel(kernel_name)
    prepared = kernel.prepare(w, scheme.contract, act_scale=scale)
    first = kernel.apply(x, prepared, bias)
    kernel.apply(other, prepared, None)  # interleaved: other shapes, other kernels, codec
    load_kernel("reference-emulation").apply(other, prepared, bias)
    mx_qdq(other, "mxfp4", rounding="even")
    fresh_kernel = load_kernel(kernel_name)
    assert fresh_kernel is not kernel
    fresh = fresh_kernel.apply(x, fresh_kernel.prepare(w, scheme.contract, act_scale=scale),
                               bias)
    warm = kernel.apply(x, prepared, bias)
    assert_same(first, fresh, warm, what=f"{kernel_name} {scheme.name} M={m}")
    assert first.isnan().any() or m == 1  # the NaN / Inf blocks reached the output


# --- codec ops -------------------------------------------------------------------------------
CODEC = [(b, f, r) for b in ("reference", "triton") for f in FORMATS for r in ROUNDINGS]


@pytest.mark.parametrize("backend,fmt,rounding", CODEC, ids=["-".join(c) for c in CODEC])
def test_codec_ops_give_the_same_bits(backend: str, fmt: str, rounding: str) -> None:
    i = CODEC.index((backend, fmt, rounding))
    dtype = DTYPES[i % len(DTYPES)]  # cycling: every dtype meets every backend
    g = gen("codec", backend, fmt, rounding)
    x = special_input(5, 96, g, dtype, scale=3.0)
    other = torch.randn(7, 64, generator=g).to(DEVICE, dtype)
    layouts = ("packed", "unpacked") if FORMATS[fmt].bits < 8 else ("unpacked",)

    def run() -> list[torch.Tensor]:
        outs = [mx_qdq(x, fmt, rounding=rounding, backend=backend)]
        for layout in layouts:
            q = mx_quantize(x, fmt, rounding=rounding, backend=backend, layout=layout)
            outs += [q.data, q.scales, mx_dequantize(q, dtype, backend=backend)]
        return outs

    first = run()
    mx_qdq(other, "mxint8", rounding="floor", backend=backend)  # interleaved
    mx_quantize(other, fmt, rounding=rounding, backend=backend)
    for a, b in zip(first, run()):
        assert_same(a, b, what=f"{backend} {fmt} {rounding} {dtype}")


# --- MoE layer -------------------------------------------------------------------------------
# The reference for every scheme; the (interpreted, slower) Triton kernel for every weight
# format and every kind of activation key (none, dynamic MX, static fp8).
TRITON_MOE = ("w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e2m3_a_fp8", "w_mxfp6_e3m2_a_mxfp6_e3m2",
              "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxint8_a_mxint8")
MOE = [(s, "reference") for s in SCHEMES] + [(CATALOG.get(n), "triton") for n in TRITON_MOE]


@pytest.mark.parametrize("scheme,backend", MOE, ids=[f"{s.name}-{b}" for s, b in MOE])
def test_moe_layer_gives_the_same_bits_with_a_fresh_layer(scheme, backend: str) -> None:
    g = gen("moe", scheme.name, backend)
    e, n, k, tokens, top_k = 4, 24, 64, 9, 2
    w = special_input(e * n, k, g, scale=0.05).view(e, n, k)
    x = special_input(tokens, k, g, torch.bfloat16)
    logits = torch.randn(tokens, e, generator=g).to(DEVICE)
    scale = cd.static_scale(scheme, x)
    layer = MXGroupedExperts(w, scheme, backend=backend, act_scale=scale)
    first = layer(x, logits, top_k)
    layer(x[:3], logits[:3], 1)  # interleaved: another batch and top_k
    fresh = MXGroupedExperts(w, scheme, backend=backend, act_scale=scale)(x, logits, top_k)
    assert_same(first, fresh, layer(x, logits, top_k), what=f"MoE {backend} {scheme.name}")


# --- triton-emulation strategies ---------------------------------------------------------------
def _decode_configs():
    from kernels.triton import linear_decode as ld

    small = dict(block_n=16, block_k=64, warps=1, stages=1)
    cases = [("decode", 1, ld.DecodeConfig(split=1, **small)),
             ("decode", 1, ld.DecodeConfig(split=3, **small)),
             ("decode", 1, ld.DecodeConfig(split=1, acc2d=True, split_fp4=True, **small)),
             ("decode", 1, ld.DecodeConfig(split=2, fast_fp4=False, **small)),
             ("decode", 5, ld.DecodeConfig(split=2, split_fp4=True, **small)),
             ("decode", 40, ld.DecodeConfig(split=2, **small)),
             ("decode", 5, ld.default_config(5, 8, True)),
             ("tiled", 20, None), ("dequant-gemm", 20, None)]
    for name in ("GPU_FMA_CONFIG", "GPU_FMA_CONFIG_8BIT", "GPU_DOT_CONFIG_FP4",
                 "GPU_DOT_CONFIG_8BIT"):  # the H200 defaults, in the interpreter
        cases.append(("decode", 1 if "FMA" in name else 16, getattr(ld, name)))
    return cases


STRATEGIES = _decode_configs()
# fp4 weights x dynamic MX activations, 8-bit weights, fp6 weights x static fp8 activations
STRATEGY_SCHEMES = ("w_mxfp4_a_mxfp4", "w_mxint8_a_mxint8", "w_mxfp6_e3m2_a_fp8")


@pytest.mark.parametrize("scheme_name", STRATEGY_SCHEMES)
@pytest.mark.parametrize("strategy,m,config", STRATEGIES,
                         ids=[f"{s}-M{m}-{i}" for i, (s, m, _) in enumerate(STRATEGIES)])
def test_emulation_strategies_give_the_same_bits(strategy: str, m: int, config,
                                                 scheme_name: str) -> None:
    from kernels.triton.linear_emulation import fused_linear

    scheme = CATALOG.get(scheme_name)
    g = gen("strategy", strategy, m, config, scheme_name)
    k = 512 if config is not None and config.block_k > 64 else 192
    n = 40
    w = special_input(n, k, g, scale=0.05)
    x = special_input(m, k, g, torch.bfloat16, nan=m > 1)
    bias = torch.randn(n, generator=g).to(DEVICE, torch.bfloat16)
    scale = cd.static_scale(scheme, x)
    kernel = load_kernel("triton-emulation")

    def run(prepared):
        return fused_linear(x, prepared, bias, strategy=strategy, config=config)

    prepared = kernel.prepare(w, scheme.contract, act_scale=scale)
    first = run(prepared)
    fused_linear(x[:1], prepared, None, strategy="decode")  # interleaved, fills other caches
    fresh = run(load_kernel("triton-emulation").prepare(w, scheme.contract, act_scale=scale))
    assert_same(first, fresh, run(prepared), what=f"{strategy} M={m} {config} {scheme_name}")


# --- the comparison itself, and the GPU tool's CPU path ------------------------------------------
def test_the_bit_comparison_sees_every_difference() -> None:
    a = torch.tensor([1.0, 0.0, float("nan"), -2.0])
    assert cd.same_bits(a, a.clone())
    assert not cd.same_bits(a, torch.tensor([1.0, -0.0, float("nan"), -2.0]))  # signed zero
    other_nan = a.clone().view(torch.int32)
    other_nan[2] += 1  # another NaN payload
    assert not cd.same_bits(a, other_nan.view(torch.float32))
    assert cd.max_ulp(a, other_nan.view(torch.float32)) == 1
    b = a.clone()
    b[3] = torch.nextafter(b[3], torch.tensor(0.0))
    assert cd.max_ulp(a, b) == 1
    assert cd.max_ulp(a.bfloat16(), a.bfloat16()) == 0
    assert not cd.same_bits(a, a.double())


def test_run_case_catches_a_nondeterministic_call() -> None:
    g = torch.Generator().manual_seed(1)

    def noisy():
        return (torch.ones(8) + torch.rand(8, generator=g) * 1e-6,)

    same, ulp, where = cd.run_case(noisy, noisy, repeats=3, threads=2, sync=lambda: None)
    assert not same and ulp and ulp > 0 and "repeat 1" in where
    def steady():
        return (torch.arange(4.0),)

    assert cd.run_case(steady, steady, repeats=3, threads=2, sync=lambda: None)[:2] == (True, None)


def test_check_determinism_tool_runs_here(tmp_path: Path) -> None:
    """The H200 tool as a script, every section, on this machine's device (the CPU: the
    interpreter and tiny shapes)."""
    out = tmp_path / "det.json"
    proc = subprocess.run(
        [sys.executable, str(TOOLS / "check_determinism.py"), "--device",
         "cuda" if DEVICE == "cuda" else "cpu", "--quick", "--repeats", "2", "--threads", "2", "--schemes", "w_mxfp4_a_mxfp4",
         "--out", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert data["failed"] == 0 and rows and all(r["identical"] is True for r in rows)
    assert {r["section"] for r in rows} >= {"linear", "decode", "tiled", "codec", "moe"}
    assert {r["kernel"] for r in rows if r["section"] == "linear"} == {
        k for k, s in PAIRS if s.name == "w_mxfp4_a_mxfp4"}
    for key in ("device", "torch", "triton", "cuda", "date"):
        assert key in data["environment"]
    assert "| linear | triton-emulation | w_mxfp4_a_mxfp4 |" in proc.stdout
