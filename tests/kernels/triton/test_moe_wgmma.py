"""MoE experts through the Gluon wgmma kernel (kernels/triton/moe_wgmma.py).

On the CPU (CI): every expert's weight layout decodes (through the PTX's torch twin,
fp4_words.wgmma_decode) to the reference dequantization, N and K tails included; the config and
the refusals. On an sm_90 GPU: the kernel against kernels.reference.moe (W4A16 and W4A4; one
token to hundreds; empty experts, one expert taking every token, N and K tails, NaN blocks),
deterministic, CUDA-graph capturable, and the grouped Triton entry point taking this path when
`moe_wgmma.VERIFIED`.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.mx import MXTensor, mx_dequantize
from kernels.reference.moe import grouped_experts_reference
from kernels.reference.packing import pack_codes
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey
from kernels.spec.formats import FORMATS
from kernels.triton import fp4_words as fw
from kernels.triton import linear_configs, linear_wgmma, moe_grouped, moe_wgmma, wgmma_gates
from support.mx_weights import e4m3_weight, int8_weight

ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
gpu = pytest.mark.skipif(not ON_SM90, reason="wgmma runs on sm_90 only; the CPU tests above "
                         "check the experts' layout")
A_MXFP4 = QuantKey.mx("mxfp4", rounding="even", static=False)


def experts(e: int, n: int, k: int, gen: torch.Generator, nan_blocks: int = 0) -> MXTensor:
    """E random packed mxfp4 experts [E, N, K] (every code, scale bytes 110..128; NaN blocks)."""
    codes = torch.randint(0, 16, (e, n, k), generator=gen)
    scales = torch.randint(110, 129, (e, n, k // 32), generator=gen)
    if nan_blocks:
        flat = scales.view(-1)
        flat[torch.randperm(flat.numel(), generator=gen)[:nan_blocks]] = 255
    data = torch.stack([pack_codes(c.to(torch.uint8), FORMATS["mxfp4"], "packed") for c in codes])
    return MXTensor(data, scales.to(torch.uint8), "mxfp4", "even", torch.Size((e, n, k)),
                    "packed")


def experts6(fmt: str, e: int, n: int, k: int, layout: str, gen: torch.Generator) -> MXTensor:
    """E random mxfp6 experts (scale bytes 100..128, a few NaN blocks) in `layout`."""
    codes = torch.randint(0, 64, (e, n, k), generator=gen).to(torch.uint8)
    scales = torch.randint(100, 129, (e, n, k // 32), generator=gen)
    scales.view(-1)[torch.randperm(scales.numel(), generator=gen)[:3]] = 255
    data = torch.stack([pack_codes(c, FORMATS[fmt], layout) for c in codes])
    return MXTensor(data, scales.to(torch.uint8), fmt, "even", torch.Size((e, n, k)), layout)


EIGHT_BIT = ("mxfp8_e4m3", "mxint8")


def experts8(fmt: str, e: int, n: int, k: int, gen: torch.Generator) -> MXTensor:
    """E random 8-bit experts (mxfp8 e4m3 / mxint8) with every code and edge scale byte their
    wgmma layout holds (support.mx_weights), NaN blocks among them."""
    one = (e4m3_weight if fmt == "mxfp8_e4m3" else int8_weight)(e * n, k, gen)
    return MXTensor(one.data.reshape(e, n, k), one.scales.reshape(e, n, k // 32), fmt, "even",
                    torch.Size((e, n, k)), "unpacked")


def test_the_layout_holds_what_the_dense_layouts_hold() -> None:
    """`layout_holds` (checked once, kept): each format's own limits (mxfp4 scale bytes up to
    128, mxfp6 `scale_fits`, mxfp8 `fp8_fits`, mxint8 `int8_fits`); past them the grouped
    Triton kernel runs the experts (moe_grouped asks it before taking this path)."""
    gen = torch.Generator().manual_seed(3)
    cases = [(experts(2, 64, 256, gen), 129),
             (experts6("mxfp6_e3m2", 2, 64, 256, "packed", gen), 200),
             (experts8("mxfp8_e4m3", 2, 64, 256, gen), 135),
             (experts8("mxint8", 2, 64, 256, gen), 128)]
    for w, past in cases:
        cached: dict = {}
        assert moe_wgmma.layout_holds(cached, w) and cached["wgmma_scale_fits"], w.fmt
        bad = MXTensor(w.data, w.scales.clone(), w.fmt, w.rounding, w.shape, w.layout)
        bad.scales[1, 3, 2] = past
        assert not moe_wgmma.layout_holds({}, bad), (w.fmt, past)


@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"))
@pytest.mark.parametrize("e,n,k", [(3, 64, 256), (2, 40, 2880), (4, 136, 384), (3, 200, 384)])
def test_every_expert_layout_decodes_to_the_reference(fmt: str, e: int, n: int, k: int) -> None:
    """Every expert in the one layout (fp4_words.ALIGN): its N padded to whole 128 rows and K to
    whole 512 codes (+0), experts a whole number of blocks apart."""
    from kernels.triton.fp6_words import wgmma_decode_fp6
    from kernels.triton.fp8_words import wgmma_decode_fp8
    from kernels.triton.int8_words import wgmma_decode_int8

    gen = torch.Generator().manual_seed(e * n + k + len(fmt))
    w = experts(e, n, k, gen, nan_blocks=5) if fmt == "mxfp4" else \
        experts8(fmt, e, n, k, gen) if fmt in EIGHT_BIT else \
        experts6(fmt, e, n, k, "packed" if e % 2 else "unpacked", gen)
    words, sbytes, bwords, stride_we, stride_se = moe_wgmma.expert_layout(w)
    n_pad, k_pad = -(-n // 128) * 128, -(-k // 512) * 512
    assert stride_we == n_pad * k_pad // 8 and stride_se == n_pad * k_pad // 32
    assert words.numel() == e * stride_we and sbytes.numel() == e * stride_se
    want = mx_dequantize(w, torch.float32, backend="reference")
    for i in range(e):
        cut = slice(i * stride_we, (i + 1) * stride_we)
        s = sbytes[i * stride_se:(i + 1) * stride_se]
        if fmt == "mxfp4":
            got = fw.wgmma_decode(words[cut], s, n_pad, k_pad, 128)
        elif fmt in EIGHT_BIT:  # B words: as many as words
            got = {"mxfp8_e4m3": wgmma_decode_fp8, "mxint8": wgmma_decode_int8}[fmt](
                words[cut], bwords[cut], s, n_pad, k_pad, 128)
        else:
            got = wgmma_decode_fp6(words[cut], bwords[i * stride_we // 2:(i + 1) * stride_we // 2],
                                   s, fmt, n_pad, k_pad, 128)
        nan = want[i].isnan()
        assert torch.equal(got[:n, :k].isnan(), nan)
        assert torch.equal(got[:n, :k][~nan], want[i][~nan]) and not got[:n, k:].any()
        assert not got[n:].any()


def test_an_experts_only_ws_row_serves_experts_and_a_dense_ws_row_does_not(monkeypatch) -> None:
    """A ws row measured on dense layers never serves MoE experts; one marked experts-only
    (what tools/gpu_sweeps.sh's moe_tiles step may add) serves them, and no dense layer."""
    ws = dataclasses.replace(linear_configs._WS_128, block_k=256)
    dense_ws = linear_configs.Choice("other", 128, "wgmma", ws)
    monkeypatch.setattr(linear_configs, "TABLE", (dense_ws, *linear_configs.TABLE))
    assert moe_wgmma.config_for(4096, 64, "mxfp6_e3m2", 2048, 7168) != ws
    assert linear_configs.config_for("wgmma", "other", 128, False, n=2048, k=7168) == ws
    experts_ws = dataclasses.replace(dense_ws, experts=True)
    monkeypatch.setattr(linear_configs, "TABLE", (experts_ws, *linear_configs.TABLE[1:]))
    assert moe_wgmma.config_for(4096, 64, "mxfp6_e3m2", 2048, 7168) == ws
    assert linear_configs.config_for("wgmma", "other", 128, False, n=2048, k=7168) != ws


def test_past_128_rows_an_expert_an_experts_only_wide_row_serves(monkeypatch) -> None:
    """More than 128 rows an expert (DeepSeek-like T = 2048: 192) take an experts-only row
    for that many where the table has one (the wide tile: the weight decoded once, not twice);
    without one, or at 128 rows or fewer, the 128-row bucket's row as before."""
    wide = linear_wgmma.WgmmaConfig(256, 128, 1, 4, tma_x=True, ws=True)  # (no dense row's)
    # the table without its own experts-only rows past 128 rows (mxfp6's wide row on long K)
    base = tuple(r for r in linear_configs.TABLE if not (r.experts and r.m_max > 128))
    assert len(base) < len(linear_configs.TABLE)
    monkeypatch.setattr(linear_configs, "TABLE", base)
    before = {(rows, fmt): moe_wgmma.config_for(rows, 64, fmt, 2048, 7168)
              for rows in (4096, 12288, 40000) for fmt in ("mxfp4", "mxfp6_e3m2")}
    assert all(cfg.block_m == (64 if rows == 4096 else 128) for (rows, _), cfg in before.items())
    for family, fmt in (("other", "mxfp6_e3m2"), ("fp4", "mxfp4")):
        row = linear_configs.Choice(family, linear_configs.LARGE_M, "wgmma", wide, experts=True)
        monkeypatch.setattr(linear_configs, "TABLE", (*base, row))
        assert moe_wgmma.config_for(12288, 64, fmt, 2048, 7168) == wide  # 192 rows an expert
        assert moe_wgmma.config_for(40000, 64, fmt, 2048, 7168) == wide
        assert moe_wgmma.config_for(4096, 64, fmt, 2048, 7168) == before[(4096, fmt)]  # 64
        other = "mxfp4" if fmt != "mxfp4" else "mxfp6_e3m2"  # the other family: unchanged
        assert moe_wgmma.config_for(12288, 64, other, 2048, 7168) == before[(12288, other)]
        # a dense layer of any M never takes it
        assert linear_configs.config_for("wgmma", family, 4096, False, n=2048, k=7168) != wide
        # a dense (not experts-only) row first in the table does not hide the experts-only
        # one (experts-only rows first, wherever they sit); without that row the 128 bucket's
        # choice serves, here the dense row (a dense row past 128 rows is never taken as such)
        dense = linear_configs.Choice(family, linear_configs.LARGE_M, "wgmma",
                                      linear_wgmma.WgmmaConfig(128, 128, 1, 3))
        monkeypatch.setattr(linear_configs, "TABLE", (dense, *base, row))
        assert moe_wgmma.config_for(12288, 64, fmt, 2048, 7168) == wide
        monkeypatch.setattr(linear_configs, "TABLE", (dense, *base))
        assert moe_wgmma.config_for(12288, 64, fmt, 2048, 7168) == dense.config
        assert linear_configs.experts_row("wgmma", family, 192, n=2048, k=7168) is None


def test_w6a6_experts_take_the_rows_measured_at_t_2048() -> None:
    """The mxfp6 experts' rows of 2026-12-05 (H100, bench_moe, T = 2048): past 64 rows an
    expert, split 2 / 2 stages / TMA x (two programs an SM where the 3-stage row held one);
    past 128 rows an expert on K >= 7168 (DeepSeek-like), the wide ws tile. mxfp4's choices
    and every dense layer's stay as they were."""
    two = linear_wgmma.WgmmaConfig(128, 128, 2, 2, tma_x=True)
    for fmt in ("mxfp6_e2m3", "mxfp6_e3m2"):
        assert moe_wgmma.config_for(4096, 8, fmt, 2048, 2048) == two  # E = 8: 512 rows
        assert moe_wgmma.config_for(8192, 32, fmt, 2880, 2880) == two  # gpt-oss-like: 256
        assert moe_wgmma.config_for(12288, 64, fmt, 2048, 7168) == linear_configs._WS_WIDE_2
        assert moe_wgmma.config_for(6144, 64, fmt, 2048, 7168) == two  # T = 1024: 96 rows
        assert moe_wgmma.config_for(1536, 64, fmt, 2048, 7168).block_m == 32  # T = 256
    for n, k in ((2048, 2048), (2880, 2880), (2048, 7168), (8192, 8192)):
        for m in (128, 256, 4096):  # a dense layer's row is never experts-only
            row = linear_configs.choose("other", m, False, n=n, k=k)
            assert row is not None and not row.experts, (n, k, m, row)
            assert linear_configs.config_for("wgmma", "other", m, False, n=n, k=k) != two
        # fp4 keeps its own rows (128 rows; rep 2 on K >= 2880), not the wide tile
        assert moe_wgmma.config_for(12288, 64, "mxfp4", n, k).block_m == 128


def test_config_takes_the_dense_row_for_the_mean_rows_per_expert() -> None:
    for rows, e, block_m in ((2, 8, 8), (32, 8, 8), (96, 64, 8), (512, 8, 64), (4096, 8, 128),
                             (100, 1, 128)):
        for n, k in ((2048, 7168), (28672, 8192), (2880, 28672)):  # the table's shape
            # classes (n_min, k_min) hold for experts too
            cfg = moe_wgmma.config_for(rows, e, "mxfp4", n, k)
            assert cfg == linear_configs.config_for("wgmma", "fp4", block_m, False, n=n, k=k,
                                                    experts=True), (rows, e)
            six = moe_wgmma.config_for(rows, e, "mxfp6_e3m2", n, k)  # mxfp6: the table's own
            wide = linear_configs.experts_row("wgmma", "other", -(-rows // e), n=n, k=k) \
                if -(-rows // e) > 128 else None  # (past 128 rows an expert, long K)
            assert six == (wide or linear_configs.config_for(
                "wgmma", "other", block_m, False, n=n, k=k, experts=True)), (rows, e)
    # experts-only rows: MoE takes them, a dense layer of the same shape never does
    dense = linear_configs.config_for("wgmma", "fp4", 128, False, n=2048, k=7168)
    moe = moe_wgmma.config_for(4096, 8, "mxfp4", 2048, 7168)
    assert moe.rep == 2 and dense.rep == 1 and moe != dense
    # ... within its shape class: short K (E = 8 x 2048^2) takes the experts' short-K row
    # (no rep 2), never a warp-specialized dense one (the experts' launch has no ws kernel)
    short = moe_wgmma.config_for(4096, 8, "mxfp4", 2048, 2048)
    assert short == linear_wgmma.WgmmaConfig(128, 128, 2, 2, tma_x=True) and short.rep == 1
    assert short != linear_configs.config_for("wgmma", "fp4", 128, False, n=2048, k=2048)
    assert not short.ws and linear_configs.config_for("wgmma", "fp4", 128, False, n=2048,
                                                      k=2048).ws
    assert all(not r.experts for r in linear_configs.TABLE if r.family == "fp8")


def test_experts_never_take_a_dense_launchs_row() -> None:
    """The table's overlapped-loop and banded rows (dense launches' parts: moe_wgmma refuses
    them) serve dense layers only: at every M bucket, family and shape class, MoE gets a config
    its launch takes, and the dense layer of that shape the row itself."""
    dense_only = [r for r in linear_configs.TABLE
                  if getattr(r.config, "overlap", False) or getattr(r.config, "group_m", 1) != 1]
    assert {r.family for r in dense_only} >= {"fp4", "fp8"}  # the rows this test is about
    for fmt in ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"):
        for rows in (1, 16, 32, 64, 128, 1024, 4096):
            for n, k in ((8192, 8192), (28672, 8192), (8192, 28672)):
                cfg = moe_wgmma.config_for(rows, 1, fmt, n, k)
                assert not cfg.overlap and cfg.group_m == 1, (fmt, rows, n, k, cfg)
    for row in dense_only:
        m, n, k = min(row.m_max, 4096), max(row.n_min, 8192), max(row.k_min, 8192)
        assert linear_configs.choose(row.family, m, False, n=n, k=k) == row, row


def test_unavailable_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    w = experts(2, 64, 256, torch.Generator().manual_seed(1))
    x = torch.zeros(3, 256, dtype=torch.bfloat16)
    assert moe_wgmma.unavailable(x.float(), w, None) == "bf16 tokens only"
    assert moe_wgmma.unavailable(x, w, FP8_STATIC_TENSOR_KEY).endswith(
        ": the grouped Triton kernel runs it")
    e5m2 = MXTensor(torch.zeros(2, 64, 256, dtype=torch.uint8), w.scales, "mxfp8_e5m2", "even",
                    torch.Size((2, 64, 256)))
    assert moe_wgmma.unavailable(x, e5m2, None) == \
        "packed mxfp4, mxfp6, mxfp8 e4m3 or mxint8 expert weights only"
    for fmt in ("mxfp8_e4m3", "mxint8"):
        eight = MXTensor(e5m2.data, w.scales, fmt, "even", torch.Size((2, 64, 256)))
        assert moe_wgmma.unavailable(x, eight, None) == (
            "needs an NVIDIA GPU" if moe_wgmma.EIGHT_BIT_VERIFIED else
            f"{fmt} experts: written, not yet verified on a GPU")
    six = experts6("mxfp6_e3m2", 2, 64, 256, "packed", torch.Generator().manual_seed(2))
    assert moe_wgmma.unavailable(x, six, None) == (
        "needs an NVIDIA GPU" if wgmma_gates.FP6_VERIFIED else
        "mxfp6_e3m2 experts: written, not yet verified on a GPU")
    assert moe_wgmma.unavailable(x, w, A_MXFP4) == "needs an NVIDIA GPU"
    two = linear_wgmma.WgmmaConfig(block_m=64, block_k=128, split=1, stages=3, warps=8)
    ids = torch.zeros(3, 1, dtype=torch.int64)
    monkeypatch.setattr(wgmma_gates, "WARPS_VERIFIED", (4,))  # the gate, where it is shut
    with pytest.raises(ValueError, match=r"warps=8 \(two warpgroups\): written, not yet verified"):
        moe_wgmma.grouped_experts_wgmma(x, w, None, ids, ids.float(), torch.bfloat16, {}, two)


# ------------------------------------------------------------------------------- GPU: the kernel
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
    differs from the reference (1e-5 relative, as tests/kernels/test_moe.py)."""
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
