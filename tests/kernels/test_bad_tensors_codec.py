"""Bad tensors for every public function (issue 7): the MX codec and the activation scales.

Public functions covered by the three test_bad_tensors_* files:
  codec (this file):  mx_quantize / mx_qdq / mx_dequantize (backends "reference" and "triton"),
                      MXTensor(...), activation_qdq (MX and fp8 keys), fp8_tensor_qdq,
                      calibrate_act_scale, check_act_scale;
  linear (test_bad_tensors_linear.py): LinearKernel.prepare + apply of reference-emulation,
                      dequant-weight-only, triton-emulation (fused_linear: decode / tiled /
                      dequant-gemm), triton-dot-scaled, triton-fp8-mma, scaled-mm-mx (built with
                      kernels.base.load_kernel);
  model (test_bad_tensors_model.py): MXLinear (ctor, forward, from_linear, load_state_dict,
                      .to()), quantize_model / plan_quantization, save_quantized /
                      load_quantized (tampered files), MXGroupedExperts (ctor, forward,
                      forward_routed).

Each bad case is either a ONE-line error whose type and message (argument, shape / dtype /
device, fix) are asserted, or the documented result of docs/numerics.md "Bad inputs", checked
bit for bit (against the contiguous / 2-D / reference call). Mixed cuda/cpu cases run when a
GPU is present and are skipped only when torch.cuda.is_available() is False (no second device
to mix with on this machine). The Triton backend runs in the interpreter on CPU (conftest.py).
"""
from __future__ import annotations

import pytest
import torch

from kernels.dispatch import activation_qdq, calibrate_act_scale
from kernels.mx import MXTensor, mx_dequantize, mx_qdq, mx_quantize
from kernels.reference.fp8_tensor import check_act_scale, fp8_tensor_qdq
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY, MX_DYNAMIC_KEYS

from support.bad_tensors import BAD_DTYPES, NEEDS_CUDA, bits, one_line_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MX_KEY = next(k for k in sorted(MX_DYNAMIC_KEYS, key=str) if k.format == "mxfp6_e2m3")
SCALE = torch.tensor(0.02)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(*shape: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=gen(seed)).to(dtype=dtype, device=DEVICE)


# ----------------------------------------------------------------------------- the functions
#: name -> f(x): every public function that takes float activations.
X_FUNCTIONS = {
    "mx_quantize/reference": lambda x: mx_quantize(x, "mxfp4", backend="reference"),
    "mx_quantize/triton": lambda x: mx_quantize(x, "mxfp4", backend="triton"),
    "mx_qdq/reference": lambda x: mx_qdq(x, "mxfp6_e3m2", backend="reference"),
    "mx_qdq/triton": lambda x: mx_qdq(x, "mxfp6_e3m2", backend="triton"),
    "activation_qdq/mx": lambda x: activation_qdq(MX_KEY, backend="triton")(x, None),
    "activation_qdq/fp8": lambda x: activation_qdq(FP8_STATIC_TENSOR_KEY)(x, SCALE),
    "fp8_tensor_qdq": lambda x: fp8_tensor_qdq(x, SCALE),
}
MX_SHAPED = [n for n in X_FUNCTIONS if "fp8" not in n]  # functions with the K % 32 rule


@pytest.mark.parametrize("case", BAD_DTYPES)
@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_wrong_dtype_is_a_one_line_error(fn, case):
    x = torch.ones(4, 64).to(BAD_DTYPES[case])
    one_line_error(ValueError, lambda: X_FUNCTIONS[fn](x), str(BAD_DTYPES[case]), "float32",
                   "cast")


@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_meta_device_is_a_one_line_error(fn):
    one_line_error(ValueError, lambda: X_FUNCTIONS[fn](torch.empty(4, 64, device="meta")),
                   "meta", "materialize")


SHAPE_CASES = {
    "0-dim": (torch.tensor(1.0), ["0-dim", "last axis"]),
    "K=0": (torch.ones(4, 0), ["(4, 0)", "K=0"]),
    "K=48": (torch.ones(4, 48), ["(4, 48)", "multiple of", "32", "pad it to 64"]),
    "K=33-3d": (torch.ones(2, 3, 33), ["(2, 3, 33)", "pad it to 64"]),
}


@pytest.mark.parametrize("case", SHAPE_CASES)
@pytest.mark.parametrize("fn", MX_SHAPED)
def test_bad_mx_shape_names_k_and_the_fix(fn, case):
    x, needles = SHAPE_CASES[case]
    one_line_error(ValueError, lambda: X_FUNCTIONS[fn](x.to(DEVICE)), *needles)


# ----------------------------------------------------------------------------- documented results
def _as_outputs(out) -> list[torch.Tensor]:
    return [out.data, out.scales] if isinstance(out, MXTensor) else [bits(out)]


@pytest.mark.parametrize("lead", [(0,), (2, 0)], ids=["M=0", "2x0"])
@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_zero_rows_give_empty_results_of_the_documented_shape(fn, lead):
    out = X_FUNCTIONS[fn](randn(*lead, 64))
    if isinstance(out, MXTensor):
        assert out.shape == (*lead, 64) and out.data.shape == (*lead, 32)
        assert out.scales.shape == (*lead, 2)
        back = mx_dequantize(out, torch.bfloat16)
        assert back.shape == (*lead, 64) and back.dtype == torch.bfloat16
    else:
        assert out.shape == (*lead, 64) and out.dtype == torch.float32


def _views(seed: int) -> dict[str, torch.Tensor]:
    """Non-contiguous views holding [6, 64] / [2, 3, 64] values (last axis 64)."""
    return {
        "transposed": randn(64, 6, seed=seed).t(),
        "strided-slice": randn(6, 128, seed=seed)[:, ::2],
        "row-slice": randn(12, 64, seed=seed)[::2],
        "expanded": randn(1, 64, seed=seed).expand(6, 64),
        "channels-last": randn(2, 64, 3, seed=seed).permute(0, 2, 1),
        "batched-expand": randn(3, 64, seed=seed).unsqueeze(0).expand(2, 3, 64),
    }


@pytest.mark.parametrize("view", list(_views(0)))
@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_non_contiguous_inputs_give_the_contiguous_bits(fn, view):
    x = _views(3)[view]
    assert not x.is_contiguous()
    got, want = X_FUNCTIONS[fn](x), X_FUNCTIONS[fn](x.contiguous())
    for a, b in zip(_as_outputs(got), _as_outputs(want)):
        assert a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("shape", [(64,), (2, 3, 64), (2, 1, 2, 96)], ids=["1-D", "3-D", "4-D"])
@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_any_leading_shape_equals_the_2d_call(fn, shape):
    x = randn(*shape, seed=5)
    got = X_FUNCTIONS[fn](x)
    flat = X_FUNCTIONS[fn](x.reshape(-1, shape[-1]))
    for a, b in zip(_as_outputs(got), _as_outputs(flat)):
        assert a.shape[:-1] == shape[:-1] and torch.equal(a.reshape(b.shape), b)


@pytest.mark.parametrize("fn", X_FUNCTIONS)
def test_requires_grad_inputs_give_the_same_bits_and_no_graph(fn):
    x = randn(4, 64, seed=7)
    got = X_FUNCTIONS[fn](x.clone().requires_grad_())
    for a, b in zip(_as_outputs(got), _as_outputs(X_FUNCTIONS[fn](x))):
        assert torch.equal(a, b)
    if not isinstance(got, MXTensor):
        assert not got.requires_grad  # documented: inference numerics, no autograd


def _special_input(dtype: torch.dtype) -> torch.Tensor:
    """[4, 96] with a NaN block, a +Inf block, a -Inf block, a subnormal block, zeros."""
    x = randn(4, 96, seed=11, dtype=torch.float32)
    x[0, 3] = float("nan")
    x[1, 40] = float("inf")
    x[2, 70] = -float("inf")
    tiny = torch.finfo(dtype).tiny
    x[3, :32] = torch.linspace(-tiny / 2, tiny / 4, 32)  # subnormals of `dtype` (and 0)
    x[3, 32:64] = 0.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxint8"])
def test_nan_inf_subnormal_inputs_match_the_reference_bit_for_bit(fmt, dtype):
    x = _special_input(dtype)
    ref = mx_quantize(x, fmt, rounding="even", backend="reference")
    tri = mx_quantize(x, fmt, rounding="even", backend="triton")
    assert torch.equal(ref.data, tri.data) and torch.equal(ref.scales, tri.scales)
    bad = torch.zeros(4, 3, dtype=torch.bool)
    bad[0, 0] = bad[1, 1] = bad[2, 2] = True  # documented: NaN / Inf block -> byte 0xFF
    assert torch.equal(ref.scales.cpu() == 0xFF, bad)
    codes = ref.data.cpu().view(4, 3, -1)
    assert codes[bad].eq(0).all()  # ... and all its codes 0
    qdq = mx_qdq(x, fmt, rounding="even", backend="triton")
    assert torch.equal(bits(qdq), bits(mx_qdq(x, fmt, rounding="even", backend="reference")))
    blocks = qdq.float().cpu().view(4, 3, 32)
    assert blocks[bad].isnan().all() and blocks[~bad].isfinite().all()  # NaN block, no other


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e3m2", "mxfp8_e5m2"])
def test_scale_byte_0xff_decodes_to_a_nan_block(fmt, backend):
    t = mx_quantize(randn(3, 96, seed=13), fmt, rounding="rceil", backend="reference")
    scales = t.scales.clone()
    scales[1, 2] = scales[2, 0] = 0xFF
    bad = MXTensor(t.data, scales, t.fmt, t.rounding, t.shape, t.layout)
    for dtype in (torch.float32, torch.bfloat16):
        got = mx_dequantize(bad, dtype, backend=backend)
        want = mx_dequantize(bad, dtype, backend="reference")
        assert torch.equal(bits(got), bits(want))  # bit for bit against the reference
        nan_block = got.float().cpu().view(3, 3, 32).isnan().all(dim=-1)
        assert nan_block.nonzero().tolist() == [[1, 2], [2, 0]]
        assert torch.equal(bits(got)[0], bits(mx_dequantize(t, dtype, backend=backend))[0])


def test_non_contiguous_mxtensor_dequantizes_to_the_same_bits():
    t = mx_quantize(randn(6, 64, seed=17), "mxfp4")
    data = t.data.t().contiguous().t()  # same shape and values, column-major
    scales = t.scales.t().contiguous().t()
    odd = MXTensor(data, scales, t.fmt, t.rounding, t.shape, t.layout)
    assert not odd.data.is_contiguous()
    for backend in ("reference", "triton"):
        assert torch.equal(bits(mx_dequantize(odd, backend=backend)),
                           bits(mx_dequantize(t, backend=backend)))


# ----------------------------------------------------------------------------- MXTensor(...)
def _mx_parts():
    t = mx_quantize(randn(4, 64, seed=19), "mxfp4")
    return t.data, t.scales


MXTENSOR_CASES = {
    "data-int8": (lambda d, s: dict(data=d.view(torch.int8)), ValueError,
                  ["MXTensor.data", "torch.int8", "uint8"]),
    "data-float": (lambda d, s: dict(data=d.float()), ValueError, ["MXTensor.data", "float32"]),
    "scales-e8m0": (lambda d, s: dict(scales=s.view(torch.float8_e8m0fnu)), ValueError,
                    ["MXTensor.scales", "float8_e8m0fnu", "view(torch.uint8)"]),
    "data-list": (lambda d, s: dict(data=d.tolist()), ValueError, ["MXTensor.data", "list"]),
    "data-shape": (lambda d, s: dict(data=d[:, :16]), ValueError,
                   ["MXTensor.data", "(4, 16)", "(4, 32)"]),
    "scales-shape": (lambda d, s: dict(scales=s[:, :1]), ValueError,
                     ["MXTensor.scales", "(4, 1)", "(4, 2)"]),
    "shape-K48": (lambda d, s: dict(shape=(4, 48)), ValueError, ["(4, 48)", "pad"]),
    "shape-0dim": (lambda d, s: dict(shape=()), ValueError, ["0-dim"]),
    "shape-negative": (lambda d, s: dict(shape=(-4, 64)), ValueError, ["(-4, 64)", "negative"]),
    "shape-floats": (lambda d, s: dict(shape=(4.0, 64)), ValueError, ["MXTensor.shape", "4.0"]),
    "fmt": (lambda d, s: dict(fmt="mxfp5"), ValueError, ["'mxfp5'", "valid formats"]),
    "rounding": (lambda d, s: dict(rounding="up"), ValueError, ["'up'", "valid roundings"]),
    "layout": (lambda d, s: dict(layout="dense"), ValueError, ["'dense'", "valid layouts"]),
    "layout-unpacked": (lambda d, s: dict(layout="unpacked"), ValueError,
                        ["(4, 32)", "(4, 64)", "layout"]),
}


@pytest.mark.parametrize("case", MXTENSOR_CASES)
def test_mxtensor_rejects_mismatched_parts(case):
    data, scales = _mx_parts()
    change, exc, needles = MXTENSOR_CASES[case]
    kw = dict(data=data, scales=scales, fmt="mxfp4", rounding="floor", shape=(4, 64),
              layout="packed")
    kw.update(change(data, scales))
    one_line_error(exc, lambda: MXTensor(**kw), *needles)


def test_meta_mxtensor_can_be_described_but_not_decoded():
    data, scales = _mx_parts()
    t = MXTensor(data.to("meta"), scales.to("meta"), "mxfp4", "floor", (4, 64))
    assert t.device.type == "meta" and t.nbytes == 4 * 32 + 4 * 2
    for backend in ("auto", "reference", "triton"):
        one_line_error(ValueError, lambda: mx_dequantize(t, backend=backend), "MXTensor t",
                       "meta", "materialize")


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64, torch.bool, torch.uint8])
def test_dequantize_rejects_output_dtypes(dtype):
    t = mx_quantize(randn(2, 32), "mxfp4")
    one_line_error(ValueError, lambda: mx_dequantize(t, dtype), str(dtype), "float32")
    one_line_error(TypeError, lambda: mx_dequantize(t.data), "MXTensor", "Tensor")


@NEEDS_CUDA
def test_mixed_devices_in_mxtensor_and_its_use():
    data, scales = _mx_parts()
    one_line_error(ValueError, lambda: MXTensor(data.cuda(), scales.cpu(), "mxfp4", "floor",
                                                (4, 64)), "cuda:0", "cpu", "one device")
    x = torch.randn(4, 64, device="cuda")
    # the reference backend runs on any device; the result stays on x's device, same bits
    ref = mx_quantize(x, "mxfp4", backend="reference")
    assert ref.device == x.device
    assert torch.equal(ref.data.cpu(), mx_quantize(x.cpu(), "mxfp4").data)
    # fp8_tensor_qdq moves a CPU scale to x's device (documented): the same bits as on CPU
    assert torch.equal(bits(fp8_tensor_qdq(x, SCALE)).cpu(), bits(fp8_tensor_qdq(x.cpu(), SCALE)))


# ----------------------------------------------------------------------------- act scales
BAD_SCALES = {
    "zero": (0.0, "> 0"), "negative": (-0.5, "> 0"), "nan": (float("nan"), "nan"),
    "inf": (float("inf"), "inf"), "underflows-fp32": (1e-50, "got 0.0"),
    "overflows-fp32": (torch.tensor(1e40, dtype=torch.float64), "inf"),
    "shape-2": (torch.tensor([0.5, 0.5]), "(2,)"), "bool": (True, "bool"),
    "bool-tensor": (torch.tensor(True), "torch.bool"),
    "complex": (torch.tensor(0.5 + 0.5j), "complex"), "string": ("0.5", "str"),
    "none-list": ([None], "list"), "meta": (torch.empty((), device="meta"), "meta"),
}


@pytest.mark.parametrize("case", BAD_SCALES)
def test_check_act_scale_rejects_bad_scales(case):
    scale, needle = BAD_SCALES[case]
    one_line_error(ValueError, lambda: check_act_scale(scale), "scale", needle)


@pytest.mark.parametrize("case", ["zero", "negative", "nan", "inf", "shape-2", "bool",
                                  "complex", "string"])
def test_fp8_tensor_qdq_rejects_bad_cpu_scales(case):
    scale, needle = BAD_SCALES[case]
    one_line_error(ValueError, lambda: fp8_tensor_qdq(randn(2, 8), scale), needle)
    one_line_error(ValueError, lambda: activation_qdq(FP8_STATIC_TENSOR_KEY)(randn(2, 8), scale),
                   needle)


@pytest.mark.parametrize("scale", [2, 0.25, torch.tensor([0.25], dtype=torch.float64),
                                   torch.tensor(3, dtype=torch.int32)],
                         ids=["int", "float", "float64-1elem", "int-tensor"])
def test_check_act_scale_accepts_real_numbers_as_detached_fp32(scale):
    got = check_act_scale(scale)
    assert got.shape == () and got.dtype == torch.float32 and not got.requires_grad
    assert float(got) == float(torch.as_tensor(scale).float())
    grad = torch.tensor(0.5, requires_grad=True)
    assert not check_act_scale(grad).requires_grad


def test_mx_activation_key_refuses_a_static_scale():
    one_line_error(ValueError, lambda: activation_qdq(MX_KEY)(randn(2, 32), SCALE),
                   "takes no static act_scale", "remove it")
    one_line_error(ValueError, lambda: activation_qdq(FP8_STATIC_TENSOR_KEY)(randn(2, 32), None),
                   "is static", "act_scale=")


CALIBRATION_CASES = {
    "int32": (torch.ones(4, 8, dtype=torch.int32), "torch.int32"),
    "bool": (torch.ones(4, 8, dtype=torch.bool), "torch.bool"),
    "complex": (torch.ones(4, 8, dtype=torch.complex64), "complex64"),
    "meta": (torch.empty(4, 8, device="meta"), "meta"),
    "empty": (torch.empty(0, 8), "(0, 8)"),
    "nan": (torch.tensor([1.0, float("nan")]), "NaN"),
    "inf": (torch.tensor([1.0, float("inf")]), "Inf"),
    "list": ([1.0, 2.0], "list"),
}


@pytest.mark.parametrize("case", CALIBRATION_CASES)
def test_calibrate_act_scale_rejects_bad_samples(case):
    sample, needle = CALIBRATION_CASES[case]
    one_line_error(ValueError, lambda: calibrate_act_scale(FP8_STATIC_TENSOR_KEY, sample),
                   "calibration sample", needle)


def test_calibrate_act_scale_documented_results():
    one_line_error(ValueError, lambda: calibrate_act_scale(MX_KEY, randn(2, 32)),
                   str(MX_KEY), "no static scale")
    zeros = calibrate_act_scale(FP8_STATIC_TENSOR_KEY, torch.zeros(3, 8))
    assert float(zeros) == 2.0**-126  # all-zero sample: the smallest normal fp32, not 0
    x = randn(5, 8, seed=23)
    for dtype in (torch.bfloat16, torch.float64):
        got = calibrate_act_scale(FP8_STATIC_TENSOR_KEY, x.to(dtype))
        assert float(got) == float(x.to(dtype).abs().float().amax() / 448.0)


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3"])
def test_code_bits_above_the_code_width_are_ignored(fmt):
    t = mx_quantize(randn(3, 64, seed=29), fmt, layout="unpacked")
    width = 4 if fmt == "mxfp4" else 6
    noisy = t.data | (torch.randint(0, 256, t.data.shape, generator=gen(31)).to(t.data.device)
                      .to(torch.uint8) & (0xFF << width & 0xFF))
    assert not torch.equal(noisy, t.data)
    dirty = MXTensor(noisy, t.scales, t.fmt, t.rounding, t.shape, t.layout)
    for backend in ("reference", "triton"):
        assert torch.equal(bits(mx_dequantize(dirty, backend=backend)),
                           bits(mx_dequantize(t, backend="reference")))
