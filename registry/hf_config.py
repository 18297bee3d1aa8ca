"""Map a Hugging Face `config.json` quantization_config to registry schemes, group by group.

A producer (Quark: `registry.hf_quark`, compressed-tensors: `registry.hf_compressed`) reads
its config into groups; each group is (the modules it targets, the producer's weight and
input-activation specs read into the six QuantKey fields, its JSON path). A group maps to the
catalog scheme whose *contract equals* the group's (names are never compared, so third-party
schemes count). A group that maps to nothing gets one line naming the file, the group's JSON
path, the producer field that did not fit, and the nearest scheme (fewest differing key
fields) with what differs. Excluded / ignored modules and parts no scheme covers (KV cache,
algorithms) are listed, never dropped.

Every message about a file reads `FILE:LINE: <json path>: message`, LINE being the line of the
offending value in config.json (or of its nearest parent present); a dict given instead of a
file keeps `<config dict>: <json path>: message`. The file is read strictly
(`registry.json_lines`: size cap, depth cap, no NaN, no duplicate keys, each one line).

    from registry.hf_config import group_for_module, schemes_from_config
    groups = schemes_from_config("model/config.json")
    for g in groups:
        print(g.path, g.targets, g.scheme.name if g.scheme else g.error or g.note)
    group_for_module(groups, "model.layers.0.mlp.down_proj")   # the entry deciding a module

The command line: `registry resolve --from-config PATH [--platform P] [--json]`.
Nothing here imports torch.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from registry.catalog import Catalog, load_schemes
from registry.contract import (QuantKey, Scheme, SchemeContract, ScaleDesc, _plain,
                               activation_problems)
from registry.errors import display_path
from registry.json_lines import JsonLines, JsonPath, JsonProblem, read_json_file, shorten

#: The QuantKey fields a producer's spec is read into (dotted as in scheme YAML).
KEY_FIELDS: tuple[str, ...] = ("format", "scale.format", "scale.granularity", "scale.block",
                               "scale.rounding", "static")
PRODUCERS: tuple[str, ...] = ("quark", "compressed-tensors")


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


@dataclass(frozen=True)
class ConfigSource:
    """Where a config came from: the name shown in messages, and the lines of a file."""

    shown: str
    lines: Optional[JsonLines] = None  # None: a dict, no lines

    def line(self, loc: JsonPath) -> Optional[int]:
        return None if self.lines is None else self.lines.line(loc)

    def where(self, loc: JsonPath) -> str:
        """`FILE:LINE` of the value at `loc` (`<config dict>` without a line)."""
        line = self.line(loc)
        return self.shown if line is None else f"{self.shown}:{line}"


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

    def key(self) -> QuantKey:
        """The QuantKey (ValueError when the facts do not form one)."""
        f = {k: v.value for k, v in self.facts.items()}
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
        """`weight.group_size: 64`: the producer field as written."""
        return f"{self.prefix}.{sub}: {dump(raw)}"

    def fact(self, key_field: str, value: Any, source: str) -> None:
        self.facts[key_field] = Fact(value, source)

    def problem(self, sub: str, raw: Any, text: str) -> None:
        self.problems.append((self.loc + (sub,), f"{self.said(sub, raw)} {text}"))

    def whole(self, text: str) -> None:
        """A problem with the spec itself (not one of its fields)."""
        self.problems.append((self.loc, text))

    def build(self) -> SpecReading:
        missing = [k for k in KEY_FIELDS if k not in self.facts]
        if missing:  # a producer bug, not a config problem
            raise AssertionError(f"{self.prefix}: key fields not read: {missing}")
        return SpecReading(self.role, self.prefix, dict(self.facts), tuple(self.problems),
                           self.loc)


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


# ---------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConfigGroup:
    """One group of a config, mapped (`scheme`), unmapped (`error`), or listed (`note`)."""

    source: str
    producer: str
    path: str
    kind: str
    targets: tuple[str, ...]
    scheme: Optional[Scheme] = None
    contract: Optional[SchemeContract] = None
    error: Optional[str] = None
    note: Optional[str] = None
    line: Optional[int] = None  # the line of the group (of the error's value when unmapped)

    @property
    def where(self) -> str:
        """`FILE:LINE` (`<config dict>` without a line): the prefix of this group's messages."""
        return self.source if self.line is None else f"{self.source}:{self.line}"

    @property
    def status(self) -> str:
        """mapped | unmapped | not quantized | not mapped."""
        if self.scheme is not None:
            return "mapped"
        if self.error is not None:
            return "unmapped"
        return "not mapped" if self.kind == "not mapped" else "not quantized"

    def match_rank(self, name: str, type_name: str = "Linear") -> Optional[int]:
        """How specifically this entry claims module `name` of class `type_name` (lower wins;
        -1: an exclude / ignore entry), None when it does not, by the producer's own rules
        (`hf_quark.target_rank`, `hf_compressed.target_rank`)."""
        if self.kind == "not mapped":
            return None
        if self.kind == "global":
            return 3
        if self.producer == "quark":
            from registry.hf_quark import target_rank
        else:
            from registry.hf_compressed import target_rank
        ranks = [target_rank(self.kind, t, name, type_name) for t in self.targets]
        return min((r for r in ranks if r is not None), default=None)

    def to_dict(self) -> dict[str, Any]:
        c = self.contract
        return {
            "config": self.source, "producer": self.producer, "path": self.path,
            "kind": self.kind, "targets": list(self.targets), "status": self.status,
            "scheme": self.scheme.name if self.scheme else None,
            "weight": str(c.weight) if c else None,
            "activation": str(c.activation) if c and c.activation else None,
            "error": self.error, "note": self.note, "line": self.line,
        }


def group_for_module(groups: Iterable[ConfigGroup], name: str,
                     type_name: str = "Linear") -> Optional[ConfigGroup]:
    """The entry that decides module `name` (class `type_name`): an exclude / ignore entry
    first, then the most specific group (first in config order on a tie); None if none."""
    best: Optional[tuple[int, int, ConfigGroup]] = None
    for i, g in enumerate(groups):
        r = g.match_rank(name, type_name)
        if r is not None and (best is None or (r, i) < best[:2]):
            best = (r, i, g)
    return best[2] if best else None


# ---------------------------------------------------------------------------------------------
# Reading the file
# ---------------------------------------------------------------------------------------------

def load_config(path_or_dict: Union[str, os.PathLike, Mapping[str, Any]]
                ) -> tuple[ConfigSource, dict]:
    """(where messages point, the parsed JSON object); ConfigError if it is not one."""
    if isinstance(path_or_dict, Mapping):
        return ConfigSource("<config dict>"), dict(path_or_dict)
    path = Path(path_or_dict)
    if path.is_dir():
        path = path / "config.json"
    shown = display_path(path)
    try:
        data, lines = read_json_file(path)
    except JsonProblem as p:
        where = shown if p.line is None else f"{shown}:{p.line}"
        raise ConfigError(f"{where}: {p.message}", unreadable=True) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{shown}:{lines.line(())}: a config.json holds a JSON object, got "
                          f"{dump(data)[:20]} (a {type(data).__name__})", unreadable=True)
    return ConfigSource(shown, lines), data


def find_quantization_config(data: Mapping[str, Any], src: ConfigSource
                             ) -> tuple[str, JsonPath, dict]:
    """(JSON path shown, JSON path, the quantization_config): top level, under text_config
    (multimodal configs such as Kimi K3), or the file itself when it is a bare
    quantization_config."""
    for path, loc, holder in (("quantization_config", ("quantization_config",), data),
                              ("text_config.quantization_config",
                               ("text_config", "quantization_config"), data.get("text_config"))):
        if isinstance(holder, Mapping) and "quantization_config" in holder:
            q = holder["quantization_config"]
            if not isinstance(q, Mapping):
                raise ConfigError(f"{src.where(loc)}: {path}: {dump(q)} is not an object")
            return path, loc, dict(q)
    if "quant_method" in data:
        return "", (), dict(data)
    raise ConfigError(f"{src.where(())}: no quantization_config (looked at quantization_config, "
                      "text_config.quantization_config and a bare config's quant_method): "
                      "is this model quantized?")


def read_config(path_or_dict) -> tuple[ConfigSource, ConfigReading]:
    """(where messages point, the producer's reading); ConfigError for an unreadable file,
    a missing quantization_config or an unsupported producer."""
    src, data = load_config(path_or_dict)
    root, loc, q = find_quantization_config(data, src)
    method = q.get("quant_method")
    where = field_path(root, "quant_method")
    if method == "quark":
        from registry.hf_quark import read_quark

        return src, read_quark(q, root, loc)
    if method == "compressed-tensors":
        from registry.hf_compressed import read_compressed

        return src, read_compressed(q, root, loc)
    what = "missing" if method is None else f"{dump(method)} is not supported"
    at = src.where(loc + ("quant_method",))
    raise ConfigError(f"{at}: {where}: {what}; supported producers: {', '.join(PRODUCERS)}")


# ---------------------------------------------------------------------------------------------
# Mapping a group to a scheme
# ---------------------------------------------------------------------------------------------

def key_values(key: Optional[QuantKey]) -> Optional[dict[str, Any]]:
    if key is None:
        return None
    s = key.scale
    return {"format": key.format, "scale.format": s.format, "scale.granularity": s.granularity,
            "scale.block": s.block, "scale.rounding": s.rounding, "static": s.static}


def _show(key_field: str, value: Any) -> str:
    if key_field == "static" and isinstance(value, bool):
        return "static" if value else "dynamic"
    if value is None:
        return "none"
    if isinstance(value, str):
        return value if len(value) <= 60 and value.isprintable() else dump(value)
    return str(value) if isinstance(value, (int, float)) else dump(value)


@dataclass(frozen=True)
class Difference:
    role: str
    key_field: str  # "" when the whole key is present on one side only
    config: str
    scheme: str
    source: str

    def __str__(self) -> str:
        where = f"{self.role} {self.key_field}" if self.key_field else self.role
        return f"{where}: {self.config} here ({self.source}), {self.scheme} in the scheme"


def differences(spec: Optional[SpecReading], key: Optional[QuantKey], role: str,
                absent_source: str) -> list[Difference]:
    """Field-wise differences; a key present on one side only differs in all its fields."""
    want = key_values(key)
    if spec is None and want is None:
        return []
    if spec is None or want is None:
        cfg = "none" if spec is None else "quantized"
        src = absent_source if spec is None else spec.field
        return [Difference(role, "", cfg, "none" if key is None else str(key), src)] * \
            len(KEY_FIELDS)
    return [Difference(role, k, _show(k, spec.facts[k].value), _show(k, want[k]),
                       spec.facts[k].source)
            for k in KEY_FIELDS if spec.facts[k].value != want[k]
            or type(spec.facts[k].value) is not type(want[k])]


def nearest_scheme(weight: Optional[SpecReading], activation: Optional[SpecReading],
                   catalog: Catalog, absent: tuple[str, str] = ("weight", "input activation")
                   ) -> Optional[tuple[Scheme, list[Difference]]]:
    """The catalog scheme with the fewest differing key fields (then the first by name)."""
    best = None
    for s in sorted(catalog.schemes.values(), key=lambda s: s.name):
        diffs = (differences(weight, s.weight, "weight", absent[0])
                 + differences(activation, s.activation, "activation", absent[1]))
        if best is None or len(diffs) < len(best[1]):
            best = (s, diffs)
    return best


def _describe(diffs: list[Difference], shown: int = 3) -> str:
    unique = list(dict.fromkeys(diffs))
    more = len(unique) - shown
    return "; ".join(str(d) for d in unique[:shown]) + (f"; and {more} more field(s)"
                                                        if more > 0 else "")


def _contract_of(weight: SpecReading, act: Optional[SpecReading]) -> tuple[
        Optional[SchemeContract], list[Problem]]:
    """The contract, or the problems (naming producer fields) that keep it from forming."""
    problems: list[Problem] = []
    keys = []
    for spec in (weight, act):
        if spec is None:
            keys.append(None)
            continue
        try:
            keys.append(spec.key())
        except ValueError as e:
            problems.append((spec.loc, f"{spec.field}: does not form a {spec.role} key: "
                                       f"{_plain(e)}"))
    if act is not None and keys[1] is not None:
        for _f, text in activation_problems(keys[1].scale.format, keys[1].static):
            problems.append((act.loc + (_STATIC_FIELD.get(act.field, act.field),),
                             f"{act.facts['static'].source} but {text}"))
    if problems:
        return None, problems
    return SchemeContract(weight=keys[0], activation=keys[1]), []


_STATIC_FIELD = {"input_tensors": "is_dynamic", "input_activations": "dynamic"}


def map_group(g: GroupReading, catalog: Catalog, src: ConfigSource, producer: str,
              absent: tuple[str, str], memo: Optional[dict] = None) -> ConfigGroup:
    """A group read by a producer, with its scheme or a one-line error at the line of the
    first offending value."""
    base = dict(source=src.shown, producer=producer, path=g.path, kind=g.kind,
                targets=g.targets)
    if g.note is not None:
        return ConfigGroup(**base, note=g.note, line=src.line(g.loc))
    problems = list(g.problems)
    for spec in (g.weight, g.activation):
        if spec is not None:
            problems += spec.problems
    contract = None
    if not problems and g.weight is None:
        problems = [(g.loc + (absent[0].split(":")[0],),
                     f"{absent[0]} but the group quantizes its inputs: activation-only "
                     "quantization has no registry scheme")]
    if not problems:
        contract, problems = _contract_of(g.weight, g.activation)
    memo = {} if memo is None else memo  # one config repeats a spec over many groups
    if contract is not None:
        matches = memo.get(str(contract))
        if matches is None:
            matches = memo[str(contract)] = sorted(
                (s for s in catalog.schemes.values() if s.contract == contract),
                key=lambda s: s.name)
        if matches:
            return ConfigGroup(**base, scheme=matches[0], contract=contract,
                               line=src.line(g.loc))
        problems = [(g.loc, f"no scheme in the catalog has this contract ({contract})")]
    sig = repr([None if r is None else sorted(r.facts.items()) for r in (g.weight, g.activation)])
    hint = memo.get(sig)
    if hint is None:
        near = nearest_scheme(g.weight, g.activation, catalog, absent)
        hint = ""
        if near is not None:
            s, diffs = near
            hint = (f"; nearest scheme {s.name} differs in {_describe(diffs)}" if diffs
                    else f"; nearest scheme {s.name}")
        memo[sig] = hint
    line = src.line(problems[0][0])
    where = src.shown if line is None else f"{src.shown}:{line}"
    text = "; ".join(t for _, t in problems)
    return ConfigGroup(**base, contract=contract, line=line,
                       error=f"{where}: {g.path}: {text}{hint}")


def schemes_from_config(path_or_dict: Union[str, os.PathLike, Mapping[str, Any]],
                        catalog: Optional[Catalog] = None) -> list[ConfigGroup]:
    """Every group of a HF config (a config.json path, its directory, the parsed dict, or a
    bare quantization_config) with its scheme (`.scheme`), or why none fits (`.error`), and
    the not-quantized / not-mapped entries (`.note`). ConfigError when the file cannot be
    read as a Quark or compressed-tensors config. `catalog`: default `load_schemes()`."""
    catalog = catalog if catalog is not None else load_schemes()
    src, reading = read_config(path_or_dict)
    absent = {"quark": ("weight: null", "input_tensors: null"),
              "compressed-tensors": ("weights: null", "input_activations: null")}
    memo: dict = {}
    return [map_group(g, catalog, src, reading.producer, absent[reading.producer], memo)
            for g in reading.groups]


__all__ = ["ConfigError", "ConfigGroup", "KEY_FIELDS", "group_for_module", "nearest_scheme",
           "read_config", "schemes_from_config"]
