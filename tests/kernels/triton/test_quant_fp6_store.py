"""The packed mxfp6 store of kernels.triton.mx_quant (PACK 2: 12 int32 words a 64-code chunk,
one contiguous store per tile) against the pure-torch reference and an independent packer, bit
for bit: both fp6 formats, every rounding, K tails (K % 64 == 32, K < BLOCK_K), row tails, tiles
of one and of several 64-code chunks, and no write outside the [R, 3K/16] words.

Every test runs both ways of moving the codes (packed_codes): whole 64-code chunks of words (in
use) and half groups of 8 codes a thread (packed_codes.FP6_HALVES_VERIFIED, forced on: on a GPU
this is the test that gate waits on), and the halves' dequantize is checked too.

Inputs are fresh random blocks with per-block scales from fp32 subnormals to near fp32's max,
plus planted NaN / Inf / zero / -0 / subnormal / dtype-max blocks. Runs in Triton's CPU
interpreter when there is no GPU (tests/conftest.py sets TRITON_INTERPRET).
"""
from __future__ import annotations

import zlib

import pytest
import torch

from kernels.reference import mx as ref
from kernels.spec.formats import FORMATS, ROUNDINGS
from kernels.triton import hw_cvt, mx_quant, packed_codes, quant_tiles

from support.device import DEVICE

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

FP6 = ("mxfp6_e2m3", "mxfp6_e3m2")


@pytest.fixture(autouse=True, params=[False, True], ids=["words", "halves"])
def fp6_io(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test with the codes moved as 64-code chunks of words, then as half groups."""
    monkeypatch.setattr(packed_codes, "FP6_HALVES_VERIFIED", request.param)
    return request.param
DTYPES = (torch.bfloat16, torch.float32, torch.float16)
SHAPES = [(r, k) for r in (1, 3, 17) for k in (32, 64, 96, 224, 1024)]


def planted_blocks(dtype: torch.dtype, gen: torch.Generator) -> list[torch.Tensor]:
    """32-element fp32 blocks with the special values a quantizer must keep apart."""
    def rnd(scale: float) -> torch.Tensor:
        return torch.randn(32, generator=gen) * scale

    at = int(torch.randint(0, 32, (), generator=gen))
    nan, pinf, ninf = rnd(3.0), rnd(1.0), rnd(1e-3)
    nan[at], pinf[at], ninf[31 - at] = float("nan"), float("inf"), float("-inf")
    tiny = 2.0 ** -20 if dtype == torch.float16 else 2.0 ** -133  # the dtype's subnormals
    big = torch.finfo(dtype).max
    top = rnd(big / 8).clamp(-big, big)
    top[at] = -big
    return [nan, pinf, ninf, torch.zeros(32), torch.full((32,), -0.0), rnd(tiny),
            rnd(tiny * 2.0 ** -8), top]


def make_input(r: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[r, k] randn blocks times 2**e per block (e from subnormal to huge for the dtype), a
    random share of them replaced by planted blocks."""
    gen = torch.Generator().manual_seed(seed)
    nb = k // 32
    lo, hi = (-24, 12) if dtype == torch.float16 else (-145, 122)
    e = torch.randint(lo, hi, (r * nb, 1), generator=gen).double()
    x = (torch.randn(r * nb, 32, generator=gen).double() * torch.exp2(e)).float()
    planted = planted_blocks(dtype, gen)
    count = min(len(planted), max(1, r * nb // 3))
    places = torch.randperm(r * nb, generator=gen)[:count].tolist()
    order = torch.randperm(len(planted), generator=gen)[:count].tolist()
    for place, which in zip(places, order):
        x[place] = planted[which]
    return x.view(r, k).to(dtype)


def pack_fp6_independent(codes: torch.Tensor) -> torch.Tensor:
    """[R, K] codes 0..63 -> [R, 3K/4] bytes: code j at bits 6j..6j+5 of the row read as one
    little-endian integer (the spec's layout, written without the reference's formula)."""
    rows = []
    for row in codes.tolist():
        value = sum(c << (6 * j) for j, c in enumerate(row))
        rows.append(list(value.to_bytes(len(row) * 3 // 4, "little")))
    return torch.tensor(rows, dtype=torch.uint8).view(codes.shape[0], codes.shape[1] * 3 // 4)


def first_difference(got: torch.Tensor, want: torch.Tensor) -> str | None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    bad = (got != want).nonzero()
    if not bad.numel():
        return None
    at = tuple(bad[0].tolist())
    return (f"{len(bad)} bytes differ, first at {at}: "
            f"{got[at].item():#04x} vs {want[at].item():#04x}")


def check_quantize(x: torch.Tensor, name: str, rounding: str, where: str) -> None:
    fmt = FORMATS[name]
    data, scales = mx_quant.quantize(x.to(DEVICE), fmt, rounding, "packed")
    data, scales = data.cpu(), scales.cpu()
    want_data, want_scales = ref.quantize(x, fmt, rounding, "packed")
    codes, _ = ref.quantize(x, fmt, rounding, "unpacked")
    assert data.shape == (x.shape[0], x.shape[1] * 3 // 4), where
    assert first_difference(scales, want_scales) is None, f"scales {where}"
    assert (diff := first_difference(data, want_data)) is None, f"data vs reference {where}: {diff}"
    assert (diff := first_difference(data, pack_fp6_independent(codes))) is None, \
        f"data vs independent packing {where}: {diff}"


@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("name", FP6)
def test_packed_fp6_matches_reference(name: str, rounding: str) -> None:
    """The module's own tile; R 1 / 3 / 17 and K 32 .. 1024 (K % 64 == 32 tails included)."""
    seed = zlib.crc32(f"fp6 store {name} {rounding}".encode())
    for i, (r, k) in enumerate(SHAPES):
        dtype = DTYPES[i % len(DTYPES)]
        x = make_input(r, k, dtype, seed + i)
        check_quantize(x, name, rounding, f"{name} {rounding} {dtype} [{r}, {k}] seed {seed + i}")


@pytest.mark.parametrize("tile", [(4, 128), (2, 256)])
@pytest.mark.parametrize("name", FP6)
def test_packed_fp6_multi_chunk_tiles(name: str, tile: tuple[int, int],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiles of 2 and 4 chunks (the GPU tile is 8 x 512): chunk offsets inside a tile and
    tails that end inside the tile, mid-chunk and mid-vector."""
    block = {"BLOCK_R": tile[0], "BLOCK_K": tile[1]}
    monkeypatch.setattr(quant_tiles, "INTERPRETER_TILE", block)
    monkeypatch.setattr(quant_tiles, "GPU_TILE", block)
    monkeypatch.setattr(quant_tiles, "PACKED_FP6_TILE", block)
    seed = zlib.crc32(f"fp6 tiles {name} {tile}".encode())
    for i, (r, k) in enumerate([(3, 96), (5, 160), (17, 224), (3, 256), (2, 288), (9, 1024)]):
        dtype = DTYPES[i % len(DTYPES)]
        for rounding in ROUNDINGS:
            x = make_input(r, k, dtype, seed + i)
            check_quantize(x, name, rounding, f"{name} tile {tile} {rounding} {dtype} [{r}, {k}]")


@pytest.mark.parametrize("pad", [4, 3])
def test_packed_fp6_writes_only_its_words(pad: int) -> None:
    """The kernel writes into a row-strided view of a sentinel-filled buffer (row stride W + pad
    words: 16-byte aligned rows or not): the words match quantize's, nothing else changes."""
    fmt = FORMATS["mxfp6_e3m2"]
    for r, k in ((3, 96), (17, 224), (1, 32), (5, 1024)):
        x = make_input(r, k, torch.bfloat16, seed=r * 1000 + k + pad)
        w = 3 * k // 16
        sentinel = 0x5A5A5A5A
        buf = torch.full((r + 2, w + pad), sentinel, dtype=torch.int32, device=DEVICE)
        words = buf[1:r + 1, :w]
        scales = torch.empty((r, k // 32), dtype=torch.uint8, device=DEVICE)
        consts = mx_quant.quantize_constexprs(fmt, "packed", x.dtype, "even",
                                              words.stride(0) % 4 == 0,
                                              word_io=packed_codes.word_io_here(2))
        xd = x.to(DEVICE)
        mx_quant._launch(mx_quant._quantize_kernel, (mx_quant.bits_view(xd), words, scales),
                         r, k, (xd.stride(0), words.stride(0), scales.stride(0)), consts)
        got = buf.cpu()
        want, _ = ref.quantize(x, fmt, "even", "packed")
        where = f"[{r}, {k}] pad {pad}"
        diff = first_difference(got[1:r + 1, :w].contiguous().view(torch.uint8), want)
        assert diff is None, f"words {where}: {diff}"
        outside = torch.ones_like(got, dtype=torch.bool)
        outside[1:r + 1, :w] = False
        assert bool((got[outside] == sentinel).all()), f"write outside the words {where}"


@pytest.mark.parametrize("name", FP6)
def test_packed_fp6_dequantize_matches_reference(name: str, fp6_io: bool) -> None:
    """Packed codes (from the reference) back to every dtype, bit for bit, NaNs by position:
    the module's shapes, K tails inside the tile included."""
    fmt = FORMATS[name]
    seed = zlib.crc32(f"fp6 dequantize {name}".encode())
    for i, (r, k) in enumerate(SHAPES):
        x = make_input(r, k, DTYPES[i % len(DTYPES)], seed + i)
        data, scales = ref.quantize(x, fmt, "even", "packed")
        for out in DTYPES:
            got = mx_quant.dequantize(data.to(DEVICE), scales.to(DEVICE), fmt, "packed", k,
                                      out).cpu()
            want = ref.dequantize(data, scales, fmt, "packed", k, out)
            nan = want.isnan()
            ints = {4: torch.int32, 2: torch.int16}[want.element_size()]
            where = f"{name} [{r}, {k}] -> {out} ({'halves' if fp6_io else 'words'})"
            assert torch.equal(got.isnan(), nan), f"NaNs {where}"
            assert torch.equal(got.view(ints)[~nan], want.view(ints)[~nan]), where


@pytest.mark.parametrize("name", FP6)
def test_packed_fp6_through_encode(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The codes from `encode` (plain 6-bit codes) rather than the fp8 conversion's parts,
    which the interpreter takes where hw_cvt's gate is on."""
    monkeypatch.setattr(hw_cvt, "CVT_VERIFIED", False)
    seed = zlib.crc32(f"fp6 encode {name}".encode())
    for i, (r, k) in enumerate([(3, 96), (17, 224), (2, 1024)]):
        for rounding in ROUNDINGS:
            x = make_input(r, k, DTYPES[i % len(DTYPES)], seed + i)
            check_quantize(x, name, rounding, f"{name} encode {rounding} [{r}, {k}]")
