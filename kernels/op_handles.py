"""Int handles naming live Python objects for the `ocp_mx::` custom ops.

Why: an op schema carries tensors, ints, floats and dtypes, not a kernel, its prepared weight or
a layer. A layer registers what its op needs once and passes the int; the handle is a constant in
compiled graphs, so re-pointing it (`update`) recompiles nothing. Handles are process-local and
unique across every table (one counter), so a handle given to the wrong op fails as unknown.
`takes_op` says when a call goes through its op rather than the kernel directly.
"""
from __future__ import annotations

import itertools
from typing import Any, Optional

import torch
from torch import Tensor

_NEXT = itertools.count(1)


class UnknownHandleError(LookupError):
    """An `ocp_mx::` op was given a handle no live layer registered."""


class HandleTable:
    """handle -> object for one op; `release` is safe to call twice (finalizers may run late)."""

    def __init__(self, op: str, how: str) -> None:
        self._op, self._how = op, how
        self._entries: dict[int, Any] = {}

    def register(self, value: Any) -> int:
        handle = next(_NEXT)
        self._entries[handle] = value
        return handle

    def update(self, handle: int, value: Any) -> None:
        if handle not in self._entries:
            raise self.unknown(handle)
        self._entries[handle] = value

    def release(self, handle: int) -> None:
        self._entries.pop(handle, None)

    def lookup(self, handle: int) -> Any:
        """The object of `handle`; a one-line UnknownHandleError if there is none."""
        if handle not in self._entries:
            raise self.unknown(handle)
        return self._entries[handle]

    def __len__(self) -> int:
        return len(self._entries)

    def unknown(self, handle: int) -> UnknownHandleError:
        """The one-line error for a handle with no live object (raise it)."""
        return UnknownHandleError(self._unknown(handle))

    def _unknown(self, handle: int) -> str:
        return (f"{self._op}: unknown handle {handle} (released, or registered in another "
                f"process); build the MX layer in this process and keep it alive while its "
                f"compiled graph runs ({self._how} gives a handle)")


def takes_op(*tensors: Optional[Tensor]) -> bool:
    """Whether a call on these inputs goes through its `ocp_mx::` op: while torch.compile /
    export traces, and where autograd records the call (grad mode on, one of them requires
    grad), whose autograd formula gives every kernel the same gradients (a Triton kernel's
    output has no grad_fn of its own). Else the kernel runs directly: no op dispatch, whose
    host cost every eager inference call would pay."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


__all__ = ["HandleTable", "UnknownHandleError", "takes_op"]
