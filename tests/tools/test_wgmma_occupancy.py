"""tools/wgmma_occupancy.py: programs an SM from registers, shared memory and warps (sm_90's
limits), the argument checks, and one offline sm_90a compile of the mxfp6 experts' 128-row
tile with 3 and with 2 stages in a subprocess, with its K loop by opcode (skipped only where
the installed triton has no NVIDIA backend / ptxas: CI's CPU triton has both)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.tools import load_tool

occupancy = load_tool("wgmma_occupancy")
ROOT = Path(__file__).resolve().parents[2]


def test_programs_an_sm_is_the_least_of_the_three_limits() -> None:
    # the mxfp6 experts' 3-stage row (part 22): two by registers, one by shared memory
    assert occupancy.programs_an_sm(196, 4, 117504) == dict(
        by_registers=2, by_shared=1, by_warps=16, programs=1)
    assert occupancy.programs_an_sm(196, 4, 78336)["programs"] == 2
    # registers are granted 8 at a time: 129 counts as 136 (3 programs), 128 as 128 (4)
    assert occupancy.programs_an_sm(129, 4, 0)["by_registers"] == 3
    assert occupancy.programs_an_sm(128, 4, 0)["by_registers"] == 4
    # shared memory: each program also takes the reserved 1 KB
    half = occupancy.SM_SHARED // 2 - occupancy.SHARED_RESERVED
    assert occupancy.programs_an_sm(32, 4, half)["by_shared"] == 2
    assert occupancy.programs_an_sm(32, 4, half + 1)["by_shared"] == 1
    # warps: 64 an SM, and never more than 32 programs
    assert occupancy.programs_an_sm(32, 8, 0)["by_warps"] == 8
    assert occupancy.programs_an_sm(16, 1, 0)["by_warps"] == 32


def test_bad_arguments_are_refused(capsys) -> None:
    for bad in (["--format", "mxfp5"], ["--wgmma", "128:128"], ["--wgmma", "a:b:c:d:e"]):
        with pytest.raises(SystemExit):
            occupancy.main(bad)
        assert "--" in capsys.readouterr().err


def _compile_env() -> dict:
    """The environment of an offline compile (no TRITON_INTERPRET); skips where this triton has
    no NVIDIA backend, ptxas, nvdisasm or cuobjdump (CI's CPU triton has them all)."""
    try:
        from triton import knobs
        from triton.backends.nvidia import compiler  # noqa: F401
        tools = (knobs.nvidia.ptxas.path, knobs.nvidia.nvdisasm.path,
                 knobs.nvidia.cuobjdump.path)
    except Exception as err:  # noqa: BLE001 - any missing piece of the NVIDIA backend
        pytest.skip(f"no triton NVIDIA backend / ptxas here: {err}")
    if not all(t and os.path.exists(t) for t in tools):
        pytest.skip("no ptxas / nvdisasm / cuobjdump in this triton install")
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def test_two_stages_hold_two_programs_where_three_hold_one() -> None:
    env = _compile_env()
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "wgmma_occupancy.py"),
                          "--format", "mxfp6_e3m2", "--grouped",
                          "--wgmma", "128:128:1:3:4,128:128:1:2:4", "--ops"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(r"(\d+) regs, (\d+) B, (\d+) an SM \((\d+) / (\d+) / (\d+)\), "
                      r"K loop (\d+) SASS", out.stdout)
    assert len(rows) == 2, out.stdout
    (r3, s3, p3, *_), (r2, s2, p2, *_) = [[int(v) for v in row] for row in rows]
    assert p3 == occupancy.programs_an_sm(r3, 4, s3)["programs"]
    assert s2 < s3 and p2 >= p3 and p2 >= 2, out.stdout  # a stage less: two an SM
    assert all(int(row[6]) > 100 for row in rows), out.stdout  # the decode's K loop found
    # --ops: each K loop by opcode, wgmmas among them, adding up to the loop's count
    ops = [dict((op, int(n)) for op, n in re.findall(r"([A-Z][A-Z0-9_]*) (\d+)", line))
           for line in out.stdout.splitlines() if line.startswith("  ")]
    assert len(ops) == 2, out.stdout
    for row, by_op in zip(rows, ops):
        assert by_op.get("HGMMA", 0) > 0 and by_op.get("HMUL2", 0) > 0, by_op
        assert sum(by_op.values()) == int(row[6]), (by_op, row)


def test_the_one_row_qdq_costs_a_fraction_of_the_whole_tiles() -> None:
    """--act / --act-rows: the M = 1 row's kernel (8 x 256, split 2, 3 stages) compiled with
    no activation QDQ, with the QDQ of the whole 8-row x tile, and of row 0 alone
    (wgmma_config.act_rows at M = 1). The one row adds under a fifth of the K loop's
    instructions, the whole tile over half (offline sm_90a, triton 3.6: 376 / 671 / 422)."""
    env = _compile_env()
    loops = []
    for extra in ([], ["--act", "mxfp4:even"], ["--act", "mxfp4:even", "--act-rows", "1"]):
        out = subprocess.run([sys.executable, str(ROOT / "tools" / "wgmma_occupancy.py"),
                              "--wgmma", "8:256:2:3:4", *extra], capture_output=True, text=True,
                             env=env, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        loops += [int(v) for v in re.findall(r"K loop (\d+) SASS", out.stdout)]
    none, tile, row = loops
    assert none < row < none * 1.2 and tile > none * 1.5, loops


def test_a_persistent_config_is_compiled_as_one_with_its_x_ring() -> None:
    """The wide tile's persistent row and its x ring are compiled as such (the tool once left
    group_m / persistent out): 8-bit weights, 2 stages, then 3 x slots beside them — a 64 KiB
    slot and its barriers more shared memory, within sm_90's 227 KiB, one program an SM, and
    a K loop within a tenth of the one-ring loop's (offline sm_90a, triton 3.9: 153 / 162
    SASS a thread for mxint8)."""
    env = _compile_env()
    pst = "256:128:1:2:4:0:1:1:1:1:0:4:1"
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "wgmma_occupancy.py"),
                          "--format", "mxint8", "--wgmma", f"{pst},{pst}:3"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "g4 pst)" in out.stdout and "g4 pst x3)" in out.stdout, out.stdout
    rows = [[int(v) for v in row] for row in re.findall(
        r"(\d+) B, (\d+) an SM .*K loop (\d+) SASS", out.stdout)]
    assert len(rows) == 2, out.stdout
    (s1, p1, k1), (s3, p3, k3) = rows
    assert 65536 <= s3 - s1 <= 65536 + 128 and s3 <= occupancy.SM_SHARED, out.stdout
    assert p1 == p3 == 1, out.stdout
    assert k1 < k3 <= k1 * 1.1, out.stdout
