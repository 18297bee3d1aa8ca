"""`registry resolve`, `registry matrix`, and the kernel-aware lint checks, through the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.cli import main
from support.scheme_texts import BAD_ACT



def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_resolve_one_human(capsys):
    code, out, _ = run(capsys, "resolve", "mxfp4", "--platform", "cuda:sm90")
    assert code == 0
    assert "kernel      triton-emulation (emulated)" in out
    assert "->  triton-emulation" in out
    assert "dequant-weight-only  activation mxfp4:e8m0/b32:even:dynamic rejected" in out


def test_resolve_json(capsys):
    code, out, _ = run(capsys, "resolve", "w_mxfp6_e3m2_a_mxfp6_e3m2", "--platform",
                       "cuda:sm100", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["kernel"] == "triton-emulation" and data["fallback"] is True
    assert data["weight"] == "mxfp6_e3m2:e8m0/b32:even:static"
    assert [c["kernel"] for c in data["candidates"]][:2] == ["scaled-mm-mx", "triton-dot-scaled"]


def test_resolve_strict_and_env(capsys, monkeypatch):
    code, out, _ = run(capsys, "resolve", "w_mxfp6_e3m2_a_mxfp6_e3m2", "--platform",
                       "cuda:sm100", "--strict")
    assert code == 1 and "error: strict mode" in out
    monkeypatch.setenv("REGISTRY_STRICT", "1")
    assert run(capsys, "resolve", "w_mxfp6_e3m2_a_mxfp6_e3m2", "--platform", "cuda:sm100")[0] == 1
    monkeypatch.delenv("REGISTRY_STRICT")
    code, out, _ = run(capsys, "resolve", "mxfp4", "--platform", "cuda:sm90", "--disable",
                       "triton-dot-scaled", "--json")
    assert code == 0 and json.loads(out)["kernel"] == "triton-emulation"
    code, out, _ = run(capsys, "resolve", "mxfp4", "--platform", "cpu", "--force",
                       "dequant-weight-only")
    assert code == 1 and "weight-only" in out


@pytest.mark.parametrize("argv,needle", [
    (["resolve"], "give one scheme NAME|ALIAS or --all"),
    (["resolve", "mxfp4", "--all"], "give one scheme NAME|ALIAS or --all"),
    (["resolve", "mxfp4", "--platform", "tpu"], "unknown platform 'tpu'"),
    (["resolve", "mxfp4", "--force", "fast"], "unknown kernel 'fast'"),
    (["resolve", "nosuch"], "nosuch"),
])
def test_resolve_usage_errors(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


def test_resolve_all_and_matrix(capsys):
    code, out, _ = run(capsys, "resolve", "--all", "--platform", "cuda:sm90", "--json")
    data = json.loads(out)
    assert code == 0 and len(data) == 18 and all(d["kernel"] for d in data)
    code, out, _ = run(capsys, "matrix", "--platform", "cuda:sm100")
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("w_mxfp4_a_mxfp4 "))
    assert line.split()[1:3] == ["[native*]", "native*"]
    code, out, _ = run(capsys, "matrix", "--platform", "cpu", "--json")
    cells = json.loads(out)["cells"]
    wo = [c for c in cells if c["kernel"] == "dequant-weight-only" and c["accepted"]]
    assert {c["scheme"] for c in wo} == {"w_mxfp4", "w_mxfp6_e3m2", "w_mxfp6_e2m3",
                                         "w_mxfp8_e4m3"}


def test_lint_unknown_activation_key_fails_at_its_line(tmp_path: Path, capsys):
    f = tmp_path / "w_mxfp4_a_fp8_token.yaml"
    f.write_text(BAD_ACT)
    code, out, _ = run(capsys, "lint", str(tmp_path))
    assert code == 1
    lines = out.splitlines()
    assert any(l.startswith(f"{f}:5: error: activation: the activation-QDQ dispatcher has no "
                            "entry for fp8_e4m3:fp32/token:dynamic") and l.endswith(
                                "or declare a qdq kernel that implements it "
                                "(kernels/select/declarations.py, QDQ_KERNELS)")
               for l in lines), out
    assert any(l.startswith(f"{f}:1: error: resolve: no kernel implements") for l in lines)


def test_lint_probe_cpu(capsys):
    code, out, err = run(capsys, "lint", "--probe", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"], data["findings"]
    pairs = {(p["scheme"], p["kernel"]) for p in data["probe"]}
    assert ("w_mxfp4_a_mxfp6_e3m2", "reference-emulation") in pairs
    for p in data["probe"]:
        assert p["ok"], p
        if not p["scheme"].endswith(("w_mxfp4", "e3m2", "e2m3", "w_mxfp8_e4m3")):
            assert p["act_effect"] > 0.0078


def test_probe_catches_a_skipped_activation_qdq(monkeypatch):
    """The vLLM bug, reproduced: a kernel that skips the activation QDQ fails the probe."""
    from kernels.reference.linear import ReferenceEmulationLinear
    from registry import load_schemes
    from kernels.spec.platform import Platform
    from registry.machine.probe import probe_pair

    monkeypatch.setattr(ReferenceEmulationLinear, "qdq_activation",
                        lambda self, x, prepared, backend="auto": x)
    scheme = load_schemes().schemes["w_mxfp4_a_mxfp6_e3m2"]
    r = probe_pair(scheme, "reference-emulation", Platform("cpu"), "cpu")
    assert not r.ok and "did not happen" in r.message
