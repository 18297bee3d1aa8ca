"""`resolve --from-config --tp`: the projections a HF config sizes, and their split checks."""
from __future__ import annotations

import json

import pytest

from registry.checkpoints.config_shapes import projection_shapes
from registry.cli import main

LLAMA = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336}
GPT_OSS = {"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 32,
           "quantization_config": {"quant_method": "mxfp4",
                                   "modules_to_not_convert": ["model.layers.*.self_attn",
                                                              "lm_head"]}}
DEEPSEEK = {"hidden_size": 7168, "num_attention_heads": 128, "intermediate_size": 18432,
            "moe_intermediate_size": 2048, "n_routed_experts": 64}


def test_dense_moe_and_nested_configs() -> None:
    shapes = dict(projection_shapes(LLAMA))
    assert shapes["self_attn.q_proj"] == (4096, 4096)
    assert shapes["self_attn.k_proj"] == (1024, 4096)  # 8 kv heads x 128
    assert shapes["self_attn.o_proj"] == (4096, 4096)
    assert shapes["mlp.down_proj"] == (4096, 14336) and "mlp.experts.up_proj" not in shapes
    shapes = dict(projection_shapes({"text_config": GPT_OSS}))  # multimodal nesting
    assert shapes["self_attn.q_proj"] == (4096, 2880)  # head_dim given, not hidden / heads
    assert shapes["mlp.experts.down_proj"] == (2880, 2880) and "mlp.down_proj" not in shapes
    shapes = dict(projection_shapes(DEEPSEEK))  # dense blocks and experts of other widths
    assert shapes["mlp.gate_proj"] == (18432, 7168)
    assert shapes["mlp.experts.gate_proj"] == (2048, 7168)
    with pytest.raises(ValueError, match=r"x.json: hidden_size is None; --tp needs the model's "
                                         r"sizes"):
        projection_shapes({"num_attention_heads": 4}, "x.json")


def test_resolve_from_config_tp_text_and_json(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_OSS))
    assert main(["resolve", "--from-config", str(path), "--platform", "cuda:sm90", "--tp"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("mlp.experts.down_proj"))
    # 2880 / 4 = 720 is no multiple of 32: the row-parallel down projection needs padding
    assert row.split()[3:] == ["ok", "ok", "pad", "K", "2880->2944", "pad", "K", "2880->3072"]
    assert main(["resolve", "--from-config", str(path), "--platform", "cuda:sm90", "--tp",
                 "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups"] and {c["tp"] for c in data["tp"]} == {4}
    bad = {c["layer"]: c for c in data["tp"] if not c["ok"]}
    assert set(bad) == {"mlp.experts.down_proj"} and bad["mlp.experts.down_proj"]["pad_to"] == 2944


def test_tp_usage_errors(tmp_path, capsys) -> None:
    assert main(["resolve", "w_mxfp4", "--tp", "4"]) == 2
    assert "--tp goes with --from-config" in capsys.readouterr().err
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"quantization_config": GPT_OSS["quantization_config"]}))
    assert main(["resolve", "--from-config", str(path), "--tp", "4"]) == 2
    assert "hidden_size is None" in capsys.readouterr().err
    path.write_text(json.dumps(GPT_OSS))
    assert main(["resolve", "--from-config", str(path), "--tp", "two"]) == 2
    assert "--tp: 'two' is not an integer" in capsys.readouterr().err
