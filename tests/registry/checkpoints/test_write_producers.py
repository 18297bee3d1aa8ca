"""save_checkpoint in compressed-tensors / auto-round format, read back with the producer's
own loader (transformers' from_pretrained with compressed-tensors' decompression, auto-round's
QuantLinear), each dequantized weight compared bit for bit with ours."""
from __future__ import annotations

import json

import pytest
import torch

from kernels.mx import mx_dequantize
from registry import quantize_model
from registry.checkpoints.writer import save_checkpoint
from registry.nn.layers import MXLinear
from support.tiny_checkpoints import load_with_transformers, same_bits, tiny_llama

pytest.importorskip("transformers")
IGNORE = ["lm_head", "model.layers.1.mlp.up_proj"]


def _written(tmp_path, scheme: str, fmt: str):
    model = tiny_llama()
    quantize_model(model, scheme, ignore=IGNORE)
    out = tmp_path / fmt
    save_checkpoint(model, out, fmt, max_shard_bytes=20_000)  # several shards + index
    return model, out


def _compare(model, loaded, dequantized) -> None:
    theirs = dict(loaded.named_modules())
    layers = {n: m for n, m in model.named_modules() if isinstance(m, MXLinear)}
    assert len(layers) == 13
    for name, layer in layers.items():
        ours = mx_dequantize(layer.weight_mx, torch.bfloat16)
        assert same_bits(dequantized(theirs[name]).to(torch.bfloat16), ours), name
    state = loaded.state_dict()
    for key, value in model.state_dict().items():  # float tensors: copied as they were
        if value.is_floating_point() and key in state and key.endswith(("norm.weight", "embed_tokens.weight", "lm_head.weight", "up_proj.weight")):
            assert same_bits(state[key], value), key


@pytest.mark.parametrize("scheme", ["w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp6_e2m3",
                                    "w_mxfp8_e4m3"])
def test_compressed_tensors_loader_reads_ours(tmp_path, scheme):
    pytest.importorskip("compressed_tensors")
    from transformers import CompressedTensorsConfig

    model, out = _written(tmp_path, scheme, "compressed-tensors")
    assert (out / "model.safetensors.index.json").is_file()
    loaded = load_with_transformers(str(out),
                                    quantization_config=CompressedTensorsConfig(dequantize=True))
    _compare(model, loaded, lambda m: m.weight)


@pytest.mark.parametrize("scheme", ["w_mxfp4_floor_a_mxfp4_floor",
                                    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil"])
def test_auto_round_loader_reads_ours(tmp_path, scheme):
    pytest.importorskip("auto_round")
    model, out = _written(tmp_path, scheme, "auto-round")
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config == json.loads((out / "quantization_config.json").read_text())
    assert config["extra_config"] == {"model.layers.1.mlp.up_proj": {"bits": 16, "act_bits": 16}}
    loaded = load_with_transformers(str(out))
    assert type(loaded.model.layers[1].mlp.up_proj) is torch.nn.Linear
    _compare(model, loaded, lambda m: m.dequant_weight_online())


def test_compressed_tensors_config_is_the_producers(tmp_path):
    """Our quantization_config equals what compressed-tensors' own ModelCompressor writes for
    its MXFP4 preset (version and all)."""
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationConfig, QuantizationStatus,
                                                 preset_name_to_scheme)

    model, out = _written(tmp_path, "w_mxfp4_a_mxfp4", "compressed-tensors")
    ours = json.loads((out / "config.json").read_text())["quantization_config"]
    qc = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme("MXFP4", ["Linear"])},
                            ignore=sorted(IGNORE), format="mxfp4-pack-quantized",
                            quantization_status=QuantizationStatus.COMPRESSED)
    qc.config_groups["group_0"].format = "mxfp4-pack-quantized"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "config.json").write_text("{}")
    ModelCompressor(quantization_config=qc).update_config(str(tmp_path / "theirs"))
    theirs = json.loads((tmp_path / "theirs" / "config.json").read_text())["quantization_config"]
    assert ours == theirs


def test_auto_round_config_is_the_producers(tmp_path):
    """auto-round's own quantize_and_save config for a W4A4 MXFP4 model, as of 0.16.1: our
    top-level fields are its fields (extra_config aside, see producer_configs)."""
    model, out = _written(tmp_path, "w_mxfp4_floor_a_mxfp4_floor", "auto-round")
    ours = json.loads((out / "config.json").read_text())["quantization_config"]
    ours.pop("extra_config")
    assert ours == {"act_bits": 4, "act_data_type": "mx_fp", "act_dynamic": True,
                    "act_group_size": 32, "act_sym": True, "autoround_version": "0.16.1",
                    "bits": 4, "block_name_to_quantize": "model.layers", "data_type": "mx_fp",
                    "enable_quanted_input": False, "group_size": 32,
                    "packing_format": "auto_round:llm_compressor", "quant_method": "auto-round",
                    "sym": True}
