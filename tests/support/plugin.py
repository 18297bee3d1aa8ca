"""The `install` fixture: the fake plugin (tests/data/plugin_pkg/acme_mx_kernels) installed as a
distribution — a real `.dist-info` (METADATA + entry_points.txt) in a temporary directory on
sys.path, so the real `importlib.metadata` entry-point machinery finds it.

A test module takes it with `from support.plugin import install  # noqa: F401`."""
from __future__ import annotations

from pathlib import Path

import pytest

from kernels.select.kernel_table import ENV_DISABLE_PLUGINS, reset_kernel_table
from registry.files.loader import ENV_VAR

from support.paths import PLUGIN_PKG


@pytest.fixture
def install(tmp_path, monkeypatch):
    """install(dist, {entry point: "module:attr"}) -> the entry_points.txt written."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(PLUGIN_PKG))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(ENV_DISABLE_PLUGINS, raising=False)
    monkeypatch.delenv(ENV_VAR, raising=False)

    def _install(dist: str, entry_points: dict[str, str]) -> Path:
        info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        ep_file = info / "entry_points.txt"
        ep_file.write_text("[registry.kernels]\n"
                           + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
        reset_kernel_table()
        return ep_file

    reset_kernel_table()
    yield _install
    reset_kernel_table()
