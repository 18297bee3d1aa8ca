"""registry.quantize_model / plan_quantization and the MXLinear layer, on CPU.

Every shipped scheme goes through a toy transformer block: each replaced layer must equal an
independent reference (the scheme's quantization of the original weight, the dispatcher-free
QDQ of its input, F.linear), and schemes that declare activation QDQ must differ from the
weight-only output of the same weights.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import registry
from kernels.mx import mx_dequantize, mx_qdq, mx_quantize
from kernels.reference.fp8_tensor import fp8_tensor_qdq
from kernels.select.resolve import ResolutionError, resolve
from kernels.spec.platform import Platform
from registry.files.catalog import load_schemes
from registry.errors import UnknownSchemeError
from registry.nn.layers import MXLinear, platform_for_device
from registry.nn.quantize import plan_quantization, quantize_model

from support.toy_block import LINEARS, inputs, is_static, make_block

CATALOG = load_schemes()
SCHEMES = sorted(CATALOG.schemes)


def record_io(model: nn.Module, x: torch.Tensor) -> dict[str, tuple]:
    """Each MXLinear's (input, output) for one forward pass."""
    seen: dict[str, tuple] = {}
    handles = [m.register_forward_hook(lambda mod, a, out, n=n: seen.__setitem__(n, (a[0], out)))
               for n, m in model.named_modules() if isinstance(m, MXLinear)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return seen


@pytest.mark.parametrize("name", SCHEMES)
def test_every_scheme_equals_the_reference(name):
    scheme = CATALOG.get(name)
    model = make_block(1)
    original = copy.deepcopy(model)
    x = inputs(2)
    kw = {"calibration": x} if is_static(scheme) else {}
    report = quantize_model(model, name, **kw)

    assert [r.layer for r in report] == LINEARS
    want_kernel = "dequant-weight-only" if scheme.activation is None else "reference-emulation"
    for row in report:
        m = original.get_submodule(row.layer)
        assert (row.in_features, row.out_features) == (m.in_features, m.out_features)
        assert (row.scheme, row.kernel, row.platform) == (name, want_kernel, "cpu")
        assert row.quantized and not row.fallback and "emulated on cpu" in row.reason
    wkey, akey = scheme.weight, scheme.activation
    io = record_io(model, x)
    assert sorted(io) == sorted(LINEARS)
    qdq_changed = False
    for layer_name, (x_in, y) in io.items():
        layer, orig = model.get_submodule(layer_name), original.get_submodule(layer_name)
        mx = mx_quantize(orig.weight.detach(), wkey.format, rounding=wkey.scale.rounding,
                         backend="reference")
        assert torch.equal(layer.weight, mx.data) and torch.equal(layer.weight_scale, mx.scales)
        w = mx_dequantize(mx, torch.float32, backend="reference")
        if akey is None:
            xq = x_in
        elif akey.static:
            xq = fp8_tensor_qdq(x_in, layer.input_scale)
        else:
            xq = mx_qdq(x_in, akey.format, rounding=akey.scale.rounding, backend="reference")
        bias = None if orig.bias is None else orig.bias.detach()
        assert torch.equal(y, F.linear(xq, w, bias)), layer_name
        qdq_changed |= not torch.equal(y, F.linear(x_in, w, bias))
    assert qdq_changed == (akey is not None)  # declared activation QDQ is applied, and only then


def test_calibration_scale_is_the_input_amax_over_448():
    model, x = make_block(3), inputs(4)
    amax = {}
    hooks = [model.get_submodule(n).register_forward_pre_hook(
        lambda mod, a, n=n: amax.__setitem__(n, a[0].abs().max())) for n in ("mlp.0", "lm_head")]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    quantize_model(model, "w_mxfp4_a_fp8", targets=["mlp.0", "lm_head"], calibration=x)
    for n in ("mlp.0", "lm_head"):
        assert model.get_submodule(n).input_scale.dtype == torch.float32
        assert torch.equal(model.get_submodule(n).input_scale, (amax[n] / 448.0).float())


def test_explicit_act_scales_and_calibration_for_the_rest():
    model, x = make_block(5), inputs(6)
    report = quantize_model(model, "w_mxfp6_e3m2_a_fp8", act_scales={"lm_head": 0.25},
                            calibration=lambda m: m(x))
    assert model.lm_head.input_scale.item() == 0.25
    assert model.mlp[0].input_scale.item() != 0.25
    assert len(report.quantized) == len(LINEARS)


def test_static_scheme_without_scale_is_an_error_and_changes_nothing():
    model = make_block(7)
    with pytest.raises(ValueError, match=r"layer attn\.q uses w_mxfp4_a_fp8.*act_scales="):
        quantize_model(model, "w_mxfp4_a_fp8")
    assert not any(isinstance(m, MXLinear) for m in model.modules())
    with pytest.raises(ValueError, match="act_scales names 'nope'"):
        quantize_model(model, "w_mxfp4_a_fp8", act_scales={"nope": 1.0}, calibration=inputs(1))
    with pytest.raises(ValueError, match="calibration= was given but is not needed"):
        quantize_model(model, "w_mxfp4", calibration=inputs(1))
    with pytest.raises(ValueError, match=r"calibration never ran layer attn\.k"):
        quantize_model(model, "w_mxfp4_a_fp8", calibration=lambda m: m.attn["q"](inputs(1)))
    assert not any(isinstance(m, MXLinear) for m in model.modules())


def test_targets_by_class_by_regex_by_glob_and_by_name():
    model = make_block(8)
    report = quantize_model(model, "w_mxfp4", targets=["re:mlp\\.", "attn.[qk]", "lm_head"])
    done = {r.layer for r in report.quantized}
    assert done == {"mlp.0", "mlp.2", "attn.q", "attn.k", "lm_head"}
    assert report.row("attn.v").reason.startswith("not matched by targets")
    assert isinstance(model.attn["v"], nn.Linear) and isinstance(model.mlp[2], MXLinear)
    with pytest.raises(ValueError, match=r"targets 'LayerNorm' matches norm \(LayerNorm\)"):
        quantize_model(make_block(8), "w_mxfp4", targets=["Linear", "LayerNorm"])
    with pytest.raises(ValueError, match="targets entry 're:decoder' matches no linear layer"):
        quantize_model(make_block(8), "w_mxfp4", targets=["re:decoder"])
    with pytest.raises(ValueError, match="bad regular expression"):
        quantize_model(make_block(8), "w_mxfp4", targets=["re:(("])


def test_ignore_patterns_are_listed_with_why():
    model = make_block(9)
    report = quantize_model(model, "mxfp4", ignore=["lm_head", "re:attn\\.[qk]$", "*.absent"])
    assert report.row("lm_head").reason == "ignored by pattern 'lm_head'"
    assert report.row("attn.k").reason == "ignored by pattern 're:attn\\\\.[qk]$'"
    assert not report.row("lm_head").quantized and report.row("lm_head").kernel is None
    assert isinstance(model.lm_head, nn.Linear) and isinstance(model.attn["v"], MXLinear)
    assert report.notes == ["ignore entry '*.absent' matched no targeted layer"]
    assert model.attn["v"].scheme_name == "w_mxfp4_a_mxfp4"  # the alias resolved


def test_bad_scheme_name_suggests_close_names():
    with pytest.raises(UnknownSchemeError, match="did you mean.*w_mxfp4"):
        quantize_model(make_block(1), "w_mxfp4_a_mxfp")


def test_in_features_not_multiple_of_32_is_an_error_unless_ignored():
    model = nn.Sequential(nn.Linear(100, 64), nn.ReLU(), nn.Linear(64, 32))
    with pytest.raises(ValueError, match=r"cannot quantize 0 \(in_features 100\).*ignore"):
        quantize_model(model, "w_mxfp4")
    assert isinstance(model[2], nn.Linear)
    report = quantize_model(model, "w_mxfp4", ignore=["0"])
    assert [r.quantized for r in report] == [False, True]
    assert model(torch.randn(3, 100)).shape == (3, 32)


def test_scheme_mapping_gives_each_layer_its_scheme():
    model = make_block(10)
    report = quantize_model(model, {"re:mlp\\.": "w_mxfp4_a_mxfp4", "attn.*": "w_mxfp6_e3m2"})
    assert {r.layer: r.scheme for r in report} == {
        **{n: "w_mxfp6_e3m2" for n in LINEARS if n.startswith("attn")},
        "mlp.0": "w_mxfp4_a_mxfp4", "mlp.2": "w_mxfp4_a_mxfp4", "lm_head": None}
    assert report.row("lm_head").reason == "matched by no key of the scheme mapping"
    assert model.attn["o"].kernel_name == "dequant-weight-only"
    assert model.mlp[0].kernel_name == "reference-emulation"


def test_report_table_and_dicts():
    model = make_block(11)
    report = quantize_model(model, "w_mxfp8_e4m3_a_mxfp8_e4m3", ignore=["lm_head"])
    text = str(report)
    assert text.splitlines()[0] == "quantized: 6 of 7 linear layers"
    assert text.splitlines()[1].split() == ["layer", "in->out", "scheme", "kernel", "platform",
                                            "deviations", "reason"]
    assert text.splitlines()[6].split()[:2] == ["mlp.0", "64->128"] and "ignored by pattern 'lm_head'" in text
    dicts = report.to_dicts()
    assert dicts[4] == {"layer": "mlp.0", "in_features": 64, "out_features": 128,
                        "scheme": "w_mxfp8_e4m3_a_mxfp8_e4m3", "kernel": "reference-emulation",
                        "platform": "cpu", "fallback": False, "quantized": True, "deviations": (),
                        "reason": report.row("mlp.0").reason}


def test_quantizing_again_with_another_scheme_is_refused_and_changes_nothing():
    model = make_block(11)
    quantize_model(model, "w_mxfp4_a_mxfp4", ignore=["lm_head"])
    before = {n: m for n, m in model.named_modules()}
    x = inputs(3)
    with torch.no_grad():
        y = model(x)
    with pytest.raises(ValueError, match=r"^layer attn\.q is already quantized with "
                                         r"w_mxfp4_a_mxfp4 \(W=mxfp4:.* A=mxfp4:.*\); w_mxfp4 "
                                         r"was requested: quantize the float model.*ignore") as e:
        quantize_model(model, "w_mxfp4")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^layer attn\.q is already quantized"):
        plan_quantization(model, "w_mxfp4")
    with pytest.raises(ValueError, match=r"^layer mlp\.0 is already quantized with w_mxfp4_a_"):
        quantize_model(model, {"re:mlp": "w_mxfp6_e3m2", "lm_head": "w_mxfp4"})
    assert dict(model.named_modules()) == before  # lm_head not quantized either
    assert all(m.scheme_name == "w_mxfp4_a_mxfp4" for m in model.modules()
               if isinstance(m, MXLinear))
    with torch.no_grad():
        assert torch.equal(model(x), y)
    # the quantized layers ignored (or left out of targets): the rest is quantized, and the
    # report does not claim the old layers got the new scheme
    again = quantize_model(model, "w_mxfp4", targets=["lm_head"])
    assert again.row("lm_head").scheme == "w_mxfp4" and isinstance(model.lm_head, MXLinear)
    assert again.row("mlp.0").scheme == "w_mxfp4_a_mxfp4"
    assert again.row("mlp.0").reason == ("not matched by targets (lm_head); already quantized "
                                         "with w_mxfp4_a_mxfp4, left unchanged")


def test_quantizing_again_with_the_same_scheme_is_a_reported_no_op():
    model = make_block(12)
    quantize_model(model, "w_mxfp4_a_mxfp4", ignore=["lm_head"])
    layers = {n: m for n, m in model.named_modules() if isinstance(m, MXLinear)}
    codes = {n: m.weight.clone() for n, m in layers.items()}
    report = quantize_model(model, "mxfp4_w4a4", ignore=["lm_head"])  # an alias of it
    assert {n: m for n, m in model.named_modules() if isinstance(m, MXLinear)} == layers
    assert all(torch.equal(m.weight, codes[n]) for n, m in layers.items())
    assert report.row("mlp.0").reason == "already quantized with w_mxfp4_a_mxfp4; left unchanged"
    assert report.notes == ["6 layer(s) were already quantized with the requested scheme and "
                            "were left unchanged (attn.q, attn.k, attn.v, ...)"]


def test_what_if_platform_plans_without_touching_the_model():
    model = make_block(12).to(torch.bfloat16)
    plan = plan_quantization(model, "w_mxfp4_a_mxfp4", platform="cuda:sm90")
    assert not plan.applied and str(plan).startswith("would quantize (plan; model unchanged)")
    assert {r.platform for r in plan} == {"cuda:sm90"}
    assert {r.kernel for r in plan} == {"triton-emulation"}  # sm_90 priority: docs/benchmarks.md
    assert not any(isinstance(m, MXLinear) for m in model.modules())
    # on sm100 the cuBLAS path needs K % 128: only mlp.2 (K = 128) gets it
    sm100 = plan_quantization(model, "w_mxfp4_a_mxfp4", platform="cuda:sm100")
    assert {r.layer: r.kernel for r in sm100 if r.kernel != "triton-dot-scaled"} == {
        "mlp.2": "scaled-mm-mx"}
    assert not any(r.fallback for r in sm100)
    # no native sm100 kernel takes mxfp6: emulation is a fallback there, which strict refuses
    fp6 = plan_quantization(model, "w_mxfp6_e3m2_a_mxfp6_e3m2", platform="cuda:sm100")
    assert all(r.fallback and r.kernel == "triton-emulation" for r in fp6)
    with pytest.raises(ResolutionError, match=r"^layer attn\.q: strict mode"):
        plan_quantization(model, "w_mxfp6_e3m2_a_mxfp6_e3m2", platform="cuda:sm100", strict=True)
    with pytest.raises(ValueError, match=r"layer attn\.q: platform cuda:sm90 is not the platform"
                                         r".*plan_quantization"):
        quantize_model(model, "w_mxfp4_a_mxfp4", platform="cuda:sm90")
    assert not any(isinstance(m, MXLinear) for m in model.modules())
    assert len(quantize_model(model, "w_mxfp4_a_mxfp4", platform="cpu").quantized) == 7


def test_shared_module_is_replaced_under_every_name():
    shared = nn.Linear(32, 32)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = quantize_model(model, "w_mxfp4")
    assert [r.layer for r in report] == ["0", "2"]
    assert isinstance(model[0], MXLinear) and model[0] is model[2]
    with pytest.raises(ValueError, match="also reachable as 1"):
        quantize_model(nn.Sequential(shared, shared), "w_mxfp4", ignore=["1"])


def test_lazy_exports_and_layer_repr():
    assert registry.quantize_model is quantize_model and registry.MXLinear is MXLinear
    layer = MXLinear.from_linear(nn.Linear(64, 32), "w_mxfp6_e2m3_a_mxfp6_e2m3")
    text = repr(layer)
    for part in ("scheme=w_mxfp6_e2m3_a_mxfp6_e2m3", "kernel=reference-emulation",
                 "platform=cpu", "activation=mxfp6_e2m3:e8m0/b32:even:dynamic"):
        assert part in text
    assert layer.resolution.kernel == layer.kernel_name and layer.resolution.fallback is False


# ---------------------------------------------------------------------------------------------
# MXLinear: construction, dtype / device changes, state reloads
# ---------------------------------------------------------------------------------------------

def test_mxlinear_from_mxtensor_checks_the_scheme():
    w = torch.randn(32, 64)
    mx = mx_quantize(w, "mxfp4", rounding="even")
    layer = MXLinear(mx, "w_mxfp4", torch.zeros(32))
    assert torch.equal(layer.weight, mx.data)
    with pytest.raises(ValueError, match="weight MXTensor is mxfp4/even.*mxfp6_e3m2"):
        MXLinear(mx, "w_mxfp6_e3m2")
    with pytest.raises(ValueError, match=r"bias must be a float tensor of shape \(32,\)"):
        MXLinear(mx, "w_mxfp4", torch.zeros(31))
    with pytest.raises(ValueError, match="activation key fp8_e4m3:fp32/tensor:static is static"):
        MXLinear(w, "w_mxfp4_a_fp8")
    with pytest.raises(ValueError, match=r"platform rocm:gfx950 is not the platform of the "
                                         r"weight's device cpu \(cpu\)"):
        MXLinear(w, "w_mxfp4", platform="rocm:gfx950")
    assert MXLinear(w, "w_mxfp4", platform="cpu").kernel_name == "dequant-weight-only"


def test_dtype_change_keeps_the_bytes_and_the_fp32_input_scale():
    lin = nn.Linear(64, 32)
    layer = MXLinear.from_linear(lin, "w_mxfp4_a_fp8", act_scale=0.0123)
    codes, scales = layer.weight.clone(), layer.weight_scale.clone()
    layer.to(torch.bfloat16)
    assert layer.weight.dtype == torch.uint8 and torch.equal(layer.weight, codes)
    assert torch.equal(layer.weight_scale, scales) and layer.bias.dtype == torch.bfloat16
    assert layer.input_scale.dtype == torch.float32
    assert layer.input_scale.item() == torch.tensor(0.0123).item()
    assert layer.act_dtype == torch.bfloat16 and layer.resolution.kernel == "reference-emulation"
    x = torch.randn(4, 64).bfloat16()
    w = mx_dequantize(layer.weight_mx, torch.float32)
    want = F.linear(fp8_tensor_qdq(x, layer.input_scale).float(), w, layer.bias.float())
    assert torch.equal(layer(x), want.bfloat16())
    layer.type(torch.float16)  # converts every tensor in a plain module; not the bytes here
    assert layer.weight.dtype == torch.uint8 and layer.input_scale.dtype == torch.float32


def test_moving_to_another_platform_resolves_again(monkeypatch):
    """With a GPU the layer really moves there and gets what the resolver picks for that GPU;
    without one, a what-if: the CPU tensors report cuda:sm90 and Triton runs in its interpreter."""
    layer = MXLinear.from_linear(nn.Linear(64, 32), "w_mxfp6_e3m2")
    assert layer.kernel_name == "dequant-weight-only"
    x = torch.randn(3, 64)
    before = layer(x)
    if torch.cuda.is_available():
        device = "cuda"
        platform = platform_for_device(device)  # the platform detection the layer itself uses
    else:
        device, platform = "cpu", Platform("cuda", "sm90")
        monkeypatch.setattr("registry.nn.layers.platform_for_device", lambda d: platform)
    want = resolve(CATALOG.get("w_mxfp6_e3m2"), platform, shape=(32, 64), act_dtype="float32")
    assert want.kernel is not None and str(platform) != "cpu"
    if not torch.cuda.is_available():  # the what-if pins the choice the interpreter runs
        assert want.kernel == "triton-emulation"
    layer.to(device)
    assert (layer.resolution.platform, layer.kernel_name) == (str(platform), want.kernel)
    assert f"platform={platform}" in repr(layer)
    torch.testing.assert_close(layer(x.to(device)).cpu(), before, rtol=1e-5, atol=1e-5)


def test_forward_refuses_a_kernel_prepared_elsewhere():
    layer = MXLinear.from_linear(nn.Linear(32, 32), "w_mxfp4")
    layer._prepared.weight = layer._prepared.weight.to("meta")  # as after a failed re-resolution
    with pytest.raises(RuntimeError, match="prepared on meta"):
        layer(torch.randn(2, 32))


def test_load_state_dict_prepares_the_kernel_again():
    a = MXLinear.from_linear(nn.Linear(64, 32), "w_mxfp4")
    b = MXLinear.from_linear(nn.Linear(64, 32), "w_mxfp4")
    x = torch.randn(5, 64)
    a(x)  # fills the weight-only kernel's dequantized-weight cache
    a.load_state_dict(b.state_dict())
    assert torch.equal(a(x), b(x))
