"""`backend=` and a device -> the kernel resolve chooses, and its implementation.

kernels.mx (mx_quantize / mx_dequantize / mx_qdq), the activation-QDQ dispatcher and
kernels.moe take `backend=`; this module turns it into a resolution, so there is one chooser
(kernels.select.resolve) and no `auto` rule of its own:

- "auto": resolve(kind=...) picks, for the device's platform, with the environment's
  REGISTRY_DISABLED_KERNELS / REGISTRY_STRICT (kernels.select.resolve.resolve_cached: cached,
  so a per-call choice costs a few dict reads; no device sync);
- a kernel's short `backend` name ("triton", "reference", declared per kernel): that kernel,
  forced (a `forced` deviation; strict mode refuses it, as `force=` for a linear layer);
- a qdq kernel's own name ("triton-qdq", "reference-qdq"): its implementation as is, no choice.
  For kernels that run that QDQ inside themselves (declared in their `uses`, so their own
  resolution already refused them when it is disabled) and for oracles.
"""
from __future__ import annotations

import functools
from typing import Any

from kernels.select.declarations import ALL_KERNELS, KINDS
from kernels.select.kernel_table import load_impl
from kernels.select.resolve import Resolution, ResolutionError, resolve_cached
from kernels.spec.contract import QuantKey
from kernels.spec.platform import device_platform

__all__ = ["AUTO", "KernelChoiceError", "backends", "forced_kernel", "check_backend", "choose",
           "kernel_names", "implementation", "mx_key"]

AUTO = "auto"
#: kind -> {backend name: kernel name}, from the declarations (KernelDecl.backend).
_FORCES: dict[str, dict[str, str]] = {
    kind: {d.backend: d.name for d in ALL_KERNELS if d.kind == kind and d.backend}
    for kind in KINDS
}

_FORCED_BY = {b: f"backend={b!r}" for forces in _FORCES.values() for b in forces}


class KernelChoiceError(ResolutionError, ValueError):
    """resolve refused the choice (nothing implements it here, or strict mode); one line, and a
    ValueError like the API's other argument errors."""


def backends(kind: str) -> tuple[str, ...]:
    """The `backend=` values a kind takes: "auto" and each kernel's short name."""
    return (AUTO, *sorted(_FORCES[kind]))


def kernel_names(kind: str) -> tuple[str, ...]:
    """The built-in kernels of a kind, by name (a qdq kernel's name is a `backend=` value too)."""
    return tuple(d.name for d in ALL_KERNELS if d.kind == kind)


def forced_kernel(kind: str, backend: str) -> str | None:
    """The kernel a `backend=` value forces (None for "auto")."""
    return None if backend == AUTO else _FORCES[kind][backend]


def check_backend(kind: str, backend: Any, where: str = "") -> str:
    """`backend`, or a one-line ValueError listing the valid values."""
    if backend in _FORCES[kind] or backend == AUTO:
        return backend
    if kind == "qdq" and backend in kernel_names("qdq"):
        return backend
    extra = f" (or a qdq kernel: {', '.join(kernel_names('qdq'))})" if kind == "qdq" else ""
    raise ValueError(f"{where}unknown backend {backend!r}; valid backends: "
                     f"{', '.join(backends(kind))}{extra}")


def choose(kind: str, subject, device, backend: str = AUTO) -> Resolution:
    """The resolution for `subject` (a QuantKey for qdq, a contract for moe) on the platform of
    `device`, "auto" or forced by `backend`; KernelChoiceError when resolve refuses."""
    force = None if backend == AUTO else _FORCES[kind][backend]
    try:
        return resolve_cached(subject, device_platform(device), kind=kind, force=force,
                              forced_by=_FORCED_BY.get(backend, ""))
    except ResolutionError as e:
        raise KernelChoiceError(str(e), e.resolution) from None


@functools.lru_cache(maxsize=None)
def implementation(name: str) -> Any:
    """The imported implementation of a built-in kernel (its declaration's `impl`)."""
    return load_impl(name)


@functools.lru_cache(maxsize=None)
def mx_key(fmt: str, rounding: str) -> QuantKey:
    """The dynamic MX key a bare (format, rounding) is resolved as: quantizing computes each
    block's scale from the data, which is what the dynamic key names."""
    return QuantKey.mx(fmt, rounding=rounding, static=False)
