"""The static per-tensor fp8 activation QDQ kernel the linear strategies launch before their GEMM
(kernels/triton/mx_tiles.fp8_static_qdq_kernel through qdq_plan.Fp8StaticQdq): bit for bit the
dispatcher's torch cast (kernels/reference/fp8_tensor.fp8_tensor_qdq) on fresh random rows with
NaN / Inf / zero / subnormal / past-448 values, every input dtype, a few rows (the small-rows
tile) and many, K tails; run on the GPU when there is one, else in Triton's interpreter."""
from __future__ import annotations

import pytest
import torch

from kernels.reference.fp8_tensor import fp8_tensor_qdq
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import qdq_plan
from kernels.triton.linear_emulation import fused_linear
from kernels.triton.linear_tiles import prepare_tensors
from support.device import DEVICE
from support.emulation_cases import KERNEL
from support.mx_weights import fp4_weight


def rows(r: int, k: int, dtype: torch.dtype, scale: float, seed: int) -> torch.Tensor:
    """Random rows around the scale's range (some past 448 * scale), then special values."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(r, k, generator=gen) * (scale * 2.0 ** torch.randint(-12, 10, (r, k),
                                                                        generator=gen))
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
                             scale * 449.0, -scale * 1e6, 1e-40, -3e-39, scale * 2 ** -9,
                             scale * 2 ** -10, scale * 464.0, scale * 479.9])
    places = torch.randperm(r * k, generator=gen)[: specials.numel()]
    x.view(-1)[places] = specials
    return x.to(dtype)


def same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bits, NaN where the reference has NaN (a NaN's payload is not part of the QDQ)."""
    bits = torch.int32 if got.dtype == torch.float32 else torch.int16
    nan = want.isnan()
    return bool(torch.equal(got.isnan(), nan) and
                torch.equal(got.view(bits)[~nan], want.view(bits)[~nan]))


def plan_for(scale: float, dtype: torch.dtype, k: int) -> qdq_plan.Fp8StaticQdq:
    consts = prepare_tensors(prepare_fp8_layer(scale, 256))["consts"]  # (its A_* facts)
    s = torch.tensor([scale], dtype=torch.float32, device=DEVICE)
    return qdq_plan.Fp8StaticQdq(s, consts, dtype, k)


def prepare_fp8_layer(scale: float, k: int, n: int = 16):
    """A W4A8 (static fp8 activation) layer [n, k] on DEVICE."""
    w = fp4_weight(n, k, torch.Generator().manual_seed(n + k)).to(DEVICE)
    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=FP8_STATIC_TENSOR_KEY)
    return KERNEL.prepare(w, contract, act_scale=scale)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("r,k", [(1, 256), (3, 96), (64, 300), (65, 512)])
def test_bits_are_the_dispatchers(dtype: torch.dtype, r: int, k: int) -> None:
    for i, scale in enumerate((0.0173, 1.0, 2.0 ** -20, 3.0e4)):
        x = rows(r, k, dtype, scale, seed=r * 1000 + k + i)
        got = plan_for(scale, dtype, k)(x.to(DEVICE)).cpu()
        want = fp8_tensor_qdq(x, torch.tensor(scale))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert same_bits(got, want), (dtype, r, k, scale)


def test_a_few_rows_take_the_small_rows_tile_where_it_is_on(monkeypatch) -> None:
    """The tile a call launches: one row a program up to SMALL_ROWS rows (gate on)."""
    seen = []
    real = qdq_plan.launcher.launch
    monkeypatch.setattr(qdq_plan.launcher, "launch",
                        lambda fn, key, grid, args, **kw: (seen.append(grid),
                                                           real(fn, key, grid, args, **kw))[1])
    monkeypatch.setattr(qdq_plan, "SMALL_ROWS_VERIFIED", True)
    monkeypatch.setattr(qdq_plan, "SMALL_ROWS_WIDE_VERIFIED", False)  # (its own test's)
    plan = plan_for(0.5, torch.bfloat16, 512)
    for r in (1, qdq_plan.SMALL_ROWS, qdq_plan.SMALL_ROWS + 1):
        plan(rows(r, 512, torch.bfloat16, 0.5, r).to(DEVICE))
    assert seen[0] == (1, 2) and seen[1] == (qdq_plan.SMALL_ROWS, 2)
    assert seen[2] == (-(-(qdq_plan.SMALL_ROWS + 1) // plan.tile["BLOCK_R"]),
                       -(-512 // plan.tile["BLOCK_K"]))


def test_a_kept_plan_launches_later_calls_with_the_first_calls_arguments(monkeypatch) -> None:
    """keep_launches (a layer's, FP8_STATIC_BOUND_VERIFIED): a call with rows and row stride
    seen before on the stream goes through a `launcher.Bound` passing what the general path
    passes (the scale a fixed pointer), this call's x and out in place of the first's; the
    launch key names the scale by its alignment, so two layers' plans share one
    specialization. Launches recorded, not made."""
    from kernels.triton import mx_quant
    from support.wgmma_launches import recorded_launches

    general, bound = recorded_launches(monkeypatch, {"now": 2})
    monkeypatch.setattr(mx_quant, "_INTERPRETED", False)
    consts = prepare_tensors(prepare_fp8_layer(0.5, 256))["consts"]
    scale = torch.tensor([0.5])
    plan = qdq_plan.Fp8StaticQdq(scale, consts, torch.bfloat16, 256, keep_launches=True)
    plan(torch.zeros(5, 256, dtype=torch.bfloat16))
    fn, key, first = general[-1]
    names = fn.arg_names
    assert fn is qdq_plan.mx_tiles.fp8_static_qdq_kernel and len(first) == len(names)
    assert dict(zip(names, first))["s_ptr"] is scale
    x = torch.ones(5, 256, dtype=torch.bfloat16)
    out = plan(x)
    assert len(general) == 1
    assert bound[-1] == (x.data_ptr(), out.data_ptr(), 5, 256, 256, 256, scale.data_ptr()) + \
        tuple(first[7:])
    other = qdq_plan.Fp8StaticQdq(torch.tensor([2.0]), consts, torch.bfloat16, 256)
    assert other.fast is None  # not kept
    other(torch.zeros(5, 256, dtype=torch.bfloat16))
    assert general[-1][1] == key  # another layer's scale: the same specialization


def test_a_layer_reads_its_scale_on_the_device_once(monkeypatch) -> None:
    """The linear path's QDQ is planned once a dtype, with the scale already on the weight's
    device (no host copy a call: a CUDA graph captures it), and gives the dispatcher's bits."""
    prepared = prepare_fp8_layer(0.03, 256)
    x = rows(5, 256, torch.bfloat16, 0.03, 11).to(DEVICE)
    fused_linear(x, prepared, strategy="dequant-gemm" if DEVICE == "cuda" else "mma")
    cached = prepared.cache["triton_emulation"]
    plan = cached["fp8_qdq"][torch.bfloat16]
    assert plan.scale is cached["act_scale"] and plan.scale.device.type == x.device.type
    want = fp8_tensor_qdq(x.cpu(), prepared.act_scale)
    assert same_bits(plan(x).cpu(), want)
