"""save_quantized / load_quantized: bit-exact round trips for every scheme, one-line errors."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from kernels.mx import mx_quantize
from registry.files.catalog import load_schemes
from registry.nn.checkpoint import FORMAT_VERSION, CheckpointError, load_quantized, save_quantized
from registry.nn.layers import MXLinear
from registry.nn.quantize import quantize_model

from support.toy_block import LINEARS, inputs, is_static, make_block

CATALOG = load_schemes()
SCHEMES = sorted(CATALOG.schemes)


def quantized_block(name: str, seed: int = 1) -> nn.Module:
    model = make_block(seed)
    kw = {"calibration": inputs(seed + 100)} if is_static(CATALOG.get(name)) else {}
    quantize_model(model, name, ignore=["lm_head"], **kw)
    return model


def read(path):
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def rewrite(src, dst, *, drop=(), add=None, meta=None, layer_meta=None):
    tensors, metadata = read(src)
    for k in drop:
        del tensors[k]
    tensors.update(add or {})
    metadata.update(meta or {})
    if layer_meta:
        layers = json.loads(metadata["registry.layers"])
        for layer, fields in layer_meta.items():
            layers[layer].update(fields)
        metadata["registry.layers"] = json.dumps(layers)
    save_file(tensors, str(dst), metadata=metadata)
    return dst


def assert_unchanged(model: nn.Module) -> None:
    assert not any(isinstance(m, MXLinear) for m in model.modules())


@pytest.mark.parametrize("name", SCHEMES)
def test_round_trip_is_bit_exact_for_every_scheme(name, tmp_path):
    model = quantized_block(name)
    path = tmp_path / "model.safetensors"
    save_quantized(model, path, metadata={"source": "toy block"})

    skeleton = make_block(2)  # other random weights: everything must come from the file
    report = load_quantized(skeleton, path)
    assert [r.layer for r in report] == LINEARS[:-1]
    assert all(r.scheme == name and r.platform == "cpu" for r in report)
    assert all(r.reason.endswith("(emulated on cpu)") for r in report)
    assert report.notes == [f"loaded from {path} (format version {FORMAT_VERSION})"]
    want, got = model.state_dict(), skeleton.state_dict()
    assert list(got) == list(want)
    for key in want:
        assert want[key].dtype == got[key].dtype and torch.equal(want[key], got[key]), key
    x = inputs(3)
    with torch.no_grad():
        assert torch.equal(model(x), skeleton(x))
    for layer_name in LINEARS[:-1]:
        a, b = model.get_submodule(layer_name), skeleton.get_submodule(layer_name)
        assert (b.scheme_name, b.kernel_name) == (a.scheme_name, a.kernel_name)

    tensors, meta = read(path)
    assert meta["registry.format_version"] == str(FORMAT_VERSION)
    assert meta["source"] == "toy block"
    entry = json.loads(meta["registry.layers"])["mlp.0"]
    scheme = CATALOG.get(name)
    act = None if scheme.activation is None else str(scheme.activation)
    printed = f"W={scheme.weight} A={act or 'none'}"  # the documented digest input
    assert entry == {"scheme": name, "weight": str(scheme.weight), "activation": act,
                     "format": scheme.weight.format, "rounding": scheme.weight.scale.rounding,
                     "layout": model.mlp[0].weight_layout, "shape": [128, 64], "bias": True,
                     "contract_digest": hashlib.sha256(printed.encode()).hexdigest()[:16]}
    assert tensors["mlp.0.weight"].dtype == tensors["mlp.0.weight_scale"].dtype == torch.uint8
    assert ("mlp.0.input_scale" in tensors) == is_static(scheme)
    assert tensors["lm_head.weight"].dtype == torch.float32  # the ignored layer stays float


def test_load_into_an_already_quantized_skeleton(tmp_path):
    model = quantized_block("w_mxfp4_a_fp8")
    save_quantized(model, tmp_path / "m.safetensors")
    skeleton = quantized_block("w_mxfp6_e2m3", seed=5)
    load_quantized(skeleton, tmp_path / "m.safetensors")
    assert skeleton.mlp[0].scheme_name == "w_mxfp4_a_fp8"
    x = inputs(4)
    with torch.no_grad():
        assert torch.equal(model(x), skeleton(x))


def test_dense_fp6_layout_round_trips(tmp_path):
    mx = mx_quantize(torch.randn(32, 64), "mxfp6_e3m2", rounding="even", layout="packed")
    model = nn.Sequential(MXLinear(mx, "w_mxfp6_e3m2", torch.randn(32)))
    save_quantized(model, tmp_path / "m.safetensors")
    skeleton = nn.Sequential(nn.Linear(64, 32))
    load_quantized(skeleton, tmp_path / "m.safetensors")
    assert skeleton[0].weight_layout == "packed" and skeleton[0].weight.shape == (32, 48)
    assert torch.equal(skeleton[0].weight, mx.data)
    x = torch.randn(3, 64)
    assert torch.equal(skeleton(x), model(x))


def test_tied_layer_round_trips(tmp_path):
    shared = nn.Linear(32, 32)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    quantize_model(model, "w_mxfp4")
    save_quantized(model, tmp_path / "m.safetensors")
    other = nn.Linear(32, 32)
    skeleton = nn.Sequential(other, nn.ReLU(), other)
    load_quantized(skeleton, tmp_path / "m.safetensors")
    assert skeleton[0] is skeleton[2] and isinstance(skeleton[0], MXLinear)
    x = torch.randn(2, 32)
    assert torch.equal(skeleton(x), model(x))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "good.safetensors"
    save_quantized(quantized_block("w_mxfp4_a_fp8"), path)
    return path


@pytest.mark.parametrize("edit, message", [
    (dict(drop=["mlp.0.weight_scale"]), r"tensor 'mlp\.0\.weight_scale' is missing .*layer mlp\.0"),
    (dict(drop=["attn.q.input_scale"]), r"'attn\.q\.input_scale' is missing .*static input scale"),
    (dict(drop=["norm.weight"]), r"tensor 'norm\.weight' of the model is missing from the file"),
    (dict(add={"extra.w": torch.zeros(2)}), r"tensor 'extra\.w' of the file has no place"),
    (dict(add={"norm.bias": torch.zeros(64, dtype=torch.bfloat16)}),
     r"tensor 'norm\.bias': the file holds torch\.bfloat16 \(64,\), the model torch\.float32"),
    (dict(add={"mlp.0.weight": torch.zeros(128, 32, dtype=torch.int8)}),
     r"tensor 'mlp\.0\.weight' is torch\.int8, expected torch\.uint8"),
    (dict(add={"mlp.0.weight": torch.zeros(128, 16, dtype=torch.uint8)}),
     r"bad\.safetensors: layer mlp\.0: tensor 'mlp\.0\.weight' \(element codes\) has shape "
     r"\(128, 16\), but a \[128, 64\] weight in mxfp4 packed layout needs \(128, 32\)"),
    (dict(layer_meta={"mlp.2": {"scheme": "w_mxfp4_a_fp"}}), r"layer mlp\.2: .*did you mean"),
    (dict(layer_meta={"mlp.2": {"format": "mxfp6_e3m2"}}),
     r"layer mlp\.2: the file's format 'mxfp6_e3m2' differs from scheme w_mxfp4_a_fp8"),
    (dict(layer_meta={"mlp.2": {"shape": [64, 96]}}),
     r"layer mlp\.2: the file's weight is \[64, 96\] \[out, in\] but the model's layer is "
     r"\[64, 128\]"),
    (dict(layer_meta={"mlp.2": {"bias": False}}),
     r"layer mlp\.2: the file has no bias but the model's layer has one"),
    (dict(meta={"registry.format_version": str(FORMAT_VERSION + 1)}),
     rf"format version {FORMAT_VERSION + 1} is newer than this registry reads "
     rf"\({FORMAT_VERSION}\)"),
])
def test_mismatches_are_one_line_errors_and_change_nothing(saved, tmp_path, edit, message):
    bad = rewrite(saved, tmp_path / "bad.safetensors", **edit)
    skeleton = make_block(9)
    with pytest.raises(CheckpointError, match=message) as info:
        load_quantized(skeleton, bad)
    assert "\n" not in str(info.value)
    assert_unchanged(skeleton)


def test_a_file_layer_the_model_lacks(saved, tmp_path):
    layers = json.loads(read(saved)[1]["registry.layers"])
    layers["decoder.proj"] = layers["mlp.0"]
    bad = rewrite(saved, tmp_path / "bad.safetensors", meta={"registry.layers": json.dumps(layers)})
    with pytest.raises(CheckpointError, match="layer 'decoder.proj' of the file is not a submodule"):
        load_quantized(make_block(1), bad)


def test_files_that_are_not_registry_checkpoints(tmp_path):
    plain = tmp_path / "plain.safetensors"
    save_file(make_block(1).state_dict(), str(plain))
    with pytest.raises(CheckpointError, match="not a registry quantized checkpoint"):
        load_quantized(make_block(1), plain)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_quantized(make_block(1), junk)


def test_shape_of_the_model_must_fit(saved):
    skeleton = make_block(1)
    skeleton.mlp[0] = nn.Linear(64, 96)
    with pytest.raises(CheckpointError, match=r"layer mlp\.0: the file's weight is \[128, 64\]"):
        load_quantized(skeleton, saved)
    skeleton = make_block(1)
    skeleton.mlp[0] = nn.GELU()
    with pytest.raises(CheckpointError, match=r"layer mlp\.0: the model holds a GELU"):
        load_quantized(skeleton, saved)


def test_save_errors(tmp_path):
    with pytest.raises(ValueError, match="no MXLinear layer; quantize it first"):
        save_quantized(make_block(1), tmp_path / "m.safetensors")
    model = quantized_block("w_mxfp4")
    with pytest.raises(ValueError, match="'registry.' prefix is reserved"):
        save_quantized(model, tmp_path / "m.safetensors", metadata={"registry.x": "1"})
    with pytest.raises(ValueError, match="metadata must map strings to strings"):
        save_quantized(model, tmp_path / "m.safetensors", metadata={"step": 3})
