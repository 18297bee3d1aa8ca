"""The tensor-core strategy of `triton-emulation` (kernels/triton/linear_mma.py): its weight
layouts, split-K reduction, launch plans and decodes, against the reference.

In the CPU interpreter the mxfp4 word decode runs as integer / fp32 Triton and the fp8 decode
with its special codes fixed from the bits; on a GPU the same tests run the PTX bf16x2 decode
and the hardware fp8 convert (and `test_ptx_decode_equals_the_portable_one` compares them).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_dequantize
from kernels.reference.packing import pack_codes
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.spec.formats import FORMATS
from kernels.triton import linear_emulation as le
from kernels.triton import fp4_words as fw
from kernels.triton import linear_mma as lm
from kernels.triton.linear_emulation import fused_linear
from kernels.triton.linear_tiles import dot_choice
from kernels.triton.mx_codec import KIND_OF_DTYPE
from kernels.triton.mx_quant import bits_view

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNEL = load_kernel("triton-emulation")
SMALL = lm.MmaConfig(block_m=16, block_n=16, block_k=64, split=1, warps=1, stages=1)


def wkey(name: str) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=True)


def weight(name: str, codes: torch.Tensor, scales: torch.Tensor) -> MXTensor:
    fmt = FORMATS[name]
    layout = "packed" if fmt.bits < 8 else "unpacked"
    data = pack_codes(codes.to(torch.uint8), fmt, layout)
    return MXTensor(data, scales.to(torch.uint8), name, "even", torch.Size(codes.shape), layout)


def reference_fp32(x: torch.Tensor, w: MXTensor) -> torch.Tensor:
    return F.linear(x.float(), mx_dequantize(w, torch.float32, backend="reference"))


def every_code_fp4(n: int, k: int, gen: torch.Generator):
    """An mxfp4 weight (and its prepared form) with all 16 codes in every row and the scale
    bytes 0 (subnormal products), 1, 127, 128 (the short decode's largest) and 0xFF (NaN) on
    rows 0..4, the rest random in 100..128."""
    codes = torch.randint(0, 16, (n, k), generator=gen)
    codes[:, :16] = torch.arange(16)
    scales = torch.randint(100, 129, (n, k // 32), generator=gen)
    scales[0, 0], scales[1, 1], scales[2, 2], scales[3, 3], scales[4, 4] = 0, 1, 127, 128, 255
    w = weight("mxfp4", codes, scales).to(DEVICE)
    return w, KERNEL.prepare(w, SchemeContract(weight=wkey("mxfp4"), activation=None))


def run(prepared, x: torch.Tensor, cfg: lm.MmaConfig, asm: bool = False,
        tiled: bool = True) -> torch.Tensor:
    """One forced launch (fp32 output: the accumulator before any cast)."""
    cached = prepared.cache["triton_emulation"]
    out = torch.empty(x.shape[0], prepared.out_features, dtype=torch.float32, device=x.device)
    hw = DEVICE == "cuda"
    consts = dict(cached["consts"])
    dot_kind, precision = dot_choice(x.dtype, consts["ACT_MODE"])
    lm.launch_mma(bits_view(x), bits_view(out), cached, None, consts, dot_kind, precision, hw,
                  KIND_OF_DTYPE[x.dtype], 0, cfg, asm and hw, False, tiled)
    return out


def test_fp4_word_layout_puts_each_code_at_its_nibble() -> None:
    gen = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (5, 64), generator=gen)
    data = pack_codes(codes.to(torch.uint8), FORMATS["mxfp4"], "packed")
    words = fw.fp4_word_layout(data).to(torch.int64) & 0xFFFFFFFF
    assert words.shape == (5, 8) and words.dtype == torch.int64
    for j, nib in enumerate(fw.WORD_NIBBLE):
        assert torch.equal((words >> (4 * nib)) & 0xF, codes[:, j::8])
    with pytest.raises(ValueError, match="not a multiple of 8"):
        fw.fp4_word_layout(data[:, :2])


def test_tile_major_stores_each_tile_contiguously() -> None:
    t = torch.arange(5 * 6).reshape(5, 6)
    tiled = fw.tile_major(t, 2, 3)  # 3 row tiles (one padded) x 2 column tiles
    assert tiled.shape == (3 * 2 * 2, 3)
    for i in range(3):
        for j in range(2):
            want = torch.zeros(2, 3, dtype=t.dtype)
            block = t[2 * i: 2 * i + 2, 3 * j: 3 * j + 3]
            want[: block.shape[0]] = block
            assert torch.equal(tiled[(i * 2 + j) * 2: (i * 2 + j) * 2 + 2], want)
    with pytest.raises(ValueError, match="not a multiple"):
        fw.tile_major(t, 2, 4)


@pytest.mark.parametrize("tiled", (False, True), ids=("rows", "tiled"))
@pytest.mark.parametrize("split", (1, 2, 3))
@pytest.mark.parametrize("m", (1, 5, 19))
def test_fp4_words_at_every_code_and_scale(m: int, split: int, tiled: bool) -> None:
    """All 16 codes in every block, scale bytes 0 (the smallest: subnormal products), 1, 127,
    128 (the largest of the short decode) and 0xFF (NaN): exact products, so the fp32 result
    equals the reference's up to summation order; NaN rows where the reference has them."""
    gen = torch.Generator().manual_seed(m * 10 + split)
    n, k = 40, 256  # N tail (40 = 2.5 tiles), 4 K tiles
    w, prepared = every_code_fp4(n, k, gen)
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    cfg = lm.MmaConfig(16, 16, 64, split, 1, 1)
    out = run(prepared, x, cfg, asm=True, tiled=tiled)
    assert prepared.cache["triton_emulation"]["mma_fp4_words"] is not None  # the word path ran
    want = reference_fp32(x, w)
    assert torch.equal(out.isnan(), want.isnan()) and want.isnan()[:, 4].all()
    fin = want.isfinite()
    err = (out[fin] - want[fin]).norm() / want[fin].norm()
    assert err <= 1e-5, f"{err:.3g}"
    # the split-K counters are back at zero: the next call starts clean
    assert int(lm.workspace(1, x.device)[1].abs().sum()) == 0
    assert torch.equal(run(prepared, x, cfg, asm=True, tiled=tiled).isnan(), out.isnan())


def test_fp4_weights_past_the_short_decode_take_the_generic_one() -> None:
    """A scale byte above 128 (2**126 * 2**(E-127) no longer fits one multiplier) or K not a
    multiple of the K tile: the generic decode runs, with the same numbers."""
    gen = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 16, (16, 96), generator=gen)
    scales = torch.full((16, 3), 127)
    scales[0, 0] = 200
    w = weight("mxfp4", codes, scales).to(DEVICE)
    prepared = KERNEL.prepare(w, SchemeContract(weight=wkey("mxfp4"), activation=None))
    x = torch.randn(3, 96, generator=gen).to(DEVICE)
    out = run(prepared, x, SMALL)
    assert prepared.cache["triton_emulation"].get("mma_fp4_words") is None
    assert ((out - reference_fp32(x, w)).norm() / out.norm()) <= 1e-5


@pytest.mark.parametrize("name", ("mxfp8_e4m3", "mxfp8_e5m2"))
def test_fp8_convert_at_every_code(name: str) -> None:
    """Every finite code (subnormals, +-0, the largest) through the fp8 convert path, exactly;
    the NaN / Inf codes go through test_linear_emulation's test_nan_and_inf_blocks (one NaN
    code would make a whole output column NaN here)."""
    n, k = 32, 256
    codes = torch.arange(256).repeat(n, 1).roll(3, 1)
    special = 0x7F if FORMATS[name].specials == "nan_only_all_ones" else 0x7C
    codes = torch.where((codes & special) == special, 0x11, codes)
    scales = torch.full((n, k // 32), 120)
    scales[::5, 1] = 130
    w = weight(name, codes, scales).to(DEVICE)
    prepared = KERNEL.prepare(w, SchemeContract(weight=wkey(name), activation=None))
    eye = torch.eye(k, device=DEVICE)  # out[m, n] = w[n, m] exactly
    out = run(prepared, eye, lm.MmaConfig(16, 16, 64, 2, 1, 1))
    want = mx_dequantize(w, torch.float32, backend="reference").T
    assert want.isfinite().all() and (want != 0).any()
    assert torch.equal(out, want), f"{int((out != want).sum())} differ"


def test_launch_plans_are_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks and the plan run on the first call of an (M bucket, dtype) only; a bad input
    still gets its one-line error on any call."""
    built = []
    real = le._plan
    monkeypatch.setattr(le, "_plan", lambda *a, **k: built.append(1) or real(*a, **k))
    prepared = KERNEL.prepare(torch.randn(32, 64).to(DEVICE),
                              SchemeContract(weight=wkey("mxfp4"), activation=None))
    for m in (3, 5, 16, 3):
        fused_linear(torch.randn(m, 64).to(DEVICE), prepared)
    assert len(built) == 1  # one bucket (M <= 16), one dtype
    fused_linear(torch.randn(1, 64).to(DEVICE), prepared)
    fused_linear(torch.randn(3, 64).to(DEVICE).half(), prepared)
    assert len(built) == 3
    with pytest.raises(ValueError, match="does not end in in_features=64"):
        fused_linear(torch.randn(3, 65).to(DEVICE), prepared)
    with pytest.raises(ValueError, match=r"bias must be a float tensor of shape \(32,\)"):
        fused_linear(torch.randn(3, 64).to(DEVICE), prepared, torch.zeros(31).to(DEVICE))


@pytest.mark.skipif(DEVICE != "cuda", reason="the PTX decode runs on NVIDIA GPUs only; the "
                    "portable decode it must equal runs everywhere (tests above)")
@pytest.mark.parametrize("m", (1, 16, 64))
def test_ptx_decode_equals_the_portable_one(m: int) -> None:
    """Same fp32 accumulator bits from the PTX bf16x2 decode and the integer / fp32 decode,
    with every code and scale bytes 0..128 and 0xFF, tiled and row layouts, split-K 1 and 4."""
    gen = torch.Generator().manual_seed(m)
    n, k = 256, 1024
    codes = torch.randint(0, 16, (n, k), generator=gen)
    scales = torch.randint(0, 129, (n, k // 32), generator=gen)
    scales[7, 3] = 255
    w = weight("mxfp4", codes, scales).to(DEVICE)
    prepared = KERNEL.prepare(w, SchemeContract(weight=wkey("mxfp4"), activation=None))
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(DEVICE)
    for split in (1, 4):
        cfg = lm.MmaConfig(16 if m <= 16 else 64, 64, 256, split, 4, 3)
        a = run(prepared, x, cfg, asm=True)
        b = run(prepared, x, cfg, asm=False)
        c = run(prepared, x, cfg, asm=True, tiled=False)
        assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
        assert torch.equal(a.nan_to_num(7.0), c.nan_to_num(7.0))
        # and a second call (the launcher's direct path) gives the same bits again
        assert torch.equal(run(prepared, x, cfg, asm=True).nan_to_num(7.0), a.nan_to_num(7.0))


@pytest.mark.parametrize("wname,akey", [("mxfp4", None), ("mxint8", "mxint8"),
                                        ("mxfp6_e3m2", "mxfp6_e3m2")])
def test_planned_launches_match_the_reference_call_after_call(wname: str, akey) -> None:
    """The planned paths (the M = 1 decode remembered from its first launch, the mma plan with
    its planned activation QDQ) give the reference's numbers on every call, not only the
    first: fresh inputs each call, bias and none."""
    gen = torch.Generator().manual_seed(len(wname))
    n, k = 64, 128
    act = None if akey is None else QuantKey.mx(akey, rounding="even", static=False)
    prepared = KERNEL.prepare((torch.randn(n, k, generator=gen) * 0.1).to(DEVICE),
                              SchemeContract(weight=wkey(wname), activation=act))
    wide = KERNEL.prepare((torch.randn(2 * k, k, generator=gen) * 0.1).to(DEVICE),
                          SchemeContract(weight=wkey(wname), activation=act))
    ref = load_kernel("reference-emulation")
    for p in (prepared, wide):
        for m, bias in ((1, None), (1, None), (3, None), (3, None), (1, True), (1, True)):
            x = torch.randn(m, k, generator=gen).to(DEVICE)
            b = torch.randn(p.out_features, generator=gen).to(DEVICE) if bias else None
            got = fused_linear(x, p, b)
            want = ref.apply(x, p, b)
            assert ((got - want).norm() / want.norm()) <= 1e-5
    # (fp32 x: no wgmma; each family's next M = 1 row: mxint8 takes the 8-bit family's mma)
    m1_strategy = {"mxfp4": "gemv", "mxint8": "mma"}.get(wname, "decode")
    for p, want in ((prepared, m1_strategy), (wide, m1_strategy)):
        m1 = [plan for key, plan in p.cache["triton_emulation"]["plans"].items() if key[0] == 1]
        assert m1 and all(plan.strategy == want for plan in m1)
        # a decode plan ran its later calls through the remembered launch
        assert all(plan.decode for plan in m1 if plan.strategy == "decode")


def test_gemv_takes_a_smaller_k_tile_where_k_needs_it() -> None:
    """A measured K tile of 256 on a layer with K = 128 or 192: the plan halves the tile (down
    to 64) instead of falling back to another kernel; K = 96 has no such tile: no plan."""
    from kernels.triton.linear_gemv import GemvConfig, gemv_plan

    for k, tile in ((128, 128), (192, 64), (96, None)):
        prepared = KERNEL.prepare(torch.randn(32, k).to(DEVICE),
                                  SchemeContract(weight=wkey("mxfp4"), activation=None))
        cached = prepared.cache["triton_emulation"]
        plan = gemv_plan(cached, cached["consts"], 32, k, 1, 1, False, False,
                         GemvConfig(block_n=16, block_k=256, split=4, warps=4, stages=3))
        assert (plan.cfg.block_k if plan is not None else None) == tile


# numpy (the interpreter) warns about the Inf arithmetic this test makes on purpose
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("split", (1, 3))
def test_gemv_at_every_code_scale_and_activation_range(split: int) -> None:
    """The M = 1 FMA kernel (linear_gemv.py): all 16 codes, scale bytes 0 / 1 / 127 / 128 /
    0xFF, activation blocks of very different magnitudes (2**-100, 2**60, zeros, bf16
    subnormals: the per-block pre-scale), then +-Inf and NaN activations."""
    from kernels.triton.linear_gemv import GemvConfig

    gen = torch.Generator().manual_seed(split)
    n, k = 40, 320
    w, prepared = every_code_fp4(n, k, gen)
    cfg = GemvConfig(block_n=16, block_k=64, split=split, warps=1, stages=1)
    x = torch.randn(1, k, generator=gen)
    x[0, 32:64] *= 2.0 ** -100
    x[0, 64:96] *= 2.0 ** 60
    x[0, 96:128] = 0.0
    x[0, 128:160] = torch.tensor(2.0 ** -130) * torch.arange(32)  # bf16 / fp32 subnormals
    for dtype in (torch.float32, torch.bfloat16):
        xd = x.to(dtype).to(DEVICE)
        out = fused_linear(xd, prepared, out_dtype=torch.float32, strategy="gemv", config=cfg)
        plan = next(iter(prepared.cache["triton_emulation"]["plans"].values()), None)
        assert plan is None or plan.strategy != "mma"  # forced plans are not cached
        want = reference_fp32(xd, w)
        assert torch.equal(out.isnan(), want.isnan()) and want.isnan()[0, 4]
        fin = want.isfinite()
        assert ((out[fin] - want[fin]).double().norm() / want[fin].double().norm()) <= 1e-5
    x[0, 200], x[0, 10] = float("inf"), float("-inf")
    x[0, 300] = float("nan")
    out = fused_linear(x.to(DEVICE), prepared, out_dtype=torch.float32, strategy="gemv",
                       config=cfg)
    want = reference_fp32(x.to(DEVICE), w)
    assert torch.equal(out.isnan(), want.isnan()) and torch.equal(out.isinf(), want.isinf())
    assert torch.equal(out[want.isinf()], want[want.isinf()])
