"""OCP Microscaling (MX) kernels: the public quantize / dequantize / QDQ API.

    from kernels import MXTensor, mx_quantize, mx_dequantize, mx_qdq

The bottom layer of the project: nothing under kernels/ imports the `registry` package (a test
scans for it). kernels.spec is the shared vocabulary (formats, QuantKey / SchemeContract,
platforms), kernels.select the kernel declarations and the resolver; both are torch-free.

The names are imported on first use, so `import kernels.select.declarations` (what resolve,
lint and `registry matrix` read) stays free of torch and triton; the Triton backend is imported
only when a call asks for it.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ["MXTensor", "mx_quantize", "mx_dequantize", "mx_qdq"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module("kernels.mx"), name)
    globals()[name] = value
    return value
