"""The one-partition wgmma kernel's weight layout (kernels/triton/linear_wgmma.py, fp4_words,
fp6_words, fp8_words), on the CPU (CI): the layout it reads and its decoder's bit operations,
through their torch twins (fp4_words.wgmma_decode and the others: the PTX's instructions step for
step), against the reference dequantization at every code and scale byte; the one layout every
config's programs read their tiles from (and only its rows), a prepared weight's layout, and one
copy of the weight for every config. The kernel's own bits: test_linear_wgmma.py (mxfp4) and
test_wgmma_formats.py, on an sm_90 GPU.
"""
from __future__ import annotations

import pytest
import torch

from kernels.mx import MXTensor, mx_dequantize
from kernels.spec.contract import SchemeContract
from kernels.triton import fp4_words as fw
from kernels.triton import linear_configs
from kernels.triton import linear_emulation as le
from kernels.triton import linear_wgmma as lw
from kernels.triton import wgmma_gates, wgmma_tiles
from kernels.triton.linear_emulation import fused_linear
from support.mx_weights import e4m3_weight as fp8_weight, fp4_weight, fp6_weight, int8_weight
from support.wgmma_cases import KERNEL, key, same_values
from support.wgmma_launches import record_launches


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


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxint8"])
def test_a_prepared_8bit_weight_gets_the_layout_its_decoder_reads(fmt: str) -> None:
    """The host path (constexprs -> format, the fits check kept, the one layout built once) on
    a prepared e4m3 / mxint8 weight; it decodes through the PTX's twin to the reference (CPU).
    A weight the layout cannot hold gets no layout (the table moves on): an e4m3 NaN code; an
    mxint8 scale past 1.0 (byte 128) or code -128."""
    from kernels.triton.fp8_words import wgmma_decode_fp8
    from kernels.triton.int8_words import wgmma_decode_int8
    from kernels.triton.linear_tiles import prepare_tensors

    make, decode, refused = {
        "mxfp8_e4m3": (fp8_weight, wgmma_decode_fp8, (("data", 0x7F),)),
        "mxint8": (int8_weight, wgmma_decode_int8, (("scales", 128), ("data", 0x80)))}[fmt]
    w = make(70, 320, torch.Generator().manual_seed(8 + len(fmt)))
    contract = SchemeContract(weight=key(fmt), activation=None)
    cached = prepare_tensors(KERNEL.prepare(w, contract))
    assert lw.weight_format(cached["consts"]) == fmt
    want = mx_dequantize(w, torch.float32, backend="reference")
    words, sbytes, bwords = lw.one_layout(cached, fmt, 320)
    assert lw.one_layout(cached, fmt, 320)[0] is words
    got = decode(words, bwords, sbytes, 128, 512, 128)  # (padded: fw.ALIGN)
    assert same_values(got[:70, :320], want) and not got[:70, 320:].any()
    for at, value in refused:
        bad = MXTensor(w.data.clone(), w.scales.clone(), w.fmt, w.rounding, w.shape, w.layout)
        getattr(bad, at)[5, 9] = value
        assert lw.one_layout(prepare_tensors(KERNEL.prepare(bad, contract)), fmt,
                             320) is None, at


def test_one_copy_of_the_weight_serves_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs of every K tile and row-group count (one and two warpgroups, rep 2, ws) run off
    the same prepared buffers: one layout in the weight's cache, whatever the M buckets ran
    (before: a copy per (K tile, row groups) in use)."""
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
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
