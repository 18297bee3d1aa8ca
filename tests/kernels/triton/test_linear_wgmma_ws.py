"""The warp-specialized wgmma kernel (kernels/triton/linear_wgmma_ws.py, `WgmmaConfig.ws`).

On the CPU (CI): the config's rules, the gate, the weight descriptors (a tile's box is the
tile's words, B words and scale bytes of the prepared layout), the launch's arguments, and the
kernel compiled for sm_90a (its copies, their byte count, the register split, no spills).
On an sm_90 GPU, the kernel's bits: test_linear_wgmma_ws_gpu.py.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.base import load_kernel
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import fp4_words as fw
from kernels.triton import linear_wgmma as lw
from kernels.triton import linear_wgmma_ws as ws
from kernels.triton import wgmma_gates
from kernels.triton.fp6_words import wgmma_layout_fp6
from kernels.triton.linear_emulation import fused_linear
from support.mx_weights import e4m3_weight, fp4_weight, fp6_weight
from support.sm90_compile import SM90_SHARED, case_ids, compile_cases
from support.wgmma_launches import record_launches, two_experts

KERNEL = load_kernel("triton-emulation")


def key(name: str) -> QuantKey:
    return QuantKey.mx(name, rounding="even", static=True)


def ws_config(**kw) -> lw.WgmmaConfig:
    return lw.WgmmaConfig(**{**dict(block_m=64, block_k=128, split=1, stages=4, tma_x=True,
                                    ws=True), **kw})


def test_ws_configs_need_two_4_warp_consumers_and_tma() -> None:
    ws_config()  # fine
    with pytest.raises(ValueError, match=r"ws=True needs an even number of stages \(got 3\): "
                                         r"each consumer owns every other ring slot"):
        ws_config(stages=3)
    for bad in (dict(warps=8), dict(rep=2), dict(sub_k=2), dict(fuse_act=True),
                dict(tma_x=False)):
        with pytest.raises(ValueError, match=r"ws=True runs two 4-warp consumers of 64 rows "
                                             r"with x by TMA: it needs warps=4"):
            ws_config(**bad)


def test_the_wide_tile_is_ws_only_and_gated(monkeypatch) -> None:
    """block_m 256 (large M: two consumers of 64 weight rows, both reading every K tile, so odd
    stages are fine): ws only; gated (passed over, refused with the reason, by MoE experts
    too), and its split-K by a gate of its own; any number of M tiles once open."""
    wide = ws_config(block_m=256, stages=3)
    with pytest.raises(ValueError, match=r"block_m=256 \(large M: two consumers of 64 weight "
                                         r"rows on all 256 rows\) runs the warp-specialized "
                                         r"kernel only \(got ws=False\)"):
        lw.WgmmaConfig(block_m=256, block_k=128, split=1, stages=2)
    split = ws_config(block_m=256, stages=3, split=2)
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", False)
    assert wgmma_gates.gated(split) == ("block_m=256 with split-K (split=2): written, not yet "
                                        "verified on a GPU") and wgmma_gates.passed_over(split)
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", True)
    assert wgmma_gates.gated(split) is None and not wgmma_gates.passed_over(split)
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", False)
    reason = ("block_m=256 (large M, two consumers of 64 weight rows): written, not yet "
              "verified on a GPU")
    assert wgmma_gates.gated(wide) == reason and wgmma_gates.passed_over(wide)
    bf, fp4 = torch.bfloat16, {"W_PACK": 1, "W_BITS": 4, "W_SAT": False}
    assert lw.unavailable(torch.device("cpu"), fp4, 1024, bf, bf, wide, m=1 << 30) == reason
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    assert wgmma_gates.gated(wide) is None and not wgmma_gates.passed_over(wide)
    # past the one-M-tile rule (the next check is the device's)
    assert lw.unavailable(torch.device("cpu"), fp4, 1024, bf, bf, wide, m=1 << 30) == \
        "needs an NVIDIA GPU"
    assert lw.unavailable(torch.device("cpu"), fp4, 1024, bf, bf, ws_config(block_m=128),
                          m=1 << 30) == "M=1073741824 rows need one M tile (block_m=128)"
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", False)  # MoE experts: the same gate
    with pytest.raises(ValueError, match=r"moe_wgmma: block_m=256 \(large M, two consumers of 64 "
                                         r"weight rows\): written, not yet verified on a GPU"):
        small_moe_call(wide, monkeypatch)


def test_the_program_order_is_the_wide_tiles_and_dense_only(monkeypatch) -> None:
    """group_m (bands of M tiles walking N together, for L2): 1..64, past 1 the wide tile only
    (a smaller tile runs one M tile a call); MoE experts (a tile table, not a grid of M tiles)
    refuse it, and overlap, in one line rather than run without them."""
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    assert ws_config(block_m=256, stages=2, group_m=8).group_m == 8
    for bad in (dict(block_m=256, stages=2, group_m=0), dict(block_m=256, stages=2, group_m=65),
                dict(group_m=2)):
        with pytest.raises(ValueError, match=r"group_m=\d+ needs 1..64 and, past 1, "
                                             r"block_m=256 \(got \d+\): M tiles a band"):
            ws_config(**bad)
    for cfg in (ws_config(block_m=256, stages=2, group_m=4),
                lw.WgmmaConfig(block_m=16, block_k=128, split=1, stages=3, overlap=True)):
        monkeypatch.setattr(wgmma_gates, "OVERLAP_VERIFIED", True)
        with pytest.raises(ValueError, match=r"moe_wgmma: overlap=\w+ / group_m=\d+ / "
                                             r"persistent=False are dense launches' \(the "
                                             r"experts' grid is a tile table\)"):
            small_moe_call(cfg, monkeypatch)


def test_persistent_programs_are_the_wide_tiles_dense_and_gated(monkeypatch) -> None:
    """persistent (a program an SM walking output tiles): the wide tile without split-K only;
    gated (passed over, its reason); MoE experts refuse it in one line; the launch is at most
    a program an SM, grid axis 0 alone, and passes PERSIST (whose kernel keeps each tile's K
    order: the grid order's bits, checked on the GPU)."""
    pst = ws_config(block_m=256, stages=3, persistent=True)
    for bad in (dict(block_m=128), dict(block_m=256, stages=3, split=2)):
        with pytest.raises(ValueError, match=r"persistent=True needs block_m=256 and split=1 "
                                             r"\(got block_m=\d+, split=\d\): its programs walk"):
            ws_config(persistent=True, **bad)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "PERSISTENT_VERIFIED", False)
    assert wgmma_gates.gated(pst) == ("persistent (a program an SM walking the wide tile's "
                                      "output tiles): written, not yet verified on a GPU")
    assert wgmma_gates.passed_over(pst)
    monkeypatch.setattr(wgmma_gates, "PERSISTENT_VERIFIED", True)
    assert wgmma_gates.gated(pst) is None and not wgmma_gates.passed_over(pst)
    with pytest.raises(ValueError, match=r"moe_wgmma: overlap=False / group_m=1 / "
                                         r"persistent=True are dense launches'"):
        small_moe_call(pst, monkeypatch)
    general, _ = record_launches(monkeypatch, pst)
    monkeypatch.setattr(lw, "sm_count", lambda device: 7)
    gen = torch.Generator().manual_seed(9)
    k = 512
    prepared = KERNEL.prepare(fp4_weight(600, k, gen), SchemeContract(weight=key("mxfp4"),
                                                                      activation=None))
    for m, programs in ((1100, 7), (300, 7), (200, 5)):  # 5 weight tiles x 5 / 2 / 1 M tiles
        fused_linear(torch.randn(m, k).to(torch.bfloat16), prepared, torch.randn(600))
        fn, warps, grid, args = general.pop()
        assert fn is ws._ws_linear_kernel and grid == (programs, 1, 1), (m, grid)
        assert args["PERSIST"] is True and args["SPLIT"] == 1 and args["M"] == m



def test_xs_own_ring_is_persistent_deeper_and_gated(monkeypatch) -> None:
    """x_stages (x in a ring of its own): persistent only and deeper than the weights' ring,
    refused in one line otherwise; gated (passed over, its reason); the launch passes
    X_STAGES, and a config without it passes 0 (one ring: the kernel as before)."""
    pst = ws_config(block_m=256, stages=2, persistent=True)
    for bad in (dict(persistent=False, x_stages=3), dict(persistent=True, x_stages=2)):
        with pytest.raises(ValueError, match=r"x_stages=\d \(x tiles in a ring of their own\) "
                                             r"needs persistent=True and more slots than "
                                             r"stages=2 \(got persistent=(True|False)\)"):
            ws_config(block_m=256, stages=2, **bad)
    x3 = dataclasses.replace(pst, x_stages=3)
    for gate in ("WIDE_M_VERIFIED", "PERSISTENT_VERIFIED"):
        monkeypatch.setattr(wgmma_gates, gate, True)
    monkeypatch.setattr(wgmma_gates, "X_RING_VERIFIED", False)
    assert wgmma_gates.gated(x3) == ("x_stages=3 (x in a ring of its own): written, not yet "
                                     "verified on a GPU")
    assert wgmma_gates.passed_over(x3) and not wgmma_gates.passed_over(pst)
    monkeypatch.setattr(wgmma_gates, "X_RING_VERIFIED", True)
    general, _ = record_launches(monkeypatch, x3)
    monkeypatch.setattr(lw, "sm_count", lambda device: 7)
    gen = torch.Generator().manual_seed(10)
    prepared = KERNEL.prepare(fp4_weight(600, 512, gen), SchemeContract(weight=key("mxfp4"),
                                                                        activation=None))
    for cfg, want in ((x3, 3), (pst, 0)):
        fused_linear(torch.randn(300, 512).to(torch.bfloat16), prepared, None,
                     strategy="wgmma", config=cfg)
        fn, warps, grid, args = general.pop()
        assert fn is ws._ws_linear_kernel and args["X_STAGES"] == want and args["PERSIST"]

def small_moe_call(cfg, monkeypatch) -> None:
    """Four tokens through two small mxfp4 experts with `cfg` (the launch's refusals)."""
    from kernels.triton import moe_wgmma

    gen = torch.Generator().manual_seed(6)
    moe_wgmma.grouped_experts_wgmma(
        torch.randn(4, 256).to(torch.bfloat16), two_experts(fp4_weight(128, 256, gen),
                                                            monkeypatch),
        None, torch.zeros(4, 1, dtype=torch.int64), torch.ones(4, 1), torch.float32, {}, cfg)


def test_a_gated_ws_row_is_passed_over_and_a_callers_is_refused(monkeypatch) -> None:
    """While ws is gated off the table's ws rows are passed over (the next row that serves the
    layer runs: what ran before they were added), a caller's ws config is refused with the
    reason; MoE experts never take a ws row (dense only)."""
    from kernels.triton import linear_configs as lc

    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", False)
    cfg = ws_config()
    assert wgmma_gates.passed_over(cfg) and wgmma_gates.table_config(cfg) == cfg
    assert wgmma_gates.gated(cfg) == ("ws (warp-specialized: a TMA loader warp, two consumers): "
                             "written, not yet verified on a GPU")
    with pytest.raises(ValueError, match=r"moe_wgmma: ws \(warp-specialized: a TMA loader warp, "
                                         r"two consumers\): written, not yet verified on a GPU; "
                                         r"use a config without that part"):
        small_moe_call(cfg, monkeypatch)
    ws_rows = [r for r in lc.TABLE if getattr(r.config, "ws", False)]
    assert ws_rows
    for row in ws_rows:
        m, n = row.m_max, max(row.n_min, 8192)
        off = lc.choose(row.family, m, False, n=n, k=8192, passed_over=wgmma_gates.passed_over)
        if m > 128:  # the wide tile's rows: nothing past them (dequant-gemm runs)
            assert off is None, row
            continue
        assert not off.config.ws and off.strategy == "wgmma", row
        assert not lc.config_for("wgmma", row.family, m, False, n=n, k=8192,
                                 experts=True).ws
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    assert not wgmma_gates.passed_over(cfg) and wgmma_gates.gated(cfg) is None
    for row in ws_rows:
        on = lc.choose(row.family, row.m_max, False, n=8192, k=8192,
                       passed_over=wgmma_gates.passed_over)
        assert on.config.ws, row  # the rows serve N = 8192 (no wide-layer class)


@pytest.mark.parametrize("block_k", (128, 256, 512))
@pytest.mark.parametrize("fmt", ("mxfp4", "mxfp6_e3m2", "mxfp8_e4m3"))
def test_each_tiles_box_is_that_tiles_run_of_the_layout(fmt: str, block_k: int) -> None:
    """Box t of each descriptor (rows t * box_rows ...) holds exactly K tile t's words, B words
    and scale bytes of the one layout (64-row blocks, each K padded to whole 512: whole tiles
    of any block_k, in (block, K tile) order); the descriptors are built once a layout and
    K tile."""
    gen = torch.Generator().manual_seed(block_k + len(fmt))
    n, k = 136, 640
    if fmt == "mxfp4":
        w = fp4_weight(n, k, gen)
        words, sbytes = fw.wgmma_layout(w.data, w.scales, 128, 4, fw.ALIGN)
        bwords = None
    elif fmt == "mxfp8_e4m3":
        from kernels.triton.fp8_words import wgmma_layout_fp8
        w = e4m3_weight(n, k, gen)
        words, bwords, sbytes = wgmma_layout_fp8(w.data, w.scales, 128, 4, fw.ALIGN)
    else:
        w = fp6_weight(fmt, n, k, "unpacked", gen)
        words, bwords, sbytes = wgmma_layout_fp6(w.data, w.scales, fmt, 128, 4, fw.ALIGN)
    cache: dict = {}
    dw, db, ds = ws.ws_descriptors(cache, "layout", words, bwords, sbytes, block_k)
    again = ws.ws_descriptors(cache, "layout", words, bwords, sbytes, block_k)  # built once
    assert all(a is b for a, b in zip(again, (dw, db, ds)))
    tiles = -(-n // 128) * 2 * -(-k // 512) * (512 // block_k)
    for desc, src, per_tile in ((dw, words, 8 * block_k), (ds, sbytes, 2 * block_k),
                                (db, words if bwords is None else bwords,
                                 (words if bwords is None else bwords).numel() // tiles)):
        assert src.numel() == tiles * per_tile
        rows, row = desc.block_shape
        assert row == ws.ROW and rows * row == per_tile, (desc.block_shape, per_tile)
        assert list(desc.shape) == [src.numel() // ws.ROW, ws.ROW]
        assert desc.base.data_ptr() == src.data_ptr()
        flat = desc.base.reshape(-1, ws.ROW)
        for t in (0, 1, tiles - 1):
            assert torch.equal(flat[t * rows:(t + 1) * rows].reshape(-1),
                               src.reshape(-1)[t * per_tile:(t + 1) * per_tile])


def test_a_ws_plan_launches_the_ws_kernel_with_descriptors(monkeypatch) -> None:
    """The first call passes the weight's three descriptors and x's; later calls (Bound) keep
    the weight's and pass each call's x as an XDesc; 4 warps (the first consumer)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    assert ws._ws_linear_kernel.arg_names == lw._wgmma_linear_kernel.arg_names  # one launch path
    cfg = ws_config(split=2)
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    general, bound = record_launches(monkeypatch, cfg)
    gen = torch.Generator().manual_seed(5)
    n, k = 200, 1024
    prepared = KERNEL.prepare(fp4_weight(n, k, gen), SchemeContract(weight=key("mxfp4"),
                                                                    activation=None))
    fused_linear(torch.randn(40, k).to(torch.bfloat16), prepared)
    fn, warps, grid, first = general.pop()
    assert fn is ws._ws_linear_kernel and warps == 4 and grid == (4, 1, 2)
    for name, rows in (("w_ptr", 4), ("b_ptr", 4), ("s_ptr", 1)):
        assert isinstance(first[name], TensorDescriptor), name
        assert list(first[name].block_shape) == [rows, ws.ROW], name
    assert isinstance(first["x_ptr"], TensorDescriptor) and first["X_TMA"] is True
    x = torch.randn(50, k).to(torch.bfloat16)
    fused_linear(x, prepared)
    got = bound.pop()
    assert not general and got["x_ptr"].base.data_ptr() == x.data_ptr() and got["M"] == 50
    assert all(got[p] is first[p] for p in ("w_ptr", "b_ptr", "s_ptr"))

    # MoE experts: the same kernel, GROUPED, descriptors of every expert's layout (built once)
    from kernels.triton import moe_wgmma
    ex = two_experts(fp4_weight(n, k, gen), monkeypatch)
    ids = torch.randint(0, 2, (30, 1), generator=gen)
    cached: dict = {}
    for _ in range(2):
        moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex, None, ids,
                                        torch.ones(30, 1), torch.float32, cached, cfg)
    (fn, warps, grid, one), (_, _, _, two) = general[-2:]
    assert fn is ws._ws_linear_kernel and warps == 4 and one["GROUPED"] and grid[2] == 2
    assert isinstance(one["w_ptr"], TensorDescriptor) and one["w_ptr"] is two["w_ptr"]
    assert one["stride_we"] * 2 == one["w_ptr"].base.numel()  # an expert's words
    assert list(one["s_ptr"].block_shape) == [1, ws.ROW]


def test_the_wide_tiles_split_k_counts_a_lock_a_consumer(monkeypatch) -> None:
    """The wide tile finishes two output tiles a program (one a consumer, each a split-K counter
    of its own: `WgmmaConfig.parts`), so a launch keeps split-K only while programs x 2 counters
    fit the lock array — dense plans and MoE experts alike (the launch recorded, the lock
    array made small)."""
    from kernels.triton import moe_wgmma, wgmma_config

    cfg = ws_config(block_m=256, stages=3, split=2)
    assert cfg.parts == 2 and ws_config().parts == 1
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_M_VERIFIED", True)
    monkeypatch.setattr(wgmma_gates, "WIDE_SPLIT_VERIFIED", True)
    general, _ = record_launches(monkeypatch, cfg)
    gen = torch.Generator().manual_seed(8)
    n, k = 512, 1024
    w = fp4_weight(n, k, gen)
    for locks, split in ((8, 2), (7, 1)):  # dense: 4 programs (N / 128), 8 counters
        monkeypatch.setattr(wgmma_config, "_LOCK_TILES", locks)
        fused_linear(torch.randn(40, k).to(torch.bfloat16), KERNEL.prepare(
            w, SchemeContract(weight=key("mxfp4"), activation=None)))
        assert general.pop()[2][2] == split, locks
    ex = two_experts(w, monkeypatch)  # 2 experts of 256 rows: 2 x 3 slots, 12 counters
    for locks, split in ((12, 2), (11, 1)):
        monkeypatch.setattr(moe_wgmma, "_LOCK_TILES", locks)
        moe_wgmma.grouped_experts_wgmma(torch.randn(30, k).to(torch.bfloat16), ex, None,
                                        torch.randint(0, 2, (30, 1), generator=gen),
                                        torch.ones(30, 1), torch.float32, {}, cfg)
        assert general.pop()[2][2] == split, locks


_COMPILE = """
import json, sys
from support.sm90_compile import ptx_facts, wgmma_signature, ws_consts
found = []
for c in json.loads(sys.stdin.read()):
    consts = ws_consts(c)
    kern, sig, attrs = wgmma_signature(consts, ws=True)
    found.append(ptx_facts(kern, sig, consts, attrs, (
        r"wgmma\\.mma_async", r"m64n256k16", r"st\\.shared", r"cp\\.async\\.bulk\\.tensor",
        r"cp\\.async\\.cg", r"ld\\.local", r"st\\.local", r"%nctaid\\.y")))
print(json.dumps(found))
"""

COMPILE_CASES = [
    dict(BLOCK_M=16, BLOCK_K=128, STAGES=4, FMT=0, SPLIT=1, HAS_BIAS=False),
    dict(BLOCK_M=128, BLOCK_K=128, STAGES=4, FMT=0, SPLIT=2, HAS_BIAS=True),
    dict(BLOCK_M=8, BLOCK_K=256, STAGES=6, FMT=1, SPLIT=2, HAS_BIAS=False),
    dict(BLOCK_M=32, BLOCK_K=256, STAGES=2, FMT=2, SPLIT=1, HAS_BIAS=True),
    dict(BLOCK_M=64, BLOCK_K=128, STAGES=4, FMT=3, SPLIT=1, HAS_BIAS=False),
    dict(BLOCK_M=16, BLOCK_K=512, STAGES=4, FMT=0, SPLIT=1, HAS_BIAS=False),
    dict(BLOCK_M=128, BLOCK_K=128, STAGES=4, FMT=0, SPLIT=2, HAS_BIAS=False, GROUPED=True),
    dict(BLOCK_M=64, BLOCK_K=256, STAGES=2, FMT=2, SPLIT=1, HAS_BIAS=False, GROUPED=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=3, FMT=0, SPLIT=1, HAS_BIAS=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=2, SPLIT=1, HAS_BIAS=False),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=3, SPLIT=1, HAS_BIAS=False),
    dict(BLOCK_M=8, BLOCK_K=256, STAGES=6, FMT=4, SPLIT=2, HAS_BIAS=False),  # mxint8
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=4, SPLIT=2, HAS_BIAS=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=3, SPLIT=1, HAS_BIAS=False, GROUPED=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=3, FMT=0, SPLIT=1, HAS_BIAS=False, GROUPED=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=3, FMT=0, SPLIT=2, HAS_BIAS=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=2, SPLIT=3, HAS_BIAS=False, GROUPED=True),
    # the programs in bands of M tiles (GROUP_M: wgmma_tiles.tile_ids)
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=3, SPLIT=1, HAS_BIAS=False, GROUP_M=8),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=3, FMT=0, SPLIT=2, HAS_BIAS=True, GROUP_M=4),
    # persistent programs (a program an SM walking the output tiles)
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=3, FMT=0, SPLIT=1, HAS_BIAS=True, PERSIST=True),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=2, SPLIT=1, HAS_BIAS=False, PERSIST=True,
         GROUP_M=4),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=3, SPLIT=1, HAS_BIAS=False, PERSIST=True),
    # ... with x in a ring of its own (3 x slots beside 2 of the weights: 225 KiB for 8-bit)
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=3, SPLIT=1, HAS_BIAS=False, PERSIST=True,
         GROUP_M=4, X_STAGES=3),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=2, SPLIT=1, HAS_BIAS=True, PERSIST=True,
         X_STAGES=3),
    dict(BLOCK_M=256, BLOCK_K=128, STAGES=2, FMT=4, SPLIT=1, HAS_BIAS=False, PERSIST=True,
         GROUP_M=4, X_STAGES=3)]


@pytest.fixture(scope="module")
def compiled_cases() -> list:
    return compile_cases(_COMPILE, COMPILE_CASES)


@pytest.mark.parametrize("index", range(len(COMPILE_CASES)), ids=case_ids(COMPILE_CASES))
def test_the_ws_kernel_compiles_for_sm90(index: int, compiled_cases: list) -> None:
    """For sm_90a (no GPU needed): two consumers' wgmmas (BLOCK_K / 16 each; block_m 256:
    m64n256); every copy by TMA (x in 64-column boxes, words, B words, scale bytes: block_m 256
    two blocks' of each), none by cp.async; each slot's barrier expects exactly those bytes;
    the loader / consumer register split (setmaxnreg 40 / 232); no spills; within sm_90's
    shared memory; shared stores only for the second consumer's accumulator."""
    c, found = COMPILE_CASES[index], compiled_cases[index]
    assert "error" not in found, found.get("error")
    wide = c["BLOCK_M"] == 256
    assert found[r"wgmma\.mma_async"] == 2 * c["BLOCK_K"] // 16
    assert found[r"m64n256k16"] == (2 * c["BLOCK_K"] // 16 if wide else 0)
    weight_copies = (3 if c["FMT"] else 2) * (2 if wide else 1)
    assert found[r"cp\.async\.bulk\.tensor"] == c["BLOCK_K"] // 64 + weight_copies
    assert found[r"cp\.async\.cg"] == 0
    tw = 8 * c["BLOCK_K"]
    tb = {0: 0, 1: tw // 2, 2: tw // 2, 3: tw, 4: tw}[c["FMT"]]
    weight_bytes = (4 * (tw + tb) + 2 * c["BLOCK_K"]) * (2 if wide else 1)
    x_bytes = c["BLOCK_M"] * c["BLOCK_K"] * 2
    # x in a ring of its own: x and the weights each complete on their own barriers
    assert found["expect"] == (sorted([weight_bytes, x_bytes]) if c.get("X_STAGES") else
                               [x_bytes + weight_bytes])
    assert found["shared"] <= SM90_SHARED
    assert {40, 232} <= set(found["setmaxnreg"])
    assert found[r"ld\.local"] == 0 and found[r"st\.local"] == 0
    assert found[r"st\.shared"] <= c["BLOCK_M"] // 4 + 8  # (a decoded tile: 8 more a 128 K)
    # the grid's M extent is read by the banded order only (and a split tile's partials, an
    # MoE tile table's size); persistent programs walk a tile grid of their own (M, N)
    assert (found[r"%nctaid\.y"] > 0) == (not c.get("PERSIST") and (
        c.get("GROUP_M", 1) > 1 or c["SPLIT"] > 1 or c.get("GROUPED", False)))
