"""The tests a stopped `pytest -v -n N` run left unfinished: named in its log as started
(`tests/...::name` on a line of its own, xdist's -v) with no result line (`[gwK] [ P%] PASSED
tests/...`) after. Why: a cold GPU machine's whole-suite run can reach its time limit at 99 %
(tools/gpu_check.sh, 2026-12-07 08:03 UTC: three tests left); the run is finished by running
exactly those on the still-warm machine (`TESTS_FROM=` of gpu_check.sh) before it is released.

    python3 tools/unfinished_tests.py OUT/pytest.log > unfinished.txt   (one node id a line)
"""
from __future__ import annotations

import re
import sys
from typing import Iterable

_RESULT = re.compile(r"\b(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (tests/\S+)")
_STARTED = re.compile(r"^(tests/\S+::\S+)\s*$")


def unfinished(lines: Iterable[str]) -> list[str]:
    """Node ids started and never given a result, in the order they started."""
    started: dict[str, None] = {}
    done: set[str] = set()
    for line in lines:
        result = _RESULT.search(line)
        if result:
            done.add(result.group(2))
            continue
        start = _STARTED.match(line.strip())
        if start:
            started.setdefault(start.group(1))
    return [node for node in started if node not in done]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 tools/unfinished_tests.py PYTEST_LOG (a `pytest -v -n N` log)",
              file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8", errors="replace") as log:
            nodes = unfinished(log)
    except OSError as err:
        print(f"unfinished_tests: cannot read {argv[0]}: {err.strerror}", file=sys.stderr)
        return 2
    if nodes:
        print("\n".join(nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
