"""MoE experts through the Gluon wgmma kernel on an sm_90 GPU (kernels/triton/moe_wgmma.py; the
layout, configs and refusals on the CPU: test_moe_wgmma.py): against kernels.reference.moe
(W4A16 and W4A4; one token to hundreds; empty experts, one expert taking every token, N and K
tails, NaN blocks), every weight format and config kind, deterministic, CUDA-graph capturable,
and the grouped Triton entry point taking this path when `moe_wgmma.VERIFIED`.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.mx import MXTensor
from kernels.reference.moe import grouped_experts_reference
from kernels.spec.contract import QuantKey
from kernels.triton import linear_configs, linear_wgmma, moe_grouped, moe_wgmma, wgmma_gates
from support.moe_experts import EIGHT_BIT, experts, experts6, experts8

ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
gpu = pytest.mark.skipif(not ON_SM90, reason="wgmma runs on sm_90 only; test_moe_wgmma.py "
                         "checks the experts' layout on a CPU")
A_MXFP4 = QuantKey.mx("mxfp4", rounding="even", static=False)


def routing(tokens: int, e: int, top_k: int, gen: torch.Generator, case: str = "random"):
    ids = torch.stack([torch.randperm(e, generator=gen)[:top_k] for _ in range(tokens)])
    if case == "one expert":  # expert 0 in every token's first slot: many M tiles
        ids[:, 0] = 0
        ids[:, 1:] = torch.stack([1 + torch.randperm(e - 1, generator=gen)[:top_k - 1]
                                  for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=gen) + 0.1
    return ids.cuda(), weights.cuda()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    fin = want.isfinite()
    assert torch.equal(got.isnan(), want.isnan())
    return float((got[fin] - want[fin]).double().norm() / want[fin].double().norm())


@gpu
@pytest.mark.parametrize("e,n,k,top_k,tokens,case", [
    (8, 256, 512, 2, 1, "random"), (8, 256, 512, 2, 16, "random"), (8, 256, 512, 2, 300, "random"),
    (4, 200, 2880, 3, 5, "random"), (8, 128, 1024, 2, 200, "one expert"),
    (64, 64, 256, 6, 3, "random")])
@pytest.mark.parametrize("act", (None, A_MXFP4), ids=("w4a16", "w4a4"))
def test_matches_the_reference(e, n, k, top_k, tokens, case, act) -> None:
    """fp32 before the cast: bf16 x bf16-exact products in fp32, so only the summation order
    differs from the reference (1e-5 relative, ACC_BOUND of tests/support/moe_oracle.py)."""
    gen = torch.Generator().manual_seed(e * 1000 + tokens + k)
    w = experts(e, n, k, gen, nan_blocks=3)
    w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
    x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16).cuda()
    ids, rw = routing(tokens, e, top_k, gen, case)
    assert moe_wgmma.unavailable(x, w, act) is None
    cached: dict = {}
    got = moe_wgmma.grouped_experts_wgmma(x, w, act, ids, rw, torch.float32, cached)
    want = grouped_experts_reference(x, w, act, None, ids, rw, torch.float32)
    assert rel_err(got, want) <= 1e-5
    again = moe_wgmma.grouped_experts_wgmma(x, w, act, ids, rw, torch.float32, cached)
    assert torch.equal(again.view(torch.int32), got.view(torch.int32))  # deterministic


@gpu
def test_every_table_config_and_split() -> None:
    gen = torch.Generator().manual_seed(7)
    w = experts(8, 192, 1024, gen)
    w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
    x = torch.randn(40, 1024, generator=gen).to(torch.bfloat16).cuda()
    ids, rw = routing(40, 8, 2, gen)
    want = grouped_experts_reference(x, w, None, None, ids, rw, torch.float32)
    for row in linear_configs.TABLE:  # (the wide ws rows: test_wide_tile_experts_match_...)
        if row.strategy == "wgmma" and row.config.block_m <= 128:
            for split in (1, 3):
                cfg = type(row.config)(row.config.block_m, row.config.block_k, split,
                                       row.config.stages, warps=row.config.warps)
                got = moe_wgmma.grouped_experts_wgmma(x, w, None, ids, rw, torch.float32, {},
                                                      cfg)
                assert rel_err(got, want) <= 1e-5, cfg


@gpu
def test_captured_in_a_cuda_graph_and_taken_by_the_triton_entry(monkeypatch) -> None:
    gen = torch.Generator().manual_seed(11)
    w = experts(8, 128, 512, gen)
    w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
    x = torch.randn(4, 512, generator=gen).to(torch.bfloat16).cuda()
    ids, rw = routing(4, 8, 2, gen)
    cached: dict = {}
    eager = moe_wgmma.grouped_experts_wgmma(x, w, None, ids, rw, torch.bfloat16, cached)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = moe_wgmma.grouped_experts_wgmma(x, w, None, ids, rw, torch.bfloat16, cached)
    graph.replay()
    assert torch.equal(captured, eager)
    calls = []
    real = moe_wgmma.grouped_experts_wgmma
    monkeypatch.setattr(moe_wgmma, "VERIFIED", True)
    monkeypatch.setattr(moe_wgmma, "grouped_experts_wgmma",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    out = moe_grouped.grouped_experts_triton(x, w, None, None, ids, rw, torch.bfloat16)
    assert calls and torch.equal(out, eager)


@gpu
@pytest.mark.parametrize("fmt,layout", [("mxfp6_e2m3", "unpacked"), ("mxfp6_e3m2", "packed")])
def test_fp6_experts_match_the_reference(fmt: str, layout: str, monkeypatch) -> None:
    """mxfp6 experts (W6A16 and W6A6) through the kernel's FMT 1 / 2. (Run with mxfp6 switched
    on: with test_wgmma_formats' fp6 test, what switches it on: `FP6_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "FP6_VERIFIED", True)
    act6 = QuantKey.mx(fmt, rounding="even", static=False)
    for e, n, k, top_k, tokens in ((8, 256, 512, 2, 1), (8, 136, 2880, 2, 40),
                                   (4, 64, 1024, 2, 300)):
        gen = torch.Generator().manual_seed(e + n + k + tokens + len(fmt))
        w = experts6(fmt, e, n, k, layout, gen)
        w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
        x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16).cuda()
        ids, rw = routing(tokens, e, top_k, gen)
        for act in (None, act6):
            assert moe_wgmma.unavailable(x, w, act) is None
            got = moe_wgmma.grouped_experts_wgmma(x, w, act, ids, rw, torch.float32, {})
            want = grouped_experts_reference(x, w, act, None, ids, rw, torch.float32)
            assert rel_err(got, want) <= 1e-5, (e, n, k, tokens, act)


@gpu
@pytest.mark.parametrize("fmt", EIGHT_BIT)
def test_8bit_experts_match_the_reference(fmt: str, monkeypatch) -> None:
    """mxfp8 e4m3 / mxint8 experts (W8A16 and W8A8) through the kernel's FMT 3 / 4, GROUPED:
    every code and edge scale byte, N and K tails, one expert taking every token, T from 1 to
    300, through the entry (grouped_experts_triton) as well. (Run with 8-bit experts switched
    on: this test is what switches them on, `EIGHT_BIT_VERIFIED`.)"""
    monkeypatch.setattr(moe_wgmma, "EIGHT_BIT_VERIFIED", True)
    act8 = QuantKey.mx(fmt, rounding="even", static=False)
    for e, n, k, top_k, tokens, case in ((8, 256, 512, 2, 1, "random"),
                                         (8, 136, 2880, 2, 40, "random"),
                                         (4, 200, 1024, 2, 300, "one expert")):
        gen = torch.Generator().manual_seed(e + n + k + tokens + len(fmt))
        w = experts8(fmt, e, n, k, gen)
        w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
        x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16).cuda()
        ids, rw = routing(tokens, e, top_k, gen, case)
        for act in (None, act8):
            assert moe_wgmma.unavailable(x, w, act) is None
            got = moe_wgmma.grouped_experts_wgmma(x, w, act, ids, rw, torch.float32, {})
            want = grouped_experts_reference(x, w, act, None, ids, rw, torch.float32)
            assert rel_err(got, want) <= 1e-5, (e, n, k, tokens, act)
            entry = moe_grouped.grouped_experts_triton(x, w, act, None, ids, rw, torch.float32)
            assert rel_err(entry, want) <= 1e-5, (e, n, k, tokens, act)


def many_tile_cases(fmt: str, salt: int = 0):
    """(x, experts, ids, routing weights, activation key or None, the reference's output) on
    the GPU: N tails (200: a tile and a half an expert), K tails (2880), one expert taking
    every token (many M tiles), NaN blocks; W*A16 and W*A* (the format's own dynamic key)."""
    act = QuantKey.mx(fmt, rounding="even", static=False)
    for e, n, k, top_k, tokens, case in ((8, 200, 1024, 2, 300, "one expert"),
                                         (4, 128, 2880, 3, 100, "random")):
        gen = torch.Generator().manual_seed(e + n + k + len(fmt) + salt)
        w = experts(e, n, k, gen, nan_blocks=3) if fmt == "mxfp4" else \
            experts6(fmt, e, n, k, "packed", gen)
        w = MXTensor(w.data.cuda(), w.scales.cuda(), w.fmt, w.rounding, w.shape, w.layout)
        x = torch.randn(tokens, k, generator=gen).to(torch.bfloat16).cuda()
        ids, rw = routing(tokens, e, top_k, gen, case)
        for a in (None, act):
            yield x, w, ids, rw, a, grouped_experts_reference(x, w, a, None, ids, rw,
                                                              torch.float32)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_two_warpgroup_experts_match_the_reference(fmt: str, monkeypatch) -> None:
    """warps = 8 (128 weight rows a program, the experts' 128-row layout): W*A16 and W*A*,
    block_m 64 / 128, split 1 / 2, N tails (200: a tile and a half an expert), K tails, one
    expert taking every token (many M tiles), NaN blocks; two calls bit-identical. (Run with
    warps 8 switched on: with test_wgmma_formats', what switches it on: `WARPS_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "WARPS_VERIFIED", (4, 8))
    monkeypatch.setattr(wgmma_gates, "FP6_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "SUB_K_VERIFIED", True)  # (and K halves: sub_k 2,
    monkeypatch.setattr(wgmma_gates, "REP_VERIFIED", True)  # 128 rows a warpgroup: rep 2)
    for x, w, ids, rw, a, want in many_tile_cases(fmt):
        for block_m, split, sub_k, warps, rep in ((64, 2, 1, 8, 1), (128, 1, 1, 8, 1),
                                                  (128, 2, 2, 8, 1), (128, 2, 1, 4, 2),
                                                  (32, 1, 2, 8, 2)):
            cfg = linear_wgmma.WgmmaConfig(block_m, 128, split, 3 - sub_k // 2, warps=warps,
                                           sub_k=sub_k, rep=rep,
                                           maxnreg=128 if sub_k == 2 and rep == 1 else 0)
            cached: dict = {}
            if warps * rep == 16 and -(-w.shape[1] // 128) % 2:  # 256 rows a program, experts of
                # 128 padded rows: into the next expert's, past the last's end — refused
                with pytest.raises(ValueError, match="moe_wgmma: a program of 256 weight rows"):
                    moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, cfg)
                continue
            got = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, cfg)
            assert rel_err(got, want) <= 1e-5, (fmt, w.shape, a, block_m, split, sub_k, rep)
            again = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached,
                                                    cfg)
            assert torch.equal(again.view(torch.int32), got.view(torch.int32))


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_x_by_tma_experts_match_the_reference(fmt: str, monkeypatch) -> None:
    """tma_x on the experts' sorted rows: an M tile's rows past its expert's are the next
    expert's (or past the end: zero-filled), and reach only accumulator columns never stored;
    bit for bit the cp.async kernel's output, close to the reference; W*A16 and W*A*, block_m
    16 / 64 / 128, split 1 / 2, one and two warpgroups, rep 2 (the experts row), K tails, NaN
    blocks. (With test_wgmma_formats', what switches it on: `TMA_X_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "FP6_VERIFIED", True)
    for x, w, ids, rw, a, want in many_tile_cases(fmt, salt=3):
        for block_m, split, warps, rep in ((16, 2, 4, 1), (64, 1, 8, 1), (128, 2, 4, 1),
                                           (128, 2, 4, 2)):
            plain = linear_wgmma.WgmmaConfig(block_m, 128, split, 3, warps=warps, rep=rep)
            tma = dataclasses.replace(plain, tma_x=True)
            got = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, {}, tma)
            base = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, {}, plain)
            assert torch.equal(got.view(torch.int32), base.view(torch.int32)), (
                w.shape, block_m, split, a)
            assert rel_err(got, want) <= 1e-5, (w.shape, block_m, split, a)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_wide_tile_experts_match_the_reference(fmt: str, monkeypatch) -> None:
    """The wide ws tile (block_m 256: 128 weight rows, one 64-row block a consumer) on the
    experts' tile table: each consumer stores its own features of its expert's rows (weighted
    fp32), slots past the last tile none; close to the reference and to the one-partition
    kernel, bit-identical on repeat; W*A16 and W*A*, 2 stages (3 for mxfp4), N and K tails."""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    stages = 3 if fmt == "mxfp4" else 2
    wide = linear_wgmma.WgmmaConfig(256, 128, 1, stages, tma_x=True, ws=True)
    one = linear_wgmma.WgmmaConfig(128, 128, 1, 3)
    for x, w, ids, rw, a, want in many_tile_cases(fmt, salt=9):
        cached: dict = {}
        got = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, wide)
        again = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, wide)
        base = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, {}, one)
        case = (w.shape, a)
        assert torch.equal(again.view(torch.int32), got.view(torch.int32)), case
        assert rel_err(got, want) <= 1e-5 and rel_err(got, base) <= 1e-5, case


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_warp_specialized_experts_match_the_reference(fmt: str, monkeypatch) -> None:
    """ws on the experts' tile table (linear_wgmma_ws, GROUPED): slots past the last tile run
    no K tile and store nothing; an M tile's rows past its expert's reach only columns never
    stored; close to the reference and to the one-partition kernel (another fp32 order: the
    two consumers' sums), bit-identical on repeat; W*A16 and W*A*, block_m 16 / 64 / 128,
    split 1 / 2, 2 / 4 stages, block_k 128 / 256, N and K tails, NaN blocks."""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "FP6_VERIFIED", True)
    for x, w, ids, rw, a, want in many_tile_cases(fmt, salt=5):
        for block_m, block_k, split, stages in ((16, 128, 2, 4), (64, 256, 1, 2),
                                                (128, 128, 1, 4), (128, 128, 2, 2)):
            ws = linear_wgmma.WgmmaConfig(block_m, block_k, split, stages, tma_x=True, ws=True)
            one = dataclasses.replace(ws, ws=False)
            cached: dict = {}
            got = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, ws)
            again = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, cached, ws)
            base = moe_wgmma.grouped_experts_wgmma(x, w, a, ids, rw, torch.float32, {}, one)
            case = (w.shape, block_m, block_k, split, stages, a)
            assert torch.equal(again.view(torch.int32), got.view(torch.int32)), case
            assert rel_err(got, want) <= 1e-5 and rel_err(got, base) <= 1e-5, case
