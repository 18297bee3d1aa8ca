"""The linear layers of a decoder block as a HF config.json sizes them (for `resolve
--from-config --tp`, which has no tensors to read: `registry inspect` reads the stored shapes).

Why: a tensor-parallel split question needs [N, K] per projection; a transformer's config
gives them (hidden_size, intermediate_size, heads, head_dim, the MoE expert width), the same
for every block. Multimodal configs keep the language model's sizes under `text_config`.
"""
from __future__ import annotations

from typing import Any, Mapping

_MOE_WIDTH = ("moe_intermediate_size", "expert_intermediate_size")
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts")


def _size(cfg: Mapping[str, Any], name: str, where: str) -> int:
    value = cfg.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {name} is {value!r}; --tp needs the model's sizes "
                         "(hidden_size, intermediate_size, num_attention_heads): pass the "
                         "model's own config.json")
    return value


def projection_shapes(config: Mapping[str, Any], where: str = "config.json"
                      ) -> list[tuple[str, tuple[int, int]]]:
    """(projection name, (N, K)) of one decoder block: attention q/k/v/o, the MLP's
    gate/up/down, and the experts' gate/up/down where the config has experts."""
    cfg = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    hidden = _size(cfg, "hidden_size", where)
    heads = _size(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    shapes = [("self_attn.q_proj", (heads * head_dim, hidden)),
              ("self_attn.k_proj", (kv * head_dim, hidden)),
              ("self_attn.v_proj", (kv * head_dim, hidden)),
              ("self_attn.o_proj", (hidden, heads * head_dim))]
    experts = next((cfg[n] for n in _EXPERTS if isinstance(cfg.get(n), int)), 0)
    width = next((cfg[n] for n in _MOE_WIDTH if isinstance(cfg.get(n), int)), None)
    if experts and width is None:
        width = cfg.get("intermediate_size")
    if cfg.get("intermediate_size") and not (experts and width == cfg.get("intermediate_size")):
        inter = _size(cfg, "intermediate_size", where)
        shapes += [("mlp.gate_proj", (inter, hidden)), ("mlp.up_proj", (inter, hidden)),
                   ("mlp.down_proj", (hidden, inter))]
    if experts:
        width = _size({"intermediate_size": width}, "intermediate_size", where)
        shapes += [("mlp.experts.gate_proj", (width, hidden)),
                   ("mlp.experts.up_proj", (width, hidden)),
                   ("mlp.experts.down_proj", (hidden, width))]
    return shapes


__all__ = ["projection_shapes"]
