"""`registry bench`'s output on the CPU: the table, progress lines, JSON / plot files, exit codes,
and the tools/ scripts that share its runner (the runner itself: test_bench.py)."""
from __future__ import annotations

import io
import json

from kernels.reference.linear import DequantWeightOnlyLinear
from registry.cli import bench as commands_bench
from registry.cli import bench_plot
from registry.machine import bench

from support.cli import FAST, run
from support.paths import TOOLS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_cli_table_and_progress_lines(capsys, on_cpu):
    code, out, err = run(capsys, "bench", "w_mxfp4", "mxfp4", "--shapes", "64x64", "--m", "1,2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("# registry bench on cpu (cpu), torch ")
    head = next(i for i, line in enumerate(lines) if line.startswith("scheme "))
    assert lines[head].split() == ["scheme", "kernel", "M", "N", "x", "K", "graph", "us",
                                   "eager", "us", "loop", "us", "bf16", "us", "x", "bf16",
                                   "TFLOP/s", "TB/s", "%", "copy", "check", "err", "status",
                                   "route"]
    body = [line.split() for line in lines[head + 1: head + 5]]
    assert [(c[0], c[1], c[2], c[3], c[4], c[-2], c[-1]) for c in body] == [
        ("w_mxfp4", "dequant-weight-only", "1", "64x64", "-", "ok", "-"),  # (one way to run)
        ("w_mxfp4", "dequant-weight-only", "2", "64x64", "-", "ok", "-"),
        ("w_mxfp4_a_mxfp4", "reference-emulation", "1", "64x64", "-", "ok", "-"),
        ("w_mxfp4_a_mxfp4", "reference-emulation", "2", "64x64", "-", "ok", "-")]
    # stderr is not a terminal here: one line per finished row
    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert progress[0].startswith("[1/4] w_mxfp4 64x64 M=1 dequant-weight-only: ok (")
    assert progress[3].startswith("[4/4] w_mxfp4_a_mxfp4 64x64 M=2 reference-emulation: ok")
    code, _, err = run(capsys, "bench", "w_mxfp4", "--shapes", "64x64", "--m", "1", "--quiet")
    assert code == 0 and "[1/1]" not in err
    # scheme names are not scheme directories (the global --schemes DIR option): no warnings
    assert "warning" not in err and "directory" not in err


def test_cli_json_out_and_plot(capsys, on_cpu, tmp_path):
    out_file, png = tmp_path / "r.json", tmp_path / "r.png"
    code, out, _ = run(capsys, "bench", "w_mxfp4", "w_mxint8_a_mxint8", "--shapes",
                       "64x64,32x128", "--m", "1", "--json", "--quiet", "--kernels",
                       "dequant-weight-only,reference-emulation", "--out", str(out_file),
                       "--plot", str(png))
    assert code == 0
    data = json.loads(out)
    assert data == json.loads(out_file.read_text())
    assert set(data) == {"environment", "rows", "skipped"}
    env = data["environment"]
    for key in ("device", "capability", "torch", "triton", "cuda", "driver", "date",
                "copy_tb_s", "command", "platform"):
        assert key in env
    assert env["command"] == ("registry bench w_mxfp4 w_mxint8_a_mxint8 --shapes "
                              "64x64,32x128 --m 1 --seed 0 --kernels "
                              "dequant-weight-only,reference-emulation")
    assert [(r["scheme"], r["kernel"], r["n"]) for r in data["rows"]] == [
        ("w_mxfp4", "dequant-weight-only", 64), ("w_mxfp4", "reference-emulation", 64),
        ("w_mxfp4", "dequant-weight-only", 32), ("w_mxfp4", "reference-emulation", 32),
        ("w_mxint8_a_mxint8", "reference-emulation", 64),
        ("w_mxint8_a_mxint8", "reference-emulation", 32)]
    assert [(s["scheme"], s["kernel"], s["shape"]) for s in data["skipped"]] == [
        ("w_mxint8_a_mxint8", "dequant-weight-only", "64x64"),
        ("w_mxint8_a_mxint8", "dequant-weight-only", "32x128")]
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000


def test_cli_failed_row_exits_1(capsys, on_cpu, monkeypatch):
    real = DequantWeightOnlyLinear.apply
    monkeypatch.setattr(DequantWeightOnlyLinear, "apply",
                        lambda self, x, p, bias=None: -real(self, x, p, bias))
    code, out, _ = run(capsys, "bench", "w_mxfp4", "--shapes", "64x64", "--m", "1", "--quiet")
    assert code == 1
    row = next(line for line in out.splitlines() if line.startswith("w_mxfp4 "))
    assert row.split()[-3:] == ["2.0e+00", "FAIL", "-"]  # -out: err 2 exactly; route: none
    assert "1 row(s) FAILED or raised" in out and "not timed" in out


def test_progress_line_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True
    stream = Tty()
    line = commands_bench.ProgressLine(stream)
    task = bench.Task("w_mxfp4", "triton-dot-scaled", 8192, 8192, (1, 16), False)
    line("start", 11, 90, (task, 16))
    line("row", 11, 90, bench.BenchRow("w_mxfp4", "k", 16, 8192, 8192, "ok", False))
    line.close()
    assert stream.getvalue() == ("\r\x1b[K[12/90] w_mxfp4 8192x8192 M=16 triton-dot-scaled"
                                 "\r\x1b[K")
    quiet = Tty()
    commands_bench.ProgressLine(quiet, quiet=True)("start", 0, 1, (task, 1))
    assert quiet.getvalue() == ""


# --- the tools/ scripts use the same runner and timing rule ----------------------------------

def test_tools_use_registry_bench(monkeypatch, capsys, tmp_path):
    monkeypatch.syspath_prepend(str(TOOLS))
    import bench_linear
    import timing

    assert timing.median_ms is bench.median_ms
    monkeypatch.setattr(bench_linear, "runnable_here",
                        lambda plat: ["dequant-weight-only", "reference-emulation"])
    real = bench.run_bench
    monkeypatch.setattr(bench, "run_bench", lambda *a, **kw: real(*a, **dict(kw, timing=FAST)))
    code = bench_linear.main(["--quick", "--shape", "64x64", "--m", "1", "--out",
                              str(tmp_path / "l.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "| w_mxfp4 | dequant-weight-only | 64x64 | 1 | 0.0e+00 |" in out
    assert "not run: w_mxfp4_a_mxfp4 dequant-weight-only 64x64:" in out
    rows = json.loads((tmp_path / "l.json").read_text())["rows"]
    assert {(r["scheme"], r["kernel"]) for r in rows} == {
        ("w_mxfp4", "dequant-weight-only"), ("w_mxfp4", "reference-emulation"),
        ("w_mxfp4_a_mxfp4", "reference-emulation"),
        ("w_mxfp4_a_mxfp6_e3m2", "reference-emulation")}


def test_cli_nothing_ran_exits_1(capsys, on_cpu):
    code, out, err = run(capsys, "bench", "mxfp8", "--shapes", "64x128", "--m", "1",
                         "--kernels", "scaled-mm-mx", "--quiet")
    assert code == 1
    assert "(no rows: nothing to run, see skipped)" in out
    assert ("w_mxfp8_e4m3_a_mxfp8_e4m3 scaled-mm-mx (64x128): does not run on cpu (runs on "
            "cuda:sm100+)") in out
    assert "registry bench: nothing ran" in err


def test_plot_legend_sits_below_the_panels(monkeypatch, tmp_path):
    """Six series on three shapes (the 2026-12-07 H100 run): the legend, one column at that
    width, once covered the last panel's M labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figures = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda self, *a, **kw: (figures.append(self), real(self, *a, **kw)))
    ms = (1, 16, 64, 128, 1024, 4096)
    for schemes, shapes in ((6, ((64, 64), (128, 64), (64, 128))), (1, ((64, 64),)),
                            (14, ((64, 64), (128, 64)))):
        rows = [dict(scheme=f"w_scheme_number_{j}", kernel="triton-emulation", n=n, k=k, m=m,
                     ratio=1.0 + j / 10, status="ok")
                for j in range(schemes) for n, k in shapes for m in ms]
        env = {"device": "d", "platform": "p", "torch": "t", "date": "today"}
        bench_plot.plot_results({"rows": rows, "environment": env}, str(tmp_path / "p.png"))
        fig = figures.pop()
        renderer = FigureCanvasAgg(fig).get_renderer()
        legend_top = fig.legends[0].get_window_extent(renderer).y1
        lowest = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)
        assert lowest > legend_top, (schemes, len(shapes), lowest, legend_top)
