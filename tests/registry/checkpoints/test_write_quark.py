"""save_checkpoint(format="quark") read back with Quark's own loader (transformers'
from_pretrained -> quark's _map_to_quark / QParamsLinear), every weight dequantized by Quark
(`QParamsLinear._get_qweight`) and compared bit for bit with ours. Slow: importing
quark.torch takes most of this file's time."""
from __future__ import annotations

import json

import pytest
import torch

from kernels.mx import mx_dequantize
from registry import quantize_model
from registry.checkpoints.writer import save_checkpoint
from registry.nn.layers import MXLinear
from support.tiny_checkpoints import load_with_transformers, same_bits, tiny_llama

pytest.importorskip("quark")


@pytest.mark.parametrize("scheme", ["w_mxfp4_a_mxfp4", "w_mxfp6_e3m2_a_mxfp6_e3m2",
                                    "w_mxfp4_a_mxfp6_e2m3"])
def test_quark_loader_reads_ours(tmp_path, scheme):
    model = tiny_llama()
    quantize_model(model, scheme, ignore=["lm_head", "model.layers.0.self_attn.o_proj"])
    out = tmp_path / "quark"
    save_checkpoint(model, out, "quark", max_shard_bytes=30_000)
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert config["exclude"] == ["lm_head", "model.layers.0.self_attn.o_proj"]
    loaded = load_with_transformers(str(out))
    theirs = dict(loaded.named_modules())
    assert type(theirs["model.layers.0.self_attn.o_proj"]) is torch.nn.Linear
    for name, layer in model.named_modules():
        if isinstance(layer, MXLinear):
            q = theirs[name]
            assert type(q).__name__ == "QParamsLinear", name
            got = q._get_qweight(q.weight).to(torch.bfloat16)
            assert same_bits(got, mx_dequantize(layer.weight_mx, torch.bfloat16)), name
