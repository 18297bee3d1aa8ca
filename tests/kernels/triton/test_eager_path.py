"""The eager fast path of a planned wgmma call (kernels/triton/eager_path.py), on the CPU with the
launches recorded (Gluon needs an sm_90 GPU; the bits of the path are test_linear_wgmma's GPU
test of the Bound launches, which repeats every input shape): a seen input shape launches the
plan's Bound with exactly the general path's arguments, and every case it must not serve goes
to the general path."""
from __future__ import annotations

import pytest
import torch

from kernels.base import load_kernel
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import launcher as launcher_mod
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton import mx_quant, qdq_plan, wgmma_gates
from kernels.triton.linear_emulation import fused_linear
from kernels.triton.wgmma_tiles import XDesc
from support.mx_weights import fp4_weight
from support.wgmma_launches import record_launches

KERNEL = load_kernel("triton-emulation")
PER_CALL = ("x_ptr", "out_ptr", "M", "stride_x", "stride_o")


def key(name: str, static: bool = True) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=static)


def general_calls(monkeypatch) -> list:
    """Count the general path's wgmma launches (run_wgmma: the eager path never calls it)."""
    calls: list = []
    real = lw.run_wgmma

    def counted(*a, **k):
        calls.append(a[1].shape)
        return real(*a, **k)

    monkeypatch.setattr(lw, "run_wgmma", counted)
    return calls


def test_a_seen_input_shape_launches_the_plans_bound_with_the_general_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3-D x (as a model passes it): after the first call, the same shape, dtype and device
    launch the Bound alone — x's rows as [M, K], the output allocated as [..., N] — with what
    the general path passes; a strided or misaligned x, another stream or a bias take the
    general path; rows past one M tile bind a Bound of their grid."""
    cfg = lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=4)
    general, bound = record_launches(monkeypatch, cfg)
    runs = general_calls(monkeypatch)
    streams = {"now": 5}
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: streams["now"])
    gen = torch.Generator().manual_seed(4)
    n, k = 200, 1024
    prepared = KERNEL.prepare(fp4_weight(n, k, gen), SchemeContract(weight=key("mxfp4"),
                                                                    activation=None))
    x = torch.randn(2, 5, k, generator=gen).to(torch.bfloat16)
    fused_linear(x, prepared)
    first = general[-1][3]
    assert len(runs) == 1 and len(general) == 1
    y = torch.randn(2, 5, k, generator=gen).to(torch.bfloat16)
    out = fused_linear(y, prepared)
    assert len(runs) == 1 and len(general) == 1, "the eager path"
    assert out.shape == (2, 5, n) and out.is_contiguous()
    got = bound[-1]
    assert (got["x_ptr"], got["out_ptr"], got["M"], got["stride_x"], got["stride_o"]) == \
        (y.data_ptr(), out.data_ptr(), 10, k, n)
    for name, value in first.items():
        if name not in PER_CALL:
            assert got[name] == (value.data_ptr() if isinstance(value, torch.Tensor) else value)
    strided = torch.randn(2, 5, 2 * k, generator=gen).to(torch.bfloat16)[..., ::2]
    misaligned = torch.randn(10 * k + 1, generator=gen).to(torch.bfloat16)[1:].view(2, 5, k)
    for other in (strided, misaligned):
        assert other.shape == x.shape
        fused_linear(other, prepared)
    streams["now"] = 6  # no Bound on this stream yet
    fused_linear(x, prepared)
    streams["now"] = 5
    fused_linear(x, prepared, torch.zeros(n))
    assert len(runs) == 5
    launches = len(bound)
    # past one M tile (prefill): with the gate off, the general path each call; with it on
    # (the default since 2026-12-05), a Bound of its own grid, and the eager path too
    monkeypatch.setattr(wgmma_gates, "TILES_BOUND_VERIFIED", False)
    fused_linear(torch.randn(17, k, generator=gen).to(torch.bfloat16), prepared)
    fused_linear(torch.randn(17, k, generator=gen).to(torch.bfloat16), prepared)
    assert len(runs) == 7 and len(bound) == launches, "gated: each call the general path"
    monkeypatch.setattr(wgmma_gates, "TILES_BOUND_VERIFIED", True)
    long = [torch.randn(17, k, generator=gen).to(torch.bfloat16) for _ in range(2)]
    fused_linear(long[0], prepared)
    assert len(runs) == 8 and general[-1][2][1] == 2, "the general path: 2 M tiles"
    out = fused_linear(long[1], prepared)
    assert len(runs) == 8 and bound[-1]["M"] == 17 and bound[-1]["x_ptr"] == long[1].data_ptr()
    assert bound[-1]["out_ptr"] == out.data_ptr() and out.shape == (17, n)
    plan = next(p for p in prepared.cache[le._CACHE_KEY]["plans"].values() if p.wgmma
                and (5, 2) in p.wgmma.fast)
    assert plan.wgmma.fast[(5, 2)]._grid == tuple(general[-1][2]), "the grid of 2 M tiles"


def test_a_plan_keeps_a_few_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Bound a (stream, M tiles): a server's many prefill lengths would keep adding them, so
    past FAST_BOUNDS a plan starts over (the next call of a dropped one takes the general path
    once and binds again)."""
    cfg = lw.WgmmaConfig(block_m=16, block_k=128, split=1, stages=4)
    general, bound = record_launches(monkeypatch, cfg)
    monkeypatch.setattr(lw, "FAST_BOUNDS", 2)
    monkeypatch.setattr(wgmma_gates, "TILES_BOUND_VERIFIED", True)
    gen = torch.Generator().manual_seed(6)
    k = 256
    prepared = KERNEL.prepare(fp4_weight(64, k, gen), SchemeContract(weight=key("mxfp4"),
                                                                    activation=None))
    for m in (600, 700, 800, 600):  # one plan (M > 512), 38 / 44 / 50 M tiles
        fused_linear(torch.randn(m, k, generator=gen).to(torch.bfloat16), prepared)
    plan = prepared.cache[le._CACHE_KEY]["plans"]
    fast = [p.wgmma.fast for p in plan.values() if p.wgmma]
    assert len(fast) == 1 and set(fast[0]) == {(5, 50), (5, 38)}
    assert len(general) == 4 and not bound, "each a first call of its (stream, M tiles)"


def test_w4a4_launches_its_qdq_into_the_scratch_then_the_gemm_on_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """W4A4 with the x tile by TMA: the QDQ's Bound (x -> the stream's scratch rows), then the
    GEMM's on those rows, passed as an [M, K] descriptor of the scratch; while a CUDA graph is
    captured the general path runs (the scratch is not the graph's)."""
    cfg = lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=4, tma_x=True)
    general, bound = record_launches(monkeypatch, cfg)
    runs = general_calls(monkeypatch)
    monkeypatch.setattr(mx_quant, "_INTERPRETED", False)  # the QDQ plan keeps its Bounds
    capturing = {"now": False}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    gen = torch.Generator().manual_seed(5)
    n, k = 72, 512
    prepared = KERNEL.prepare(fp4_weight(n, k, gen), SchemeContract(
        weight=key("mxfp4"), activation=key("mxfp4", static=False)))
    x = torch.randn(3, k, generator=gen).to(torch.bfloat16)
    fused_linear(x, prepared)
    launches = len(bound)
    out = fused_linear(x, prepared)
    assert len(runs) == 1 and len(bound) == launches + 2, "QDQ and GEMM, both Bounds"
    rows = qdq_plan.scratch(5, 3, k, torch.bfloat16, x.device)
    qdq_args, gemm = list(bound[-2].values()), bound[-1]
    assert qdq_args[:2] == [x.data_ptr(), rows.data_ptr()]
    desc = gemm["x_ptr"]
    assert isinstance(desc, XDesc) and desc.base is rows
    assert (desc.shape, desc.strides) == ([3, k], [k, 1])
    assert gemm["out_ptr"] == out.data_ptr() and gemm["M"] == 3 and out.shape == (3, n)
    capturing["now"] = True
    fused_linear(x, prepared)
    assert len(runs) == 2


def test_each_thread_has_its_own_scratch_rows_on_a_stream() -> None:
    """Two host threads on one stream interleave their launches (A's QDQ, B's QDQ, A's GEMM, B's
    GEMM): with one scratch a stream, A's GEMM would read B's rows (the H200's concurrency test
    caught it, 2026-12-03). Each thread's rows are its own and stay its own call after call."""
    import threading

    k = 256
    mine = qdq_plan.scratch(7, 4, k, torch.bfloat16, torch.device("cpu"))
    assert qdq_plan.scratch(7, 4, k, torch.bfloat16, torch.device("cpu")) is mine
    theirs: list = []
    t = threading.Thread(target=lambda: theirs.extend(
        qdq_plan.scratch(7, 4, k, torch.bfloat16, torch.device("cpu")) for _ in range(2)))
    t.start()
    t.join()
    assert theirs[0] is theirs[1]
    assert theirs[0].untyped_storage().data_ptr() != mine.untyped_storage().data_ptr()
