"""tools/ncu_wgmma.sh runs on the GPU machine only; here: it parses, and where there is no
Nsight Compute it says so in one line and exits 2 instead of writing empty reports."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "ncu_wgmma.sh"


def test_the_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


@pytest.mark.skipif(shutil.which("ncu") is not None, reason="this machine has ncu")
def test_without_ncu_it_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NCU"}
    env.update(OUT=str(tmp_path), CASES="mxfp4:1:256x256")
    run = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "no ncu on this machine" in run.stdout
    assert not list(tmp_path.glob("ncu_*.txt"))
