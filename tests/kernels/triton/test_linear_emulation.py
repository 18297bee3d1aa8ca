"""`triton-emulation` (kernels.triton.linear_emulation) against the reference-emulation oracle.

Runs in Triton's CPU interpreter when there is no GPU (tests/conftest.py), so shapes stay small.
What is checked, and how tight:
- the in-kernel activation QDQ equals the dispatcher's, bit for bit: with an identity weight
  every output is one exact product (x_q * 1) plus exact zeros, so out == QDQ(x) exactly;
- the in-kernel weight dequant equals mx_dequantize, bit for bit: identity activations;
- every contract of the declaration (weight key x activation key, all roundings) against the
  reference with ||out - ref|| / ||ref|| <= 1e-5 on the fp32 accumulator (see ACC_BOUND in
  tests/support/emulation_cases.py);
- apply()'s output is that accumulator rounded once to x's dtype; NaN / Inf blocks; errors.
Each strategy (decode, tiled, mma, gemv, dequant-gemm) forced, and the table's choice of one:
test_emulation_strategies.py.
"""
from __future__ import annotations

import random

import pytest
import torch

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
from support.device import DEVICE
from support.emulation_cases import (ACC_BOUND, KERNEL, REFERENCE, key_id, prepare,
                                     reference_fp32, rel_err, seed_of)

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DECL = KERNELS_BY_NAME["triton-emulation"]
# Every (weight key, activation key) the declaration accepts: the contract test's cases.
CONTRACTS = sorted({(w, a) for fam in DECL.accepts for w in fam.weights for a in fam.activations},
                   key=lambda c: (str(c[0]), str(c[1])))
ACT_KEYS = sorted(DISPATCH_KEYS, key=str) + [None]
SHAPES = (((1,), 16, 64), ((3,), 48, 128), ((17,), 48, 64), ((17,), 16, 128),
          ((2, 3), 48, 64), ((1, 2), 16, 128), ((5, 4), 16, 64))


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
