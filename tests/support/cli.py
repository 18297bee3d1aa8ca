"""The `registry` CLI run in-process by the tests, and the benchmarks' fast CPU timing."""
from __future__ import annotations

from registry.cli import main
from registry.machine import bench

FAST = bench.TimingConfig(cpu_calls=1)  # the benchmarks on a CPU: one call after a warm-up


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """`registry ARGV` in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err
