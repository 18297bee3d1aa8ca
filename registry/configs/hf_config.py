"""Map a Hugging Face `config.json` quantization_config to registry schemes, group by group.

A producer (Quark: `registry.configs.hf_quark`, compressed-tensors:
`registry.configs.hf_compressed`, AutoRound: `registry.configs.hf_autoround`, gpt-oss's
`quant_method: "mxfp4"`: `registry.configs.hf_gptoss`) reads its config into groups; each group
is (the modules it targets, the producer's weight and input-activation specs read into the six
QuantKey fields, its JSON path). A group maps to the catalog scheme whose *contract equals* the
group's (names are never compared, so third-party schemes count), or, for weights the checkpoint
stores with their scales, to the scheme equal in all but the weight's scale rounding, with a
caveat (`registry.configs.hf_matching`). A group that maps to nothing gets one short line naming
the file, the group's JSON path, the producer field that did not fit, and the nearest scheme
(fewest differing key fields) with what differs, when the group is OCP MX-shaped. Excluded / ignored modules and parts no scheme
covers (KV cache, algorithms) are listed, never dropped. A JSON number with an integral value
reads as that integer (`"group_size": 32.0` is 32, as both producers read it;
`hf_reading.integral`); text ("32") and booleans never do. A target two compressed-tensors
groups share is an error, and so is a module two groups claim alike
(`registry.configs.hf_claims`).

Every message about a file reads `FILE:LINE: <json path>: message`, LINE being the line of the
offending value in config.json (or of its nearest parent present); a dict given instead of a
file keeps `<config dict>: <json path>: message`. The file is read strictly
(`registry.configs.json_lines`: size cap, depth cap, no NaN, no duplicate keys, each one line).
The types a producer reads into (Fact, SpecReading, GroupReading, ConfigReading) and the
message helpers live in `registry.configs.hf_reading`; they are re-exported here.

    from registry.configs.hf_config import group_for_module, schemes_from_config
    groups = schemes_from_config("model/config.json")
    for g in groups:
        print(g.path, g.targets, g.scheme.name if g.scheme else g.error or g.note)
    group_for_module(groups, "model.layers.0.mlp.down_proj")   # the entry deciding a module

The command line: `registry resolve --from-config PATH [--platform P] [--json]`.
Nothing here imports torch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from kernels.spec.contract import QuantKey, SchemeContract, activation_problems, plain_message
from registry.configs.hf_autoround import METHODS as AUTOROUND_METHODS
from registry.configs.hf_autoround import read_autoround
from registry.configs.hf_autoround import target_rank as autoround_rank
from registry.configs.hf_claims import ClaimError, decide, shared_targets
from registry.configs.hf_compressed import read_compressed
from registry.configs.hf_compressed import target_rank as compressed_rank
from registry.configs.hf_gptoss import read_gptoss
from registry.configs.hf_gptoss import target_rank as gptoss_rank
from registry.configs.hf_matching import (exact_matches, hint, nearest_scheme, refusal,
                                          stored_match)
from registry.configs.hf_quark import read_quark
from registry.configs.hf_quark import target_rank as quark_rank
from registry.contract import Scheme
from registry.errors import display_path
from registry.files.catalog import Catalog, load_schemes
# The reading layer, re-exported: `from registry.configs.hf_config import ConfigError, ...`
from registry.configs.hf_reading import (KEY_FIELDS, ConfigError, ConfigReading, Fact,
                                         GroupReading, Problem, SpecBuilder, SpecReading, dump,
                                         field_path, key_path, lookup, regex_problem)
from registry.configs.json_lines import JsonLines, JsonPath, JsonProblem, read_json_file

PRODUCERS: tuple[str, ...] = ("quark", "compressed-tensors", "auto-round", "gpt-oss")
#: the quant_method spellings read, as shown in the refusal of any other
METHODS_SHOWN = 'quark, compressed-tensors, auto-round, mxfp4 (gpt-oss)'
#: producer -> its rule of which entry claims a module (`ConfigGroup.target_rank`)
_RANKS = {"quark": quark_rank, "compressed-tensors": compressed_rank,
          "auto-round": autoround_rank, "gpt-oss": gptoss_rank}
#: producer -> (what an absent weight / activation spec is written as)
_ABSENT = {"quark": ("weight: null", "input_tensors: null"),
           "compressed-tensors": ("weights: null", "input_activations: null"),
           "auto-round": ("bits: 16", "act_bits: 16"),
           "gpt-oss": ("quant_method: \"mxfp4\"", "quant_method: \"mxfp4\"")}


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
    target_lines: tuple[Optional[int], ...] = ()  # the line of each target, as `targets`
    #: what a mapped group's user should know: e.g. stored weight scales whose producer
    #: rounding differs from the scheme's (loading is exact; re-quantizing would differ)
    caveats: tuple[str, ...] = ()

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
        ranks = [self.target_rank(t, name, type_name) for t in self.targets]
        return min((r for r in ranks if r is not None), default=None)

    def target_rank(self, target: str, name: str, type_name: str = "Linear") -> Optional[int]:
        """How specifically one of this entry's targets claims module `name` (as match_rank)."""
        return _RANKS[self.producer](self.kind, target, name, type_name)

    def to_dict(self) -> dict[str, Any]:
        c = self.contract
        return {
            "config": self.source, "producer": self.producer, "path": self.path,
            "kind": self.kind, "targets": list(self.targets), "status": self.status,
            "scheme": self.scheme.name if self.scheme else None,
            "weight": str(c.weight) if c else None,
            "activation": str(c.activation) if c and c.activation else None,
            "error": self.error, "note": self.note, "line": self.line,
            "caveats": list(self.caveats),
        }


def group_for_module(groups: Iterable[ConfigGroup], name: str,
                     type_name: str = "Linear") -> Optional[ConfigGroup]:
    """The entry that decides module `name` (class `type_name`): an exclude / ignore entry
    first, then the most specific group (first in config order on a tie); None if none.
    ClaimError (a ValueError) when two compressed-tensors config groups claim it alike
    (`registry.configs.hf_claims`)."""
    return decide(groups, name, type_name)


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
        return src, read_quark(q, root, loc)
    if method == "compressed-tensors":
        return src, read_compressed(q, root, loc)
    if isinstance(method, str) and method in AUTOROUND_METHODS:
        return src, read_autoround(q, root, loc)
    if method == "mxfp4":
        return src, read_gptoss(q, root, loc)
    what = "missing" if method is None else f"{dump(method)} is not supported"
    at = src.where(loc + ("quant_method",))
    raise ConfigError(f"{at}: {where}: {what}; supported quant_method values: {METHODS_SHOWN}")


# ---------------------------------------------------------------------------------------------
# Mapping a group to a scheme
# ---------------------------------------------------------------------------------------------

def _contract_of(weight: SpecReading, act: Optional[SpecReading]) -> tuple[
        Optional[SchemeContract], list[Problem]]:
    """The contract, or the problems (naming producer fields) that keep it from forming.
    `keys` stays aligned with (weight, act): a spec whose key cannot form counts as None, so
    an odd value no producer check caught becomes a problem here, never an IndexError."""
    problems: list[Problem] = []
    keys: list[Optional[QuantKey]] = []
    for spec in (weight, act):
        key = None
        if spec is not None:
            try:
                key = spec.key()
            except ValueError as e:
                problems.append((spec.loc, f"{spec.field}: does not form a valid "
                                           f"{spec.role} key: {plain_message(e)}"))
        keys.append(key)
    if act is not None and keys[1] is not None:
        for _f, text in activation_problems(keys[1].scale.format, keys[1].static):
            problems.append((act.loc + (_STATIC_FIELD.get(act.field, act.field),),
                             f"{act.facts['static'].source} but {text}"))
    if problems:
        return None, problems
    return SchemeContract(weight=keys[0], activation=keys[1]), []


_STATIC_FIELD = {"input_tensors": "is_dynamic", "input_activations": "dynamic",
                 "act": "act_dynamic"}


def map_group(g: GroupReading, catalog: Catalog, src: ConfigSource, producer: str,
              absent: tuple[str, str], memo: Optional[dict] = None) -> ConfigGroup:
    """A group read by a producer, with its scheme or a one-line error at the line of the
    first offending value."""
    base = dict(source=src.shown, producer=producer, path=g.path, kind=g.kind,
                targets=g.targets, target_lines=tuple(
                    src.line(g.loc + ("targets", i) if g.kind == "config group" else g.loc)
                    for i in range(len(g.targets))))
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
    memo = {} if memo is None else memo  # one config repeats a spec over many groups
    if not problems and g.weight.stored:
        sig = ("stored", _signature(g))
        if sig not in memo:
            memo[sig] = stored_match(g.weight, g.activation, catalog)
        if memo[sig] is not None:
            scheme, caveat = memo[sig]
            return ConfigGroup(**base, scheme=scheme, contract=scheme.contract,
                               line=src.line(g.loc), caveats=(caveat,) if caveat else ())
    if not problems:
        contract, problems = _contract_of(g.weight, g.activation)
    if contract is not None:
        matches = memo.get(str(contract))
        if matches is None:
            matches = memo[str(contract)] = exact_matches(contract, catalog)
        if matches:
            return ConfigGroup(**base, scheme=matches[0], contract=contract,
                               line=src.line(g.loc))
        problems = [(g.loc, f"no scheme in the catalog has this contract ({contract})")]
    sig = ("hint", _signature(g))
    if sig not in memo:
        memo[sig] = hint(g.weight, g.activation, catalog, absent)
    line = src.line(problems[0][0])
    where = src.shown if line is None else f"{src.shown}:{line}"
    return ConfigGroup(**base, contract=contract, line=line,
                       error=refusal(where, g.path, problems, memo[sig]))


def _signature(g: GroupReading) -> str:
    return repr([None if r is None else sorted(r.facts.items())
                 for r in (g.weight, g.activation)])


def schemes_from_config(path_or_dict: Union[str, os.PathLike, Mapping[str, Any]],
                        catalog: Optional[Catalog] = None) -> list[ConfigGroup]:
    """Every group of a HF config (a config.json path, its directory, the parsed dict, or a
    bare quantization_config) with its scheme (`.scheme`), or why none fits (`.error`), and
    the not-quantized / not-mapped entries (`.note`; e.g. gpt-oss `modules_to_not_convert`),
    and for a mapped group what loading vs re-quantizing means (`.caveats`). ConfigError when
    the file cannot be read as a Quark, compressed-tensors, AutoRound or gpt-oss config.
    `catalog`: default `load_schemes()`."""
    catalog = catalog if catalog is not None else load_schemes()
    src, reading = read_config(path_or_dict)
    readings = list(reading.groups)  # a target two config groups share: an error (hf_claims)
    for i, clash in shared_targets(reading, src.line).items():
        readings[i] = replace(readings[i], problems=(clash,) + readings[i].problems)
    memo: dict = {}
    return [map_group(g, catalog, src, reading.producer, _ABSENT[reading.producer], memo)
            for g in readings]


__all__ = ["ClaimError", "ConfigError", "ConfigGroup", "KEY_FIELDS", "group_for_module",
           "nearest_scheme", "read_config", "schemes_from_config",
           # re-exported from registry.configs.hf_reading
           "ConfigReading", "Fact", "GroupReading", "Problem", "SpecBuilder", "SpecReading",
           "dump", "field_path", "key_path", "lookup", "regex_problem"]
