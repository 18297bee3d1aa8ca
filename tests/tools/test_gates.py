"""tools/gates.py: the benchmark scripts' gate switches reach the modules the kernels read."""
from __future__ import annotations

import argparse

import pytest

from kernels.triton import moe_wgmma, qdq_plan, wgmma_gates
from kernels.triton.wgmma_config import WgmmaConfig
from support.tools import load_tool

gates = load_tool("gates")


def test_open_gates_switches_the_flag_the_kernels_read(monkeypatch, capsys) -> None:
    for mod, name in ((wgmma_gates, "OVERLAP_VERIFIED"), (qdq_plan, "SMALL_ROWS_WIDE_VERIFIED"),
                      (moe_wgmma, "EIGHT_BIT_VERIFIED")):
        monkeypatch.setattr(mod, name, False)
        gates.open_gates([name], argparse.ArgumentParser())
        assert getattr(mod, name) is True, name
        assert f"# gate {name} on for this run" in capsys.readouterr().out
    monkeypatch.setattr(wgmma_gates, "OVERLAP_VERIFIED", False)
    assert wgmma_gates.gated(WgmmaConfig(8, 256, 2, 4, overlap=True)) is not None
    gates.open_gates(["OVERLAP_VERIFIED"], argparse.ArgumentParser())
    assert wgmma_gates.gated(WgmmaConfig(8, 256, 2, 4, overlap=True)) is None


@pytest.mark.parametrize("name", ("NO_SUCH_VERIFIED", "FAST_BOUNDS"))
def test_an_unknown_gate_is_the_parsers_one_line_error(name: str, capsys) -> None:
    with pytest.raises(SystemExit):
        gates.open_gates([name], argparse.ArgumentParser(prog="tune_linear.py"))
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"tune_linear.py: error: --open-gates {name}: not a *_VERIFIED gate "
                          "of moe_wgmma, wgmma_gates, wgmma_config, wgmma_tiles, qdq_plan"), err


def test_setting_puts_each_value_back(monkeypatch) -> None:
    monkeypatch.setattr(wgmma_gates, "WS_VERIFIED", True)
    with pytest.raises(RuntimeError):
        with gates.setting(wgmma_gates, WS_VERIFIED=False, TMA_X_VERIFIED=None):
            assert wgmma_gates.WS_VERIFIED is False
            raise RuntimeError
    assert wgmma_gates.WS_VERIFIED is True
