"""What a producer read from a HF quantization_config (between the producers and the mapping).

`registry.configs.hf_quark` and `registry.configs.hf_compressed` read their config into these
types (a `ConfigReading` of `GroupReading`s, each with `SpecReading`s of `Fact`s, built by
`SpecBuilder`); `registry.configs.hf_config` maps them to catalog schemes. The helpers here write
config values and JSON paths into one-line messages the same way for every producer.
Imports no producer and not `registry.configs.hf_config` (the arrows point one way). No torch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from kernels.spec.contract import QuantKey, ScaleDesc
from registry.configs.json_lines import JsonPath, one_line, shorten

#: The QuantKey fields a producer's spec is read into (dotted as in scheme YAML).
KEY_FIELDS: tuple[str, ...] = ("format", "scale.format", "scale.granularity", "scale.block",
                               "scale.rounding", "static")


class ConfigError(ValueError):
    """The file cannot be read as a quantization config at all (one line, names the file).
    `unreadable`: no JSON object could be read (as opposed to a JSON config that is not a
    Quark / compressed-tensors quantization config)."""

    def __init__(self, message: str, *, unreadable: bool = False):
        super().__init__(message)
        self.unreadable = unreadable


def dump(value: Any) -> str:
    """A config value as it is written in JSON (true, null, "fp4"), cut to 60 characters (a
    megabyte value is never echoed; JSON escapes keep it one line)."""
    try:
        return shorten(json.dumps(value, ensure_ascii=True))
    except (TypeError, ValueError, RecursionError):
        return shorten(ascii(value))


def lookup(table: Mapping, value: Any) -> Any:
    """`table.get(value)`, None for a value that cannot be a key (a list or object)."""
    plain = (str, int, float, type(None))
    if isinstance(value, plain) or (isinstance(value, tuple)
                                    and all(isinstance(v, plain) for v in value)):
        return table.get(value)
    return None


def integral(value: Any) -> Any:
    """A JSON number with an integral value as an int (`32.0` -> 32), anything else unchanged.

    Why: JSON has one number type, and both producers' readers take 32.0 as 32 (compressed-
    tensors' pydantic int fields in lax mode, vLLM's Quark `== 32` checks), so the registry
    does too. Only numbers: `true`, `"32"`, 32.5 stay as written and are reported by the
    producer's checks (a QuantKey field never receives a float)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def regex_problem(pattern: str) -> Optional[str]:
    """Why a `re:` target / ignore / exclude pattern cannot be used (matching modules against
    it later would raise), or None."""
    if not pattern.startswith("re:"):
        return None
    try:
        re.compile(pattern[3:])
    except (re.error, RecursionError, OverflowError) as e:
        return f"{dump(pattern)} is not a valid regular expression: {shorten(str(e))}"
    return None


Problem = tuple  # (absolute JSON path of the offending value, one clause naming the field)


def key_path(path: str, key: Any) -> str:
    """`path["key"]` for a key the config's author chose, `path[3]` for a list index."""
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}[{dump(key)}]"


def field_path(path: str, name: str) -> str:
    """`path.name` for a fixed field of the producer's schema (`path` may be the root)."""
    return f"{path}.{name}" if path else name


# ---------------------------------------------------------------------------------------------
# What the producers read (hf_quark / hf_compressed build these)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fact:
    """One key field as the producer wrote it: the value in registry terms (or the raw value
    when it has none) and where it came from (`weight.group_size: 64`, or `implied ...`)."""

    value: Any
    source: str


@dataclass(frozen=True)
class SpecReading:
    """One tensor spec (weight or input activation) read into the six key fields."""

    role: str  # "weight" | "activation"
    field: str  # the spec's key inside its group: "weight", "input_tensors", "weights", ...
    facts: Mapping[str, Fact]
    problems: tuple[Problem, ...] = ()  # (JSON path, one clause naming the producer field)
    loc: JsonPath = ()  # the spec's absolute JSON path
    #: the checkpoint stores these values and their scales (a packed weight): the producer's
    #: scale rounding never runs when loading, so it does not decide the scheme (hf_matching)
    stored: bool = False

    def key(self, rounding: Any = "(as read)") -> QuantKey:
        """The QuantKey (ValueError when the facts do not form one); `rounding` replaces the
        scale rounding read (a stored weight matched against a scheme's)."""
        f = {k: v.value for k, v in self.facts.items()}
        if rounding != "(as read)":
            f["scale.rounding"] = rounding
        return QuantKey(format=f["format"], scale=ScaleDesc(
            format=f["scale.format"], granularity=f["scale.granularity"],
            block=f["scale.block"], static=f["static"], rounding=f["scale.rounding"]))


class SpecBuilder:
    """Collects the facts and problems of one spec (`prefix` is the spec's field name)."""

    def __init__(self, role: str, prefix: str, loc: JsonPath = ()):
        self.role, self.prefix = role, prefix
        self.loc = tuple(loc) or (prefix,)  # the spec's absolute JSON path
        self.facts: dict[str, Fact] = {}
        self.problems: list[Problem] = []

    def said(self, sub: str, raw: Any) -> str:
        """`weight.group_size: 64`: the producer field as written (`group_size: 64` for a
        producer whose fields are flat, prefix "")."""
        return f"{field_path(self.prefix, sub)}: {dump(raw)}"

    def fact(self, key_field: str, value: Any, source: str) -> None:
        self.facts[key_field] = Fact(value, source)

    def problem(self, sub: str, raw: Any, text: str) -> None:
        self.problems.append((self.loc + (sub,), f"{self.said(sub, raw)} {text}"))

    def whole(self, text: str) -> None:
        """A problem with the spec itself (not one of its fields)."""
        self.problems.append((self.loc, text))

    def build(self, stored: bool = False) -> SpecReading:
        missing = [k for k in KEY_FIELDS if k not in self.facts]
        if missing:  # a producer bug, not a config problem
            raise AssertionError(f"{self.prefix}: key fields not read: {missing}")
        return SpecReading(self.role, self.prefix, dict(self.facts), tuple(self.problems),
                           self.loc, stored)


@dataclass(frozen=True)
class GroupReading:
    """A producer's group: targets, specs and group-level problems (e.g. quantized outputs).

    kind: "global" | "layer name" | "layer type" (Quark), "config group" (compressed-tensors),
    "exclude" / "ignore" (not quantized), "not mapped" (listed parts no scheme covers).
    """

    path: str
    kind: str
    targets: tuple[str, ...]
    weight: Optional[SpecReading] = None
    activation: Optional[SpecReading] = None
    problems: tuple[Problem, ...] = ()  # (absolute JSON path, clause)
    note: Optional[str] = None  # set for not-quantized / not-mapped entries
    loc: JsonPath = ()  # the group's absolute JSON path


@dataclass(frozen=True)
class ConfigReading:
    producer: str
    root: str  # JSON path of quantization_config ("" when the file is the bare config)
    groups: tuple[GroupReading, ...]


def exclude_entry(path: str, kind: str, pattern: Any, loc: JsonPath) -> GroupReading:
    """One exclude / ignore entry: a note, or a problem when it is not a usable pattern (not
    text, or a `re:` pattern that does not compile: matching would raise later)."""
    if not isinstance(pattern, str):
        return GroupReading(path, kind, (), loc=loc, problems=((loc, (
            f"{dump(pattern)} is not a module name or pattern (text)")),))
    bad = regex_problem(pattern)
    if bad is not None:
        return GroupReading(path, kind, (), loc=loc, problems=((loc, bad),))
    return GroupReading(path, kind, (pattern,), loc=loc,
                        note=f"not quantized ({kind} pattern {one_line(pattern)})")


def excluded_modules(q: Mapping[str, Any], root: str, loc: JsonPath, field: str,
                     expected: str) -> list[GroupReading]:
    """The modules a config leaves unquantized (Quark `exclude`, compressed-tensors `ignore`):
    one entry per pattern, or one problem when `field` is not a list (`expected` names what
    it should hold)."""
    entries = q.get(field) or []
    path = field_path(root, field)
    floc = loc + (field,)
    if not isinstance(entries, list):
        return [GroupReading(path, field, (), loc=floc, problems=((floc, (
            f"{dump(entries)[:40]} is not a list of {expected}")),))]
    return [exclude_entry(key_path(path, i), field, pattern, floc + (i,))
            for i, pattern in enumerate(entries)]


__all__ = ["KEY_FIELDS", "ConfigError", "ConfigReading", "Fact", "GroupReading", "Problem",
           "SpecBuilder", "SpecReading", "dump", "exclude_entry", "excluded_modules",
           "field_path", "integral", "key_path", "lookup", "regex_problem"]
