"""`registry doctor` and the probe record `registry lint --probe` writes for it.

Every test points REGISTRY_CACHE_DIR at a fresh temporary directory. Probes are restricted to
one or two kernels and schemes (`lint --probe --kernels K PATH...`) to stay fast; torch / triton
are made absent by putting None in sys.modules (in a subprocess where the kernels' modules must
be imported afresh).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.plugin import install  # noqa: F401 - the fixture that installs the fake plugin

from kernels.select.kernel_table import kernel_table
from kernels.spec.platform import Platform
from registry.cli import main
from registry.machine.probe import ENV_CACHE_DIR, cache_dir, record_path, runtime_versions

from support.paths import REPO
W4, W4A4 = "schemes/w_mxfp4.yaml", "schemes/w_mxfp4_a_mxfp4.yaml"
CPU = Platform("cpu")


@pytest.fixture(autouse=True)
def cpu_host(monkeypatch):
    """Doctor as a CPU-only host sees it, on any machine (a GPU host too): platform detection
    answers cpu, so the probe runs on the CPU and the kernel table is the cpu one."""
    import kernels.spec.platform
    import registry.machine.doctor
    import registry.machine.probe

    def detect_cpu() -> Platform:
        import torch  # noqa: F401 - detection needs torch, as the real one does

        return CPU

    for module in (kernels.spec.platform, registry.machine.doctor, registry.machine.probe):
        monkeypatch.setattr(module, "detect", detect_cpu)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh record cache, the repository as cwd, no stray REGISTRY_* settings."""
    d = tmp_path / "cache"
    monkeypatch.setenv(ENV_CACHE_DIR, str(d))
    monkeypatch.chdir(REPO)
    for name in ("REGISTRY_SCHEMES_PATH", "REGISTRY_DISABLED_KERNELS", "REGISTRY_STRICT",
                 "REGISTRY_DISABLE_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    return d


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def doctor_json(capsys, *extra: str) -> tuple[int, dict]:
    code, out, err = run(capsys, "doctor", "--json", *extra)
    assert "Traceback" not in out + err
    return code, json.loads(out)


def probe(capsys, kernels: str, *paths: str) -> tuple[int, str, str]:
    return run(capsys, "lint", "--probe", "--kernels", kernels, *paths)


def by_kind() -> dict[str, str]:
    """Every kernel of the table -> its kind, in doctor's order: linear, moe, qdq."""
    from kernels.select.declarations import KINDS

    entries = sorted(kernel_table().entries, key=lambda e: KINDS.index(e.decl.kind))
    return {e.decl.name: e.decl.kind for e in entries}


def kernel_row(data: dict, name: str) -> dict:
    return next(k for k in data["kernels"] if k["name"] == name)


# --- where the record lives -----------------------------------------------------------------------

def test_cache_dir_order(tmp_path):
    assert cache_dir({ENV_CACHE_DIR: str(tmp_path / "a"), "XDG_CACHE_HOME": "/x"}) == \
        tmp_path / "a"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "registry"
    assert cache_dir({ENV_CACHE_DIR: " ", "XDG_CACHE_HOME": ""}) == \
        Path.home() / ".cache" / "registry"
    assert record_path(Platform("cuda", "sm90"), {ENV_CACHE_DIR: "/c"}) == \
        Path("/c/probe-cuda-sm90.json")


# --- the report without a record ------------------------------------------------------------------

def test_text_report_fields(capsys, cache):
    code, out, err = run(capsys, "doctor")
    assert code == 0 and err == ""
    lines = out.splitlines()
    env = {line.split()[0]: line.split(None, 1)[1] for line in lines[3:] if line.startswith("  ")
           and not line.startswith("  kernel ") and len(line.split()) > 1}
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert env["torch"] == torch.__version__
    assert env["platform"] == "cpu (detected)" and env["registry"] == runtime_versions()["registry"]
    assert env["REGISTRY_CACHE_DIR"].startswith(repr(str(cache)))
    assert env["REGISTRY_STRICT"].startswith("unset")
    if torch.cuda.is_available():  # the GPU is a fact of the host, whatever the platform view
        assert env["GPU"] == torch.cuda.get_device_name(0)
    else:
        assert env["GPU"].startswith("none: torch.cuda.is_available() is False")
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["kernel", "kind"])
    assert lines[head].split() == ["kernel", "kind", "source", "listed", "runs", "here", "mode",
                                   "verified", "probed", "here", "note"]
    rows = {line.split()[0]: line.split() for line in lines[head + 1:head + 1 +
                                                             len(kernel_table().entries)]}
    assert list(rows) == list(by_kind())  # every kernel, grouped by kind
    assert rows["dequant-weight-only"][1:8] == ["linear", "built-in", "yes", "yes", "emulated",
                                                "yes", "not"]
    assert rows["scaled-mm-mx"][3:6] == ["no", "NO", "-"]
    # each kind's kernels that run here: the reference ones are listed for cpu, of their kind
    assert rows["reference-moe"][1:6] == ["moe", "built-in", "yes", "yes", "emulated"]
    assert rows["reference-qdq"][1:6] == ["qdq", "built-in", "yes", "yes", "emulated"]
    assert rows["triton-qdq"][1:4] == ["qdq", "built-in", "no"]
    assert " ".join(rows["scaled-mm-mx"]).endswith("does not run on cpu (runs on cuda:sm100+)")
    assert f"probe record: {cache / 'probe-cpu.json'}" in lines
    assert "  not probed: run `registry lint --probe`" in lines
    assert lines[-1] == ("verdict: healthy: every kernel listed for cpu (linear 2, moe 1, qdq 1) "
                         "can run here; not probed here (run `registry lint --probe`)")


def test_json_report_fields(capsys, monkeypatch):
    monkeypatch.setenv("REGISTRY_DISABLED_KERNELS", "dequant-weight-only")
    code, data = doctor_json(capsys)
    assert code == 0 and data["healthy"] and data["problems"] == []
    assert set(data) == {"environment", "kernels", "probe_record", "plugins", "problems",
                         "warnings", "healthy", "verdict"}
    env = data["environment"]
    for key in ("python", "registry", "torch", "triton", "cuda", "hip", "gpu", "driver",
                "settings", "platform", "platform_how", "schemes"):
        assert key in env
    assert env["torch"] == torch.__version__ and env["torch_error"] is None
    assert env["settings"]["REGISTRY_DISABLED_KERNELS"] == "dequant-weight-only"
    assert [k["name"] for k in data["kernels"]] == list(by_kind())
    assert [k["kind"] for k in data["kernels"]] == list(by_kind().values())
    dq = kernel_row(data, "dequant-weight-only")
    assert dq == {"name": "dequant-weight-only", "kind": "linear", "source": "built-in",
                  "listed": True,
                  "disabled": True, "runs_here": True, "reason": "", "native": False,
                  "verified_on": ["cpu", "cuda:sm90"], "verified_here": True, "probed": None}
    fp8 = kernel_row(data, "triton-fp8-mma")
    assert not fp8["listed"] and not fp8["verified_here"] and fp8["verified_on"] == ["cuda:sm90"]
    # conftest sets TRITON_INTERPRET=1 on a machine without a GPU: Triton kernels run here
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert fp8["runs_here"] and "interpreter" in fp8["reason"]
    else:  # a GPU host read as a CPU host: compiled Triton needs the GPU
        assert not fp8["runs_here"] and fp8["reason"].startswith("does not run on cpu")
    assert data["probe_record"]["found"] is False
    assert data["verdict"].startswith("healthy")


def test_unknown_disabled_kernel_is_a_problem(capsys, monkeypatch):
    monkeypatch.setenv("REGISTRY_DISABLED_KERNELS", "triton-emulaton")
    code, out, _ = run(capsys, "doctor")
    assert code == 1
    assert "  - REGISTRY_DISABLED_KERNELS names unknown kernel(s) 'triton-emulaton': every " \
           "resolve refuses" in out
    assert out.splitlines()[-1] == "verdict: NOT HEALTHY: 1 problem(s) on cpu (listed above)"


# --- the record: written by lint --probe, read by doctor ------------------------------------------

def test_lint_probe_records_and_doctor_reads_it(capsys, cache):
    code, out, err = probe(capsys, "reference-emulation", W4, W4A4)
    path = cache / "probe-cpu.json"
    assert code == 0 and out == ""
    assert f"probe: recorded in {path} (read by `registry doctor`)" in err
    record = json.loads(path.read_text())
    assert record["platform"] == "cpu" and record["versions"] == runtime_versions()
    assert [(p["scheme"], p["kernel"], p["ok"], p["message"]) for p in record["pairs"]] == [
        ("w_mxfp4", "reference-emulation", True, "ok"),
        ("w_mxfp4_a_mxfp4", "reference-emulation", True, "ok")]

    # a second, restricted run adds its pairs to a record made with the same versions
    code, out, _ = run(capsys, "lint", "--probe", "--json", "--kernels", "dequant-weight-only",
                       W4, W4A4)
    assert code == 0 and json.loads(out)["probe_record"] == str(path)
    pairs = {(p["scheme"], p["kernel"]) for p in json.loads(path.read_text())["pairs"]}
    assert pairs == {("w_mxfp4", "reference-emulation"), ("w_mxfp4_a_mxfp4", "reference-emulation"),
                     ("w_mxfp4", "dequant-weight-only")}  # W4A4 is not weight-only

    code, data = doctor_json(capsys)
    assert code == 0 and data["warnings"] == []
    rec = data["probe_record"]
    assert rec["found"] and (rec["ok"], rec["total"]) == (3, 3) and rec["stale"] == []
    assert rec["date"] == json.loads(path.read_text())["date"]
    assert kernel_row(data, "reference-emulation")["probed"] == {"ok": 2, "total": 2,
                                                                 "failed": []}
    assert kernel_row(data, "dequant-weight-only")["probed"]["total"] == 1
    assert kernel_row(data, "triton-emulation")["probed"] is None
    code, out, _ = run(capsys, "doctor")
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("  reference-emulation"))
    assert "2/2 ok" in line
    assert f"3/3 (scheme, kernel) pairs ok, with torch {torch.__version__}" in out
    assert out.splitlines()[-1].endswith("recorded probe 3/3 pairs ok")


def test_no_record_flag_and_probe_options_are_checked(capsys, cache):
    code, _, err = run(capsys, "lint", "--probe", "--no-record", "--kernels",
                       "reference-emulation", W4)
    assert code == 0 and not cache.exists() and "recorded" not in err
    for argv, needle in [
        (["lint", "--no-record"], "--kernels / --no-record go with --probe"),
        (["lint", "--kernels", "reference-emulation"], "--kernels / --no-record go with --probe"),
        (["lint", "--probe", "--kernels", "nope"], "--kernels: unknown kernel 'nope'"),
        (["lint", "--probe", "--kernels", "scaled-mm-mx"],
         "--kernels: scaled-mm-mx does not run on cpu; kernels that run here: "),
        (["lint", "--probe", "--kernels", " , "], "--kernels is empty"),
    ]:
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and needle in err, err
    assert not cache.exists()


def test_stale_record_warns(capsys, cache):
    assert probe(capsys, "reference-emulation", W4)[0] == 0
    path = cache / "probe-cpu.json"
    record = json.loads(path.read_text())
    record["versions"]["torch"] = "1.0.0"
    record["versions"]["triton"] = None
    path.write_text(json.dumps(record))
    code, data = doctor_json(capsys)
    assert code == 0 and data["healthy"]  # a warning, not a problem
    assert data["probe_record"]["stale"] == [f"torch 1.0.0 -> {torch.__version__}",
                                             f"triton none -> {runtime_versions()['triton']}"]
    assert data["warnings"] == [f"the recorded probe ran with other versions (torch 1.0.0 -> "
                                f"{torch.__version__}; triton none -> "
                                f"{runtime_versions()['triton']}): run `registry lint --probe` "
                                "again"]
    code, out, _ = run(capsys, "doctor")
    assert f"  - the recorded probe ran with other versions (torch 1.0.0 -> {torch.__version__}" \
        in out.splitlines()[out.splitlines().index("warnings:") + 1]
    assert out.splitlines()[-1].endswith("; 1 warning(s)")
    # the next probe replaces a record made with other versions (no merge)
    assert probe(capsys, "dequant-weight-only", W4)[0] == 0
    record = json.loads(path.read_text())
    assert record["versions"] == runtime_versions()
    assert [p["kernel"] for p in record["pairs"]] == ["dequant-weight-only"]


def test_failed_recorded_probe_exits_1(capsys, cache):
    assert probe(capsys, "reference-emulation", W4, W4A4)[0] == 0
    path = cache / "probe-cpu.json"
    record = json.loads(path.read_text())
    record["pairs"][1].update(ok=False, message="output differs from the reference emulation")
    path.write_text(json.dumps(record))
    code, data = doctor_json(capsys)
    assert code == 1 and not data["healthy"]
    assert data["problems"] == [f"recorded probe ({record['date']}) failed: w_mxfp4_a_mxfp4 / "
                                "reference-emulation: output differs from the reference emulation"]
    assert kernel_row(data, "reference-emulation")["probed"]["failed"] == [
        "w_mxfp4_a_mxfp4: output differs from the reference emulation"]
    code, out, _ = run(capsys, "doctor")
    assert code == 1 and "1/2 ok, 1 FAILED" in out


def test_unreadable_record_is_a_warning(capsys, cache):
    cache.mkdir()
    (cache / "probe-cpu.json").write_text("{not json")
    code, data = doctor_json(capsys)
    assert code == 0 and not data["probe_record"]["found"]
    assert len(data["warnings"]) == 1 and "is unreadable (JSONDecodeError" in data["warnings"][0]
    (cache / "probe-cpu.json").write_text(json.dumps({"pairs": "x"}))
    code, data = doctor_json(capsys)
    assert "is not a format-1 probe record" in data["warnings"][0]


def test_unwritable_cache_warns_in_one_line(capsys, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(ENV_CACHE_DIR, str(blocker / "cache"))  # under a file: mkdir fails
    code, out, err = probe(capsys, "reference-emulation", W4)
    assert code == 0 and out == ""
    warning = [line for line in err.splitlines() if "warning" in line]
    assert warning == [line for line in err.splitlines() if line.startswith("registry lint: ")]
    assert len(warning) == 1 and warning[0].startswith(
        f"registry lint: warning: could not record the probe in "
        f"{blocker / 'cache' / 'probe-cpu.json'}: ")
    assert warning[0].endswith("set REGISTRY_CACHE_DIR to a writable directory or pass "
                               "--no-record")
    code, out, err = run(capsys, "lint", "--probe", "--json", "--kernels", "reference-emulation",
                         W4)
    assert code == 0 and json.loads(out)["probe_record"] is None and "warning" in err


def test_doctor_probe_runs_and_records(capsys, cache, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the torch kernels only: fast
    code, out, err = run(capsys, "doctor", "--probe")
    assert code == 0
    from registry.machine.probe import record_path
    from kernels.spec.platform import detect

    n = len(json.loads(record_path(detect()).read_text())["pairs"])
    assert n > 10 and f"probe: {n} of {n} (scheme, kernel) pairs verified" in err
    assert out.splitlines()[-1].endswith(f"recorded probe {n}/{n} pairs ok")


# --- plugins --------------------------------------------------------------------------------------

def test_plugin_kernels_are_listed_with_their_source(capsys, install):  # noqa: F811
    install("acme-mx-kernels", {"acme": "acme_mx_kernels.decls:kernels"})
    code, data = doctor_json(capsys)
    assert code == 0
    row = kernel_row(data, "acme-weight-only")
    assert row["source"] == "plugin acme-mx-kernels (entry point acme)"
    assert row["listed"] and row["runs_here"]
    from kernels.spec.platform import detect

    first = kernel_row(data, "acme-first")  # declared for cuda:* only
    if detect().vendor == "cuda":
        assert first["listed"] and first["runs_here"]
    else:
        assert first["reason"] == f"does not run on {detect()} (runs on cuda:*)"
    assert "acme-mx-kernels (entry point acme)" in data["plugins"]


def test_broken_plugin_is_one_problem_line(capsys, install):  # noqa: F811
    install("acme-broken", {"fine": "acme_mx_kernels.decls:ACME_WEIGHT_ONLY",
                            "missing": "acme_mx_kernels.nowhere:KERNELS"})
    code, out, err = run(capsys, "doctor")
    assert code == 1 and "Traceback" not in out + err
    problems = [line for line in out.splitlines() if line.startswith("  - ")]
    assert len(problems) == 1
    assert problems[0].startswith("  - kernel plugin acme-broken (entry point missing = "
                                  "acme_mx_kernels.nowhere:KERNELS): cannot import it: "
                                  "ModuleNotFoundError")
    assert "acme-broken (entry point missing) BROKEN" in out
    code, data = doctor_json(capsys)
    assert code == 1 and len(data["problems"]) == 1
    assert kernel_row(data, "acme-weight-only")["source"] == \
        "plugin acme-broken (entry point fine)"
    assert all(not k["runs_here"] for k in data["kernels"])
    code, _, err = run(capsys, "doctor", "--probe")  # the probe is refused, not a traceback
    assert code == 1 and "Traceback" not in err


# --- no torch, no triton --------------------------------------------------------------------------

def test_no_torch_in_process(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    code, data = doctor_json(capsys)
    env = data["environment"]
    assert code == 1 and env["torch"] is None and "torch" in env["torch_error"]
    assert env["platform"] == "cpu" and env["platform_how"] == "assumed: torch is not installed"
    assert env["gpu_note"] == "unknown: torch is not installed"
    assert kernel_row(data, "reference-emulation")["reason"] == "torch is not installed"
    assert data["problems"] == [f"torch does not import ({env['torch_error']}): every kernel "
                                "needs torch: nothing can run (pip install torch)"]
    code, _, err = run(capsys, "doctor", "--probe")
    assert code == 1 and "Traceback" not in err
    code, out, err = run(capsys, "doctor")
    torch_line = next(line for line in out.splitlines() if line.startswith("  torch "))
    assert torch_line.split(None, 1)[1].startswith("NOT INSTALLED (")


def _doctor_subprocess(blocked: str, cache: Path, setup: str = "") -> tuple[int, dict, str]:
    code = (f"import sys; sys.modules[{blocked!r}] = None\n{setup}\n"
            "from registry.cli import main\nrc = main(['doctor', '--json'])\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton') "
            "and sys.modules[m] is not None)\nprint(json.dumps(bad), file=sys.stderr)\n"
            "sys.exit(rc)")
    env = {**__import__("os").environ, ENV_CACHE_DIR: str(cache)}
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                         text=True, cwd=REPO, env=env, timeout=120)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout), out.stderr


def test_no_torch_in_a_fresh_process(cache):
    rc, data, err = _doctor_subprocess("torch", cache)
    imported = json.loads(err.splitlines()[-1])
    assert rc == 1 and not [m for m in imported if m.split(".")[0] == "torch"]
    assert data["environment"]["torch"] is None
    assert "torch" in data["problems"][0]


def test_no_triton_on_a_gpu_platform(cache):
    """What-if cuda:sm90 without triton: the triton-* kernels are listed and cannot run."""
    setup = ("import registry.machine.doctor as d\nfrom kernels.spec.platform import Platform\n"
             "d.detect = lambda: Platform('cuda', 'sm90')")
    rc, data, _ = _doctor_subprocess("triton", cache, setup)
    env = data["environment"]
    assert rc == 1 and env["triton"] is None and env["platform"] == "cuda:sm90"
    assert "the triton-* kernels cannot run" in env["triton_missing_means"]
    row = kernel_row(data, "triton-emulation")
    assert row["listed"] and not row["runs_here"]
    assert row["reason"] == "needs triton, which is not installed"
    assert row["verified_here"]  # declared verified on cuda:sm90
    assert "triton-emulation is listed for cuda:sm90 but cannot run here: needs triton, which " \
           "is not installed" in data["problems"]
    assert kernel_row(data, "dequant-weight-only")["runs_here"]
    assert data["environment"]["probe_record_path"] == str(cache / "probe-cuda-sm90.json")
