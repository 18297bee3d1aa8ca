"""Launch configs that fit the device (kernels/triton/fit.py), and every Triton linear kernel at
its largest tiles for each activation dtype.

On an H200 (232,448 bytes of shared memory a block) the decode kernel's measured bf16 config
asked for up to 491,520 bytes with fp32 activations (issue 12): the fitting search must give a
launch that runs, with the kernel's numerics. The first tests simulate a small device on any
machine; the last ones run the real kernels (compiled on a GPU, interpreted elsewhere).
"""
from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch
from triton.runtime.errors import OutOfResources

from kernels.base import load_kernel
from kernels.reference.linear import ReferenceEmulationLinear
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import fit
from kernels.triton import linear_emulation as le
from kernels.triton.linear_decode import DecodeConfig

from support.device import DEVICE


def test_smaller_configs_drop_stages_first_then_halve_each_block():
    cfg = fit.TileConfig(bm=64, bn=128, bk=256, warps=4, stages=3)
    seq = list(fit.smaller_configs(cfg, stages="stages", blocks=(("bk", 64), ("bn", 64))))
    assert seq[:2] == [dataclasses.replace(cfg, stages=2), dataclasses.replace(cfg, stages=1)]
    assert seq[2] == dataclasses.replace(cfg, bk=128)  # stages back to 3 with the smaller tile
    assert seq[3:5] == [dataclasses.replace(cfg, bk=128, stages=s) for s in (2, 1)]
    assert seq[5] == dataclasses.replace(cfg, bk=64)
    assert seq[-1] == fit.TileConfig(bm=64, bn=64, bk=64, warps=4, stages=1)
    assert all(c.bk >= 64 and c.bn >= 64 and c.bm == 64 for c in seq)
    assert len(seq) == len(set(seq))  # each config once


def _smem(cfg: DecodeConfig) -> int:  # a stand-in for the compiler's count
    return cfg.block_n * cfg.block_k * 4 * cfg.stages


def _fake_device(limit: int, ran: list):
    def launch(cfg: DecodeConfig) -> None:
        if _smem(cfg) > limit:
            raise OutOfResources(_smem(cfg), limit, "shared memory")
        ran.append(cfg)
    return launch


def _shrink(cfg):
    return fit.smaller_configs(cfg, stages="stages", blocks=(("block_k", 64), ("block_n", 16)))


def test_launch_fitting_takes_the_largest_config_that_fits_and_remembers_it():
    big = DecodeConfig(block_n=64, block_k=256, split=1, warps=4, stages=3)
    ran: list = []
    calls = []

    def counting(cfg):
        calls.append(cfg)
        _fake_device(100_000, ran)(cfg)

    key = ("test", object())  # a key no other test uses
    got = fit.launch_fitting("fake kernel", key, big, counting, _shrink)
    # the first config in the search order that fits: stages 2 (131,072) and 1 (65,536)
    assert got == dataclasses.replace(big, stages=1) and ran == [got]
    assert calls == [big, dataclasses.replace(big, stages=2), got]
    calls.clear()
    assert fit.launch_fitting("fake kernel", key, big, counting, _shrink) == got
    assert calls == [got]  # remembered: no failed compile on the next call
    assert fit.fitted_configs()[("fake kernel", key, big)] == got


def test_a_config_that_fits_runs_unchanged():
    cfg = DecodeConfig(block_n=16, block_k=64, split=1, warps=1, stages=1)
    ran: list = []
    assert fit.launch_fitting("fake kernel", ("fits", object()), cfg,
                              _fake_device(10**9, ran), _shrink) == cfg
    assert ran == [cfg]


def test_no_config_fits_is_a_one_line_error():
    cfg = DecodeConfig(block_n=32, block_k=128, split=1, warps=4, stages=2)
    with pytest.raises(ValueError) as err:
        fit.launch_fitting("fake kernel", ("tiny", object()), cfg, _fake_device(100, []),
                           _shrink)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("fake kernel: no launch config fits this device")
    assert "block_n=16, block_k=64" in msg and "stages=1" in msg


def test_other_errors_are_not_taken_for_a_full_device():
    def broken(cfg):
        raise RuntimeError("a real failure")
    with pytest.raises(RuntimeError, match="a real failure"):
        fit.launch_fitting("fake kernel", ("broken", object()),
                           DecodeConfig(64, 256, 1, 4, 3), broken, _shrink)


# ------------------------------------------------------- the real kernels at their largest tiles
WEIGHTS = ["mxfp4", "mxfp6_e3m2", "mxfp8_e4m3", "mxint8"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("wfmt", WEIGHTS)
@pytest.mark.parametrize("m", [le.DECODE_LIMIT_M, 17, 65])
def test_triton_emulation_runs_every_dtype_at_its_largest_tiles(wfmt, dtype, m):
    """M = 64: the decode kernel's widest dot (BLOCK_M 64); 17: a 32-row dot; 65: the tiled
    kernel. fp32 activations double every operand tile's bytes."""
    contract = SchemeContract(weight=QuantKey.mx(wfmt, rounding="even", static=True),
                              activation=None)
    g = torch.Generator().manual_seed(zlib.crc32(f"{wfmt} {dtype} {m}".encode()))
    prepared = load_kernel("triton-emulation").prepare(
        torch.randn(48, 256, generator=g).to(DEVICE), contract)
    x = torch.randn(m, 256, generator=g).to(device=DEVICE, dtype=dtype)
    strategy = "decode" if m <= le.DECODE_LIMIT_M else "tiled"
    got = le.fused_linear(x, prepared, strategy=strategy, out_dtype=torch.float32)
    want = ReferenceEmulationLinear().apply(x.float(), prepared).float()
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5 * float(want.abs().max()))


def test_launch_auto_keys_constexprs_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tiles must not share a compiled kernel: a constexpr int keyed like a runtime int
    (1? multiple of 16? 32-bit?) made BLOCK_R 2 and 4 one key, and on the H200 a quantize with
    tile 4 x 128 ran the kernel compiled for 2 x 256 (scale bytes of whole rows unwritten)."""
    from kernels.triton import launcher, mx_quant

    keys = []
    monkeypatch.setattr(launcher, "launch", lambda fn, key, grid, args, **kw: keys.append(key))
    fn = mx_quant._quantize_kernel
    consts = launcher.constexpr_indices(fn)
    names = fn.arg_names
    assert {names[i] for i in consts} == set(names[names.index("IN_KIND"):])
    x = torch.zeros(4, 256)
    head = [x, x, x, 4, 256, 256, 256, 256]
    tail = [0] * (len(fn.arg_names) - len(head))
    for block_r, block_k in ((2, 256), (4, 128), (4, 256)):
        args = head + tail[:-2] + [block_r, block_k]
        launcher.launch_auto(fn, (1,), args, num_warps=4)
    assert len(set(keys)) == 3
    # runtime ints still keyed by Triton's specialization only (one kernel for K = 48 and 80)
    assert launcher.spec_key([48, x], consts) == launcher.spec_key([80, x], consts)
