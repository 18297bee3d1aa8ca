"""Matching a producer's group to catalog schemes, and the one-line refusal when none fits.

Why a module of its own: `registry.configs.hf_config` reads and orchestrates; the rules of
*which* scheme a group is, and of what a refusal says, live here:

- exact: the group's contract equals a scheme's (names are never compared);
- stored weights (`SpecReading.stored`: the checkpoint holds the codes and their e8m0 scales,
  as auto-round, gpt-oss and compressed-tensors `*-quantized` formats do): loading never runs
  the producer's scale rounding, so a scheme equal in everything but the weight's rounding
  reads the same numbers. It maps, with a caveat saying that re-quantizing with the scheme
  would round differently. Activation roundings run at inference and always count.
- a refusal is one short line: the first problem in full, the other problems by field and
  value, then the nearest scheme (fewest differing key fields, at most two shown) only when the
  group is OCP MX-shaped (e8m0 scales or blocks of 32); a two-level NVFP4 or 128x128 block-FP8
  group is told that no scheme is near, not pointed at an unrelated one.
No torch.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from kernels.spec.contract import QuantKey, SchemeContract
from registry.configs.hf_reading import KEY_FIELDS, Problem, SpecReading, dump
from registry.contract import Scheme
from registry.files.catalog import Catalog

MORE_SHOWN = 4  # problems after the first, by field and value
DIFFS_SHOWN = 2
SOURCE_SHOWN = 60  # a difference's source, cut
LINE_SHOWN = 360  # past this, the nearest scheme shows one difference
BRIEF = "\x00"  # hint(): the full text, then the brief one


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
    if isinstance(value, str) and len(value) <= 60 and value.isprintable() \
            and not _reads_as_json(value):
        return value
    return dump(value)  # JSON spelling: true, 32.5, "32" (never 32 for the text "32")


def _reads_as_json(text: str) -> bool:
    """Whether bare `text` would read as a JSON value (32, true, null): then it is quoted."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Difference:
    role: str
    key_field: str  # "" when the whole key is present on one side only
    config: str
    scheme: str
    source: str

    def __str__(self) -> str:
        where = f"{self.role} {self.key_field}" if self.key_field else self.role
        source = self.source if len(self.source) <= SOURCE_SHOWN else \
            self.source[:SOURCE_SHOWN - 3] + "..."
        return f"{where}: {self.config} here ({source}), {self.scheme} in the scheme"


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
        if weight is not None and weight.stored:  # loading never re-rounds stored scales
            diffs = [d for d in diffs if (d.role, d.key_field) != ("weight", "scale.rounding")]
        if best is None or len(diffs) < len(best[1]):
            best = (s, diffs)
    return best


def describe(diffs: list[Difference], shown: int = DIFFS_SHOWN) -> str:
    unique = list(dict.fromkeys(diffs))
    more = len(unique) - shown
    return "; ".join(str(d) for d in unique[:shown]) + (f"; and {more} more field(s)"
                                                        if more > 0 else "")


def mx_shaped(spec: Optional[SpecReading]) -> bool:
    """Whether a spec reads as a registry key with one thing off (e8m0 scales, blocks of 32,
    or fp32 per-tensor / per-token scales): only then is a nearest scheme a useful fix."""
    if spec is None:
        return False
    f = spec.facts
    return f["scale.format"].value == "e8m0" or f["scale.block"].value == 32 or \
        f["scale.granularity"].value in ("tensor", "token")  # fp32 per tensor / token


def hint(weight: Optional[SpecReading], activation: Optional[SpecReading], catalog: Catalog,
         absent: tuple[str, str]) -> str:
    """`; nearest scheme S differs in ...`, or why no scheme is near (a spec not OCP MX); a
    hint with differences holds a brief form too, after BRIEF (refusal() picks one)."""
    for spec in (weight, activation):
        if spec is not None and not mx_shaped(spec):
            return f"; no registry scheme is near (the {spec.role} is not OCP MX)"
    near = nearest_scheme(weight, activation, catalog, absent)
    if near is None:
        return ""
    s, diffs = near
    if not diffs:
        return f"; nearest scheme {s.name}"
    full = f"; nearest scheme {s.name} differs in {describe(diffs)}"
    return full + BRIEF + f"; nearest scheme {s.name} differs in {describe(diffs, 1)}"


_HEAD = re.compile(r'^([\w.\[\]"-]+)(: (?:"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^}]*\}|'
                   r'-?\d[\d.e+-]*|true|false|null)(?=[\s;,]|$))?')


def problem_head(text: str) -> str:
    """`weights.strategy: "tensor_group"`: the field and JSON value a problem starts with (the
    field alone when no JSON value follows it)."""
    m = _HEAD.match(text)
    return (m.group(1) + (m.group(2) or "")) if m else text[:60]


def refusal(where: str, path: str, problems: list[Problem], hint_text: str) -> str:
    """One short line: `FILE:LINE: path: first problem; also: field: value, ...; hint`."""
    texts = list(dict.fromkeys(p[1] for p in problems))
    line = f"{where}: {path}: {texts[0]}"
    rest = list(dict.fromkeys(problem_head(t) for t in texts[1:]))
    if rest:
        more = len(rest) - MORE_SHOWN
        line += "; also " + ", ".join(rest[:MORE_SHOWN]) + (f" and {more} more" if more > 0
                                                            else "")
    full, _, brief = hint_text.partition(BRIEF)
    return line + (full if not brief or len(line + full) <= LINE_SHOWN else brief)


def stored_match(weight: SpecReading, activation: Optional[SpecReading], catalog: Catalog
                 ) -> Optional[tuple[Scheme, Optional[str]]]:
    """For a stored weight: the scheme equal in all but the weight's scale rounding (one with
    the same rounding first, then by name) and the caveat when the roundings differ; None if
    none is."""
    try:
        act = activation.key() if activation is not None else None
    except ValueError:
        return None
    read = weight.facts["scale.rounding"].value
    found = []
    for s in catalog.schemes.values():
        if s.weight is None or s.activation != act:
            continue
        try:
            key = weight.key(rounding=s.weight.scale.rounding)
        except ValueError:
            continue
        if key == s.weight:
            found.append((s.weight.scale.rounding != read, s.name, s))
    if not found:
        return None
    _, _, scheme = min(found, key=lambda t: t[:2])
    rounding = scheme.weight.scale.rounding
    if rounding == read:
        return scheme, None
    said = weight.facts["scale.rounding"].source
    return scheme, (f"weight scales are stored, so loading never rounds them ({said}); "
                    f"re-quantizing from float with {scheme.name} rounds them by {rounding}, "
                    "which can give other numbers")


def exact_matches(contract: SchemeContract, catalog: Catalog) -> list[Scheme]:
    return sorted((s for s in catalog.schemes.values() if s.contract == contract),
                  key=lambda s: s.name)


__all__ = ["Difference", "describe", "differences", "exact_matches", "hint", "key_values",
           "mx_shaped", "nearest_scheme", "problem_head", "refusal", "stored_match"]
