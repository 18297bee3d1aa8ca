"""What save_checkpoint writes is read back by the registry itself: the config maps to the
same scheme (registry.schemes_from_config) and load_checkpoint rebuilds a model giving the
same logits bit for bit (no producer library needed)."""
from __future__ import annotations

import pytest
import torch

from registry import load_checkpoint, quantize_model, schemes_from_config
from registry.checkpoints.writer import save_checkpoint
from support.tiny_checkpoints import tiny_llama

pytest.importorskip("transformers")


@pytest.mark.parametrize("scheme, fmt", [("w_mxfp4_a_mxfp4", "compressed-tensors"),
                                         ("w_mxfp6_e3m2_a_mxfp6_e3m2", "quark"),
                                         ("w_mxfp4_floor_a_mxfp4_floor", "auto-round")])
def test_registry_reads_what_it_wrote(tmp_path, scheme, fmt):
    model = tiny_llama()
    quantize_model(model, scheme, ignore=["lm_head"])
    save_checkpoint(model, tmp_path / "out", fmt, max_shard_bytes=30_000)
    groups = schemes_from_config(tmp_path / "out" / "config.json")
    assert {g.scheme.name for g in groups if g.scheme is not None} == {scheme}
    fresh = tiny_llama(seed=3)
    load_checkpoint(fresh, tmp_path / "out")
    x = torch.randint(0, 128, (1, 5))
    assert torch.equal(fresh(x).logits, model(x).logits)
