"""Read a compressed-tensors `quantization_config` (quant_method: compressed-tensors).

Layout (compressed-tensors QuantizationConfig, as in llm-compressor MXFP4 exports such as
nm-testing/Qwen3-30B-A3B-MXFP4A16 or Kimi K3's text_config): `config_groups` maps a group name
to `targets` (class names, exact module names or `re:` regexes), `weights`,
`input_activations`, `output_activations` and an optional per-group `format`; `ignore` lists
modules left unquantized; `format` names the storage (`mxfp4-pack-quantized`, ...).
QuantizationArgs: `num_bits`, `type` (float / int), `strategy` (group / tensor / token / ...),
`group_size`, `scale_dtype` (MX: uint8 holding e8m0 exponents), `dynamic` (bool or "local"),
`symmetric`, `actorder`, `block_structure`; `observer*` only steer calibration.

Scale rounding is not a field: compressed-tensors (0.20, quantization/utils/mxfp_utils.py)
computes MX scales with `generate_mx_scales` = `round_to_power_2(amax)` (add half an ulp of the
element's mantissa, keep sign + exponent) then floor(log2) - emax. `num_bits` 4 is E2M1 and 6 is
E2M3, each rounded at its own mantissa width: the registry's `even`. 8 bits is E4M3 but still
rounded at E2M1's width, which is none of floor / even / rceil: MXFP8 *activations* (rounded at
run time) are refused; MXFP8 *weights* of a stored checkpoint (`*-quantized` format) map, since
loading never re-rounds stored scales (hf_matching; the group carries a caveat that
re-quantizing would differ). `scale_dtype` unset means e8m0 for weights only when the storage
format is an MX one (`mxfp4-pack-quantized`, ...): the format describes the stored weights, never
the activations (MXFP4xFP8's activations are FP8 per 128 in the model's dtype).
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from registry.configs.hf_reading import (ConfigReading, GroupReading, SpecBuilder, SpecReading,
                                         dump, excluded_modules, field_path, integral, key_path,
                                         lookup, regex_problem)
from registry.configs.json_lines import JsonPath

E8M0_SCALE_DTYPES = ("torch.uint8", "uint8", "torch.float8_e8m0fnu", "float8_e8m0fnu")
FP32_SCALE_DTYPES = (None, "torch.float32", "float32")
ELEMENTS = {("float", 4): "fp4", ("float", 6): "fp6", ("float", 8): "fp8", ("int", 8): "int8"}
MX_FORMATS = {"fp4": "mxfp4", "fp6": "mxfp6_e2m3", "fp8": "mxfp8_e4m3", "int8": "mxint8"}
_GRANULARITY = {"group": "block", "tensor": "tensor", "token": "token"}
_NO_KEY = {"channel": "one scale per output channel",
           "tensor_group": "two-level NVFP4-style scales: fp8 per 16 plus a global scale",
           "block": "2-D block scales", "attn_head": "per-attention-head scales"}


def target_rank(kind: str, target: str, name: str, type_name: str) -> Optional[int]:
    """Whether a compressed-tensors target / ignore entry claims module `name` (class
    `type_name`): an exact module name (rank 0), a `re:` regex by re.match (rank 1), a class
    name (rank 2); ignore entries rank -1 (they win)."""
    if target.startswith("re:"):
        rank = 1 if re.match(target[3:], name) is not None else None
    else:
        rank = 0 if target == name else (2 if target == type_name else None)
    if rank is None:
        return None
    return -1 if kind == "ignore" else rank


def read_args(args: Any, role: str, prefix: str, storage: Optional[str],
              loc: JsonPath = ()) -> Optional[SpecReading]:
    """QuantizationArgs read into key facts (None: the tensor is not quantized); `loc`: its
    absolute JSON path (default `(prefix,)`)."""
    if args is None:
        return None
    b = SpecBuilder(role, prefix, loc)
    if not isinstance(args, Mapping):
        b.whole(f"{prefix}: {dump(args)[:40]} is not a QuantizationArgs object")
        for k in ("format", "scale.format", "scale.granularity", "scale.block",
                  "scale.rounding", "static"):
            b.fact(k, None, prefix)
        return b.build()
    raw_size, raw_bits = args.get("group_size"), args.get("num_bits")  # as written
    size, bits = integral(raw_size), integral(raw_bits)  # 32.0 is 32 (hf_reading.integral)
    strategy = args.get("strategy")
    strat_src = b.said("strategy", strategy)
    if strategy is None:
        strategy = "group" if size is not None else "tensor"
        strat_src += f" (compressed-tensors infers {strategy})"
    gran = lookup(_GRANULARITY, strategy)
    if gran is None:
        text = (f"has no registry key ({_NO_KEY[strategy]}); OCP MX is strategy group "
                "with group_size 32" if lookup(_NO_KEY, strategy) else
                "is not a compressed-tensors "
                "strategy (group, tensor, token, channel, tensor_group, block, attn_head)")
        b.problem("strategy", strategy, text)
    b.fact("scale.granularity", gran or strategy, strat_src)

    kind = args.get("type")
    elem = lookup(ELEMENTS, (kind, bits))
    if elem is None:
        b.problem("num_bits", raw_bits, f"with type {dump(kind)} has no registry element "
                  "format (float 4 -> fp4, float 6 -> fp6 e2m3, float 8 -> fp8 e4m3, "
                  "int 8 -> int8)")
    sdt = args.get("scale_dtype")
    if gran == "block":
        stored = role == "weight" and args.get("dynamic", False) is False and \
            isinstance(storage, str) and storage.endswith("-quantized")
        _read_group(b, args, size, elem, sdt, storage, stored)
    elif gran is None:  # already reported: record the rest as written
        stored = False
        b.fact("scale.block", size, b.said("group_size", raw_size))
        b.fact("scale.format", sdt, b.said("scale_dtype", sdt))
        b.fact("format", elem or bits, b.said("num_bits", raw_bits))
        b.fact("scale.rounding", None, b.said("strategy", strategy))
    else:
        stored = False
        if size is not None:
            b.problem("group_size", raw_size, f"is set but strategy is {dump(strategy)}")
        b.fact("scale.block", size, b.said("group_size", raw_size))
        if sdt not in FP32_SCALE_DTYPES:
            b.problem("scale_dtype", sdt, f"with strategy {dump(strategy)}: per-tensor and "
                      "per-token scales are fp32")
        b.fact("scale.format", "fp32" if sdt in FP32_SCALE_DTYPES else sdt,
               b.said("scale_dtype", sdt))
        fmt = "fp8_e4m3" if elem == "fp8" else None
        if elem is not None and fmt is None:
            b.problem("num_bits", raw_bits, f"with type {dump(kind)} and strategy "
                      f"{dump(strategy)} has no registry format; the non-MX format is "
                      "fp8 e4m3 (float, 8 bits)")
        b.fact("format", fmt or elem or bits, b.said("num_bits", raw_bits))
        b.fact("scale.rounding", None, "(no rounding: fp32 scales)")

    dyn = args.get("dynamic", False)
    src = b.said("dynamic", dyn) + (" (default)" if "dynamic" not in args else "")
    if dyn == "local":
        b.problem("dynamic", dyn, "has no registry key (local scales under a calibrated "
                  "global scale, NVFP4 style); MX activation scales are fully dynamic (true)")
    elif not isinstance(dyn, bool):
        b.problem("dynamic", dyn, "must be true or false")
    b.fact("static", (not dyn) if isinstance(dyn, bool) else dyn, src)
    sym = args.get("symmetric", True)
    if sym is False:
        b.problem("symmetric", False, "(a zero point) but registry keys are symmetric")
    elif sym is not True:
        b.problem("symmetric", sym, "must be true or false")
    order = args.get("actorder")  # compressed-tensors reads true as "group", false as null
    if order is True or order in ("group", "dynamic"):
        b.problem("actorder", order, "(groups permuted through g_idx) has no registry key")
    elif not (order is None or order is False or order in ("weight", "static")):
        b.problem("actorder", order, "is not a compressed-tensors actorder (null, weight, "
                  "static, group, dynamic)")
    if args.get("block_structure") is not None:
        b.problem("block_structure", args.get("block_structure"), "(2-D block scales) has no "
                  "registry key")
    return b.build(stored=stored)


E2M1_WIDTH = "even at E2M1 width"


def _read_group(b: SpecBuilder, args: Mapping, size: Any, elem: Optional[str], sdt: Any,
                storage: Optional[str], stored: bool) -> None:
    mx_storage = isinstance(storage, str) and storage.startswith("mxfp")
    implied = sdt is None and mx_storage and b.role == "weight"  # the format: weights only
    e8m0 = sdt in E8M0_SCALE_DTYPES or implied
    b.fact("scale.block", size, b.said("group_size", args.get("group_size")))
    src = b.said("scale_dtype", sdt) + (f" (format {storage})" if implied else "")
    b.fact("scale.format", "e8m0" if e8m0 else sdt, src)
    bits = args.get("num_bits")
    if not e8m0 and (size != 32 or sdt is None):  # not MX with one field off: say what it is
        scales = "the model's dtype" if sdt is None else dump(sdt)
        b.problem("scale_dtype", sdt, f"with strategy group, group_size {dump(size)}: "
                  f"{elem or 'these'} elements with scales in {scales} per group are not OCP MX "
                  "(e8m0 scales per 32); the registry has no key for them")
        b.fact("format", "fp8_e4m3" if elem == "fp8" else elem or integral(bits),
               b.said("num_bits", bits))
        b.fact("scale.rounding", None, "(no rounding: scales are not e8m0)")
        return
    if size != 32 or isinstance(size, bool):
        b.problem("group_size", args.get("group_size"), "but OCP MX blocks are 32 elements "
                  "(one e8m0 scale per 32)")
    if not e8m0:
        b.problem("scale_dtype", sdt, "but OCP MX scales are e8m0 exponents "
                  "(scale_dtype: \"torch.uint8\")")
    fmt = MX_FORMATS.get(elem) if elem else None
    b.fact("format", fmt or elem or integral(bits), b.said("num_bits", bits))
    rounding: Any = "even" if fmt in ("mxfp4", "mxfp6_e2m3") else None
    if fmt == "mxfp8_e4m3":
        rounding = E2M1_WIDTH
        if not stored:  # stored weight scales are never re-rounded (hf_matching)
            b.problem("num_bits", 8, "with type \"float\": compressed-tensors rounds MXFP8 "
                      "scales at E2M1's mantissa width, none of floor / even / rceil")
    elif fmt == "mxint8":
        b.problem("type", "int", "with strategy group: compressed-tensors has no MX scale rule "
                  "for int8 elements")
    b.fact("scale.rounding", rounding, "implied: generate_mx_scales" if fmt != "mxfp8_e4m3"
           else "implied: generate_mx_scales, at E2M1 width")


def _target_problem(targets: Any) -> Optional[str]:
    if not isinstance(targets, list) or not targets or \
            not all(isinstance(t, str) for t in targets):
        return (f"targets: {dump(targets)} must be a non-empty list of class names, "
                "module names or re: patterns")
    for t in targets:
        bad = regex_problem(t)
        if bad is not None:
            return f"targets: {bad}"
    return None


def _group(cfg: Any, path: str, top_format: Optional[str], loc: JsonPath,
           top_loc: JsonPath) -> GroupReading:
    if not isinstance(cfg, Mapping):
        return GroupReading(path, "config group", (), loc=loc, problems=((loc, (
            f"{dump(cfg)[:40]} is not a quantization scheme object")),))
    targets = cfg.get("targets")
    problems = []
    bad_targets = _target_problem(targets)
    if bad_targets:
        problems.append((loc + ("targets",), bad_targets))
        targets = []
    fmt = cfg.get("format")
    storage = fmt if isinstance(fmt, str) and fmt else top_format
    if fmt and not isinstance(fmt, str):
        problems.append((loc + ("format",), f"format: {dump(fmt)[:40]} is not a storage "
                         "format name (e.g. \"mxfp4-pack-quantized\")"))
    if cfg.get("output_activations") is not None:
        problems.append((loc + ("output_activations",), "output_activations: set, but "
                         "registry schemes quantize weights and inputs only"))
    weight = read_args(cfg.get("weights"), "weight", "weights", storage, loc + ("weights",))
    act = read_args(cfg.get("input_activations"), "activation", "input_activations", storage,
                    loc + ("input_activations",))
    where, floc = ("format", loc + ("format",)) if fmt else ("(top-level) format", top_loc)
    if storage == "nvfp4-pack-quantized":
        problems.append((floc, f"{where}: {dump(storage)} is NVFP4 (fp8 scales per 16 plus a "
                         "global scale), not OCP MX"))
    elif storage == "mxfp4-pack-quantized" and weight is not None and \
            weight.facts["format"].value != "mxfp4" and not weight.problems:
        problems.append((floc, f"{where}: {dump(storage)} but weights are "
                         f"{dump(weight.facts['format'].value)}"))
    if weight is None and act is None and not problems:
        return GroupReading(path, "config group", tuple(targets), loc=loc,
                            note="not quantized (weights and input_activations are null)")
    return GroupReading(path, "config group", tuple(targets), weight, act, tuple(problems),
                        loc=loc)


def read_compressed(q: Mapping[str, Any], root: str, loc: JsonPath = ()) -> ConfigReading:
    """Every config group, then the ignored modules and the parts no scheme covers; `loc`:
    the JSON path of `q` in the file."""
    raw_format = q.get("format")
    top_format = raw_format if isinstance(raw_format, str) else None
    groups_path = field_path(root, "config_groups")
    gloc = loc + ("config_groups",)
    table = q.get("config_groups")
    groups: list[GroupReading] = []
    if raw_format is not None and top_format is None:
        groups.append(GroupReading(field_path(root, "format"), "not mapped", (),
                                   loc=loc + ("format",), problems=((loc + ("format",), (
                                       f"{dump(raw_format)[:40]} is not a storage format "
                                       "name (e.g. \"mxfp4-pack-quantized\")")),)))
    if not isinstance(table, Mapping) or not table:
        groups.append(GroupReading(groups_path, "config group", (), loc=gloc, problems=((gloc, (
            f"{dump(table)[:40]}: no config groups, so this config quantizes nothing")),)))
        table = {}
    for name, cfg in table.items():
        groups.append(_group(cfg, key_path(groups_path, name), top_format, gloc + (name,),
                             loc + ("format",)))
    groups += excluded_modules(q, root, loc, "ignore", "module names / re: patterns")
    for key, what in (("kv_cache_scheme", "KV-cache quantization is not a linear-layer scheme; "
                                          "the registry leaves the KV cache as the runtime "
                                          "keeps it"),
                      ("sparsity_config", "sparse weight compression is not part of a scheme"),
                      ("transform_config", "transforms (e.g. Hadamard rotations) are not "
                                           "applied by registry layers")):
        if q.get(key):
            groups.append(GroupReading(field_path(root, key), "not mapped", (),
                                       loc=loc + (key,),
                                       note=f"not mapped: {what}"))
    return ConfigReading("compressed-tensors", root, tuple(groups))
