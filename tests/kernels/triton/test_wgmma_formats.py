"""The one-partition wgmma kernel (kernels/triton/linear_wgmma.py) past mxfp4 and one
warpgroup, on an sm_90 GPU, against reference-emulation and bit for bit against the kernel
without the part under test: mxfp6, mxfp8 e4m3 and mxint8 weights, two warpgroups, K tiles in halves
(and rep 2, a register cap), the activation QDQ fused into the kernel, and the x tile by TMA;
every code and scale byte, N and K tails, split-K, bias, NaN / Inf activations. Each test is
what switches its gate on (linear_wgmma's `*_VERIFIED`, `wgmma_tiles.ACT_VERIFIED`).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton import wgmma_config, wgmma_gates, wgmma_tiles
from kernels.triton.linear_emulation import fused_linear
from support.linear_checks import close, reference_bf16, special_rows
from support.mx_weights import e4m3_weight as fp8_weight, fp4_weight, fp6_weight, int8_weight
from support.wgmma_cases import KERNEL, gpu, key, tile_for


@gpu
@pytest.mark.parametrize("fmt", ("mxfp6_e2m3", "mxfp6_e3m2"))
@pytest.mark.parametrize("layout", ("packed", "unpacked"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_fp6_weights_match_the_reference(n: int, k: int, fmt: str, layout: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """mxfp6 through the wgmma kernel (fp6_words' layout): every code and scale byte, N and K
    tails, M from 1 to 128, split-K, bias, NaN / Inf activations. (Run with mxfp6 and K tails
    switched on: this test is what switches them on, `FP6_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "FP6_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "K_TAIL_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt) + len(layout))
    w = fp6_weight(fmt, n, k, layout, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split in ((1, 2), (16, 1), (40, 4), (128, 2)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        if m > 1:
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
        cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=256 if m <= 16 else 128,
                             split=split, stages=3)
        for b in (None, bias):
            out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_two_warpgroups_match_the_reference(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """warps = 8 (two warpgroups, 128 weight rows sharing each x tile): every code and scale
    byte, N tails (200: one and a half tiles; 1000), K tails (2880), M up to 128, split-K 1 / 2,
    bias, NaN / Inf activations, two calls bit-identical. (Run with warps 8 switched on: this
    test is what switches it on, `WARPS_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "WARPS_VERIFIED", (4, 8))
    for n, k in ((200, 1024), (1000, 2880)):
        gen = torch.Generator().manual_seed(n + k + len(fmt))
        w = (fp4_weight(n, k, gen) if fmt == "mxfp4" else
             fp6_weight(fmt, n, k, "packed", gen)).to("cuda")
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
        bias = torch.randn(n, generator=gen).cuda()
        for m, split in ((16, 2), (64, 1), (100, 2), (128, 1)):
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
            cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=128, split=split, stages=3,
                                 warps=8)
            for b in (None, bias):
                out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split)
                again = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert torch.equal(again.view(torch.int16), out.view(torch.int16))


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_k_halves_match_the_reference(n: int, k: int, fmt: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """sub_k = 2 (each K tile as two halves, the second decoded under the first's wgmma) and a
    register cap (maxnreg 128: spills): bit for bit the sub_k = 1 kernel's output (the same
    wgmmas in the same K order) and close to the reference; every code and scale byte, N and K
    tails, M 1..128, split-K, one and two warpgroups, block_k 128 / 256, bias, NaN / Inf
    activations; and rep = 2 (128 weight rows a warpgroup) against the same references. (Run
    with sub_k and rep switched on: this test is what switches them on, `SUB_K_VERIFIED`,
    `REP_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "SUB_K_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "REP_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt))
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split, warps, block_k, cap, rep in (
            (1, 2, 4, 256, 0, 1), (16, 1, 4, 128, 0, 1), (100, 2, 8, 128, 128, 1),
            (128, 4, 4, 128, 0, 1), (64, 1, 8, 256, 0, 1), (128, 2, 8, 128, 128, 1),
            (1, 2, 4, 128, 0, 2), (40, 1, 4, 256, 0, 2), (128, 4, 4, 128, 0, 2),
            (64, 2, 8, 128, 0, 2)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        if m > 1:
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
        cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=2,
                             warps=warps, sub_k=2, maxnreg=cap, rep=rep)
        whole = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=2,
                               warps=warps)
        if cfg.groups == 16 and -(-n // 128) % 2:
            # 256 rows a program on 128 padded rows (72): past the layout's end — refused
            # (compute-sanitizer saw these reads on the H200; they faulted one run in many)
            with pytest.raises(ValueError, match="reads past N = 72's layout"):
                fused_linear(x, prepared, strategy="wgmma", config=cfg)
            continue
        for b in (None, bias):
            out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split, warps)
            want = fused_linear(x, prepared, b, strategy="wgmma", config=whole)
            assert torch.equal(out.view(torch.int16), want.view(torch.int16)), (n, k, m)


@gpu
@pytest.mark.parametrize("rows", (False, True))
@pytest.mark.parametrize("act", ("mxfp4:even", "mxfp6_e3m2:floor", "mxfp8_e4m3:rceil",
                                 "mxint8:even"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_fused_activation_qdq_is_the_dispatchers(n: int, k: int, act: str, rows: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """fuse_act (the x tile's QDQ inside the kernel, one launch a call): bit for bit the output
    of the same kernel after the dispatcher's QDQ launch, and close to reference-emulation;
    zero / subnormal / NaN / Inf / huge blocks, M 1..16, split 1 / 2, K tails, bias, K tiles
    of 128 / 256 / 512. `rows`: the QDQ on the rows a plan can have (wgmma_config.act_rows:
    row 0 alone at M = 1, 16 of a 32-row tile at M = 5), else on the whole tile. (Run with
    fuse_act switched on: this test is what switches it on, `wgmma_tiles.ACT_VERIFIED`, and
    with `rows`, `wgmma_config.ACT_ROWS_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_tiles, "ACT_VERIFIED", True)
    monkeypatch.setattr(wgmma_config, "ACT_ROWS_VERIFIED", rows)
    fmt, _, rounding = act.partition(":")
    akey = QuantKey.mx(fmt, rounding=rounding, static=False)
    gen = torch.Generator().manual_seed(n + k + len(act))
    w = fp4_weight(n, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=akey))
    bias = torch.randn(n, generator=gen).cuda()
    wide = 256 if k % 256 == 0 else 128
    # (M, split, block_m, block_k): the table's tiles, a tile past M's rows, a 512 K tile
    for m, split, block_m, block_k in ((1, 2, 8, wide), (5, 1, 16, wide), (16, 2, 16, wide),
                                       (1, 1, 32, 128), (5, 2, 32, wide),
                                       (1, 2, 8, 512 if k % 512 == 0 else 128)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        x[0, :32] = 0.0  # a zero block, a subnormal block, a huge block
        x[0, 32:64] = 2.0 ** -130
        x[0, 64:96] *= 2.0 ** 120
        if m > 1:
            x[1, 100] = float("inf")
            x[-1, k - 3] = float("nan")
        base = lw.WgmmaConfig(block_m=block_m, block_k=block_k, split=split, stages=3)
        fused = dataclasses.replace(base, fuse_act=True)
        for b in (None, bias):
            want = fused_linear(x, prepared, b, strategy="wgmma", config=base)
            got = fused_linear(x, prepared, b, strategy="wgmma", config=fused)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (n, k, m)
            assert close(got, reference_bf16(x, prepared, b)), (n, k, m, split)
    plans = prepared.cache[le._CACHE_KEY]["plans"]
    assert not plans  # forced configs are not cached; the table's own plan:
    fused_linear(x, prepared)
    plan = next(iter(plans.values()))
    assert plan.strategy == "wgmma" and (plan.qdq is None) == bool(plan.wgmma.act)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"))
def test_overlap_gives_the_same_bits(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """OVERLAP (K tiles in pairs, each wgmma in flight under the next tile's decode): bit for bit
    the plain loop's output, and close to reference-emulation, for each weight format, M 1..128
    (one and two warpgroups, split-K, x by TMA), K tails, bias, NaN / Inf rows, fresh x a call;
    a K whose slices are odd runs the plain loop. (Run with overlap switched on: this test is
    what switches it on, `wgmma_gates.OVERLAP_VERIFIED`; offline its SASS has no write to an
    in-flight wgmma's registers: test_wgmma_compile.)"""
    monkeypatch.setattr(wgmma_gates, "OVERLAP_VERIFIED", True)
    gen = torch.Generator().manual_seed(len(fmt) + 77)
    for n, k in ((200, 1024), (72, 2880)):
        w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight, "mxint8": int8_weight}.get(
            fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
        bias = torch.randn(n, generator=gen).cuda()
        for m, block_k, split, stages, warps, tma in ((1, 256, 2, 4, 4, False),
                                                      (1, 128, 2, 3, 4, False),
                                                      (16, 128, 1, 4, 4, False),
                                                      (16, 128, 2, 5, 4, False),  # (a row)
                                                      (64, 128, 2, 3, 8, False),
                                                      (128, 128, 2, 3, 4, True)):
            for _ in range(2):
                x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
                if m > 1:
                    x[1, 5] = float("inf")
                    x[-1, k - 3] = float("nan")
                plain = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split,
                                       stages=stages, warps=warps, tma_x=tma)
                over = dataclasses.replace(plain, overlap=True)
                for b in (None, bias):
                    want = fused_linear(x, prepared, b, strategy="wgmma", config=plain)
                    got = fused_linear(x, prepared, b, strategy="wgmma", config=over)
                    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
                        (fmt, n, k, m, block_k, split)
                    assert close(got, reference_bf16(x, prepared, b)), (fmt, n, k, m)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp8_e4m3", "mxint8"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_8bit_weights_match_the_reference(n: int, k: int, fmt: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """mxfp8 e4m3 / mxint8 weights through the wgmma kernel (fp8_words' / int8_words' layout):
    every code and scale byte, N and K tails, M 1..128, split-K, one and two warpgroups, bias,
    NaN / Inf activations, W8A16 and W8A8 (the QDQ launched and fused). (Run with the format
    switched on: this test is what switches it on, `FP8_VERIFIED` / `INT8_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "FP8_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "INT8_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WARPS_VERIFIED", (4, 8))
    monkeypatch.setattr(wgmma_tiles, "ACT_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt))
    w = (fp8_weight if fmt == "mxfp8_e4m3" else int8_weight)(n, k, gen).to("cuda")
    bias = torch.randn(n, generator=gen).cuda()
    for akey in (None, key(fmt, static=False)):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=akey))
        cached = le.prepare_tensors(prepared)
        assert lw.wgmma_plan(cached, n, k, 16, False, lw.WgmmaConfig(
            block_m=16, block_k=128, split=1, stages=2)) is not None  # (the layout holds it)
        for m, split, warps in ((1, 2, 4), (16, 1, 4), (40, 4, 4), (128, 2, 8), (64, 1, 8)):
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            if m > 1:
                x[1, 5] = float("inf")
                x[-1, k - 3] = float("nan")
            cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=256 if m <= 16 else 128,
                                 split=split, stages=3, warps=warps,
                                 fuse_act=akey is not None and m <= 16)
            for b in (None, bias):
                out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split, akey)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_x_by_tma_matches_the_reference(n: int, k: int, fmt: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """tma_x (the x tile by one TMA copy a K tile): bit for bit the cp.async kernel of the same
    config (the same wgmmas in the same K order) and close to the reference; rows past M and
    columns past K zero-filled by the copy (M 1..128, K 2880), N tails, split-K 1..4 with
    slices shorter than the pipeline, stages 2..4, one and two warpgroups, rep 2, K halves, a
    register cap, bias, NaN / Inf activations; W*A* with the QDQ fused (its proxy fence).
    (Run with tma_x switched on: this test is what switches it on, `TMA_X_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", True)
    akey = key(fmt, static=False)
    gen = torch.Generator().manual_seed(n + k + len(fmt) + 7)
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
    for act in (None, akey):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=act))
        bias = torch.randn(n, generator=gen).cuda()
        for m, split, warps, block_k, stages, sub_k, rep, cap, fuse in (
                (1, 2, 4, 256, 4, 1, 1, 0, True), (16, 1, 4, 128, 4, 1, 1, 0, False),
                (64, 2, 4, 128, 3, 1, 1, 0, True), (100, 2, 8, 128, 2, 1, 1, 128, False),
                (128, 1, 8, 128, 2, 1, 1, 0, False), (128, 2, 4, 128, 3, 2, 1, 0, False),
                (64, 4, 4, 128, 2, 1, 2, 0, False), (40, 1, 4, 256, 3, 1, 1, 0, True)):
            if act is not None and not fuse:
                continue
            x = special_rows(m, k, gen)
            base = dict(block_m=tile_for(m), block_k=block_k, split=split, stages=stages,
                        warps=warps, sub_k=sub_k, rep=rep, maxnreg=cap, fuse_act=fuse)
            tma = lw.WgmmaConfig(**base, tma_x=True)
            plain = lw.WgmmaConfig(**base)
            for b in (None, bias):
                got = fused_linear(x, prepared, b, strategy="wgmma", config=tma)
                want = fused_linear(x, prepared, b, strategy="wgmma", config=plain)
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (
                    n, k, m, split, act)
                assert close(got, reference_bf16(x, prepared, b)), (n, k, m, split, act)
