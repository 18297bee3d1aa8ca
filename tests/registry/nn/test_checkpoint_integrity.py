"""A checkpoint's codes, scales and contract must agree; its header has no duplicate keys; a bad
path is named. Each case: a file saved by save_quantized, then edited the way a hand (or a
hostile user) would, and a one-line CheckpointError naming the file, the layer and the field,
with the model left as it was."""
from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from registry.files.catalog import load_schemes
from registry.nn.checkpoint import CheckpointError, load_quantized, save_quantized
from registry.nn.checkpoint_file import contract_digest
from registry.nn.layers import MXLinear
from registry.nn.quantize import quantize_model


def model_for(scheme: str, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16))
    quantize_model(model, scheme)
    return model


def skeleton() -> nn.Sequential:
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16))


def saved(tmp_path, scheme: str = "w_mxfp4_a_mxfp4"):
    path = tmp_path / "good.safetensors"
    save_quantized(model_for(scheme), path)
    return path


def edit_layers(src, dst, **fields):
    """Copy `src` to `dst` with fields of layer '0' of registry.layers replaced."""
    with safe_open(str(src), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    layers = json.loads(meta["registry.layers"])
    layers["0"].update(fields)
    meta["registry.layers"] = json.dumps(layers)
    save_file(tensors, str(dst), metadata=meta)
    return dst


def edit_header(src, dst, old: str, new: str):
    """Copy `src` to `dst` with the raw safetensors header text edited (length re-written)."""
    raw = src.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = raw[8:8 + size].decode()
    assert header.count(old) == 1, header
    header = header.replace(old, new)
    header += " " * (-len(header) % 8)
    dst.write_bytes(struct.pack("<Q", len(header)) + header.encode() + raw[8 + size:])
    return dst


def refused(path, *needles: str, model=None, **kw) -> str:
    model = model if model is not None else skeleton()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_quantized(model, path, **kw)
    text = str(info.value)
    assert "\n" not in text and len(text) < 500, text
    for needle in needles:
        assert needle in text, (needle, text)
    assert not any(isinstance(m, MXLinear) for m in model.modules())
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    return text


# ------------------------------------------------------------------------ 9a: duplicate keys
def test_a_layer_written_twice_in_registry_layers_is_refused(tmp_path):
    good = saved(tmp_path)
    with safe_open(str(good), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    entry = json.loads(meta["registry.layers"])["0"]
    w4a16 = dict(entry, scheme="w_mxfp4", activation=None,
                 contract_digest=contract_digest(entry["weight"], None))
    text = meta["registry.layers"]  # the last "0" would win with json.loads: a W4A16 layer
    meta["registry.layers"] = text[:-1] + ', "0": ' + json.dumps(w4a16) + "}"
    assert json.loads(meta["registry.layers"])["0"]["scheme"] == "w_mxfp4"
    bad = tmp_path / "dup.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    refused(bad, "dup.safetensors", "registry.layers", 'duplicate key "0"')


def test_a_field_written_twice_in_a_layer_entry_is_refused(tmp_path):
    good = saved(tmp_path)
    with safe_open(str(good), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    meta["registry.layers"] = meta["registry.layers"].replace(
        '"scheme": "w_mxfp4_a_mxfp4"', '"scheme": "w_mxfp4_a_mxfp4", "scheme": "w_mxfp4"', 1)
    bad = tmp_path / "dup.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    refused(bad, "dup.safetensors", "registry.layers", 'duplicate key "scheme"')


def test_registry_layers_written_twice_in_the_header_is_refused(tmp_path):
    good = saved(tmp_path)
    other = tmp_path / "other.safetensors"
    save_quantized(model_for("w_mxfp4", seed=1), other)
    with safe_open(str(other), framework="pt") as f:
        second = f.metadata()["registry.layers"]
    # safetensors itself keeps the last key of __metadata__: the weight-only entries
    bad = edit_header(good, tmp_path / "dup.safetensors", '"__metadata__":{',
                      '"__metadata__":{"registry.layers":' + json.dumps(second) + ",")
    refused(bad, "dup.safetensors", "safetensors header", "__metadata__",
            'duplicate key "registry.layers"')


# ------------------------------------------------------------ 9b: codes, scales and contract
def test_scheme_and_activation_edited_together_is_refused(tmp_path):
    """The seed bug through a checkpoint: a W4A4 file edited to load as W4A16."""
    bad = edit_layers(saved(tmp_path), tmp_path / "w4a16.safetensors", scheme="w_mxfp4",
                      activation=None)
    text = refused(bad, "w4a16.safetensors", "layer 0", "contract_digest")
    assert "does not match its weight / activation fields" in text


@pytest.mark.parametrize("fields, needles", [
    ({"activation": "mxfp6_e2m3:e8m0/b32:even:dynamic"}, ["layer 0", "contract_digest"]),
    ({"weight": "mxfp4:e8m0/b32:floor:static"}, ["layer 0", "contract_digest"]),
    ({"contract_digest": "0123456789abcdef"}, ["layer 0", "'0123456789abcdef'"]),
    ({"contract_digest": 7}, ["layer 0", "contract_digest", "a string"]),
])
def test_contract_fields_must_match_their_digest(tmp_path, fields, needles):
    bad = edit_layers(saved(tmp_path), tmp_path / "bad.safetensors", **fields)
    refused(bad, "bad.safetensors", *needles)


def test_the_digest_must_match_the_catalogs_scheme(tmp_path):
    """The file is intact but the scheme file changed since: its contract is not the file's."""
    good = saved(tmp_path)
    schemes = tmp_path / "schemes"
    schemes.mkdir()
    (schemes / "w_mxfp4_a_mxfp4.yaml").write_text(
        "name: w_mxfp4_a_mxfp4\nsummary: changed since the file was saved\n"
        "weight: {format: mxfp4, scale: {format: e8m0, block: 32, rounding: even}, static: true}\n"
        "activation: {format: mxfp6_e2m3, scale: {format: e8m0, block: 32, rounding: even}, "
        "static: false}\n")
    catalog = load_schemes([schemes], env={}, include_shipped=False)
    assert not catalog.findings
    refused(good, "good.safetensors", "layer 0", "activation", "differs from scheme "
            "w_mxfp4_a_mxfp4's contract", catalog=catalog)


def test_codes_of_another_format_are_refused(tmp_path):
    """An mxfp8 file relabelled, digest and all, as mxfp6_e2m3 (one code a byte in both)."""
    good = saved(tmp_path, "w_mxfp8_e4m3")
    fp6 = load_schemes().get("w_mxfp6_e2m3")
    weight = str(fp6.weight)
    bad = edit_layers(good, tmp_path / "relabelled.safetensors", scheme=fp6.name, weight=weight,
                      format="mxfp6_e2m3", rounding=fp6.weight.scale.rounding,
                      contract_digest=contract_digest(weight, None))
    refused(bad, "relabelled.safetensors", "layer 0", "'0.weight'", "not a 6-bit mxfp6_e2m3 code")


def test_a_layout_the_format_has_not_is_refused(tmp_path):
    bad = edit_layers(saved(tmp_path, "w_mxfp8_e4m3"), tmp_path / "bad.safetensors",
                      layout="packed")
    refused(bad, "bad.safetensors", "layer 0", "field layout", "no packed layout")


def test_codes_of_the_wrong_size_for_the_layout_are_refused(tmp_path):
    """mxfp4 packed codes (32 bytes a row) announced as unpacked (64 bytes a row)."""
    bad = edit_layers(saved(tmp_path), tmp_path / "bad.safetensors", layout="unpacked")
    refused(bad, "bad.safetensors", "layer 0", "'0.weight'", "(element codes)", "(32, 32)",
            "mxfp4 unpacked layout needs (32, 64)")


def test_a_file_without_a_digest_is_refused_with_how_to_re_save(tmp_path):
    """Format version 1: no digest, so its contract fields cannot be trusted (see
    registry.nn.checkpoint_file.check_header)."""
    good = saved(tmp_path)
    with safe_open(str(good), framework="pt") as f:
        tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    layers = json.loads(meta["registry.layers"])
    for entry in layers.values():
        del entry["contract_digest"]
    meta.update({"registry.format_version": "1", "registry.layers": json.dumps(layers)})
    old = tmp_path / "v1.safetensors"
    save_file(tensors, str(old), metadata=meta)
    refused(old, "v1.safetensors", "format version 1", "no contract digest", "re-save",
            "save_quantized")


def test_an_intact_file_still_loads_bit_exact(tmp_path):
    model = model_for("w_mxfp4_a_mxfp4")
    save_quantized(model, tmp_path / "m.safetensors")
    target = skeleton()
    load_quantized(target, tmp_path / "m.safetensors")
    x = torch.randn(3, 64)
    with torch.no_grad():
        assert torch.equal(target(x), model(x))


# -------------------------------------------------------------------------- 9c: bad paths
def test_a_directory_is_named_with_its_safetensors_files(tmp_path):
    save_quantized(model_for("w_mxfp4"), tmp_path / "model.safetensors")
    refused(tmp_path, str(tmp_path), "is a directory (it holds model.safetensors)",
            "expected a .safetensors file written by save_quantized")
    empty = tmp_path / "empty"
    empty.mkdir()
    text = refused(empty, str(empty), "is a directory;", "expected a .safetensors file")
    assert "holds" not in text


def test_a_missing_file_and_a_file_of_another_kind_are_named(tmp_path):
    refused(tmp_path / "nope.safetensors", "nope.safetensors", "no such file",
            "expected a .safetensors file")
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello")
    refused(text_file, "notes.txt", "not a readable safetensors file",
            "expected a .safetensors file")


def test_save_names_a_bad_path(tmp_path):
    model = model_for("w_mxfp4")
    with pytest.raises(ValueError, match=r"is a directory; save_quantized writes one "
                                         r"\.safetensors file: .*model\.safetensors$"):
        save_quantized(model, tmp_path)
    with pytest.raises(ValueError, match=r"the directory .*missing does not exist"):
        save_quantized(model, tmp_path / "missing" / "m.safetensors")
    with pytest.raises(TypeError, match="save_quantized takes the path of a .safetensors file, "
                                        "got int"):
        save_quantized(model, 3)
    with pytest.raises(TypeError, match="load_quantized takes the path"):
        load_quantized(skeleton(), None)
