"""The kinds of kernel (linear, moe, qdq) through the CLI: `matrix --kind`, `doctor`'s rows,
`resolve --kind`, `lint --probe` under strict mode, and lint's message for an activation key no
qdq kernel declares."""
from __future__ import annotations

import json
import logging

import pytest

from kernels.select.activation_keys import DISPATCH_KEYS
from kernels.select.declarations import KINDS, kernels_of_kind
from kernels.spec.platform import Platform
from registry.cli import main
from support.scheme_texts import BAD_ACT
from registry.files.catalog import load_schemes

from support.paths import REPO
LINEAR = [d.name for d in kernels_of_kind("linear")]
TOKEN_KEY = "fp8_e4m3:fp32/token:dynamic"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in ("REGISTRY_SCHEMES_PATH", "REGISTRY_DISABLED_KERNELS", "REGISTRY_STRICT",
                 "REGISTRY_DISABLE_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REGISTRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str):
    code, out, err = run(capsys, *argv, "--json")
    return code, json.loads(out)


def header(out: str) -> list[str]:
    """The matrix table's first line, split."""
    return out.splitlines()[2].split()


def row(out: str, first: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.split()[:1] == [first])


# --- 1. matrix --kind, and doctor's rows of each kind --------------------------------------------

def test_the_linear_matrix_has_only_linear_kernels(capsys):
    code, out, _ = run(capsys, "matrix", "--platform", "cuda:sm90")
    assert code == 0 and header(out) == ["scheme"] + LINEAR
    assert row(out, "w_mxfp4_a_mxfp4")[1:] == ["-", "emul", "-", "[emul]", "-", "emul"]
    assert "kernel sources: " + ", ".join(LINEAR) + ": built-in" in out
    code, data = run_json(capsys, "matrix", "--platform", "cuda:sm90")
    assert data["kind"] == "linear"
    assert {c["kernel"] for c in data["cells"]} == set(LINEAR)
    assert [k["name"] for k in data["kernels"]] == LINEAR


@pytest.mark.parametrize("plat,marks", [("cuda:sm90", ["[emul]", "emul"]),
                                        ("cpu", ["-", "[emul]"])])
def test_the_moe_matrix_is_schemes_by_moe_kernels(capsys, plat, marks):
    code, out, _ = run(capsys, "matrix", "--platform", plat, "--kind", "moe")
    assert code == 0 and out.splitlines()[0] == f"platform: {plat} (named); kind: moe"
    assert header(out) == ["scheme", "triton-moe", "reference-moe"]
    for name in load_schemes().schemes:  # every scheme, weight-only ones too
        assert row(out, name)[1:] == marks
    assert "`registry resolve NAME --kind moe` says why" in out
    code, data = run_json(capsys, "matrix", "--platform", plat, "--kind", "moe")
    assert data["kind"] == "moe" and [k["name"] for k in data["kernels"]] == ["triton-moe",
                                                                              "reference-moe"]
    chosen = {c["scheme"] for c in data["cells"] if c["chosen"]}
    assert chosen == set(load_schemes().schemes)


def test_the_qdq_matrix_is_activation_keys_by_qdq_kernels(capsys, tmp_path):
    (tmp_path / "w_mxfp4_a_fp8_token.yaml").write_text(BAD_ACT)
    code, out, _ = run(capsys, "--schemes", str(tmp_path), "matrix", "--platform", "cuda:sm90",
                       "--kind", "qdq")
    assert code == 0 and out.splitlines()[2].split() == ["activation", "key", "triton-qdq",
                                                         "reference-qdq", "schemes"]
    assert row(out, "mxfp4:e8m0/b32:even:dynamic")[1:] == ["[emul]", "emul", "w_mxfp4_a_mxfp4"]
    assert row(out, "mxfp8_e5m2:e8m0/b32:floor:dynamic")[1:] == ["[emul]", "emul", "-"]
    # a scheme's key no qdq kernel declares is a row of its own, every kernel rejecting it
    assert row(out, TOKEN_KEY)[1:] == ["-", "-", "w_mxfp4_a_fp8_token"]
    code, data = run_json(capsys, "--schemes", str(tmp_path), "matrix", "--platform", "cpu",
                          "--kind", "qdq")
    keys = list(dict.fromkeys(c["key"] for c in data["cells"]))
    assert keys == sorted(map(str, DISPATCH_KEYS)) + [TOKEN_KEY]
    fp8 = [c for c in data["cells"] if c["key"] == "fp8_e4m3:fp32/tensor:static"]
    assert {c["kernel"]: (c["accepted"], c["chosen"]) for c in fp8} == {
        "triton-qdq": (False, False), "reference-qdq": (True, True)}
    assert fp8[0]["schemes"] == ["w_mxfp4_a_fp8", "w_mxfp6_e2m3_a_fp8", "w_mxfp6_e3m2_a_fp8"]
    assert fp8[0]["reason"] == "does not run on cpu"


def test_an_unknown_kind_is_a_one_line_usage_error(capsys):
    code, _, err = run(capsys, "matrix", "--kind", "attention")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "invalid choice: 'attention'" in err and "'moe'" in err


def test_doctor_lists_each_kinds_kernels_for_the_platform(capsys, monkeypatch):
    import registry.machine.doctor

    monkeypatch.setattr(registry.machine.doctor, "detect", lambda: Platform("cpu"))
    code, data = run_json(capsys, "doctor")
    assert code == 0
    rows = {k["name"]: k for k in data["kernels"]}
    assert [k["kind"] for k in data["kernels"]] == sorted(
        (k["kind"] for k in data["kernels"]), key=KINDS.index)  # grouped by kind
    for name, kind in [("reference-moe", "moe"), ("reference-qdq", "qdq"),
                       ("reference-emulation", "linear")]:
        assert rows[name]["kind"] == kind and rows[name]["listed"] and rows[name]["runs_here"]
    assert not rows["triton-moe"]["listed"] and not rows["triton-qdq"]["listed"]
    assert "(linear 2, moe 1, qdq 1) can run here" in data["verdict"]


# --- 2. resolve --kind ---------------------------------------------------------------------------

def test_resolve_moe_shows_the_choice_and_every_candidate(capsys):
    code, out, _ = run(capsys, "resolve", "mxfp4", "--platform", "cuda:sm90", "--kind", "moe")
    lines = out.splitlines()
    assert code == 0
    assert "kind        moe (grouped MoE experts)" in lines
    assert "kernel      triton-moe (emulated)" in lines
    assert "weight      mxfp4:e8m0/b32:even:static" in lines
    assert any(line.startswith("->  triton-moe ") for line in lines)
    assert any(line.startswith("    reference-moe  not needed") for line in lines)
    code, data = run_json(capsys, "resolve", "mxfp4", "--platform", "cpu", "--kind", "moe")
    assert (data["kind"], data["scheme"], data["kernel"]) == ("moe", "w_mxfp4_a_mxfp4",
                                                              "reference-moe")
    assert [c["kernel"] for c in data["candidates"]] == ["reference-moe"]


def test_resolve_qdq_resolves_the_activation_key(capsys):
    code, out, _ = run(capsys, "resolve", "w_mxfp4_a_mxfp6_e3m2", "--platform", "cuda:sm90",
                       "--kind", "qdq")
    lines = out.splitlines()
    assert code == 0
    assert "activation  mxfp6_e3m2:e8m0/b32:even:dynamic" in lines
    assert "kernel      triton-qdq (emulated)" in lines
    assert not any(line.startswith("weight ") for line in lines)
    code, data = run_json(capsys, "resolve", "w_mxfp4_a_fp8", "--platform", "cuda:sm90",
                          "--kind", "qdq")
    assert (data["kind"], data["scheme"], data["key"], data["kernel"]) == (
        "qdq", "w_mxfp4_a_fp8", "fp8_e4m3:fp32/tensor:static", "triton-qdq")
    assert [c["kernel"] for c in data["candidates"]] == ["triton-qdq", "reference-qdq"]


def test_resolve_qdq_of_a_weight_only_scheme_is_one_line(capsys):
    code, out, err = run(capsys, "resolve", "w_mxfp4", "--kind", "qdq")
    assert code == 0 and err == ""
    assert out.splitlines() == ["w_mxfp4: weight-only (activation none): no activation key for "
                                "a qdq kernel to quantize"]
    code, data = run_json(capsys, "resolve", "w_mxfp4", "--kind", "qdq")
    assert code == 0 and (data["kind"], data["key"], data["kernel"]) == ("qdq", None, None)


@pytest.mark.parametrize("kind,chosen,instead", [("qdq", "triton-qdq", "reference-qdq"),
                                                 ("moe", "triton-moe", "reference-moe")])
def test_resolve_kinds_take_disable_strict_and_force(capsys, kind, chosen, instead):
    where = ("resolve", "mxfp4", "--platform", "cuda:sm90", "--kind", kind)
    code, data = run_json(capsys, *where, "--disable", "triton-qdq")
    assert code == 0 and data["kernel"] == instead
    assert [d["kind"] for d in data["deviations"]] == ["disabled"]
    code, out, _ = run(capsys, *where, "--disable", "triton-qdq")
    assert f"deviation   disabled: {chosen} would run but" in out
    code, out, _ = run(capsys, *where, "--disable", "triton-qdq", "--strict")
    assert code == 1 and "error: strict mode" in out
    code, data = run_json(capsys, *where, "--force", instead)
    assert code == 0 and data["kernel"] == instead and data["forced"]
    assert run(capsys, *where, "--force", instead, "--strict")[0] == 1


@pytest.mark.parametrize("argv,needle", [
    (["resolve", "mxfp4", "--force", "triton-qdq"],
     "--force triton-qdq: a qdq kernel, not a linear one; pass --kind qdq with it (kinds: "
     "linear, moe, qdq)"),
    (["resolve", "mxfp4", "--kind", "moe", "--force", "triton-emulation"],
     "--force triton-emulation: a linear kernel, not a moe one; pass --kind linear"),
    (["resolve", "mxfp4", "--kind", "qdq", "--force", "reference-moe"],
     "a moe kernel, not a qdq one"),
    (["resolve", "--from-config", "x.json", "--kind", "moe"], "drop --kind moe"),
])
def test_forcing_a_kernel_of_another_kind_is_a_one_line_usage_error(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert needle in err, err


def test_resolve_all_takes_a_kind(capsys):
    n = len(load_schemes().schemes)
    code, data = run_json(capsys, "resolve", "--all", "--platform", "cpu", "--kind", "moe")
    assert code == 0 and len(data) == n
    assert {(d["kind"], d["kernel"]) for d in data} == {("moe", "reference-moe")}
    code, out, _ = run(capsys, "resolve", "--all", "--platform", "cuda:sm90", "--kind", "moe")
    assert out.splitlines()[0] == "platform: cuda:sm90 (named); kind: moe (grouped MoE experts)"
    assert row(out, "w_mxint8_a_mxint8")[1:3] == ["triton-moe", "emulated"]
    code, out, _ = run(capsys, "resolve", "--all", "--platform", "cpu", "--kind", "qdq")
    assert code == 0
    assert row(out, "w_mxfp4") == ["w_mxfp4", "-", "weight-only", "none"]
    assert row(out, "w_mxfp4_a_fp8") == ["w_mxfp4_a_fp8", "reference-qdq", "emulated",
                                         "fp8_e4m3:fp32/tensor:static"]
    code, data = run_json(capsys, "resolve", "--all", "--platform", "cpu")
    assert {d["kind"] for d in data} == {"linear"}  # the default kind


# --- 3. lint --probe under strict mode -------------------------------------------------------------

def test_lint_probe_passes_under_strict_mode(capsys, monkeypatch, caplog):
    """The probe's oracle names its qdq kernel (reference-qdq): no forced choice to refuse."""
    monkeypatch.setenv("REGISTRY_STRICT", "1")
    with caplog.at_level(logging.WARNING, logger="registry.resolve"):
        code, out, err = run(capsys, "lint", "--probe", "--no-record", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"], data["findings"]
    assert data["probe"] and all(p["ok"] for p in data["probe"]), data["probe"]
    assert any(p["act_effect"] for p in data["probe"])  # the weight-only oracle ran
    assert not [r for r in caplog.records if "forced" in r.getMessage()]


# --- 4. lint: an activation key no qdq kernel declares --------------------------------------------

def test_lint_points_an_unknown_activation_key_to_the_qdq_declarations(capsys, tmp_path):
    f = tmp_path / "w_mxfp4_a_fp8_token.yaml"
    f.write_text(BAD_ACT)
    code, out, _ = run(capsys, "lint", str(tmp_path))
    line = next(line for line in out.splitlines() if line.startswith(f"{f}:5: error: activation"))
    assert code == 1 and TOKEN_KEY in line
    assert "kernels/select/declarations.py" in line and "kernels/dispatch.py" not in line


# --- 5. one platform detection ---------------------------------------------------------------------

def test_the_layers_platform_is_the_kernels_one(monkeypatch):
    from kernels.spec.platform import device_platform
    from registry.nn import layers

    assert layers.platform_for_device is device_platform
    assert layers.layer_platform("cpu") == Platform("cpu")
    with pytest.raises(ValueError, match="MX layers run on cpu, cuda .* not on meta"):
        layers.layer_platform("meta")  # a platform of its own for the kernels; no layer's
    monkeypatch.setattr(layers, "platform_for_device", lambda device: Platform("cuda", "sm90"))
    assert layers.layer_platform("cpu") == Platform("cuda", "sm90")  # the patch takes effect
