"""tools/tune_linear.py's explicit wgmma configs (--wgmma-specs, bench_moe --wgmma): a bad spec
is refused in one line naming it and the expected fields, before any GPU work."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import tune_linear  # noqa: E402


def test_a_spec_is_its_config() -> None:
    cfg = tune_linear.forced_spec("64:128:2:3:8:128:2:2")
    assert (cfg.block_m, cfg.block_k, cfg.split, cfg.stages, cfg.warps, cfg.maxnreg, cfg.sub_k,
            cfg.rep) == (64, 128, 2, 3, 8, 128, 2, 2)
    assert tune_linear.wgmma_name(cfg) == "wgmma 64x128 s2 st3 w8 sub2 r128 rep2"
    tma = tune_linear.forced_spec("128:128:2:3:4:0:1:1:1")
    assert tma.tma_x and not cfg.tma_x and tune_linear.wgmma_name(tma).endswith("s2 st3 w4 tma")
    ws = tune_linear.forced_spec("128:128:1:4:4:0:1:1:1:1")
    assert ws.ws and ws.tma_x and tune_linear.wgmma_name(ws).endswith("s1 st4 w4 tma ws")
    ovl = tune_linear.forced_spec("8:256:2:4:4:0:1:1:0:0:1")
    assert ovl.overlap and tune_linear.wgmma_name(ovl).endswith("s2 st4 w4 ovl")
    band = tune_linear.forced_spec("256:128:1:2:4:0:1:1:1:1:0:8")
    assert band.group_m == 8 and tune_linear.wgmma_name(band).endswith("st2 w4 tma ws g8")
    pst = tune_linear.forced_spec("256:128:1:3:4:0:1:1:1:1:0:4:1")
    assert pst.persistent and not band.persistent and \
        tune_linear.wgmma_name(pst).endswith("st3 w4 tma ws g4 pst")
    x3 = tune_linear.forced_spec("256:128:1:2:4:0:1:1:1:1:0:4:1:3")
    assert x3.x_stages == 3 and pst.x_stages == 0 and \
        tune_linear.wgmma_name(x3).endswith("st2 w4 tma ws g4 pst x3")
    assert [tune_linear.tile_of(m) for m in (1, 8, 9, 100, 128)] == [8, 8, 16, 128, 128]


@pytest.mark.parametrize("spec", ("64:128:2:3", "64:x:2:3:4", "1:2:3:4:5:6:7:8:9:1:1:1:1:1:1"))
def test_a_malformed_spec_says_what_is_wanted(spec: str) -> None:
    with pytest.raises(ValueError, match=rf"wgmma spec '{spec}': want 5 to 14 integers, "
                                         r"block_m:block_k:split:stages:warps"):
        tune_linear.forced_spec(spec)


def test_a_spec_past_the_verified_tiles_gets_the_configs_error() -> None:
    with pytest.raises(ValueError, match=r"block_m=48 is not one of"):
        tune_linear.forced_spec("48:128:2:3:4")
    with pytest.raises(ValueError, match=r"ws=True needs an even number of stages \(got 3\)"):
        tune_linear.forced_spec("128:128:1:3:4:0:1:1:1:1")
    with pytest.raises(ValueError, match=r"group_m=4 needs 1..64 and, past 1, block_m=256 "
                                         r"\(got 128\)"):
        tune_linear.forced_spec("128:128:1:4:4:0:1:1:1:1:0:4")
    with pytest.raises(ValueError, match=r"persistent=True needs block_m=256 and split=1 \(got "
                                         r"block_m=256, split=2\)"):
        tune_linear.forced_spec("256:128:2:3:4:0:1:1:1:1:0:1:1")


@pytest.mark.parametrize("shapes,error", (("8192x100", r"K=100 is not a multiple of the MX block"),
                                          ("8192", r"'8192' is not NxK")))
def test_a_bad_shape_is_the_parsers_one_line_error(shapes: str, error: str, monkeypatch,
                                                   capsys) -> None:
    """--shapes is checked before any GPU work (this machine has none)."""
    monkeypatch.setattr(sys, "argv", ["tune_linear.py", "--shapes", shapes])
    with pytest.raises(SystemExit) as e:
        tune_linear.main()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()  # argparse's usage, then the one line
    assert err[-1].startswith("tune_linear.py: error: --shapes: ") and re.search(error, err[-1])
