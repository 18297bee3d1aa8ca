"""`registry.quantize_model_from_config`: a checkpoint's quantization_config applied in one call."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from registry import quantize_model_from_config
from registry.nn.layers import MXLinear

from support.paths import HF_CONFIGS


class Block(nn.Module):
    """Module names as in a Qwen2-MoE checkpoint (what the Quark / CT fixtures target)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        lin = (lambda i, o: nn.Linear(i, o).requires_grad_(False))
        self.model = nn.Module()
        layer = nn.Module()
        layer.self_attn = nn.Module()
        layer.self_attn.q_proj = lin(64, 64)
        layer.mlp = nn.Module()
        layer.mlp.gate = lin(64, 4)  # the router: excluded by both producers' configs
        layer.mlp.experts = nn.ModuleList([nn.Module() for _ in range(2)])
        for e in layer.mlp.experts:
            e.down_proj = lin(64, 32)
        layer.mlp.shared_expert = nn.Module()
        layer.mlp.shared_expert.down_proj = lin(64, 32)
        self.model.layers = nn.ModuleList([layer])
        self.lm_head = lin(64, 96)
        for p in self.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def schemes_of(model: nn.Module) -> dict[str, str]:
    return {n: m.scheme_name for n, m in model.named_modules() if isinstance(m, MXLinear)}


def test_quark_mixed_layers_map_per_group():
    model = Block()
    report = quantize_model_from_config(model, HF_CONFIGS / "quark_mixed_layers.json")
    assert schemes_of(model) == {
        "model.layers.0.self_attn.q_proj": "w_mxfp8_e4m3_a_mxfp8_e4m3",
        "model.layers.0.mlp.experts.0.down_proj": "w_mxfp4_a_mxfp6_e3m2",
        "model.layers.0.mlp.experts.1.down_proj": "w_mxfp4_a_mxfp6_e3m2",
        "model.layers.0.mlp.shared_expert.down_proj": "w_mxfp6_e2m3"}
    # excluded layers stay float and say which config entry kept them
    assert type(model.lm_head) is nn.Linear and type(model.model.layers[0].mlp.gate) is nn.Linear
    assert any(n.startswith("lm_head: not quantized (quantization_config.exclude[0]")
               for n in report.notes)
    assert len(report.quantized) == 4
    x = torch.randn(3, 64)
    assert model.model.layers[0].mlp.experts[0].down_proj(x).shape == (3, 32)


@pytest.mark.parametrize("name,scheme", [("ct_mxfp4a16", "w_mxfp4"),
                                         ("ct_mxfp4_w4a4", "w_mxfp4_a_mxfp4")])
def test_compressed_tensors_targets_and_ignore(name: str, scheme: str):
    model = Block()
    quantize_model_from_config(model, HF_CONFIGS / f"{name}.json")
    got = schemes_of(model)
    assert set(got.values()) == {scheme} and len(got) == 4  # every Linear but gate, lm_head
    assert "lm_head" not in got and "model.layers.0.mlp.gate" not in got


def test_an_unmapped_group_names_the_layer_and_the_field_and_changes_nothing():
    model = Block()
    with pytest.raises(ValueError, match=r"layer model\.layers\.0\.mlp\.experts\.0\.down_proj: "
                                         r".*broken_quark_group_size_64\.json:57: "
                                         r"quantization_config\.global_quant_config: "
                                         r"weight\.group_size: 64"):
        quantize_model_from_config(model, HF_CONFIGS / "broken_quark_group_size_64.json")
    assert not schemes_of(model)


def test_a_config_that_quantizes_no_layer_is_an_error():
    model = nn.Sequential(nn.Linear(64, 64))
    config = {"quantization_config": {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["re:.*never$"], "weights": {
            "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
            "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8"}}}}}
    with pytest.raises(ValueError, match="quantizes none of the model's nn.Linear layers"):
        quantize_model_from_config(model, config)
