"""The benchmark CLIs' tests: `on_cpu` lets `registry bench` (linear and --moe) run on the CPU,
which it refuses by design, with fast timing."""
from __future__ import annotations

import pytest

from registry.cli import bench as commands_bench
from registry.machine import bench, bench_moe
from support.cli import FAST


@pytest.fixture
def on_cpu(monkeypatch):
    monkeypatch.setattr(commands_bench, "gpu_device", lambda: "cpu")
    for module, name in ((bench, "run_bench"), (bench_moe, "run_moe_bench")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name,
                            lambda *a, real=real, **kw: real(*a, **dict(kw, timing=FAST)))
