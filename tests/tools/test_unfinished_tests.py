"""tools/unfinished_tests.py: the tests a stopped `pytest -v -n N` run left, from its log."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.paths import TOOLS
from support.tools import load_tool

unfinished_tests = load_tool("unfinished_tests")

# the shape of an xdist -v log: a started test on a line of its own, results prefixed by the
# worker and the progress; parametrized ids with brackets, spaces after the id
LOG = """\
created: 3/3 workers
3 workers [5 items]

tests/a.py::test_one
tests/a.py::test_two[200-1024-mxfp4:even-False] 
tests/b.py::test_three
[gw0] [ 20%] PASSED tests/a.py::test_one 
tests/b.py::test_four[x] 
[gw2] [ 40%] FAILED tests/b.py::test_three 
[gw1] [ 60%] SKIPPED tests/b.py::test_four[x] 
tests/b.py::test_five
"""


def test_started_tests_without_a_result_are_listed_in_start_order() -> None:
    assert unfinished_tests.unfinished(LOG.splitlines()) == [
        "tests/a.py::test_two[200-1024-mxfp4:even-False]", "tests/b.py::test_five"]
    finished = LOG + "[gw0] [ 80%] PASSED tests/a.py::test_two[200-1024-mxfp4:even-False] \n" \
        "[gw1] [100%] ERROR tests/b.py::test_five\n"
    assert unfinished_tests.unfinished(finished.splitlines()) == []


def test_the_script_prints_one_id_a_line_and_refuses_a_missing_log(tmp_path: Path) -> None:
    log = tmp_path / "pytest.log"
    log.write_text(LOG)
    script = str(TOOLS / "unfinished_tests.py")
    done = subprocess.run([sys.executable, script, str(log)], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.splitlines() == ["tests/a.py::test_two[200-1024-mxfp4:even-False]",
                                        "tests/b.py::test_five"]
    missing = subprocess.run([sys.executable, script, str(tmp_path / "nope.log")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "cannot read" in missing.stderr and "nope.log" in missing.stderr
