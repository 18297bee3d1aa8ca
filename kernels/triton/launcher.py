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


def rows_aligned(t: Any) -> bool:
    """Whether Triton's specialization proves every row of a 2-D tensor 16-byte aligned: its
    pointer (16 bytes) and its row stride (16 elements) multiples of 16. Only then does it lay a
    row's elements out in 16-byte vectors: what cp.async copies need (wgmma_tiles.copyable_rows)
    and PTX that takes a thread's consecutive elements together (mx_quant.quantize's lanes and
    fp6 groups: wrong codes on an H100 elsewhere, 2026-12-05)."""
    return t.data_ptr() % 16 == 0 and t.stride(0) % 16 == 0


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
           num_stages: int, maxnreg: int = 0, pdl: bool = False) -> Any:
    """Run `fn[grid](*args, num_warps=, num_stages=)`; `args` are ALL of fn's parameters in
    order (constexprs included), `key` their specialization (module docstring). `maxnreg`:
    a register cap per thread (0: the compiler's choice); `pdl`: a programmatic dependent
    launch (grid_dependency; a `Bound` of it launches so too). Returns the compiled kernel
    (None under the interpreter), for `Bound`."""
    opts = {"maxnreg": maxnreg} if maxnreg else {}
    if pdl:
        opts["launch_pdl"] = True
    if type(fn).__name__ == "InterpretedFunction":  # TRITON_INTERPRET=1: nothing compiled
        fn[tuple(grid)](*args, num_warps=num_warps, num_stages=num_stages, **opts)
        return None
    device = driver.active.get_current_device()
    memo = _memo(fn, key, device, num_warps, num_stages, maxnreg, pdl)
    compiled = _COMPILED.get(memo)
    if compiled is None or hooked():  # profilers' launch hooks: Triton's own path calls them
        compiled = fn[tuple(grid)](*args, num_warps=num_warps, num_stages=num_stages, **opts)
        if compiled is not None:
            with _LOCK:
                _COMPILED[memo] = compiled
        return compiled
    stream = driver.active.get_current_stream(device)
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    compiled.run(grid[0], g1, g2, stream, compiled.function, compiled.packed_metadata, None,
                 None, None, *args)
    return compiled


def _memo(fn: Any, key: Hashable, device: int, num_warps: int, num_stages: int, maxnreg: int,
          pdl: bool) -> tuple:
    """What `launch` keeps a compiled specialization under."""
    return (id(fn), key, device, num_warps, num_stages, maxnreg, pdl)


def compiled_of(fn: Any, key: Hashable, *, num_warps: int, num_stages: int, maxnreg: int = 0,
                pdl: bool = False) -> Any:
    """The specialization `launch` compiled for these arguments on the current device (None if
    it has not): for tools that time its launcher apart (tools/host_profile.py)."""
    device = driver.active.get_current_device()
    return _COMPILED.get(_memo(fn, key, device, num_warps, num_stages, maxnreg, pdl))


class Bound:
    """One compiled specialization on one device, grid and stream, with every argument but a
    few per-call ones fixed (a prepared weight's plan: its buffers, the stream's workspace, the
    constants): the fixed buffers' pointers are kept as ints, which Triton's launcher reads as
    device addresses, skipping the data_ptr() call and cuPointerGetAttribute check it makes
    per tensor (H200 host, the wgmma kernel's 11 pointers: 8.8 -> 6.4 us a launch), and a call
    skips `launch`'s key building and memo lookup. Where the kernel takes tensor descriptors
    and Triton's launcher is the one `split_launcher` knows, the fixed descriptors are encoded
    once here and a per-call one once per (address, shape, strides) (`encoded`). Build it from
    `launch`'s return value outside CUDA-graph capture, from buffers that outlive it (a plan's
    own, the shared workspace); a call passes `current_stream`'s stream and the per-call
    values, in order."""

    __slots__ = ("_run", "_function", "_meta", "_grid", "_pieces", "encoded", "_raw", "_head",
                 "_encode", "_descs", "_seen")

    def __init__(self, compiled: Any, grid: Sequence[int], args: Sequence[Any],
                 per_call: Sequence[int]) -> None:
        self._run, self._function = compiled.run, compiled.function
        self._meta = compiled.packed_metadata
        self._grid = (*grid, 1, 1)[:3]
        split = split_launcher(compiled)
        self.encoded = split is not None
        self._seen: dict = {}
        descs: dict = {}  # (none without a split: Triton's launcher encodes them itself)
        if split is not None:  # the C launch: each fixed descriptor as its arguments, once
            self._raw, descs, coop_pdl, self._encode = split
            self._head = (*coop_pdl, None, None, self._meta, None, None, None)
        fixed = [(a.data_ptr(),) if isinstance(a, torch.Tensor) else
                 tuple(self._encode(a, descs[i])) if i in descs and i not in per_call else
                 (a,) for i, a in enumerate(args)]
        self._descs = tuple(descs.get(i) for i in per_call)
        cuts = (-1, *per_call, len(fixed))
        self._pieces = tuple(tuple(v for part in fixed[a + 1:b] for v in part)
                             for a, b in zip(cuts, cuts[1:]))

    def __call__(self, stream: Any, values: Sequence[Any]) -> None:
        pieces = self._pieces
        args = pieces[0]
        for value, meta, piece in zip(values, self._descs, pieces[1:]):
            args = args + (self._encoded(value, meta) if meta is not None else (value,)) + piece
        g = self._grid
        if self.encoded:
            self._raw(g[0], g[1], g[2], stream, self._function, *self._head, *args)
        else:
            self._run(g[0], g[1], g[2], stream, self._function, self._meta, None, None, None,
                      *args)

    def _encoded(self, desc: Any, meta: Any) -> tuple:
        """A per-call descriptor's launcher arguments, encoded once per (address, shape,
        strides): the CUtensorMap holds nothing else that changes (its box and swizzle are
        the kernel's). A few are kept (an eager decode loop's activations reuse addresses)."""
        key = (desc.base.data_ptr(), *desc.shape, *desc.strides, desc.padding)
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= 8:
                self._seen.clear()
            found = self._seen[key] = tuple(self._encode(desc, meta))
        return found


def split_launcher(compiled: Any) -> Any:
    """Triton 3.6's CUDA launcher of a kernel that takes tensor descriptors, opened up: (the C
    launch, {parameter index: descriptor metadata}, (cooperative, pdl), encode). That launcher
    encodes every descriptor argument into a CUtensorMap on every call
    (`make_tensordesc_arg`, cuTensorMapEncodeTiled); through this a `Bound` encodes its fixed
    ones once. None where the launcher is not built that way (other Triton versions, a kernel
    with scratch buffers or without descriptors): the Bound hands them to Triton as they are."""
    run = getattr(compiled, "run", None)
    inner = getattr(run, "launch", None)
    code, cells = getattr(inner, "__code__", None), getattr(inner, "__closure__", None)
    if code is None or not cells or getattr(run, "global_scratch_size", 1) or \
            getattr(run, "profile_scratch_size", 1):
        return None
    found = dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    from triton.backends.nvidia import driver as nvidia  # (every Triton wheel ships it)

    encode = getattr(nvidia, "make_tensordesc_arg", None)
    if set(found) != {"launcher", "tensordesc_indices", "tensordesc_meta"} or encode is None or \
            getattr(nvidia, "_BASE_ARGS_FORMAT_LEN", None) != 13 or \
            len(inspect.signature(encode).parameters) != 2:
        return None
    metas = found["tensordesc_meta"]
    if not metas or any(m is None for m in metas):
        return None
    descs = dict(zip(sorted(found["tensordesc_indices"]), metas))
    return found["launcher"], descs, (run.launch_cooperative_grid, run.launch_pdl), encode


def current_stream(device: int) -> Any:
    """The current stream of `device` when a `Bound` of it may run: the current device is it
    and no launch hooks are set (profilers: Triton's own path calls them); else None."""
    if hooked() or driver.active.get_current_device() != device:
        return None
    return driver.active.get_current_stream(device)


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host code: `triton.cdiv` is a constexpr_function in triton 3.6, ~3 us a
    call on the H200's host (measured), twice per activation-QDQ launch."""
    return -(-a // b)


def hooked() -> bool:
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


__all__ = ["Bound", "aligned", "cdiv", "compiled_count", "compiled_of", "constexpr_indices",
           "current_stream", "hooked", "intern", "launch", "launch_auto", "rows_aligned",
           "spec_key", "split_launcher"]
