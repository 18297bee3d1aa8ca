"""fp4_lanes: packed mxfp4 quantize of bf16 input on bf16x2 lanes. On the CPU its PTX runs on a
model of the instructions (tests/support/ptx_model.py) against the reference's codes for whole
blocks (ties, saturation, subnormals, zeros of both signs, NaN / Inf blocks) under every scale
rounding; the kernel's bits through the path (the interpreter's `encode` twin, the PTX on an
sm_90 GPU) are checked by test_quant_every_value.py and test_triton_quant.py (`hw cvt`)."""
from __future__ import annotations

import pytest
import torch

from kernels.reference import mx as ref
from kernels.spec.formats import FORMATS, ROUNDINGS
from kernels.triton import fp4_lanes

from support.ptx_model import MASK, run_ptx

FMT = FORMATS["mxfp4"]


def blocks(seed: int) -> torch.Tensor:
    """bf16 [n, 32]: random blocks across the exponent range, then special ones."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-130, 125, (40, 1), generator=gen).float())
    x = torch.randn(40, 32, generator=gen) * scale
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    ties = torch.cat([(grid[1:] + grid[:-1]) / 2, grid, torch.tensor([5.9, 6.5, 6.9, 7.0])])
    signs = torch.where(torch.rand(32, generator=gen) < 0.5, -1.0, 1.0)
    special = [
        torch.cat([ties, ties])[:32] * signs * 2.0 ** 7,
        torch.cat([ties, ties])[:32] * signs * 2.0 ** -20,
        torch.zeros(32), torch.full((32,), -0.0),
        torch.arange(1, 33).float() * 2.0 ** -133,  # bf16 subnormals
        torch.full((32,), 3.3e38) * signs,  # near bf16's max
        torch.cat([torch.randn(31, generator=gen), torch.tensor([float("nan")])]),
        torch.cat([torch.tensor([float("-inf")]), torch.randn(31, generator=gen)]),
    ]
    return torch.cat([x, torch.stack(special)]).to(torch.bfloat16)


@pytest.mark.parametrize("layout", ["packed", "unpacked"])
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_lane_ptx_gives_the_reference_bytes(rounding: str, layout: str) -> None:
    x = blocks(len(rounding))
    data, scales = ref.quantize(x, FMT, rounding, layout)  # [n, 16 / 32] bytes, [n, 1]
    packed = layout == "packed"
    asm = fp4_lanes.lane_asm(clamp=rounding == "floor", packed=packed)
    words = x.view(torch.int16).to(torch.int64).view(-1, 16, 2)
    words = (words[..., 0] & 0xFFFF) | (words[..., 1] & 0xFFFF) << 16  # [n, 16] two elements
    for i in range(x.shape[0]):
        byte = int(scales[i, 0])
        bad = byte == 0xFF
        f = 0 if bad else ((127 - (byte - 127)) << 7)  # bf16 2**-E (E = 0 in a bad block)
        f = (127 << 7) if bad else f
        got = []
        for g in range(4):  # eight elements an asm call
            regs = {f"${2 + k}": int(words[i, 4 * g + k]) for k in range(4)}
            regs.update({f"${6 + j}": f | f << 16 for j in range(8)})
            regs.update({f"${14 + j}": 0 if bad else MASK for j in range(8)})
            out = run_ptx(asm, regs, bf16_math=True)
            for reg in ("$0", "$1"):
                if packed:  # bytes [p, p, q, q]: one byte per two elements
                    assert out[reg] & 0xFF == (out[reg] >> 8) & 0xFF, (i, g)
                    got += [out[reg] & 0xFF, (out[reg] >> 16) & 0xFF]
                else:  # one code a byte
                    got += [(out[reg] >> (8 * b)) & 0xFF for b in range(4)]
        want = data[i].tolist()
        assert got == want, (rounding, i, x[i].float().tolist()[:8], got[:4], want[:4])


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_word_ptx_gives_the_reference_bytes_from_any_four_words(rounding: str) -> None:
    """lane_word_asm: each call's four words drawn at random from all blocks and positions (as
    any register layout may group them), each with its own factor and keep mask."""
    x = blocks(3 + len(rounding))
    data, scales = ref.quantize(x, FMT, rounding, "packed")
    asm = fp4_lanes.lane_word_asm(clamp=rounding == "floor")
    halves = x.view(torch.int16).to(torch.int64).view(-1, 16, 2)
    words = (halves[..., 0] & 0xFFFF) | (halves[..., 1] & 0xFFFF) << 16  # [n, 16]
    order = torch.randperm(words.numel(), generator=torch.Generator().manual_seed(5)).tolist()
    got = torch.zeros_like(data)
    for g in range(0, len(order), 4):
        regs, where = {}, [divmod(flat, 16) for flat in order[g:g + 4]]
        for k, (i, w) in enumerate(where):
            byte = int(scales[i, 0])
            f = (127 << 7) if byte == 0xFF else ((127 - (byte - 127)) << 7)  # bf16 2**-E
            regs.update({f"${1 + k}": int(words[i, w]), f"${5 + k}": f | f << 16,
                         f"${9 + k}": 0 if byte == 0xFF else MASK})
        out = run_ptx(asm, regs, bf16_math=True)["$0"]
        for k, at in enumerate(where):  # word k's packed byte: byte k
            got[at] = (out >> (8 * k)) & 0xFF
    bad = (got != data).nonzero()
    assert not bad.numel(), (rounding, len(bad), bad[0].tolist())


def test_the_model_catches_a_drift() -> None:
    """The element rounding without its magic-number add (truncation) fails."""
    asm = fp4_lanes.lane_asm(clamp=False)
    bad = asm.replace("add.rn.bf16x2 p, a, p;", "mov.b32 p, a;")
    assert bad != asm
    x = blocks(9)[:8]
    _, scales = ref.quantize(x, FMT, "even", "packed")
    words = x.view(torch.int16).to(torch.int64).view(-1, 16, 2)
    words = (words[..., 0] & 0xFFFF) | (words[..., 1] & 0xFFFF) << 16
    f = (127 - (int(scales[0, 0]) - 127)) << 7
    regs = {f"${2 + k}": int(words[0, k]) for k in range(4)}
    regs.update({f"${6 + j}": f | f << 16 for j in range(8)})
    regs.update({f"${14 + j}": MASK for j in range(8)})
    assert run_ptx(bad, regs, bf16_math=True) != run_ptx(asm, regs, bf16_math=True)


def test_only_packed_mxfp4_of_bf16_under_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp4_lanes, "FP4_LANES_VERIFIED", False)
    assert not fp4_lanes.lanes_here("mxfp4", 1, 1, interpreted=True, sm=None)
    monkeypatch.setattr(fp4_lanes, "FP4_LANES_VERIFIED", True)
    assert fp4_lanes.lanes_here("mxfp4", 1, 1, interpreted=True, sm=None)
    assert fp4_lanes.lanes_here("mxfp4", 1, 1, interpreted=False, sm=90)
    assert not fp4_lanes.lanes_here("mxfp4", 1, 1, interpreted=False, sm=89)  # bf16x2 add: sm_90
    assert not fp4_lanes.lanes_here("mxfp4", 2, 1, interpreted=False, sm=90)  # fp16 input
    assert fp4_lanes.lanes_here("mxfp4", 1, 0, interpreted=False, sm=90)  # one code a byte
    assert not fp4_lanes.lanes_here("mxfp6_e2m3", 1, 2, interpreted=False, sm=90)
