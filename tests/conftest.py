"""Test set-up: on a machine without a GPU, Triton kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before any @triton.jit function is defined, so it is set here,
before a test module imports kernels.triton.

Layout: tests/<area>/ mirrors the packages (kernels/, registry/, tools/; project/ for checks
over the whole tree), helpers in tests/support/ (`from support.NAME import ...`: pyproject's
pytest `pythonpath` puts the checkout and tests/ on sys.path), data in tests/data/. Test files
have unique basenames (pytest's default "prepend" import mode).
"""
import os
import tempfile

import torch

# `registry lint --probe` records its results in a per-user cache: keep the tests' records out
# of the real one (and out of each other's runs).
os.environ.setdefault("REGISTRY_CACHE_DIR", tempfile.mkdtemp(prefix="registry-test-cache-"))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from support.device import DEVICE  # noqa: E402,F401 - re-exported (`from conftest import DEVICE`)
from support.tools import load_tool  # noqa: E402,F401 - re-exported


def pytest_configure(config) -> None:
    # pytest-timeout (on the GPU image, where tools/gpu_check.sh sets a per-test limit) reads
    # this marker; registered here too so that a run without the plugin does not warn on it
    config.addinivalue_line("markers", "timeout(seconds): this test's own pytest-timeout limit")
