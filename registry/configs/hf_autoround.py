"""Read an AutoRound `quantization_config` (quant_method: auto-round) into layer groups.

AutoRound's `auto_round` export (auto_round/export/export_to_autoround) writes one flat scheme at
the top: `bits`, `group_size`, `sym`, `data_type`, `act_bits`, `act_group_size`, `act_sym`,
`act_data_type`, `act_dynamic` (`act_*` dropped when act_bits >= 16), `block_name_to_quantize`
(comma-separated prefixes: the Linear / Conv1D layers under them take the scheme),
`packing_format`, and `extra_config` {exact layer name or regex: the keys that differ}. At load
(auto_round/inference/convert_model.py) a layer's scheme is the global one overlaid by its
extra_config entry (an exact name first, else the first regex that `re.search`es it); it is
quantized when bits <= 8 or act_bits <= 8. Unset act_* fall back to data_type / group_size /
sym, act_dynamic to true.

MX data types (auto_round/data_type/mxfp.py), element by bits for `mx_fp`: 4 E2M1, 6 E2M3,
8 E4M3 (or named: mx_fp8e5m2, mx_fp6e3m2, ...); `mx_int` 8 is mxint8. Shared exponents:
  mx_fp, mx_int, mx_fpN...   floor(log2 amax) - emax                -> floor (the OCP rule)
  mx_fp_rceil                ceil(log2(amax / max_normal))          -> rceil
(for a `_rceil` name auto-round takes the element from bits, so a name that says otherwise is
refused). Weights are stored packed with their e8m0 scales (`SpecReading.stored`), so their
rounding never runs at load; activations are quantized at run time and their rounding counts.
No torch.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from registry.configs.hf_reading import (ConfigReading, GroupReading, SpecBuilder, SpecReading,
                                         dump, field_path, integral, key_path, lookup,
                                         regex_problem)
from registry.configs.json_lines import JsonPath, one_line

METHODS = ("auto-round", "auto_round", "intel/auto-round")
_BY_BITS = {"mx_fp": {4: "mxfp4", 6: "mxfp6_e2m3", 8: "mxfp8_e4m3"}, "mx_int": {8: "mxint8"}}
_NAMED = {"mx_fp4": "mxfp4", "mx_fp4e2m1": "mxfp4", "mx_fp6": "mxfp6_e2m3",
          "mx_fp6e2m3": "mxfp6_e2m3", "mx_fp6e3m2": "mxfp6_e3m2", "mx_fp8": "mxfp8_e4m3",
          "mx_fp8e4m3": "mxfp8_e4m3", "mx_fp8e5m2": "mxfp8_e5m2", "mx_int8": "mxint8"}
_BITS = {"mxfp4": 4, "mxfp6_e2m3": 6, "mxfp6_e3m2": 6, "mxfp8_e4m3": 8, "mxfp8_e5m2": 8,
         "mxint8": 8}
_SPELLINGS = "mx_fp, mx_fp_rceil, mx_int (bits 8), mx_fp8e5m2, ..."
BLOCK_KINDS = ("Linear", "Conv1D")  # auto-round's SUPPORTED_LAYER_TYPES


def target_rank(kind: str, target: str, name: str, type_name: str) -> Optional[int]:
    """Whether an AutoRound entry claims module `name`: an extra_config key naming it exactly
    (rank 0) or `re.search`ing it (rank 1; the first in config order wins, as auto-round
    expands them), the global scheme for a Linear / Conv1D under a block_name_to_quantize
    prefix (rank 2, or rank 3 for every Linear when no prefix is written)."""
    if kind == "extra_config":
        if target == name:
            return 0
        try:
            return 1 if re.search(target, name) else None
        except (re.error, RecursionError, OverflowError):
            return None
    if kind == "blocks":
        if type_name not in BLOCK_KINDS:
            return None
        if target == ALL_BLOCKS:
            return 3
        return 2 if name.startswith(target) else None
    if kind == "modules_to_not_convert":
        return -1 if regex_problem("re:" + target) is None and re.search(target, name) else None
    return None


ALL_BLOCKS = "every Linear (block_name_to_quantize not written)"


class _Layer:
    """One layer scheme: the global config overlaid by an extra_config entry, each value with
    where it came from (the entry, the global config, or auto-round's default)."""

    def __init__(self, q: Mapping, qloc: JsonPath, entry: Optional[Mapping], eloc: JsonPath):
        self.q, self.qloc, self.entry, self.eloc = q, qloc, entry, eloc

    def get(self, key: str, default: Any = None) -> tuple[Any, JsonPath, str]:
        if self.entry is not None and key in self.entry:
            return self.entry[key], self.eloc + (key,), ""
        if key in self.q:
            return self.q[key], self.qloc + (key,), " (global)" if self.entry is not None else ""
        return default, (self.eloc if self.entry is not None else self.qloc), " (default)"

    def act(self, key: str, fallback: str, default: Any = None) -> tuple[Any, JsonPath, str]:
        """An act_* value; unset, auto-round uses `fallback` (act_data_type -> data_type)."""
        value, loc, origin = self.get(key)
        if value is None:
            value, loc, origin = self.get(fallback, default)
            origin = f" (unset: {fallback}{origin})"
        return value, loc, origin


def _element(b: SpecBuilder, dtype: Any, bits: Any, said: str, loc: JsonPath) -> tuple[
        Optional[str], Optional[str]]:
    """(registry element format, rounding) of an auto-round data_type, or a problem."""
    if not isinstance(dtype, str) or not dtype.startswith("mx_"):
        b.problems.append((loc, f"{said} is not an OCP MX data type; auto-round MX: {_SPELLINGS}"))
        return None, None
    rceil = dtype.endswith("_rceil")
    base = dtype[:-len("_rceil")] if rceil else dtype
    fmt = _NAMED.get(base) or lookup(_BY_BITS.get(base) or {}, bits)
    if fmt is None:
        b.problems.append((loc, f"{said} with bits {dump(bits)} has no registry element "
                                f"format; auto-round MX: {_SPELLINGS}"))
        return None, None
    if rceil and fmt != lookup(_BY_BITS["mx_fp"], bits):
        b.problems.append((loc, f"{said}: auto-round's rceil quantizer takes the element from "
                                f"bits ({dump(bits)}), not from the name; write mx_fp_rceil"))
        return None, None
    if _BITS[fmt] != bits:
        b.problems.append((loc, f"{said} is {fmt} but bits is {dump(bits)}"))
    return fmt, "rceil" if rceil else "floor"


def _spec(layer: _Layer, role: str, stored: bool) -> SpecReading:
    act = role == "activation"
    names = {k: (f"act_{k}" if act else k) for k in ("bits", "group_size", "sym", "data_type")}
    b = SpecBuilder(role, "act" if act else "", layer.eloc if layer.entry is not None
                    else layer.qloc)

    def read(key: str, default: Any = None) -> tuple[Any, JsonPath, str]:
        if act and key != "act_dynamic":
            return layer.act(key, key[len("act_"):], default)
        return layer.get(key, default)

    bits, bloc, borig = read(names["bits"])
    bits = integral(bits)
    dtype, dloc, dorig = read(names["data_type"])
    said = f"{names['data_type']}: {dump(dtype)}{dorig}"
    fmt, rounding = _element(b, dtype, bits, said, dloc)
    b.fact("format", fmt or dtype, f"{said}, {names['bits']}: {dump(bits)}{borig}")
    b.fact("scale.format", "e8m0" if fmt else None,
           "implied: auto-round MX data types keep e8m0 scales")
    b.fact("scale.rounding", rounding or dtype, said + {
        "floor": " (floor(log2 amax) - emax)", "rceil": " (ceil(log2(amax / max_normal)))",
        None: ""}[rounding])
    size, sloc, sorig = read(names["group_size"])
    size_said = f"{names['group_size']}: {dump(size)}{sorig}"
    size = integral(size)
    if size != 32 or isinstance(size, bool):
        b.problems.append((sloc, f"{size_said} but OCP MX blocks are 32 elements (one e8m0 "
                                 "scale per 32)"))
    b.fact("scale.granularity", "block", f"implied: {names['group_size']} (one scale a group)")
    b.fact("scale.block", size, size_said)
    sym, yloc, yorig = read(names["sym"], True)
    if sym is not True and sym is not None:
        b.problems.append((yloc, f"{names['sym']}: {dump(sym)}{yorig} but registry keys are "
                                 "symmetric (true)"))
    if act:
        dyn, yloc, yorig = layer.get("act_dynamic", True)
        dyn = True if dyn is None else dyn
        if not isinstance(dyn, bool):
            b.problems.append((yloc, f"act_dynamic: {dump(dyn)}{yorig} must be true or false"))
        b.fact("static", (not dyn) if isinstance(dyn, bool) else dyn,
               f"act_dynamic: {dump(dyn)}{yorig}")
    else:
        b.fact("static", True, "implied: weights are stored")
        for key in ("super_bits", "super_group_size"):
            value, kloc, korig = layer.get(key)
            if value is not None:
                b.problems.append((kloc, f"{key}: {dump(value)}{korig} (two-level GGUF-style "
                                         "scales) has no registry key"))
    return b.build(stored=stored and not act)


def _bits(layer: _Layer, key: str) -> Any:
    value = integral(layer.get(key)[0])
    return 16 if value is None else value


def _float(value: Any) -> bool:
    """bits >= 16: not quantized (anything not a number counts as quantized, and is refused)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 8


def _group(layer: _Layer, path: str, kind: str, targets: tuple[str, ...], loc: JsonPath,
           stored: bool) -> GroupReading:
    """A layer scheme: float when bits > 8 (auto-round's model-free loader and export read
    bits >= 16 as a float layer, whatever act_bits says); weight-only when act_bits > 8 (even
    with act_data_type written)."""
    bits, act_bits = _bits(layer, "bits"), _bits(layer, "act_bits")
    if _float(bits):
        ignored = "" if _float(act_bits) else f"; act_bits {dump(act_bits)} does not apply"
        return GroupReading(path, kind, targets, loc=loc,
                            note=f"not quantized (bits {dump(bits)}: a float layer{ignored})")
    weight = _spec(layer, "weight", stored)
    act = None if _float(act_bits) else _spec(layer, "activation", stored)
    return GroupReading(path, kind, targets, weight, act, loc=loc)


def _blocks(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, list):
        flat: list[str] = []
        for item in value:
            flat += list(_blocks(item))
        return tuple(flat)
    return ()


def read_autoround(q: Mapping[str, Any], root: str, loc: JsonPath = ()) -> ConfigReading:
    """The global scheme (the layers under block_name_to_quantize), every extra_config entry,
    then what no scheme covers; `loc`: the JSON path of `q` in the file."""
    packing = q.get("packing_format")
    stored = not (isinstance(packing, str) and "fake" in packing)
    groups: list[GroupReading] = []
    blocks = _blocks(q.get("block_name_to_quantize"))
    targets = blocks or (ALL_BLOCKS,)
    gpath = root or "quantization_config"
    groups.append(_group(_Layer(q, loc, None, loc), gpath, "blocks", targets, loc, stored))
    extra = q.get("extra_config")
    epath, eloc = field_path(root, "extra_config"), loc + ("extra_config",)
    if extra is not None and not isinstance(extra, Mapping):
        groups.append(GroupReading(epath, "extra_config", (), loc=eloc, problems=((eloc, (
            f"extra_config: {dump(extra)[:40]} is not an object of layer name -> scheme")),)))
        extra = {}
    for name, entry in (extra or {}).items():
        path, at = key_path(epath, name), eloc + (name,)
        if not isinstance(entry, Mapping):
            groups.append(GroupReading(path, "extra_config", (str(name),), loc=at, problems=((
                at, f"{dump(entry)[:40]} is not a scheme object (bits, data_type, ...)"),)))
            continue
        groups.append(_group(_Layer(q, loc, entry, at), path, "extra_config", (str(name),),
                             at, stored))
    skip = q.get("modules_to_not_convert") or []
    for i, pattern in enumerate(skip if isinstance(skip, list) else [skip]):
        at = loc + ("modules_to_not_convert", i)
        path = key_path(field_path(root, "modules_to_not_convert"), i)
        bad = regex_problem("re:" + pattern) if isinstance(pattern, str) else "not text"
        if bad:
            groups.append(GroupReading(path, "modules_to_not_convert", (), loc=at,
                                       problems=((at, f"{dump(pattern)[:60]}: {bad}"),)))
        else:
            groups.append(GroupReading(path, "modules_to_not_convert", (pattern,), loc=at,
                                       note="not quantized (modules_to_not_convert "
                                            f"{one_line(pattern)})"))
    for key in ("static_kv_dtype", "static_attention_dtype"):
        if q.get(key) is not None:
            groups.append(GroupReading(field_path(root, key), "not mapped", (), loc=loc + (key,),
                                       note="not mapped: KV-cache / attention quantization is "
                                            "not a linear-layer scheme"))
    return ConfigReading("auto-round", root, tuple(groups))


__all__ = ["ALL_BLOCKS", "METHODS", "read_autoround", "target_rank"]
