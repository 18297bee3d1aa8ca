"""Shared by the `--from-config` tests: the HF config fixtures and the schemes they map to.

Fixtures (tests/data/hf_configs, each citing its model / source in `_comment`):
  quark_mxfp4_w4a4.json                 amd/DeepSeek-R1-MXFP4-Preview-style Quark export (spec
                                        fields of vLLM's Quark MXFP4 test config)
  quark_w_mxfp6_e3m2_a_mxfp6_e3m2.json  fxmarty/qwen1.5_moe_a2.7b_chat_w_fp6_e3m2_a_fp6_e3m2
  quark_w_mxfp4_a_mxfp6_e2m3.json       fxmarty/qwen1.5_moe_a2.7b_chat_w_fp4_a_fp6_e2m3
  quark_mixed_layers.json               layer_quant_config mix (AMD's MXFP4/MXFP6 blog)
  quark_w_mxfp4_a_fp8.json              bare quantization_config, vLLM QuarkW4A8_MXFP4_FP8 specs
  ct_mxfp4a16.json                      nm-testing/Qwen3-30B-A3B-MXFP4A16 (llm-compressor preset)
  ct_mxfp4_w4a4.json                    llm-compressor preset MXFP4 (W4A4)
  ct_text_config_experts.json           Kimi K3 layout (text_config.quantization_config)
  broken_*.json                         one failure each
The expected schemes in EXPECTED are written by hand from the fixtures, not computed.
"""
from __future__ import annotations

import json

from support.paths import HF_CONFIGS


FIXTURES = HF_CONFIGS
GLOBAL = "quantization_config.global_quant_config"
LAYER = "quantization_config.layer_quant_config"
GROUP0 = 'quantization_config.config_groups["group_0"]'


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


EXPECTED = {
    "quark_mxfp4_w4a4.json": (
        {GLOBAL: "w_mxfp4_a_mxfp4"},
        ["lm_head", "re:.*mlp.gate$", "re:model.layers.61.*", "re:.*self_attn.*"]),
    "quark_w_mxfp6_e3m2_a_mxfp6_e3m2.json": (
        {GLOBAL: "w_mxfp6_e3m2_a_mxfp6_e3m2"},
        ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"]),
    "quark_w_mxfp4_a_mxfp6_e2m3.json": (
        {GLOBAL: "w_mxfp4_a_mxfp6_e2m3"},
        ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"]),
    "quark_mixed_layers.json": (
        {GLOBAL: "w_mxfp4_a_mxfp4",
         f'{LAYER}["*self_attn*"]': "w_mxfp8_e4m3_a_mxfp8_e4m3",
         f'{LAYER}["*.mlp.experts.*"]': "w_mxfp4_a_mxfp6_e3m2",
         f'{LAYER}["*.mlp.shared_expert.*"]': "w_mxfp6_e2m3"},
        ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"]),
    "quark_w_mxfp4_a_fp8.json": ({"global_quant_config": "w_mxfp4_a_fp8"}, ["lm_head"]),
    "ct_mxfp4a16.json": ({GROUP0: "w_mxfp4"}, ["lm_head", "re:.*mlp.gate$"]),
    "ct_mxfp4_w4a4.json": ({GROUP0: "w_mxfp4_a_mxfp4"}, ["lm_head", "re:.*mlp.gate$"]),
    "ct_text_config_experts.json": (
        {"text_config." + GROUP0: "w_mxfp4"},
        ["re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*",
         "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"]),
}
