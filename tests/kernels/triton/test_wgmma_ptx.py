"""The wgmma decoders' PTX itself, run on the CPU: a small interpreter of the instructions they
use (and / or / shl / shr / shf.r.wrap / add / mov / mul.rn.bf16x2) replays each inline-asm
string on random words and must give the bf16x2 patterns of its torch twin (fp4_words.
wgmma_pairs, fp6_words.fp6_pairs, fp8_words.fp8_pairs, int8_words.int8_pairs), which CPU CI
checks against the reference dequantization (test_fp6_words, test_fp8_words, test_int8_words,
test_wgmma_layout). So a PTX edit
that drifts from its twin fails here, not only on an H200."""
from __future__ import annotations

import pytest
import torch

from kernels.triton import fp4_words as fw
from kernels.triton import fp6_words as f6
from kernels.triton import fp8_words as f8
from kernels.triton import int8_words as i8
from kernels.triton import wgmma_decode as wd

from support.ptx_model import MASK, run_ptx

def patterns(out: dict[str, int]) -> list[int]:
    return [out[f"${2 * p}"] | (out[f"${2 * p + 1}"] << 16) for p in range(4)]


def random_words(count: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    words = torch.randint(-2**31, 2**31, (count,), generator=gen, dtype=torch.int64)
    return torch.cat([words, torch.tensor([0, -1, 0x7FFFFFFF, -2**31])]).to(torch.int32)


def test_fp4_ptx_is_its_twin() -> None:
    words = random_words(200, 1)
    twin = [p.tolist() for p in fw.wgmma_pairs(words)]
    for i, w in enumerate(words.tolist()):
        got = patterns(run_ptx(wd._DECODE.value, {"$8": w & MASK, "$9": 0}))
        assert got == [twin[p][i] for p in range(4)], hex(w & MASK)


@pytest.mark.parametrize("fmt", ["mxfp6_e2m3", "mxfp6_e3m2"])
def test_fp6_ptx_is_its_twin(fmt: str) -> None:
    a = random_words(200, 2)
    b = random_words(a.numel() // 2 - 4, 3)  # one B word for two A words
    twin = [p.tolist() for p in f6.fp6_pairs(a, b, fmt)]
    asm = (wd._DECODE_E2M3 if fmt == "mxfp6_e2m3" else wd._DECODE_E3M2).value
    for i, w in enumerate(a.tolist()):
        base = 8 * (i % 2) + f6.B_ROT[fmt]  # the kernel's: (block % 2) * 8 + _ROT_E3M2
        out = run_ptx(asm, {"$8": w & MASK, "$9": int(b[i // 2]) & MASK, "$10": base, "$11": 0})
        assert patterns(out) == [twin[p][i] for p in range(4)], (fmt, i)


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxint8"])
def test_8bit_ptx_is_its_twin(fmt: str) -> None:
    """A + B words (four codes each) -> the four pairs of fp8_words / int8_words."""
    asm, pairs = {"mxfp8_e4m3": (wd._DECODE_E4M3, f8.fp8_pairs),
                  "mxint8": (wd._DECODE_INT8, i8.int8_pairs)}[fmt]
    a, b = random_words(200, 5 + len(fmt)), random_words(200, 6 + len(fmt))
    twin = [p.tolist() for p in pairs(a, b)]
    for i, (wa, wb) in enumerate(zip(a.tolist(), b.tolist())):
        out = run_ptx(asm.value, {"$8": wa & MASK, "$9": wb & MASK, "$10": 0})
        assert patterns(out) == [twin[p][i] for p in range(4)], (fmt, i)


def test_the_interpreter_can_fail() -> None:
    """A one-bit drift in the PTX (mask or rotation) is caught."""
    words = random_words(50, 4)
    twin = [p.tolist() for p in fw.wgmma_pairs(words)]
    bad = wd._DECODE.value.replace("shf.r.wrap.b32 a, $8, $8, 3;", "shf.r.wrap.b32 a, $8, $8, 4;")
    assert bad != wd._DECODE.value
    assert any(patterns(run_ptx(bad, {"$8": w & MASK, "$9": 0})) != [twin[p][i] for p in range(4)]
               for i, w in enumerate(words.tolist()))
