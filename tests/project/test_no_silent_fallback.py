"""No silent fallback: every path that changes what runs is in the resolution, logged, strict-able.

The deviations (fallback, forced, disabled, plugin) are checked for every shipped scheme on every
named platform against the plain order; strict mode (argument and REGISTRY_STRICT=1) refuses the
first three; a weight-only kernel is never handed an activation key; and a scan of the source
proves that no exception handler swallows an error into another code path unless it is listed
below with the reason it is not a fallback.
"""
from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

from kernels.spec.platform import KNOWN_PLATFORMS, Platform
from registry.files.catalog import load_schemes
from kernels.select.resolve import (ENV_DISABLED, ENV_STRICT, STRICT_KINDS, ResolutionError,
                                    _steps, log_resolution, resolve)

from support.paths import REPO

PLATFORMS = list(KNOWN_PLATFORMS)
CATALOG = load_schemes()
SCHEMES = sorted(CATALOG.schemes.values(), key=lambda s: s.name)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in (ENV_STRICT, ENV_DISABLED):
        monkeypatch.delenv(var, raising=False)


def _plain_choice(scheme, plat):
    from kernels.select.kernel_table import kernel_table

    for decl in kernel_table().candidates_for(Platform.parse(plat)):
        if _steps(decl, Platform.parse(plat), scheme.contract, (), None, None)[0]:
            return decl.name
    return None


@pytest.mark.parametrize("plat", PLATFORMS)
def test_a_plain_resolution_has_no_deviation_but_a_declared_fallback(plat):
    for s in SCHEMES:
        try:
            res = resolve(s, plat)
        except ResolutionError:
            assert _plain_choice(s, plat) is None
            continue
        assert res.kernel == _plain_choice(s, plat)
        kinds = [d.kind for d in res.deviations]
        assert kinds == (["fallback"] if res.fallback else []), (s.name, plat, kinds)
        assert res.to_dict()["deviations"] == [d.to_dict() for d in res.deviations]


def _fallback_case():
    """A (scheme, platform) whose choice is an emulated fallback behind a native kernel."""
    for plat in PLATFORMS:
        for s in SCHEMES:
            try:
                if resolve(s, plat).fallback:
                    return s, plat
            except ResolutionError:
                pass
    raise AssertionError("no fallback anywhere: the deviation tests need one")


def _disable_case():
    """A (scheme, platform, kernel) where disabling the plain choice still resolves."""
    for plat in PLATFORMS:
        for s in SCHEMES:
            first = _plain_choice(s, plat)
            if first is None:
                continue
            try:
                res = resolve(s, plat, disabled=[first])
            except ResolutionError:
                continue
            return s, plat, first, res.kernel
    raise AssertionError("no scheme resolves with its first kernel disabled")


def test_every_deviation_kind_is_in_the_result_and_strict_refuses_it(monkeypatch):
    s, plat = _fallback_case()
    assert [d.kind for d in resolve(s, plat).deviations] == ["fallback"]
    s2, plat2, first, second = _disable_case()
    res = resolve(s2, plat2, disabled=[first])
    kinds = {d.kind for d in res.deviations}
    assert "disabled" in kinds and first in str(res.deviations) and second in str(res.deviations)
    forced = resolve(SCHEMES[0], "cpu", force="reference-emulation")
    assert "forced" in {d.kind for d in forced.deviations}
    cases = {"fallback": dict(scheme_or_contract=s, platform=plat),
             "disabled": dict(scheme_or_contract=s2, platform=plat2, disabled=[first]),
             "forced": dict(scheme_or_contract=SCHEMES[0], platform="cpu",
                            force="reference-emulation")}
    assert set(cases) == set(STRICT_KINDS)
    for kind, kwargs in cases.items():
        with pytest.raises(ResolutionError, match=f"strict mode: .*{kind}: ") as info:
            resolve(**kwargs, strict=True)
        assert "\n" not in str(info.value)
        monkeypatch.setenv(ENV_STRICT, "1")
        with pytest.raises(ResolutionError, match=f"{kind}: "):
            resolve(**kwargs)
        monkeypatch.delenv(ENV_STRICT)


def test_a_disabled_kernel_that_would_not_have_run_is_no_deviation():
    s = next(s for s in SCHEMES if _plain_choice(s, "cpu") == "reference-emulation")
    res = resolve(s, "cpu", disabled=["scaled-mm-mx"], strict=True)  # not listed on cpu anyway
    assert res.deviations == () and res.disabled == ("scaled-mm-mx",)


def test_env_disabled_is_named_as_the_cause(monkeypatch):
    s, plat, first, _ = _disable_case()
    monkeypatch.setenv(ENV_DISABLED, first)
    res = resolve(s, plat)
    assert [d for d in res.deviations if d.kind == "disabled" and ENV_DISABLED in d.message]


def test_cli_shows_each_deviation_and_strict_exits_1(capsys):
    from registry.cli import main

    s, plat, first, second = _disable_case()
    assert main(["resolve", s.name, "--platform", plat, "--disable", first]) == 0
    out = capsys.readouterr().out
    assert f"deviation   disabled: {first} would run but is disabled" in out
    assert main(["resolve", s.name, "--platform", plat, "--disable", first, "--strict"]) == 1
    assert "error: strict mode" in capsys.readouterr().out
    assert main(["resolve", "--all", "--platform", plat, "--disable", first, "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert any(d["kind"] == "disabled" for r in rows for d in r["deviations"])


def test_log_resolution_logs_each_deviation_once_and_nothing_for_a_plain_choice(caplog):
    s, plat, first, second = _disable_case()
    with caplog.at_level(logging.WARNING, logger="registry.resolve"):
        log_resolution(resolve(s, plat), layer="model.plain")
        log_resolution(resolve(s, plat, disabled=[first]), layer="model.layers.0.q_proj")
    assert len(caplog.records) == 1
    msg = caplog.records[0].getMessage()
    assert msg.startswith("model.layers.0.q_proj: runs ") and f"{first} would run" in msg


# ---------------------------------------------------------------------------------------------
# The source scan: an `except` that does not re-raise must be listed here with why it is not a
# fallback (it reports the error in a result / finding / row, or it is not about what runs).
# ---------------------------------------------------------------------------------------------

REPORTED = "turns the error into a reported result (finding, row, message)"
ALLOWED = {
    ("registry/machine/bench.py", "_run_task"): REPORTED + ": a FAIL / ERROR row, never timed",
    ("registry/machine/bench.py", "_time_both"): REPORTED + ": the row's error",
    ("registry/machine/bench.py", "environment"): "an absent optional module is recorded as absent",
    ("kernels/spec/platform.py", "driver_version"): "the driver version is reported as unknown",
    ("registry/machine/bench.py", "plan_bench"): REPORTED + ": a skipped row with the reason",
    ("registry/machine/bench_moe.py", "_run_shape"): REPORTED + ": a skipped shape with "
                                                    "resolve's reason, or FAIL / ERROR rows",
    ("registry/cli/app.py", "main"): "usage errors, --help and closed pipes end the command",
    ("registry/checkpoints/inspect.py", "_check_quantized"): REPORTED + ": a finding naming the "
        "tensor (exit 1)",
    ("registry/checkpoints/inspect.py", "_kernels"): REPORTED + ": the kernel cell says none and "
        "resolve's reason",
    ("registry/checkpoints/plan.py", "plan_checkpoint"): REPORTED + ": StoredLayer.problem, an "
        "inspect finding / a load_checkpoint error",
    ("registry/cli/inspect.py", "inspect_command"): REPORTED + ": one line (or JSON with the "
        "error), exit 1 / 2",
    ("registry/cli/quantize_checkpoint.py", "quantize_checkpoint_command"): REPORTED + ": one "
        "line naming the file / tensor and the fix, exit 1",
    ("registry/cli/app.py", "_tolerant_output"): "an output stream without reconfigure stays as is",
    ("registry/cli/resolving.py", "_resolve_one"): REPORTED,
    ("registry/cli/resolving.py", "_run_from_config"): REPORTED + " (exit 1 / 2)",
    ("registry/cli/resolving.py", "matrix_cells"): REPORTED + ": the cell says why",
    ("registry/errors.py", "display_path"): "a path outside the working directory is shown whole",
    ("registry/configs/hf_reading.py", "dump"): "a value JSON cannot write is shown with repr",
    ("registry/configs/hf_reading.py", "regex_problem"): REPORTED + ": the pattern's problem",
    ("registry/cli/common.py", "record_or_warn"): "the probe record is a cache: a one-line warning",
    ("registry/cli/doctor.py", "_probe_now"): "a broken plugin is already a doctor problem",
    ("registry/machine/doctor.py", "import_error"):
        "doctor reports an absent / broken module as a fact",
    ("registry/machine/doctor.py", "detect_platform"):
        "doctor reports a failed detection as a problem",
    ("registry/machine/doctor.py", "_gpu_facts"): "doctor reports a failed device query as a fact",
    ("registry/machine/doctor.py", "_why_not_loaded"): "doctor reports why a kernel does not load",
    ("registry/settings.py", "registry_version"):
        "not installed: the source tree's pyproject version, else 'unknown'",
    ("registry/machine/probe.py", "runtime_versions"): "an absent / broken runtime has no version",
    ("registry/machine/probe.py", "read_record"):
        REPORTED + ": no record, or a warning naming the file",
    ("registry/configs/hf_config.py", "_contract_of"): REPORTED + ": the group's problem",
    ("registry/configs/hf_matching.py", "_reads_as_json"):
        "answers whether a text reads as JSON (quoted)",
    ("registry/configs/hf_matching.py", "stored_match"): "a key that cannot form is no stored "
        "match: the group is then read exactly and its problem reported",
    ("registry/configs/hf_autoround.py", "target_rank"): "an extra_config key that is no valid "
        "regex claims only the layer it names exactly (auto-round skips such regexes)",
    ("registry/configs/hf_gptoss.py", "read_gptoss"): REPORTED + ": the pattern's problem",
    ("registry/configs/hf_gptoss.py", "skips"): "a pattern that does not compile claims "
        "nothing; read_gptoss reports it",
    ("registry/lint/kernel_checks.py", "check_resolves"): REPORTED,
    ("registry/files/loader.py", "_read_scheme"): REPORTED,
    ("registry/files/loader.py", "_read_text"): REPORTED,
    ("registry/files/loader.py", "shipped_dir"):
        "no installed data package: the checkout's schemes/",
    ("registry/files/loader.py", "read_dir"): REPORTED,
    ("registry/machine/probe.py", "probe_pair"): REPORTED + ": a failed probe result",
    ("registry/nn/quantize.py", "_in_layer"):
        "an error type that cannot take a message is re-typed",
    ("registry/files/schema.py", "check_file"): REPORTED,
    ("registry/files/schema.py", "field_ok"): "answers whether a field is valid",
    ("registry/files/yaml_lines.py", "_scalar"):
        "a number YAML cannot convert stays text (reported)",
    ("kernels/select/kernel_table.py", "_load"): REPORTED + ": the plugin's one-line problem",
    ("kernels/select/kernel_table.py", "_origin"):
        "an unreadable entry_points.txt has no line number",
    ("kernels/triton/linear_tiles.py", "prepare_tensors"):
        "an unaligned fp6 buffer is copied dense: same bytes, same kernel",
    ("kernels/triton/mx_quant.py", "dequantize"):
        "an unaligned fp6 buffer is copied dense: same bytes, same kernel",
}


def _swallowing_handlers(roots: tuple[Path, ...] = (REPO / "registry", REPO / "kernels"),
                         base: Path = REPO) -> set[tuple[str, str]]:
    """(path relative to `base`, enclosing function) of each handler under `roots` that
    neither re-raises nor is listed."""
    found = set()
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            owner = {}
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for sub in ast.walk(fn):
                        owner.setdefault(id(sub), fn.name)
            for node in ast.walk(tree):
                if isinstance(node, ast.ExceptHandler) and not any(
                        isinstance(n, ast.Raise) for b in node.body for n in ast.walk(b)):
                    found.add((path.relative_to(base).as_posix(), owner.get(id(node), "<module>")))
    return found


def test_no_exception_handler_swallows_an_error_unless_listed_with_why():
    found = _swallowing_handlers()
    new = sorted(found - set(ALLOWED))
    assert not new, ("exception handlers that neither re-raise nor are listed as reporting: "
                     f"{new}; re-raise, or list them in ALLOWED with why this is no fallback")
    stale = sorted(set(ALLOWED) - found)
    assert not stale, f"ALLOWED lists handlers that no longer swallow anything: {stale}"


def test_the_scan_catches_a_swallowing_handler(tmp_path):
    # A tree of its own: the repository's scan (maybe running beside this under xdist) never
    # sees the probe.
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "_scan_probe_tmp.py").write_text(
        "def pick(x):\n    try:\n        return fast(x)\n    except Exception:\n"
        "        return slow(x)\n\n\ndef keep(x):\n    try:\n        return fast(x)\n"
        "    except Exception as e:\n        raise ValueError(x) from e\n", encoding="utf-8")
    found = _swallowing_handlers((tmp_path / "kernels",), base=tmp_path)
    assert found == {("kernels/_scan_probe_tmp.py", "pick")}


@pytest.mark.parametrize("scheme", [s for s in SCHEMES if s.activation is not None],
                         ids=lambda s: s.name)
def test_a_weight_only_kernel_refuses_an_activation_key_at_prepare(scheme):
    import torch

    from kernels.base import load_kernel

    kernel = load_kernel("dequant-weight-only")
    w = torch.randn(16, 64)
    with pytest.raises(ValueError, match="weight-only and would ignore the activation key"):
        kernel.prepare(w, scheme.contract)


def test_a_layer_logs_its_deviation_once_and_strict_refuses_to_build_it(caplog, monkeypatch):
    import torch
    from torch import nn

    from registry.nn.layers import MXLinear
    from registry.nn.quantize import quantize_model

    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16))
    x = torch.randn(3, 64)
    monkeypatch.setenv(ENV_DISABLED, "dequant-weight-only")
    with caplog.at_level(logging.WARNING, logger="registry.resolve"):
        report = quantize_model(model, "w_mxfp4")
        for _ in range(3):
            model(x)
    msgs = [r.getMessage() for r in caplog.records]
    assert [m.split(":", 1)[0] for m in msgs] == ["0", "2"], msgs
    assert all("dequant-weight-only would run but is disabled" in m for m in msgs)
    assert all(r.deviations and r.deviations[0].startswith("disabled: ") for r in report.rows)
    assert "disabled" in str(report).splitlines()[2]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="registry.resolve"):
        layer = MXLinear(torch.randn(16, 64), "w_mxfp4")  # no name: the scheme names it
    assert [r.getMessage().split(":", 1)[0] for r in caplog.records] == ["MXLinear(w_mxfp4)"]
    monkeypatch.setenv(ENV_STRICT, "1")
    with pytest.raises(ResolutionError, match=r"^layer 0: strict mode: .*disabled: "):
        quantize_model(nn.Sequential(nn.Linear(64, 32)), "w_mxfp4")
    assert layer.resolution.kernel == "reference-emulation"


@pytest.mark.parametrize("value", ["enable", "2", "enabled", "y"])
def test_a_strict_value_it_does_not_know_is_refused_by_every_api(monkeypatch, value):
    """REGISTRY_STRICT=enable once meant 'off': every reader refuses it in one line instead."""
    import torch
    from torch import nn

    from registry.nn.layers import MXLinear
    from registry.nn.quantize import quantize_model
    from kernels.spec.env import SettingError

    monkeypatch.setenv(ENV_STRICT, value)
    want = rf"{ENV_STRICT}='{value}' is not an on/off value; use 1/true/yes/on for on, "
    calls = [lambda: resolve(CATALOG.get("w_mxfp4"), "cpu"),
             lambda: resolve(CATALOG.get("w_mxfp4"), "cpu", strict=True),  # read even then
             lambda: quantize_model(nn.Sequential(nn.Linear(64, 32)), "w_mxfp4"),
             lambda: MXLinear(torch.randn(16, 64), "w_mxfp4")]
    for call in calls:
        with pytest.raises(SettingError, match=want) as e:
            call()
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("value, strict", [("1", True), (" TRUE ", True), ("On", True),
                                           ("yes", True), ("0", False), ("off", False),
                                           ("", False), ("No", False)])
def test_the_documented_strict_values_switch_it(monkeypatch, value, strict):
    monkeypatch.setenv(ENV_STRICT, value)
    scheme = CATALOG.get("w_mxfp6_e3m2_a_mxfp6_e3m2")  # a fallback on cuda:sm100
    if strict:
        with pytest.raises(ResolutionError, match="^strict mode: "):
            resolve(scheme, "cuda:sm100")
    else:
        assert resolve(scheme, "cuda:sm100").fallback
