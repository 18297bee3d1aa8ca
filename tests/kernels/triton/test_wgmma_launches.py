"""The one-partition wgmma kernel's host path (kernels/triton/linear_wgmma.py), on the CPU
(CI; Gluon needs an sm_90 GPU): which calls and configs it takes and the reasons it gives for the
rest; its launches recorded instead of made: every argument the kernel's signature asks for (dense
and MoE), the same arguments again through a plan's `launcher.Bound`, x by TMA as a descriptor of
each call's x, and a table row's gated part run as the row without it.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.mx import MXTensor
from kernels.spec.contract import SchemeContract
from kernels.triton import launcher as launcher_mod
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton import wgmma_config, wgmma_gates, wgmma_tiles
from kernels.triton.linear_emulation import fused_linear
from kernels.triton.wgmma_tiles import act_facts
from support.mx_weights import e4m3_weight as fp8_weight, fp4_weight, fp6_weight, int8_weight
from support.wgmma_cases import FP4, KERNEL, key, tile_for
from support.wgmma_launches import record_launches, two_experts


def test_unavailable_says_why() -> None:
    cfg = lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4)
    bf = torch.bfloat16
    cpu = torch.device("cpu")
    e4m3 = dict(W_BITS=8, W_PACK=0, W_MBITS=3, W_IS_INT=False, W_SAT=False)
    assert lw.unavailable(cpu, dict(e4m3, W_MBITS=2), 512, bf, bf,
                          cfg) == "packed mxfp4, mxfp6, mxfp8 e4m3 or mxint8 weights only"
    assert lw.weight_format(e4m3) == "mxfp8_e4m3"
    assert lw.weight_format(dict(e4m3, W_MBITS=2)) is None  # e5m2: not laid out for wgmma
    int8 = dict(W_BITS=8, W_PACK=0, W_MBITS=6, W_IS_INT=True, W_SAT=False)
    assert lw.weight_format(int8) == "mxint8"
    assert lw.unavailable(cpu, int8, 512, bf, bf, cfg) == (
        "needs an NVIDIA GPU" if wgmma_gates.INT8_VERIFIED else
        "mxint8 weights: written, not yet verified on a GPU")
    assert lw.unavailable(cpu, e4m3, 512, bf, bf, cfg) == (
        "needs an NVIDIA GPU" if wgmma_gates.FP8_VERIFIED else
        "mxfp8_e4m3 weights: written, not yet verified on a GPU")
    e3m2 = dict(W_BITS=6, W_PACK=2, W_MBITS=2, W_IS_INT=False, W_SAT=False)
    assert lw.weight_format(e3m2) == "mxfp6_e3m2"
    assert lw.weight_format(dict(e3m2, W_PACK=0, W_MBITS=3)) == "mxfp6_e2m3"
    assert lw.unavailable(cpu, e3m2, 512, bf, bf, cfg) == (
        "needs an NVIDIA GPU" if wgmma_gates.FP6_VERIFIED else
        "mxfp6_e3m2 weights: written, not yet verified on a GPU")
    assert lw.unavailable(cpu, FP4, 512, torch.float16, bf, cfg) == "bf16 x and output only"
    assert lw.unavailable(cpu, FP4, 400, bf, bf, cfg) == "K=400 is not whole 32-element blocks"
    assert lw.unavailable(cpu, FP4, 2880, bf, bf, cfg) == (
        "K=2880 is not a multiple of the K tile 256 (K tails: written, not yet verified on a GPU)"
        if not wgmma_gates.K_TAIL_VERIFIED else "needs an NVIDIA GPU")
    assert lw.unavailable(cpu, FP4, 512, bf, bf, cfg) == "needs an NVIDIA GPU"
    halves = lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4, sub_k=2, maxnreg=128)
    assert lw.unavailable(cpu, FP4, 512, bf, bf, halves) == (
        "needs an NVIDIA GPU" if wgmma_gates.SUB_K_VERIFIED else
        "sub_k=2 (K tiles in halves): written, not yet verified on a GPU")
    assert lw.unavailable(cpu, FP4, 512, bf, bf, dataclasses.replace(cfg, rep=2)) == (
        "needs an NVIDIA GPU" if wgmma_gates.REP_VERIFIED else
        "rep=2 (128 rows a warpgroup): written, not yet verified on a GPU")
    for bad in (dict(sub_k=3), dict(maxnreg=32), dict(maxnreg=256), dict(rep=4)):
        with pytest.raises(ValueError, match="sub_k=.* rep=.* maxnreg="):
            lw.WgmmaConfig(block_m=8, block_k=256, split=2, stages=4, **bad)
    ovl = dataclasses.replace(cfg, overlap=True)
    assert lw.unavailable(cpu, FP4, 512, bf, bf, ovl) == (
        "needs an NVIDIA GPU" if wgmma_gates.OVERLAP_VERIFIED else
        "overlap (each wgmma in flight under the next K tile's decode): written, not yet "
        "verified on a GPU")
    for bad in (dict(sub_k=2), dict(fuse_act=True), dict(stages=2),
                dict(ws=True, tma_x=True, stages=4)):
        with pytest.raises(ValueError, match=r"overlap=True .* needs sub_k=1, fuse_act=False"):
            lw.WgmmaConfig(block_m=16, block_k=256, split=1, **{"stages": 4, **bad},
                           overlap=True)


def test_the_overlapped_loop_runs_only_where_every_slice_has_pairs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """wgmma_config.overlap_fits and the plan's OVERLAP: K tiles in pairs, so every slice's
    count must be even (the last slice holds what is left); elsewhere a plan of an overlap
    config runs the plain loop (same bits), and the launch passes what the plan says."""
    assert wgmma_config.overlap_fits(32, 2, 16) and wgmma_config.overlap_fits(12, 1, 12)
    assert not wgmma_config.overlap_fits(12, 2, 6 + 1)  # slices of 7: odd
    assert not wgmma_config.overlap_fits(11, 2, 6)  # 6 and 5
    assert wgmma_config.overlap_fits(10, 3, 4)  # 4, 4, 2
    general, _ = record_launches(monkeypatch, None)
    gen = torch.Generator().manual_seed(5)
    for k, block_k, want in ((1024, 128, True), (1024, 256, True), (1280, 256, False),
                             (1536, 256, False), (2048, 256, True)):
        prepared = KERNEL.prepare(fp4_weight(64, k, gen),
                                  SchemeContract(weight=key("mxfp4"), activation=None))
        cfg = lw.WgmmaConfig(block_m=8, block_k=block_k, split=2, stages=4, overlap=True)
        fused_linear(torch.randn(1, k).to(torch.bfloat16), prepared, strategy="wgmma",
                     config=cfg)
        args = general[-1][3]
        assert args["OVERLAP"] is want and args["STAGES"] == 4, (k, block_k)


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


@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"))
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
    # the gates: what runs is not tested here
    monkeypatch.setattr(wgmma_gates, "WARPS_VERIFIED", (4, 8))
    monkeypatch.setattr(wgmma_config, "ACT_ROWS_VERIFIED", True)
    gen = torch.Generator().manual_seed(len(fmt))
    n, k = 200, 1024
    w = {"mxfp4": fp4_weight, "mxfp8_e4m3": fp8_weight, "mxint8": int8_weight}.get(
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
            # the fused QDQ on M's rows: one at M = 1, all 128 of the tile at M = 100
            assert args["ACT_ROWS"] == ({1: 1, 100: 128}[m] if args["ACT"] else 0)
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
        assert args["FMT"] == lw.FORMATS.index(fmt)


def test_later_calls_launch_the_first_calls_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a plan's first call on a stream, its calls go through a `launcher.Bound` (weight,
    workspace and constants fixed as ints): each must pass what the general path passes, with
    this call's x, out, M and strides; a call with bias, or where `current_stream` says no (a
    profiler's hooks, another device), takes the general path. Run here with the compiled
    kernel's launcher recorded. (The one-partition kernel's rows: the ws rows passed over; a ws
    plan's Bound: test_linear_wgmma_ws.)"""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", False)
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
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", True)
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
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", False)
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
        if cfg.tma_x and not wgmma_gates.TMA_X_VERIFIED else None))
    gen = torch.Generator().manual_seed(6)
    prepared = KERNEL.prepare(fp4_weight(200, 1024, gen), SchemeContract(weight=key("mxfp4"),
                                                                         activation=None))
    for gate in (False, True):
        monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", gate)
        assert wgmma_gates.table_config(row) == (row if gate else
                                                 dataclasses.replace(row, tma_x=False))
        prepared.cache.clear()
        fused_linear(torch.randn(40, 1024).to(torch.bfloat16), prepared)
        args = seen.pop()
        assert args["X_TMA"] is gate and args["BLOCK_M"] == 64 and args["SPLIT"] == 2
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", False)
    with pytest.raises(ValueError, match=r"'wgmma' cannot run this call: tma_x \(the x tile by "
                                         r"TMA\): written, not yet verified on a GPU"):
        fused_linear(torch.randn(40, 1024).to(torch.bfloat16), prepared, strategy="wgmma",
                     config=row)


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
        "needs an NVIDIA GPU" if wgmma_gates.TMA_X_VERIFIED else
        "tma_x (the x tile by TMA): written, not yet verified on a GPU")
    two = lw.WgmmaConfig(block_m=128, block_k=128, split=1, stages=3, warps=8)
    assert lw.unavailable(torch.device("cpu"), FP4, 512, bf, bf, two) == (
        "needs an NVIDIA GPU" if 8 in wgmma_gates.WARPS_VERIFIED else
        "warps=8 (two warpgroups): written, not yet verified on a GPU")


@pytest.mark.parametrize("verified", (False, True))
def test_the_fused_qdq_covers_the_rows_a_plan_can_have(verified: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """wgmma_config.act_rows: one row for a one-row plan; else M's bucket, at least the 8 rows
    of the x tile's swizzle, below block_m; block_m where the bucket fills the tile, and
    always while the rows gate is off (the whole tile, as before it)."""
    monkeypatch.setattr(wgmma_config, "ACT_ROWS_VERIFIED", verified)
    cases = {(8, 1): 1, (16, 1): 1, (128, 1): 1, (32, 16): 16, (128, 16): 16, (32, 5): 8,
             (64, 9): 16, (16, 16): 16, (8, 16): 8, (128, 128): 128, (256, 1 << 30): 256}
    for (block_m, m_max), rows in cases.items():
        assert wgmma_config.act_rows(block_m, m_max) == (rows if verified else block_m), \
            (block_m, m_max)


@pytest.mark.parametrize("warps", (4, 8))
def test_the_fused_qdq_layout_splits_no_element_it_need_not(warps: int) -> None:
    """wgmma_tiles.qdq_layout over every view the kernel QDQs (one row's 64-column blocks
    [block_k / 64, 64], or [rows, block_k]): a thread's elements are consecutive and inside one
    32-element block; the layout's one pass fits in the view wherever the view has an element
    for each thread (no two threads QDQ one element), and covers it in whole passes."""
    views = [(bk // 64, 64) for bk in (128, 256, 512)] + [
        (r, bk) for r in (8, 16, 32, 64, 128) for bk in (128, 256, 512)]
    for rows, cols in views:
        layout = wgmma_tiles.qdq_layout(rows, cols, warps)
        each = layout.size_per_thread[1]
        span = [layout.size_per_thread[d] * layout.threads_per_warp[d]
                * layout.warps_per_cta[d] for d in (0, 1)]
        assert layout.size_per_thread[0] == 1 and 32 % each == 0, (rows, cols)
        assert cols % span[1] == 0 and (rows % span[0] == 0 or rows < span[0]), (rows, cols)
        if rows * cols >= 32 * warps:
            assert span[0] <= rows and span[1] <= cols, (rows, cols, span)


def test_a_table_rows_overlap_runs_the_plain_loop_while_gated_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`table_config`: a row measured with the overlapped K loop runs the plain loop (the same
    bits) while OVERLAP_VERIFIED is off, as a tma_x row runs without TMA; on, the row as it is."""
    row = lw.WgmmaConfig(block_m=16, block_k=128, split=2, stages=5, overlap=True, tma_x=True)
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "OVERLAP_VERIFIED", False)
    assert wgmma_gates.table_config(row) == dataclasses.replace(row, overlap=False)
    monkeypatch.setattr(wgmma_gates, "TMA_X_VERIFIED", False)
    assert wgmma_gates.table_config(row) == dataclasses.replace(row, overlap=False, tma_x=False)
    monkeypatch.setattr(wgmma_gates, "OVERLAP_VERIFIED", True)
    assert wgmma_gates.table_config(row) == dataclasses.replace(row, tma_x=False)
