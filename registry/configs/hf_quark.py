"""Read an AMD Quark `quantization_config` (quant_method: quark) into layer groups.

Quark's exported layout (as in amd/*-MXFP4 checkpoints and vLLM's QuarkConfig):
`global_quant_config`, `layer_quant_config` (fnmatch name patterns), `layer_type_quant_config`
(module types) hold a QLayerConfig each: `weight`, `input_tensors`, `output_tensors`, `bias`;
`exclude` lists modules left unquantized (exact names, fnmatch patterns, `re:` regexes).
A tensor spec: `dtype` (fp4, fp6_e2m3, fp6_e3m2, fp8_e4m3, fp8_e5m2, int8; or `mx` with
`mx_element_dtype`), `qscheme` (per_group; per_block with block_size [1, 32], as Quark writes
MXFP8; per_tensor; per_channel = per token for activations), `group_size`,
`scale_format` (e8m0 for MX), `is_dynamic`, `scale_calculation_mode`, `round_method`,
`symmetric`, `ch_axis`, `is_scale_quant`. Observer / buffer settings (`observer_cls`,
`max_input_numel`, ...) only steer calibration and are not part of a key.

`scale_calculation_mode` -> registry rounding (Quark's own code: PerBlockMXObserver and
`fake_quantize_mx`, which compute the e8m0 exponent from the block's amax):
  null / "even" -> even    even_round: amax rounded to the element's mantissa width, then
                           floor(log2) - emax (Quark's default, used by vLLM's emulation)
  "floor"       -> floor   floor(log2(amax)) - emax (the OCP spec rule)
  "enhanced"    -> rceil   ceil(log2(amax / max_repr)), max_repr = (2 - 2^-mbits) * 2^emax;
                           only where max_repr is the format's max normal (not mxfp8_e4m3:
                           480 != 448; not mxint8)
  "ceil"        -> none    ceil(log2(amax)) - emax is none of floor / even / rceil
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any, Mapping, Optional

from registry.configs.hf_reading import (ConfigReading, GroupReading, SpecBuilder, SpecReading,
                                         dump, excluded_modules, field_path, integral, key_path,
                                         lookup)
from registry.configs.json_lines import JsonPath, one_line

MX_DTYPES = {"fp4": "mxfp4", "fp6_e2m3": "mxfp6_e2m3", "fp6_e3m2": "mxfp6_e3m2",
             "fp8_e4m3": "mxfp8_e4m3", "fp8_e5m2": "mxfp8_e5m2", "int8": "mxint8"}
PER_TENSOR_DTYPES = {"fp8_e4m3": "fp8_e4m3"}  # the registry's one non-MX element format
ROUNDINGS = {None: "even", "even": "even", "floor": "floor", "enhanced": "rceil"}
#: what Quark's `dtype: "mx"` spec (OCP_MXINT8Spec) leaves null and means: per group of
#: group_size along ch_axis, e8m0 scales, computed on the tensor (weights: stored)
_MX_IMPLIED = {"qscheme": "per_group", "scale_format": "e8m0"}
_QSCHEMES = {"per_group": "block", "per_block": "block", "per_tensor": "tensor",
             "per_channel": "token"}


def _enhanced_is_rceil(fmt: str) -> bool:
    """Quark's "enhanced" divides by (2 - 2^-mbits) * 2^emax; rceil by the max normal."""
    from kernels.spec.formats import FORMATS

    f = FORMATS.get(fmt)
    return f is not None and not f.is_int and (2 - 2.0 ** -f.mbits) * 2.0 ** f.emax == f.max_normal


def target_rank(kind: str, target: str, name: str, type_name: str) -> Optional[int]:
    """Whether a Quark entry claims module `name` (class `type_name`), as vLLM's QuarkConfig
    matches: layer_quant_config keys are fnmatch patterns (rank 0), layer_type_quant_config
    keys name the class (rank 2; `Linear`, `nn.Linear` or a `<class '...Linear'>` string),
    exclude entries are exact names, fnmatch patterns or `re:` regexes (rank -1, they win)."""
    if kind == "layer name":
        return 0 if fnmatch.fnmatchcase(name, target) else None
    if kind == "layer type":
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", target)
        return 2 if words and words[-1] == type_name else None
    if kind == "exclude":
        hit = (re.match(target[3:], name) is not None if target.startswith("re:")
               else target == name or fnmatch.fnmatchcase(name, target))
        return -1 if hit else None
    return None


def read_spec(spec: Any, role: str, prefix: str, loc: JsonPath = ()) -> Optional[SpecReading]:
    """A Quark QTensorConfig dict read into key facts (None: the tensor is not quantized);
    `loc`: the spec's absolute JSON path (default `(prefix,)`)."""
    if spec is None:
        return None
    b = SpecBuilder(role, prefix, loc)
    if not isinstance(spec, Mapping):
        what = (f"a list of {len(spec)} specs (two-level scales such as NVFP4 or fp8 + int4)"
                if isinstance(spec, list) else f"a {type(spec).__name__}")
        b.whole(f"{prefix}: {what}; an OCP MX tensor is one per_group spec with e8m0 scales")
        for k in ("format", "scale.format", "scale.granularity", "scale.block",
                  "scale.rounding", "static"):
            b.fact(k, None, prefix)
        return b.build()

    dtype, dsub = spec.get("dtype"), "dtype"
    legacy_mx = dtype == "mx"  # Quark's OCP_MXINT8Spec spelling: only dtype, mx_element_dtype,
    if legacy_mx:              # group_size, ch_axis and scale_calculation_mode take effect
        dtype, dsub = spec.get("mx_element_dtype"), "mx_element_dtype"
        spec = {**_MX_IMPLIED, "is_dynamic": role == "activation",
                **{k: v for k, v in spec.items() if v is not None}}
    qscheme = spec.get("qscheme")
    gran = lookup(_QSCHEMES, qscheme)
    if role == "weight" and qscheme == "per_channel":
        gran = "channel"
        b.problem("qscheme", qscheme, "(one scale per output channel) has no registry key; "
                  "OCP MX weights are per_group with group_size 32 and e8m0 scales")
    elif gran is None:
        b.problem("qscheme", qscheme, "is not one of per_group / per_block (OCP MX), "
                  "per_tensor, per_channel (per token, activations)")
        gran = qscheme
    b.fact("scale.granularity", gran, b.said("qscheme", qscheme))

    sfmt = spec.get("scale_format")
    if gran == "block" and not _mx_shaped(spec, dtype):
        _read_block_not_mx(b, spec, dtype, dsub, sfmt)
    elif gran == "block":
        _read_block(b, spec, dtype, dsub, sfmt)
    else:
        _read_per_tensor(b, spec, dtype, dsub, sfmt, qscheme)

    dyn = spec.get("is_dynamic")
    if not isinstance(dyn, bool):
        b.problem("is_dynamic", dyn, "must be true (scales computed at run time) or false "
                  "(scales stored in the checkpoint)")
    b.fact("static", (not dyn) if isinstance(dyn, bool) else dyn, b.said("is_dynamic", dyn)
           + (" (implied by dtype \"mx\")" if legacy_mx else ""))

    _read_extras(b, spec, gran)
    return b.build()


def _mx_shaped(spec: Mapping, dtype: Any) -> bool:
    """An OCP MX spec with at most the block or the scale format off: e8m0 scales, or an MX
    element type in blocks of 32 (then `write scale_format: "e8m0"` is the fix)."""
    if spec.get("scale_format") == "e8m0":
        return True
    size = spec.get("block_size") if spec.get("qscheme") == "per_block" else \
        spec.get("group_size")
    size = [integral(d) for d in size] if isinstance(size, list) else integral(size)
    return size in (32, [1, 32]) and lookup(MX_DTYPES, dtype) is not None


def _read_block_not_mx(b: SpecBuilder, spec: Mapping, dtype: Any, dsub: str,
                       sfmt: Any) -> None:
    """Block scales that are not e8m0 per 32 (128 x 128 block FP8, fp32 group scales): one
    problem saying what it is, never "write e8m0"."""
    per_block = spec.get("qscheme") == "per_block"
    sub = "block_size" if per_block else "group_size"
    size = spec.get(sub)
    scales = spec.get("scale_type") if sfmt is None else sfmt
    what = (f"{dump(dtype)} in {dump(size)} blocks" if per_block
            else f"{dump(dtype)} per group of {dump(size)}")
    b.problem(sub, size, f"with {dump(scales)} scales: {what} is block-scaled, not OCP MX "
              "(e8m0 scales per 1 x 32); the registry has no key for it")
    b.fact("scale.block", size, b.said(sub, size))
    b.fact("scale.format", sfmt, b.said("scale_format", sfmt))
    b.fact("format", lookup(PER_TENSOR_DTYPES, dtype) or dtype, b.said(dsub, dtype))
    b.fact("scale.rounding", None, "(no rounding: scales are not e8m0)")


def _read_block(b: SpecBuilder, spec: Mapping, dtype: Any, dsub: str, sfmt: Any) -> None:
    if spec.get("qscheme") == "per_block":  # Quark's MXFP8 spelling: block_size [1, 32]
        shape = spec.get("block_size")  # [1.0, 32.0] is [1, 32]; [true, 32] is not
        dims = [integral(d) for d in shape] if isinstance(shape, list) else None
        size = 32 if dims == [1, 32] and all(type(d) is int for d in dims) else shape
        if size != 32:
            b.problem("block_size", shape, "but an OCP MX scale covers a 1 x 32 block "
                      "(block_size [1, 32]); larger 2-D blocks share one scale across rows")
        b.fact("scale.block", size, b.said("block_size", shape))
    else:
        raw = spec.get("group_size")
        size = integral(raw)  # 32.0 is 32 (hf_reading.integral)
        if size != 32 or isinstance(size, bool):
            b.problem("group_size", raw, "but OCP MX blocks are 32 elements (one e8m0 "
                      "scale per 32)")
        b.fact("scale.block", size, b.said("group_size", raw))
    if sfmt != "e8m0":
        b.problem("scale_format", sfmt, "but OCP MX scales are e8m0 (write "
                  "scale_format: \"e8m0\")")
    b.fact("scale.format", "e8m0" if sfmt == "e8m0" else sfmt, b.said("scale_format", sfmt))
    fmt = lookup(MX_DTYPES, dtype)
    if fmt is None:
        b.problem(dsub, dtype, "is not an OCP MX element type; Quark MX dtypes: "
                  f"{', '.join(MX_DTYPES)}")
    b.fact("format", fmt or dtype, b.said(dsub, dtype))
    mode = spec.get("scale_calculation_mode")
    rounding = ROUNDINGS.get(mode) if isinstance(mode, (str, type(None))) else None
    if mode == "enhanced" and fmt is not None and not _enhanced_is_rceil(fmt):
        rounding = None
        b.problem("scale_calculation_mode", mode, f"divides by (2 - 2^-mbits) * 2^emax, "
                  f"which is not the max normal of {fmt}, so it is not rceil")
    elif rounding is None and mode != "enhanced":
        why = ("(2^(ceil(log2 amax) - emax)) is none of the registry's roundings"
               if mode == "ceil" else "is not a Quark scale_calculation_mode")
        b.problem("scale_calculation_mode", mode, f"{why}; Quark even / null -> even, "
                  "floor -> floor, enhanced -> rceil")
    b.fact("scale.rounding", rounding or mode,
           b.said("scale_calculation_mode", mode) + (" (Quark's default: even)"
                                                     if mode is None else ""))


def _read_per_tensor(b: SpecBuilder, spec: Mapping, dtype: Any, dsub: str, sfmt: Any,
                     qscheme: Any) -> None:
    size = spec.get("group_size")
    if size is not None:
        b.problem("group_size", size, f"is set but qscheme is {dump(qscheme)}")
    b.fact("scale.block", size, b.said("group_size", size))
    if sfmt not in (None, "float32", "fp32"):
        b.problem("scale_format", sfmt, f"with qscheme {dump(qscheme)}: per-tensor and "
                  "per-token scales are fp32")
    b.fact("scale.format", "fp32" if sfmt in (None, "float32", "fp32") else sfmt,
           b.said("scale_format", sfmt))
    fmt = lookup(PER_TENSOR_DTYPES, dtype)
    if fmt is None:
        b.problem(dsub, dtype, f"with qscheme {dump(qscheme)} has no registry format; "
                  "the non-MX format is fp8_e4m3 (MX formats need qscheme per_group)")
    b.fact("format", fmt or dtype, b.said(dsub, dtype))
    mode = spec.get("scale_calculation_mode")
    if mode is not None:
        b.problem("scale_calculation_mode", mode, "is set but only e8m0 block scales have a "
                  "rounding")
    b.fact("scale.rounding", mode, b.said("scale_calculation_mode", mode))
    if spec.get("scale_type") not in (None, "float", "float32"):
        b.problem("scale_type", spec.get("scale_type"), "but the registry's per-tensor "
                  "scales are plain fp32 (scale_type: \"float\")")


def _read_extras(b: SpecBuilder, spec: Mapping, gran: Any) -> None:
    sym = spec.get("symmetric")
    if sym is False:
        b.problem("symmetric", False, "(a zero point) but registry keys are symmetric")
    elif sym is not None and sym is not True:
        b.problem("symmetric", sym, "must be true, false or null")
    if spec.get("round_method") not in (None, "half_even"):
        b.problem("round_method", spec.get("round_method"), "but registry elements round to "
                  "nearest, ties to even (round_method: \"half_even\")")
    if spec.get("is_scale_quant"):
        b.problem("is_scale_quant", True, "(quantized scales, two-level) has no registry key")
    if gran == "block" and spec.get("ch_axis") not in (None, -1):
        b.problem("ch_axis", spec.get("ch_axis"), "but OCP MX blocks run along the last "
                  "(reduction) axis: ch_axis -1")
    if spec.get("block_size") is not None and spec.get("qscheme") != "per_block":
        b.problem("block_size", spec.get("block_size"), "is set but qscheme is "
                  f"{dump(spec.get('qscheme'))}")


def _layer_group(cfg: Any, path: str, kind: str, targets: tuple[str, ...],
                 kv_cache: bool, loc: JsonPath) -> GroupReading:
    """One QLayerConfig: its weight / input_tensors specs and group-level problems."""
    if cfg is None:
        return GroupReading(path, kind, targets, loc=loc,
                            note="not quantized (null: these modules stay in high precision)")
    if not isinstance(cfg, Mapping):
        return GroupReading(path, kind, targets, loc=loc, problems=((loc, (
            f"{dump(cfg)[:40]} is not a layer config object (weight, input_tensors, ...)")),))
    problems = []
    if cfg.get("output_tensors") is not None and not kv_cache:
        problems.append((loc + ("output_tensors",), "output_tensors: set, but registry schemes "
                         "quantize weights and inputs only (quantized outputs have no scheme)"))
    if cfg.get("bias") is not None:
        problems.append((loc + ("bias",), "bias: set, but registry schemes keep the bias in "
                         "high precision"))
    weight = read_spec(cfg.get("weight"), "weight", "weight", loc + ("weight",))
    act = read_spec(cfg.get("input_tensors"), "activation", "input_tensors",
                    loc + ("input_tensors",))
    if weight is None and act is None and not problems:
        return GroupReading(path, kind, targets, loc=loc, note="not quantized (weight and "
                            "input_tensors are null)")
    return GroupReading(path, kind, targets, weight, act, tuple(problems), loc=loc)


def read_quark(q: Mapping[str, Any], root: str, loc: JsonPath = ()) -> ConfigReading:
    """Every group of a Quark config: global, layer types, layer names, then the excluded
    modules and the parts no registry scheme covers (KV cache, softmax, algorithms); `loc`:
    the JSON path of `q` in the file."""
    groups: list[GroupReading] = []
    export = q.get("export") if isinstance(q.get("export"), Mapping) else {}
    kv_raw = export.get("kv_cache_group")
    kv_ok = kv_raw is None or (isinstance(kv_raw, list)
                               and all(isinstance(p, str) for p in kv_raw))
    kv_group = list(kv_raw or []) if kv_ok else []

    def is_kv(pattern: str) -> bool:
        return any(fnmatch.fnmatchcase(pattern, k) or fnmatch.fnmatchcase(k, pattern)
                   for k in kv_group)

    gpath = field_path(root, "global_quant_config")
    if not kv_ok:
        kloc = loc + ("export", "kv_cache_group")
        groups.append(GroupReading(field_path(root, "export.kv_cache_group"), "not mapped", (),
                                   loc=kloc, problems=((kloc, f"{dump(kv_raw)[:40]} is not a "
                                                       "list of layer-name patterns"),)))
    groups.append(_layer_group(q.get("global_quant_config"), gpath, "global",
                               ("every module no other entry claims",), False,
                               loc + ("global_quant_config",)))
    for section, kind in (("layer_type_quant_config", "layer type"),
                          ("layer_quant_config", "layer name")):
        table = q.get(section) or {}
        spath = field_path(root, section)
        sloc = loc + (section,)
        if not isinstance(table, Mapping):
            groups.append(GroupReading(spath, kind, (), loc=sloc, problems=((sloc, (
                f"{dump(table)[:40]} is not an object of pattern -> layer config")),)))
            continue
        for pattern, cfg in table.items():
            groups.append(_layer_group(cfg, key_path(spath, pattern), kind, (str(pattern),),
                                       kind == "layer name" and is_kv(str(pattern)),
                                       sloc + (pattern,)))
    groups += excluded_modules(q, root, loc, "exclude", "module names / patterns")
    groups += _not_mapped(q, root, kv_group, loc)
    return ConfigReading("quark", root, tuple(groups))


def _not_mapped(q: Mapping[str, Any], root: str, kv_group: list[str],
                loc: JsonPath) -> list[GroupReading]:
    out = []
    if kv_group or q.get("kv_cache_quant_config"):
        where = "export.kv_cache_group" if kv_group else "kv_cache_quant_config"
        out.append(GroupReading(
            field_path(root, where), "not mapped", tuple(kv_group),
            loc=loc + tuple(where.split(".")),
            note="not mapped: KV-cache quantization (output_tensors of these layers) is not a "
                 "linear-layer scheme; the registry leaves the KV cache as the runtime keeps it"))
    if q.get("softmax_quant_spec") is not None:
        out.append(GroupReading(field_path(root, "softmax_quant_spec"), "not mapped", (),
                                loc=loc + ("softmax_quant_spec",),
                                note="not mapped: softmax quantization is not a linear-layer "
                                     "scheme"))
    algo = q.get("algo_config")
    if algo:
        items = algo if isinstance(algo, list) else [algo]
        names = [one_line(str(a.get("name", "?") if isinstance(a, Mapping) else a)[:200])
                 for a in items[:10]]
        more = f", and {len(items) - 10} more" if len(items) > 10 else ""
        out.append(GroupReading(field_path(root, "algo_config"), "not mapped", tuple(names),
                                loc=loc + ("algo_config",),
                                note="not mapped: calibration algorithms "
                                     f"({', '.join(names)}{more}) shaped the stored weights; "
                                     "rotations that need online transforms are not applied"))
    return out
