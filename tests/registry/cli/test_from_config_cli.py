"""`registry resolve --from-config`: the command line over the HF config fixtures."""
from __future__ import annotations

import json

import pytest

from kernels.select.resolve import resolve
from registry.files.catalog import load_schemes
from registry.cli import main
from registry.errors import display_path

from support.hf_config_fixtures import EXPECTED, FIXTURES, GLOBAL, LAYER


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("platform", ["cuda:sm90", "cpu"])
def test_cli_text_matches_plain_resolve(capsys, platform):
    path = str(FIXTURES / "quark_mixed_layers.json")
    code, out, err = run(capsys, "resolve", "--from-config", path, "--platform", platform)
    assert code == 0 and err == ""
    assert f"platform: {platform} (named)" in out and "(quark)" in out
    catalog = load_schemes()
    for path_, name in EXPECTED["quark_mixed_layers.json"][0].items():
        row = next(line for line in out.splitlines() if line.startswith(path_ + " "))
        kernel = resolve(catalog.get(name), platform).kernel
        assert f" {name} " in row and f" {kernel} " in row, row
        assert f"candidates for {name} on {platform}, in priority order:" in out
    assert "not quantized (exclude pattern lm_head)" in out


@pytest.mark.parametrize("platform", ["cuda:sm90", "cpu"])
def test_cli_json(capsys, platform):
    code, out, _ = run(capsys, "resolve", "--from-config", str(FIXTURES / "ct_mxfp4_w4a4.json"),
                       "--platform", platform, "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 3
    assert len({tuple(r) for r in rows}) == 1  # the same keys, in the same order, every row
    assert {"path", "targets", "scheme", "kernel", "native", "fallback", "candidates",
            "error", "status", "note", "weight", "activation"} <= set(rows[0])
    first = rows[0]
    assert first["scheme"] == "w_mxfp4_a_mxfp4" and first["status"] == "mapped"
    assert first["kernel"] == resolve(load_schemes().get("w_mxfp4_a_mxfp4"), platform).kernel
    assert first["activation"] == "mxfp4:e8m0/b32:even:dynamic" and first["platform"] == platform
    assert [r["status"] for r in rows[1:]] == ["not quantized"] * 2
    assert all(r["kernel"] is None and r["candidates"] == [] for r in rows[1:])


def test_cli_broken_group_exit_1(capsys):
    path = str(FIXTURES / "broken_quark_dtype_fp5.json")
    code, out, _ = run(capsys, "resolve", "--from-config", path, "--platform", "cpu")
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith(f'{LAYER}["*.mlp.experts'))
    assert "NO MATCH" in row and "ERROR" in row
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and 'weight.dtype: "fp5"' in errors[0]
    code, out, _ = run(capsys, "resolve", "--from-config", path, "--platform", "cpu", "--json")
    rows = json.loads(out)
    assert code == 1 and [r["status"] for r in rows[:4]] == ["mapped", "mapped", "unmapped",
                                                             "mapped"]
    assert rows[2]["error"].endswith("differs in weight format: fp5 here (weight.dtype: "
                                     "\"fp5\"), mxfp4 in the scheme")


def test_cli_strict_disable_force_like_plain_resolve(capsys):
    path = str(FIXTURES / "quark_w_mxfp6_e3m2_a_mxfp6_e3m2.json")
    plain = run(capsys, "resolve", "w_mxfp6_e3m2_a_mxfp6_e3m2", "--platform", "cuda:sm100",
                "--json")
    code, out, _ = run(capsys, "resolve", "--from-config", path, "--platform", "cuda:sm100",
                       "--json")
    assert json.loads(out)[0]["kernel"] == json.loads(plain[1])["kernel"]
    assert json.loads(out)[0]["fallback"] == json.loads(plain[1])["fallback"] is True
    code, out, _ = run(capsys, "resolve", "--from-config", path, "--platform", "cuda:sm100",
                       "--strict")
    error = next(line for line in out.splitlines() if line.startswith("error: "))
    assert code == 1 and "strict mode" in error
    line = next(i for i, text in enumerate(open(path), 1) if '"global_quant_config"' in text)
    assert error.startswith(f"error: {display_path(path)}:{line}: {GLOBAL}: ")
    mx4 = str(FIXTURES / "quark_mxfp4_w4a4.json")
    off = ("--platform", "cuda:sm90", "--disable", "triton-dot-scaled", "--json")
    plain = json.loads(run(capsys, "resolve", "w_mxfp4_a_mxfp4", *off)[1])
    code, out, _ = run(capsys, "resolve", "--from-config", mx4, *off)
    assert code == 0 and json.loads(out)[0]["kernel"] == plain["kernel"] != "triton-dot-scaled"
    assert json.loads(out)[0]["candidates"] == plain["candidates"]
    code, out, _ = run(capsys, "resolve", "--from-config", mx4, "--platform", "cpu",
                       "--force", "dequant-weight-only", "--json")
    rows = json.loads(out)
    assert code == 1 and rows[0]["kernel"] is None and "weight-only" in rows[0]["error"]


def test_cli_default_platform(capsys):
    code, out, _ = run(capsys, "resolve", "--from-config", str(FIXTURES / "ct_mxfp4a16.json"))
    assert code == 0 and "(detected)" in out


@pytest.mark.parametrize("argv,code,needle", [
    (["resolve", "mxfp4", "--from-config", "x.json"], 2, "--from-config PATH takes the schemes"),
    (["resolve", "--all", "--from-config", "x.json"], 2, "drop NAME|ALIAS / --all"),
    (["resolve", "--from-config", str(FIXTURES / "broken_not_json.json")], 2, "not JSON"),
    (["resolve", "--from-config", str(FIXTURES / "missing.json")], 2, "no such file"),
    (["resolve", "--from-config", str(FIXTURES / "broken_no_quantization_config.json")], 1,
     "no quantization_config"),
    (["resolve", "--from-config", str(FIXTURES / "ct_mxfp4a16.json"), "--force", "fast"], 2,
     "unknown kernel 'fast'"),
])
def test_cli_usage_and_unreadable(capsys, argv, code, needle):
    got, out, err = run(capsys, *argv)
    assert got == code and needle in err and len(err.strip().splitlines()) == 1 and out == ""


@pytest.mark.parametrize("name,code", [("broken_unsupported_producer.json", 1),
                                       ("broken_no_quantization_config.json", 1),
                                       ("broken_not_json.json", 2)])
def test_cli_json_of_a_refused_config(capsys, name, code):
    """--json prints JSON even when the whole config is refused: one row with the keys of a
    group's row, status "refused" and the error (also on stderr, one line)."""
    path = str(FIXTURES / name)
    got, out, err = run(capsys, "resolve", "--from-config", path, "--platform", "cpu", "--json")
    (row,) = json.loads(out)
    assert got == code and row["status"] == "refused" and row["error"] in err
    assert row["error"].startswith(display_path(path) + ":") and len(err.splitlines()) == 1
    _, ok, _ = run(capsys, "resolve", "--from-config", str(FIXTURES / "ct_mxfp4_w4a4.json"),
                   "--platform", "cpu", "--json")
    assert list(row) == list(json.loads(ok)[0])


def test_cli_auto_round_and_gpt_oss(capsys, tmp_path):
    """A producer-written gpt-oss config through the command line: the experts' stored-scale
    caveat is a note (text) and a `caveats` entry (JSON)."""
    pytest.importorskip("transformers")
    from support.producer_configs import gptoss_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(gptoss_config(["lm_head", "model.layers.*.self_attn"])))
    code, out, _ = run(capsys, "resolve", "--from-config", str(path), "--platform", "cuda:sm90")
    assert code == 0 and "(gpt-oss)" in out and "w_mxfp4" in out
    assert "\nnote: " in out and "re-quantizing from float with w_mxfp4" in out
    code, out, _ = run(capsys, "resolve", "--from-config", str(path), "--platform", "cpu",
                       "--json")
    rows = json.loads(out)
    assert code == 0 and rows[0]["scheme"] == "w_mxfp4" and len(rows[0]["caveats"]) == 1
    assert [r["status"] for r in rows[1:]] == ["not quantized"] * 2
