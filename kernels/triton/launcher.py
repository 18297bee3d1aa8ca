"""Launch a compiled Triton kernel without Triton's per-call binding.

Why: `kernel[grid](...)` binds and specializes every argument on every call; with the ~45
arguments (most of them constexprs) of the emulation kernels that cost ~90 us of host time a
call on the H200's host (triton 3.6) — three times the kernel at M = 1, and the whole of an
eager decode step. The first call of a specialization goes through Triton as usual (compile,
or Triton's own cache) and returns the compiled kernel; later calls with the same `key` call
its launcher directly (tens of microseconds less).

The caller's `key` must determine Triton's specialization: the dtypes of the tensor arguments,
which pointers are 16-byte aligned, which integers are 1 or multiples of 16 (unless the kernel
marks them `do_not_specialize`), the constexprs and the launch options. Under the interpreter
there is nothing compiled: every call goes through Triton.
"""
from __future__ import annotations

import inspect
import threading
from typing import Any, Hashable, Sequence

import torch
from triton import knobs
from triton.runtime import driver

_COMPILED: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def aligned(t: Any) -> bool:
    """Whether a tensor's data pointer is 16-byte aligned (Triton's pointer specialization)."""
    return t.data_ptr() % 16 == 0


def spec_key(args: Sequence[Any], constexprs: frozenset = frozenset()) -> tuple:
    """Triton's specialization of `args`, conservatively: per tensor its dtype and 16-byte
    alignment; per int whether it is 1, a multiple of 16, 32-bit; the constexprs (their indices
    in `constexprs`) and other values as they are. (A constexpr int keyed like a runtime int
    once reused a kernel compiled for another tile: BLOCK_R 2 and 4 share (False, False, True).)"""
    return tuple(a if i in constexprs else
                 (a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor) else
                 (a == 1, a % 16 == 0, -2**31 <= a < 2**31) if type(a) is int else a
                 for i, a in enumerate(args))


def launch(fn: Any, key: Hashable, grid: Sequence[int], args: Sequence[Any], *, num_warps: int,
           num_stages: int, maxnreg: int = 0) -> None:
    """Run `fn[grid](*args, num_warps=, num_stages=)`; `args` are ALL of fn's parameters in
    order (constexprs included), `key` their specialization (module docstring). `maxnreg`:
    a register cap per thread (0: the compiler's choice)."""
    opts = {"maxnreg": maxnreg} if maxnreg else {}
    if type(fn).__name__ == "InterpretedFunction":  # TRITON_INTERPRET=1: nothing compiled
        fn[tuple(grid)](*args, num_warps=num_warps, num_stages=num_stages, **opts)
        return
    device = driver.active.get_current_device()
    memo = (id(fn), key, device, num_warps, num_stages, maxnreg)
    compiled = _COMPILED.get(memo)
    if compiled is None or _hooked():  # profilers' launch hooks: Triton's own path calls them
        compiled = fn[tuple(grid)](*args, num_warps=num_warps, num_stages=num_stages, **opts)
        if compiled is not None:
            with _LOCK:
                _COMPILED[memo] = compiled
        return
    stream = driver.active.get_current_stream(device)
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    compiled.run(grid[0], g1, g2, stream, compiled.function, compiled.packed_metadata, None,
                 None, None, *args)


def _hooked() -> bool:
    """Whether launch hooks are set: None, or (triton >= 3.4) an empty HookChain, is none."""
    for hook in (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


def launch_auto(fn: Any, grid: Sequence[int], args: Sequence[Any], *, num_warps: int,
                num_stages: int = 3) -> None:
    """`launch` with the key computed from the arguments (`spec_key`, constexprs by value)."""
    launch(fn, spec_key(args, constexpr_indices(fn)), grid, args, num_warps=num_warps,
           num_stages=num_stages)


_CONSTEXPRS: dict[int, frozenset] = {}


def constexpr_indices(fn: Any) -> frozenset:
    """The positions of a jitted kernel's `tl.constexpr` parameters (compiled or interpreted:
    read from the Python signature's annotations)."""
    found = _CONSTEXPRS.get(id(fn))
    if found is None:
        params = inspect.signature(getattr(fn, "fn", fn)).parameters.values()
        found = frozenset(i for i, p in enumerate(params) if "constexpr" in str(p.annotation))
        _CONSTEXPRS[id(fn)] = found
    return found


_INTERNED: dict[Hashable, int] = {}


def intern(key: Hashable) -> int:
    """A small int standing for `key` for the life of the process (cheap to hash per call)."""
    with _LOCK:
        return _INTERNED.setdefault(key, len(_INTERNED))


def compiled_count() -> int:
    """How many specializations are held (tests)."""
    return len(_COMPILED)


__all__ = ["aligned", "compiled_count", "constexpr_indices", "intern", "launch", "launch_auto",
           "spec_key"]
