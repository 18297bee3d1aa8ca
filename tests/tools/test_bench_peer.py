"""tools/bench_peer.py: the peer is built from our very MX codes, checked against
reference-emulation before it is timed, and timed against the same run's bf16 figures. Here on
the CPU with the stand-in peer (dequantize + F.linear), a peer that reads the nibbles the wrong
way round (caught, never timed), and the one-line refusals."""
from __future__ import annotations

import pytest
import torch

from kernels.mx import MXTensor, mx_quantize
from registry.machine.bench import TimingConfig
from registry.machine.bench_rows import ERR_TOL
from support.tools import load_tool

bench_peer = load_tool("bench_peer")
FAST = TimingConfig(cpu_calls=1)


def _swapped_nibbles(mx: MXTensor):
    """A peer that takes element 2i from the high nibble: plausible, and wrong."""
    data = ((mx.data >> 4) | (mx.data << 4)).to(torch.uint8)
    return bench_peer.reference_linear(
        MXTensor(data, mx.scales, mx.fmt, mx.rounding, mx.shape, mx.layout))


def test_the_reference_peer_passes_and_shares_the_runs_bf16_figures() -> None:
    data = bench_peer.run_peer("reference", [(64, 128)], [3, 8], "cpu", timing=FAST)
    ours, peer = data["rows"], data["peer"]["rows"]
    assert [(r["n"], r["k"], r["m"]) for r in peer] == [(64, 128, 3), (64, 128, 8)]
    for o, p in zip(ours, peer):
        assert o["status"] == p["status"] == "ok", (o["notes"], p["notes"])
        # same codes, same math up to bf16 rounding of the output
        assert p["err"] is not None and p["err"] <= ERR_TOL
        assert p["bf16_eager_us"] == o["bf16_eager_us"] and p["bf16_loop_us"] == o["bf16_loop_us"]
        assert p["ratio"] == pytest.approx(o["bf16_eager_us"] / p["eager_us"])
        assert p["bytes"] == o["bytes"] and p["pct_copy"] is not None  # the same traffic
        assert p["kernel"] == "dequant+F.linear" and p["forced"]
    table = bench_peer.markdown(data)
    assert table.count("| 64x128 |") == 2 and "dequant+F.linear" in table


def test_a_peer_reading_the_wrong_nibble_is_failed_and_never_timed() -> None:
    data = bench_peer.run_peer("swapped", [(64, 128)], [4], "cpu", build=_swapped_nibbles,
                               timing=FAST)
    (row,) = data["peer"]["rows"]
    assert row["status"] == "FAIL" and row["err"] > ERR_TOL
    assert row["eager_us"] is None and row["graph_us"] is None and row["loop_us"] is None
    assert "differs from reference-emulation" in row["notes"][0]
    assert data["rows"][0]["status"] == "ok"  # ours is unaffected


def test_the_humming_peer_refuses_in_one_line_where_it_cannot_run() -> None:
    mx = mx_quantize(torch.randn(64, 128), "mxfp4", layout="packed")
    with pytest.raises(bench_peer.PeerMissing) as err:
        bench_peer.humming_linear(mx)  # no humming here, or a CPU weight
    assert "\n" not in str(err.value) and "humming" in str(err.value)


@pytest.mark.parametrize("fmt, layout", [("mxfp4", "unpacked"), ("mxfp6_e3m2", None)])
def test_a_weight_not_in_ocp_packed_mxfp4_is_refused(fmt: str, layout) -> None:
    mx = mx_quantize(torch.randn(64, 128), fmt, layout=layout)
    with pytest.raises(ValueError, match=r"needs a 2-D mxfp4 weight in the packed layout"):
        bench_peer.reference_linear(mx)


def test_main_says_a_missing_peer_in_one_line_and_exits_2(capsys, monkeypatch) -> None:
    def absent(mx):
        raise bench_peer.PeerMissing("humming-kernels cannot be imported (here: on purpose)")
    monkeypatch.setitem(bench_peer.PEERS, "humming", ("humming-kernels", absent))
    assert bench_peer.main(["--peer", "humming", "--shapes", "64x128", "--m", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("bench_peer: --peer humming: humming-kernels cannot be imported (here: on "
                   "purpose)")
