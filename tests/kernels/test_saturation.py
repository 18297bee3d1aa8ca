"""Saturation on the way back (docs/numerics.md): a finite input never comes back as Inf.

Blocks at the top of each dtype's range, where a rounded-up scale (`even`, `rceil`) times an
element passes the dtype's max (fp16 65504, bf16 ~3.39e38, or fp32's max in the fp32 product),
and dequantization into a narrower dtype. Checked against the independent float64 oracle of
test_reference (which saturates finite elements to +-max) and, bit for bit, the Triton kernels
(CPU interpreter in CI) against the reference; NaN / Inf blocks still decode to NaN.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch

from kernels.dispatch import activation_qdq
from kernels.mx import mx_dequantize, mx_qdq, mx_quantize
from kernels.reference import mx as ref
from kernels.reference.elements import max_code_magnitude
from kernels.reference.fp8_tensor import fp8_tensor_qdq
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS
from kernels.spec.formats import FORMATS, ROUNDINGS, ElemFormat

from support.device import DEVICE
from support.oracles import all_code_values, assert_same_bits, oracle_dequantize, oracle_quantize

# The interpreter's numpy reports the fp32 overflow of the products that are then saturated.
pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
K = 64  # two blocks a row: one Triton interpreter tile
# (format, rounding, input dtype) whose QDQ can not pass the dtype's max: floor never rounds the
# scale up; mxint8's E clamps at 127 before 127/64 * 2**E could reach bf16 / fp32's max.
NO_OVERFLOW = {(f, "floor", d) for f in FORMATS for d in DTYPES} | {
    ("mxint8", r, d) for r in ("even", "rceil") for d in (torch.bfloat16, torch.float32)}


def _tri():
    from kernels.triton import mx_quant
    return mx_quant


def top_rows(fmt: ElemFormat, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """[R, 64] rows in `dtype` at the top of its range: +-max, the scale-rounding edges of `fmt`
    (even's carry point, rceil's max normal) in the top binade, random top values, one huge
    element among small ones, plus NaN / +-Inf blocks and an ordinary block."""
    gen = torch.Generator().manual_seed(seed)
    big = torch.finfo(dtype).max
    top = 2.0 ** math.floor(math.log2(big))  # the top binade [top, 2 * top)
    sign = lambda n: torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)  # noqa: E731
    edges = []
    for a in (2 - 2.0 ** -(fmt.mbits + 1), fmt.max_normal / 2 ** fmt.emax, 1.0):
        v = torch.tensor(min(a * top, big), dtype=torch.float64).to(dtype).float()
        edges += [v, v.to(dtype).nextafter(torch.tensor(0.0, dtype=dtype)).float()]
    edge_block = torch.stack(edges).repeat(6)[:32] * sign(32)
    blocks = [
        torch.full((32,), big), torch.full((32,), -big),
        big * (1 - torch.rand(32, generator=gen) / 2) * sign(32),
        big * (1 - torch.rand(32, generator=gen) / 64) * sign(32),
        edge_block,
        torch.cat([torch.tensor([-big]), torch.randn(31, generator=gen)]),
        torch.cat([torch.full((31,), big / 2), torch.tensor([float("nan")])]),
        torch.cat([torch.tensor([float("inf")]), torch.full((31,), big)]),
        torch.cat([torch.full((16,), big), torch.tensor([-float("inf")]), torch.full((15,), -big)]),
        torch.randn(32, generator=gen),
    ]
    x = torch.stack([b.double() for b in blocks]).view(-1, K)
    return x.to(dtype)  # every finite value <= max: the cast to dtype keeps it finite


def _case(name: str, rounding: str, dtype: torch.dtype) -> tuple[ElemFormat, torch.Tensor]:
    fmt = FORMATS[name]
    return fmt, top_rows(fmt, dtype, zlib.crc32(f"{name} {rounding} {dtype}".encode()))


def _bad_blocks(x: torch.Tensor) -> torch.Tensor:
    """[R, K] mask of the elements in blocks holding a NaN or an Inf."""
    bad = ~torch.isfinite(x.float()).view(x.shape[0], -1, 32).all(-1, keepdim=True)
    return bad.expand(-1, -1, 32).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("name", list(FORMATS))
def test_reference_saturates_like_the_oracle(name: str, rounding: str, dtype: torch.dtype) -> None:
    fmt, x = _case(name, rounding, dtype)
    codes, scales = oracle_quantize(x.float().numpy(), fmt, rounding)
    assert_same_bits(ref.qdq(x, fmt, rounding), oracle_dequantize(codes, scales, fmt, dtype))
    data, got_scales = ref.quantize(x, fmt, rounding, "unpacked")
    assert np.array_equal(got_scales.numpy(), scales) and np.array_equal(data.numpy(), codes)
    for out_dtype in DTYPES:  # narrower and wider than x
        got = ref.dequantize(data, got_scales, fmt, "unpacked", K, out_dtype)
        assert_same_bits(got, oracle_dequantize(codes, scales, fmt, out_dtype))
        bad = _bad_blocks(x)
        assert got[bad].isnan().all(), "a NaN / Inf block must decode to NaN"
        assert torch.isfinite(got[~bad]).all(), f"finite input came back as Inf in {out_dtype}"
    # the inputs do reach the case: the exact value passes the dtype's max somewhere
    exact = all_code_values(fmt)[codes] * np.ldexp(1.0, scales.astype(np.int64) - 127).repeat(32, 1)
    reached = bool((np.abs(exact[~_bad_blocks(x).numpy()]) > torch.finfo(dtype).max).any())
    assert reached == ((name, rounding, dtype) not in NO_OVERFLOW)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("name", list(FORMATS))
def test_triton_saturates_bit_for_bit(name: str, rounding: str, dtype: torch.dtype) -> None:
    fmt, x = _case(name, rounding, dtype)
    layout = "packed" if fmt.bits < 8 else "unpacked"
    q = mx_quantize(x.to(DEVICE), name, rounding, backend="triton", layout=layout)
    want = mx_quantize(x, name, rounding, backend="reference", layout=layout)
    assert torch.equal(q.data.cpu(), want.data) and torch.equal(q.scales.cpu(), want.scales)
    for out_dtype in DTYPES:
        assert_same_bits(mx_dequantize(q, out_dtype, backend="triton").cpu(),
                         mx_dequantize(want, out_dtype, backend="reference"))
    got = mx_qdq(x.to(DEVICE), name, rounding, backend="triton").cpu()
    assert_same_bits(got, mx_qdq(x, name, rounding, backend="reference"))
    assert torch.isfinite(got[~_bad_blocks(x)]).all() and got[_bad_blocks(x)].isnan().all()


def test_the_reported_case() -> None:
    """Issue 12, defect 8: fp16 60000 through mxfp4 `even` gave Inf; fp32 ~3e38 too."""
    x = torch.full((1, 32), 60000.0, dtype=torch.half)
    for backend in ("reference", "triton"):
        out = mx_qdq(x.to(DEVICE if backend == "triton" else "cpu"), "mxfp4", "even", backend=backend)
        assert out.cpu().eq(65504.0).all()
        out = mx_qdq(-x.float().to(out.device) * 5e33, "mxfp4", "even", backend=backend)
        assert out.cpu().eq(-torch.finfo(torch.float32).max).all()


@pytest.mark.parametrize("name", list(FORMATS))
def test_largest_codes_at_the_largest_scale(name: str) -> None:
    """Hand-made bytes: the max code under scale 2**127 saturates (fp32 too, where the product
    overflows); an E5M2 Inf code stays Inf, an E4M3 NaN code NaN, scale byte 0xFF NaN."""
    fmt = FORMATS[name]
    top = max_code_magnitude(fmt)
    neg = 256 - top if fmt.is_int else top | 1 << fmt.sign_bit  # mxint8: -127/64 is 0x81
    codes = torch.tensor([[top, neg] * 16, [top, neg] * 16], dtype=torch.uint8)
    special = {"mxfp8_e5m2": (0x7C, 0xFC), "mxfp8_e4m3": (0x7F, 0xFF)}.get(name)
    if special:
        codes[1, :2] = torch.tensor(special, dtype=torch.uint8)
    codes = codes.repeat(1, 2)
    scales = torch.tensor([[254, 255], [254, 254]], dtype=torch.uint8)
    for out_dtype in DTYPES:
        want = oracle_dequantize(codes.numpy(), scales.numpy(), fmt, out_dtype)
        got = ref.dequantize(codes, scales, fmt, "unpacked", K, out_dtype)
        assert_same_bits(got, want)
        assert_same_bits(_tri().dequantize(codes.to(DEVICE), scales.to(DEVICE), fmt, "unpacked",
                                           K, out_dtype).cpu(), want)
        assert got[:, 32:][0].isnan().all()
        big = torch.finfo(out_dtype).max
        if not fmt.is_int or out_dtype == torch.float16:  # 127/64 * 2**127 fits bf16 / fp32
            assert got[0, :2].tolist() == [big, -big]
        if special == (0x7C, 0xFC):
            assert got[1, :2].tolist() == [float("inf"), -float("inf")]
        elif special:
            assert got[1, :2].isnan().all()


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dispatcher_saturates(backend: str, dtype: torch.dtype) -> None:
    """Every MX activation key through the dispatcher, and fp8 per-tensor QDQ (448 * scale above
    the dtype's max; +-Inf -> +-max; NaN stays NaN)."""
    device = DEVICE if backend == "triton" else "cpu"
    big = torch.finfo(dtype).max
    x = top_rows(FORMATS["mxfp4"], dtype, seed=1)
    for key in sorted(MX_DYNAMIC_KEYS, key=str):
        got = activation_qdq(key, backend=backend)(x.to(device), None).cpu()
        assert_same_bits(got, ref.qdq(x, FORMATS[key.format], key.scale.rounding))
        assert torch.isfinite(got[~_bad_blocks(x)]).all()
    y = torch.tensor([big, -big, float("inf"), -float("inf"), float("nan"), 1.0] * 2).to(dtype)
    scale = torch.tensor(big / 433.0, dtype=torch.float32)  # 433 rounds up to 448 in E4M3
    got = activation_qdq(FP8_STATIC_TENSOR_KEY, backend=backend)(y, scale)
    assert_same_bits(got, fp8_tensor_qdq(y, scale))
    assert got[:4].tolist() == [big, -big, big, -big] and got[4].isnan() and got[5].isfinite()


# ----------------------------------------------- the emulation linear kernels near the top
@pytest.mark.parametrize("strategy, m", [("decode", 1), ("decode", 5), ("tiled", 40)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_linear_activation_qdq_saturates_like_the_dispatcher(strategy, m, dtype):
    """W4A4 `even`: activations at the top of x's dtype QDQ to +-max, never Inf, in the fused
    kernels' own activation tile (tiled, MoE) as in the dispatcher (decode)."""
    from kernels.base import load_kernel
    from kernels.reference.linear import ReferenceEmulationLinear
    from kernels.triton.linear_emulation import fused_linear
    from kernels.spec.contract import QuantKey, SchemeContract

    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=QuantKey.mx("mxfp4", rounding="even", static=False))
    g = torch.Generator().manual_seed(zlib.crc32(f"lin {strategy} {m} {dtype}".encode()))
    prepared = load_kernel("triton-emulation").prepare(
        (torch.rand(16, K, generator=g) * 0.01).to(DEVICE), contract)
    top = torch.finfo(dtype).max * 0.92  # `even` rounds this block's scale up past max / 6
    x = torch.randn(m, K, generator=g).clamp(-1, 1)
    x[:, :32] = top  # one sign: no cancellation, so summation order cannot matter
    x = x.to(device=DEVICE, dtype=dtype)
    want = ReferenceEmulationLinear().apply(x, prepared)
    got = fused_linear(x, prepared, strategy=strategy)
    assert want.isfinite().all() and got.isfinite().all()
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=0)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e5m2", "mxfp6_e3m2"])
def test_linear_weight_decode_saturates_at_fp32_max(fmt):
    """A weight block whose code * 2**E passes fp32's max dequantizes to +-fp32 max in the
    kernels' weight tiles, as mx_dequantize does (no Inf, so no Inf * 0 = NaN)."""
    from kernels.base import load_kernel
    from kernels.reference.linear import ReferenceEmulationLinear
    from kernels.triton.linear_emulation import fused_linear
    from kernels.triton.linear_tiles import weight_may_overflow
    from kernels.spec.contract import QuantKey, SchemeContract

    contract = SchemeContract(weight=QuantKey.mx(fmt, rounding="even", static=True),
                              activation=None)
    g = torch.Generator().manual_seed(zlib.crc32(f"wsat {fmt}".encode()))
    w = torch.randn(16, K, generator=g)
    w[3, :32] = 3.3e38  # `even` rounds the scale up: the largest codes pass fp32's max
    prepared = load_kernel("triton-emulation").prepare(w.to(DEVICE), contract)
    assert weight_may_overflow(FORMATS[fmt].max_normal, prepared.weight.scales)
    x = torch.zeros(3, K, device=DEVICE)
    x[:, 40] = 1.0  # row 3's huge block meets zeros: Inf there would give NaN
    for strategy in ("decode", "tiled"):
        got = fused_linear(x, prepared, strategy=strategy)
        want = ReferenceEmulationLinear().apply(x, prepared)
        assert not want.isnan().any() and not got.isnan().any(), strategy
        torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
