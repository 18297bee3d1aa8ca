"""The warp-specialized wgmma kernel on an sm_90 GPU (kernels/triton/linear_wgmma_ws.py; its
CPU checks — config rules, gates, descriptors, launches, the sm_90a compile — are in
test_linear_wgmma_ws.py): against reference-emulation and the one-partition kernel, every
weight format, M 1..128 and the wide tile past it, split-K, bias, NaN / Inf / zero / subnormal
activations, K tails, the banded program order, replayed deterministically.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.base import load_kernel
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import linear_wgmma as lw
from kernels.triton import wgmma_gates
from kernels.triton.linear_emulation import fused_linear
from support.linear_checks import close, reference_bf16, special_rows
from support.mx_weights import e4m3_weight, fp4_weight, fp6_weight, int8_weight

KERNEL = load_kernel("triton-emulation")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def key(name: str) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=True)


def ws_config(**kw) -> lw.WgmmaConfig:
    return lw.WgmmaConfig(**{**dict(block_m=64, block_k=128, split=1, stages=4, tma_x=True,
                                    ws=True), **kw})

gpu = pytest.mark.skipif(not ON_SM90, reason="wgmma runs on sm_90 only; test_linear_wgmma_ws.py "
                         "checks the descriptors, the launch and the compiled kernel on a CPU")


def weight(fmt: str, n: int, k: int, gen: torch.Generator):
    if fmt == "mxfp4":
        return fp4_weight(n, k, gen)
    if fmt == "mxfp8_e4m3":
        return e4m3_weight(n, k, gen)
    if fmt == "mxint8":
        return int8_weight(n, k, gen)
    return fp6_weight(fmt, n, k, "packed", gen)


@gpu
@pytest.mark.parametrize("fmt,n,k", [(f, n, k) for f in ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2",
                                                         "mxfp8_e4m3")
                                     for n, k in ((200, 1024), (72, 2880))] +
                         [("mxint8", 72, 2880)])
def test_warp_specialized_matches_the_reference(n: int, k: int, fmt: str, monkeypatch) -> None:
    """Close to reference-emulation and to the one-partition kernel of the same tile (the two
    consumers' sums are added once: another fp32 order), bit for bit the same on a repeat;
    M 1..128 (rows past M zero-filled by the copy), N tails, K tails (2880), split-K 1..4 with
    slices of one tile (the second consumer sums nothing), 2..6 stages, bias, specials.
    (Odd stages are refused: a slot shared by both consumers let one pass a parity wait a
    phase early: an unspecified launch failure on the H200, 2026-12-03.)"""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "INT8_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt))
    prepared = KERNEL.prepare(weight(fmt, n, k, gen).to("cuda"),
                              SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, block_m, block_k, split, stages in (
            (1, 8, 256, 4, 6), (1, 16, 128, 1, 4), (16, 16, 128, 2, 2), (40, 64, 256, 1, 2),
            (64, 64, 128, 3, 4), (100, 128, 128, 2, 2), (128, 128, 128, 1, 4),
            (3, 16, 128, 8, 2), (9, 16, 512, 1, 4), (20, 32, 256, 1, 6)):
        x = special_rows(m, k, gen)
        cfg = lw.WgmmaConfig(block_m=block_m, block_k=block_k, split=split, stages=stages,
                             tma_x=True, ws=True)
        plain = dataclasses.replace(cfg, ws=False, stages=min(stages, 4))
        for b in (None, bias):
            got = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            again = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            one = fused_linear(x, prepared, b, strategy="wgmma", config=plain)
            want = reference_bf16(x, prepared, b)
            case = (n, k, m, block_m, block_k, split, stages, b is not None)
            assert torch.equal(got.view(torch.int16), again.view(torch.int16)), case
            assert close(got, want), case
            assert close(got, one.float()), case


@gpu
@pytest.mark.parametrize("use_ws", (True, False))
def test_bound_calls_with_descriptors_give_the_general_path_s_bits(use_ws: bool,
                                                                    monkeypatch) -> None:
    """A plan's calls after its first go through its `launcher.Bound`; with tensor descriptors
    (ws: the weight's three and x's; the one-partition kernel's tma_x: x's) Triton 3.6's
    launcher is opened up (`Bound.encoded`): the weight's encoded once, x's once per (address,
    shape). Bit for bit what the general path gives (a forced config: no Bound): new values at
    a reused address, a shorter view of it (another shape), a fresh tensor, another stream."""
    import triton

    from kernels.triton import linear_emulation as le

    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    cfg = ws_config(block_m=16, block_k=128) if use_ws else lw.WgmmaConfig(
        block_m=64, block_k=128, split=2, stages=3, tma_x=True)
    monkeypatch.setattr(le, "strategy_for", lambda *a, **k: ("wgmma", cfg))
    gen = torch.Generator().manual_seed(41 + use_ws)
    n, k = 200, 1024
    prepared = KERNEL.prepare(fp4_weight(n, k, gen).to("cuda"),
                              SchemeContract(weight=key("mxfp4"), activation=None))
    held = torch.empty(16, k, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    for m in (16, 16, 9, 16, 3, 16):
        held.copy_(torch.randn(16, k, generator=gen).to(torch.bfloat16))
        fresh = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        for x in (held[:m], fresh):
            for stream in (torch.cuda.current_stream(), side):
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    got = fused_linear(x, prepared)
                    want = fused_linear(x, prepared, strategy="wgmma", config=cfg)
                stream.synchronize()
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (m, use_ws)
                torch.cuda.current_stream().wait_stream(side)
    bounds = [b for p in prepared.cache[le._CACHE_KEY]["plans"].values() if p.wgmma
              for b in p.wgmma.fast.values()]
    assert len(bounds) >= 2, "a Bound per stream"
    on_36 = triton.__version__.startswith("3.6")
    assert all(b.encoded == on_36 for b in bounds), (triton.__version__, use_ws)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_wide_m_matches_the_reference(n: int, k: int, fmt: str, monkeypatch) -> None:
    """block_m 256 (several M tiles a call; 128 weight rows, 64 a consumer): close to
    reference-emulation, bit for bit the same on a repeat; M 129 .. 1000 (last tiles part
    filled), N / K tails (N = 72: the second consumer's rows past 8 masked), 2 stages and 3 for
    mxfp4 (mxfp6 / mxfp8: 3 are past the shared memory), split-K 2 and 3 (each consumer's
    partial parked, summed in slice order), bias, zero / subnormal / Inf / NaN activations; its
    first 128 rows close to the one-partition kernel's on them. (Run with the wide tile and its
    split-K switched on: this test is what switches them on, `WIDE_M_VERIFIED`,
    `WIDE_SPLIT_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt) + 256)
    prepared = KERNEL.prepare(weight(fmt, n, k, gen).to("cuda"),
                              SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", True)
    deep = 3 if fmt == "mxfp4" else 2
    for m, stages, split in ((129, 2, 1), (300, deep, 1), (1000, 2, 1), (256, deep, 1),
                             (129, deep, 2), (500, 2, 3)):
        x = special_rows(m, k, gen)
        cfg = lw.WgmmaConfig(block_m=256, block_k=128, split=split, stages=stages, tma_x=True,
                             ws=True)
        one = lw.WgmmaConfig(block_m=128, block_k=128, split=1, stages=3)
        for b in (None, bias):
            got = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            again = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            case = (n, k, m, stages, split, b is not None)
            assert torch.equal(got.view(torch.int16), again.view(torch.int16)), case
            assert close(got, reference_bf16(x, prepared, b)), case
            head = fused_linear(x[:128], prepared, b, strategy="wgmma", config=one)
            assert close(got[:128], head.float()), case


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"))  # (banded rows)
def test_banded_program_order_gives_the_same_bits(fmt: str, monkeypatch) -> None:
    """group_m > 1 (the wide tile's programs in bands of M tiles, wgmma_tiles.tile_ids): bit for
    bit the grid order's output, every output tile written once — 5 weight tiles x 2-5 M tiles,
    bands of 2 / 3 / 8 (a last band part filled, one wider than the grid), split-K 2, bias,
    zero / subnormal / Inf / NaN activations — and close to reference-emulation."""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", True)
    gen = torch.Generator().manual_seed(len(fmt) + 512)
    n, k = 600, 1024  # 640 padded rows: 5 programs along N
    prepared = KERNEL.prepare(weight(fmt, n, k, gen).to("cuda"),
                              SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split, group in ((1100, 1, 2), (1100, 1, 3), (700, 2, 2), (1100, 1, 8), (300, 1, 4)):
        x = special_rows(m, k, gen)
        grid = lw.WgmmaConfig(block_m=256, block_k=128, split=split, stages=2, tma_x=True,
                              ws=True)
        same_bits(x, prepared, bias, grid, (dataclasses.replace(grid, group_m=group),),
                  (fmt, m, split, group))


def same_bits(x, prepared, bias, want_cfg: lw.WgmmaConfig, got_cfgs: tuple,
              case: tuple) -> None:
    """Each of got_cfgs' outputs is want_cfg's bit for bit, with and without bias, and close
    to reference-emulation (want_cfg's output and the reference computed once for all)."""
    for b in (None, bias):
        want = fused_linear(x, prepared, b, strategy="wgmma", config=want_cfg)
        ref = reference_bf16(x, prepared, b)
        for got_cfg in got_cfgs:
            got = fused_linear(x, prepared, b, strategy="wgmma", config=got_cfg)
            where = (*case, got_cfg.x_stages, b is not None)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), where
            assert close(got, ref), where


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"))
def test_persistent_programs_give_the_grid_orders_bits(fmt: str, monkeypatch) -> None:
    """persistent (a program an SM walking the wide tile's output tiles, its ring running on from
    tile to tile): bit for bit the grid kernel's output — 5 weight tiles x 1-5 M tiles (the last
    part filled), on 3 programs (8-9 tiles each), on more programs than tiles (a tile each)
    and on every SM, bands of 1 / 3, bias, zero / subnormal / Inf / NaN activations, K
    with a tail — and close to reference-emulation; with x in a ring of its own (x_stages 3
    beside 2 weight slots) too."""
    for gate in ("WS_VERIFIED", "WIDE_M_VERIFIED", "PERSISTENT_VERIFIED", "X_RING_VERIFIED"):
        monkeypatch.setattr(wgmma_gates, gate, True)
    gen = torch.Generator().manual_seed(len(fmt) + 640)
    n = 600  # 640 padded rows: 5 weight tiles
    sms = lw.sm_count(torch.device("cuda"))
    for k, m, group, programs in ((1024, 1100, 1, 3), (1024, 1100, 3, 3), (960, 700, 1, 25),
                                  (1024, 200, 1, sms), (1024, 1100, 3, sms)):
        prepared = KERNEL.prepare(weight(fmt, n, k, gen).to("cuda"),
                                  SchemeContract(weight=key(fmt), activation=None))
        bias = torch.randn(n, generator=gen).cuda()
        x = special_rows(m, k, gen)
        grid = lw.WgmmaConfig(block_m=256, block_k=128, split=1, stages=2, tma_x=True, ws=True,
                              group_m=group)
        monkeypatch.setattr(lw, "sm_count", lambda device, p=programs: p)
        pst = dataclasses.replace(grid, persistent=True)
        same_bits(x, prepared, bias, grid, (pst, dataclasses.replace(pst, x_stages=3)),
                  (fmt, k, m, group, programs))
