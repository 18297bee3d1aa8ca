"""kernels/triton/route.py and TritonEmulationLinear.route: how a call ran, in words (the
route column of `registry bench`)."""
from __future__ import annotations

import torch

from kernels.base import load_kernel
from kernels.triton.linear_decode import DecodeConfig
from kernels.triton.linear_emulation import STRATEGIES
from kernels.triton.linear_gemv import GemvConfig
from kernels.triton.linear_mma import MmaConfig
from kernels.triton.route import config_words, route_words
from kernels.triton.wgmma_config import WgmmaConfig
from registry import load_schemes
from support.device import DEVICE


def test_each_config_kind_in_words() -> None:
    assert config_words(WgmmaConfig(block_m=64, block_k=128, split=2, stages=3, warps=8,
                                    sub_k=2, maxnreg=128, rep=2)) == "64x128 s2 st3 w8 sub2 r128 rep2"
    assert config_words(WgmmaConfig(block_m=256, block_k=128, split=1, stages=3, tma_x=True,
                                    ws=True, group_m=4)) == "256x128 s1 st3 w4 tma ws g4"
    assert config_words(WgmmaConfig(block_m=256, block_k=128, split=1, stages=3, tma_x=True,
                                    ws=True, persistent=True)) == "256x128 s1 st3 w4 tma ws pst"
    assert config_words(WgmmaConfig(block_m=16, block_k=128, split=2, stages=5,
                                    overlap=True)) == "16x128 s2 st5 w4 ovl"
    assert config_words(MmaConfig(16, 64, 256, split=4, warps=4, stages=3)) == "16x64x256 s4 st3 w4"
    assert config_words(MmaConfig(64, 128, 128, split=4, warps=8, stages=4, maxnreg=128)) == \
        "64x128x128 s4 st4 w8 maxnreg=128"
    assert config_words(GemvConfig(block_n=64, block_k=256, split=4, warps=4, stages=3)) == \
        "64x256 s4 st3 w4"
    assert config_words(DecodeConfig(32, 256, 1, 4, 3, split_fp4=True, fast_fp4=False)) == \
        "32x256 s1 st3 w4 split_fp4 fast_fp4=False"  # (fields away from their defaults only)
    assert config_words(None) == "" and config_words((128, 128, 64, 8, 3)) == "(128, 128, 64, 8, 3)"
    assert route_words("dequant-gemm", None) == "dequant-gemm"
    assert route_words("mma", MmaConfig(16, 16, 64, 2, 1, 1), "QDQ launched first") == \
        "mma 16x16x64 s2 st1 w1, QDQ launched first"


def test_the_route_is_the_plan_a_call_made() -> None:
    """None before a call of that M bucket and dtype; after it, the plan's strategy and config,
    and for a W*A* layer where its QDQ runs (a weight-only layer never mentions one)."""
    kernel, catalog = load_kernel("triton-emulation"), load_schemes()
    gen = torch.Generator().manual_seed(3)
    for name in ("w_mxfp4", "w_mxfp4_a_mxfp4"):
        prepared = kernel.prepare(torch.randn(64, 256, generator=gen).to(DEVICE),
                                  catalog.get(name).contract)
        for m in (1, 3, 40):
            x = torch.randn(m, 256, generator=gen).to(torch.bfloat16).to(DEVICE)
            assert kernel.route(x, prepared) is None, (name, m)
            kernel.apply(x.half(), prepared)  # another dtype: another plan
            assert kernel.route(x, prepared) is None, (name, m)
            kernel.apply(x, prepared)
            route = kernel.route(x, prepared)
            strategy = route.split(",")[0].split()[0]
            assert strategy in STRATEGIES, route
            if name == "w_mxfp4":
                assert "QDQ" not in route, route
            elif m > 1:  # (M = 1: gemv / the interpreter QDQ the row inside the kernel)
                assert route.endswith((", QDQ launched first", ", QDQ in the kernel")), route
            assert kernel.route(x[:1].expand(m, 256), prepared) == route  # same bucket
