"""`triton-emulation` (kernels.triton.linear_emulation) against the reference-emulation oracle.

Runs in Triton's CPU interpreter when there is no GPU (tests/conftest.py), so shapes stay small.
What is checked, and how tight:
- the in-kernel activation QDQ equals the dispatcher's, bit for bit: with an identity weight
  every output is one exact product (x_q * 1) plus exact zeros, so out == QDQ(x) exactly;
- the in-kernel weight dequant equals mx_dequantize, bit for bit: identity activations;
- every contract of the declaration (weight key x activation key, all roundings) against the
  reference with ||out - ref|| / ||ref|| <= 1e-5 on the fp32 accumulator (see ACC_BOUND);
- apply()'s output is that accumulator rounded once to x's dtype; NaN / Inf blocks; errors.
"""
from __future__ import annotations

import random
import zlib

import pytest
import torch
import torch.nn.functional as F

from kernels.base import PreparedWeight, load_kernel
from kernels.dispatch import UnknownActivationKey, activation_qdq
from kernels.mx import MXTensor, mx_dequantize
from kernels.reference.packing import pack_codes
from kernels.select.activation_keys import DISPATCH_KEYS, FP8_STATIC_TENSOR_KEY
from kernels.select.declarations import KERNELS_BY_NAME
from kernels.spec.contract import QuantKey, ScaleDesc, SchemeContract
from kernels.spec.formats import FORMATS
from kernels.triton import linear_emulation as le
from kernels.triton import linear_tiles as lt
from kernels.triton.linear_emulation import TritonEmulationLinear, fused_linear

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DECL = KERNELS_BY_NAME["triton-emulation"]
# Every (weight key, activation key) the declaration accepts: the contract test's cases.
CONTRACTS = sorted({(w, a) for fam in DECL.accepts for w in fam.weights for a in fam.activations},
                   key=lambda c: (str(c[0]), str(c[1])))
ACT_KEYS = sorted(DISPATCH_KEYS, key=str) + [None]
# fp32 summation-order bound. Both sides add the same exact products in fp32 (the operands are
# exact in the dot's input type), only in another order; each order errs by <= K * 2**-24 * sum
# |x||w| at worst and ~sqrt(K) * 2**-24 * sum |x||w| for random data. For K <= 128 and
# zero-mean data (sum |x||w| / |sum x w| ~ sqrt(K)) that is ~1e-6; 1e-5 leaves a 10x margin,
# while one misrounded operand (>= one element quantum, 2**-8 relative or more) shows >= 1e-4.
ACC_BOUND = 1e-5
SHAPES = (((1,), 16, 64), ((3,), 48, 128), ((17,), 48, 64), ((17,), 16, 128),
          ((2, 3), 48, 64), ((1, 2), 16, 128), ((5, 4), 16, 64))
KERNEL = TritonEmulationLinear()
REFERENCE = load_kernel("reference-emulation")


def key_id(key: QuantKey | None) -> str:
    return "none" if key is None else str(key)


def seed_of(*parts: object) -> int:
    return zlib.crc32(" ".join(map(str, parts)).encode())


def prepare(kernel, weight, wkey: QuantKey, akey: QuantKey | None, gen: torch.Generator,
            sample: torch.Tensor | None = None) -> PreparedWeight:
    """Prepare for (wkey, akey); a static fp8 key gets a scale that makes some values saturate."""
    contract = SchemeContract(weight=wkey, activation=akey)
    if akey != FP8_STATIC_TENSOR_KEY:
        return kernel.prepare(weight, contract)
    amax = float(sample.abs().float().amax()) if sample is not None else 4.0
    scale = amax / 448.0 * float(torch.empty(()).uniform_(0.4, 1.5, generator=gen))
    return kernel.prepare(weight, contract, act_scale=scale)


def reference_fp32(x: torch.Tensor, prepared: PreparedWeight, bias: torch.Tensor | None):
    """ReferenceEmulationLinear.apply before its final cast: the fp32 accumulator."""
    xq = REFERENCE.qdq_activation(x, prepared, backend="reference")
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq.float(), w, None if bias is None else bias.float())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300))


# --------------------------------------------------------------------------- every contract
@pytest.mark.parametrize("wkey,akey", CONTRACTS,
                         ids=[f"W={key_id(w)}-A={key_id(a)}" for w, a in CONTRACTS])
def test_contract_matches_reference(wkey: QuantKey, akey: QuantKey | None) -> None:
    rng = random.Random(seed_of(wkey, akey))
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    lead, n, k = rng.choice(SHAPES)
    dtype = rng.choice(DTYPES)
    x = torch.randn(*lead, k, generator=gen).to(dtype).to(DEVICE)
    weight = (torch.randn(n, k, generator=gen) * 0.1).to(DEVICE)
    bias = torch.randn(n, generator=gen).to(dtype).to(DEVICE) if rng.random() < 0.5 else None
    prepared = prepare(KERNEL, weight, wkey, akey, gen, x)
    acc = fused_linear(x, prepared, bias, out_dtype=torch.float32)
    want = reference_fp32(x, prepared, bias)
    # the mirror above is the oracle's own result before its cast
    assert torch.equal(want.to(dtype), REFERENCE.apply(x, prepared, bias))
    assert acc.shape == (*lead, n) and acc.dtype == torch.float32
    err = rel_err(acc, want)
    assert err <= ACC_BOUND, f"{dtype} x{tuple(x.shape)} N={n} bias={bias is not None}: {err:.3g}"


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
    from kernels.triton import linear_wgmma as lw

    monkeypatch.setattr(lw, "WS_VERIFIED", False)
    monkeypatch.setattr(lw, "WIDE_M_VERIFIED", False)

    bf, f16 = torch.bfloat16, torch.float16
    fp4 = {"W_PACK": 1, "W_BITS": 4, "W_IS_INT": False}
    fp8 = {"W_PACK": 0, "W_BITS": 8, "W_IS_INT": False}
    int8 = {"W_PACK": 0, "W_BITS": 8, "W_IS_INT": True}
    assert [lc.weight_family(c) for c in (fp4, fp8, int8)] == ["fp4", "fp8", "other"]
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
    for family in (fp4, fp8, int8):
        wide = le.strategy_for(64, bf, bf, None, True, family, n=28672, k=8192)[1]
        narrow = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=8192)[1]
        assert (wide.warps, wide.split, narrow.warps, narrow.split) == (8, 1, 4, 2), family
        assert le.strategy_for(64, bf, bf, None, True, family, n=16383, k=8192)[1] == narrow
    # ... and by K: 128 weight rows a warpgroup (rep 2) with split 4 at M = 32 / 64 on long K
    for family in (fp4, fp8, int8):
        long_k = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=28672)[1]
        assert (long_k.rep, long_k.split) == (2, 4), family
        assert le.strategy_for(64, bf, bf, None, True, family, n=8192, k=16383)[1].rep == 1
        assert le.strategy_for(64, bf, bf, None, True, family, n=28672, k=28672)[1].warps == 8
    # the "other" family's first rows are wgmma (mxfp6); a weight it refuses (mxint8 here:
    # linear_wgmma.unavailable) takes the next row, as _plan does
    assert le.strategy_for(1, bf, bf, None, True, int8, n=8192, k=8192)[0] == "wgmma"
    assert le.strategy_for(1, bf, bf, None, True, int8, skip=("wgmma",), n=8192, k=8192)[0] == "decode"
    assert le.strategy_for(16, bf, bf, None, True, int8, skip=("wgmma",), n=8192, k=8192)[0] == "mma"
    assert le.strategy_for(65, f16, f16, None, True, int8, n=8192, k=8192)[0] == "wgmma"  # refused: f16
    assert le.strategy_for(65, f16, f16, None, True, int8, skip=("wgmma",), n=8192, k=8192)[0] == "tiled"
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
    assert ws.ws and not after.ws and after == row("wgmma", "fp4", 16)
    assert lc.config_for("mma", "other", 500, False, n=8192, k=8192) == lc.TABLE[-1].config  # last row
    assert lc.config_for("mma", "fp8", 1, True, n=8192, k=8192) == lc.INTERPRETER_MMA
    assert lc.config_for("gemv", "other", 1, False, n=8192, k=8192) == row("gemv", "fp4", 1)  # none there
    # with the ws rows on: M = 64 takes a ws row (no split-K: the two consumers overlap decode
    # and wgmma) on narrow layers, and on wide ones for the "other" family (mxfp6: measured
    # faster there too); mxfp4 / mxfp8 keep the two-warpgroup row on wide layers
    monkeypatch.setattr(lw, "WS_VERIFIED", True)
    for family, wide_ws in ((fp4, False), (fp8, False), (int8, True)):
        wide = le.strategy_for(64, bf, bf, None, True, family, n=28672, k=8192)[1]
        narrow = le.strategy_for(64, bf, bf, None, True, family, n=8192, k=8192)[1]
        assert (wide.ws, wide.warps, narrow.ws, narrow.split) == \
            (wide_ws, 4 if wide_ws else 8, True, 1), family
    # ... and past M = 128 the wide ws tile (256 rows a program; dequant-gemm while it is gated)
    monkeypatch.setattr(lw, "WIDE_M_VERIFIED", True)
    for family, stages in ((fp4, 3), (fp8, 2), (int8, 2)):
        for m in (129, 4096):
            strategy, cfg = le.strategy_for(m, bf, bf, None, True, family, n=8192, k=8192)
            assert (strategy, cfg.block_m, cfg.ws, cfg.stages) == ("wgmma", 256, True, stages)
        assert le.strategy_for(129, bf, bf, None, True, family, skip=("wgmma",), n=8192,
                               k=8192)[0] == "dequant-gemm"
    assert le.strategy_for(128, bf, bf, None, True, fp4, n=8192, k=8192)[1].block_m == 128
    # ... with split-K 2 up to M = 256 on N < 16384, once its own gate is open
    monkeypatch.setattr(lw, "WIDE_SPLIT_VERIFIED", True)
    for family in (fp4, fp8, int8):
        for m, n, split in ((129, 8192, 2), (256, 8192, 2), (257, 8192, 1), (512, 8192, 1),
                            (200, 28672, 1)):
            cfg = le.strategy_for(m, bf, bf, None, True, family, n=n, k=8192)[1]
            assert (cfg.block_m, cfg.split) == (256, split), (family, m, n)
    monkeypatch.setattr(lw, "WIDE_SPLIT_VERIFIED", False)
    assert le.strategy_for(300, bf, bf, None, True, fp4, n=8192, k=8192)[1].split == 1
    monkeypatch.setattr(lw, "WS_VERIFIED", False)
    monkeypatch.setattr(lw, "WIDE_M_VERIFIED", False)
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


def test_cases_cover_the_declaration() -> None:
    """The contract test runs every weight format x activation key x rounding it declares."""
    weights = {w for w, _ in CONTRACTS}
    assert {w.format for w in weights} == set(FORMATS)
    assert {w.scale.rounding for w in weights} == {"floor", "even", "rceil"}
    assert {a for _, a in CONTRACTS} == set(DISPATCH_KEYS) | {None}
    assert len(CONTRACTS) == len(weights) * (len(DISPATCH_KEYS) + 1)
    assert isinstance(load_kernel("triton-emulation"), TritonEmulationLinear)
    assert all(DECL.check_limits(64, 16, d)[0] for d in DTYPES)


# --------------------------------------------------------------------------- bit-exact parts
def act_input(akey: QuantKey | None, dtype: torch.dtype, shape, gen) -> torch.Tensor:
    """Blocks of 32 at scales 2**[lo, hi] (fp16: small enough that no QDQ rounds up to Inf),
    a zero and a negative-zero block, exact element-grid ties, and +-Inf for the fp8 key (it
    saturates). Values stay above 2**-126 (see the module docstring of the kernel)."""
    lo, hi = (-12, 10) if dtype == torch.float16 else (-40, 40)
    rows, k = shape[0] * shape[1], shape[2]
    scale = torch.exp2(torch.randint(lo, hi, (rows, k // 32, 1), generator=gen).float())
    x = (torch.randn(rows, k // 32, 32, generator=gen) * scale).view(rows, k)
    x[0, :32] = 0.0
    x[-1, -32:] = -0.0
    if akey is not None and akey.is_mx:  # exact ties of the element grid at E = 0
        fmt = FORMATS[akey.format]  # (amax = max normal gives E = 0 for every rounding)
        j = torch.arange(31, dtype=torch.float32)
        if fmt.is_int:
            mids = (j + 0.5) / 64
        else:
            mids = 1 + (j % 2 ** fmt.mbits + 0.5) * 2.0 ** -fmt.mbits
        signs = torch.where(torch.rand(31, generator=gen) < 0.5, -1.0, 1.0)
        x[rows // 2, 32:64] = torch.cat([mids * signs, torch.tensor([fmt.max_normal])])
    if akey == FP8_STATIC_TENSOR_KEY:
        x[rows // 2, 35], x[rows // 2, 40] = float("inf"), float("-inf")
    return x.view(shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("akey", ACT_KEYS, ids=key_id)
def test_activation_qdq_is_bit_exact(akey: QuantKey | None, dtype: torch.dtype) -> None:
    """Identity weight: out[m, n] = x_q[m, n] * 1 + exact zeros, so out must equal the
    dispatcher's QDQ of x bit for bit (-0 and +0 compare equal: a sum of zeros is +0)."""
    gen = torch.Generator().manual_seed(seed_of(akey, dtype))
    wfmt = sorted(FORMATS)[seed_of(akey, dtype) % len(FORMATS)]
    k = 128
    shape = (1, 1, k) if seed_of(dtype, akey) % 3 == 0 else (3, 7, k)
    x = act_input(akey, dtype, shape, gen).to(DEVICE)
    eye = torch.eye(k, device=DEVICE)
    prepared = prepare(KERNEL, eye, QuantKey.mx(wfmt, rounding="even", static=True), akey, gen,
                       x.float().nan_to_num(posinf=0.0, neginf=0.0))
    assert torch.equal(mx_dequantize(prepared.weight), eye)
    out = KERNEL.apply(x, prepared)
    want = x if akey is None else activation_qdq(akey, "reference")(x, prepared.act_scale)
    assert out.dtype == dtype and torch.isfinite(want).all()
    bad = (out != want).nonzero()
    assert bad.numel() == 0, (f"{len(bad)} differ (W {wfmt}), first at {bad[0].tolist()}: x "
                              f"{x[tuple(bad[0])].item()!r} -> {out[tuple(bad[0])].item()!r}, "
                              f"want {want[tuple(bad[0])].item()!r}")


def random_weight(name: str, layout: str, n: int, k: int, gen: torch.Generator,
                  nan_block: tuple[int, int] | None = None) -> MXTensor:
    """Random codes (no NaN / Inf codes) and scale bytes 40..215 (values stay normal in bf16).
    nan_block (row, block): scale byte 0xFF and zero codes there, as quantizing a NaN gives."""
    fmt = FORMATS[name]
    codes = torch.randint(0, 1 << fmt.bits, (n, k), generator=gen)
    mag = codes & ((1 << (fmt.bits - 1)) - 1)
    if fmt.specials == "nan_only_all_ones":
        codes = torch.where(mag == 0x7F, 0, codes)
    elif fmt.specials == "ieee":
        codes = torch.where(mag > 0x7B, 0, codes)
    scales = torch.randint(40, 216, (n, k // 32), generator=gen).to(torch.uint8)
    if nan_block is not None:  # zero codes: only the 0xFF rule can make this block NaN
        row, blk = nan_block
        codes[row, 32 * blk: 32 * blk + 32] = 0
        scales[row, blk] = 0xFF
    data = pack_codes(codes.to(torch.uint8), fmt, layout)
    return MXTensor(data, scales, name, "even", torch.Size((n, k)), layout)


FMT_LAYOUTS = [(name, layout) for name, f in FORMATS.items()
               for layout in (("packed", "unpacked") if f.bits < 8 else ("unpacked",))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,layout", FMT_LAYOUTS)
def test_weight_dequant_is_bit_exact(name: str, layout: str, dtype: torch.dtype) -> None:
    """Identity activations (weight-only): out[m, n] = w[n, m] exactly, for every layout."""
    gen = torch.Generator().manual_seed(seed_of(name, layout, dtype))
    n, k = 48, 64
    w = random_weight(name, layout, n, k, gen).to(DEVICE)
    prepared = KERNEL.prepare(w, SchemeContract(weight=QuantKey.mx(name, rounding="even",
                                                                   static=True), activation=None))
    out = fused_linear(torch.eye(k, device=DEVICE).to(dtype), prepared, out_dtype=torch.float32)
    want = mx_dequantize(w, torch.float32, backend="reference").T
    bad = (out != want).nonzero()
    assert bad.numel() == 0, f"{len(bad)} differ, first at {bad[0].tolist()}"


# --------------------------------------------------------------------------- output, NaN / Inf
@pytest.mark.parametrize("with_bias", (False, True), ids=("no-bias", "bias"))
@pytest.mark.parametrize("akey", [None, QuantKey.mx("mxfp6_e2m3", rounding="rceil", static=False),
                                  FP8_STATIC_TENSOR_KEY], ids=key_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_apply_rounds_the_accumulator_once(dtype, akey, with_bias: bool) -> None:
    """apply() == the fp32 accumulator cast to x's dtype (RNE), and within one rounding of
    the reference's output (the accumulators differ by summation order only)."""
    gen = torch.Generator().manual_seed(seed_of(dtype, akey, with_bias))
    x = torch.randn(2, 9, 128, generator=gen).to(dtype).to(DEVICE)
    bias = torch.randn(48, generator=gen).to(dtype).to(DEVICE) if with_bias else None
    prepared = prepare(KERNEL, torch.randn(48, 128, generator=gen).to(DEVICE),
                       QuantKey.mx("mxfp4", rounding="floor", static=True), akey, gen, x)
    out = KERNEL.apply(x, prepared, bias)
    assert out.dtype == dtype and out.shape == (2, 9, 48)
    assert torch.equal(out, fused_linear(x, prepared, bias, out_dtype=torch.float32).to(dtype))
    ref = REFERENCE.apply(x, prepared, bias).float()
    ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10, torch.float32: ACC_BOUND}[dtype]
    # out and ref round accumulators that differ by ~1e-6 relative: at most one unit apart,
    # plus an absolute term for outputs near zero (cancellation)
    assert ((out.float() - ref).abs() <= ulp * ref.abs() + ACC_BOUND * ref.abs().max()).all()


# numpy (the interpreter) warns about the Inf arithmetic this test makes on purpose
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("akind", ("none", "mx", "fp8"))
@pytest.mark.parametrize("wname", sorted(FORMATS))
def test_nan_and_inf_blocks(wname: str, akind: str) -> None:
    """A weight block with scale byte 0xFF (and NaN / Inf codes where the format has them),
    activations with NaN and Inf: NaN / Inf positions and signs equal the reference's."""
    gen = torch.Generator().manual_seed(seed_of(wname, akind))
    n, k = 48, 128
    akey = {"none": None, "fp8": FP8_STATIC_TENSOR_KEY,
            "mx": QuantKey.mx(sorted(FORMATS)[seed_of(wname) % 6], rounding="even",
                              static=False)}[akind]
    layout = "packed" if FORMATS[wname].bits < 8 else "unpacked"
    w = random_weight(wname, layout, n, k, gen, nan_block=(5, 2))
    data, scales = w.data.clone(), w.scales
    if FORMATS[wname].specials != "none":  # E4M3 0x7F is NaN, E5M2 0x7C is +Inf
        data[30, 70] = 0x7F if FORMATS[wname].specials == "nan_only_all_ones" else 0x7C
    w = MXTensor(data, scales, wname, "even", w.shape, w.layout).to(DEVICE)
    x = torch.randn(17, k, generator=gen).to(torch.bfloat16)
    x[3, 10], x[9, 100] = float("nan"), float("inf")
    x = x.to(DEVICE)
    prepared = prepare(KERNEL, w, QuantKey.mx(wname, rounding="even", static=True), akey, gen)
    out = fused_linear(x, prepared, out_dtype=torch.float32)
    want = reference_fp32(x, prepared, None)
    assert torch.equal(out.isnan(), want.isnan()), "NaN positions differ"
    assert want.isnan()[:, 5].all() and want.isnan()[3].all()  # the cases did reach the kernel
    inf = want.isinf()
    assert torch.equal(out.isinf(), inf) and torch.equal(out[inf], want[inf])
    fin = want.isfinite()
    assert rel_err(out[fin], want[fin]) <= ACC_BOUND
    assert torch.equal(KERNEL.apply(x, prepared).isnan(), REFERENCE.apply(x, prepared).isnan())


# --------------------------------------------------------------------------- interface, errors
def test_compiled_dot_operands_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's operand type per case (the interpreter always feeds fp32): bf16 only when the
    activation has <= 8 significant bits (bf16 input, or MX-QDQ'd), tf32 for fp16 (11 bits)."""
    monkeypatch.setattr(lt, "_INTERPRETED", False)
    monkeypatch.setattr(lt, "_fp32_dot_precision_for_fp16", lambda: "tf32")
    for dtype in DTYPES:
        assert le.dot_choice(dtype, le.ACT_MX)[0] == le.DOT_BF16
        for mode in (le.ACT_NONE, le.ACT_FP8_STATIC):
            want = {torch.bfloat16: (le.DOT_BF16, "ieee"), torch.float16: (le.DOT_FP32, "tf32"),
                    torch.float32: (le.DOT_FP32, "ieee")}[dtype]
            assert le.dot_choice(dtype, mode) == want


def test_prepare_caches_once_and_foreign_prepared_weights_work() -> None:
    gen = torch.Generator().manual_seed(5)
    contract = SchemeContract(weight=QuantKey.mx("mxfp6_e3m2", rounding="floor", static=True),
                              activation=QuantKey.mx("mxint8", rounding="even", static=False))
    w = torch.randn(16, 64, generator=gen).to(DEVICE)
    x = torch.randn(3, 64, generator=gen).to(torch.bfloat16).to(DEVICE)
    ours = KERNEL.prepare(w, contract)
    cached = dict(ours.cache)
    assert cached, "finish_prepare stored nothing"
    out = KERNEL.apply(x, ours)
    assert all(ours.cache[key] is value for key, value in cached.items())
    foreign = REFERENCE.prepare(w, contract)  # no triton-emulation cache yet
    assert torch.equal(KERNEL.apply(x, foreign), out)
    empty = KERNEL.apply(torch.zeros(0, 64, dtype=torch.bfloat16, device=DEVICE), ours)
    assert empty.shape == (0, 16) and empty.dtype == torch.bfloat16


def test_bad_inputs_raise_clear_errors() -> None:
    wkey = QuantKey.mx("mxfp4", rounding="even", static=True)
    w = torch.randn(16, 64).to(DEVICE)
    prepared = KERNEL.prepare(w, SchemeContract(weight=wkey, activation=None))
    with pytest.raises(ValueError, match="in_features=64"):
        KERNEL.apply(torch.randn(2, 32, device=DEVICE), prepared)
    with pytest.raises(ValueError, match="dtype torch.float64"):
        KERNEL.apply(torch.randn(2, 64, dtype=torch.float64, device=DEVICE), prepared)
    with pytest.raises(ValueError, match=r"bias must be a float tensor of shape \(16,\)"):
        KERNEL.apply(torch.randn(2, 64, device=DEVICE), prepared, torch.zeros(2, 16, device=DEVICE))
    with pytest.raises(ValueError, match="bias must be a float tensor"):
        KERNEL.apply(torch.randn(2, 64, device=DEVICE), prepared,
                     torch.zeros(16, dtype=torch.int32, device=DEVICE))
    with pytest.raises(ValueError, match="out_dtype"):
        fused_linear(torch.randn(2, 64, device=DEVICE), prepared, out_dtype=torch.int8)
    per_token = QuantKey(format="fp8_e4m3",
                         scale=ScaleDesc(format="fp32", granularity="token", static=False))
    with pytest.raises(UnknownActivationKey, match="no entry for fp8_e4m3:fp32/token:dynamic"):
        KERNEL.prepare(w, SchemeContract(weight=wkey, activation=per_token))
    no_scale = PreparedWeight(prepared.weight, SchemeContract(weight=wkey,
                                                              activation=FP8_STATIC_TENSOR_KEY))
    with pytest.raises(ValueError, match="no act_scale"):
        KERNEL.apply(torch.randn(2, 64, device=DEVICE), no_scale)
