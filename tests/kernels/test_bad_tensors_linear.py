"""Bad tensors for every linear kernel's prepare + apply (issue 7; the list of public functions
is at the top of test_bad_tensors_codec.py).

Kernels are built with kernels.base.load_kernel. The triton ones run in Triton's interpreter on
CPU (tests/conftest.py); scaled-mm-mx runs only on sm_100+, so everywhere else its apply must
raise a clear RuntimeError (checked here), while its argument checks run everywhere. Each case:
a one-line error (type, argument, shape / dtype / device, fix asserted), or the documented
result of docs/numerics.md "Bad inputs" compared bit for bit with the well-formed call.
"""
from __future__ import annotations

import pytest
import torch

from kernels.base import load_kernel
from kernels.mx import MXTensor, mx_quantize
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton import linear_dot_scaled, linear_emulation, mx_quant
from kernels.triton.linear_emulation import fused_linear

from support.bad_tensors import BAD_DTYPES, NEEDS_CUDA, bits, one_line_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
N = 16


def key(fmt: str, static: bool) -> QuantKey:
    return QuantKey.mx(fmt, rounding="even", static=static)


def contract(wfmt: str, afmt: str | None) -> SchemeContract:
    act = None if afmt is None else key(afmt, False)
    return SchemeContract(weight=key(wfmt, True), activation=act)


#: kernel -> (contract, activation dtype, K): one contract each kernel declares.
KERNELS = {
    "reference-emulation": (contract("mxfp4", "mxfp4"), torch.float32, 64),
    "dequant-weight-only": (contract("mxfp6_e3m2", None), torch.bfloat16, 64),
    "triton-emulation": (contract("mxfp4", "mxfp6_e2m3"), torch.float32, 64),
    "triton-dot-scaled": (contract("mxfp4", "mxfp4"), torch.bfloat16, 64),
    "triton-fp8-mma": (contract("mxfp8_e4m3", "mxfp8_e4m3"), torch.bfloat16, 64),
    "scaled-mm-mx": (contract("mxfp8_e4m3", "mxfp8_e4m3"), torch.bfloat16, 128),
}
#: apply variants: the kernels' apply plus fused_linear's forced strategies.
VARIANTS = {name: (name, None) for name in KERNELS}
VARIANTS.update({f"triton-emulation/{s}": ("triton-emulation", s)
                 for s in ("decode", "tiled", "dequant-gemm")})


def _mx_gemm_here() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (10, 0)


RUNNABLE = [v for v in VARIANTS if VARIANTS[v][0] != "scaled-mm-mx" or _mx_gemm_here()]


def randn(*shape: int, seed: int = 0, dtype=torch.float32, device=DEVICE) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def setup(variant: str, weight=None):
    """(apply(x, bias), prepared, x dtype, K) for a variant; weight defaults to random [N, K]."""
    name, strategy = VARIANTS[variant]
    con, dtype, k = KERNELS[name]
    kernel = load_kernel(name)
    if strategy == "dequant-gemm":
        dtype = torch.bfloat16
    prepared = kernel.prepare(randn(N, k, seed=1) if weight is None else weight, con)
    if strategy is None:
        return (lambda x, b=None: kernel.apply(x, prepared, b)), prepared, dtype, k
    return (lambda x, b=None: fused_linear(x, prepared, b, strategy=strategy)), prepared, dtype, k


# ----------------------------------------------------------------------------- prepare
PREPARE_CASES = {  # case -> (make(K, weight format), needles)
    **{f"dtype-{n}": (lambda k, f, d=d: torch.ones(N, k).to(d), ["weight", str(d), "cast"])
       for n, d in BAD_DTYPES.items()},
    "meta": (lambda k, f: torch.empty(N, k, device="meta"), ["weight", "meta", "materialize"]),
    "1-D": (lambda k, f: randn(64), ["weight", "2-D", "(64,)"]),
    "3-D": (lambda k, f: randn(2, N, 64), ["weight", "2-D", f"(2, {N}, 64)"]),
    "list": (lambda k, f: [[0.0] * k] * N, ["weight", "2-D", "list"]),
    "K=48": (lambda k, f: randn(N, 48), ["weight", f"({N}, 48)", "multiple of", "pad"]),
    "K=0": (lambda k, f: randn(N, 0), ["weight", "K=0"]),
    "N=0": (lambda k, f: randn(0, k), ["weight", "(0, ", "out_features is 0"]),
    "mx-other-format": (lambda k, f: mx_quantize(randn(N, k), "mxint8", rounding="even"),
                        ["weight MXTensor is mxint8/even", "quantize the weight"]),
    "mx-other-rounding": (lambda k, f: mx_quantize(randn(N, k), f, rounding="floor"),
                          ["weight MXTensor is", "/floor", "rounding"]),
    "mx-meta": (lambda k, f: MXTensor(*_meta_parts(k, f)), ["weight MXTensor", "meta"]),
    "mx-3d": (lambda k, f: mx_quantize(randn(2, N, k), f, rounding="even"),
              ["weight", "2-D", f"(2, {N}, "]),
}


def _meta_parts(k: int, fmt: str):
    t = mx_quantize(randn(N, k), fmt, rounding="even")
    return t.data.to("meta"), t.scales.to("meta"), fmt, "even", t.shape


@pytest.mark.parametrize("case", PREPARE_CASES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_prepare_rejects_bad_weights(kernel, case):
    con, _, k = KERNELS[kernel]
    make, needles = PREPARE_CASES[case]
    one_line_error(ValueError, lambda: load_kernel(kernel).prepare(make(k, con.weight.format),
                                                                   con), *needles)


STATIC_FP8 = SchemeContract(weight=key("mxfp4", True), activation=FP8_STATIC_TENSOR_KEY)
BAD_ACT_SCALES = {
    "zero": (0.0, "> 0"), "negative": (-1.0, "> 0"), "nan": (float("nan"), "nan"),
    "inf": (float("inf"), "inf"), "shape-2": (torch.tensor([1.0, 2.0]), "(2,)"),
    "bool": (torch.tensor(True), "torch.bool"), "complex": (torch.tensor(1j), "complex"),
    "string": ("1.0", "str"),
}


@pytest.mark.parametrize("case", BAD_ACT_SCALES)
@pytest.mark.parametrize("kernel", ["reference-emulation", "triton-emulation"])
def test_prepare_rejects_bad_static_act_scales(kernel, case):
    scale, needle = BAD_ACT_SCALES[case]
    one_line_error(ValueError, lambda: load_kernel(kernel).prepare(randn(N, 64), STATIC_FP8,
                                                                   act_scale=scale),
                   "activation scale", needle)


def test_prepare_act_scale_arguments_must_fit_the_activation_key():
    kernel = load_kernel("reference-emulation")
    w = randn(N, 64)
    one_line_error(ValueError, lambda: kernel.prepare(w, KERNELS["reference-emulation"][0],
                                                      act_scale=0.5), "dynamic", "no act_scale")
    one_line_error(ValueError, lambda: kernel.prepare(w, STATIC_FP8), "static", "act_scale=")
    one_line_error(ValueError, lambda: kernel.prepare(w, STATIC_FP8, act_scale=0.5,
                                                      calibration=w), "not both")
    one_line_error(ValueError, lambda: kernel.prepare(w, STATIC_FP8, calibration=w.int()),
                   "calibration sample", "torch.int32")


# ----------------------------------------------------------------------------- apply: errors
def _bias_cases(k: int) -> dict:
    return {
        "bias-N+1": (randn(N + 1), ["bias", f"({N},)", f"({N + 1},)"]),
        "bias-broadcast-1": (randn(1), ["bias", f"({N},)", "(1,)"]),
        "bias-2d": (randn(1, N), ["bias", f"({N},)", f"(1, {N})"]),
        "bias-int32": (torch.ones(N, dtype=torch.int32, device=DEVICE), ["bias", "torch.int32"]),
        "bias-float64": (randn(N, dtype=torch.float64), ["bias", "torch.float64"]),
        "bias-meta": (torch.empty(N, device="meta"), ["bias", "meta"]),
    }


APPLY_CASES = ["x-" + n for n in ("int32", "float64", "bool", "complex64", "uint8-codes")] + \
    ["x-meta", "x-K/2", "x-0dim"] + list(_bias_cases(64))


@pytest.mark.parametrize("case", APPLY_CASES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_apply_rejects_bad_inputs(variant, case):
    apply, _, dtype, k = setup(variant)
    x, bias = randn(3, k, dtype=dtype), None
    if case.startswith("bias-"):
        bias, needles = _bias_cases(k)[case]
    elif case == "x-meta":
        x, needles = torch.empty(3, k, dtype=dtype, device="meta"), ["input", "meta"]
    elif case == "x-K/2":
        x, needles = randn(3, k // 2, dtype=dtype), [f"(3, {k // 2})", f"in_features={k}"]
    elif case == "x-0dim":
        x, needles = torch.tensor(1.0, dtype=dtype, device=DEVICE), ["()", f"in_features={k}"]
    else:
        bad = BAD_DTYPES[case[2:]]
        x, needles = torch.ones(3, k).to(device=DEVICE, dtype=bad), ["input dtype", str(bad)]
    one_line_error(ValueError, lambda: apply(x, bias), *needles)


@pytest.mark.skipif(_mx_gemm_here(), reason="this GPU runs MX GEMMs (sm_100+)")
def test_scaled_mm_mx_refuses_to_run_where_cublas_has_no_mx_gemm():
    apply, _, dtype, k = setup("scaled-mm-mx")
    one_line_error(RuntimeError, lambda: apply(randn(3, k, dtype=dtype)), "scaled-mm-mx",
                   "torch._scaled_mm", "registry resolve")


@pytest.mark.parametrize("variant", ["triton-emulation", "triton-dot-scaled", "triton-fp8-mma"])
def test_triton_kernels_refuse_cpu_tensors_outside_the_interpreter(variant, monkeypatch):
    """CPU tensors without TRITON_INTERPRET=1: a clear error, never a launch."""
    name, _ = VARIANTS[variant]
    con, dtype, k = KERNELS[name]
    kernel = load_kernel(name)
    prepared = kernel.prepare(randn(N, k, device="cpu"), con)
    for module in (mx_quant, linear_emulation, linear_dot_scaled):
        monkeypatch.setattr(module, "_INTERPRETED", False)
    x = randn(20, k, dtype=dtype, device="cpu")  # M > 16: fp8-mma's own path, not decode
    one_line_error(ValueError, lambda: kernel.apply(x, prepared), "cpu", "CUDA")


# ----------------------------------------------------------------------------- documented results
@pytest.mark.parametrize("lead", [(0,), (2, 0)], ids=["M=0", "2x0"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_rows_give_an_empty_output(variant, lead):
    apply, _, dtype, k = setup(variant)
    bias = randn(N, dtype=torch.bfloat16 if variant.endswith("dequant-gemm") else dtype)
    for b in (None, bias):
        out = apply(randn(*lead, k, dtype=dtype), b)
        assert out.shape == (*lead, N) and out.dtype == dtype and out.device.type == DEVICE


def _views(k: int, dtype, seed: int) -> dict[str, torch.Tensor]:
    return {
        "transposed": randn(k, 17, seed=seed, dtype=dtype).t(),
        "strided-slice": randn(17, 2 * k, seed=seed, dtype=dtype)[:, 1::2],
        "expanded": randn(1, k, seed=seed, dtype=dtype).expand(17, k),
        "channels-last": randn(1, k, 17, seed=seed, dtype=dtype).permute(0, 2, 1),
    }


@pytest.mark.parametrize("variant", RUNNABLE)
def test_non_contiguous_inputs_give_the_contiguous_bits(variant):
    apply, _, dtype, k = setup(variant)
    for name, x in _views(k, dtype, seed=4).items():
        assert not x.is_contiguous()
        assert torch.equal(bits(apply(x)), bits(apply(x.contiguous()))), name


@pytest.mark.parametrize("variant", RUNNABLE)
def test_1d_3d_and_requires_grad_inputs_equal_the_2d_call(variant):
    apply, _, dtype, k = setup(variant)
    x = randn(2, 3, k, seed=6, dtype=dtype)
    flat = bits(apply(x.reshape(6, k)))
    assert torch.equal(bits(apply(x)).reshape(6, N), flat)
    assert torch.equal(bits(apply(x[0, 0])), bits(apply(x[0, 0][None]))[0])  # 1-D -> [N]
    grad = apply(x.reshape(6, k).clone().requires_grad_())
    assert torch.equal(bits(grad.detach()), flat)


@pytest.mark.parametrize("variant", RUNNABLE)
def test_scale_byte_0xff_makes_exactly_its_output_column_nan(variant):
    name, _ = VARIANTS[variant]
    con, _, k = KERNELS[name]
    w = mx_quantize(randn(N, k, seed=8), con.weight.format, rounding="even")
    scales = w.scales.clone()
    scales[5, 1] = 0xFF
    nan_w = MXTensor(w.data, scales, w.fmt, w.rounding, w.shape, w.layout)
    apply, _, dtype, _ = setup(variant, w)
    apply_nan, _, _, _ = setup(variant, nan_w)
    x = randn(17, k, seed=9, dtype=dtype)  # M > 16: the tiled / MMA paths, not decode
    good, bad = apply(x), apply_nan(x)
    assert bad[:, 5].isnan().all()
    keep = [n for n in range(N) if n != 5]
    assert torch.equal(bits(bad[:, keep]), bits(good[:, keep]))


@pytest.mark.parametrize("variant", RUNNABLE)
def test_nan_and_inf_inputs_poison_only_their_rows(variant):
    apply, prepared, dtype, k = setup(variant)
    x = randn(17, k, seed=10, dtype=dtype)
    x[1, 3] = float("nan")
    x[2, k - 1] = float("inf")
    clean = x.clone()
    clean[1:3] = 0
    got, want = apply(x), apply(clean)
    assert not got[1:3].isfinite().any()
    if prepared.contract.activation is not None:
        assert got[1:3].isnan().all()  # an MX activation block holding NaN / Inf -> NaN block
    keep = [0] + list(range(3, 17))
    assert torch.equal(bits(got[keep]), bits(want[keep]))


# ----------------------------------------------------------------------------- mixed devices
@NEEDS_CUDA
@pytest.mark.parametrize("variant", VARIANTS)
def test_mixed_cuda_and_cpu_tensors_are_refused(variant):
    name, _ = VARIANTS[variant]
    con, dtype, k = KERNELS[name]
    apply_cpu, _, _, _ = setup(variant, randn(N, k, device="cpu"))
    one_line_error(ValueError, lambda: apply_cpu(randn(3, k, dtype=dtype, device="cuda")),
                   "input on cuda:0", "weight on cpu", "one device")
    apply, _, dtype, k = setup(variant)  # weight on the GPU
    bias_dtype = torch.bfloat16 if variant.endswith("dequant-gemm") else dtype
    one_line_error(ValueError, lambda: apply(randn(3, k, dtype=dtype),
                                             randn(N, dtype=bias_dtype, device="cpu")),
                   "bias", "cpu")
