"""registry.load_checkpoint on producer-made checkpoints: MXLinear layers built from the stored
bytes (their dequantized weights equal the producer's bit for bit), float tensors copied,
refusals one line naming the layer."""
from __future__ import annotations

import shutil

import pytest
import torch

from kernels.mx import mx_dequantize
from registry import MXLinear, load_checkpoint
from registry.checkpoints.load import CheckpointLoadError


def _fresh_model():
    from support.producer_checkpoints import tiny_llama

    return tiny_llama(seed=1)  # other weights than the checkpoint's: loading must replace them


def _check_loaded(model, report, oracle, directory):
    from safetensors import safe_open

    assert sorted(report.layers) == sorted(oracle)
    for name, ref in oracle.items():
        layer = model.get_submodule(name)
        assert isinstance(layer, MXLinear)
        ours = mx_dequantize(layer.weight_mx, ref.dtype, backend="reference")
        assert torch.equal(ours, ref), name
    with safe_open(str(directory / "model.safetensors"), "pt") as f:
        assert torch.equal(model.lm_head.weight.detach(),
                           f.get_tensor("lm_head.weight").to(model.lm_head.weight.dtype))
    assert "lm_head.weight" in report.copied and "model.norm.weight" in report.copied


def test_load_compressed_tensors(ct_checkpoints):
    directory, oracle = ct_checkpoints["MXFP4A16"]
    model = _fresh_model()
    report = load_checkpoint(model, directory)
    assert report.format == "compressed-tensors" and set(report.layers.values()) == {"w_mxfp4"}
    _check_loaded(model, report, oracle, directory)
    out = model(torch.tensor([[1, 2, 3]])).logits  # the loaded model runs
    assert torch.isfinite(out).all()


def test_load_quark(quark_mixed):
    directory, oracle = quark_mixed
    model = _fresh_model()
    report = load_checkpoint(model, directory)
    assert report.layers["model.layers.0.mlp.down_proj"] == "w_mxfp6_e3m2"
    _check_loaded(model, report, oracle, directory)


def test_load_refuses_a_model_that_does_not_fit(ct_checkpoints, tmp_path):
    directory, _ = ct_checkpoints["MXFP4A16"]
    model = torch.nn.Module()
    with pytest.raises(CheckpointLoadError, match="model.layers.0.mlp.down_proj: stored "
                                                  "quantized, but the model has nothing there"):
        load_checkpoint(model, directory)


def test_load_refuses_float_weight_the_config_quantizes(ct_checkpoints, tmp_path):
    directory, _ = ct_checkpoints["MXFP4A16"]
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    import json
    config = json.loads((copy / "config.json").read_text())
    config["quantization_config"]["ignore"] = []  # now lm_head (stored float) is claimed
    (copy / "config.json").write_text(json.dumps(config))
    model = _fresh_model()
    before = model.model.layers[0].mlp.down_proj
    with pytest.raises(CheckpointLoadError, match="lm_head: stored in float .* says it is "
                                                  "quantized \\(w_mxfp4\\)"):
        load_checkpoint(model, copy)
    assert model.model.layers[0].mlp.down_proj is before  # nothing changed


@pytest.mark.parametrize("scheme", ["MXFP4", "MXFP8"])
def test_load_auto_round(auto_round_checkpoints, scheme):
    directory, oracle = auto_round_checkpoints[scheme]
    model = _fresh_model().to(torch.bfloat16)  # AutoRound stores its float tensors in bf16
    report = load_checkpoint(model, directory)
    assert report.format == "auto-round"
    _check_loaded(model, report, oracle, directory)
