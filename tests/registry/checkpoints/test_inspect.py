"""`registry inspect`: producer checkpoints inspect clean (exit 0), sharded ones too; each
defect is one finding naming its layer / tensor, exit 1; --json; --tp table."""
from __future__ import annotations

import argparse
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from registry.checkpoints.inspect import inspect_checkpoint
from registry.cli.inspect import inspect_arguments, inspect_command


def _run(capsys, *argv):
    parser = argparse.ArgumentParser()
    inspect_arguments(parser)
    code = inspect_command(parser.parse_args([str(a) for a in argv]))
    return code, capsys.readouterr().out


def _edit(directory, tmp_path, edit):
    copy = tmp_path / "ckpt"
    shutil.copytree(directory, copy)
    tensors = load_file(str(copy / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(copy / "model.safetensors"))
    return copy


def test_clean_checkpoint(ct_checkpoints, capsys):
    directory, _ = ct_checkpoints["MXFP4A16"]
    code, out = _run(capsys, directory, "--platform", "cpu", "--platform", "cuda:sm100", "--tp")
    assert code == 0, out
    assert "model.layers.0.mlp.down_proj" in out and "w_mxfp4" in out and "ok: no findings" in out
    assert "cuda:sm100:" in out and "tp=8" in out
    code, out = _run(capsys, directory, "--json", "--tp", "8")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["format"] == "compressed-tensors"
    down = next(x for x in data["layers"] if x["layer"] == "model.layers.0.mlp.down_proj")
    assert down["shape"] == [64, 128] and down["tp"][0]["split"] == "row"
    assert not down["tp"][0]["ok"] and down["tp"][0]["pad_to"] == 256
    assert {t["name"].rsplit(".", 1)[-1]: t["dtype"] for t in down["tensors"]} == \
        {"weight_packed": "U8", "weight_scale": "U8"}


def test_sharded_checkpoint(quark_mixed, tmp_path):
    directory, _ = quark_mixed
    copy = tmp_path / "sharded"
    copy.mkdir()
    shutil.copy(directory / "config.json", copy)
    tensors = load_file(str(directory / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(copy / file))
        weight_map.update({n: file for n in part})
    (copy / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    report = inspect_checkpoint(copy)
    assert report.findings == [] and len(report.files) == 2
    assert {x.scheme for x in report.layers if x.kind == "quantized"} == \
        {"w_mxfp4", "w_mxfp6_e3m2", "w_mxfp6_e2m3"}


@pytest.mark.parametrize("edit, finding", [
    (lambda t: t["model.layers.0.mlp.up_proj.weight_scale"].__setitem__((3, 1), 0xFF),
     "model.layers.0.mlp.up_proj: model.layers.0.mlp.up_proj.weight_scale holds 1 scale byte(s) "
     "0xFF"),
    (lambda t: t.__setitem__("model.layers.0.mlp.up_proj.weight_packed",
                             t["model.layers.0.mlp.up_proj.weight_packed"][:, :16].contiguous()),
     "model.layers.0.mlp.up_proj.weight_packed: uint8 (128, 16), expected uint8 (128, 32)"),
    (lambda t: t.pop("model.layers.0.mlp.up_proj.weight_packed"),
     "model.layers.0.mlp.up_proj: model.layers.0.mlp.up_proj.weight_packed is missing"),
    (lambda t: t.__setitem__("lm_head.weight_scale", torch.zeros(128, 2, dtype=torch.uint8)),
     "lm_head: stored quantized but the config leaves it unquantized"),
])
def test_each_defect_is_a_finding(ct_checkpoints, tmp_path, capsys, edit, finding):
    directory, _ = ct_checkpoints["MXFP4A16"]
    copy = _edit(directory, tmp_path, edit)
    code, out = _run(capsys, copy)
    assert code == 1 and finding in out, out


def test_unreadable_directory_is_one_line(tmp_path, capsys):
    code, out = _run(capsys, tmp_path / "nope", "--json")
    assert code == 1 and "not a directory" in json.loads(out)["error"]
    code, out = _run(capsys, tmp_path, "--tp", "3,x")
    assert code == 2 and "'x' is not an integer" in out
