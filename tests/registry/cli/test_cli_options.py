"""The CLI's global options and switches: --version, the REGISTRY_* on/off variables, --platform
names, --force / --disable messages, and resolve's one-line errors against its --json."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import subprocess
import sys
import tomllib

import pytest

from kernels.select.resolve import REASON_CHARS
from kernels.spec.env import ENV_FLAGS, FALSE_WORDS, TRUE_WORDS, SettingError, env_flag
from kernels.spec.platform import KNOWN_PLATFORMS, Platform
from registry.cli import main
from registry.settings import DIST_NAME, _source_tree_version

from support.paths import REPO


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _pyproject_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def _expected_version() -> str:
    """What --version must print here: the installed distribution's, else the checkout's."""
    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return _pyproject_version()


def _torch_free(argv: list[str], *, module: bool = False) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter under -X importtime; stderr lists every import."""
    head = [sys.executable, "-X", "importtime"]
    cmd = head + (["-m", "registry"] if module else
                  ["-c", "import sys; from registry.cli import main; sys.exit(main())"]) + argv
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)


def _imported(stderr: str) -> list[str]:
    return [line.split("|")[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")]


# --- --version ----------------------------------------------------------------------------------

def test_version_in_process(capsys):
    rc, out, err = run(capsys, "--version")
    assert (rc, out, err) == (0, f"registry {_expected_version()}\n", "")


def test_version_from_a_source_tree_that_is_not_installed(capsys, monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    rc, out, _ = run(capsys, "--version")
    assert (rc, out) == (0, f"registry {_pyproject_version()}\n")


def test_source_tree_version_reads_the_project_table_only(tmp_path):
    assert _source_tree_version(tmp_path) is None  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text(
        '[tool.other]\nversion = "9.9"\n\n[project]\nname = "x"\nversion = "1.2.3"\n'
        '\n[tool.more]\nversion = "8.8"\n', encoding="utf-8")
    assert _source_tree_version(tmp_path) == "1.2.3"


def test_python_m_registry_version_imports_no_torch(monkeypatch):
    monkeypatch.setenv("REGISTRY_STRICT", "enable")  # --version answers before any check
    out = _torch_free(["--version"], module=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"registry {_expected_version()}\n"
    assert "registry.cli" in _imported(out.stderr)
    assert not [m for m in _imported(out.stderr) if m.split(".")[0] in ("torch", "triton")]


@pytest.mark.parametrize("argv", [["resolve", "mxfp4", "--platform", "cuda:sm90"],
                                  ["resolve", "--all", "--platform", "rocm:gfx950", "--json"]])
def test_resolve_with_a_named_platform_imports_no_torch(argv):
    out = _torch_free(argv)
    assert out.returncode == 0, out.stderr
    assert "kernels.select.resolve" in _imported(out.stderr)
    assert not [m for m in _imported(out.stderr) if m.split(".")[0] in ("torch", "triton")]


# --- REGISTRY_* on/off variables ----------------------------------------------------------------

@pytest.mark.parametrize("var", ENV_FLAGS)
@pytest.mark.parametrize("argv", [["list"], ["resolve", "mxfp4", "--platform", "cpu"]])
def test_an_unknown_switch_value_is_a_usage_error(capsys, monkeypatch, var, argv):
    for other in ENV_FLAGS:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(var, "enable")
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1
    assert err.startswith(f"registry: error: {var}='enable' is not an on/off value; use "
                          "1/true/yes/on for on, 0/false/no/off or empty / unset for off")


@pytest.mark.parametrize("word", TRUE_WORDS + FALSE_WORDS + ("TRUE", " On ", "No"))
def test_every_documented_spelling_is_read(monkeypatch, word):
    monkeypatch.setenv("REGISTRY_STRICT", word)
    assert env_flag("REGISTRY_STRICT") is (word.strip().lower() in TRUE_WORDS)
    assert env_flag("REGISTRY_STRICT", {}) is False  # unset: off


def test_a_bad_disable_plugins_value_is_refused_by_the_kernel_table(monkeypatch):
    from kernels.select.kernel_table import kernel_table

    monkeypatch.setenv("REGISTRY_DISABLE_PLUGINS", "sure")
    with pytest.raises(SettingError, match="^REGISTRY_DISABLE_PLUGINS='sure' is not an on/off"):
        kernel_table()
    monkeypatch.setenv("REGISTRY_DISABLE_PLUGINS", "YES")
    assert kernel_table().plugins_enabled is False


# --- --platform ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["cuda:sm00", "cuda:sm86", "cuda", "", "cuda:sm90x", "gpu",
                                  "rocm:gfx1234", "cpu:x"])
def test_an_unknown_platform_is_refused_listing_the_known_ones(text):
    with pytest.raises(ValueError) as e:
        Platform.parse(text)
    assert str(e.value).startswith(f"unknown platform {text!r}; use one of "
                                   f"{', '.join(KNOWN_PLATFORMS)} (")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, want", [("cuda:sm89", Platform("cuda", "sm89")),
                                        ("CUDA:SM90", Platform("cuda", "sm90")),
                                        (" rocm:GFX950 ", Platform("rocm", "gfx950")),
                                        ("CPU", Platform("cpu"))])
def test_a_known_platform_is_read_in_any_case(text, want):
    assert Platform.parse(text) == want


def test_a_detected_architecture_round_trips_even_if_unlisted():
    """MXLinear on an sm86 GPU reads its own resolution's platform back (any_arch)."""
    assert Platform.parse("cuda:sm86", any_arch=True) == Platform("cuda", "sm86")
    with pytest.raises(ValueError, match="unknown platform 'cuda:sm90x'"):
        Platform.parse("cuda:sm90x", any_arch=True)


def test_a_layer_reports_an_unlisted_detected_platform():
    import torch

    from registry.nn.layers import MXLinear

    layer = MXLinear(torch.randn(16, 64), "w_mxfp4")
    layer.resolution = dataclasses.replace(layer.resolution, platform="cuda:sm86")
    assert layer.platform == Platform("cuda", "sm86")


def test_every_platform_a_kernel_declares_can_be_named():
    from kernels.select.declarations import KERNELS

    exact = {r for d in KERNELS
             for r in d.platforms + d.native_on + d.verified_on
             + tuple(p for f in d.accepts for p in f.platforms)
             if r != "*" and not r.endswith(("+", ":*"))}
    assert exact and exact <= set(KNOWN_PLATFORMS), exact - set(KNOWN_PLATFORMS)


def test_cli_platform_errors_are_one_usage_line(capsys):
    rc, out, err = run(capsys, "resolve", "mxfp4", "--platform", "cuda:sm00")
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("registry: error: --platform: unknown platform 'cuda:sm00'; use one of "
                          f"{', '.join(KNOWN_PLATFORMS)}")
    rc, out, _ = run(capsys, "resolve", "mxfp4", "--platform", "CUDA:SM90", "--json")
    assert rc == 0 and json.loads(out)["platform"] == "cuda:sm90"


# --- --force / --disable ------------------------------------------------------------------------

@pytest.mark.parametrize("option, other", [("--force", "--disable"), ("--disable", "--force")])
@pytest.mark.parametrize("value", ["foo", "ref-emulation"])
def test_an_unknown_kernel_names_the_option_used(capsys, option, other, value):
    rc, out, err = run(capsys, "resolve", "mxfp4", "--platform", "cpu", option, value)
    assert rc == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"registry: error: unknown kernel {value!r} in {option}; known "
                          "kernels: scaled-mm-mx, ")
    assert other not in err


def test_an_empty_force_is_refused_not_ignored(capsys):
    rc, _, err = run(capsys, "resolve", "mxfp4", "--platform", "cpu", "--force", "")
    assert rc == 2 and "unknown kernel '' in --force; known kernels: " in err


# --- resolve's one-line errors and its --json ---------------------------------------------------

def test_the_error_line_cuts_reasons_that_json_keeps_whole(capsys):
    argv = ("resolve", "w_mxfp4_a_mxfp6_e2m3", "--platform", "cuda:sm90", "--disable",
            "triton-emulation,reference-emulation")
    rc, out, _ = run(capsys, *argv)
    line = next(line for line in out.splitlines() if line.startswith("error: "))
    assert rc == 1 and len(line) < 420 and "..." in line
    rc, out, _ = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert rc == 1 and data["kernel"] is None and "\n" not in data["error"]
    long = [c["reason"] for c in data["candidates"] if len(c["reason"]) > REASON_CHARS]
    assert long and not [r for r in long if r in data["error"] or r.endswith("...")]
    assert all(r in out for r in long)  # each full reason is in the --json output
