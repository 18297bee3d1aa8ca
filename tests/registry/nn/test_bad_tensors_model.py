"""Bad tensors for the model-level API (issue 7; the list of public functions is at the top of
test_bad_tensors_codec.py): MXLinear, quantize_model / plan_quantization, save_quantized /
load_quantized with tampered files, MXGroupedExperts.

Each case: a one-line error (type, argument, shape / dtype / device, fix asserted) that leaves
the layer / model as it was, or the documented result compared bit for bit.
"""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from registry import MXGroupedExperts
from kernels.mx import mx_quantize
from registry.nn.checkpoint import CheckpointError, load_quantized, save_quantized
from registry.nn.layers import MXLinear
from registry.nn.quantize import plan_quantization, quantize_model

from support.bad_tensors import NEEDS_CUDA, bits, one_line_error

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape: int, seed: int = 0, dtype=torch.float32, device=DEVICE) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


# ----------------------------------------------------------------------------- MXLinear
CTOR_CASES = {  # case -> (kwargs change, exception, needles)
    "weight-int32": (dict(weight=torch.ones(32, 64, dtype=torch.int32)), TypeError,
                     ["float tensor or an MXTensor", "torch.int32"]),
    "weight-uint8": (dict(weight=torch.ones(32, 64, dtype=torch.uint8)), TypeError,
                     ["torch.uint8"]),
    "weight-float64": (dict(weight=torch.ones(32, 64, dtype=torch.float64)), ValueError,
                       ["weight", "torch.float64", "float32"]),
    "weight-meta": (dict(weight=torch.empty(32, 64, device="meta")), ValueError, ["meta"]),
    "weight-1d": (dict(weight=randn(64)), ValueError, ["2-D", "(64,)"]),
    "weight-K48": (dict(weight=randn(32, 48)), ValueError, ["(32, 48)", "pad"]),
    "bias-shape": (dict(bias=randn(31)), ValueError, ["bias", "(32,)", "(31,)"]),
    "bias-broadcast": (dict(bias=randn(1)), ValueError, ["bias", "(32,)", "(1,)"]),
    "bias-int": (dict(bias=torch.ones(32, dtype=torch.int64, device=DEVICE)), ValueError,
                 ["bias", "torch.int64"]),
    "bias-float64": (dict(bias=randn(32, dtype=torch.float64)), ValueError,
                     ["bias", "torch.float64"]),
    "bias-meta": (dict(bias=torch.empty(32, device="meta")), ValueError, ["bias", "meta"]),
    "act-scale-zero": (dict(scheme="w_mxfp4_a_fp8", act_scale=0.0), ValueError, ["scale", "> 0"]),
    "act-scale-nan": (dict(scheme="w_mxfp4_a_fp8", act_scale=float("nan")), ValueError, ["nan"]),
    "act-scale-shape": (dict(scheme="w_mxfp4_a_fp8", act_scale=torch.ones(2)), ValueError,
                        ["(2,)"]),
    "act-scale-dynamic": (dict(act_scale=0.5), ValueError, ["dynamic", "no act_scale"]),
    "act-dtype": (dict(act_dtype=torch.int8), ValueError, ["act_dtype", "torch.int8"]),
}


@pytest.mark.parametrize("case", CTOR_CASES)
def test_mxlinear_constructor_rejects_bad_tensors(case):
    change, exc, needles = CTOR_CASES[case]
    kw = dict(weight=randn(32, 64), scheme="w_mxfp4_a_mxfp4", bias=None)
    kw.update(change)
    one_line_error(exc, lambda: MXLinear(kw.pop("weight"), kw.pop("scheme"), kw.pop("bias"), **kw),
                   *needles)


def test_from_linear_rejects_what_it_cannot_quantize():
    one_line_error(TypeError, lambda: MXLinear.from_linear(nn.Conv1d(64, 32, 1), "w_mxfp4"),
                   "nn.Linear", "Conv1d")
    one_line_error(ValueError, lambda: MXLinear.from_linear(nn.Linear(64, 32).double(), "w_mxfp4"),
                   "torch.float64", "linear.float()")
    one_line_error(ValueError, lambda: MXLinear.from_linear(nn.Linear(48, 32), "w_mxfp4"),
                   "48", "pad")


@pytest.fixture
def layer() -> MXLinear:
    return MXLinear(randn(32, 64, seed=1), "w_mxfp4_a_fp8", randn(32, seed=2), act_scale=0.03)


FORWARD_CASES = {
    "int32": (lambda: torch.ones(3, 64, dtype=torch.int32, device=DEVICE), ["torch.int32"]),
    "float64": (lambda: randn(3, 64, dtype=torch.float64), ["torch.float64"]),
    "meta": (lambda: torch.empty(3, 64, device="meta"), ["meta"]),
    "last-dim": (lambda: randn(3, 32), ["(3, 32)", "in_features=64"]),
}


@pytest.mark.parametrize("case", FORWARD_CASES)
def test_mxlinear_forward_rejects_bad_inputs(layer, case):
    make, needles = FORWARD_CASES[case]
    one_line_error(ValueError, lambda: layer(make()), *needles)


def test_mxlinear_forward_documented_results(layer):
    x = randn(2, 3, 64, seed=3)
    want = bits(layer(x))
    assert layer(randn(0, 64)).shape == (0, 32) and layer(randn(2, 0, 64)).shape == (2, 0, 32)
    assert torch.equal(bits(layer(x.transpose(0, 1).contiguous().transpose(0, 1))), want)
    assert torch.equal(bits(layer(x.clone().requires_grad_()).detach()), want)
    assert torch.equal(bits(layer(x.reshape(6, 64))).reshape(2, 3, 32), want)


def _state_cases(layer: MXLinear) -> dict:
    sd = layer.state_dict()
    return {
        "weight-float-codes": ({"weight": sd["weight"].float()},
                               ["weight", "torch.float32", "uint8"]),
        "weight-shape": ({"weight": sd["weight"][:, :16]}, ["weight", "(32, 16)", "(32, 32)"]),
        "scale-int8": ({"weight_scale": sd["weight_scale"].view(torch.int8)},
                       ["weight_scale", "torch.int8", "E8M0"]),
        "bias-int": ({"bias": sd["bias"].long()}, ["bias", "torch.int64"]),
        "input-scale-zero": ({"input_scale": torch.tensor(0.0)}, ["input_scale", "> 0"]),
        "input-scale-shape": ({"input_scale": torch.ones(2)}, ["input_scale", "(2,)"]),
        "input-scale-int": ({"input_scale": torch.tensor(1)}, ["input_scale", "torch.int64"]),
    }


@pytest.mark.parametrize("case", list(_state_cases(
    MXLinear(torch.randn(32, 64), "w_mxfp4_a_fp8", torch.randn(32), act_scale=0.03))))
def test_load_state_dict_refuses_bad_tensors_before_copying(layer, case):
    change, needles = _state_cases(layer)[case]
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    sd = {**layer.state_dict(), **change}
    one_line_error(ValueError, lambda: layer.load_state_dict(sd), *needles)
    for k, v in layer.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k


def test_to_an_unusable_device_or_dtype_changes_nothing(layer):
    x = randn(3, 64, seed=4)
    want = bits(layer(x))
    one_line_error(ValueError, lambda: layer.to("meta"), "meta", "move the model")
    one_line_error(ValueError, lambda: layer.double(), "torch.float64", "float32")
    assert layer.weight.device.type == DEVICE and layer.bias.dtype == torch.float32
    assert torch.equal(bits(layer(x)), want)
    half = layer.to(torch.bfloat16)  # a usable dtype: re-resolved, codes unchanged
    assert half.weight.dtype == torch.uint8 and half.input_scale.dtype == torch.float32
    assert half(x.bfloat16()).dtype == torch.bfloat16


@NEEDS_CUDA
def test_mxlinear_mixed_devices():
    cpu_layer = MXLinear(randn(32, 64, device="cpu"), "w_mxfp4")
    one_line_error(ValueError, lambda: cpu_layer(randn(3, 64, device="cuda")), "cuda:0", "cpu")
    one_line_error(ValueError, lambda: MXLinear(randn(32, 64, device="cuda"), "w_mxfp4",
                                                randn(32, device="cpu")), "bias", "cpu")


# ----------------------------------------------------------------------------- quantize_model
def _model(dtype=torch.float32, device=DEVICE, k=64) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(k, 32), nn.ReLU(), nn.Linear(32, 16)).to(device, dtype)


QUANTIZE_CASES = {
    "model-float64": (dict(model=lambda: _model(torch.float64)), ["layer 0", "float64"]),
    "model-meta": (dict(model=lambda: _model(device="meta")), ["layer 0", "meta"]),
    "in-features-48": (dict(model=lambda: _model(k=48)), ["0 (in_features 48)", "ignore"]),
    "act-scale-zero": (dict(scheme="w_mxfp4_a_fp8", act_scales={"0": 0.0, "2": 0.1}),
                       ["layer 0", "> 0"]),
    "act-scale-nan": (dict(scheme="w_mxfp4_a_fp8", act_scales={"0": 0.1, "2": float("nan")}),
                      ["layer 2", "nan"]),
    "act-scale-shape": (dict(scheme="w_mxfp4_a_fp8", act_scales={"0": torch.ones(3), "2": 0.1}),
                        ["layer 0", "(3,)"]),
    "act-scale-string": (dict(scheme="w_mxfp4_a_fp8", act_scales={"0": "0.1", "2": 0.1}),
                         ["layer 0", "str"]),
}


@pytest.mark.parametrize("fn", ["quantize_model", "plan_quantization"])
@pytest.mark.parametrize("case", QUANTIZE_CASES)
def test_quantize_model_errors_name_the_layer_and_change_nothing(case, fn):
    change, needles = QUANTIZE_CASES[case]
    model = change.get("model", _model)()
    scheme = change.get("scheme", "w_mxfp4")
    if fn == "plan_quantization":
        if "act_scales" in change:
            return  # a plan takes no scales
        call = lambda: plan_quantization(model, scheme)  # noqa: E731
    else:
        call = lambda: quantize_model(model, scheme, act_scales=change.get("act_scales"))  # noqa
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert "\n" not in str(info.value)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))
    assert not any(isinstance(m, MXLinear) for m in model.modules())


def test_quantize_model_takes_a_module():
    one_line_error(TypeError, lambda: quantize_model(torch.randn(2, 2), "w_mxfp4"), "Tensor")
    one_line_error(TypeError, lambda: save_quantized(torch.randn(2, 2), "x.safetensors"), "Tensor")


# ----------------------------------------------------------------------------- checkpoints
def _saved(tmp_path):
    model = nn.Sequential(nn.Linear(64, 32), nn.LayerNorm(32))
    quantize_model(model, "w_mxfp4_a_fp8", act_scales={"0": 0.05})
    path = tmp_path / "good.safetensors"
    save_quantized(model, path)
    return model, path


def _rewrite(src, dst, tensors=None, drop=(), meta=None, entry=None):
    with safe_open(str(src), framework="pt") as f:
        data = {k: f.get_tensor(k) for k in f.keys()}
        metadata = f.metadata()
    data.update(tensors or {})
    for k in drop:
        del data[k]
    metadata.update(meta or {})
    if entry:
        layers = json.loads(metadata["registry.layers"])
        layers["0"].update(entry)
        metadata["registry.layers"] = json.dumps(layers)
    save_file(data, str(dst), metadata=metadata)
    return dst


U8 = torch.uint8
TAMPER_CASES = {
    "codes-float": (dict(tensors={"0.weight": torch.zeros(32, 32)}),
                    ["0.weight", "torch.float32", "uint8"]),
    "codes-shape": (dict(tensors={"0.weight": torch.zeros(32, 16, dtype=U8)}),
                    ["(32, 16)", "(32, 32)"]),
    "scales-shape": (dict(tensors={"0.weight_scale": torch.zeros(32, 3, dtype=U8)}),
                     ["'0.weight_scale'", "(32, 3)", "(32, 2)"]),
    "scales-e8m0": (dict(tensors={"0.weight_scale": torch.zeros(32, 2, dtype=U8).view(
        torch.float8_e8m0fnu)}), ["0.weight_scale", "float8_e8m0fnu", "uint8"]),
    "bias-int": (dict(tensors={"0.bias": torch.zeros(32, dtype=torch.int32)}),
                 ["bias", "torch.int32"]),
    "bias-shape": (dict(tensors={"0.bias": torch.zeros(31)}), ["bias", "(31,)"]),
    "input-scale-zero": (dict(tensors={"0.input_scale": torch.tensor(0.0)}), ["layer 0", "> 0"]),
    "input-scale-f64": (dict(tensors={"0.input_scale": torch.tensor(0.1, dtype=torch.float64)}),
                        ["input_scale", "torch.float64", "torch.float32"]),
    "input-scale-shape": (dict(tensors={"0.input_scale": torch.ones(4)}), ["layer 0", "(4,)"]),
    "other-dtype": (dict(tensors={"1.weight": torch.ones(32, dtype=torch.float16)}),
                    ["'1.weight'", "torch.float16"]),
    "other-shape": (dict(tensors={"1.bias": torch.ones(33)}), ["'1.bias'", "(33,)"]),
    "missing-scales": (dict(drop=["0.weight_scale"]), ["0.weight_scale", "missing"]),
    "missing-other": (dict(drop=["1.weight"]), ["'1.weight'", "missing"]),
    "extra-key": (dict(tensors={"2.weight": torch.ones(2)}), ["'2.weight'", "no place"]),
    "json-corrupt": (dict(meta={"registry.layers": "{not json"}), ["registry.layers", "JSON"]),
    "json-not-object": (dict(meta={"registry.layers": "[1, 2]"}), ["registry.layers", "object"]),
    "json-empty": (dict(meta={"registry.layers": "{}"}), ["registry.layers", "non-empty"]),
    "version-future": (dict(meta={"registry.format_version": "99"}), ["99", "upgrade"]),
    "version-zero": (dict(meta={"registry.format_version": "0"}), ["format_version is 0"]),
    "version-text": (dict(meta={"registry.format_version": "one"}), ["'one'", "integer"]),
    "entry-missing": (dict(meta={"registry.layers": json.dumps({"0": {"scheme": "w_mxfp4"}})}),
                      ["layer 0", "lacks", "rounding"]),
    "entry-shape-type": (dict(entry={"shape": "32x64"}), ["shape", "'32x64'", "two positive"]),
    "entry-bias-type": (dict(entry={"bias": "yes"}), ["bias", "'yes'", "true or false"]),
    "entry-layout": (dict(entry={"layout": "diagonal"}),
                     ["layer 0", "'diagonal'", "valid layouts"]),
    "entry-scheme": (dict(entry={"scheme": "w_mxfp3"}), ["layer 0", "w_mxfp3"]),
    "entry-layer-name": (dict(meta={"registry.layers": json.dumps({"9": {}})}), ["9"]),
}


@pytest.mark.parametrize("case", TAMPER_CASES)
def test_tampered_checkpoints_are_refused_and_change_nothing(case, tmp_path):
    _, good = _saved(tmp_path)
    bad = _rewrite(good, tmp_path / "bad.safetensors", **TAMPER_CASES[case][0])
    skeleton = nn.Sequential(nn.Linear(64, 32), nn.LayerNorm(32))
    before = {k: v.clone() for k, v in skeleton.state_dict().items()}
    one_line_error(CheckpointError, lambda: load_quantized(skeleton, bad), *TAMPER_CASES[case][1])
    assert isinstance(skeleton[0], nn.Linear) and not isinstance(skeleton[0], MXLinear)
    assert all(torch.equal(v, before[k]) for k, v in skeleton.state_dict().items())


def test_unreadable_files_and_meta_models(tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    one_line_error(CheckpointError, lambda: load_quantized(nn.Linear(64, 32), junk), "junk",
                   "not a readable safetensors file")
    model, _ = _saved(tmp_path)
    model.append(nn.Linear(4, 4, device="meta"))
    one_line_error(ValueError, lambda: save_quantized(model, tmp_path / "m.safetensors"),
                   "'2.weight'", "meta")


# ----------------------------------------------------------------------------- MoE
E, N, K = 4, 16, 64


def _experts(backend: str, **kw) -> MXGroupedExperts:
    return MXGroupedExperts(randn(E, N, K, seed=20), "w_mxfp4_a_mxfp4", backend=backend, **kw)


def _mx_list(shapes, device=DEVICE):
    return [mx_quantize(randn(*s, seed=i, device=device), "mxfp4", rounding="even")
            for i, s in enumerate(shapes)]


MOE_CTOR_CASES = {
    "int-weights": (lambda: torch.ones(E, N, K, dtype=torch.int32), ["torch.int32", "float32"]),
    "float64": (lambda: randn(E, N, K, dtype=torch.float64), ["torch.float64"]),
    "meta": (lambda: torch.empty(E, N, K, device="meta"), ["expert weights", "meta"]),
    "2-D": (lambda: randn(N, K), ["3-D", f"({N}, {K})"]),
    "K=48": (lambda: randn(E, N, 48), ["K=48", "pad"]),
    "E=0": (lambda: randn(0, N, K), ["3-D", f"(0, {N}, {K})"]),
    "mixed-shapes": (lambda: _mx_list([(N, K), (N + 1, K)]), ["expert 1", f"({N + 1}, {K})"]),
    "empty-list": (lambda: [], ["empty"]),
    "other-format": (lambda: mx_quantize(randn(E, N, K), "mxint8", rounding="even"),
                     ["mxint8/even", "contract"]),
}


@pytest.mark.parametrize("case", MOE_CTOR_CASES)
def test_moe_constructor_rejects_bad_weights(case):
    make, needles = MOE_CTOR_CASES[case]
    one_line_error(ValueError, lambda: MXGroupedExperts(make(), "w_mxfp4_a_mxfp4"), *needles)


def _moe_forward_cases():
    x = randn(5, K, seed=21)
    logits = randn(5, E, seed=22)
    ids = torch.tensor([[0, 1]] * 5, device=DEVICE)
    w = torch.full((5, 2), 0.5, device=DEVICE)
    f, r = "forward", "forward_routed"
    return {
        "logits-shape": (f, (x, randn(5, E + 1), 2), ["router_logits", f"(5, {E + 1})", f"E={E}"]),
        "logits-tokens": (f, (x, randn(4, E), 2), ["router_logits", "(4, 4)", "(5,)"]),
        "logits-int": (f, (x, logits.long(), 2), ["router_logits", "torch.int64"]),
        "logits-complex": (f, (x, logits.to(torch.complex64), 2), ["torch.complex64"]),
        "logits-meta": (f, (x, torch.empty(5, E, device="meta"), 2), ["router_logits", "meta"]),
        "top_k-0": (f, (x, logits, 0), ["top_k=0", f"[1, {E}]"]),
        "top_k-E+1": (f, (x, logits, E + 1), [f"top_k={E + 1}"]),
        "top_k-bool": (f, (x, logits, True), ["top_k=True"]),
        "top_k-float": (f, (x, logits, 2.0), ["top_k=2.0"]),
        "x-int": (f, (x.int(), logits, 2), ["x", "torch.int32"]),
        "x-last-dim": (f, (randn(5, 32), logits, 2), ["(5, 32)", f"K={K}"]),
        "x-meta": (f, (torch.empty(5, K, device="meta"), logits, 2), ["x", "meta"]),
        "ids-float": (r, (x, ids.float(), w), ["topk_ids", "torch.float32"]),
        "ids-bool": (r, (x, ids.bool(), w), ["topk_ids", "torch.bool"]),
        "ids-negative": (r, (x, ids - 1, w), ["expert -1", f"[0, {E - 1}]"]),
        "ids-too-big": (r, (x, ids + E - 1, w), [f"expert {E}", f"[0, {E - 1}]"]),
        "ids-meta": (r, (x, torch.empty(5, 2, dtype=torch.long, device="meta"), w),
                     ["topk_ids", "meta"]),
        "weights-shape": (r, (x, ids, w[:, :1]), ["topk_ids (5, 2)", "topk_weights (5, 1)"]),
        "weights-int": (r, (x, ids, w.long()), ["topk_weights", "torch.int64"]),
        "ids-tokens": (r, (x, ids[:4], w[:4]), ["topk_ids", "(4, 2)"]),
        "top_k-too-big": (r, (x, ids.repeat(1, 3), w.repeat(1, 3)), ["top_k=6", f"[1, {E}]"]),
    }


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("case", list(_moe_forward_cases()))
def test_moe_forward_rejects_bad_routing(case, backend):
    fn, args, needles = _moe_forward_cases()[case]
    layer = _experts(backend)
    one_line_error(ValueError, lambda: getattr(layer, fn)(*args), *needles)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_moe_documented_results(backend):
    layer = _experts(backend)
    x, logits = randn(2, 3, K, seed=23), randn(2, 3, E, seed=24)
    want = bits(layer(x, logits, 2))
    assert layer(randn(0, K), randn(0, E), 2).shape == (0, N)
    assert torch.equal(bits(layer(x.reshape(6, K), logits.reshape(6, E), 2)).reshape(2, 3, N), want)
    odd = x.transpose(0, 1).contiguous().transpose(0, 1)
    assert torch.equal(bits(layer(odd, logits, 2)), want)
    assert torch.equal(bits(layer(x.clone().requires_grad_(), logits, 2).detach()), want)
    bad = x.clone()
    bad[1, 2, 5] = float("nan")
    got = layer(bad, logits, 2)
    assert got[1, 2].isnan().all()  # the token's NaN activation block -> NaN output row
    mask = torch.ones(2, 3, dtype=torch.bool)
    mask[1, 2] = False
    assert torch.equal(bits(got[mask]), want[mask])


@NEEDS_CUDA
def test_moe_mixed_devices():
    one_line_error(ValueError, lambda: MXGroupedExperts(
        _mx_list([(N, K)]) + _mx_list([(N, K)], device="cpu"), "w_mxfp4_a_mxfp4"),
        "expert 1", "cpu", "one device")
    layer = _experts("auto")
    one_line_error(ValueError, lambda: layer(randn(5, K), randn(5, E, device="cpu"), 2),
                   "router_logits", "cpu", "cuda:0")
    one_line_error(ValueError, lambda: layer(randn(5, K, device="cpu"), randn(5, E), 2),
                   "x is on cpu", "cuda:0")
