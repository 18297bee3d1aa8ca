"""save_checkpoint's own parts: the "registry" format (loadable by load_quantized), shards and
their index, refusing to overwrite, and one-line refusals of what a format cannot say."""
from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from registry import load_quantized, quantize_model
from registry.checkpoints.producer_configs import ConfigWriteError
from registry.checkpoints.writer import save_checkpoint
from support.tiny_checkpoints import read_all_tensors, same_bits


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64, bias=False),
                         nn.Linear(64, 8))


def _quantized(scheme: str = "w_mxfp4") -> nn.Module:
    model = _mlp()
    quantize_model(model, scheme, ignore=["3"])
    return model


def test_registry_format_round_trips_through_load_quantized(tmp_path):
    model = _quantized("w_mxfp4_a_mxfp4")
    report = save_checkpoint(model, tmp_path / "out")
    assert report.files == ["model.safetensors", "config.json"]
    fresh = _mlp(seed=1)
    load_quantized(fresh, tmp_path / "out" / "model.safetensors")
    x = torch.randn(3, 64)
    assert same_bits(fresh(x), model(x))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "registry"
    assert sorted(config["quantization_config"]["layers"]) == ["0", "2"]


def test_shards_and_index_hold_every_tensor_once(tmp_path):
    model = _quantized()
    report = save_checkpoint(model, tmp_path / "out", "compressed-tensors", max_shard_bytes=2500)
    shards = [f for f in report.files if f.endswith(".safetensors")]
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    stored = read_all_tensors(tmp_path / "out")
    assert set(index["weight_map"]) == set(stored)
    assert set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size()
                                                  for t in stored.values())
    assert {"0.weight_packed", "0.weight_scale", "0.bias", "2.weight_packed", "3.weight"} \
        <= set(stored)
    assert not list((tmp_path / "out").glob(".*")), "no temporary file is left behind"


def test_refuses_to_overwrite_unless_asked(tmp_path):
    model = _quantized()
    save_checkpoint(model, tmp_path / "out", "quark")
    with pytest.raises(ValueError, match=r"out: already holds 2 file\(s\).*--overwrite"):
        save_checkpoint(model, tmp_path / "out", "quark")
    (tmp_path / "out" / "README.md").write_text("mine")
    save_checkpoint(model, tmp_path / "out", "compressed-tensors", overwrite=True)
    assert (tmp_path / "out" / "README.md").read_text() == "mine"  # not a checkpoint file
    assert "0.weight_packed" in read_all_tensors(tmp_path / "out")


@pytest.mark.parametrize("scheme, fmt, message", [
    ("w_mxfp6_e3m2", "compressed-tensors",
     r"^0: scheme w_mxfp6_e3m2 cannot be written as a compressed-tensors checkpoint: .*"
     r"not mxfp6_e3m2; use --format quark$"),
    ("w_mxfp8_e4m3_a_mxfp8_e4m3", "compressed-tensors", r"^0: .*even scales, not mxfp8_e4m3"),
    ("w_mxfp4_a_mxfp4", "auto-round", r"^0: .*floor \('mx_fp'\) or rceil .*not mxfp4:e8m0/b32:even"),
    ("w_mxfp6_e2m3", "auto-round", r"^0: .*not mxfp6_e2m3; use --format quark$"),
])
def test_a_scheme_the_format_cannot_say_is_refused(tmp_path, scheme, fmt, message):
    model = _mlp()
    quantize_model(model, scheme, ignore=["3"])
    with pytest.raises(ConfigWriteError, match=message):
        save_checkpoint(model, tmp_path / "out", fmt)
    assert not (tmp_path / "out").exists(), "nothing is written before the refusal"


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="no MXLinear / MXGroupedExperts layer; quantize it"):
        save_checkpoint(_mlp(), tmp_path / "a")
    with pytest.raises(ValueError, match="unknown checkpoint format 'gguf'; choose one of"):
        save_checkpoint(_quantized(), tmp_path / "b", "gguf")
    with pytest.raises(ValueError, match="^0: gpt-oss checkpoints quantize only expert stacks"):
        save_checkpoint(_quantized(), tmp_path / "c", "gpt-oss")
    with pytest.raises(ValueError, match="max_shard_bytes must be a positive integer"):
        save_checkpoint(_quantized(), tmp_path / "d", max_shard_bytes=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="file: exists and is not a directory"):
        save_checkpoint(_quantized(), tmp_path / "file")
    with pytest.raises(TypeError, match="takes a torch.nn.Module"):
        save_checkpoint("model", tmp_path / "e")
