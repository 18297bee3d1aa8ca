"""A pytest plugin for memory checking on the GPU (`-p launch_trace`, tools/ on PYTHONPATH):
every `kernels.triton.launcher.launch` is logged to $LAUNCH_TRACE (kernel, grid, each tensor
argument's address range, shape and dtype) and followed by a synchronize, so that an address
compute-sanitizer names as out of bounds can be matched to the launch and the tensor it ran
past (tools/gpu_memcheck.sh)."""
from __future__ import annotations

import os

import torch

from kernels.triton import launcher

_REAL = launcher.launch
_LOG = open(os.environ.get("LAUNCH_TRACE", "launch_trace.txt"), "a", buffering=1)


def _traced(fn, key, grid, args, **kw):
    name = getattr(getattr(fn, "fn", fn), "__name__", str(fn))
    parts = [f"launch {name} grid={tuple(grid)} {kw}"]
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            lo = a.data_ptr()
            hi = lo + a.untyped_storage().nbytes() - a.storage_offset() * a.element_size()
            parts.append(f"  arg{i} {lo:#x}..{hi:#x} ({hi - lo} B) {tuple(a.shape)} {a.dtype}")
        elif isinstance(a, (int, bool, str)) and not isinstance(a, bool):
            parts.append(f"  arg{i} = {a}")
        elif a is not None:
            parts.append(f"  arg{i} {type(a).__name__}")
    _LOG.write("\n".join(parts) + "\n")
    out = _REAL(fn, key, grid, args, **kw)
    try:
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - logged, then raised as it was
        _LOG.write(f"  FAULT {type(exc).__name__}: {str(exc).splitlines()[0]}\n")
        raise
    return out


launcher.launch = _traced
