"""The Gluon wgmma strategy of `triton-emulation` (kernels/triton/linear_wgmma.py) on mxfp4
weights, on an sm_90 GPU: the kernel itself against reference-emulation (every code and scale
byte, NaN / Inf / zero / subnormal activations, N tails, split-K, bias, W4A4, K past whole
tiles), deterministic, replayed in a CUDA graph, its later calls (plan's Bound, eager path)
bit for bit the general path's, and the calls it refuses. Skipped elsewhere: the CPU tests
check its layout and decoder (test_wgmma_layout.py), its host path and launches
(test_wgmma_launches.py) and its compilation (test_wgmma_compile.py); other weight formats and
the gated parts: test_wgmma_formats.py.
"""
from __future__ import annotations

import pytest
import torch

from kernels.spec.contract import SchemeContract
from kernels.triton import launcher as launcher_mod
from kernels.triton import linear_configs
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton import wgmma_gates
from kernels.triton.linear_emulation import fused_linear
from support.linear_checks import close, reference_bf16
from support.mx_weights import e4m3_weight as fp8_weight, fp4_weight, fp6_weight
from support.wgmma_cases import KERNEL, gpu, key, same_values, tile_for


@gpu
@pytest.mark.parametrize("m", (1, 3, 16, 17, 40, 64, 100, 128))
@pytest.mark.parametrize("split", (1, 2, 4))
def test_kernel_matches_the_reference(m: int, split: int) -> None:
    gen = torch.Generator().manual_seed(m * 10 + split)
    n, k = 200, 1024  # N not a multiple of the 64-row tile
    w = fp4_weight(n, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=None))
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    x[0, :32] = 0.0  # a zero block, a subnormal block; in another row a NaN and an inf
    x[0, 32:64] = 2.0 ** -130
    if m > 1:
        x[-1, 64] = float("nan")
        x[1, 100] = float("inf")
    bias = torch.randn(n, generator=gen).cuda()
    cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=256 if m <= 32 else 128, split=split,
                         stages=2 + split % 3)
    for b in (None, bias):
        out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
        assert out.dtype == torch.bfloat16 and close(out, reference_bf16(x, prepared, b))
        again = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
        assert torch.equal(again.view(torch.int16), out.view(torch.int16))  # deterministic
    _, lock = __import__("kernels.triton.linear_mma", fromlist=["workspace"]).workspace(
        1, x.device)
    assert int(lock.abs().sum()) == 0  # split-K counters back at zero


@gpu
@pytest.mark.parametrize("block_m,split", [(16, 2), (64, 2), (64, 1), (128, 2)])
def test_many_ctas_an_sm_sum_right_every_time(block_m: int, split: int) -> None:
    """Thousands of K tiles over 2+ CTAs an SM: with one wgmma left in flight across the K
    loop's back edge, ptxas reused its A registers and sums went wrong at random (H200, block_m
    64 / 128, 2026-12-01); every call must match the reference and the others bit for bit."""
    gen = torch.Generator().manual_seed(block_m + split)
    n, k = 8192, 4096
    w = fp4_weight(n, k, gen, specials=False).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=None))
    x = torch.randn(block_m, k, generator=gen).to(torch.bfloat16).cuda()
    cfg = lw.WgmmaConfig(block_m=block_m, block_k=128, split=split, stages=3)
    outs = [fused_linear(x, prepared, strategy="wgmma", config=cfg) for _ in range(4)]
    assert close(outs[0], reference_bf16(x, prepared))
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs)


@gpu
@pytest.mark.parametrize("m", (1, 16, 32, 64, 128))
def test_the_table_runs_w4a16_and_w4a4_through_wgmma(m: int) -> None:
    gen = torch.Generator().manual_seed(m)
    n, k = 256, 2048
    w = (torch.randn(n, k, generator=gen) * 0.05).cuda()
    x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    for akey in (None, key("mxfp4", static=False)):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=akey))
        out = fused_linear(x, prepared)
        plan = next(iter(prepared.cache[le._CACHE_KEY]["plans"].values()))
        assert plan.strategy == "wgmma" and (plan.qdq is None) == (akey is None)
        assert close(out, reference_bf16(x, prepared))


def small_layer(seed: int):
    """(generator, a prepared 128 x 512 mxfp4 layer) on the GPU."""
    gen = torch.Generator().manual_seed(seed)
    w = fp4_weight(128, 512, gen, specials=False).to("cuda")
    return gen, KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=None))


@gpu
def test_wgmma_replays_in_a_cuda_graph() -> None:
    gen, prepared = small_layer(5)
    x = torch.randn(1, 512, generator=gen).to(torch.bfloat16).cuda()
    eager = fused_linear(x, prepared)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused_linear(x, prepared)
    x.copy_(torch.randn(1, 512, generator=gen).to(torch.bfloat16))
    graph.replay()
    assert torch.equal(captured, fused_linear(x, prepared))
    assert not torch.equal(captured, eager)


@gpu
@pytest.mark.parametrize("kept", (False, True))
@pytest.mark.parametrize("m", (1, 40, 300))
def test_a_static_fp8_activation_layer_replays_in_a_cuda_graph(m: int, kept: bool,
                                                               monkeypatch) -> None:
    """W4A8 with a static per-tensor fp8 scale (the *_a_fp8 schemes): its QDQ reads the scale
    on the device (qdq_plan.Fp8StaticQdq), so a CUDA graph captures the layer (it failed on a
    host copy of the scale, H200 2026-12-05); the replay and later calls (kept: through the
    QDQ's Bound, the stream's scratch rows and the eager path, 2-D and 3-D x, on the default and
    a side stream) give the first call's bits and the reference's values, on whichever rows the
    table gives each M (the eager path wherever a wgmma plan ran). (This test is what switched it on,
    `qdq_plan.FP8_STATIC_BOUND_VERIFIED`.)"""
    from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
    from kernels.triton import qdq_plan

    monkeypatch.setattr(qdq_plan, "FP8_STATIC_BOUND_VERIFIED", kept)
    gen = torch.Generator().manual_seed(40 + m)
    w = fp4_weight(256, 1024, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"),
                                                activation=FP8_STATIC_TENSOR_KEY), act_scale=0.02)
    x = (torch.randn(m, 1024, generator=gen) * 3).to(torch.bfloat16).cuda()
    x[0, :4] = torch.tensor([float("nan"), float("inf"), 1e4, 0.0])
    eager = fused_linear(x, prepared)
    assert close(eager, reference_bf16(x, prepared))
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side, side):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            again = [fused_linear(x, prepared) for _ in range(3)]
            again.append(fused_linear(x.view(1, m, 1024), prepared).view(m, -1))
        stream.synchronize()
        assert all(same_values(a, eager) for a in again)
    cached = prepared.cache[le._CACHE_KEY]
    qdq = cached["fp8_qdq"][torch.bfloat16]
    assert bool(qdq.fast) == kept  # (kept: a Bound a (stream, rows, row stride))
    wgmma = {plan.wgmma is not None for plan in cached["plans"].values()}
    assert len(wgmma) == 1  # one M bucket, one plan kind
    assert bool(cached.get("hot")) == wgmma.pop()  # the eager path: wgmma plans only
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused_linear(x, prepared)
    graph.replay()
    assert same_values(captured, eager)


@gpu
def test_w4a4_layers_share_the_streams_qdq_scratch() -> None:
    """W4A4 on wgmma QDQs x into the stream's scratch rows (qdq_plan.scratch: one allocation
    less a call): two layers called in turn on one stream give, each call, the bits of their
    own first call and the reference's values; a CUDA graph captured of the first (its QDQ in
    the graph's pool) replays them after the other layer has used the scratch."""
    from kernels.triton import qdq_plan

    gen = torch.Generator().manual_seed(12)
    akey = key("mxfp4", static=False)
    layers = [KERNEL.prepare(fp4_weight(200, 1024, gen).to("cuda"),
                             SchemeContract(weight=key("mxfp4"), activation=akey))
              for _ in range(2)]
    xs = [torch.randn(9, 1024, generator=gen).to(torch.bfloat16).cuda() for _ in range(2)]
    first = [fused_linear(x, p) for x, p in zip(xs, layers)]
    for x, p, want in zip(xs, layers, first):
        assert close(want, reference_bf16(x, p))
    for _ in range(3):
        for x, p, want in zip(xs, layers, first):
            assert same_values(fused_linear(x, p), want)
    stream = launcher_mod.current_stream(torch.cuda.current_device())
    held = qdq_plan._SCRATCH.held[(xs[0].device, stream)]
    assert (9, 1024, torch.bfloat16) in held[1], "the QDQ'd rows were the stream's scratch"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fused_linear(xs[0], layers[0])
    fused_linear(xs[1], layers[1])
    graph.replay()
    assert same_values(captured, first[0])


@gpu
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"])
def test_bound_launches_give_the_general_paths_bits(fmt: str, monkeypatch) -> None:
    """Calls after a plan's first go through its `launcher.Bound` (pointers as ints, per
    stream), and a seen input shape through the eager path (eager_path: the Bound alone, 2-D
    and 3-D x): bit for bit what the general path (a forced config: a fresh plan each call)
    gives, for the table's rows at every M bucket (several M tiles a Bound past 128), W*A16
    and W*A*, on the default and a side stream. (Run with Bounds past one M tile switched on:
    this test is what switches them on, `TILES_BOUND_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "TILES_BOUND_VERIFIED", True)
    gen = torch.Generator().manual_seed(len(fmt) + 1)
    n, k = 200, 1024
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
    side = torch.cuda.Stream()
    for akey in (None, key(fmt, static=False)):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=akey))
        for m in (1, 1, 9, 16, 30, 64, 33, 100, 128, 128, 200, 300, 600, 600):  # (past 128:
            # the wide rows, 1-3 M tiles a Bound)
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            for stream in (torch.cuda.current_stream(), side):
                stream.wait_stream(torch.cuda.current_stream())  # x is ready
                with torch.cuda.stream(stream):
                    out = fused_linear(x, prepared)
                    out3 = fused_linear(x.view(1, m, k), prepared)  # (a model's 3-D x)
                    plan = table_plan(prepared, m)
                    if plan.wgmma is None:  # (mxfp8 at M = 128 on N < 8192: dequant-gemm)
                        continue
                    want = fused_linear(x, prepared, strategy="wgmma", config=plan.config)
                stream.synchronize()
                assert same_values(out, want), (fmt, akey, m)
                assert same_values(out3.view(m, -1), want), (fmt, akey, m)
                assert close(out, reference_bf16(x, prepared)), (fmt, akey, m)
            assert plan.wgmma is None or len(plan.wgmma.fast) == 2, "a Bound per stream"


def table_plan(prepared, m: int):
    """The cached table plan of a prepared weight for M rows (bf16 in and out, no bias)."""
    plans = prepared.cache[le._CACHE_KEY]["plans"]
    return next(p for (bucket, *_), p in plans.items() if bucket == linear_configs.m_bucket(m))


@gpu
def test_unaligned_activation_views_are_copied_not_misread() -> None:
    gen, prepared = small_layer(9)
    wide = torch.randn(3, 515, generator=gen).to(torch.bfloat16).cuda()
    rows8 = torch.randn(3, 520, generator=gen).to(torch.bfloat16).cuda()
    # 2-byte offsets, a row stride of 515, and one of 520 (8 mod 16: did not compile)
    for x in (wide[:, 1:513], wide[:, 3:515], rows8[:, :512]):
        assert close(fused_linear(x, prepared), reference_bf16(x, prepared))


@gpu
def test_forced_wgmma_refuses_what_it_cannot_run() -> None:
    gen, prepared = small_layer(2)
    x = torch.randn(1, 512, generator=gen).cuda()  # fp32 x
    with pytest.raises(ValueError, match="'wgmma' cannot run this call: bf16 x and output only"):
        fused_linear(x, prepared, strategy="wgmma")
    # the table moves on (another strategy runs it)
    assert close(fused_linear(x, prepared).float(), reference_bf16(x, prepared))


@gpu
@pytest.mark.parametrize("k", (2880, 160, 416))
def test_k_past_whole_tiles_runs_on_wgmma(k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt-oss's K = 2880 (11.25 tiles of 256): the layout pads K with zeros and the kernel
    zero-fills x past K; NaN / Inf in the last real block still reach the output. (Run with K
    tails switched on: this test is what switches them on, `K_TAIL_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_gates, "K_TAIL_VERIFIED", True)
    gen = torch.Generator().manual_seed(k)
    w = fp4_weight(136, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=None))
    for m in (1, 5, 16, 40):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        if m > 1:
            x[-1, k - 1] = float("inf")
        out = fused_linear(x, prepared)
        plan = next(p for key_, p in prepared.cache[le._CACHE_KEY]["plans"].items()
                    if key_[0] == lc_bucket(m))
        assert plan.strategy == "wgmma" and close(out, reference_bf16(x, prepared))


def lc_bucket(m: int) -> int:
    from kernels.triton.linear_configs import m_bucket
    return m_bucket(m)
