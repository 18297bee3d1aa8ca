"""Triton MX kernels (kernels.triton.mx_quant) against the pure-torch reference, bit for bit.

Runs in Triton's CPU interpreter when there is no GPU (tests/conftest.py sets TRITON_INTERPRET),
so shapes stay small. Float outputs compare NaN positions plus the bits of everything else (NaN
payloads differ between devices and are not part of the contract).
"""
from __future__ import annotations

import math
import zlib

import ml_dtypes
import numpy as np
import pytest
import torch

from kernels.reference import mx as ref
from kernels.reference.packing import pack_codes
from kernels.spec.formats import FORMATS, ROUNDINGS, ElemFormat, bytes_per_row
from kernels.triton import hw_cvt
from kernels.triton import mx_quant as _tri
from kernels.triton import qdq_plan as _qdq

from support.device import DEVICE
from support.hw_cvt_path import through_hw_cvt


class _OnDevice:
    """mx_quant's functions run on DEVICE (the GPU, when there is one); results come back to the
    CPU, so the same test compares compiled kernels with the reference on a GPU machine."""

    def __getattr__(self, name: str):
        fn = getattr(_tri, name)
        if not callable(fn):
            return fn

        def call(*args):
            out = fn(*[a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args])
            return tuple(o.cpu() for o in out) if isinstance(out, tuple) else out.cpu()
        return call


tri = _tri if DEVICE == "cpu" else _OnDevice()

# The interpreter's numpy reports intended overflows to Inf (large scales, fp16 casts) and the
# Inf - Inf of NaN / Inf blocks, whose results the kernels discard.
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

FMT_LAYOUTS = [(name, layout) for name, f in FORMATS.items()
               for layout in (("packed", "unpacked") if f.bits < 8 else ("unpacked",))]
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (what, got.dtype, want.dtype)
    if not got.dtype.is_floating_point:
        bad = (got != want).nonzero()
        first = tuple(bad[0].tolist()) if bad.numel() else None
        assert first is None, (f"{what}: {len(bad)} differ, first at {first}: "
                               f"{got[first]} vs {want[first]}")
        return
    nan_got, nan_want = got.isnan(), want.isnan()
    assert torch.equal(nan_got, nan_want), f"{what}: NaN positions differ"
    ints = torch.int32 if got.element_size() == 4 else torch.int16
    g, w = got.view(ints)[~nan_got], want.view(ints)[~nan_want]
    bad = (g != w).nonzero()
    assert bad.numel() == 0, (f"{what}: {len(bad)} values differ, e.g. bits "
                              f"{g[bad[0]].item():#x} vs {w[bad[0]].item():#x}")


def grid_values(fmt: ElemFormat) -> list[float]:
    """The non-negative finite values of the element format, ascending."""
    from kernels.reference.elements import code_value
    vals = {code_value(fmt, c) for c in range(1 << (fmt.bits - 1))}
    return sorted(v for v in vals if math.isfinite(v) and v >= 0)


def special_blocks(fmt: ElemFormat, gen: torch.Generator) -> list[torch.Tensor]:
    """32-element blocks that stress the rules: non-finite, zero, subnormal, ties, huge, edges."""
    def rnd(scale: float = 1.0) -> torch.Tensor:
        return torch.randn(32, generator=gen) * scale

    grid = torch.tensor(grid_values(fmt))
    mids = (grid[1:] + grid[:-1]) / 2  # exact ties once scaled by 2**S (E = S: amax = maxn*2**S)
    s = int(torch.randint(-12, 12, (), generator=gen))
    ties = torch.cat([mids, grid[:1]]).repeat(32)[:31] * 2.0**s
    ties = torch.cat([ties * torch.where(torch.rand(31, generator=gen) < 0.5, -1.0, 1.0),
                      torch.tensor([fmt.max_normal * 2.0**s])])
    maxn_up = torch.tensor(fmt.max_normal * 2.0**s).nextafter(torch.tensor(math.inf))
    blocks = [
        torch.cat([rnd(3.0)[:31], torch.tensor([math.nan])]),
        torch.cat([torch.tensor([math.inf]), rnd()[1:]]),
        torch.cat([rnd()[:16], torch.tensor([-math.inf]), rnd()[17:]]),
        torch.zeros(32),
        torch.full((32,), -0.0),
        torch.where(rnd() > 0, 0.0, -0.0) + torch.zeros(32) * rnd(),
        rnd(1e-39),  # fp32 subnormals
        rnd(1e-44),  # tiny fp32 subnormals
        torch.tensor([0x007FFFFF, 0x007F0001, 0x007F0000, 0x00400000] + [0x00010000] * 28,
                     dtype=torch.int32).view(torch.float32),  # subnormal amax edges
        torch.tensor([0x007F0000, 0x007E0001] * 16, dtype=torch.int32).view(torch.float32),
        torch.tensor([0x007E8000, -0x7F810000] * 16, dtype=torch.int32).view(torch.float32),
        ties,
        rnd(1e38),
        torch.cat([rnd(1e30)[:31], torch.tensor([3.4028234e38])]),
        torch.cat([rnd(2.0**s)[:31], maxn_up.view(1)]),  # rceil: just above max_normal * 2**S
        torch.full((32,), fmt.max_normal * 1.0000001 * 2.0**s),
        torch.linspace(-1, 1, 32) * (fmt.max_normal * 2.0**s),
    ]
    return [b.to(torch.float32) for b in blocks]


def make_input(fmt: ElemFormat, r: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random rows with per-block scales 2**[-30, 30], then special blocks at random places."""
    gen = torch.Generator().manual_seed(seed)
    nb = k // 32
    scale = torch.exp2(torch.randint(-30, 30, (r, nb, 1), generator=gen).float())
    x = (torch.randn(r, nb, 32, generator=gen) * scale).view(r * nb, 32)
    specials = special_blocks(fmt, gen)
    places = torch.randperm(r * nb, generator=gen)[: len(specials)]
    for place, block in zip(places.tolist(), specials):
        x[place] = block
    return x.view(r, k).to(dtype)


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("name,layout", FMT_LAYOUTS)
def test_bits_match_reference(name: str, layout: str, rounding: str) -> None:
    fmt = FORMATS[name]
    seed = zlib.crc32(f"{name} {layout} {rounding}".encode()) % 10_000
    for i, (dtype, (r, k)) in enumerate(zip(DTYPES, ((37, 160), (21, 64), (5, 96)))):
        x = make_input(fmt, r, k, dtype, seed + i)
        data, scales = tri.quantize(x, fmt, rounding, layout)
        want_data, want_scales = ref.quantize(x, fmt, rounding, layout)
        where = f"{name} {layout} {rounding} {dtype} [{r}, {k}]"
        assert data.shape == (r, bytes_per_row(fmt, layout, k))
        assert_same(scales, want_scales, f"scales {where}")
        assert_same(data, want_data, f"data {where}")
        for out_dtype in DTYPES:
            assert_same(tri.dequantize(data, scales, fmt, layout, k, out_dtype),
                        ref.dequantize(data, scales, fmt, layout, k, out_dtype),
                        f"dequantize -> {out_dtype} {where}")
        out = tri.qdq(x, fmt, rounding)
        assert_same(out, ref.qdq(x, fmt, rounding), f"qdq {where}")
        assert_same(out, tri.dequantize(data, scales, fmt, layout, k, dtype),
                    f"qdq vs dq(q) {where}")


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("name,layout", FMT_LAYOUTS)
def test_bits_through_hw_cvt_match_reference(name: str, layout: str, rounding: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The same inputs and checks through hw_cvt's paths: quantize's elements rounded by the
    fp8 conversion (mxfp6 / mxfp8), dequantize's codes decoded by it, its output saturated and
    rounded by one conversion (on a GPU)."""
    through_hw_cvt(monkeypatch, FORMATS[name])
    test_bits_match_reference(name, layout, rounding)


@pytest.mark.parametrize("name,path", [(name, path) for name in ("mxfp4", "mxfp6_e3m2",
                                                                  "mxfp8_e4m3", "mxint8")
                                        for path in ("encode", "hw cvt")
                                        if path == "encode" or name != "mxint8"])
def test_shapes_strides_and_masking(name: str, path: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """K = 32, K < / not a multiple of the tile, R not a multiple of BLOCK_R, a flattened 3-D
    input, a row-strided view, and zero rows."""
    fmt = FORMATS[name]
    if path == "hw cvt":
        through_hw_cvt(monkeypatch, fmt)
    layout = "packed" if fmt.bits < 8 else "unpacked"
    gen = torch.Generator().manual_seed(7)
    cases = [torch.randn(1, 32, generator=gen), torch.randn(17, 32, generator=gen),
             torch.randn(3, 224, generator=gen),
             torch.randn(2, 3, 96, generator=gen).to(torch.bfloat16).reshape(-1, 96),
             torch.randn(19, 192, generator=gen)[:, 32:160],  # row stride 192, K = 128
             torch.randn(0, 64, generator=gen)]
    for x in cases:
        for rounding in ("floor", "rceil"):
            got = tri.quantize(x, fmt, rounding, layout)
            want = ref.quantize(x, fmt, rounding, layout)
            assert_same(got[0], want[0], f"data {tuple(x.shape)}")
            assert_same(got[1], want[1], f"scales {tuple(x.shape)}")
            assert_same(tri.qdq(x, fmt, rounding), ref.qdq(x, fmt, rounding),
                        f"qdq {tuple(x.shape)}")


@pytest.mark.parametrize("name,layout", [("mxfp6_e2m3", "packed"), ("mxfp4", "packed"),
                                         ("mxfp8_e5m2", "unpacked")])
def test_dequantize_row_strided_and_unaligned_views(name: str, layout: str) -> None:
    """data / scales that are views into wider buffers (row stride != width, byte offsets that
    are not word aligned) decode like their dense copies."""
    fmt, k = FORMATS[name], 96
    x = make_input(fmt, 9, k, torch.float32, seed=5)
    data, scales = ref.quantize(x, fmt, "even", layout)
    wide = torch.zeros(9, data.shape[1] + 5, dtype=torch.uint8)
    wide[:, 1:1 + data.shape[1]] = data
    wide_s = torch.zeros(9, scales.shape[1] + 3, dtype=torch.uint8)
    wide_s[:, 2:2 + scales.shape[1]] = scales
    got = tri.dequantize(wide[:, 1:1 + data.shape[1]], wide_s[:, 2:2 + scales.shape[1]], fmt,
                         layout, k, torch.bfloat16)
    assert_same(got, ref.dequantize(data, scales, fmt, layout, k, torch.bfloat16), name)


@pytest.mark.parametrize("path", ["decode", "hw cvt"])
@pytest.mark.parametrize("name,layout", FMT_LAYOUTS)
def test_dequantize_decodes_every_code_and_scale(name: str, layout: str, path: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every byte pattern (all 256 for 8-bit formats, all 16 / 64 codes for fp4 / fp6, and any
    high bits of an unpacked byte) under every scale byte 0x00..0xFF."""
    fmt = FORMATS[name]
    if path == "hw cvt":
        through_hw_cvt(monkeypatch, fmt)
    k, rows = 256, 32
    gen = torch.Generator().manual_seed(11)
    scales = torch.randperm(256, generator=gen).to(torch.uint8).view(rows, k // 32)
    if layout == "unpacked":
        data = torch.stack([torch.randperm(256, generator=gen) for _ in range(rows)])
        data = data.to(torch.uint8)
    elif fmt.bits == 4:  # 128 bytes a row: every byte in two rows -> every nibble pair
        data = (torch.arange(128).repeat(rows, 1) + 128 * (torch.arange(rows) % 2)[:, None])
        data = data[:, torch.randperm(128, generator=gen)].to(torch.uint8)
    else:
        codes = torch.stack([torch.randperm(256, generator=gen) % 64 for _ in range(rows)])
        data = pack_codes(codes.to(torch.uint8), fmt, layout)
    assert data.shape == (rows, bytes_per_row(fmt, layout, k))
    for out_dtype in DTYPES:
        assert_same(tri.dequantize(data, scales, fmt, layout, k, out_dtype),
                    ref.dequantize(data, scales, fmt, layout, k, out_dtype), f"{name} {out_dtype}")


@pytest.mark.parametrize("name", list(FORMATS))
def test_qdq_matches_ml_dtypes_casts(name: str) -> None:
    """Independent of the reference: floor scales from float64 log2 and element rounding by
    ml_dtypes' RNE casts (after clamping to +-max normal) give the same fp32 QDQ values."""
    fmt = FORMATS[name]
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 128, generator=gen)
    x = x * torch.exp2(torch.randint(-20, 20, (8, 128), generator=gen).float() / 4)
    blocks = x.double().numpy().reshape(8, 4, 32)
    e = np.floor(np.log2(np.abs(blocks).max(-1, keepdims=True))) - fmt.emax
    y = np.clip(blocks / 2.0**e, -fmt.max_normal, fmt.max_normal).astype(np.float32)
    cast = {"mxfp4": ml_dtypes.float4_e2m1fn, "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
            "mxfp6_e3m2": ml_dtypes.float6_e3m2fn, "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
            "mxfp8_e5m2": ml_dtypes.float8_e5m2}.get(name)
    if fmt.is_int:
        q = np.round(y * 64) / 64 + 0.0  # + 0.0: mxint8 has no negative zero
    else:
        q = y.astype(cast).astype(np.float64)
    want = torch.from_numpy((q * 2.0**e).reshape(8, 128)).float()
    assert_same(tri.qdq(x, fmt, "floor"), want, name)


def test_bad_inputs_raise_clear_errors() -> None:
    fmt = FORMATS["mxfp4"]
    with pytest.raises(ValueError, match="multiple of the MX block size"):
        tri.quantize(torch.zeros(2, 48), fmt, "floor", "packed")
    with pytest.raises(ValueError, match="2-D"):
        tri.quantize(torch.zeros(2, 2, 32), fmt, "floor", "packed")
    with pytest.raises(ValueError, match="dtype"):
        tri.qdq(torch.zeros(2, 32, dtype=torch.float64), fmt, "floor")
    with pytest.raises(ValueError, match="unit stride"):
        tri.quantize(torch.zeros(64, 2).t(), fmt, "floor", "packed")
    with pytest.raises(ValueError, match="rounding"):
        tri.quantize(torch.zeros(2, 32), fmt, "nearest", "packed")
    with pytest.raises(ValueError, match="no packed layout"):
        tri.quantize(torch.zeros(2, 32), FORMATS["mxint8"], "floor", "packed")
    data, scales = tri.quantize(torch.zeros(2, 64), fmt, "floor", "packed")
    with pytest.raises(ValueError, match=r"data must be uint8 of shape \(2, 64\)"):
        tri.dequantize(data, scales, fmt, "packed", 128, torch.float32)
    with pytest.raises(ValueError, match="out_dtype"):
        tri.dequantize(data, scales, fmt, "packed", 64, torch.int32)


@pytest.mark.parametrize("name", ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"])
def test_a_few_rows_qdq_with_one_row_a_program(name: str, monkeypatch) -> None:
    """QdqPlan's small-rows tile (SMALL_ROWS_TILE: one row a program, a decode step's
    activation): the reference's bits for 1..SMALL_ROWS rows, fresh random rows with NaN / Inf /
    zero / subnormal blocks, each input dtype; past SMALL_ROWS the general tile. (On a GPU this
    is the test that switches the gate on, `SMALL_ROWS_VERIFIED`; the wider tiles past it are
    the next test's.)"""
    monkeypatch.setattr(_qdq, "SMALL_ROWS_VERIFIED", True)
    monkeypatch.setattr(_qdq, "SMALL_ROWS_WIDE_VERIFIED", False)
    fmt = FORMATS[name]
    seed = zlib.crc32(f"small rows {name}".encode()) % 10_000
    k = 1024  # 4 of the tile's 256-wide K tiles; special blocks anywhere
    for i, (dtype, r) in enumerate(zip((torch.bfloat16, torch.float16, torch.float32,
                                        torch.bfloat16, torch.bfloat16), (1, 3, 16, 64, 65))):
        plan = _qdq.QdqPlan(name, "even", dtype, k)
        want_tile = _qdq.SMALL_ROWS_TILE if r <= _qdq.SMALL_ROWS else plan.tile
        assert plan.launch_consts(r)[0] == want_tile, r
        x = make_input(fmt, r, k, dtype, seed + i)
        assert_same(tri.qdq(x, fmt, "even"), ref.qdq(x, fmt, "even"), f"{name} {dtype} r={r}")


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8_e4m3"])
def test_a_few_long_rows_qdq_on_wider_one_row_tiles(name: str, monkeypatch) -> None:
    """small_rows_tile with SMALL_ROWS_WIDE on: the narrowest width that keeps rows x K tiles
    within SMALL_ROWS_PROGRAMS (patched small here, so small inputs reach every width), the
    general tile past it or past SMALL_ROWS_WIDE rows; the reference's bits under each width,
    special blocks and each input dtype. (On a GPU this is the test that switches the gate on,
    `SMALL_ROWS_WIDE_VERIFIED`.)"""
    monkeypatch.setattr(_qdq, "SMALL_ROWS_VERIFIED", True)
    monkeypatch.setattr(_qdq, "SMALL_ROWS_WIDE_VERIFIED", True)
    monkeypatch.setattr(_qdq, "SMALL_ROWS_PROGRAMS", 8)
    monkeypatch.setattr(_qdq, "SMALL_ROWS_WIDE", 6)
    fmt = FORMATS[name]
    seed = zlib.crc32(f"wide small rows {name}".encode()) % 10_000
    cases = ((1, 1024, 256), (1, 4096, 512), (2, 4096, 1024), (4, 4096, 2048), (3, 4000, 2048),
             (5, 4096, None), (7, 256, None))
    for i, ((r, k, width), dtype) in enumerate(zip(cases, (torch.bfloat16, torch.float16,
                                                           torch.float32) * 3)):
        plan = _qdq.QdqPlan(name, "even", dtype, k)
        want = plan.tile if width is None else {"BLOCK_R": 1, "BLOCK_K": width}
        assert plan.launch_consts(r)[0] == want, (r, k)
        x = make_input(fmt, r, k, dtype, seed + i)
        assert_same(plan(x.to(DEVICE)).cpu(), ref.qdq(x, fmt, "even"),
                    f"{name} {dtype} r={r} k={k}")
    monkeypatch.setattr(_qdq, "SMALL_ROWS_WIDE_VERIFIED", False)  # off: 1 x 256 up to 64 rows
    assert _qdq.small_rows_tile(64, 1 << 20) == _qdq.SMALL_ROWS_TILE
    assert _qdq.small_rows_tile(65, 256) is None


def test_a_kept_qdq_plan_launches_later_calls_with_the_first_calls_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """QdqPlan(keep_launches=True), the linear layers' activation QDQ: a call with rows and row
    stride seen before on the stream goes through a `launcher.Bound` passing exactly what the
    general path passes, this call's x and out pointers in place of the first's; new rows, a
    new stride or no stream (hooks set) take the general path. Launches recorded, not made."""
    from support.wgmma_launches import recorded_launches

    streams = {"now": 2}
    general, bound = recorded_launches(monkeypatch, streams)
    monkeypatch.setattr(_tri, "_INTERPRETED", False)
    plan = _qdq.QdqPlan("mxfp4", "even", torch.bfloat16, 256, keep_launches=True)
    plan(torch.zeros(5, 256, dtype=torch.bfloat16))
    first = general[-1][2]
    x = torch.ones(5, 256, dtype=torch.bfloat16)
    out = plan(x)
    assert len(general) == 1 and bound[-1] == (x.data_ptr(), out.data_ptr()) + tuple(first[2:])
    plan(torch.zeros(6, 256, dtype=torch.bfloat16))  # other rows: its own specialization
    plan(torch.zeros(5, 512, dtype=torch.bfloat16)[:, :256])  # another row stride
    streams["now"] = None
    plan(torch.zeros(5, 256, dtype=torch.bfloat16))
    assert len(general) == 4 and len(bound) == 1
    assert _qdq.QdqPlan("mxfp4", "even", torch.bfloat16, 256).fast is None  # qdq(): not kept


def test_a_streams_scratch_rows_are_one_memory_grown_as_needed() -> None:
    """`scratch`: the same [rows, K] view for the same (stream, rows, K, dtype); other rows of
    the stream in the same memory; a larger need regrows it; another stream its own memory."""
    cpu = torch.device("cpu")
    a = _qdq.scratch("s1", 4, 64, torch.bfloat16, cpu)
    assert a.shape == (4, 64) and a.dtype == torch.bfloat16 and a.is_contiguous()
    assert _qdq.scratch("s1", 4, 64, torch.bfloat16, cpu) is a
    b = _qdq.scratch("s1", 2, 64, torch.float32, cpu)
    assert b.data_ptr() == a.data_ptr() and b.shape == (2, 64)
    other = _qdq.scratch("s2", 4, 64, torch.bfloat16, cpu)
    assert other.data_ptr() != a.data_ptr()
    big = _qdq.scratch("s1", 1024, 128, torch.bfloat16, cpu)  # past 64 KiB: regrown
    assert big.shape == (1024, 128) and big.data_ptr() != a.data_ptr()
    again = _qdq.scratch("s1", 4, 64, torch.bfloat16, cpu)
    assert again.data_ptr() == big.data_ptr()  # views rebuilt on the new memory


def test_qdq_into_scratch_writes_the_streams_rows_and_else_a_fresh_tensor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """QdqPlan.into_scratch (a linear layer's activation QDQ): on a stream, QDQ(x) bit for bit in
    that stream's scratch rows (the same memory on the next call); with no stream (hooks set),
    while a CUDA graph is captured (the graph's pool), or for a plan not kept, a fresh tensor.
    (Under the interpreter, or compiled on a GPU with that device's current stream.)"""
    from kernels.triton import launcher

    dev = "cuda" if torch.cuda.is_available() and not _tri._INTERPRETED else "cpu"
    stream = launcher.current_stream(torch.cuda.current_device()) if dev == "cuda" else "stream"
    capturing = {"now": False}
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing["now"])
    monkeypatch.setattr(launcher, "current_stream", lambda device: None)  # (a fresh tensor's)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(3, 256, generator=gen).to(torch.bfloat16).to(dev)
    y = torch.randn(3, 256, generator=gen).to(torch.bfloat16).to(dev)
    plan = _qdq.QdqPlan("mxfp4", "even", torch.bfloat16, 256, keep_launches=True)
    plan.fast = {}  # kept (the interpreter keeps none; its launches give no Bound)
    got = plan.into_scratch(x, stream)
    assert torch.equal(got.view(torch.int16), _tri.qdq(x, "mxfp4", "even").view(torch.int16))
    assert got.data_ptr() == _qdq.scratch(stream, 3, 256, torch.bfloat16, x.device).data_ptr()
    later = plan.into_scratch(y, stream)
    assert later.data_ptr() == got.data_ptr()
    assert torch.equal(later.view(torch.int16), _tri.qdq(y, "mxfp4", "even").view(torch.int16))
    for on, capture, kept in ((None, False, True), (stream, True, True), (stream, False, False)):
        capturing["now"] = capture
        plan.fast = {} if kept else None
        fresh = plan.into_scratch(x, on)
        assert fresh.data_ptr() != got.data_ptr(), (on, capture, kept)
        assert torch.equal(fresh.view(torch.int16), _tri.qdq(x, "mxfp4", "even").view(torch.int16))
