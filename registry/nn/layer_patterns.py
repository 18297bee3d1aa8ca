"""Layer-selection patterns: which of a model's layers a `targets` / `ignore` / scheme-mapping
entry names. Kept apart from `registry.nn.quantize` so the matching rules live in one place.

A pattern is
- `re:REGEX`: `re.match` on the layer name (anchored at the start only, as compressed-tensors
  reads `re:` targets), e.g. `re:.*mlp\\..*`;
- a glob holding `*`, `?` or `[`: `fnmatch` on the layer name, case-sensitive (Quark's exclude
  style, e.g. `*lm_head`);
- anything else: the exact layer name (`model.named_modules()`), or the class name of the module
  or of one of its base classes (`Linear` matches nn.Linear and its subclasses).
"""
from __future__ import annotations

import fnmatch
import re
from typing import Iterable, Optional, Union

from torch import nn

from registry.nn.layers import MXLinear


def module_class_names(module: nn.Module) -> set[str]:
    """The class names a pattern may use for `module` (an MXLinear also answers to `Linear`)."""
    names = {c.__name__ for c in type(module).__mro__ if c not in (nn.Module, object)}
    return names | {"Linear"} if isinstance(module, MXLinear) else names


class LayerPatterns:
    """An ordered list of patterns (see the module docstring) and which of them ever matched."""

    def __init__(self, what: str, patterns: Union[str, Iterable[str]]):
        self.what = what
        self.items = (patterns,) if isinstance(patterns, str) else tuple(patterns)
        self.used: set[str] = set()
        self._regex: dict[str, re.Pattern] = {}
        for p in self.items:
            if not isinstance(p, str) or not p:
                raise ValueError(f"{what} entries must be non-empty strings, got {p!r}")
            if p.startswith("re:"):
                try:
                    self._regex[p] = re.compile(p[3:])
                except re.error as e:
                    raise ValueError(f"{what} entry {p!r}: bad regular expression ({e})") from None

    def matches(self, p: str, name: str, module: nn.Module) -> bool:
        if p in self._regex:
            return self._regex[p].match(name) is not None
        if any(c in p for c in "*?["):
            return fnmatch.fnmatchcase(name, p)
        return p == name or p in module_class_names(module)

    def first(self, name: str, module: nn.Module) -> Optional[str]:
        hit = next((p for p in self.items if self.matches(p, name, module)), None)
        if hit is not None:
            self.used.add(hit)
        return hit

    def class_names(self) -> list[str]:
        return [p for p in self.items if p not in self._regex and not any(c in p for c in "*?[")]

    def unused(self) -> list[str]:
        return [p for p in self.items if p not in self.used]


def check_shared_names(first: str, name: str, module: nn.Module,
                       patterns: Iterable[LayerPatterns]) -> None:
    """A module reachable by two names must get one decision under both."""
    for pats in patterns:
        if pats.first(first, module) != pats.first(name, module):
            raise ValueError(f"layer {first} is also reachable as {name}, and {pats.what} treats "
                             "the two names differently; name both or neither")


__all__ = ["LayerPatterns", "check_shared_names", "module_class_names"]
