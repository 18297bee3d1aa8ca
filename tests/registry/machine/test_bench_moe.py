"""`registry bench --moe` (registry.machine.bench_moe, registry.cli.bench_moe): the shapes'
parser, the runner on a CPU (Triton in the interpreter: device='cpu' checks the logic only),
its check before timing, and the CLI's refusals before any work."""
from __future__ import annotations

import json

import pytest
import torch

from kernels.reference.moe import route
from registry.cli import bench as commands_bench
from registry.machine import bench, bench_moe
from registry.machine.bench_moe import MoeShape
from support.cli import FAST, run
from support.device import DEVICE

TINY = [MoeShape(4, 2, 64, 64)]


def test_moe_shapes_parse_and_bad_ones_name_the_item() -> None:
    assert bench_moe.parse_moe_shapes("8:2:2048x2048, 64:6:2048X7168") == [
        MoeShape(8, 2, 2048, 2048), MoeShape(64, 6, 2048, 7168)]
    assert [str(s) for s in bench_moe.DEFAULT_MOE_SHAPES] == [
        "8:2:2048x2048", "32:4:2880x2880", "64:6:2048x7168"]
    for text, needle in (("8:2", "'8:2' is not E:TOPK:NxK"), ("8:2:2048", "is not E:TOPK:NxK"),
                         ("a:2:64x64", "is not E:TOPK:NxK"), ("8:-2:64x64", "is not"),
                         ("8:9:64x64", "1 <= top-k <= experts"), ("0:1:64x64", "experts >= 1"),
                         ("8:2:64x48", "multiple of 32"), ("8:2:0x64", "N >= 1"),
                         ("8:2:64x64,8:2:64x64", "8:2:64x64 is given twice"),
                         ("8:2:６4x64", "is not E:TOPK:NxK")):
        with pytest.raises(ValueError, match=needle):
            bench_moe.parse_moe_shapes(text)


def test_the_bf16_baseline_is_the_routed_experts_sum() -> None:
    gen = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 64, generator=gen), torch.randn(4, 32, 64, generator=gen)
    ids, weights = route(torch.randn(5, 4, generator=gen), 2)
    want = torch.stack([sum(weights[t, j] * (w[ids[t, j]] @ x[t]) for j in range(2))
                        for t in range(5)])
    assert torch.allclose(bench_moe.bf16_grouped(x, w, ids, weights), want, atol=1e-4)
    if DEVICE == "cuda" and hasattr(torch, "_grouped_mm"):  # the grouped GEMM path, in bf16
        xb, wb = x.bfloat16(), w.bfloat16()
        got = bench_moe.bf16_grouped(xb.cuda(), wb.cuda(), ids.cuda(), weights.cuda())
        want_b = torch.stack([sum(weights[t, j] * (wb[ids[t, j]].float() @ xb[t].float())
                                  for j in range(2)) for t in range(5)])
        # bf16 products rounded once per expert and once after the fp32 combine: a few of
        # bf16's 2^-9 of the largest output; a wrong routing misses by the outputs' size (~10)
        err = (got.float().cpu() - want_b).abs().max()
        assert err <= 2 ** -7 * want_b.abs().max(), f"{err} against {want_b.abs().max()}"


def test_the_runner_checks_then_times_each_scheme_shape_and_tokens() -> None:
    """The Triton MoE kernel (the interpreter on a CPU; on a GPU machine its CUDA path, with
    graphs where the call captures) against the reference backend, then timed beside bf16."""
    result = bench_moe.run_moe_bench(["w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_fp8"], TINY,
                                     [1, 3], device=DEVICE, timing=FAST, command="t",
                                     backend="triton")
    got = [(r.scheme, r.kernel, r.qdq, r.tokens, r.status) for r in result.rows]
    assert got == [(s, "triton-moe", q, t, "ok") for s, q in (
        ("w_mxfp4", None), ("w_mxfp4_a_mxfp4", "triton-qdq"), ("w_mxfp4_a_fp8", "triton-qdq"))
        for t in (1, 3)]
    for r in result.rows:
        assert r.err is not None and r.err <= bench.ERR_TOL
        assert r.eager_us > 0 and r.bf16_eager_us > 0
        if DEVICE == "cpu":
            assert r.graph_us is None and r.bf16_graph_us is None  # (no graphs on a CPU)
        graphs = r.graph_us is not None and r.bf16_graph_us is not None
        assert r.ratio == pytest.approx(r.bf16_graph_us / r.graph_us if graphs else
                                        r.bf16_eager_us / r.eager_us)
    env = result.environment
    assert env["kind"] == "moe" and env["command"] == "t" and not result.skipped
    json.dumps(result.to_dict(), allow_nan=False)


def test_a_wrong_layer_fails_and_is_not_timed(monkeypatch) -> None:
    from registry.nn.layers import MXGroupedExperts
    real = MXGroupedExperts.forward
    scale = 1.02 + 0.03 * torch.rand(()).item()  # a small, random mistake

    def wrong(self, x, logits, top_k, **kw):
        out = real(self, x, logits, top_k, **kw)
        return out if self.backend == "reference" else out * scale
    monkeypatch.setattr(MXGroupedExperts, "forward", wrong)
    result = bench_moe.run_moe_bench(["w_mxfp4"], TINY, [2], device="cpu", timing=FAST)
    (row,) = result.rows
    assert row.status == "FAIL" and row.eager_us is None and row.err > bench.ERR_TOL
    assert "differs from the reference backend" in row.notes[0] and "not timed" in row.notes[0]


def test_a_scheme_no_moe_kernel_runs_is_skipped_with_the_reason(monkeypatch) -> None:
    """resolve's refusal (every MoE kernel disabled) is a skip with its reason; anything else
    a layer raises is an ERROR row saying what."""
    monkeypatch.setenv("REGISTRY_DISABLED_KERNELS", "reference-moe,triton-moe")
    result = bench_moe.run_moe_bench(["w_mxfp4"], TINY, [1], device="cpu", timing=FAST)
    assert result.rows == [] and [(s.scheme, s.shape) for s in result.skipped] == [
        ("w_mxfp4", "4:2:64x64")]
    assert "no moe kernel implements w_mxfp4 on cpu" in result.skipped[0].reason
    monkeypatch.delenv("REGISTRY_DISABLED_KERNELS")
    from registry.nn import layers

    def broken(*a, **kw):
        raise RuntimeError("a broken layer")
    monkeypatch.setattr(layers, "MXGroupedExperts", broken)
    result = bench_moe.run_moe_bench(["w_mxfp4"], TINY, [1, 2], device="cpu", timing=FAST)
    assert [(r.tokens, r.status) for r in result.rows] == [(1, "ERROR"), (2, "ERROR")]
    assert result.rows[0].notes == ["building the layer raised RuntimeError: a broken layer"]


def test_cli_moe_table_json_and_exit(capsys, on_cpu, tmp_path) -> None:
    out_file = tmp_path / "moe.json"
    code, out, err = run(capsys, "bench", "w_mxfp4", "--moe", "4:2:64x64", "--m", "1,2",
                         "--out", str(out_file))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("# registry bench --moe on cpu (cpu), torch ")
    head = next(i for i, line in enumerate(lines) if line.startswith("scheme "))
    body = [line.split() for line in lines[head + 1: head + 3]]
    assert [(c[0], c[3], c[4], c[5], c[6], c[-1]) for c in body] == [
        ("w_mxfp4", "4", "2", "64x64", "1", "ok"), ("w_mxfp4", "4", "2", "64x64", "2", "ok")]
    data = json.loads(out_file.read_text())
    assert data["environment"]["command"] == ("registry bench w_mxfp4 --moe 4:2:64x64 --m 1,2 "
                                              "--seed 0")
    assert [r["tokens"] for r in data["rows"]] == [1, 2]
    assert [line for line in err.splitlines() if line.startswith("[")][0].startswith(
        "[1/2] w_mxfp4 E=4 top-2 64x64 T=1 ")


def test_cli_moe_plot(capsys, on_cpu, tmp_path, monkeypatch) -> None:
    """--plot with --moe: one panel a MoE shape, bars along T (registry.cli.bench_plot.MOE)."""
    from matplotlib.figure import Figure

    titles = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **kw: (
        titles.append([ax.get_title() for ax in self.axes] + [self._suptitle.get_text()]),
        real(self, *a, **kw)))
    png = tmp_path / "moe.png"
    code, _, err = run(capsys, "bench", "w_mxfp4", "--moe", "4:2:64x64,2:1:32x64", "--m", "1,2",
                       "--plot", str(png), "--quiet")
    assert code == 0 and f"wrote {png}" in err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (got,) = titles
    assert got[:2] == ["E = 4, top-2, N x K = 64 x 64", "E = 2, top-1, N x K = 32 x 64"]
    assert got[2].startswith("time of bf16 torch._grouped_mm / time of the layer")


@pytest.mark.parametrize("argv,needle", [
    (["--moe", "4:2:64x64", "--shapes", "64x64"], "--shapes is the linear benchmark's"),
    (["--moe", "4:2:64x64", "--kernels", "triton-emulation"], "--kernels is the linear"),
    (["--moe", "4:2:64x64", "--plot", "/nonexistent-dir/p.png"], "does not exist; create it"),
    (["--moe", "4:2:64x64", "--out", "same.x", "--plot", "same.x"], "name the same file"),
    (["--moe", "4:2:64"], "'4:2:64' is not E:TOPK:NxK"),
    (["--moe", "4:2:64x64", "--m", "0"], "--m: '0' is not a positive integer"),
    (["nope", "--moe"], "no scheme or alias named 'nope'"),
    (["--moe", "w_mxfp4"], "scheme names go before --moe"),
])
def test_cli_moe_refusals_are_one_line_before_any_work(capsys, monkeypatch, argv, needle):
    def refuse(*a, **kw):
        raise AssertionError("run_moe_bench was called")
    monkeypatch.setattr(bench_moe, "run_moe_bench", refuse)
    monkeypatch.setattr(commands_bench, "gpu_device", lambda: "cpu")
    code, out, err = run(capsys, "bench", *argv)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
