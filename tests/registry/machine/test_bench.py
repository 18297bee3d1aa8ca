"""`registry bench` and its runner (registry.machine.bench), on the CPU with tiny shapes.

The CLI refuses a machine without a GPU; the tests that go through the CLI's output paths
replace its device check with "cpu" (the runner's API allows it). Times on a CPU are
perf_counter medians and mean nothing: only their shape and arithmetic are checked.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from kernels.base import load_kernel
from kernels.reference.linear import DequantWeightOnlyLinear
from kernels.select.resolve import resolve
from kernels.spec.platform import Platform
from registry import load_schemes
from registry.cli import bench as commands_bench
from registry.machine import bench

from support.cli import FAST, run
from support.device import DEVICE
from support.plugin import install  # noqa: F401 - the fixture that installs the fake plugin

TINY = [(64, 64)]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if the runner starts."""
    def refuse(*a, **kw):
        raise AssertionError("run_bench was called")
    monkeypatch.setattr(bench, "run_bench", refuse)


# --- the CLI's refusals ------------------------------------------------------------------------

def test_refuses_without_gpu_before_any_work(capsys, monkeypatch, no_work):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, err = run(capsys, "bench", "w_mxfp4", "--shapes", "64x64", "--m", "1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("registry bench: error: no GPU: torch.cuda.is_available() is False")
    assert "NVIDIA (CUDA) or AMD (ROCm) GPU" in err and "`device`" in err
    assert f"torch {torch.__version__}" in err


@pytest.mark.parametrize("argv,needle", [
    (["--shapes", "8192"], "--shapes: '8192' is not NxK"),
    (["--shapes", "64x30"], "K=30 is not a multiple of the MX block 32"),
    (["--m", "1,0"], "--m: '0' is not a positive integer"),
    (["--kernels", "triton-fast"], "unknown kernel 'triton-fast'; known kernels: scaled-mm-mx"),
    (["--kernels", ","], "--kernels is empty"),
    (["--out", "/nonexistent-dir/r.json"], "--out /nonexistent-dir/r.json: directory"),
])
def test_bad_arguments_are_usage_errors(capsys, no_work, argv, needle):
    code, out, err = run(capsys, "bench", "w_mxfp4", *argv)
    assert code == 2 and out == ""
    assert err.startswith("registry bench: error: ") and needle in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,needle", [
    (["--m", "abc"], "--m: 'abc' is not a positive integer"),
    (["--m", "1.5"], "--m: '1.5' is not a positive integer"),
    (["--m", "-3"], "--m: '-3' is not a positive integer"),
    (["--m", ""], "--m: '' is not a positive integer"),
    (["--m", "1,,2"], "--m: '' is not a positive integer"),
    (["--m", "16,1,16"], "--m: 16 is given twice"),
    (["--m", "\u0661"], "is not a positive integer"),  # an Arabic-Indic digit: not ASCII
    (["--shapes", ""], "--shapes: '' is not NxK"),
    (["--shapes", "64x64x64"], "--shapes: '64x64x64' is not NxK"),
    (["--shapes=-64x64"], "--shapes: '-64x64' is not NxK"),
    (["--shapes", "-64x64"], "argument --shapes: expected one argument"),  # argparse's
    (["--shapes", "axb"], "--shapes: 'axb' is not NxK"),
    (["--shapes", "0x64"], "--shapes: '0x64': N and K must be positive"),
    (["--shapes", "64x0"], "--shapes: '64x0': N and K must be positive"),
    (["--shapes", "64x100"], "K=100 is not a multiple of the MX block 32; use e.g. 96"),
    (["--shapes", "64x64,64X64"], "--shapes: '64X64' is given twice"),
    (["--kernels", "reference-emulation,reference-emulation"],
     "--kernels: reference-emulation is given twice"),
    (["--kernels", "triton-dot-scaled", "--shapes", "64x96"],
     "--shapes 64x96 does not fit --kernels triton-dot-scaled: in_features 96 is not a "
     "multiple of 64"),
    (["mxfp8", "--kernels", "scaled-mm-mx", "--shapes", "8x128"],
     "--shapes 8x128 does not fit --kernels scaled-mm-mx: out_features 8 is not a multiple "
     "of 16"),
    (["--kernels", "scaled-mm-mx"], "--kernels: scaled-mm-mx implements none of w_mxfp4 (e.g. "
                                    "w_mxfp4: weight-only contract (activation none) not "
                                    "implemented"),
    (["w_mxfp4_a_mxfp4", "--kernels", "dequant-weight-only"],
     "scheme w_mxfp4_a_mxfp4: none of --kernels dequant-weight-only implements it; see "
     "`registry resolve w_mxfp4_a_mxfp4`"),
    (["--out", "/etc/passwd/r.json"], "--out /etc/passwd/r.json: directory /etc/passwd does "
                                      "not exist"),
    (["--out", " "], "--out is empty"),
    (["--plot", "/nonexistent-dir/r.png"], "--plot /nonexistent-dir/r.png: directory"),
    (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
])
def test_more_bad_arguments_are_one_line_usage_errors(capsys, no_work, argv, needle):
    code, out, err = run(capsys, "bench", "w_mxfp4", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("registry") and needle in err, err


def test_output_paths_must_be_writable_files(capsys, no_work, tmp_path, monkeypatch):
    code, _, err = run(capsys, "bench", "w_mxfp4", "--out", str(tmp_path))
    assert code == 2 and err == (f"registry bench: error: --out {tmp_path} is a directory; "
                                 "give a file name inside it\n")
    same = str(tmp_path / "r")
    code, _, err = run(capsys, "bench", "w_mxfp4", "--out", same, "--plot", same)
    assert code == 2 and "--out and --plot name the same file" in err
    real_access = commands_bench.os.access
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(commands_bench.os, "access",  # root may write anywhere: pretend not
                        lambda p, mode: Path(p) != locked and real_access(p, mode))
    code, _, err = run(capsys, "bench", "w_mxfp4", "--out", str(locked / "r.json"))
    assert code == 2 and err == (f"registry bench: error: --out {locked / 'r.json'}: directory "
                                 f"{locked} is not writable; choose another path\n")


def test_no_torch_is_one_line(capsys, no_work, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    code, out, err = run(capsys, "bench", "w_mxfp4", "--shapes", "64x64", "--m", "1")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("registry bench: error: torch does not import (")
    assert "install a CUDA or ROCm build of torch" in err


def test_broken_plugin_is_one_line(capsys, no_work, install):  # noqa: F811
    install("acme-broken", {"raises": "acme_mx_kernels.decls:raises"})
    code, out, err = run(capsys, "bench", "w_mxfp4", "--shapes", "64x64", "--m", "1")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("registry bench: error: kernel plugin acme-broken (entry point raises")


def test_runner_rejects_a_bad_grid():
    for kwargs, needle in [
        ({"shapes": []}, "shapes is empty"),
        ({"shapes": [(64, 64.0)]}, "shape 64x64.0: N and K must be positive ints"),
        ({"shapes": [(64, True)]}, "N and K must be positive ints"),
        ({"shapes": [64]}, "shape 64 is not an (N, K) pair"),
        ({"shapes": [(64, 64), (64, 64)]}, "a shape is given twice"),
        ({"ms": []}, "give positive ints"),
        ({"ms": [1, 1]}, "an M is given twice"),
        ({"kernels": []}, "a non-empty list of kernel names"),
        ({"kernels": "reference-emulation"}, "a non-empty list of kernel names"),
    ]:
        args = {"shapes": TINY, "ms": [1], "kernels": None, **kwargs}
        with pytest.raises(ValueError, match=re.escape(needle)):
            bench.run_bench(["w_mxfp4"], device="cpu", timing=FAST, **args)


def test_runner_refuses_cuda_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device='cuda' but torch.cuda.is_available\(\) is "
                                         "False"):
        bench.run_bench(["w_mxfp4"], TINY, [1], device="cuda", timing=FAST)


def test_unknown_scheme_suggests(capsys, no_work):
    code, _, err = run(capsys, "bench", "w_mxfp44")
    assert code == 2 and "no scheme or alias named 'w_mxfp44'" in err and "w_mxfp4" in err


def test_plot_without_matplotlib_stops_before_the_run(capsys, monkeypatch, tmp_path, no_work):
    monkeypatch.setattr(commands_bench, "gpu_device", lambda: "cpu")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    code, _, err = run(capsys, "bench", "w_mxfp4", "--plot", str(tmp_path / "p.png"))
    assert code == 2
    assert err.strip() == ("registry bench: error: --plot: install matplotlib "
                           f"({commands_bench.PLOT_INSTALL_HINT.split('(', 1)[1]}")
    assert "pip install '" in err and "[plot]'" in err
    assert not (tmp_path / "p.png").exists()


# --- the plan (no torch work) --------------------------------------------------------------

def test_plan_resolves_per_platform_and_lists_skips(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # Triton kernels count as runnable on a CPU
    catalog = load_schemes()
    sm90 = Platform("cuda", "sm90")
    tasks, skips = bench.plan_bench(catalog, ["mxfp4_w4a16", "mxfp4"], [(64, 64), (32, 96)],
                                    [1, 16], None, sm90)
    want = [(name, resolve(catalog.get(name), sm90, shape=shape, act_dtype="bfloat16").kernel,
             shape) for name in ("w_mxfp4", "w_mxfp4_a_mxfp4") for shape in ((64, 64), (32, 96))]
    assert [(t.scheme, t.kernel, (t.n, t.k)) for t in tasks] == want
    assert all(t.ms == (1, 16) and not t.forced for t in tasks) and skips == []
    # the shape reaches resolve: K=96 rules out triton-dot-scaled (K % 64), not K=64
    assert want[0][1] != want[1][1] or want[0][1] != "triton-dot-scaled"
    # the same schemes, named twice (name + alias), with forced kernels on a CPU
    tasks, skips = bench.plan_bench(
        catalog, ["w_mxfp4", "mxfp4_w4a16", "w_mxfp4_a_mxfp4"], [(64, 96)], [1],
        ["dequant-weight-only", "scaled-mm-mx", "triton-dot-scaled"], Platform("cpu"))
    assert [(t.scheme, t.kernel, t.forced) for t in tasks] == [
        ("w_mxfp4", "dequant-weight-only", True)]
    reasons = {(s.scheme, s.kernel): s.reason for s in skips}
    assert "weight-only" in reasons[("w_mxfp4_a_mxfp4", "dequant-weight-only")]
    assert reasons[("w_mxfp4", "scaled-mm-mx")].startswith("does not run on cpu")
    # triton-dot-scaled runs in the interpreter here but needs K % 64 == 0
    assert reasons[("w_mxfp4", "triton-dot-scaled")] == "in_features 96 is not a multiple of 64"
    with pytest.raises(ValueError, match="unknown kernel 'nope'"):
        bench.plan_bench(catalog, None, TINY, [1], ["nope"], Platform("cpu"))


# --- the runner on the CPU -----------------------------------------------------------------

def _check_row_arithmetic(row: bench.BenchRow, copy_tbs: float, device: str = "cpu") -> None:
    assert row.status == "ok" and row.notes == []
    assert row.eager_us > 0 and row.bf16_eager_us > 0
    assert row.ratio_eager == pytest.approx(row.bf16_eager_us / row.eager_us)
    assert row.loop_us > 0 and row.bf16_loop_us > 0
    assert row.ratio_loop == pytest.approx(row.bf16_loop_us / row.loop_us)
    if device == "cpu":  # no graphs: every figure uses the eager time
        assert row.graph_us is None and row.bf16_graph_us is None
        t_us = row.eager_us
        assert row.ratio == row.ratio_eager
    else:
        t_us = row.graph_us
        assert row.ratio == pytest.approx(row.bf16_graph_us / row.graph_us)
    assert row.tflops == pytest.approx(2 * row.m * row.n * row.k / (t_us * 1e-6) / 1e12)
    assert row.tb_s == pytest.approx(row.bytes / (t_us * 1e-6) / 1e12)
    assert row.pct_copy == pytest.approx(100 * row.tb_s / copy_tbs)
    assert 0 <= row.err <= bench.ERR_TOL


def test_runner_rows_resolved_kernels():
    result = bench.run_bench(["w_mxfp4", "mxfp4", "w_mxfp4_a_fp8"], TINY, [1, 3],
                             device="cpu", timing=FAST, command="test")
    catalog = load_schemes()
    got = [(r.scheme, r.kernel, r.m, r.n, r.k, r.forced) for r in result.rows]
    assert got == [(s, resolve(catalog.get(s), "cpu", shape=(64, 64)).kernel, m, 64, 64, False)
                   for s in ("w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8") for m in (1, 3)]
    assert got[0][1] == "dequant-weight-only"  # weight-only on a CPU
    env = result.environment
    assert env["device"] == "cpu" and env["platform"] == "cpu" and env["command"] == "test"
    assert env["torch"] == torch.__version__ and env["copy_tb_s"] > 0
    assert "unavailable" in env["graph_timing"]
    for row in result.rows:
        _check_row_arithmetic(row, env["copy_tb_s"])
        # weight codes (mxfp4: K/2 bytes a row) + scales (K/32) + bf16 x + bf16 out
        assert row.bytes == 64 * (32 + 2) + 2 * row.m * 64 + 2 * row.m * 64
    assert not result.failed and result.skipped == []
    # the same bf16 baseline (same shape, same M) for every scheme of the run
    assert len({(r.m, r.bf16_eager_us) for r in result.rows}) == 2
    json.dumps(result.to_dict(), allow_nan=False)


def test_runner_forced_triton_kernels():
    """In Triton's interpreter on a CPU; on a GPU machine this runs the CUDA paths (graphs)."""
    result = bench.run_bench(["w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp4"], [(32, 128)], [2],
                             ["triton-emulation", "triton-dot-scaled", "dequant-weight-only"],
                             device=DEVICE, timing=FAST)
    got = {(r.scheme, r.kernel) for r in result.rows}
    assert got == {("w_mxfp6_e3m2_a_mxfp6_e3m2", "triton-emulation"),
                   ("w_mxfp4", "triton-emulation"), ("w_mxfp4", "triton-dot-scaled"),
                   ("w_mxfp4", "dequant-weight-only")}
    for row in result.rows:
        _check_row_arithmetic(row, result.environment["copy_tb_s"], DEVICE)
        assert row.forced
        # the route: what the kernel's call planned (triton-emulation, M = 2: the table's row,
        # the interpreter's stand-in config on a CPU), nothing for a kernel with one way to run
        if row.kernel == "triton-emulation":
            kernel = load_kernel("triton-emulation")
            scheme = load_schemes().get(row.scheme)
            x = torch.randn(2, 128).to(torch.bfloat16).to(DEVICE)
            prepared = kernel.prepare(torch.randn(32, 128).to(DEVICE), scheme.contract)
            assert kernel.route(x, prepared) is None  # before a call: no plan yet
            kernel.apply(x, prepared)
            assert row.route == kernel.route(x, prepared) and row.route, row
            assert "QDQ" not in row.route or row.scheme == "w_mxfp6_e3m2_a_mxfp6_e3m2", row
        else:
            assert row.route is None, row
    skipped = {(s.scheme, s.kernel) for s in result.skipped}
    assert skipped == {("w_mxfp6_e3m2_a_mxfp6_e3m2", "triton-dot-scaled"),
                       ("w_mxfp6_e3m2_a_mxfp6_e3m2", "dequant-weight-only")}


def test_a_wrong_kernel_fails_and_is_not_timed(monkeypatch):
    gen = torch.Generator().manual_seed(1)
    scale = 1.02 + 0.03 * torch.rand((), generator=gen).item()  # a small, random mistake
    real = DequantWeightOnlyLinear.apply
    monkeypatch.setattr(DequantWeightOnlyLinear, "apply",
                        lambda self, x, p, bias=None: real(self, x, p, bias).float() * scale)
    result = bench.run_bench(["w_mxfp4", "w_mxfp4_a_mxfp4"], TINY, [5], device="cpu",
                             timing=FAST)
    bad, good = result.rows
    assert (bad.kernel, bad.status) == ("dequant-weight-only", "FAIL")
    assert bad.err == pytest.approx(scale - 1, rel=1e-3) and bad.err > bench.ERR_TOL
    assert bad.eager_us is None and bad.graph_us is None and bad.ratio is None
    assert "differs from reference-emulation" in bad.notes[0] and "not timed" in bad.notes[0]
    assert good.status == "ok" and result.failed == [bad]


def test_nan_output_and_raising_kernels(monkeypatch):
    monkeypatch.setattr(DequantWeightOnlyLinear, "apply",
                        lambda self, x, p, bias=None: torch.full((x.shape[0], p.out_features),
                                                                 float("nan")))
    ref = type(load_kernel("reference-emulation"))

    def broken(self, x, p, bias=None):
        raise RuntimeError("kernel exploded")
    result = bench.run_bench(["w_mxfp4", "w_mxfp4_a_mxfp4"], TINY, [1], device="cpu",
                             timing=FAST)
    nan_row = result.rows[0]
    assert nan_row.status == "FAIL" and nan_row.err is None and "NaN/Inf" in nan_row.notes[0]
    json.dumps(result.to_dict(), allow_nan=False)
    monkeypatch.setattr(ref, "apply", broken)  # the W4A4 kernel here and the check's oracle
    result = bench.run_bench(["w_mxfp4_a_mxfp4"], TINY, [1], device="cpu", timing=FAST)
    (row,) = result.rows
    assert row.status == "ERROR" and row.notes == ["check raised RuntimeError: kernel exploded"]


def test_ratio_falls_back_to_eager_when_the_baseline_has_no_graph():
    row = bench.BenchRow("s", "k", 2, 64, 32, "ok", False, graph_us=10.0, eager_us=20.0,
                         bytes=1000)
    bench._fill_figures(row, (None, 0.030, "graph capture failed: X"), copy_tbs=1.0)
    assert row.ratio == pytest.approx(30.0 / 20.0) and row.bf16_graph_us is None
    assert row.notes == ["bf16 baseline: graph capture failed: X"]
    row = bench.BenchRow("s", "k", 2, 64, 32, "ok", False, graph_us=10.0, eager_us=20.0,
                         bytes=1000)
    bench._fill_figures(row, (0.005, 0.030, None), copy_tbs=1.0)
    assert row.ratio == pytest.approx(0.5) and row.ratio_eager == pytest.approx(1.5)
    assert row.tb_s == pytest.approx(1000 / 10e-6 / 1e12)


def test_timing_rejects_empty_sizes():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="copy_bandwidth: nbytes="):
            bench.copy_bandwidth("cpu", bad)
    with pytest.raises(ValueError, match="weight_bytes=0"):
        bench._copies_needed(0, "cpu")
    assert bench.copy_bandwidth("cpu", 1 << 12) > 0 and bench._copies_needed(10, "cpu") == 1


def test_median_ms_cpu_rule():
    calls = []
    ms = bench.median_ms(lambda: calls.append(1), "cpu", cpu_calls=5)
    assert len(calls) == 6 and ms >= 0  # one warm-up, five timed


def test_loop_rule_times_calls_back_to_back(monkeypatch):
    """timing.loop_ms's CUDA branch with its CUDA calls replaced (1 ms a call): each timed run
    is a sync, an event, n >= 10 calls with no sync between them, an event; the figure is
    elapsed / n, the median over the runs."""
    from registry.machine import timing

    log = []

    class Event:
        def __init__(self, **kw):
            self.at = 0

        def record(self):
            log.append("e")
            self.at = log.count("c")

        def elapsed_time(self, other):
            return float(other.at - self.at)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("s"))
    assert timing.loop_ms(lambda: log.append("c"), "cuda", 2, 30, 3) == 1.0
    runs = "".join(log).split("se")[-3:]  # the three timed runs
    assert all(r.rstrip("s").rstrip("e") == "c" * len(r.rstrip("s").rstrip("e")) for r in runs)
    assert all(len(r.rstrip("s").rstrip("e")) >= 10 for r in runs)


def test_loop_cycles_the_weight_copies():
    seen = []
    assert bench._time_loop(["w0", "w1", "w2"], seen.append, "cpu", FAST) >= 0
    assert seen == ["w0", "w1", "w2", "w0"][:len(seen)] and len(seen) == 1 + FAST.cpu_calls


# --- the CLI's outputs (device check replaced by "cpu") ------------------------------------

def test_graph_capture_failure_is_a_note_not_silence(monkeypatch):
    """The CUDA branch with its CUDA calls replaced: a capture error lands in the row's note."""
    def capture_fails(*a, **kw):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(bench, "_is_cuda", lambda device: True)
    monkeypatch.setattr(bench, "median_ms", lambda *a, **kw: 0.25)
    monkeypatch.setattr(bench, "graph_ms", capture_fails)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    graph, eager, note = bench._time_both([1, 2], lambda op: op, "cuda", FAST)
    assert graph is None and eager == 0.25
    assert note == ("graph capture failed: RuntimeError: operation not permitted when stream "
                    "is capturing")
    monkeypatch.setattr(bench, "graph_ms", lambda fn, *a: 0.5)  # two copies per replay
    assert bench._time_both([1, 2], lambda op: op, "cuda", FAST) == (0.25, 0.25, None)
