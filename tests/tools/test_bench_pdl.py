"""tools/bench_pdl.py's settings (the GPU timing itself runs on the device machine): each holds
its gates and table for the whole of its calls and restores them after, exception or not, and
the fused settings put the activation QDQ in the kernel on exactly the table rows that can take
it."""
from __future__ import annotations

import dataclasses

import pytest

from kernels.triton import grid_dependency, linear_configs, qdq_plan, wgmma_config
from kernels.triton.wgmma_config import WgmmaConfig
from support.tools import load_tool

gates = load_tool("gates")
bench_pdl = load_tool("bench_pdl")


def test_a_setting_restores_its_attributes_after_an_error() -> None:
    shipped = qdq_plan.SMALL_ROWS_VERIFIED
    with pytest.raises(RuntimeError):
        with gates.setting(qdq_plan, SMALL_ROWS_VERIFIED=not shipped,
                           FP8_STATIC_BOUND_VERIFIED=None):
            assert qdq_plan.SMALL_ROWS_VERIFIED is (not shipped)
            raise RuntimeError("a failed measurement")
    assert qdq_plan.SMALL_ROWS_VERIFIED is shipped


def test_the_fused_table_fuses_the_small_rows_that_can_take_it() -> None:
    table = bench_pdl.fused_table()
    assert len(table) == len(linear_configs.TABLE)
    fused = 0
    for row, was in zip(table, linear_configs.TABLE):
        can = (was.strategy == "wgmma" and was.m_max <= bench_pdl.FUSE_M_MAX
               and isinstance(was.config, WgmmaConfig) and not was.config.ws
               and not was.config.overlap)  # (overlap: one QDQ buffer, fuse_act refused)
        assert row.config == (dataclasses.replace(was.config, fuse_act=True) if can else
                              was.config), row
        assert (row.m_max, row.n_min, row.k_min, row.family) == (
            was.m_max, was.n_min, was.k_min, was.family)
        fused += can
    assert fused >= 3  # the M = 1 rows of mxfp4, mxfp6 and mxfp8 at least


@pytest.mark.parametrize("compare", ("fused", "pdl", "bound", "qdq"))
def test_each_setting_holds_its_gates_and_puts_them_back(compare: str) -> None:
    before = (linear_configs.TABLE, wgmma_config.ACT_ROWS_VERIFIED,
              grid_dependency.PDL_VERIFIED, qdq_plan.FP8_STATIC_BOUND_VERIFIED,
              qdq_plan.SMALL_ROWS_WIDE_VERIFIED)
    seen = []
    for label, context in bench_pdl.settings(compare):
        with context():
            seen.append((label, linear_configs.TABLE is before[0],
                         wgmma_config.ACT_ROWS_VERIFIED, grid_dependency.PDL_VERIFIED,
                         qdq_plan.FP8_STATIC_BOUND_VERIFIED, qdq_plan.SMALL_ROWS_WIDE_VERIFIED))
        assert (linear_configs.TABLE, wgmma_config.ACT_ROWS_VERIFIED,
                grid_dependency.PDL_VERIFIED, qdq_plan.FP8_STATIC_BOUND_VERIFIED,
                qdq_plan.SMALL_ROWS_WIDE_VERIFIED) == before
    want = {"fused": [("two launches", True, False), ("fused tile", False, False),
                      ("fused rows", False, True)],
            "pdl": [("shipped", True, before[1])] + [("PDL on", True, before[1])],
            "bound": [("Bound off", True, before[1]), ("Bound on", True, before[1])],
            "qdq": [("shipped", True, before[1]), ("wide rows", True, before[1])]}[compare]
    assert [s[:3] for s in seen] == want
    if compare == "pdl":
        assert [s[3] for s in seen] == [False, True]
    if compare == "bound":
        assert [s[4] for s in seen] == [False, True]
    if compare == "qdq":
        assert [s[5] for s in seen] == [False, True]
