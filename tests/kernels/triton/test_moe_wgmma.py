"""MoE experts through the Gluon wgmma kernel (kernels/triton/moe_wgmma.py).

On the CPU (CI): every expert's weight layout decodes (through the PTX's torch twin,
fp4_words.wgmma_decode) to the reference dequantization, N and K tails included; the config and
the refusals. On an sm_90 GPU, the kernel itself: test_moe_wgmma_gpu.py.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.mx import MXTensor, mx_dequantize
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey
from kernels.triton import fp4_words as fw
from kernels.triton import linear_configs, linear_wgmma, moe_grouped, moe_wgmma, wgmma_gates
from support.moe_experts import EIGHT_BIT, experts, experts6, experts8

A_MXFP4 = QuantKey.mx("mxfp4", rounding="even", static=False)




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
    """The table's overlapped-loop, banded and persistent rows (dense launches' parts:
    moe_wgmma refuses them) serve dense layers only: at every M bucket, family and shape class,
    MoE gets a config its launch takes, and the dense layer of that shape the row itself (a
    grid row after a persistent one: while persistent is gated)."""
    dense_only = [r for r in linear_configs.TABLE
                  if getattr(r.config, "overlap", False) or getattr(r.config, "group_m", 1) != 1]
    assert {r.family for r in dense_only} >= {"fp4", "fp8"}  # the rows this test is about
    for fmt in ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"):
        for rows in (1, 16, 32, 64, 128, 1024, 4096):
            for n, k in ((8192, 8192), (28672, 8192), (8192, 28672)):
                cfg = moe_wgmma.config_for(rows, 1, fmt, n, k)
                assert not (cfg.overlap or cfg.persistent) and cfg.group_m == 1, \
                    (fmt, rows, n, k, cfg)
    for row in dense_only:
        m, n, k = min(row.m_max, 4096), max(row.n_min, 8192), max(row.k_min, 8192)
        gated = (lambda c: c.persistent) if not row.config.persistent else (lambda c: False)
        assert linear_configs.choose(row.family, m, False, n=n, k=k, passed_over=gated) == row, row


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
