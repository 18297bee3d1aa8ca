"""The `quantization_config` each producer writes into config.json, built from our schemes.

Why: a checkpoint is read by the producer's own loader (and the engines using it) only when its
config says, in the producer's words, which modules hold which MX format. Each builder writes
the fields exactly as the producer's exporter does (the versions of `amd-quark` 0.13,
`compressed-tensors` 0.20.0 and `auto-round` 0.16.1; transformers' gpt-oss `mxfp4`):
- compressed-tensors: `ModelCompressor.update_config` (QuantizationConfig.model_dump of a
  preset such as MXFP4 / MXFP6A16 / MXFP8A16: one config group per scheme);
- quark: `export_safetensors` (QConfig -> `global_quant_config` / `layer_quant_config`, specs
  as `OCP_MXFP4Spec(...).to_quantization_spec()` serializes them, `export` block);
- auto-round: `quantize_and_save(format="auto_round")` (top-level bits / data_type /
  act_*, `extra_config` for layers that differ, `packing_format: auto_round:llm_compressor`);
- gpt-oss: `{"quant_method": "mxfp4", "modules_to_not_convert": [...]}`.

What a config cannot say is refused (one line naming the layer, the scheme, and a format that
can say it), because a loader would otherwise run the model with other numbers: an activation
the producer would quantize with another rounding, a static fp8 activation scale, an element
format it does not store. The weight's scale rounding never runs again for stored codes, so a
rounding the producer cannot name is written as its nearest spelling and reported in `notes`.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Optional

from kernels.spec.contract import QuantKey
from kernels.spec.formats import get_format as get_elem_format
from registry.configs.hf_quark import ROUNDINGS as QUARK_READS, _enhanced_is_rceil
from registry.contract import Scheme

WRITERS = ("compressed-tensors", "quark", "auto-round", "gpt-oss")
CT_VERSION, QUARK_VERSION, AUTOROUND_VERSION = "0.20.0", "0.13", "0.16.1"
_CT_FORMATS = {"mxfp4": ("mxfp4-pack-quantized", 4), "mxfp6_e2m3": ("mxfp6-pack-quantized", 6),
               "mxfp8_e4m3": ("mxfp8-quantized", 8)}
_CT_ACT_ROUNDING = {"mxfp4": "even", "mxfp6_e2m3": "even"}  # generate_mx_scales' rule
_QUARK_DTYPES = {"mxfp4": "fp4", "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2",
                 "mxfp8_e4m3": "fp8_e4m3", "mxfp8_e5m2": "fp8_e5m2"}
_AR_BITS = {"mxfp4": 4, "mxfp8_e4m3": 8}
_AR_DATA_TYPES = {"floor": "mx_fp", "rceil": "mx_fp_rceil"}


class ConfigWriteError(ValueError):
    """A scheme the chosen checkpoint format's config cannot express (one line)."""


def _refuse(fmt: str, layer: str, scheme: Scheme, why: str) -> ConfigWriteError:
    return ConfigWriteError(f"{layer}: scheme {scheme.name} cannot be written as a {fmt} "
                            f"checkpoint: {why}")


def _mx_dynamic(key: Optional[QuantKey]) -> bool:
    return key is not None and not key.static and key.scale.format == "e8m0" \
        and key.scale.block == 32


def _majority(layers: Mapping[str, Scheme]) -> Scheme:
    counts = Counter(s.name for s in layers.values())
    top = counts.most_common(1)[0][0]
    return next(s for s in layers.values() if s.name == top)


# -- compressed-tensors -------------------------------------------------------------------------

def _ct_args(key: QuantKey, dynamic: bool) -> dict[str, Any]:
    return {"dynamic": dynamic, "group_size": 32, "num_bits": get_elem_format(key.format).bits,
            "scale_dtype": "torch.uint8", "strategy": "group", "symmetric": True,
            "type": "float"}


def _ct_check(layer: str, scheme: Scheme) -> None:
    w, a = scheme.contract.weight, scheme.contract.activation
    if w.format not in _CT_FORMATS:
        raise _refuse("compressed-tensors", layer, scheme, f"it stores {', '.join(_CT_FORMATS)} "
                      f"weights, not {w.format}; use --format quark")
    if a is None:
        return
    want = _CT_ACT_ROUNDING.get(a.format)
    if not _mx_dynamic(a) or want is None or a.scale.rounding != want:
        raise _refuse("compressed-tensors", layer, scheme, f"its loader quantizes activations "
                      f"only as dynamic mxfp4 / mxfp6_e2m3 with even scales, not {a}; use "
                      "--format quark, or a weight-only scheme")


def compressed_tensors_config(layers: Mapping[str, Scheme], unquantized: Iterable[str]
                              ) -> tuple[dict[str, Any], list[str]]:
    """(quantization_config, notes): one group per scheme (targets `Linear` when one scheme
    covers every quantized layer, exact names otherwise); unquantized linears in `ignore`."""
    for layer, scheme in layers.items():
        _ct_check(layer, scheme)
    by_scheme: dict[str, list[str]] = {}
    for layer, scheme in layers.items():
        by_scheme.setdefault(scheme.name, []).append(layer)
    schemes = {s.name: s for s in layers.values()}
    groups, formats = {}, set()
    for i, (name, names) in enumerate(sorted(by_scheme.items())):
        c = schemes[name].contract
        fmt = _CT_FORMATS[c.weight.format][0]
        formats.add(fmt)
        groups[f"group_{i}"] = {
            "format": fmt,
            "input_activations": None if c.activation is None else _ct_args(c.activation, True),
            "output_activations": None,
            "targets": ["Linear"] if len(by_scheme) == 1 else sorted(names),
            "weights": _ct_args(c.weight, False)}
    config = {"config_groups": groups,
              "format": formats.pop() if len(formats) == 1 else "mixed-precision",
              "global_compression_ratio": None, "ignore": sorted(set(unquantized)),
              "kv_cache_scheme": None, "moe_sparsity_config": None,
              "quant_method": "compressed-tensors", "quantization_status": "compressed",
              "sparsity_config": {}, "transform_config": {}, "version": CT_VERSION}
    return config, []


# -- quark --------------------------------------------------------------------------------------

def _quark_mode(key: QuantKey) -> Optional[str]:
    rounding = key.scale.rounding or "even"
    if rounding == "rceil":
        return "enhanced" if _enhanced_is_rceil(key.format) else None
    return rounding if QUARK_READS.get(rounding) == rounding else None


def _quark_spec(key: QuantKey, mode: str) -> dict[str, Any]:
    return {"block_size": None, "ch_axis": -1, "dtype": _QUARK_DTYPES[key.format],
            "enable_buffer_reuse": False, "group_size": 32, "is_dynamic": not key.static,
            "is_scale_quant": False, "max_input_numel": 4194304, "mx_element_dtype": None,
            "observer_cls": "PerBlockMXObserver", "qscheme": "per_group",
            "round_method": "half_even", "scale_calculation_mode": mode, "scale_format": "e8m0",
            "scale_type": "float", "symmetric": None, "zero_point_type": "int32"}


def _quark_layer(layer: str, scheme: Scheme, notes: list[str]) -> dict[str, Any]:
    w, a = scheme.contract.weight, scheme.contract.activation
    if w.format not in _QUARK_DTYPES:
        raise _refuse("quark", layer, scheme, f"Quark's OCP MX export stores "
                      f"{', '.join(_QUARK_DTYPES)} weights, not {w.format}")
    wmode = _quark_mode(w)
    if wmode is None:
        wmode = "even"
        notes.append(f"{scheme.name}: weight scale rounding {w.scale.rounding} has no Quark "
                     "spelling; written as 'even' (the stored codes are exact either way)")
    act = None
    if a is not None:
        amode = _quark_mode(a) if _mx_dynamic(a) and a.format in _QUARK_DTYPES else None
        if amode is None:
            raise _refuse("quark", layer, scheme, f"activation {a} has no Quark OCP MX spelling "
                          "(dynamic MX, scale rounding even / floor / rceil as 'enhanced')")
        act = _quark_spec(a, amode)
    return {"bias": None, "input_tensors": act, "output_tensors": None, "target_device": None,
            "weight": _quark_spec(w, wmode)}


def quark_config(layers: Mapping[str, Scheme], unquantized: Iterable[str]
                 ) -> tuple[dict[str, Any], list[str]]:
    """(quantization_config, notes): the most common scheme global, the others per layer
    name in `layer_quant_config`; unquantized linears in `exclude`."""
    notes: list[str] = []
    specs = {layer: _quark_layer(layer, s, notes) for layer, s in layers.items()}
    top = _majority(layers)
    first = next(n for n, s in layers.items() if s.name == top.name)
    per_layer = {n: specs[n] for n, s in sorted(layers.items()) if s.name != top.name}
    config = {"algo_config": None, "exclude": sorted(set(unquantized)),
              "export": {"kv_cache_group": [], "min_kv_scale": 0.0, "pack_method": "reorder",
                         "weight_format": "real_quantized", "weight_merge_groups": None},
              "global_quant_config": specs[first], "kv_cache_post_rope": False,
              "kv_cache_quant_config": {}, "layer_quant_config": per_layer,
              "layer_type_quant_config": {}, "quant_method": "quark",
              "quant_mode": "eager_mode", "softmax_quant_spec": None, "version": QUARK_VERSION}
    return config, sorted(set(notes))


# -- auto-round ---------------------------------------------------------------------------------

def _ar_fields(layer: str, scheme: Scheme, notes: list[str]) -> dict[str, Any]:
    w, a = scheme.contract.weight, scheme.contract.activation
    if w.format not in _AR_BITS:
        raise _refuse("auto-round", layer, scheme, f"AutoRound's MX format stores "
                      f"{', '.join(_AR_BITS)} weights, not {w.format}; use --format quark")
    data_type = _AR_DATA_TYPES.get(w.scale.rounding or "even")
    if data_type is None:
        data_type = "mx_fp"
        notes.append(f"{scheme.name}: weight scale rounding {w.scale.rounding} has no AutoRound "
                     "spelling; written as 'mx_fp' (floor; the stored codes are exact either way)")
    out: dict[str, Any] = {"bits": _AR_BITS[w.format], "data_type": data_type,
                           "group_size": 32, "sym": True}
    if a is not None:
        act_type = _AR_DATA_TYPES.get(a.scale.rounding or "")
        if not _mx_dynamic(a) or a.format not in _AR_BITS or act_type is None:
            raise _refuse("auto-round", layer, scheme, f"AutoRound quantizes activations as "
                          f"dynamic mxfp4 / mxfp8_e4m3 with floor ('mx_fp') or rceil "
                          f"('mx_fp_rceil') scales, not {a}; use --format quark")
        out.update({"act_bits": _AR_BITS[a.format], "act_data_type": act_type,
                    "act_dynamic": True, "act_group_size": 32, "act_sym": True})
    return out


def block_names(names: Iterable[str]) -> list[str]:
    """The decoder-block lists holding `names` ("model.layers" for "model.layers.3.mlp...")."""
    out = set()
    for n in names:
        parts = n.split(".")
        idx = next((i for i, p in enumerate(parts) if p.isdigit()), None)
        if idx:
            out.add(".".join(parts[:idx]))
    return sorted(out)


def auto_round_config(layers: Mapping[str, Scheme], unquantized: Iterable[str]
                      ) -> tuple[dict[str, Any], list[str]]:
    """(quantization_config, notes): the most common scheme top-level; per layer
    `extra_config` for other schemes, for quantized layers outside the decoder blocks, and
    `{"bits": 16}` for unquantized linears inside them."""
    notes: list[str] = []
    fields = {layer: _ar_fields(layer, s, notes) for layer, s in layers.items()}
    top = _majority(layers)
    top_fields = fields[next(n for n, s in layers.items() if s.name == top.name)]
    blocks = block_names(layers)
    extra: dict[str, Any] = {}
    for layer, f in sorted(fields.items()):
        inside = any(layer.startswith(b + ".") for b in blocks)
        if f != top_fields or not inside:
            extra[layer] = dict(f) if "act_bits" in f else {**f, "act_bits": 16}
    # auto-round 0.16.1 writes {"bits": 16} alone, and its own loader then finds no backend
    # for the layer of a W4A4 model (act_bits 4 inherited): say act_bits 16 too.
    skip = {"bits": 16, "act_bits": 16} if "act_bits" in top_fields else {"bits": 16}
    for layer in sorted(set(unquantized)):
        if any(layer.startswith(b + ".") for b in blocks):
            extra[layer] = dict(skip)
    config: dict[str, Any] = {"autoround_version": AUTOROUND_VERSION,
                              "block_name_to_quantize": ",".join(blocks),
                              "enable_quanted_input": False,
                              "packing_format": "auto_round:llm_compressor",
                              "quant_method": "auto-round", **top_fields}
    if extra:
        config["extra_config"] = extra
    return config, sorted(set(notes))


# -- gpt-oss ------------------------------------------------------------------------------------

def gpt_oss_config(layers: Mapping[str, Scheme], unquantized: Iterable[str]
                   ) -> tuple[dict[str, Any], list[str]]:
    """(quantization_config, notes): transformers' Mxfp4Config fields; only expert stacks
    (`*_blocks` / `*_scales`) are quantized, everything else is named in
    `modules_to_not_convert`."""
    for layer, scheme in layers.items():
        c = scheme.contract
        if c.weight.format != "mxfp4" or c.activation is not None:
            raise _refuse("gpt-oss", layer, scheme, "gpt-oss checkpoints hold mxfp4 expert "
                          "weights with unquantized activations (w_mxfp4); choose that scheme "
                          "or another --format")
    return {"modules_to_not_convert": sorted(set(unquantized)), "quant_method": "mxfp4"}, []


BUILDERS = {"compressed-tensors": compressed_tensors_config, "quark": quark_config,
            "auto-round": auto_round_config, "gpt-oss": gpt_oss_config}


def producer_config(fmt: str, layers: Mapping[str, Scheme], unquantized: Iterable[str]
                    ) -> tuple[dict[str, Any], list[str]]:
    """The producer `fmt`'s quantization_config for `layers` ({name: scheme}) and the
    linear modules kept unquantized; (config, notes). ConfigWriteError when it cannot say it."""
    if fmt not in BUILDERS:
        raise ValueError(f"unknown checkpoint format {fmt!r}; known: {', '.join(WRITERS)}, "
                         "registry")
    if not layers:
        raise ConfigWriteError("no quantized layer to describe: quantize the model first "
                               "(registry.quantize_model), or check --ignore")
    return BUILDERS[fmt](layers, list(unquantized))


__all__ = ["BUILDERS", "ConfigWriteError", "WRITERS", "auto_round_config", "block_names",
           "compressed_tensors_config", "gpt_oss_config", "producer_config", "quark_config"]
