"""Kernel plugins (entry-point group `registry.kernels`) and scheme sources in list / matrix.

The fake plugin lives in tests/data/plugin_pkg/acme_mx_kernels; each test "installs" it by writing a
real `.dist-info` (METADATA + entry_points.txt) into a temporary directory on sys.path, so the
real `importlib.metadata` entry-point machinery finds it.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import kernels.select.declarations as builtin
from kernels.base import load_kernel
from kernels.select.kernel_table import (ENV_DISABLE_PLUGINS, KernelPluginError, candidates_for,
                                         kernel_by_name, kernel_decls, kernel_table, source_of)
from kernels.select.resolve import ResolutionError, resolve
from kernels.spec.platform import Platform
from registry.files.catalog import load_schemes
from registry.cli import main
from registry.files.loader import ENV_VAR, shipped_dir

from support.plugin import install  # noqa: F401 - the fixture that installs the fake plugin

ACME = {"acme": "acme_mx_kernels.decls:kernels"}
ACME_SRC = "plugin acme-mx-kernels (entry point acme)"
CATALOG = load_schemes(env={})
WEIGHT_ONLY = sorted(s.name for s in CATALOG if s.activation is None)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def names_of(decls) -> list[str]:
    return [d.name for d in decls]


# --- a working plugin ---------------------------------------------------------------------------

def test_plugin_kernels_join_the_table_with_their_source(install):
    install("acme-mx-kernels", ACME)
    assert names_of(kernel_decls()) == names_of(builtin.KERNELS) + ["acme-weight-only",
                                                                     "acme-first"]
    assert source_of("acme-weight-only") == ACME_SRC
    assert source_of("acme-first") == ACME_SRC
    assert source_of("triton-emulation") == "built-in"
    assert kernel_by_name("acme-first").platforms == ("cuda:*",)
    with pytest.raises(KeyError, match="unknown kernel 'acme-nope'; known: .*acme-first"):
        kernel_by_name("acme-nope")


def test_plugin_loads_lazily_once(install):
    import acme_mx_kernels.decls as decls  # the module only; the entry point is not run yet

    install("acme-mx-kernels", ACME)
    before = len(decls.CALLS)
    for _ in range(3):
        kernel_decls()
        candidates_for(Platform.parse("cpu"))
    assert len(decls.CALLS) == before + 1


@pytest.mark.parametrize("platform", ["cpu", "cuda:sm90", "cuda:sm100", "rocm:gfx950"])
def test_placement_in_each_platforms_priority(install, platform):
    install("acme-mx-kernels", ACME)
    plat = Platform.parse(platform)
    names = names_of(candidates_for(plat))
    # the built-in order is kept; the plugin kernels are inserted into it
    assert [n for n in names if not n.startswith("acme-")] == names_of(
        builtin.candidates_for(plat))
    # default placement: just before the reference fallbacks
    assert names[names.index("acme-weight-only") + 1] == "dequant-weight-only"
    if platform.startswith("cuda"):  # before="triton-emulation"
        assert names[names.index("acme-first") + 1] == "triton-emulation"
    else:  # declared for cuda:* only: not a candidate here
        assert "acme-first" not in names


def test_resolve_picks_plugin_kernels_where_their_priority_says(install):
    install("acme-mx-kernels", ACME)
    w4 = CATALOG.get("w_mxfp4")
    res = resolve(w4, "cpu")
    assert res.kernel == "acme-weight-only" and res.chosen.source == ACME_SRC
    assert res.to_dict()["candidates"][0]["source"] == ACME_SRC
    # a plugin kernel winning is a deviation (visible, logged) but the user's choice: not strict
    assert [(d.kind, d.message) for d in res.deviations] == [
        ("plugin", f"acme-weight-only comes from {ACME_SRC}")]
    assert resolve(w4, "cpu", strict=True).kernel == "acme-weight-only"
    assert resolve(w4, "cuda:sm90").kernel == "acme-first"
    # a W4A4 scheme never lands on a weight-only plugin kernel
    res = resolve(CATALOG.get("w_mxfp4_a_mxfp4"), "cuda:sm90")
    assert res.kernel == "triton-emulation"
    assert "weight-only" in next(c.reason for c in res.candidates if c.kernel == "acme-first")
    assert resolve(w4, "cuda:sm90", disabled=["acme-first"]).kernel == "triton-emulation"
    with pytest.raises(ResolutionError, match="acme-first: does not run on cpu"):
        resolve(w4, "cpu", force="acme-first")


@pytest.mark.parametrize("scheme", WEIGHT_ONLY)
def test_load_kernel_runs_the_plugin_kernel_like_the_reference(install, scheme):
    from acme_mx_kernels.linear import AcmeWeightOnlyLinear

    install("acme-mx-kernels", ACME)
    s = CATALOG.get(scheme)
    kernel = load_kernel(resolve(s, "cpu").kernel)
    assert isinstance(kernel, AcmeWeightOnlyLinear) and kernel.decl.name == "acme-weight-only"
    g = torch.Generator().manual_seed(sum(map(ord, scheme)))
    w, x, b = torch.randn(24, 96, generator=g), torch.randn(3, 96, generator=g), \
        torch.randn(24, generator=g)
    got = kernel.apply(x, kernel.prepare(w, s.contract), b)
    ref = load_kernel("reference-emulation")
    want = ref.apply(x, ref.prepare(w, s.contract), b)
    assert got.shape == (3, 24) and torch.equal(got, want)
    assert not torch.equal(got, torch.nn.functional.linear(x, w, b))  # the weight was quantized


def test_matrix_shows_plugin_kernels_and_their_source(install, capsys):
    install("acme-mx-kernels", ACME)
    code, out, err = run(capsys, "matrix", "--platform", "cpu")
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("scheme "))
    cols = header.split()
    assert cols[-2:] == ["acme-weight-only", "acme-first"]
    row = next(line for line in lines if line.startswith("w_mxfp4 ")).split()
    assert row[cols.index("acme-weight-only")] == "[emul*]"  # chosen, not verified on hardware
    assert row[cols.index("acme-first")] == "-"  # cuda only
    assert f"  acme-weight-only: {ACME_SRC}" in lines
    assert "kernel plugins (registry.kernels): acme-mx-kernels (entry point acme)" in lines

    code, out, _ = run(capsys, "matrix", "--platform", "cuda:sm90", "--json")
    data = json.loads(out)
    assert code == 0
    assert {k["name"]: k["source"] for k in data["kernels"]}["acme-first"] == ACME_SRC
    assert data["plugins"]["enabled"] and data["plugins"]["errors"] == []
    cell = next(c for c in data["cells"] if (c["scheme"], c["kernel"]) == ("w_mxfp4", "acme-first"))
    assert cell["chosen"] and cell["source"] == ACME_SRC


def test_disable_plugins_env(install, capsys, monkeypatch):
    install("acme-mx-kernels", ACME)
    assert "acme-first" in kernel_table().names
    monkeypatch.setenv(ENV_DISABLE_PLUGINS, "1")
    assert names_of(kernel_decls()) == names_of(builtin.KERNELS)
    assert resolve(CATALOG.get("w_mxfp4"), "cpu").kernel == "dequant-weight-only"
    code, out, _ = run(capsys, "matrix", "--platform", "cpu")
    assert code == 0 and "acme" not in out
    assert "kernel plugins: disabled (REGISTRY_DISABLE_PLUGINS=1); built-in kernels only" in out
    code, out, _ = run(capsys, "matrix", "--platform", "cpu", "--json")
    assert json.loads(out)["plugins"]["enabled"] is False
    code, _, err = run(capsys, "resolve", "w_mxfp4", "--platform", "cpu", "--force", "acme-first")
    assert code == 2 and "unknown kernel 'acme-first'" in err


def test_cli_resolve_knows_plugin_kernel_names(install, capsys):
    install("acme-mx-kernels", ACME)
    code, out, _ = run(capsys, "resolve", "w_mxfp4", "--platform", "cuda:sm90", "--disable",
                       "acme-first", "--json")
    data = json.loads(out)
    assert code == 0 and data["kernel"] == "triton-emulation"
    assert {c["kernel"]: c["source"] for c in data["candidates"]}["acme-first"] == ACME_SRC
    code, out, _ = run(capsys, "lint")
    assert code == 0 and out == ""


# --- clashes and broken plugins -----------------------------------------------------------------

def test_clash_with_a_builtin_kernel_names_both_sources(install, capsys):
    install("acme-clash", {"clash": "acme_mx_kernels.decls:CLASH"})
    msg = ("kernel 'triton-emulation' from plugin acme-clash (entry point clash) clashes with "
           "the built-in kernel of kernels.select.declarations; rename one; fix or uninstall "
           "acme-clash, or set REGISTRY_DISABLE_PLUGINS=1 to load no kernel plugins")
    with pytest.raises(KernelPluginError) as e:
        kernel_decls()
    assert str(e.value) == msg
    with pytest.raises(ResolutionError) as e:
        resolve(CATALOG.get("w_mxfp4"), "cpu")
    assert str(e.value) == f"cannot resolve w_mxfp4 on cpu: {msg}"
    code, out, err = run(capsys, "resolve", "w_mxfp4", "--platform", "cpu")
    assert code == 1 and f"error: cannot resolve w_mxfp4 on cpu: {msg}" in out
    assert "Traceback" not in out + err


def test_clash_between_two_plugins_names_both(install):
    install("acme-mx-kernels", ACME)
    install("zeta-kernels", {"zeta": "acme_mx_kernels.decls:SAME_NAME"})
    with pytest.raises(KernelPluginError, match=(
            r"^kernel 'acme-weight-only' from plugin zeta-kernels \(entry point zeta\) clashes "
            r"with kernel 'acme-weight-only' from plugin acme-mx-kernels \(entry point acme\); ")):
        kernel_by_name("acme-weight-only")


BROKEN = {
    "missing": ("acme_mx_kernels.nowhere:KERNELS",
                "cannot import it: ModuleNotFoundError: No module named 'acme_mx_kernels.nowhere'"),
    "garbage": ("acme_mx_kernels.decls:GARBAGE",
                "it gave str 'not a kernel'; expected a KernelDecl, a PluginKernel"),
    "raises": ("acme_mx_kernels.decls:raises",
               "calling it raised RuntimeError: acme license file not found"),
    "klass": ("acme_mx_kernels.linear:AcmeWeightOnlyLinear",
              "it names a class (AcmeWeightOnlyLinear); an entry point names a KernelDecl"),
    "anchor": ("acme_mx_kernels.decls:BAD_ANCHOR",
               "kernel 'acme-anchored' is placed relative to 'triton-emulaton', which is no "
               "known kernel"),
}


@pytest.mark.parametrize("ep", sorted(BROKEN))
def test_a_broken_plugin_is_one_clear_line_everywhere(install, capsys, ep):
    value, why = BROKEN[ep]
    ep_file = install("acme-broken", {"fine": "acme_mx_kernels.decls:ACME_WEIGHT_ONLY",
                                      ep: value})
    head = f"kernel plugin acme-broken (entry point {ep} = {value}): {why}"
    with pytest.raises(KernelPluginError, match="^" + re.escape(head)):
        load_kernel("reference-emulation")  # the table refuses as a whole

    code, out, err = run(capsys, "matrix", "--platform", "cpu")  # one line, no matrix
    assert code == 1 and out == "" and err.splitlines()[0].startswith(f"registry: error: {head}")
    assert len(err.splitlines()) == 1

    code, out, err = run(capsys, "list")  # list reads no kernels: unaffected
    assert code == 0 and err == "" and "w_mxfp4" in out

    code, out, _ = run(capsys, "lint")  # an error at the entry point's line, then per scheme
    lines = out.splitlines()
    assert code == 1 and lines[0].startswith(f"{ep_file}:3: error: kernel-plugin: {head}")
    assert sum("cannot resolve on cpu, cuda:sm90 while a kernel plugin is broken: plugin "
               f"acme-broken (entry point {ep}) (see" in line for line in lines) == len(CATALOG)

    code, out, err = run(capsys, "resolve", "--all", "--platform", "cpu")
    assert code == 1 and head in out and "Traceback" not in out + err


def test_load_kernel_checks_the_plugin_impl(install):
    install("acme-mx-kernels", {"bad": "acme_mx_kernels.decls:BAD_IMPL"})
    assert resolve(CATALOG.get("w_mxfp4"), "cpu").kernel == "acme-bad-impl"  # impl is lazy
    with pytest.raises(KernelPluginError, match=(
            r"kernel 'acme-bad-impl' from plugin acme-mx-kernels \(entry point bad\): impl "
            r"'acme_mx_kernels.linear:NotAKernel' is not a kernels.base.LinearKernel subclass")):
        load_kernel("acme-bad-impl")


# --- scheme sources -----------------------------------------------------------------------------

def _scheme_dir(tmp_path: Path) -> Path:
    d = tmp_path / "third_party"
    d.mkdir()
    (d / "acme_w8.yaml").write_text(
        "name: acme_w8\nsummary: a third-party scheme\naliases: []\n"
        "weight: {format: mxfp8_e4m3, scale: {format: e8m0, block: 32, rounding: rceil}, "
        "static: true}\nactivation: none\n")
    return d


@pytest.mark.parametrize("how", ["env", "option"])
def test_list_shows_each_schemes_source(tmp_path, capsys, monkeypatch, how):
    d = _scheme_dir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    if how == "env":
        monkeypatch.setenv(ENV_VAR, str(d))
        argv, origin = ["list"], ENV_VAR
    else:
        argv, origin = ["--schemes", str(d), "list"], "--schemes"
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    lines = out.splitlines()
    row = next(line for line in lines if line.startswith("acme_w8 "))
    assert row.endswith(f"{d / 'acme_w8.yaml'}:1 (from {origin})")
    assert next(line for line in lines if line.startswith("w_mxfp4 ")).endswith(
        "schemes/w_mxfp4.yaml:1")
    footer = lines[lines.index("scheme directories, in load order (the first definition of a "
                               "name keeps it; a second one is an error):") + 1:]
    assert [line.split() for line in footer] == [["shipped", "schemes"], [origin, str(d)]]

    code, out, _ = run(capsys, *argv, "--json")
    src = {s["name"]: s["source"] for s in json.loads(out)["schemes"]}
    assert src["acme_w8"] == {"file": str(d / "acme_w8.yaml"), "line": 1, "dir": str(d),
                              "origin": origin}
    assert src["w_mxfp4"]["origin"] == "shipped"


def test_scheme_clash_between_schemes_path_and_shipped_names_both_files(tmp_path, capsys,
                                                                       monkeypatch):
    d = _scheme_dir(tmp_path)
    shutil.copy(shipped_dir() / "w_mxfp6_e2m3.yaml", d / "w_mxfp6_e2m3.yaml")
    monkeypatch.setenv(ENV_VAR, str(d))
    code, out, err = run(capsys, "list")
    assert code == 1
    assert err.splitlines() == [
        f"{d / 'w_mxfp6_e2m3.yaml'}:1: error: name: scheme name 'w_mxfp6_e2m3' is already "
        "defined in schemes/w_mxfp6_e2m3.yaml:1; names must be unique across all scheme "
        "directories",
        f"{d / 'w_mxfp6_e2m3.yaml'}:3: error: aliases.0: alias 'mxfp6_e2m3_w6a16' is already an "
        "alias of 'w_mxfp6_e2m3' (schemes/w_mxfp6_e2m3.yaml:3); aliases must be unique"]
    row = next(line for line in out.splitlines() if line.startswith("w_mxfp6_e2m3 "))
    assert row.endswith("schemes/w_mxfp6_e2m3.yaml:1")  # the first definition wins
