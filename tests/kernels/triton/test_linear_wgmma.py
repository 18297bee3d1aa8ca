"""The Gluon wgmma strategy of `triton-emulation` (kernels/triton/linear_wgmma.py).

On the CPU (CI): the weight layout it reads and its decoder's bit operations, through their
torch twin (fp4_words.wgmma_decode: the PTX's instructions step for step), against the
reference dequantization at every code and scale byte; which calls it takes and the refusals.
On an sm_90 GPU: the kernel itself against reference-emulation (every code and scale byte, NaN /
Inf / zero / subnormal activations, N tails, split-K, bias, W4A4), deterministic and replayed
in a CUDA graph.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_dequantize
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import fp4_words as fw
from kernels.triton import linear_configs
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton.linear_emulation import fused_linear
from kernels.triton import launcher as launcher_mod
from kernels.triton import wgmma_tiles
from kernels.triton.wgmma_tiles import act_facts
from support.linear_checks import close, reference_bf16, special_rows
from support.wgmma_launches import record_launches, two_experts
from support.mx_weights import e4m3_weight as fp8_weight, fp4_weight, fp6_weight

KERNEL = load_kernel("triton-emulation")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
FP4 = {"W_PACK": 1, "W_BITS": 4, "W_SAT": False}


def key(name: str, static: bool = True) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=static)


def same_values(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bit for bit as values: NaN where NaN, signed zeros kept."""
    nan = want.isnan()
    return (torch.equal(got.isnan(), nan) and torch.equal(got[~nan], want[~nan])
            and torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan])))


# ------------------------------------------------------------------------ CPU: layout + decoder
def test_word_bits_place_every_code_bit_once() -> None:
    positions = [p for bits in fw.WGMMA_BITS for p in bits]
    assert sorted(positions) == list(range(32))


@pytest.mark.parametrize("n,k,block_k,warps", [
    (64, 256, 256, 4), (200, 512, 128, 4), (70, 1024, 256, 4), (16, 384, 128, 4),
    (64, 2880, 256, 4), (40, 160, 128, 4), (200, 512, 128, 8), (136, 2880, 128, 8)])
def test_layout_decodes_to_the_reference_at_every_code_and_scale(n: int, k: int, block_k: int,
                                                                  warps: int) -> None:
    """K past whole tiles (gpt-oss's 2880 = 11.25 tiles of 256) is padded with +0 values;
    warps = 8 is the two-warpgroup layout ([128, block_k] tiles)."""
    gen = torch.Generator().manual_seed(n * 7 + k + block_k + warps)
    w = fp4_weight(n, k, gen)
    words, sbytes = fw.wgmma_layout(w.data, w.scales, block_k, warps)
    rows = -(-n // (16 * warps)) * 16 * warps
    k_pad = -(-k // block_k) * block_k
    assert words.dtype == torch.int32 and words.numel() == rows * k_pad // 8
    assert sbytes.dtype == torch.uint8 and sbytes.numel() == rows * k_pad // 32
    got = fw.wgmma_decode(words, sbytes, n, k, block_k, warps)
    assert same_values(got[:, :k], mx_dequantize(w, torch.float32, backend="reference"))
    assert torch.equal(got[:, k:], torch.zeros(n, k_pad - k)) and not got[:, k:].signbit().any()


def test_layout_refuses_partial_blocks_and_odd_tiles() -> None:
    w = fp4_weight(64, 320, torch.Generator().manual_seed(1), specials=False)
    with pytest.raises(ValueError, match=r"K tile 96 be a multiple of 128"):
        fw.wgmma_layout(w.data, w.scales, 96)
    with pytest.raises(ValueError, match=r"K=304 must hold whole 32-element blocks"):
        fw.wgmma_layout(w.data[:, :152], w.scales[:, :9], 128)


def gathered(one: torch.Tensor, per_chunk: int, inner: tuple, pid_n: int, t: int, groups: int,
             nbh: int, chunks: int) -> torch.Tensor:
    """The kernel's read of K tile t of program pid_n from the one layout (its offsets, in
    torch): blocks of `chunks` chunks, a chunk `per_chunk` elements [4 groups of 16 rows][inner]
    -> [groups, nbh, *inner] (group, chunk of the tile, the chunk's own order)."""
    g = torch.arange(groups)[:, None, None]
    bh = torch.arange(nbh)[None, :, None]
    e = torch.arange(per_chunk // 4)[None, None, :]
    first = pid_n * (groups // 4) * chunks + t * nbh
    off = (first + (g // 4) * chunks + bh) * per_chunk + (g % 4) * (per_chunk // 4) + e
    return one[off].reshape(groups, nbh, *inner)


@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"))
def test_every_config_reads_its_tiles_from_the_one_layout(fmt: str) -> None:
    """One copy of a weight serves every (K tile, row groups) of the table: the words, B words
    and scale bytes a program of any config reads from the one layout (the kernels' offsets:
    block w // 4 of the program, chunk t * NBH + b_hi of the block) are exactly the tile of
    that config's own layout (the per-config layouts of before); K padded to whole 512 and N
    to whole 128 rows, so no tile runs past its block or the buffer."""
    from kernels.triton.fp6_words import wgmma_layout_fp6
    from kernels.triton.fp8_words import wgmma_layout_fp8

    gen = torch.Generator().manual_seed(len(fmt))
    n, k = 200, 1440  # N: 3.1 blocks of 64, K: 2.8 of 512
    if fmt == "mxfp4":
        w = fp4_weight(n, k, gen)
        build = lambda bk, warps, align=(1, 1): (
            *fw.wgmma_layout(w.data, w.scales, bk, warps, align), None)[:3]
    elif fmt == "mxfp8_e4m3":
        w = fp8_weight(n, k, gen)
        build = lambda bk, warps, align=(1, 1): \
            wgmma_layout_fp8(w.data, w.scales, bk, warps, align)[::2] + \
            (wgmma_layout_fp8(w.data, w.scales, bk, warps, align)[1],)
    else:
        w = fp6_weight(fmt, n, k, "unpacked", gen)
        build = lambda bk, warps, align=(1, 1): \
            wgmma_layout_fp6(w.data, w.scales, fmt, bk, warps, align)[::2] + \
            (wgmma_layout_fp6(w.data, w.scales, fmt, bk, warps, align)[1],)
    one_w, one_s, one_b = build(128, 4, fw.ALIGN)  # (words, scale bytes, B words or None)
    chunks = -(-k // 512) * 4
    assert one_w.numel() == 4 * chunks * 1024 and one_s.numel() == 4 * chunks * 256  # 4 blocks
    b_inner = (2, 8, 4, 4) if fmt == "mxfp8_e4m3" else (2, 8, 4, 2)  # [h][g][t][b_lo | y]
    for block_k in (128, 256, 512):
        nbh = block_k // 128
        for groups in (4, 8):
            old_w, old_s, old_b = build(block_k, groups)
            rows = 16 * groups
            tw, ts = rows * block_k // 8, rows * block_k // 32
            for pid_n in range(-(-n // rows)):
                for t in range(-(-k // block_k)):
                    tile = pid_n * -(-k // block_k) + t
                    # words: old tile [w][h][b_hi][g][t][b_lo] == gathered [w][b_hi][h][g][t][b_lo]
                    want = old_w[tile * tw:(tile + 1) * tw].reshape(groups, 2, nbh, 8, 4, 4)
                    got = gathered(one_w, 1024, (2, 8, 4, 4), pid_n, t, groups, nbh, chunks)
                    assert torch.equal(got, want.permute(0, 2, 1, 3, 4, 5)), (block_k, groups)
                    # scale bytes: old [w][g][h][b_hi][b_lo] == gathered [w][b_hi][g][h][b_lo]
                    want = old_s[tile * ts:(tile + 1) * ts].reshape(groups, 8, 2, nbh, 4)
                    got = gathered(one_s, 256, (8, 2, 4), pid_n, t, groups, nbh, chunks)
                    assert torch.equal(got, want.permute(0, 3, 1, 2, 4)), (block_k, groups)
                    if one_b is not None:  # mxfp6 half as many B words, mxfp8 as many
                        tb = tw * b_inner[-1] // 4
                        want = old_b[tile * tb:(tile + 1) * tb].reshape(groups, 2, nbh, 8, 4,
                                                                       b_inner[-1])
                        got = gathered(one_b, 256 * b_inner[-1], b_inner, pid_n, t, groups,
                                       nbh, chunks)
                        assert torch.equal(got, want.permute(0, 2, 1, 3, 4, 5)), block_k


def test_the_ring_slot_reads_a_tile_run_in_the_layout_s_order() -> None:
    """The ws kernel copies a 64-row tile's run of the one layout into a ring slot as it lies
    (one TMA box); the slot's shared layout (wgmma_tiles.weight_ring) must read it back in the
    consumers' logical order [w, g, t, h, b_hi, b_lo] (scale bytes [w, g, h, b_hi, b_lo]):
    its order lists the dims fastest first, so memory holds b_hi, w, h, g, t, b_lo."""
    import ast
    import inspect

    src = inspect.getsource(wgmma_tiles.weight_ring.fn)
    orders = [ast.literal_eval(o) for o in
              __import__("re").findall(r"SwizzledSharedLayout\(1, 1, 1, (\[[^]]*\])\)", src)]
    words_order, scale_order = orders
    run = torch.arange(4 * 2 * 2 * 8 * 4 * 4)  # a 64-row tile of 2 chunks, flat
    logical = run.reshape(2, 4, 2, 8, 4, 4).permute(1, 3, 4, 2, 0, 5)  # -> [w, g, t, h, bh, bl]
    # memory order (slowest first) of the logical dims, read off the shared layout's order
    slowest_first = list(reversed(words_order))
    assert torch.equal(logical.permute(*slowest_first).reshape(-1), run)
    run = torch.arange(4 * 8 * 2 * 2 * 4)
    logical = run.reshape(2, 4, 8, 2, 4).permute(1, 2, 3, 0, 4)  # -> [w, g, h, bh, bl]
    assert torch.equal(logical.permute(*reversed(scale_order)).reshape(-1), run)


def test_unavailable_says_why() -> None:
    cfg = lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4)
    bf = torch.bfloat16
    cpu = torch.device("cpu")
    assert lw.unavailable(cpu, dict(FP4, W_BITS=8, W_PACK=0, W_IS_INT=True), 512, bf, bf,
                          cfg) == "packed mxfp4, mxfp6 or mxfp8 e4m3 weights only"
    e4m3 = dict(W_BITS=8, W_PACK=0, W_MBITS=3, W_IS_INT=False, W_SAT=False)
    assert lw.weight_format(e4m3) == "mxfp8_e4m3"
    assert lw.weight_format(dict(e4m3, W_MBITS=2)) is None  # e5m2: not laid out for wgmma
    assert lw.unavailable(cpu, e4m3, 512, bf, bf, cfg) == (
        "needs an NVIDIA GPU" if lw.FP8_VERIFIED else
        "mxfp8_e4m3 weights: written, not yet verified on a GPU")
    e3m2 = dict(W_BITS=6, W_PACK=2, W_MBITS=2, W_IS_INT=False, W_SAT=False)
    assert lw.weight_format(e3m2) == "mxfp6_e3m2"
    assert lw.weight_format(dict(e3m2, W_PACK=0, W_MBITS=3)) == "mxfp6_e2m3"
    assert lw.unavailable(cpu, e3m2, 512, bf, bf, cfg) == (
        "needs an NVIDIA GPU" if lw.FP6_VERIFIED else
        "mxfp6_e3m2 weights: written, not yet verified on a GPU")
    assert lw.unavailable(cpu, FP4, 512, torch.float16, bf, cfg) == "bf16 x and output only"
    assert lw.unavailable(cpu, FP4, 400, bf, bf, cfg) == "K=400 is not whole 32-element blocks"
    assert lw.unavailable(cpu, FP4, 2880, bf, bf, cfg) == (
        "K=2880 is not a multiple of the K tile 256 (K tails: written, not yet verified on a GPU)"
        if not lw.K_TAIL_VERIFIED else "needs an NVIDIA GPU")
    assert lw.unavailable(cpu, FP4, 512, bf, bf, cfg) == "needs an NVIDIA GPU"
    halves = lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4, sub_k=2, maxnreg=128)
    assert lw.unavailable(cpu, FP4, 512, bf, bf, halves) == (
        "needs an NVIDIA GPU" if lw.SUB_K_VERIFIED else
        "sub_k=2 (K tiles in halves): written, not yet verified on a GPU")
    assert lw.unavailable(cpu, FP4, 512, bf, bf, dataclasses.replace(cfg, rep=2)) == (
        "needs an NVIDIA GPU" if lw.REP_VERIFIED else
        "rep=2 (128 rows a warpgroup): written, not yet verified on a GPU")
    for bad in (dict(sub_k=3), dict(maxnreg=32), dict(maxnreg=256), dict(rep=4)):
        with pytest.raises(ValueError, match="sub_k=.* rep=.* maxnreg="):
            lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4, **bad)


def test_act_facts_are_the_qdq_kernels_constants() -> None:
    """The kernel's ACT tuple is read from the same format facts and rounding codes as
    mx_quant's QDQ kernel (so the fused QDQ runs mx_codec.qdq_blocks with the same constants);
    keys the fused path does not take give ()."""
    from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
    from kernels.triton.mx_codec import ROUNDING_CODE, format_constexprs
    from kernels.spec.formats import get_format

    assert len(MX_DYNAMIC_KEYS) >= 18
    for akey in MX_DYNAMIC_KEYS:
        f = format_constexprs(get_format(akey.format))
        assert act_facts(akey) == (f["MBITS"], f["BIAS"], f["EMAX"], f["MAX_NORMAL"],
                                   f["MAXN_MANT"], f["MAXN_SUB"], f["IS_INT"],
                                   ROUNDING_CODE[akey.scale.rounding]), akey
    assert act_facts(None) == () and act_facts(FP8_STATIC_TENSOR_KEY) == ()
    assert act_facts(key("mxfp4", static=True)) == ()  # not a dynamic key


@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"))
def test_every_launch_fills_the_kernel_signature(fmt: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """The host path (plan, layout, workspace, launch arguments) of the dense and MoE calls,
    run here with the launch recorded instead of made (Gluon needs an sm_90 GPU): one argument
    per kernel parameter, num_warps = WARPS, the tile the config asked for, ACT set exactly when
    a W*A* call fuses its QDQ, and the grid covering N in tiles of 16 * warps rows."""
    from kernels.triton import moe_routing, moe_wgmma

    names = lw._wgmma_linear_kernel.arg_names
    seen: list = []

    def record(fn, key_, grid, args, num_warps, num_stages, **kw):
        if fn is lw._wgmma_linear_kernel:  # (the W*A* QDQ kernel's launch: not recorded)
            assert len(args) == len(names) and num_warps == dict(zip(names, args))["WARPS"]
            seen.append((grid, dict(zip(names, args))))

    monkeypatch.setattr(launcher_mod, "launch", record)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: None)  # the general path
    monkeypatch.setattr(lw, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(le, "_check_call", lambda *a, **k: None)
    monkeypatch.setattr(le, "_INTERPRETED", False)  # (CI sets TRITON_INTERPRET)
    monkeypatch.setattr(lw, "WARPS_VERIFIED", (4, 8))  # the gates: what runs is not tested here
    gen = torch.Generator().manual_seed(len(fmt))
    n, k = 200, 1024
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen)
    for akey in (None, key(fmt, static=False)):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=akey))
        for m, warps, fuse in ((1, 4, True), (16, 4, False), (100, 8, True)):
            cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=128, split=2, stages=3,
                                 warps=warps, fuse_act=fuse)
            fused_linear(torch.randn(m, k).to(torch.bfloat16), prepared, strategy="wgmma",
                         config=cfg)
            grid, args = seen.pop()
            assert grid[0] == -(-n // (16 * warps)) and grid[1] == -(-m // cfg.block_m)
            assert (args["BLOCK_M"], args["WARPS"], args["FMT"]) == (
                cfg.block_m, warps, lw.FORMATS.index(fmt))
            assert bool(args["ACT"]) == (akey is not None and fuse) and not args["GROUPED"]
    if fmt == "mxfp8_e4m3":
        return  # MoE experts: mxfp4 / mxfp6
    ex = MXTensor(w.data.reshape(2, n // 2, -1), w.scales.reshape(2, n // 2, -1), fmt, "even",
                  torch.Size((2, n // 2, k)), w.layout)
    monkeypatch.setattr(moe_wgmma, "sort_rows", moe_routing.sort_rows_torch)
    monkeypatch.setattr(moe_wgmma, "combine", lambda rows, dtype: rows.sum(1))
    ids = torch.randint(0, 2, (30, 1), generator=gen)
    for warps in (4, 8):
        cfg = lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=3, warps=warps)
        moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex, None, ids,
                                        torch.ones(30, 1), torch.float32, {}, cfg)
        grid, args = seen.pop()
        assert grid[0] == -(-(n // 2) // (16 * warps)) and args["GROUPED"] and not args["ACT"]


def test_later_calls_launch_the_first_calls_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a plan's first call on a stream, its calls go through a `launcher.Bound` (weight,
    workspace and constants fixed as ints): each must pass what the general path passes, with
    this call's x, out, M and strides; a call with bias, or where `current_stream` says no (a
    profiler's hooks, another device), takes the general path. Run here with the compiled
    kernel's launcher recorded. (The one-partition kernel's rows: the ws rows passed over; a ws
    plan's Bound: test_linear_wgmma_ws.)"""
    monkeypatch.setattr(lw, "WS_VERIFIED", False)
    names = lw._wgmma_linear_kernel.arg_names
    general: list = []
    bound: list = []

    class Compiled:  # what launcher.launch returns on a GPU, its launcher recorded
        function, packed_metadata = 11, ("meta",)

        @staticmethod
        def run(*a):
            bound.append(a)

    def record(fn, key_, grid, args, num_warps, num_stages, **kw):
        if fn is lw._wgmma_linear_kernel:
            general.append(dict(zip(names, args)))
            return Compiled
        return None

    streams = {"now": 5}
    monkeypatch.setattr(launcher_mod, "launch", record)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: streams["now"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(lw, "unavailable", lambda *a, **k: None)
    monkeypatch.setattr(le, "_check_call", lambda *a, **k: None)
    monkeypatch.setattr(le, "_INTERPRETED", False)
    gen = torch.Generator().manual_seed(3)
    n, k = 200, 1024
    for akey in (None, key("mxfp4", static=False)):  # W4A4: the QDQ'd x is what is passed
        prepared = KERNEL.prepare(fp4_weight(n, k, gen),
                                  SchemeContract(weight=key("mxfp4"), activation=akey))
        fused_linear(torch.randn(9, k).to(torch.bfloat16), prepared)
        first = general.pop()
        for m in (13, 16, 10):
            x = torch.randn(m, k).to(torch.bfloat16)
            out = fused_linear(x, prepared)
            assert not general, "a later call took the general path"
            grid_and_stream, args = bound[-1][:4], bound[-1][9:]
            assert grid_and_stream[1:] == (1, first["SPLIT"], 5) and len(args) == len(names)
            got = dict(zip(names, args))
            assert got["out_ptr"] == out.data_ptr() and got["M"] == m and got["stride_o"] == n
            if akey is None:
                assert got["x_ptr"] == x.data_ptr() and got["stride_x"] == k
            for name, value in first.items():
                if name not in ("x_ptr", "out_ptr", "M", "stride_x", "stride_o"):
                    want = value.data_ptr() if isinstance(value, torch.Tensor) else value
                    assert got[name] == want, name
        calls = len(bound)
        fused_linear(torch.randn(3, k).to(torch.bfloat16), prepared,
                     torch.zeros(n, dtype=torch.bfloat16))  # bias: the general path
        streams["now"] = None  # hooks set, or another device current
        fused_linear(torch.randn(3, k).to(torch.bfloat16), prepared)
        assert len(general) == 2 and len(bound) == calls
        streams["now"] = 5
        general.clear()


def test_x_by_tma_passes_a_descriptor_of_each_calls_x(monkeypatch: pytest.MonkeyPatch) -> None:
    """tma_x: the first call passes Triton a TensorDescriptor of x ([M, K], boxes of block_m x
    block_k in the kernel's x_smem layout: Triton specializes on them), later calls through the
    plan's `launcher.Bound` a fresh `XDesc` of their own x (base, shape, strides: what Triton's
    launcher encodes into the copy's tensor map), every other argument the first call's; the
    MoE launch passes the sorted rows' descriptor. Recorded here (Gluon needs an sm_90 GPU)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    names = lw._wgmma_linear_kernel.arg_names
    cfg = lw.WgmmaConfig(block_m=64, block_k=128, split=2, stages=3, tma_x=True)
    monkeypatch.setattr(lw, "TMA_X_VERIFIED", True)
    general, bound = record_launches(monkeypatch, cfg)
    gen = torch.Generator().manual_seed(4)
    n, k = 200, 1024
    prepared = KERNEL.prepare(fp4_weight(n, k, gen), SchemeContract(weight=key("mxfp4"),
                                                                    activation=None))
    x0 = torch.randn(40, k).to(torch.bfloat16)
    fused_linear(x0, prepared)
    first = general.pop()[3]
    desc = first["x_ptr"]
    assert isinstance(desc, TensorDescriptor) and first["X_TMA"] is True
    assert desc.base.data_ptr() == x0.data_ptr() and list(desc.shape) == [40, k]
    assert list(desc.strides) == [k, 1]
    assert list(desc.block_shape) == [64, 128] and desc.layout == wgmma_tiles.X_SMEM
    for m in (33, 64, 50):  # (one M bucket: one plan)
        x = torch.randn(m, k).to(torch.bfloat16)
        fused_linear(x, prepared)
        assert not general, general[-1][3]["x_ptr"]
        got = bound.pop()
        assert not general and isinstance(got["x_ptr"], wgmma_tiles.XDesc)
        xd = got["x_ptr"]
        assert (xd.base.data_ptr(), xd.shape, xd.strides, xd.padding) == (
            x.data_ptr(), [m, k], [k, 1], "zero")
        assert got["M"] == m and got["X_TMA"] is True
        for name in names:
            if name not in ("x_ptr", "out_ptr", "M", "stride_x", "stride_o"):
                want = first[name]
                want = want.data_ptr() if isinstance(want, torch.Tensor) else want
                assert got[name] == want, name

    from kernels.triton import moe_wgmma
    ex = two_experts(fp4_weight(n, k, gen), monkeypatch)
    ids = torch.randint(0, 2, (30, 1), generator=gen)
    moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex, None, ids,
                                    torch.ones(30, 1), torch.float32, {}, cfg)
    args = general.pop()[3]
    assert args["GROUPED"] and args["X_TMA"] is True
    assert list(args["x_ptr"].shape) == [30, k] and list(args["x_ptr"].block_shape) == [64, 128]
    monkeypatch.setattr(lw, "TMA_X_VERIFIED", False)
    with pytest.raises(ValueError, match=r"tma_x \(the x tile by TMA\): written, not yet "
                                         r"verified on a GPU; use a config without that part"):
        moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex, None, ids,
                                        torch.ones(30, 1), torch.float32, {}, cfg)


def test_a_gated_part_of_a_table_row_runs_as_the_row_without_it(monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """A table row records the measured choice (tma_x); while that part is gated off the row
    runs as the same config without it (dense and MoE), never falling to another strategy; a
    caller's own config asking for it is refused with the reason. Recorded launches."""
    seen: list = []

    def record(fn, key_, grid, args, num_warps, num_stages, **kw):
        if fn is lw._wgmma_linear_kernel:
            seen.append(dict(zip(lw._wgmma_linear_kernel.arg_names, args)))

    row = lw.WgmmaConfig(block_m=64, block_k=128, split=2, stages=3, tma_x=True)
    monkeypatch.setattr(launcher_mod, "launch", record)
    monkeypatch.setattr(launcher_mod, "current_stream", lambda device: None)
    monkeypatch.setattr(le, "_check_call", lambda *a, **k: None)
    monkeypatch.setattr(le, "_INTERPRETED", False)
    monkeypatch.setattr(le, "strategy_for", lambda *a, **k: ("wgmma", row))
    monkeypatch.setattr(lw, "unavailable", lambda device, consts, k, xd, od, cfg, m=1: (
        "tma_x (the x tile by TMA): written, not yet verified on a GPU"
        if cfg.tma_x and not lw.TMA_X_VERIFIED else None))
    gen = torch.Generator().manual_seed(6)
    prepared = KERNEL.prepare(fp4_weight(200, 1024, gen), SchemeContract(weight=key("mxfp4"),
                                                                         activation=None))
    for gate in (False, True):
        monkeypatch.setattr(lw, "TMA_X_VERIFIED", gate)
        assert lw.table_config(row) == (row if gate else dataclasses.replace(row, tma_x=False))
        prepared.cache.clear()
        fused_linear(torch.randn(40, 1024).to(torch.bfloat16), prepared)
        args = seen.pop()
        assert args["X_TMA"] is gate and args["BLOCK_M"] == 64 and args["SPLIT"] == 2
    monkeypatch.setattr(lw, "TMA_X_VERIFIED", False)
    with pytest.raises(ValueError, match=r"'wgmma' cannot run this call: tma_x \(the x tile by "
                                         r"TMA\): written, not yet verified on a GPU"):
        fused_linear(torch.randn(40, 1024).to(torch.bfloat16), prepared, strategy="wgmma",
                     config=row)


COMPILE_CASES = [  # every format, grouped (MoE), K tails, block_m 8..128, split-K on / off
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=1),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=3, GROUPED=True, HAS_BIAS=False, K_TAIL=True),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, GROUPED=True, HAS_BIAS=False, FMT=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=1, STAGES=3, WARPS=8),  # two warpgroups (gated)
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, GROUPED=True, HAS_BIAS=False),
    # W*A*: the activation QDQ in the kernel (fuse_act, gated): three formats, every rounding
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even"),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, ACT="mxint8:rceil"),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, K_TAIL=True, ACT="mxfp8_e4m3:floor"),
    # mxfp8 e4m3 weights (FMT 3, gated): A and B words; grouped, K tails, two warpgroups
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, FMT=3, K_TAIL=True, WARPS=8),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=3, GROUPED=True, HAS_BIAS=False),
    # K tiles in halves (sub_k 2, gated): every format, one and two warpgroups, grouped
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, SUB_K=2),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=1, SUB_K=2, K_TAIL=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=2, FMT=2, WARPS=8, SUB_K=2),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3, SUB_K=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, WARPS=8, GROUPED=True, HAS_BIAS=False,
         SUB_K=2),
    # two 64-row blocks a warpgroup (rep 2, gated): every format, split-K, grouped, K halves
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, REP=2, FMT=2, K_TAIL=True),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, REP=2, FMT=3, SUB_K=2),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=3, REP=2, FMT=1, GROUPED=True,
         HAS_BIAS=False),
    # the x tile by TMA (tma_x, gated): every format, K tails, two warpgroups, grouped, the
    # fused QDQ, K halves, rep 2
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, K_TAIL=True, WARPS=8, X_TMA=True),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=2, FMT=3, SUB_K=2, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=1, GROUPED=True, HAS_BIAS=False,
         X_TMA=True),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even", X_TMA=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2, X_TMA=True)]


_COMPILE = """
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
from kernels.triton import linear_wgmma as lw
kern = lw._wgmma_linear_kernel
names = kern.arg_names
by16 = {"K", "stride_x", "stride_o", "stride_we", "stride_se"}
found = []
for consts in json.loads(sys.stdin.read()):
    consts["ACT"] = tuple(consts["ACT"])
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "b_ptr": "*i32", "s_ptr": "*u8",
            "bias_ptr": "*fp32", "out_ptr": "*fp32" if consts["GROUPED"] else "*bf16",
            "part_ptr": "*fp32", "lock_ptr": "*i32", "grp_ptr": "*i32", "dest_ptr": "*i32",
            "rw_ptr": "*fp32"}
    if consts.get("X_TMA"):  # x as a TMA descriptor of [BLOCK_M, BLOCK_K] boxes
        from kernels.triton.wgmma_tiles import X_SMEM
        ptrs["x_ptr"] = f"tensordesc<bf16[{consts['BLOCK_M']}, {consts['BLOCK_K']}],{X_SMEM!r}>"
    sig = {n: "constexpr" if n in consts else ptrs.get(n, "i32") for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if (n in ptrs or n in by16) and not sig[n].startswith("tensordesc")}
    try:
        ptx = triton.compile(GluonASTSource(kern, sig, consts, attrs),
                             target=GPUTarget("cuda", 90, 32),
                             options=dict(num_warps=consts["WARPS"])).asm["ptx"]
    except Exception as e:  # reported by the case's own test
        found.append({"error": f"{type(e).__name__}: {e}"[-3000:]})
        continue
    found.append({p: len(re.findall(p, ptx)) for p in (
        r"wgmma\\.mma_async", r"st\\.shared", r"wgmma\\.wait_group\\.sync\\.aligned 0",
        r"shfl\\.sync", r"cvt\\.rn\\.bf16", r"cp\\.async\\.bulk\\.tensor",
        r"cp\\.async\\.cg\\.shared\\.global", r"mbarrier\\.try_wait")})
print(json.dumps(found))
"""


def compile_consts(case: dict) -> dict:
    """A compile case's constexprs (the defaults, the case, ACT's facts from its key name)."""
    consts = {**dict(HAS_BIAS=True, WARPS=fw.WGMMA_WARPS, K_TAIL=False, GROUPED=False, FMT=0,
                     SUB_K=1, REP=1, X_TMA=False), **case}
    fmt, _, rounding = case.get("ACT", "").partition(":")
    consts["ACT"] = act_facts(QuantKey.mx(fmt, rounding=rounding, static=False)) if fmt else ()
    assert bool(consts["ACT"]) == bool(fmt)
    return consts


@pytest.fixture(scope="module")
def compiled_cases() -> list:
    """Every COMPILE_CASES entry compiled in ONE fresh process (triton imported once: ~3 s a
    case saved). Fresh: the interpreter, once it has run a kernel in this process, has patched
    triton.language."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[3]),
                                         env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE], env=env, capture_output=True,
                         text=True, timeout=900,
                         input=json.dumps([compile_consts(c) for c in COMPILE_CASES]))
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index", range(len(COMPILE_CASES)), ids=[
    "-".join(f"{k}{v}" for k, v in c.items()) for c in COMPILE_CASES])
def test_the_kernel_compiles_for_sm90_without_a_shared_round_trip(index: int,
                                                                  compiled_cases: list) -> None:
    """Compiled here for sm_90a (no GPU needed; this triton's Gluon and ptxas) with the launch's
    specialization (16-byte aligned pointers; K and the row strides multiples of 16, as the
    host guarantees): the decoders' layouts convert with no data movement (assert_trivial,
    checked at compile time), one wgmma per 16 of K a tile (and 64-row block: REP), and no
    decoded value goes through shared memory (at most the split-K flag's one st.shared)."""
    case, found = COMPILE_CASES[index], compiled_cases[index]
    assert "error" not in found, found.get("error")
    assert found[r"wgmma\.mma_async"] == case["BLOCK_K"] // 16 * case.get("REP", 1)
    if case.get("ACT"):  # the x tile's QDQ: block maxima by shuffles, an RNE cast, shared stores
        assert found[r"shfl\.sync"] > 0 and found[r"cvt\.rn\.bf16"] > 0
    else:  # no decoded weight value through shared memory
        assert found[r"st\.shared"] <= 1
    assert found[r"wgmma\.wait_group\.sync\.aligned 0"] >= 1
    # X_TMA: x by TMA copies waited on through mbarriers; else no TMA at all
    assert (found[r"cp\.async\.bulk\.tensor"] > 0) == bool(case.get("X_TMA"))
    assert (found[r"mbarrier\.try_wait"] > 0) == bool(case.get("X_TMA"))


# ------------------------------------------------------------------------------- GPU: the kernel
gpu = pytest.mark.skipif(not ON_SM90, reason="wgmma runs on sm_90 only; the CPU tests above "
                         "check its layout and decoder")


def test_a_program_reads_only_rows_of_the_layout() -> None:
    """The one layout pads a weight's rows to whole 128: a 256-row program (warps 8 x rep 2)
    fits only where they are an even count of 128 — elsewhere its last program read past the
    layout's end (compute-sanitizer on the H200, 2026-12-03; an illegal address one run in
    many) and is refused with the fix; 64- and 128-row programs fit every N."""
    from kernels.triton.wgmma_config import weight_programs

    wide = lw.WgmmaConfig(block_m=64, block_k=128, split=1, stages=2, warps=8, rep=2)
    for n, programs in ((200, 1), (256, 1), (512, 2), (3000, 12)):
        assert weight_programs(wide, n, "wgmma") == programs, n
    for n in (72, 128, 384, 2880):
        with pytest.raises(ValueError, match=rf"wgmma: a program of 256 weight rows \(warps=8, "
                           rf"rep=2\) reads past N = {n}'s layout .*use warps=4 or rep=1"):
            weight_programs(wide, n, "wgmma")
    # no table row can be refused for a weight's N: every wgmma row reads <= 128 rows a program
    assert all(16 * row.config.groups <= 128 for row in linear_configs.TABLE
               if isinstance(row.config, lw.WgmmaConfig))
    for warps, rep, rows in ((4, 1, 64), (8, 1, 128), (4, 2, 128)):
        cfg = lw.WgmmaConfig(block_m=64, block_k=128, split=1, stages=2, warps=warps, rep=rep)
        assert [weight_programs(cfg, n, "x") for n in (72, 2880)] == [-(-72 // rows),
                                                                      -(-2880 // rows)]


def test_configs_past_the_verified_tiles_are_refused() -> None:
    with pytest.raises(ValueError, match=r"block_m=48 is not one of \(8, 16, 32, 64, 128\)"):
        lw.WgmmaConfig(block_m=48, block_k=128, split=2, stages=4)
    for block_k in (96, 384, 1024):  # whole chunks of the one layout, up to its K padding
        with pytest.raises(ValueError, match=rf"block_k={block_k} \(128, 256 or 512"):
            lw.WgmmaConfig(block_m=16, block_k=block_k, split=2, stages=4)
    with pytest.raises(ValueError, match=r"stages=1 \(>= 2\)"):
        lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=1)
    with pytest.raises(ValueError, match=r"max_tiles=-1 \(>= 0\)"):
        lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=2, max_tiles=-1)
    with pytest.raises(ValueError, match=r"warps=6 is not 4 or 8"):
        lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=2, warps=6)
    cfg = lw.WgmmaConfig(block_m=16, block_k=256, split=2, stages=4)
    bf = torch.bfloat16
    assert lw.unavailable(torch.device("cpu"), FP4, 512, bf, bf, cfg, m=17) == \
        "M=17 rows need one M tile (block_m=16)"
    fused = lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=3, fuse_act=True)
    assert lw.unavailable(torch.device("cpu"), dict(FP4, ACT_MODE=1), 512, bf, bf, fused) == (
        "needs an NVIDIA GPU" if wgmma_tiles.ACT_VERIFIED else
        "fuse_act (the activation QDQ in the kernel): written, not yet verified on a GPU")
    # weight-only calls have no QDQ to fuse: the config runs them as it is
    assert lw.unavailable(torch.device("cpu"), dict(FP4, ACT_MODE=0), 512, bf, bf, fused) == \
        "needs an NVIDIA GPU"
    tma = lw.WgmmaConfig(block_m=64, block_k=128, split=2, stages=3, tma_x=True)
    assert lw.unavailable(torch.device("cpu"), FP4, 512, bf, bf, tma) == (
        "needs an NVIDIA GPU" if lw.TMA_X_VERIFIED else
        "tma_x (the x tile by TMA): written, not yet verified on a GPU")
    two = lw.WgmmaConfig(block_m=128, block_k=128, split=1, stages=3, warps=8)
    assert lw.unavailable(torch.device("cpu"), FP4, 512, bf, bf, two) == (
        "needs an NVIDIA GPU" if 8 in lw.WARPS_VERIFIED else
        "warps=8 (two warpgroups): written, not yet verified on a GPU")


def tile_for(m: int) -> int:
    """The smallest verified block_m that takes M's bucket (plans are cached per bucket, so a
    tile smaller than the bucket is refused: test_unavailable_says_why)."""
    return next(b for b in lw.BLOCK_M_VERIFIED if b >= linear_configs.m_bucket(m))


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
def test_w4a4_layers_share_the_streams_qdq_scratch() -> None:
    """W4A4 on wgmma QDQs x into the stream's scratch rows (mx_quant.scratch: one allocation
    less a call): two layers called in turn on one stream give, each call, the bits of their
    own first call and the reference's values; a CUDA graph captured of the first (its QDQ in
    the graph's pool) replays them after the other layer has used the scratch."""
    from kernels.triton import mx_quant

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
    held = mx_quant._SCRATCH.held[(xs[0].device, stream)]
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
    monkeypatch.setattr(lw, "TILES_BOUND_VERIFIED", True)
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
    monkeypatch.setattr(lw, "K_TAIL_VERIFIED", True)
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


@pytest.mark.parametrize("fmt", ("mxfp6_e2m3", "mxfp6_e3m2"))
@pytest.mark.parametrize("layout", ("packed", "unpacked"))
def test_a_prepared_fp6_weight_gets_the_layout_its_decoder_reads(fmt: str, layout: str) -> None:
    """The host path (constexprs -> format, packed bytes unpacked) on a prepared weight; the
    layout decodes through the PTX's twin to the reference (CPU)."""
    from kernels.triton.fp6_words import wgmma_decode_fp6
    from kernels.triton.linear_tiles import prepare_tensors

    w = fp6_weight(fmt, 70, 320, layout, torch.Generator().manual_seed(len(fmt + layout)))
    cached = prepare_tensors(KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None)))
    assert lw.weight_format(cached["consts"]) == fmt
    want = mx_dequantize(w, torch.float32, backend="reference")
    words, sbytes, bwords = lw.one_layout(cached, fmt, 320)  # one layout, built once
    assert lw.one_layout(cached, fmt, 320)[0] is words
    got = wgmma_decode_fp6(words, bwords, sbytes, fmt, 128, 512, 128)  # (padded: fw.ALIGN)
    assert same_values(got[:70, :320], want) and not got[:70, 320:].any()


@gpu
@pytest.mark.parametrize("fmt", ("mxfp6_e2m3", "mxfp6_e3m2"))
@pytest.mark.parametrize("layout", ("packed", "unpacked"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_fp6_weights_match_the_reference(n: int, k: int, fmt: str, layout: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """mxfp6 through the wgmma kernel (fp6_words' layout): every code and scale byte, N and K
    tails, M from 1 to 128, split-K, bias, NaN / Inf activations. (Run with mxfp6 and K tails
    switched on: this test is what switches them on, `FP6_VERIFIED`.)"""
    monkeypatch.setattr(lw, "FP6_VERIFIED", True)
    monkeypatch.setattr(lw, "K_TAIL_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt) + len(layout))
    w = fp6_weight(fmt, n, k, layout, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split in ((1, 2), (16, 1), (40, 4), (128, 2)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        if m > 1:
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
        cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=256 if m <= 16 else 128,
                             split=split, stages=3)
        for b in (None, bias):
            out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2"))
def test_two_warpgroups_match_the_reference(fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """warps = 8 (two warpgroups, 128 weight rows sharing each x tile): every code and scale
    byte, N tails (200: one and a half tiles; 1000), K tails (2880), M up to 128, split-K 1 / 2,
    bias, NaN / Inf activations, two calls bit-identical. (Run with warps 8 switched on: this
    test is what switches it on, `WARPS_VERIFIED`.)"""
    monkeypatch.setattr(lw, "WARPS_VERIFIED", (4, 8))
    for n, k in ((200, 1024), (1000, 2880)):
        gen = torch.Generator().manual_seed(n + k + len(fmt))
        w = (fp4_weight(n, k, gen) if fmt == "mxfp4" else
             fp6_weight(fmt, n, k, "packed", gen)).to("cuda")
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
        bias = torch.randn(n, generator=gen).cuda()
        for m, split in ((16, 2), (64, 1), (100, 2), (128, 1)):
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
            cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=128, split=split, stages=3,
                                 warps=8)
            for b in (None, bias):
                out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split)
                again = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert torch.equal(again.view(torch.int16), out.view(torch.int16))


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_k_halves_match_the_reference(n: int, k: int, fmt: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """sub_k = 2 (each K tile as two halves, the second decoded under the first's wgmma) and a
    register cap (maxnreg 128: spills): bit for bit the sub_k = 1 kernel's output (the same
    wgmmas in the same K order) and close to the reference; every code and scale byte, N and K
    tails, M 1..128, split-K, one and two warpgroups, block_k 128 / 256, bias, NaN / Inf
    activations; and rep = 2 (128 weight rows a warpgroup) against the same references. (Run
    with sub_k and rep switched on: this test is what switches them on, `SUB_K_VERIFIED`,
    `REP_VERIFIED`.)"""
    monkeypatch.setattr(lw, "SUB_K_VERIFIED", True)
    monkeypatch.setattr(lw, "REP_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k + len(fmt))
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=None))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split, warps, block_k, cap, rep in (
            (1, 2, 4, 256, 0, 1), (16, 1, 4, 128, 0, 1), (100, 2, 8, 128, 128, 1),
            (128, 4, 4, 128, 0, 1), (64, 1, 8, 256, 0, 1), (128, 2, 8, 128, 128, 1),
            (1, 2, 4, 128, 0, 2), (40, 1, 4, 256, 0, 2), (128, 4, 4, 128, 0, 2),
            (64, 2, 8, 128, 0, 2)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        if m > 1:
            x[1, 5] = float("inf")
            x[-1, k - 3] = float("nan")
        cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=2,
                             warps=warps, sub_k=2, maxnreg=cap, rep=rep)
        whole = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=2,
                               warps=warps)
        if cfg.groups == 16 and -(-n // 128) % 2:
            # 256 rows a program on 128 padded rows (72): past the layout's end — refused
            # (compute-sanitizer saw these reads on the H200; they faulted one run in many)
            with pytest.raises(ValueError, match="reads past N = 72's layout"):
                fused_linear(x, prepared, strategy="wgmma", config=cfg)
            continue
        for b in (None, bias):
            out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
            assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split, warps)
            want = fused_linear(x, prepared, b, strategy="wgmma", config=whole)
            assert torch.equal(out.view(torch.int16), want.view(torch.int16)), (n, k, m)


@gpu
@pytest.mark.parametrize("act", ("mxfp4:even", "mxfp6_e3m2:floor", "mxfp8_e4m3:rceil",
                                 "mxint8:even"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_fused_activation_qdq_is_the_dispatchers(n: int, k: int, act: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """fuse_act (the x tile's QDQ inside the kernel, one launch a call): bit for bit the output
    of the same kernel after the dispatcher's QDQ launch, and close to reference-emulation;
    zero / subnormal / NaN / Inf / huge blocks, M 1..16, split 1 / 2, K tails, bias. (Run with
    fuse_act switched on: this test is what switches it on, `wgmma_tiles.ACT_VERIFIED`.)"""
    monkeypatch.setattr(wgmma_tiles, "ACT_VERIFIED", True)
    fmt, _, rounding = act.partition(":")
    akey = QuantKey.mx(fmt, rounding=rounding, static=False)
    gen = torch.Generator().manual_seed(n + k + len(act))
    w = fp4_weight(n, k, gen).to("cuda")
    prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp4"), activation=akey))
    bias = torch.randn(n, generator=gen).cuda()
    for m, split in ((1, 2), (5, 1), (16, 2)):
        x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
        x[0, :32] = 0.0  # a zero block, a subnormal block, a huge block
        x[0, 32:64] = 2.0 ** -130
        x[0, 64:96] *= 2.0 ** 120
        if m > 1:
            x[1, 100] = float("inf")
            x[-1, k - 3] = float("nan")
        block_k = 256 if k % 256 == 0 else 128
        base = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=3)
        fused = lw.WgmmaConfig(block_m=tile_for(m), block_k=block_k, split=split, stages=3,
                               fuse_act=True)
        for b in (None, bias):
            want = fused_linear(x, prepared, b, strategy="wgmma", config=base)
            got = fused_linear(x, prepared, b, strategy="wgmma", config=fused)
            assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (n, k, m)
            assert close(got, reference_bf16(x, prepared, b)), (n, k, m, split)
    plans = prepared.cache[le._CACHE_KEY]["plans"]
    assert not plans  # forced configs are not cached; the table's own plan:
    fused_linear(x, prepared)
    plan = next(iter(plans.values()))
    assert plan.strategy == "wgmma" and (plan.qdq is None) == bool(plan.wgmma.act)


def test_a_prepared_fp8_weight_gets_the_layout_its_decoder_reads() -> None:
    """The host path (constexprs -> format, the fits check kept, the one layout built once) on
    a prepared e4m3 weight; it decodes through the PTX's twin to the
    reference (CPU). A weight holding an e4m3 NaN code gets no layout (the table moves on)."""
    from kernels.triton.fp8_words import wgmma_decode_fp8
    from kernels.triton.linear_tiles import prepare_tensors

    w = fp8_weight(70, 320, torch.Generator().manual_seed(8))
    contract = SchemeContract(weight=key("mxfp8_e4m3"), activation=None)
    cached = prepare_tensors(KERNEL.prepare(w, contract))
    assert lw.weight_format(cached["consts"]) == "mxfp8_e4m3"
    want = mx_dequantize(w, torch.float32, backend="reference")
    words, sbytes, bwords = lw.one_layout(cached, "mxfp8_e4m3", 320)
    assert lw.one_layout(cached, "mxfp8_e4m3", 320)[0] is words
    got = wgmma_decode_fp8(words, bwords, sbytes, 128, 512, 128)  # (padded: fw.ALIGN)
    assert same_values(got[:70, :320], want) and not got[:70, 320:].any()
    bad = MXTensor(w.data.clone(), w.scales, w.fmt, w.rounding, w.shape, w.layout)
    bad.data[5, 9] = 0x7F
    assert lw.one_layout(prepare_tensors(KERNEL.prepare(bad, contract)), "mxfp8_e4m3",
                         320) is None


@gpu
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_fp8_weights_match_the_reference(n: int, k: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """mxfp8 e4m3 weights through the wgmma kernel (fp8_words' layout): every code and scale
    byte, N and K tails, M 1..128, split-K, one and two warpgroups, bias, NaN / Inf
    activations, W8A16 and W8A8 (the QDQ launched and fused). (Run with mxfp8 switched on: this
    test is what switches it on, `FP8_VERIFIED`.)"""
    monkeypatch.setattr(lw, "FP8_VERIFIED", True)
    monkeypatch.setattr(lw, "WARPS_VERIFIED", (4, 8))
    monkeypatch.setattr(wgmma_tiles, "ACT_VERIFIED", True)
    gen = torch.Generator().manual_seed(n + k)
    w = fp8_weight(n, k, gen).to("cuda")
    bias = torch.randn(n, generator=gen).cuda()
    for akey in (None, key("mxfp8_e4m3", static=False)):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key("mxfp8_e4m3"),
                                                    activation=akey))
        for m, split, warps in ((1, 2, 4), (16, 1, 4), (40, 4, 4), (128, 2, 8), (64, 1, 8)):
            x = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
            if m > 1:
                x[1, 5] = float("inf")
                x[-1, k - 3] = float("nan")
            cfg = lw.WgmmaConfig(block_m=tile_for(m), block_k=256 if m <= 16 else 128,
                                 split=split, stages=3, warps=warps,
                                 fuse_act=akey is not None and m <= 16)
            for b in (None, bias):
                out = fused_linear(x, prepared, b, strategy="wgmma", config=cfg)
                assert close(out, reference_bf16(x, prepared, b)), (n, k, m, split, akey)


@gpu
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3"))
@pytest.mark.parametrize("n,k", ((200, 1024), (72, 2880)))
def test_x_by_tma_matches_the_reference(n: int, k: int, fmt: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """tma_x (the x tile by one TMA copy a K tile): bit for bit the cp.async kernel of the same
    config (the same wgmmas in the same K order) and close to the reference; rows past M and
    columns past K zero-filled by the copy (M 1..128, K 2880), N tails, split-K 1..4 with
    slices shorter than the pipeline, stages 2..4, one and two warpgroups, rep 2, K halves, a
    register cap, bias, NaN / Inf activations; W*A* with the QDQ fused (its proxy fence).
    (Run with tma_x switched on: this test is what switches it on, `TMA_X_VERIFIED`.)"""
    monkeypatch.setattr(lw, "TMA_X_VERIFIED", True)
    akey = key(fmt, static=False)
    gen = torch.Generator().manual_seed(n + k + len(fmt) + 7)
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight}.get(
        fmt, lambda n_, k_, g: fp6_weight(fmt, n_, k_, "packed", g))(n, k, gen).to("cuda")
    for act in (None, akey):
        prepared = KERNEL.prepare(w, SchemeContract(weight=key(fmt), activation=act))
        bias = torch.randn(n, generator=gen).cuda()
        for m, split, warps, block_k, stages, sub_k, rep, cap, fuse in (
                (1, 2, 4, 256, 4, 1, 1, 0, True), (16, 1, 4, 128, 4, 1, 1, 0, False),
                (64, 2, 4, 128, 3, 1, 1, 0, True), (100, 2, 8, 128, 2, 1, 1, 128, False),
                (128, 1, 8, 128, 2, 1, 1, 0, False), (128, 2, 4, 128, 3, 2, 1, 0, False),
                (64, 4, 4, 128, 2, 1, 2, 0, False), (40, 1, 4, 256, 3, 1, 1, 0, True)):
            if act is not None and not fuse:
                continue
            x = special_rows(m, k, gen)
            base = dict(block_m=tile_for(m), block_k=block_k, split=split, stages=stages,
                        warps=warps, sub_k=sub_k, rep=rep, maxnreg=cap, fuse_act=fuse)
            tma = lw.WgmmaConfig(**base, tma_x=True)
            plain = lw.WgmmaConfig(**base)
            for b in (None, bias):
                got = fused_linear(x, prepared, b, strategy="wgmma", config=tma)
                want = fused_linear(x, prepared, b, strategy="wgmma", config=plain)
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (
                    n, k, m, split, act)
                assert close(got, reference_bf16(x, prepared, b)), (n, k, m, split, act)


def test_one_copy_of_the_weight_serves_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs of every K tile and row-group count (one and two warpgroups, rep 2, ws) run off
    the same prepared buffers: one layout in the weight's cache, whatever the M buckets ran
    (before: a copy per (K tile, row groups) in use)."""
    monkeypatch.setattr(lw, "WS_VERIFIED", True)
    configs = {1: lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4),
               16: lw.WgmmaConfig(block_m=16, block_k=512, split=1, stages=4, tma_x=True,
                                  ws=True),
               32: lw.WgmmaConfig(block_m=32, block_k=128, split=4, stages=3, rep=2),
               64: lw.WgmmaConfig(block_m=64, block_k=256, split=1, stages=3, warps=8),
               128: lw.WgmmaConfig(block_m=128, block_k=128, split=1, stages=4, tma_x=True,
                                   ws=True)}
    general, _ = record_launches(monkeypatch, None)
    monkeypatch.setattr(le, "strategy_for",
                        lambda m, *a, **k: ("wgmma", configs[linear_configs.m_bucket(m)]))
    prepared = KERNEL.prepare(fp4_weight(200, 1440, torch.Generator().manual_seed(2)),
                              SchemeContract(weight=key("mxfp4"), activation=None))
    for m in configs:
        fused_linear(torch.randn(m, 1440).to(torch.bfloat16), prepared)
    cached = prepared.cache[le._CACHE_KEY]
    words = cached["wgmma_layout"][0]
    assert not [k for k in cached if isinstance(k, tuple) and k and k[0] == "wgmma"]
    assert len(general) == len(configs)
    for _, _, _, args in general:
        w = args["w_ptr"]
        assert (w.base if hasattr(w, "base") else w).data_ptr() == words.data_ptr()
