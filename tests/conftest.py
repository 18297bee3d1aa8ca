"""Test set-up: on a machine without a GPU, Triton kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before any @triton.jit function is defined, so it is set here,
before a test module imports kernels.triton.
"""
import os
import tempfile

import torch

# `registry lint --probe` records its results in a per-user cache: keep the tests' records out
# of the real one (and out of each other's runs).
os.environ.setdefault("REGISTRY_CACHE_DIR", tempfile.mkdtemp(prefix="registry-test-cache-"))

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

#: Where tests put tensors for Triton kernels: the GPU when there is one, else the CPU (interpreter).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def load_tool(name: str):
    """tools/NAME.py imported as a module, once per process (tests share a tool's helpers)."""
    import importlib.util
    import sys
    from pathlib import Path

    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
