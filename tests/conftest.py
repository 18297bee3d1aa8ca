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
