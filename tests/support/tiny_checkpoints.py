"""Tiny transformers models (built offline, random weights) and the producers' own ways of
reading a checkpoint back, for the checkpoint writer tests (tests/registry/checkpoints)."""
from __future__ import annotations

import os
from typing import Any

import torch


def tiny_llama(seed: int = 0, layers: int = 2, hidden: int = 64):
    """A 2-layer Llama (hidden 64, intermediate 128, vocab 128) in bf16."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=128,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(cfg).to(torch.bfloat16).eval()


def tiny_gpt_oss(seed: int = 0):
    """A 1-layer gpt-oss (4 experts, hidden 64, intermediate 64) in bf16."""
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(seed)
    cfg = GptOssConfig(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                       num_local_experts=4, num_experts_per_tok=2, layer_types=["full_attention"])
    model = GptOssForCausalLM(cfg).to(torch.bfloat16).eval()
    with torch.no_grad():  # the init leaves some parameters empty: fill every one
        for p in model.parameters():
            p.copy_(torch.randn_like(p, dtype=torch.float32).mul_(0.05).to(p.dtype))
    return model


def save_float(model: Any, path: str, max_shard_size: str = "40KB") -> str:
    """The float model as a Hugging Face checkpoint (sharded when small enough a limit)."""
    model.save_pretrained(path, max_shard_size=max_shard_size)
    return path


def load_with_transformers(path: str, **kwargs: Any):
    """The producer's loader: transformers' from_pretrained (offline, CPU, bf16)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cpu",
                                                **kwargs)


def read_all_tensors(directory: Any) -> dict[str, torch.Tensor]:
    """Every tensor of the *.safetensors files in `directory` (a pathlib.Path), by name."""
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    for f in sorted(directory.glob("*.safetensors")):
        with safe_open(str(f), "pt") as handle:
            out.update({k: handle.get_tensor(k) for k in handle.keys()})
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (NaN payloads and -0 included)."""
    a, b = a.detach().contiguous(), b.detach().contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.view(torch.uint8) if a.element_size() == 1 else a.view(torch.int16 if a.element_size()
                                                                  == 2 else torch.int32),
        b.view(torch.uint8) if b.element_size() == 1 else b.view(torch.int16 if b.element_size()
                                                                  == 2 else torch.int32))
