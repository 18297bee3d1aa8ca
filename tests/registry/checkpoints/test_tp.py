"""Tensor-parallel split checks (registry.checkpoints.tp): row-parallel K/tp on a block edge,
column-parallel N/tp whole, and the padding that fixes a bad split."""
import pytest

from registry.checkpoints.tp import check_split, parse_tps, split_kind, split_table


def test_kinds_follow_engine_names():
    assert split_kind("model.layers.0.mlp.down_proj") == "row"
    assert split_kind("model.layers.0.self_attn.o_proj") == "row"
    assert split_kind("model.layers.0.self_attn.q_proj") == "column"
    assert split_kind("model.layers.0.mlp.experts.gate_up_proj") == "column"


def test_row_parallel_needs_k_over_tp_a_multiple_of_32():
    ok = check_split("x.down_proj", 64, 256, 8)
    assert ok.ok and ok.cell == "ok"
    bad = check_split("x.down_proj", 64, 2880, 8)  # gpt-oss-like 2880 / 8 = 360
    assert not bad.ok and bad.pad_to == 3072 and "360" in bad.why
    assert bad.cell == "pad K 2880->3072"


def test_column_parallel_needs_whole_rows():
    assert check_split("x.q_proj", 96, 64, 4).ok
    bad = check_split("x.q_proj", 90, 64, 4)
    assert not bad.ok and bad.pad_to == 92


def test_table_and_parsing():
    rows = split_table([("a.o_proj", (64, 64)), ("e.down_proj", (4, 64, 96))], (1, 2, 4))
    assert [[c.ok for c in r] for r in rows] == [[True, True, False], [True, False, False]]
    assert parse_tps("1,2,4,8") == (1, 2, 4, 8)
    with pytest.raises(ValueError, match="'x' is not an integer"):
        parse_tps("2,x")
    with pytest.raises(ValueError, match="0 is not a positive"):
        parse_tps("0")
