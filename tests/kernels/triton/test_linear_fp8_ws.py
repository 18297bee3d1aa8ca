"""The warp-specialized MXFP8 x MXFP8 kernel on fp8 tensor cores (kernels/triton/linear_fp8_ws.py).

On the CPU (CI): the K-major fp32 scales its TMA boxes read, the gate and the routing, and the
kernel compiled for sm_90a (its wgmmas are e4m3, every copy by TMA with the bytes each slot's
barrier expects, the register split, no spills). On an sm_90 GPU: the kernel against the
reference oracle and the Triton fp8 kernel, with M / N / K tails, bias, and NaN / Inf / zero /
subnormal blocks of both operands.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_dequantize
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import linear_fp8_mma as fm
from kernels.triton import linear_fp8_ws as fw
from support.sm90_compile import case_ids, compile_cases

KERNEL = load_kernel("triton-fp8-mma")
REFERENCE = load_kernel("reference-emulation")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
E4M3 = QuantKey.mx("mxfp8_e4m3", rounding="even", static=True)
E4M3_DYN = QuantKey.mx("mxfp8_e4m3", rounding="even", static=False)


def test_scales_are_decoded_and_laid_out_k_major_with_rows_padded_to_16_bytes() -> None:
    """fp32 2**(E - 127) (0xFF: NaN, 0: 2**-127, exact), [K / 32, rows padded to 4], zeros past."""
    s = torch.randint(0, 256, (37, 9), dtype=torch.uint8)
    s[0, 0], s[1, 1], s[2, 2] = 0, 255, 254
    t = fw.k_major_scales(s)
    assert t.shape == (9, 40) and t.dtype == torch.float32 and not t[:, 37:].any()
    want = torch.tensor([2.0 ** (int(e) - 127) if e != 255 else float("nan") for e in
                         s.t().reshape(-1)], dtype=torch.float64).reshape(9, 37)
    assert torch.equal(t[:, :37].double().isnan(), want.isnan())
    assert torch.equal(t[:, :37].double()[~want.isnan()], want[~want.isnan()])
    assert t[0, 0] == 2.0 ** -127 and t[2, 2] == 2.0 ** 127


def test_the_kernel_is_gated_and_says_why(monkeypatch) -> None:
    x = torch.zeros(4, 64)
    monkeypatch.setattr(fw, "VERIFIED", False)
    assert fm.ws_unavailable(x, "mxfp8_e4m3", "mxfp8_e4m3", torch.bfloat16) == \
        "the warp-specialized fp8 kernel: written, not yet verified on a GPU"


def test_where_it_is_open_it_takes_e4m3_bf16_on_sm90_only(monkeypatch) -> None:
    monkeypatch.setattr(fw, "VERIFIED", True)
    x = torch.zeros(4, 64)
    bf = torch.bfloat16
    assert fm.ws_unavailable(x, "mxfp8_e5m2", "mxfp8_e4m3", bf) == "e4m3 activations and " \
        "weights only"
    assert fm.ws_unavailable(x, "mxfp8_e4m3", "mxfp8_e4m3", torch.float32) == "bf16 output only"
    assert fm.ws_unavailable(x, "mxfp8_e4m3", "mxfp8_e4m3", bf) == "sm_90 only (fp8 wgmma, TMA)"


_COMPILE = """
import json, sys
from kernels.triton import linear_fp8_ws as f
from support.sm90_compile import ptx_facts
kern = f._fp8_ws_kernel
found = []
for c in json.loads(sys.stdin.read()):
    bn = c["BLOCK_N"]
    ptrs = {"a_desc": f"tensordesc<fp8e4nv[128, 32],{f.CODES.value!r}>",
            "sa_desc": f"tensordesc<fp32[4, 128],{f.SCALES.value!r}>",
            "b_desc": f"tensordesc<fp8e4nv[{bn}, 32],{f.CODES.value!r}>",
            "sb_desc": f"tensordesc<fp32[4, {bn}],{f.SCALES.value!r}>",
            "bias_ptr": "*fp32", "out_ptr": "*bf16"}
    sig = {n: "constexpr" if n in c else ptrs.get(n, "i32") for n in kern.arg_names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kern.arg_names)
             if n in ("bias_ptr", "out_ptr", "K", "stride_o")}
    found.append(ptx_facts(kern, sig, c, attrs, (
        r"wgmma\\.mma_async", r"wgmma\\.mma_async[^;]*\\.e4m3\\.e4m3",
        r"cp\\.async\\.bulk\\.tensor", r"ld\\.local", r"st\\.local")))
print(json.dumps(found))
"""

CASES = [dict(BLOCK_N=128, STAGES=4, HAS_BIAS=True), dict(BLOCK_N=64, STAGES=4, HAS_BIAS=False),
         dict(BLOCK_N=256, STAGES=3, HAS_BIAS=False)]


@pytest.fixture(scope="module")
def compiled() -> list:
    return compile_cases(_COMPILE, CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_the_kernel_compiles_for_sm90(index: int, compiled: list) -> None:
    """For sm_90a (no GPU needed): each consumer's four e4m3 wgmmas a K tile (one a 32-wide
    scale block, so 8 in the code); 10 TMA copies a tile (4 + 4 code boxes, 2 fp32 scale boxes) and
    the slot's barrier expecting exactly their bytes; setmaxnreg 40 / 232; no spills."""
    c, found = CASES[index], compiled[index]
    assert "error" not in found, found.get("error")
    assert found[r"wgmma\.mma_async"] == 8
    assert found[r"wgmma\.mma_async[^;]*\.e4m3\.e4m3"] == 8
    assert found[r"cp\.async\.bulk\.tensor"] == 10
    assert found["expect"] == [(128 + c["BLOCK_N"]) * 128 + 16 * (128 + c["BLOCK_N"])]
    assert {40, 232} <= set(found["setmaxnreg"])
    assert found[r"ld\.local"] == 0 and found[r"st\.local"] == 0


gpu = pytest.mark.skipif(not ON_SM90, reason="fp8 wgmma and TMA: sm_90 only; the CPU tests "
                         "above check the layout, the gate and the compiled kernel")


def oracle(x, prepared, bias):
    xq = REFERENCE.qdq_activation(x, prepared, backend="reference")
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq.float(), w, None if bias is None else bias.float())


def rel_err(got, want) -> float:
    ok = want.isfinite()
    return float((got[ok].double() - want[ok].double()).norm() / want[ok].double().norm())


@gpu
def test_matches_the_reference_and_the_triton_kernel(monkeypatch) -> None:
    """bf16 out; M / N / K tails (K = 2880: 22.5 tiles of 128), bias; activation rows with a
    zero, a subnormal, an Inf and a NaN block; a weight block scaled NaN (0xFF) and one at the
    smallest scale (byte 0): NaN where the reference has NaN, close elsewhere, and close to the
    Triton fp8 kernel (the same math: a wgmma a 32-wide slice, scaled and added in K order)."""
    gen = torch.Generator().manual_seed(11)
    for m, n, k in ((200, 200, 1024), (1000, 384, 2880), (17, 130, 256), (4096, 256, 512)):
        w = torch.randn(n, k, generator=gen).cuda()
        prepared = KERNEL.prepare(w, SchemeContract(weight=E4M3, activation=E4M3_DYN))
        weight = prepared.weight
        scales = weight.scales.clone()
        scales[3, 1] = 0xFF
        scales[5, 0] = 0
        prepared.weight = MXTensor(weight.data, scales, weight.fmt, weight.rounding,
                                   weight.shape, weight.layout)
        prepared.cache.clear()
        KERNEL.finish_prepare(prepared)
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        x[0, :32] = 0.0
        x[1, 32:64] = 2.0 ** -130
        x[2, 64] = float("inf")
        x[m - 1, k - 5] = float("nan")
        bias = torch.randn(n, generator=gen).cuda()
        for b in (None, bias):
            monkeypatch.setattr(fw, "VERIFIED", False)
            triton_out = fm.fp8_mma_linear(x, prepared, b, out_dtype=torch.bfloat16)
            monkeypatch.setattr(fw, "VERIFIED", True)
            got = fm.fp8_mma_linear(x, prepared, b, out_dtype=torch.bfloat16)
            again = fm.fp8_mma_linear(x, prepared, b, out_dtype=torch.bfloat16)
            want = oracle(x, prepared, b)
            case = (m, n, k, b is not None)
            assert torch.equal(got.view(torch.int16), again.view(torch.int16)), case
            assert torch.equal(got.isnan(), want.isnan()), case
            assert torch.equal(got.isinf(), want.isinf()), case
            assert rel_err(got.float(), want) <= 4e-3, case  # bf16 output
            assert rel_err(got.float(), triton_out.float()) <= 4e-3, case
            assert ("ws", fm.WS_CONFIG[0]) in prepared.cache[fm._CACHE_KEY], "ws path taken"
