"""A built wheel carries the shipped schemes as `registry/_shipped/*.yaml`, and an installed
(non-editable) copy finds and lists them.

The wheel is built from a copy of the source (so the checkout gets no build/ or egg-info).
"""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.paths import REPO

SCHEMES = {
    "w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_mxfp6_e2m3", "w_mxfp4_a_fp8",
    "w_mxfp6_e3m2", "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e3m2_a_fp8", "w_mxfp6_e2m3",
    "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e2m3_a_fp8", "w_mxfp8_e4m3_a_mxfp8_e4m3", "w_mxfp8_e4m3",
    "w_mxint8_a_mxint8",
    # AutoRound's floor / rceil activation roundings (issue 15)
    "w_mxfp4_floor_a_mxfp4_floor", "w_mxfp4_floor_a_mxfp4_rceil",
    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_floor", "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil",
}


def _pip(*args, cwd):
    # --no-index: building and installing need nothing from an index (the GPU machine is offline)
    out = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check",
                          "--no-input", "--no-index", "-q"], capture_output=True, text=True,
                         cwd=cwd, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("registry", "kernels", "schemes"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(src), cwd=src)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_carries_the_shipped_schemes(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith("registry/_shipped/")}
    assert shipped == {f"registry/_shipped/{s}.yaml" for s in SCHEMES}
    assert {f"{s}.yaml" for s in SCHEMES} == {p.name for p in (REPO / "schemes").glob("*.yaml")}
    assert "registry/cli/app.py" in names and "registry/contract.py" in names
    assert not [n for n in names if n.startswith("schemes/") or n.startswith("tests/")]


def test_wheel_carries_every_module(wheel):
    """pyproject.toml lists its packages one by one: a subpackage left out of the list would be
    missing from an install (registry/nn, say, which `registry list` never imports)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(REPO).as_posix() for pkg in ("registry", "kernels")
               for p in (REPO / pkg).rglob("*.py") if "__pycache__" not in p.parts}
    missing = sorted(sources - names)
    assert not missing, f"add their packages to pyproject.toml [tool.setuptools]: {missing}"


def test_installed_copy_lists_the_shipped_schemes(wheel, tmp_path):
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(site), str(wheel), cwd=tmp_path)
    # The installed copy first; then the caller's own path entries (PYTHONPATH's and sys.path's,
    # e.g. a `pip install --target` dir holding pydantic) except the checkout, so the
    # dependencies import as they do here but `registry` can only come from the installed copy.
    callers = os.environ.get("PYTHONPATH", "").split(os.pathsep) + sys.path
    kept = [p for p in dict.fromkeys(callers) if p and Path(p).resolve() != REPO]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *kept])}
    env.pop("REGISTRY_SCHEMES_PATH", None)
    where = subprocess.run(
        [sys.executable, "-c", "import registry, registry.files.loader as l; "
         "print(registry.__file__); print(l.shipped_dir())"],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=True).stdout.split("\n")
    assert where[0].startswith(str(site)), where  # the installed copy, not the checkout
    assert Path(where[1]) == site / "registry" / "_shipped"
    script = site / "bin" / "registry"
    assert script.exists()
    out = subprocess.run([str(script), "list", "--json"], capture_output=True, text=True,
                         cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {s["name"] for s in data["schemes"]} == SCHEMES and data["findings"] == []
    assert all((tmp_path / s["source"]["file"]).parent == site / "registry" / "_shipped"
               for s in data["schemes"])  # shown relative to the working directory
    lint = subprocess.run([str(script), "lint"], capture_output=True, text=True, cwd=tmp_path,
                          env=env)
    assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", "")
