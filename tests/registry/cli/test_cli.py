"""The `registry` command: list / show / lint / schema, exit codes, --json shapes."""
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from registry.cli import COMMANDS, main
from registry.files.loader import read_scheme_file

from support.paths import BROKEN_SCHEMES, REPO

SHIPPED = sorted(p.stem for p in (REPO / "schemes").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("REGISTRY_SCHEMES_PATH", raising=False)


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _user_dir(tmp_path, name="user_scheme", activation="none"):
    d = tmp_path / "mine"
    d.mkdir(exist_ok=True)
    (d / f"{name}.yaml").write_text(
        f"name: {name}\nsummary: a user scheme\naliases: [u1]\n"
        "weight: {format: mxfp8_e4m3, scale: {format: e8m0, block: 32, rounding: rceil}, "
        f"static: true}}\nactivation: {activation}\n")
    return d


def test_list_table(capsys):
    rc, out, err = run(capsys, "list")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "WEIGHT", "ACTIVATION", "SOURCE"]
    assert [line.split()[0] for line in lines[1:]] == SHIPPED
    for col in ("WEIGHT", "ACTIVATION", "SOURCE"):  # aligned columns
        start = lines[0].index(col)
        assert all(line[start - 2:start] == "  " and line[start] != " " for line in lines[1:])
    row = next(line for line in lines if line.startswith("w_mxfp4_a_fp8 "))
    assert row.split() == ["w_mxfp4_a_fp8", "mxfp4:e8m0/b32:even:static",
                           "fp8_e4m3:fp32/tensor:static", "schemes/w_mxfp4_a_fp8.yaml:1"]
    assert next(line for line in lines if line.startswith("w_mxfp4 ")).split()[2] == "none"


def test_list_json_shape(capsys):
    rc, out, _ = run(capsys, "list", "--json")
    data = json.loads(out)
    assert rc == 0 and set(data) == {"schemes", "findings"} and data["findings"] == []
    assert [s["name"] for s in data["schemes"]] == SHIPPED
    s = next(s for s in data["schemes"] if s["name"] == "w_mxfp4_a_mxfp4")
    assert set(s) == {"name", "summary", "aliases", "weight", "activation", "contract", "source"}
    assert s["activation"]["key"] == "mxfp4:e8m0/b32:even:dynamic"
    assert s["activation"]["scale"] == {"format": "e8m0", "granularity": "block", "block": 32,
                                        "static": False, "rounding": "even"}
    assert s["source"] == {"file": "schemes/w_mxfp4_a_mxfp4.yaml", "line": 1, "dir": "schemes",
                           "origin": "shipped"}
    assert next(s for s in data["schemes"] if s["name"] == "w_mxfp4")["activation"] is None


def test_list_with_user_dirs_and_a_broken_file(capsys, tmp_path):
    d = _user_dir(tmp_path)
    (d / "bad.yaml").write_text("name: bad\n")
    rc, out, err = run(capsys, "--schemes", str(d), "list")
    assert rc == 1
    assert "user_scheme" in out and "bad " not in out
    bad = str(d / "bad.yaml")
    assert err.splitlines() == [
        f"{bad}:1: error: activation: missing; weight-only schemes must say `activation: none`",
        f"{bad}:1: error: summary: missing; add `summary: <one line saying what the scheme is>`",
        f"{bad}:1: error: weight: missing; add `weight: {{format: mxfp4, scale: {{format: e8m0, "
        "block: 32, rounding: even}, static: true}`"]


def test_schemes_option_after_the_subcommand_and_from_env(capsys, tmp_path, monkeypatch):
    d = _user_dir(tmp_path)
    rc, out, _ = run(capsys, "show", "u1", "--schemes", str(d))
    assert rc == 0 and out.startswith("user_scheme: a user scheme")
    monkeypatch.setenv("REGISTRY_SCHEMES_PATH", str(d))
    rc, out, _ = run(capsys, "show", "--json", "user_scheme")
    assert rc == 0 and json.loads(out)["source"]["origin"] == "REGISTRY_SCHEMES_PATH"


def test_missing_schemes_dir_is_a_finding(capsys, tmp_path):
    rc, out, err = run(capsys, "--schemes", str(tmp_path / "nope"), "lint")
    assert rc == 1 and err == ""
    assert out.splitlines() == [f"{tmp_path / 'nope'}: error: scheme directory does not exist "
                                "(from --schemes); create it or fix the path"]


def test_show_text(capsys):
    rc, out, err = run(capsys, "show", "mxfp4")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == ("w_mxfp4_a_mxfp4: MXFP4 weights and MXFP4 activations quantized at run "
                        "time (W4A4)")
    assert "  source:     schemes/w_mxfp4_a_mxfp4.yaml:1  (shipped directory schemes)" in lines
    assert "  aliases:    mxfp4, mxfp4_w4a4" in lines
    assert "  activation: mxfp4:e8m0/b32:even:dynamic  (line 5)" in lines
    fields = [line.split() for line in lines if line.startswith("    ")]
    assert fields[:6] == [["format", "mxfp4", "line", "4"], ["static", "true", "line", "4"],
                          ["scale.format", "e8m0", "line", "4"],
                          ["scale.granularity", "block", "(implied)"],
                          ["scale.block", "32", "line", "4"],
                          ["scale.rounding", "even", "line", "4"]]
    assert fields[7] == ["static", "false", "line", "5"]


def test_show_fp8_and_weight_only(capsys):
    rc, out, _ = run(capsys, "show", "w_mxfp6_e2m3_a_fp8")
    assert rc == 0
    fields = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert fields[6:] == [["format", "fp8_e4m3", "line", "5"], ["static", "true", "line", "5"],
                          ["scale.format", "fp32", "line", "5"],
                          ["scale.granularity", "tensor", "line", "5"],
                          ["scale.block", "-", "(implied)"], ["scale.rounding", "-", "(implied)"]]
    rc, out, _ = run(capsys, "show", "w_mxfp4")
    assert "  activation: none  (weight-only; line 5)" in out.splitlines()


def test_show_json_shape(capsys):
    rc, out, _ = run(capsys, "show", "mxfp8", "--json")
    data = json.loads(out)
    assert rc == 0 and data["name"] == "w_mxfp8_e4m3_a_mxfp8_e4m3"
    assert data["aliases"] == ["mxfp8", "mxfp8_e4m3"]
    assert data["weight"] == {
        "key": "mxfp8_e4m3:e8m0/b32:even:static", "format": "mxfp8_e4m3", "static": True,
        "scale": {"format": "e8m0", "granularity": "block", "block": 32, "static": True,
                  "rounding": "even"},
        "lines": {"format": 4, "static": 4, "scale.format": 4, "scale.granularity": None,
                  "scale.block": 4, "scale.rounding": 4}}
    assert data["contract"] == ("W=mxfp8_e4m3:e8m0/b32:even:static "
                                "A=mxfp8_e4m3:e8m0/b32:even:dynamic")


def test_show_unknown_name_is_a_one_line_usage_error(capsys):
    rc, out, err = run(capsys, "show", "mxfp44")
    assert rc == 2 and out == ""
    assert err.splitlines() == ["registry show: error: no scheme or alias named 'mxfp44'; did you "
                                "mean mxfp4, w_mxfp4, mxfp4_w4a4, mxfp8?"]


def test_lint_clean_and_broken(capsys):
    assert run(capsys, "lint") == (0, "", "")
    assert run(capsys, "lint", "schemes", "schemes/w_mxfp4.yaml") == (0, "", "")
    rc, out, err = run(capsys, "lint", "tests/data/broken_schemes")
    expected = sorted(str(f) for p in BROKEN_SCHEMES.glob("*.yaml")
                      for f in read_scheme_file(p.relative_to(REPO))[1])
    assert rc == 1 and err == "" and len(expected) > 20
    assert sorted(out.splitlines()) == expected


def test_lint_one_file_json(capsys):
    rc, out, _ = run(capsys, "lint", "--json", "tests/data/broken_schemes/block_16.yaml")
    assert rc == 1
    assert json.loads(out) == {
        "ok": False, "checked": ["tests/data/broken_schemes/block_16.yaml"],
        "findings": [{"path": "tests/data/broken_schemes/block_16.yaml", "line": 12,
                      "severity": "error", "field": "activation.scale.block",
                      "message": "must be 32 for e8m0 scales (OCP MX)"}]}
    rc, out, _ = run(capsys, "lint", "--json")
    data = json.loads(out)
    assert rc == 0 and data["ok"] and data["findings"] == [] and len(data["checked"]) == 18


def test_lint_path_reports_clashes_with_the_configured_dirs(capsys, tmp_path):
    d = _user_dir(tmp_path, name="w_mxfp4")
    rc, out, _ = run(capsys, "lint", str(d))
    assert rc == 1
    assert out.splitlines() == [
        f"{d / 'w_mxfp4.yaml'}:1: error: name: scheme name 'w_mxfp4' is already defined in "
        "schemes/w_mxfp4.yaml:1; names must be unique across all scheme directories"]


def test_lint_warning_exits_1(capsys, tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    long = "x" * 150
    (d / "wordy.yaml").write_text(
        f"name: wordy\nsummary: {long}\nweight: {{format: mxint8, scale: {{format: e8m0, "
        "rounding: floor}, static: true}\nactivation: none\n")
    rc, out, _ = run(capsys, "lint", str(d / "wordy.yaml"))
    assert rc == 1
    assert out.splitlines() == [f"{d / 'wordy.yaml'}:2: warning: summary: is 150 characters "
                                "long; keep it under 100 (details go in a comment)"]


@pytest.mark.parametrize("argv, needle", [
    ([], "registry: error: missing command; choose from list, show, lint, schema"),
    (["frobnicate"], "registry: error: argument COMMAND: invalid choice: 'frobnicate'"),
    (["list", "--bogus"], "registry: error: unrecognized arguments: --bogus"),
    (["show"], "registry show: error: the following arguments are required: NAME"),
    (["lint", "no/such/path.yaml"], "registry lint: error: no such file or directory: "
                                    "no/such/path.yaml"),
    (["schema", "--check", "schemes"], "registry schema: error: schemes is a directory (use "
                                       "`registry lint DIR`)"),
    (["schema", "--check"], "registry schema: error: argument --check: expected at least one"),
    (["schema", "--json"], "registry schema: error: --json goes with --check"),
    (["--schemes"], "registry: error: argument --schemes: expected one argument"),
])
def test_usage_errors_exit_2_with_one_line(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(needle), err


def test_help_exits_0(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0 and all(name in out for name in ("list", "show", "lint", "schema"))


def test_schema_is_the_json_schema_of_a_file(capsys):
    rc, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert rc == 0 and schema["$schema"].endswith("2020-12/schema")
    assert schema["required"] == ["name", "summary", "weight", "activation"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"name", "summary", "aliases", "weight", "activation"}
    tensor = schema["$defs"]["TensorSpec"]
    assert tensor["properties"]["format"]["enum"] == [
        "mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8", "fp8_e4m3"]
    assert schema["properties"]["activation"]["then"] == {"const": "none"}  # if it is text
    assert schema["$defs"]["ScaleSpec"]["additionalProperties"] is False


def test_schema_check(capsys):
    files = [f"schemes/{n}.yaml" for n in SHIPPED]
    assert run(capsys, "schema", "--check", *files) == (0, "", "")
    rc, out, _ = run(capsys, "schema", "--check", "tests/data/broken_schemes/static_yes.yaml",
                     "tests/data/broken_schemes/empty.yaml", "--json")
    data = json.loads(out)
    assert rc == 1 and not data["ok"]
    assert [(f["path"], f["line"]) for f in data["findings"]] == [  # sorted as lint sorts
        ("tests/data/broken_schemes/empty.yaml", 1), ("tests/data/broken_schemes/static_yes.yaml", 7)]


def test_subcommands_are_a_table():
    assert list(COMMANDS)[:4] == ["list", "show", "lint", "schema"]  # more may be registered
    assert all(callable(c.run) and callable(c.add_arguments) for c in COMMANDS.values())


def _console_script() -> tuple[list[str], dict[str, str]]:
    """(argv prefix, env) that run the `registry` console script pyproject.toml declares.

    The installed script when a distribution of THIS checkout is installed (an editable install
    whose direct_url.json points here, as `pip install -e .` makes); otherwise (a checkout run
    from PYTHONPATH, as on the GPU machine) the declared entry point in a fresh interpreter, with
    the checkout first on PYTHONPATH and the caller's other entries kept."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        tomllib = pytest.importorskip("tomli")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "registry" in scripts, scripts
    module, _, func = scripts["registry"].partition(":")
    for dist in importlib.metadata.distributions():
        if (dist.metadata["Name"] or "").lower().replace("_", "-") != "ocp-mx-registry":
            continue
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        if not url.get("dir_info", {}).get("editable") \
                or Path(unquote(url.get("url", "").removeprefix("file://"))).resolve() != REPO:
            continue  # not an install of this checkout (or a non-editable copy of it)
        declared = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
        assert declared.get("registry") == scripts["registry"], (
            f"the installed `registry` script runs {declared.get('registry')}, pyproject.toml "
            f"declares {scripts['registry']}: pip install -e . again")
        found = [dist.locate_file(f) for f in dist.files or ()
                 if f.name in ("registry", "registry.exe") and f.parent.name in ("bin", "Scripts")]
        found = [Path(f) for f in found if Path(f).exists()]
        assert found, f"{dist.metadata['Name']} is installed for {REPO} but its script is missing"
        return [str(found[0])], dict(os.environ)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    return [sys.executable, "-c", code], env


def test_console_script_in_a_subprocess(tmp_path):
    script, env = _console_script()
    out = subprocess.run([*script, "list", "--json"], capture_output=True, text=True,
                         cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    assert [s["name"] for s in json.loads(out.stdout)["schemes"]] == SHIPPED
    bad = subprocess.run([*script, "lint", str(BROKEN_SCHEMES)], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert f"{BROKEN_SCHEMES / 'block_16.yaml'}:12: error: activation.scale.block: must be 32" in bad.stdout
    usage = subprocess.run([*script, "nope"], capture_output=True, text=True, env=env)
    assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1


@pytest.mark.parametrize("argv", [["list"], ["show", "mxfp4"], ["lint"], ["schema"],
                                  ["schema", "--check", "schemes/w_mxfp4.yaml"]])
def test_look_up_commands_import_no_torch_or_triton(argv):
    code = ("import sys, json; from registry.cli import main; rc = main(sys.argv[1:]); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')); "
            "print(json.dumps([rc, bad]), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code, *argv],
                         capture_output=True, text=True, cwd=REPO)
    rc, bad = json.loads(out.stderr.splitlines()[-1])
    assert (rc, bad) == (0, [])
    imported = [line.split("|")[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")]
    assert "registry.cli" in imported
    assert not [m for m in imported if m.split(".")[0] in ("torch", "triton")]


@pytest.mark.parametrize("argv, needle", [
    (["doctor", "--bogus"], "registry: error: unrecognized arguments: --bogus"),
    (["doctor", "extra"], "registry: error: unrecognized arguments: extra"),
    (["lint", "--no-record"], "registry lint: error: --kernels / --no-record go with --probe"),
])
def test_doctor_and_lint_record_usage_errors(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(needle), err


def test_help_lists_doctor(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0 and "doctor" in out and "bench" in out
    rc, out, _ = run(capsys, "doctor", "--help")
    assert rc == 0 and "--probe" in out and "--json" in out
