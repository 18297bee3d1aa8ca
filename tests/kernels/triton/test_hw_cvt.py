"""hw_cvt: MX codes through the GPU's fp8 conversion. On the CPU: which formats take it (read
from their fields), the grid identity it rests on (ml_dtypes, every bf16 value), when mxfp6
needs its clamp, and each PTX string run by a model of its instructions against the reference's
codes. The quantize kernel's bits through this path, interpreter and GPU, are checked in
test_triton_quant.py and test_quant_every_value.py (the `hw cvt` cases)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from kernels.reference import elements
from kernels.spec.formats import FORMATS, ROUNDINGS
from kernels.triton import hw_cvt

from support.device import DEVICE
from support.ptx_model import MASK, run_ptx

FP6 = {"mxfp6_e2m3": ml_dtypes.float6_e2m3fn, "mxfp6_e3m2": ml_dtypes.float6_e3m2fn}
FP8 = {1: ml_dtypes.float8_e4m3fn, 2: ml_dtypes.float8_e5m2}
# (format, PTX output kind, asm string)
ASMS = [("mxfp8_e4m3", "bytes", hw_cvt._E4M3_BYTES.value),
        ("mxfp8_e5m2", "bytes", hw_cvt._E5M2_BYTES.value),
        ("mxfp6_e2m3", "fp6 bytes", hw_cvt._E2M3_BYTES.value),
        ("mxfp6_e3m2", "fp6 bytes", hw_cvt._E3M2_BYTES.value),
        ("mxfp6_e2m3", "fp6 groups", hw_cvt._E2M3_GROUPS.value),
        ("mxfp6_e3m2", "fp6 groups", hw_cvt._E3M2_GROUPS.value)]


def test_carriers_come_from_the_format_fields() -> None:
    got = {name: hw_cvt.carrier(fmt) for name, fmt in FORMATS.items()}
    assert got == {"mxfp4": (0, 0), "mxfp6_e2m3": (1, 6), "mxfp6_e3m2": (2, 12),
                   "mxfp8_e4m3": (1, 0), "mxfp8_e5m2": (2, 0), "mxint8": (0, 0)}


@pytest.mark.parametrize("name", list(FP6))
def test_mxfp6_rounding_is_the_fp8_rounding_shifted(name: str) -> None:
    """Every bf16 value within the mxfp6 range: ml_dtypes' fp6 rounding of v equals its fp8
    rounding of v * 2**-shift, and the fp8 byte with its sign moved is the fp6 code."""
    fmt = FORMATS[name]
    code, shift = hw_cvt.carrier(fmt)
    v = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    v = v[v.abs() <= fmt.max_normal].numpy()
    fp6 = v.astype(FP6[name])
    fp8 = (v * np.float32(2.0 ** -shift)).astype(FP8[code])
    np.testing.assert_array_equal(fp6.astype(np.float32),
                                  fp8.astype(np.float32) * np.float32(2.0 ** shift))
    b = fp8.view(np.uint8).astype(np.int32)
    np.testing.assert_array_equal((b & 0x1F) | ((b >> 2) & 0x20), fp6.view(np.uint8))


def test_clamp_only_where_a_value_can_pass_the_max() -> None:
    for name, fmt in FORMATS.items():
        code, shift = hw_cvt.carrier(fmt)
        for rounding in ROUNDINGS:
            clamp = hw_cvt.clamp_of(fmt, shift, rounding)
            if name.startswith("mxfp6") and rounding == "floor":
                assert clamp == fmt.max_normal * 2.0 ** -shift, (name, rounding)
            else:
                assert clamp == 0.0, (name, rounding)


def test_the_gate_and_the_architecture_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = FORMATS["mxfp6_e3m2"]
    monkeypatch.setattr(hw_cvt, "CVT_VERIFIED", False)
    assert hw_cvt.cvt_here(fmt, interpreted=True, sm=None) == 0
    monkeypatch.setattr(hw_cvt, "CVT_VERIFIED", True)
    assert hw_cvt.cvt_here(fmt, interpreted=True, sm=None) == 2
    assert hw_cvt.cvt_here(fmt, interpreted=False, sm=90) == 2
    assert hw_cvt.cvt_here(fmt, interpreted=False, sm=80) == 0  # no fp8 cvt before sm_89
    assert hw_cvt.cvt_here(fmt, interpreted=False, sm=None) == 0
    assert hw_cvt.cvt_here(FORMATS["mxfp4"], interpreted=False, sm=90) == 0


def _values(name: str, count: int, seed: int) -> np.ndarray:
    """fp32 values the kernel hands the PTX for `name` (already times 2**(-E - shift)): within
    the clamp for mxfp6; for mxfp8 past the max as well (saturation). Ties and edges included."""
    fmt = FORMATS[name]
    _, shift = hw_cvt.carrier(fmt)
    top = fmt.max_normal * 2.0 ** -shift
    rng = np.random.default_rng(seed)
    grid = np.array([elements.code_value(fmt, c) for c in range(1 << (fmt.bits - 1))
                     if np.isfinite(elements.code_value(fmt, c))], dtype=np.float64)
    grid = np.unique(grid) * 2.0 ** -shift
    ties = (grid[1:] + grid[:-1]) / 2
    edges = np.concatenate([grid, ties, np.nextafter(ties, 0), np.nextafter(ties, 1),
                            [0.0, 1e-40, 1e-45, top]])
    if shift == 0:
        edges = np.concatenate([edges, [top * 1.03, top * 1.2, 3.0e38]])
    spread = top * np.exp2(rng.uniform(-24, 0.3 if shift == 0 else 0, count))
    v = np.concatenate([edges, spread]).astype(np.float32)
    if shift:
        v = np.minimum(v, np.float32(top))
    sign = np.where(rng.random(v.size) < 0.5, -1.0, 1.0).astype(np.float32)
    return v * sign


@pytest.mark.parametrize("name,out,asm", ASMS, ids=[f"{n}-{o}" for n, o, _ in ASMS])
def test_ptx_gives_the_reference_codes(name: str, out: str, asm: str) -> None:
    fmt = FORMATS[name]
    _, shift = hw_cvt.carrier(fmt)
    v = _values(name, 1200, seed=len(name) + len(out))
    v = np.concatenate([v, np.zeros((-v.size) % 4, np.float32)]).reshape(-1, 4)
    want = elements.encode(torch.from_numpy(v * np.float32(2.0 ** shift)), fmt).numpy()
    want = want.astype(np.int64)
    bits = v.view(np.uint32)
    base = 4 if out == "fp6 groups" else 1
    for i in range(v.shape[0]):
        keep = 0 if i % 7 == 3 else MASK  # a NaN / Inf block's mask: codes 0
        regs = {f"${base + j}": int(bits[i, j]) for j in range(4)}
        regs.update({f"${base + 4 + j}": keep for j in range(4)})
        got = run_ptx(asm, regs)
        codes = want[i] if keep else np.zeros(4, np.int64)
        if out == "fp6 groups":
            group = int(codes[0] | codes[1] << 6 | codes[2] << 12 | codes[3] << 18)
            assert [got[f"${j}"] for j in range(4)] == [group, 0, 0, 0], (name, v[i])
        else:
            word = int(codes[0] | codes[1] << 8 | codes[2] << 16 | codes[3] << 24)
            assert got["$0"] == word, (name, out, v[i], hex(got["$0"]), hex(word))


def test_the_model_catches_a_drift() -> None:
    """A one-bit slip in a PTX string (the sign's shift) fails against the reference."""
    asm = hw_cvt._E2M3_BYTES.value
    bad = asm.replace("shr.b32 t, w, 2;", "shr.b32 t, w, 1;")
    assert bad != asm
    with pytest.raises(AssertionError):
        test_ptx_gives_the_reference_codes("mxfp6_e2m3", "fp6 bytes", bad)


@triton.jit
def _pow2_kernel(e_ptr, out_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(out_ptr + i, hw_cvt.pow2_wide(tl.load(e_ptr + i)))


def test_pow2_wide_is_exact_down_to_the_smallest_subnormal() -> None:
    e = torch.arange(-149, 128, dtype=torch.int32)
    e = torch.cat([e, e[:512 - e.numel()]])
    out = torch.empty(e.numel(), dtype=torch.float32, device=DEVICE)
    _pow2_kernel[(1,)](e.to(DEVICE), out, N=e.numel())
    want = torch.tensor([2.0 ** int(k) for k in e.tolist()], dtype=torch.float64).float()
    assert torch.equal(out.cpu().view(torch.int32), want.view(torch.int32))


BACK = [("mxfp8_e4m3", hw_cvt._FROM_E4M3.value), ("mxfp8_e5m2", hw_cvt._FROM_E5M2.value),
        ("mxfp6_e2m3", hw_cvt._FROM_E2M3.value), ("mxfp6_e3m2", hw_cvt._FROM_E3M2.value)]


@pytest.mark.parametrize("name,asm", BACK, ids=[n for n, _ in BACK])
def test_ptx_decodes_every_code(name: str, asm: str) -> None:
    """Every byte (an mxfp6 byte's two high bits are not the code: ignored) through the way
    back, four a word: the reference's element values (NaN / Inf codes included)."""
    fmt = FORMATS[name]
    gen = torch.Generator().manual_seed(3)
    codes = torch.cat([torch.arange(256), torch.randperm(256, generator=gen)]).to(torch.uint8)
    want = elements.decode(codes & ((1 << fmt.bits) - 1), fmt).float()
    got = []
    for word in codes.view(-1, 4).to(torch.int64):
        packed = int(word[0] | word[1] << 8 | word[2] << 16 | word[3] << 24)
        out = run_ptx(asm, {"$4": packed})
        got += [out[f"${j}"] for j in range(4)]
    got = torch.tensor(got, dtype=torch.int64).to(torch.int32).view(torch.float32)
    assert torch.equal(got.isnan(), want.isnan()), name
    keep = ~want.isnan()
    assert torch.equal(got[keep].view(torch.int32), want[keep].view(torch.int32)), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_ptx_satfinite_store_is_saturate_then_cast(dtype: torch.dtype) -> None:
    """The dequantize kernel's one-instruction store against the reference's saturate + RNE
    cast: values around the dtype's max, its ties, Inf, NaN, subnormals and random ones."""
    from kernels.reference import mx as ref
    top = torch.finfo(dtype).max
    gen = torch.Generator().manual_seed(5)
    edges = torch.tensor([top, -top, top * 1.001, top * 0.999, float("inf"), float("-inf"),
                          float("nan"), 0.0, -0.0, 1e-40, -3e-45, 3.0e38, 1.0, -1.0])
    near = torch.tensor(top, dtype=torch.float32) + torch.arange(-40, 41) * (top / 512)
    x = torch.cat([edges, near, -near, torch.randn(400, generator=gen)
                   * torch.exp2(torch.randint(-140, 130, (400,), generator=gen).float())])
    x = torch.cat([x, torch.zeros(x.numel() % 2)]).float()
    want = ref.saturate(x, dtype).to(dtype)
    asm = (hw_cvt._TO_BF16 if dtype == torch.bfloat16 else hw_cvt._TO_F16).value
    bits = x.view(torch.int32).to(torch.int64) & MASK
    got = []
    for a, b in bits.view(-1, 2).tolist():
        word = run_ptx(asm, {"$1": a, "$2": b})["$0"]
        got += [word & 0xFFFF, word >> 16]
    got = torch.tensor(got, dtype=torch.int32).to(torch.int16).view(dtype)
    assert torch.equal(got.isnan(), want.isnan())
    keep = ~want.isnan()
    assert torch.equal(got[keep].view(torch.int16), want[keep].view(torch.int16))
