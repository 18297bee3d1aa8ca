"""tools/gpu_memcheck.sh runs on the GPU machine only, over pytest node ids; its default list
named two ids that no longer existed (a test renamed its parameters, another moved) and would
have stopped a GPU call on "not found". Here: every default node is collected."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_memcheck.sh"


def test_the_default_nodes_exist() -> None:
    text = SCRIPT.read_text()
    folder = re.search(r"^\s*T=(\S+)$", text, re.M).group(1)
    nodes = [n.replace("$T", folder) for n in re.findall(r'"(\$T/[^"]+)"', text)]
    assert len(nodes) == 8  # (the device tool brings back 8 files: one a node)
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", *nodes], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    collected = [line for line in run.stdout.splitlines() if "::" in line]
    assert collected == nodes
