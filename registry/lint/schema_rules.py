"""The rules that tie a scheme file's fields together, written as JSON Schema.

The pydantic file models (registry.files.schema) only describe shapes and spellings; `registry lint`
also applies the MX rules of kernels.spec.contract and the kernel table's (the activation-QDQ
dispatcher's keys, and a kernel on each lint platform). An editor or a CI validator sees only
the exported JSON Schema, so every one of those rules that JSON Schema can express is added here
as `if` / `then` / `const`: a file the exported schema accepts is a file lint passes.

The keys each role may hold are not written out by hand: they are read from the built-in kernel
declarations (`kernels.select.declarations`, data only), as `registry.lint.kernel_checks` reads
them, and the contract rules (`QuantKey` refuses what `kernels.spec.contract` refuses). Kernel
plugins are left out, so the exported schema is the same on every machine.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any, Iterable, Optional

from kernels.spec.contract import (ELEMENT_FORMATS, GRANULARITIES, MX_BLOCK, MX_FORMATS, ROUNDINGS,
                                   SCALE_FORMATS, QuantKey, SchemeContract, activation_problems,
                                   key_problems, scale_problems)

Schema = dict[str, Any]


def _when(field: str, values: Iterable[Any]) -> Schema:
    """`if` for "`field` is present and one of `values`"."""
    values = list(values)
    test = {"const": values[0]} if len(values) == 1 else {"enum": values}
    return {"required": [field], "properties": {field: test}}


def _one_of(values: Iterable[Any]) -> Schema:
    values = list(values)
    return {"const": values[0]} if len(values) == 1 else {"enum": values}


# ---------------------------------------------------------------------------------------------
# kernels.spec.contract's rules (scale_problems, key_problems)
# ---------------------------------------------------------------------------------------------

def scale_rules() -> list[Schema]:
    """`scale:` rules: e8m0 is per block of 32 with a rounding; fp32 per tensor or token."""
    return [
        {"if": _when("format", ["e8m0"]),
         "then": {"required": ["rounding"],
                  "properties": {"granularity": {"enum": ["block", None]},
                                 "block": {"enum": [MX_BLOCK, None]},
                                 "rounding": {"enum": list(ROUNDINGS)}}},
         "$comment": f"e8m0 scales: per block of {MX_BLOCK} (OCP MX), a rounding is required"},
        {"if": _when("format", ["fp32"]),
         "then": {"required": ["granularity"],
                  "properties": {"granularity": {"enum": [g for g in GRANULARITIES
                                                          if g != "block"]},
                                 "block": {"type": "null"}, "rounding": {"type": "null"}}},
         "$comment": "fp32 scales: per tensor or per token; no block size, no rounding"},
    ]


def tensor_rules() -> list[Schema]:
    """`weight:` / `activation:` rules: which scale an element format takes; static token."""
    non_mx = [f for f in ELEMENT_FORMATS if f not in MX_FORMATS]
    return [
        {"if": _when("format", MX_FORMATS),
         "then": {"properties": {"scale": {"properties": {"format": {"const": "e8m0"}}}}},
         "$comment": "MX element formats take e8m0 block scales"},
        {"if": _when("format", non_mx),
         "then": {"properties": {"scale": {"properties": {"format": {"const": "fp32"}}}}},
         "$comment": "non-MX element formats take an fp32 scale"},
        {"if": {"required": ["scale"], "properties": {"scale": _when("granularity", ["token"])}},
         "then": {"properties": {"static": {"const": False}}},
         "$comment": "a per-token scale is computed at run time"},
    ]


# ---------------------------------------------------------------------------------------------
# The kernel table's rules: the keys a role may hold
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def valid_keys() -> tuple[QuantKey, ...]:
    """Every key kernels.spec.contract accepts (a small, finite set), found by its own rules."""
    out = []
    for fmt, sfmt, gran, rnd, static in itertools.product(
            ELEMENT_FORMATS, SCALE_FORMATS, GRANULARITIES, (None,) + ROUNDINGS, (True, False)):
        block = MX_BLOCK if gran == "block" else None
        if not key_problems(fmt, sfmt) and not scale_problems(sfmt, gran, block, rnd, static):
            out.append(QuantKey(format=fmt, scale=dict(format=sfmt, granularity=gran,
                                                       block=block, rounding=rnd,
                                                       static=static)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def lint_keys() -> tuple[frozenset[QuantKey], frozenset[Optional[QuantKey]]]:
    """(weight keys, activation keys, None meaning `none`) of the contracts that pass lint's
    kernel checks: the dispatcher has the activation key and a built-in kernel implements the
    contract on every lint platform."""
    from kernels.select.activation_keys import DISPATCH_KEYS
    from kernels.select.declarations import KERNELS
    from registry.lint.kernel_checks import LINT_PLATFORMS
    from kernels.spec.platform import platform_of
    from kernels.select.resolve import accepts

    platforms = [platform_of(p) for p in LINT_PLATFORMS]
    acts = [None] + [k for k in valid_keys() if k in DISPATCH_KEYS
                     and not activation_problems(k.scale.format, k.static)]
    weights: set[QuantKey] = set()
    activations: set[Optional[QuantKey]] = set()
    for w, a in itertools.product(valid_keys(), acts):
        contract = SchemeContract(weight=w, activation=a)
        if all(any(d.runs_on(p) and accepts(d, contract, p)[0] for d in KERNELS)
               for p in platforms):
            weights.add(w)
            activations.add(a)
    return frozenset(weights), frozenset(activations)


def _exact(key: QuantKey) -> Schema:
    """A tensor holding exactly `key`."""
    s = key.scale
    return {"properties": {
        "static": {"const": s.static},
        "scale": {"properties": {
            "format": {"const": s.format},
            "granularity": {"enum": ["block", None]} if s.format == "e8m0"
            else {"const": s.granularity},
            "rounding": {"const": s.rounding} if s.rounding else {"type": "null"}}}}}


def _then_for(keys: list[QuantKey]) -> Schema:
    """The `then` for one element format: per-field enums when `keys` are every valid key
    with those field values, else the keys one by one."""
    fields = {"scale": sorted({k.scale.format for k in keys}),
              "granularity": sorted({k.scale.granularity for k in keys}),
              "rounding": sorted({k.scale.rounding or "" for k in keys}),
              "static": sorted({k.static for k in keys}, reverse=True)}
    same = {k for k in valid_keys() if k.format == keys[0].format
            and k.scale.format in fields["scale"] and k.scale.granularity in fields["granularity"]
            and (k.scale.rounding or "") in fields["rounding"] and k.static in fields["static"]}
    if same != set(keys) or len(fields["scale"]) != 1:
        return {"anyOf": [_exact(k) for k in sorted(keys, key=str)]}
    scale: Schema = {}  # its format follows from the element format (tensor_rules)
    if fields["scale"] == ["fp32"] and len(fields["granularity"]) < 2:
        scale["granularity"] = _one_of(fields["granularity"])
    if fields["scale"] == ["e8m0"] and len(fields["rounding"]) < len(ROUNDINGS):
        scale["rounding"] = _one_of(fields["rounding"])
    props: Schema = {"scale": {"properties": scale}} if scale else {}
    if len(fields["static"]) == 1:
        props["static"] = {"const": fields["static"][0]}
    return {"properties": props}


def role_rules(keys: Iterable[Optional[QuantKey]], role: str) -> list[Schema]:
    """Rules that hold a `weight:` / `activation:` mapping to `keys` (None ignored here)."""
    keys = [k for k in keys if k is not None]
    formats = [f for f in ELEMENT_FORMATS if any(k.format == f for k in keys)]
    rules: list[Schema] = [{"properties": {"format": {"enum": formats}},
                            "$comment": f"element formats a built-in kernel implements as the "
                                        f"{role} on every lint platform"}]
    by_then: dict[str, tuple[list[str], Schema]] = {}
    for f in formats:
        then = _then_for([k for k in keys if k.format == f])
        by_then.setdefault(repr(then), ([], then))[0].append(f)
    for fmts, then in by_then.values():
        rules.append({"if": _when("format", fmts), "then": then,
                      "$comment": f"the {role} keys lint accepts for {', '.join(fmts)}"})
    return rules
