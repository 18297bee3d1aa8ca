"""`triton-emulation` (kernels.triton.linear_emulation) strategy by strategy, against the
reference-emulation oracle (CPU interpreter when there is no GPU, so shapes stay small): every
strategy forced (decode and its split-K slices and variants, tiled, dequant-gemm, mma, gemv)
gives the oracle's fp32 accumulator within ACC_BOUND (tests/support/emulation_cases.py) and its
bf16 output is that accumulator rounded once; mxfp4's short decode at every scale and its layout;
and the measured table's choice of strategy and config, and the refusals of a forced one.
"""
from __future__ import annotations

import pytest
import torch

from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import linear_emulation as le
from kernels.triton.linear_emulation import fused_linear
from support.device import DEVICE
from support.emulation_cases import (ACC_BOUND, KERNEL, key_id, prepare, reference_fp32,
                                     rel_err, seed_of)


STRATEGY_CASES = [  # (strategy, M, split-K of the decode config or None)
    ("decode", 1, 1), ("decode", 1, 3), ("decode", 5, 1), ("decode", 16, 2), ("tiled", 3, None),
    ("tiled", 40, None), ("dequant-gemm", 2, None), ("dequant-gemm", 33, None), ("mma", 1, 1),
    ("mma", 1, 3), ("mma", 7, 2), ("mma", 20, 1), ("mma", 20, 3), ("gemv", 1, 1), ("gemv", 1, 3)]
STRATEGY_CONTRACTS = [
    (QuantKey.mx("mxfp4", rounding="even", static=True), None),
    (QuantKey.mx("mxfp4", rounding="even", static=True),
     QuantKey.mx("mxfp4", rounding="even", static=False)),
    (QuantKey.mx("mxfp6_e2m3", rounding="floor", static=True),
     QuantKey.mx("mxfp6_e3m2", rounding="rceil", static=False)),
    (QuantKey.mx("mxint8", rounding="even", static=True), FP8_STATIC_TENSOR_KEY)]


@pytest.mark.parametrize("wkey,akey", STRATEGY_CONTRACTS,
                         ids=[f"W={key_id(w)}-A={key_id(a)}" for w, a in STRATEGY_CONTRACTS])
@pytest.mark.parametrize("strategy,m,split", STRATEGY_CASES,
                         ids=[f"{s}-M{m}-split{p}" for s, m, p in STRATEGY_CASES])
def test_every_strategy_matches_reference(strategy: str, m: int, split, wkey, akey) -> None:
    """Forced strategies (and decode split-K slices) all give the oracle's numbers; dequant-gemm
    (bf16 only) returns bf16 from its GEMM, so it is compared after the oracle's own cast."""
    from kernels.triton.linear_decode import DecodeConfig
    from kernels.triton.linear_gemv import GemvConfig
    from kernels.triton.linear_mma import MmaConfig

    gen = torch.Generator().manual_seed(seed_of(strategy, m, split, wkey, akey))
    n, k = 48, 192
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(DEVICE)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16).to(DEVICE)
    prepared = prepare(KERNEL, weight, wkey, akey, gen, x)
    want = reference_fp32(x, prepared, bias)
    cfg = None if split is None else DecodeConfig(block_n=16, block_k=64, split=split, warps=1,
                                                  stages=1)
    if strategy == "mma":
        cfg = MmaConfig(block_m=16, block_n=16, block_k=64, split=split, warps=1, stages=1)
    if strategy == "gemv":
        cfg = GemvConfig(block_n=16, block_k=64, split=split, warps=1, stages=1)
    if strategy == "dequant-gemm":
        out = fused_linear(x, prepared, bias, strategy=strategy).float()
        # one bf16 rounding of the accumulator on both sides: <= 2**-8 relative per element
        assert rel_err(out, want.to(torch.bfloat16).float()) <= 2.0 ** -8
        return
    acc = fused_linear(x, prepared, bias, out_dtype=torch.float32, strategy=strategy, config=cfg)
    assert rel_err(acc, want) <= ACC_BOUND
    # the bf16 output is the accumulator rounded once, whichever strategy
    out = fused_linear(x, prepared, bias, strategy=strategy, config=cfg)
    assert torch.equal(out, acc.to(torch.bfloat16))


DECODE_VARIANTS = [  # (M, config): the split fp4 layout, the 2-D accumulator, M > 16, tails
    (1, dict(block_n=16, block_k=64, split=1, split_fp4=True, acc2d=True)),
    (1, dict(block_n=16, block_k=64, split=3, split_fp4=True)),
    (1, dict(block_n=32, block_k=128, split=1, split_fp4=True, acc2d=True)),  # K % 128: no split
    (5, dict(block_n=16, block_k=64, split=2, split_fp4=True)),
    (40, dict(block_n=16, block_k=64, split=1, split_fp4=True)),
    (40, dict(block_n=32, block_k=64, split=2))]


@pytest.mark.parametrize("wkey,akey", STRATEGY_CONTRACTS[:3],
                         ids=[f"W={key_id(w)}-A={key_id(a)}" for w, a in STRATEGY_CONTRACTS[:3]])
@pytest.mark.parametrize("m,cfg", DECODE_VARIANTS, ids=[f"M{m}-{i}" for i, (m, _) in
                                                        enumerate(DECODE_VARIANTS)])
def test_decode_variants_match_reference(m: int, cfg: dict, wkey, akey) -> None:
    from kernels.triton.linear_decode import DecodeConfig

    gen = torch.Generator().manual_seed(seed_of(m, cfg, wkey, akey))
    n, k = 40, 192
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(DEVICE)
    prepared = prepare(KERNEL, weight, wkey, akey, gen, x)
    config = DecodeConfig(warps=1, stages=1, **cfg)
    acc = fused_linear(x, prepared, out_dtype=torch.float32, strategy="decode", config=config)
    assert rel_err(acc, reference_fp32(x, prepared, None)) <= ACC_BOUND


@pytest.mark.parametrize("magnitude", (1.0, 2.0 ** 12, 2.0 ** -120), ids=("usual", "huge", "tiny"))
@pytest.mark.parametrize("m,cfg", [(1, dict(block_n=16, block_k=64, split=1)),
                                   (1, dict(block_n=16, block_k=64, split=1, fast_fp4=False)),
                                   (5, dict(block_n=16, block_k=64, split=2, split_fp4=True))],
                         ids=("fast", "generic", "split"))
def test_fp4_decodes_match_at_every_scale(m: int, cfg: dict, magnitude: float) -> None:
    """mxfp4's short decode: one fp32 multiplier per block when every scale byte <= 128 (2**1),
    two multiplies otherwise (huge weights), subnormal results for tiny ones: all exact."""
    from kernels.triton.linear_decode import DecodeConfig, fast_fp4_scale

    gen = torch.Generator().manual_seed(seed_of(m, cfg, magnitude))
    wkey = QuantKey.mx("mxfp4", rounding="even", static=True)
    weight = (torch.randn(32, 128, generator=gen) * magnitude).to(DEVICE)
    prepared = KERNEL.prepare(weight, SchemeContract(weight=wkey, activation=None))
    assert fast_fp4_scale(prepared.weight.scales) == (magnitude <= 1.0)
    x = torch.randn(m, 128, generator=gen).to(torch.bfloat16).to(DEVICE)
    acc = fused_linear(x, prepared, out_dtype=torch.float32, strategy="decode",
                       config=DecodeConfig(warps=1, stages=1, **cfg))
    want = reference_fp32(x, prepared, None)
    assert torch.isfinite(want).all() and rel_err(acc, want) <= ACC_BOUND


def test_the_fp4_scale_check_runs_once_per_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """It syncs the device: per call it would cost time and break CUDA-graph capture."""
    from kernels.triton import linear_decode

    calls = []
    real = linear_decode.fast_fp4_scale
    monkeypatch.setattr(linear_decode, "fast_fp4_scale", lambda s: calls.append(1) or real(s))
    prepared = KERNEL.prepare(torch.randn(16, 128).to(DEVICE), SchemeContract(
        weight=QuantKey.mx("mxfp4", rounding="even", static=True), activation=None))
    x = torch.randn(1, 128).to(DEVICE)
    # a tile that divides K, so the packed-fp4 path (and its check) runs on any device
    config = linear_decode.DecodeConfig(block_n=16, block_k=64, split=1, warps=1, stages=1)
    for _ in range(3):
        fused_linear(x, prepared, strategy="decode", config=config)
    assert calls == [1]


def test_split_fp4_layout_is_a_per_tile_permutation() -> None:
    from kernels.triton.linear_decode import split_fp4_layout

    gen = torch.Generator().manual_seed(11)
    data = torch.randint(0, 256, (3, 96), generator=gen, dtype=torch.uint8)  # K = 192
    split = split_fp4_layout(data, 64)
    codes = torch.stack((data & 0xF, data >> 4), -1).reshape(3, 192)
    for t in range(3):  # byte j of tile t: element 64t + j low, element 64t + 32 + j high
        for j in range(32):
            assert torch.equal(split[:, 32 * t + j] & 0xF, codes[:, 64 * t + j])
            assert torch.equal(split[:, 32 * t + j] >> 4, codes[:, 64 * t + 32 + j])
    with pytest.raises(ValueError, match="not a multiple of the tile 128"):
        split_fp4_layout(data, 128)


def test_strategy_choice_and_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured table (kernels/triton/linear_configs.py) decides per weight family, M and
    shape; past it, dequant-gemm for bf16 on a GPU, else tiled. (The rows below with the
    warp-specialized rows passed over, as while they are gated; with them: at the end.)"""
    from kernels.triton import linear_configs as lc
    from kernels.triton import wgmma_gates

    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", False)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", False)

    bf, f16 = torch.bfloat16, torch.float16
    fp4 = {"W_PACK": 1, "W_BITS": 4, "W_IS_INT": False}
    fp8 = {"W_PACK": 0, "W_BITS": 8, "W_IS_INT": False}
    int8 = {"W_PACK": 0, "W_BITS": 8, "W_IS_INT": True}
    fp6 = {"W_PACK": 2, "W_BITS": 6, "W_IS_INT": False}
    assert [lc.weight_family(c) for c in (fp4, fp8, int8, fp6)] == ["fp4", "fp8", "fp8", "other"]
    assert le.strategy_for(1, bf, bf, None, True, fp4, n=8192, k=8192)[0] == "wgmma"  # sm_90's Gluon
    assert le.strategy_for(16, bf, bf, None, True, fp4, n=8192, k=8192)[0] == "wgmma"
    # where wgmma does not apply, the family's next row
    assert le.strategy_for(1, bf, bf, None, True, fp4, skip=("wgmma",), n=8192, k=8192)[0] == "gemv"
    assert le.strategy_for(2, bf, bf, None, True, fp4, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    for m in (17, 32, 33, 64, 65, 128):  # one M tile of 32 / 64 / 128 rows
        assert le.strategy_for(m, bf, bf, None, True, fp4, n=8192, k=8192)[0] == "wgmma"
    assert le.strategy_for(17, bf, bf, None, True, fp4, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    assert le.strategy_for(128, bf, bf, None, True, fp4, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    assert le.strategy_for(129, bf, bf, None, True, fp4, n=8192, k=8192)[0] == "dequant-gemm"
    for m in (1, 16, 32, 64):  # mxfp8 e4m3: wgmma (e5m2 is refused there: the mma rows)
        assert le.strategy_for(m, bf, bf, None, True, fp8, n=8192, k=8192)[0] == "wgmma"
        assert le.strategy_for(m, bf, bf, None, True, fp8, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    assert le.strategy_for(65, bf, bf, None, True, fp8, skip=("wgmma",), n=8192, k=8192)[0] == \
        "dequant-gemm"
    # the shape class: two warpgroups without split-K at M = 64 on wide layers only
    for family in (fp4, fp8, int8, fp6):
        wide = le.strategy_for(64, bf, bf, None, True, family, n=28672, k=8192)[1]
        narrow = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=8192)[1]
        assert (wide.warps, wide.split, narrow.warps, narrow.split) == (8, 1, 4, 2), family
        assert le.strategy_for(64, bf, bf, None, True, family, n=16383, k=8192)[1] == narrow
    # ... and by K: 128 weight rows a warpgroup (rep 2) with split 4 at M = 32 / 64 on long K
    for family in (fp4, fp8, int8, fp6):
        long_k = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=28672)[1]
        assert (long_k.rep, long_k.split) == (2, 4), family
        assert le.strategy_for(64, bf, bf, None, True, family, n=8192, k=16383)[1].rep == 1
        assert le.strategy_for(64, bf, bf, None, True, family, n=28672, k=28672)[1].warps == 8
    # each family's first rows are wgmma; a weight it refuses (linear_wgmma.unavailable: an
    # mxint8 scale past 1.0, f16 x, ...) takes the next row, as _plan does
    for family in (int8, fp6):
        assert le.strategy_for(1, bf, bf, None, True, family, n=8192, k=8192)[0] == "wgmma"
        assert le.strategy_for(16, bf, bf, None, True, family, skip=("wgmma",), n=8192,
                               k=8192)[0] == "mma"
        assert le.strategy_for(65, f16, f16, None, True, family, n=8192, k=8192)[0] == "wgmma"
        assert le.strategy_for(65, f16, f16, None, True, family, skip=("wgmma",), n=8192,
                               k=8192)[0] == "tiled"
    assert le.strategy_for(1, bf, bf, None, True, fp6, skip=("wgmma",), n=8192, k=8192)[0] == "decode"
    assert le.strategy_for(1, bf, bf, None, True, int8, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    assert le.strategy_for(200, bf, bf, torch.zeros(4), True, fp4, n=8192, k=8192)[0] == "tiled"
    assert le.strategy_for(200, bf, bf, None, False, fp4, n=8192, k=8192)[0] == "tiled"  # no GPU
    # the interpreter takes the GPU's strategy with its own small config
    strategy, cfg = le.strategy_for(16, bf, bf, None, False, fp4, n=8192, k=8192)
    assert strategy == "mma" and cfg == lc.INTERPRETER_MMA
    assert le.strategy_for(1, bf, bf, None, False, fp4, n=8192, k=8192)[0] == "gemv"  # never Gluon there

    def row(strategy: str, family: str, m_max: int) -> object:
        return next(r.config for r in lc.TABLE
                    if (r.strategy, r.family, r.m_max) == (strategy, family, m_max))

    # a strategy the table did not pick for this M still gets a measured config on a GPU
    assert lc.config_for("mma", "fp4", 1, False, n=8192, k=8192) == row("mma", "fp4", 16)  # M <= 16
    assert lc.config_for("gemv", "fp4", 1, False, n=8192, k=8192) == row("gemv", "fp4", 1)
    assert lc.config_for("wgmma", "fp4", 9, False, n=28672, k=8192) == row("wgmma", "fp4", 16)
    # (N = 8192: the warp-specialized row, or, passed over while gated, the row after it)
    ws, after = lc.config_for("wgmma", "fp4", 9, False, n=8192, k=8192), lc.config_for(
        "wgmma", "fp4", 9, False, n=8192, k=8192, passed_over=lambda c: c.ws)
    assert ws.ws and not after.ws and after == lc._M16  # (not the wide layers' overlap row)
    assert lc.config_for("mma", "other", 500, False, n=8192, k=8192) == lc.TABLE[-1].config  # last row
    assert lc.config_for("mma", "fp8", 1, True, n=8192, k=8192) == lc.INTERPRETER_MMA
    assert lc.config_for("gemv", "other", 1, False, n=8192, k=8192) == row("gemv", "fp4", 1)  # none there
    # with the ws rows on: M = 64 takes a ws row (no split-K: the two consumers overlap decode
    # and wgmma) on narrow layers, and on wide ones for the "other" family (mxfp6: measured
    # faster there too); mxfp4 / mxfp8 keep the two-warpgroup row on wide layers
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    for family, wide_ws in ((fp4, False), (fp8, False), (int8, False), (fp6, True)):
        wide = le.strategy_for(64, bf, bf, None, True, family, n=28672, k=8192)[1]
        narrow = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=8192)[1]
        assert (wide.ws, wide.warps, narrow.ws, narrow.split) == \
            (wide_ws, 4 if wide_ws else 8, True, 1), family
    # ... and past M = 128 the wide ws tile (256 rows a program; dequant-gemm while it is gated)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    for family, stages in ((fp4, 3), (fp8, 2), (int8, 2), (fp6, 2)):
        # past M = 512, 2 stages: persistent in bands of 4 M tiles on every N (benchmarks part
        # 41); 3 stages (mxfp4): the grid kernel, in bands on wide layers only (N >= 16384;
        # parts 37 / 38). M = 129: the M <= 256 rows (the grid kernel; split-K 2, below)
        pst = stages == 2
        for m, large in ((129, False), (4096, True)):
            strategy, cfg = le.strategy_for(m, bf, bf, None, True, family, n=8192, k=8192)
            assert (strategy, cfg.block_m, cfg.ws, cfg.stages, cfg.group_m, cfg.persistent) == (
                "wgmma", 256, True, stages, 4 if pst and large else 1, pst and large), (family, m)
        wide = le.strategy_for(4096, bf, bf, None, True, family, n=28672, k=8192)[1]
        assert (wide.block_m, wide.stages, wide.group_m, wide.persistent) == (256, stages, 4,
                                                                              pst), family
        # ... and, while persistent is gated, the grid kernel's rows
        monkeypatch.setattr(wgmma_gates, "PERSISTENT_VERIFIED", False)
        for n, group_m in ((8192, 1), (28672, 4)):
            cfg = le.strategy_for(4096, bf, bf, None, True, family, n=n, k=8192)[1]
            assert (cfg.block_m, cfg.group_m, cfg.persistent) == (256, group_m, False), family
        monkeypatch.setattr(wgmma_gates, "PERSISTENT_VERIFIED", True)
        assert le.strategy_for(129, bf, bf, None, True, family, skip=("wgmma",), n=8192,
                               k=8192)[0] == "dequant-gemm"
    assert le.strategy_for(128, bf, bf, None, True, fp4, n=8192, k=8192)[1].block_m == 128
    # ... with split-K 2 up to M = 256 on N < 16384, once its own gate is open
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", True)
    for family in (fp4, fp8, int8, fp6):
        for m, n, split in ((129, 8192, 2), (256, 8192, 2), (257, 8192, 1), (512, 8192, 1),
                            (200, 28672, 1)):
            cfg = le.strategy_for(m, bf, bf, None, True, family, n=n, k=8192)[1]
            assert (cfg.block_m, cfg.split) == (256, split), (family, m, n)
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", False)
    assert le.strategy_for(300, bf, bf, None, True, fp4, n=8192, k=8192)[1].split == 1
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", False)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", False)
    assert [lc.m_bucket(m) for m in (1, 2, 16, 17, 32, 33, 64, 65, 128, 129)] == \
        [1, 16, 16, 32, 32, 64, 64, 128, 128, 256]
    assert [lc.m_bucket(m) for m in (256, 257, 512, 513)] == [256, 512, 512, 1 << 30]
    prepared = KERNEL.prepare(torch.randn(16, 64).to(DEVICE),
                              SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                                             activation=None))
    x = torch.randn(20, 64).to(DEVICE)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        with pytest.raises(ValueError, match="strategy 'wgmma' cannot run this call: "
                                             "(Gluon kernels do not run|wgmma is sm_90)"):
            fused_linear(torch.randn(2, 64, dtype=torch.bfloat16).to(DEVICE), prepared,
                         strategy="wgmma")
    with pytest.raises(ValueError, match="'gemv' runs one activation row"):
        fused_linear(torch.randn(2, 64).to(DEVICE), prepared, strategy="gemv")
    with pytest.raises(ValueError, match="decode needs M <= 64"):
        fused_linear(torch.randn(65, 64).to(DEVICE), prepared, strategy="decode")
    with pytest.raises(ValueError, match="dequant-gemm strategy takes bf16"):
        fused_linear(x.half(), prepared, strategy="dequant-gemm")
