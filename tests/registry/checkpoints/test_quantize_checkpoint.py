"""quantize_checkpoint / `registry quantize-checkpoint`: a bf16 checkpoint quantized shard by
shard gives the tensors quantize_model + save_checkpoint give; the producer's loader reads it
(compressed-tensors, gpt-oss through transformers); it resumes after an interruption, keeps
only intact finished shards, refuses other settings and non-empty directories, honours
--ignore, and refuses bad input in one line naming the file / tensor and the fix."""
from __future__ import annotations

import argparse
import json

import pytest
import torch

import registry.checkpoints.quantize_checkpoint as qc
from kernels.mx import mx_dequantize, mx_quantize
from registry import quantize_model
from registry.checkpoints.progress import MANIFEST
from registry.checkpoints.quantize_checkpoint import quantize_checkpoint
from registry.checkpoints.writer import save_checkpoint
from registry.cli.quantize_checkpoint import (quantize_checkpoint_arguments,
                                              quantize_checkpoint_command)
from support.tiny_checkpoints import (load_with_transformers, read_all_tensors, same_bits,
                                      save_float, tiny_gpt_oss, tiny_llama)

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def float_dir(tmp_path_factory):
    return save_float(tiny_llama(), str(tmp_path_factory.mktemp("float") / "in"))


@pytest.fixture(scope="module")
def quantized(float_dir, tmp_path_factory):
    """(report, output dir, the in-memory model quantize_model made) for w_mxfp4."""
    out = tmp_path_factory.mktemp("quantized")
    report = quantize_checkpoint(float_dir, out / "out", "w_mxfp4", format="compressed-tensors",
                                 progress=False)
    model = tiny_llama()
    quantize_model(model, "w_mxfp4", ignore=["lm_head"])
    save_checkpoint(model, out / "ref", "compressed-tensors")
    return report, out, model


def test_same_tensors_as_quantize_model(quantized):
    report, out, _ = quantized
    assert report.layers == 14 and len(report.shards) > 2 and not report.resumed
    ours, ref = read_all_tensors(out / "out"), read_all_tensors(out / "ref")
    assert set(ours) == set(ref)
    for key in ref:
        assert same_bits(ours[key], ref[key]), key
    assert json.loads((out / "out" / "config.json").read_text())["quantization_config"] == \
        json.loads((out / "ref" / "config.json").read_text())["quantization_config"]
    assert (out / "out" / "generation_config.json").is_file()
    assert not (out / "out" / MANIFEST).exists()


def test_the_compressed_tensors_loader_reads_it(quantized):
    """transformers reads compressed-tensors checkpoints only with compressed-tensors installed
    (the `producers` extra; the GPU image has transformers alone)."""
    pytest.importorskip("compressed_tensors")
    from transformers import CompressedTensorsConfig

    _, out, model = quantized
    loaded = load_with_transformers(str(out / "out"),
                                    quantization_config=CompressedTensorsConfig(dequantize=True))
    q = model.model.layers[1].mlp.down_proj
    assert same_bits(loaded.model.layers[1].mlp.down_proj.weight,
                     mx_dequantize(q.weight_mx, torch.bfloat16))


def test_gpt_oss_experts_read_back_by_transformers(tmp_path):
    from transformers import Mxfp4Config

    src = tiny_gpt_oss()
    save_float(src, str(tmp_path / "in"), "10MB")
    quantize_checkpoint(tmp_path / "in", tmp_path / "out", "w_mxfp4", format="gpt-oss",
                        progress=False)
    stored = read_all_tensors(tmp_path / "out")
    assert stored["model.layers.0.mlp.experts.gate_up_proj_blocks"].shape == (4, 128, 2, 16)
    assert stored["model.layers.0.mlp.experts.down_proj_scales"].shape == (4, 64, 2)
    loaded = load_with_transformers(str(tmp_path / "out"),
                                    quantization_config=Mxfp4Config(dequantize=True))
    for proj in ("gate_up_proj", "down_proj"):
        w = getattr(src.model.layers[0].mlp.experts, proj).detach()
        ours = mx_dequantize(mx_quantize(w.transpose(-1, -2).contiguous(), "mxfp4", "even"),
                             torch.bfloat16).transpose(-1, -2)
        assert same_bits(getattr(loaded.model.layers[0].mlp.experts, proj).contiguous(),
                         ours.contiguous()), proj
    assert same_bits(loaded.model.layers[0].self_attn.q_proj.weight,
                     src.model.layers[0].self_attn.q_proj.weight)  # not converted


def test_resumes_after_an_interruption(float_dir, tmp_path, monkeypatch):
    fresh = tmp_path / "fresh"
    quantize_checkpoint(float_dir, fresh, "w_mxfp4", format="quark", progress=False)
    calls = {"n": 0}
    real = qc._quantize_tensor

    def dies_at_the_sixth(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(qc, "_quantize_tensor", dies_at_the_sixth)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        quantize_checkpoint(float_dir, out, "w_mxfp4", format="quark", progress=False)
    manifest = json.loads((out / MANIFEST).read_text())
    done = sorted(manifest["done"])
    assert done and not list(out.glob("*.tmp"))
    with pytest.raises(ValueError, match=r"other settings \(scheme was 'w_mxfp4', now "
                                         r"'w_mxfp4_a_mxfp4'\).*--overwrite"):
        quantize_checkpoint(float_dir, out, "w_mxfp4_a_mxfp4", format="quark", progress=False)
    (out / done[-1]).write_bytes(b"damaged")  # a finished shard changed since: redone
    monkeypatch.setattr(qc, "_quantize_tensor", real)
    report = quantize_checkpoint(float_dir, out, "w_mxfp4", format="quark", progress=False)
    assert report.resumed == done[:-1]
    assert any(n.startswith(f"{done[-1]}: finished earlier but its file") for n in report.notes)
    ours, want = read_all_tensors(out), read_all_tensors(fresh)
    assert set(ours) == set(want) and all(same_bits(ours[k], want[k]) for k in want)
    assert not (out / MANIFEST).exists()


def test_refuses_to_overwrite_and_honours_ignore(float_dir, tmp_path):
    out = tmp_path / "out"
    quantize_checkpoint(float_dir, out, "w_mxfp4", format="compressed-tensors", progress=False)
    with pytest.raises(ValueError, match=r"already holds .* refusing to overwrite.*--overwrite"):
        quantize_checkpoint(float_dir, out, "w_mxfp4", progress=False)
    report = quantize_checkpoint(float_dir, out, "w_mxfp4", format="compressed-tensors",
                                 ignore=["re:.*mlp\\..*", "nothing.here"], overwrite=True,
                                 progress=False)
    assert report.layers == 8
    assert "--ignore entry 'nothing.here' matched no tensor" in report.notes
    config = json.loads((out / "config.json").read_text())["quantization_config"]
    assert "model.layers.0.mlp.up_proj" in config["ignore"] and "lm_head" in config["ignore"]
    stored = read_all_tensors(out)
    assert stored["model.layers.0.mlp.up_proj.weight"].dtype == torch.bfloat16
    assert "model.layers.0.self_attn.q_proj.weight_packed" in stored


def test_bad_inputs_are_one_line_errors(float_dir, tmp_path):
    with pytest.raises(ValueError, match=r"config.json: missing; quantize-checkpoint needs"):
        quantize_checkpoint(tmp_path, tmp_path / "o1", "w_mxfp4")
    done = tmp_path / "done"
    quantize_checkpoint(float_dir, done, "w_mxfp4", format="quark", progress=False)
    with pytest.raises(ValueError, match=r"already quantized \(quant_method 'quark'\)"):
        quantize_checkpoint(done, tmp_path / "o2", "w_mxfp4")
    with pytest.raises(ValueError, match=r"activation fp8_e4m3.* needs a calibrated input"):
        quantize_checkpoint(float_dir, tmp_path / "o3", "w_mxfp4_a_fp8")
    odd = save_float(tiny_llama(hidden=48), str(tmp_path / "odd"))
    with pytest.raises(ValueError, match=r"cannot quantize model.layers.0.mlp.gate_proj.weight "
                                         r"\(in_features 48\).*add these layers to --ignore"):
        quantize_checkpoint(odd, tmp_path / "o4", "w_mxfp4")
    with pytest.raises(ValueError, match="is the input directory"):
        quantize_checkpoint(float_dir, float_dir, "w_mxfp4")


def test_cli_functions(float_dir, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    quantize_checkpoint_arguments(parser)
    args = parser.parse_args([float_dir, str(tmp_path / "out"), "--scheme", "mxfp4",
                              "--format", "compressed-tensors", "--ignore", "re:.*down_proj"])
    assert quantize_checkpoint_command(args) == 0
    captured = capsys.readouterr()
    assert "quantized 12 layer(s) with w_mxfp4_a_mxfp4 into compressed-tensors" in captured.out
    assert "shard 1/" in captured.err  # the progress bar
    assert quantize_checkpoint_command(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("registry quantize-checkpoint: error: ") and err.count("\n") == 1
    assert "--overwrite" in err
