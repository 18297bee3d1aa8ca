"""One timing rule for every benchmark script: `registry.machine.timing.median_ms`, re-exported
here for the scripts in tools/ (`from timing import median_ms`).

CUDA: events around each call, L2 flushed before each, median over ~rep_ms of calls
(triton.testing.do_bench's rule); CPU (the interpreter, for checking the scripts' logic): one
warm-up, then the median of three perf_counter calls.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without an install

from registry.machine.timing import graph_ms, median_ms  # noqa: E402

__all__ = ["graph_ms", "median_ms"]
