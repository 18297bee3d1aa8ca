"""Config generators and mutators for tests/registry/configs/test_fuzz_configs.py: the HF config fixtures as a
seed corpus, a seeded random mutator (of the parsed dict and of the JSON text), and hypothesis
strategies for Quark / compressed-tensors configs and for JSON values.
"""
from __future__ import annotations

import copy
import json
import random
import re

from hypothesis import strategies as st

from support.hf_config_fixtures import FIXTURES, fixture


BASE_FILES = sorted(p for p in FIXTURES.glob("*.json") if p.name != "broken_not_json.json")
BASES = {p.name: fixture(p.name) for p in BASE_FILES}

VALUES = [None, True, False, 0, -1, 1, 4, 6, 8, 16, 32, 64, 2 ** 64, -(2 ** 70), 1.5, -0.0,
          1e308, "", "fp4", "mx", "fp6_e2m3", "fp8_e4m3", "fp5", "int8", "e8m0", "float32",
          "per_group", "per_tensor", "per_channel", "per_block", "float", "int", "group",
          "tensor", "token", "channel", "tensor_group", "block", "local", "even", "floor",
          "enhanced", "ceil", "half_even", "torch.uint8", "torch.float16", "uint8",
          "mxfp4-pack-quantized", "nvfp4-pack-quantized", "quark", "compressed-tensors", "gptq",
          "re:(", "re:.*", "re:[", "re:(a|b", "*", "[", "Linear", "lm_head", "ü☃𝔘", "\n",
          "a\nb", "\x00", "\ud800", "x" * 3000, [], {}, [1, 32], [32, 32], [None], [[[]]],
          {"a": 1}, ["re:(unclosed"], ["Linear"], [1, "a"], {"dtype": "fp4"}]
KEYS = ["quant_method", "global_quant_config", "layer_quant_config", "layer_type_quant_config",
        "exclude", "export", "kv_cache_group", "algo_config", "softmax_quant_spec",
        "config_groups", "ignore", "format", "targets", "weights", "input_activations",
        "output_activations", "weight", "input_tensors", "output_tensors", "bias", "dtype",
        "mx_element_dtype", "qscheme", "group_size", "block_size", "scale_format",
        "is_dynamic", "scale_calculation_mode", "round_method", "symmetric", "ch_axis",
        "is_scale_quant", "scale_type", "num_bits", "type", "strategy", "scale_dtype",
        "dynamic", "actorder", "block_structure", "kv_cache_scheme", "text_config",
        "quantization_config", "", "ü", "a\nb", "x" * 500]
LITERALS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "9" * 5000, "1" + "0" * 120,
            "0.5e-400", "true", "null", '"\\ud800"', '"\\u0000"']


# --- mutators ------------------------------------------------------------------------------------

def _containers(data, path=()):
    """Every (path, container) of a JSON value, depth first."""
    out = [(path, data)]
    items = data.items() if isinstance(data, dict) else enumerate(data) \
        if isinstance(data, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)):
            out += _containers(v, path + (k,))
    return out


def _value(rng: random.Random, first: int = len(VALUES)):
    return copy.deepcopy(rng.choice(VALUES[:first]))  # VALUES' lists and dicts stay unshared


def json_depth(value) -> int:
    """Levels of objects / arrays (iterative: mutated values nest hundreds deep)."""
    best, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            best = max(best, d)
            stack += [(x, d + 1) for x in (v.values() if isinstance(v, dict) else v)]
    return best


def _deep(rng: random.Random):
    n = rng.choice([3, 20, 99, 101, 300])
    v: object = _value(rng, 20)
    for _ in range(n):
        v = [v] if rng.random() < 0.5 else {"a": v}
    return v


def mutate_dict(cfg: dict, rng: random.Random) -> None:
    """One structural change at a random place of the config."""
    places = _containers(cfg)
    _, node = rng.choice(places)
    kind = rng.choice(["set", "set", "set", "drop", "rename", "wrap", "add", "deep", "copy",
                       "empty"])
    if isinstance(node, list):
        if not node or kind == "add":
            node.append(_value(rng))
            return
        i = rng.randrange(len(node))
        if kind == "drop":
            del node[i]
        elif kind == "deep":
            node[i] = _deep(rng)
        else:
            node[i] = _value(rng)
        return
    if not node or kind == "add":
        node[rng.choice(KEYS)] = _value(rng)
        return
    key = rng.choice(list(node))
    if kind == "set":
        node[key] = _value(rng)
    elif kind == "drop":
        del node[key]
    elif kind == "rename":
        node[rng.choice(KEYS)] = node.pop(key)
    elif kind == "wrap":
        node[key] = [node[key]] if rng.random() < 0.5 else {"x": node[key]}
    elif kind == "deep":
        node[key] = _deep(rng)
    elif kind == "copy":
        node[key] = copy.deepcopy(rng.choice(places)[1])
    else:
        node[key] = type(node[key])() if isinstance(node[key], (dict, list, str)) else None


def mutate_text(text: str, rng: random.Random) -> tuple[bytes, str, int | None]:
    """One change to the JSON text: (bytes, kind, the line a located refusal must name)."""
    kind = rng.choice(["literal", "literal", "dup", "nest", "truncate", "bytes", "drop_char",
                       "bom", "top", "long"])
    if kind == "literal":  # replace one scalar value by a refused / odd literal
        spots = [m for m in re.finditer(r': (-?\d[\d.eE+-]*|true|false|null|"[^"\n]*")', text)]
        if spots:
            m = rng.choice(spots)
            lit = rng.choice(LITERALS)
            refused = lit in ("NaN", "Infinity", "-Infinity", "1e400", "-1e999") or len(lit) > 100
            out = text[:m.start(1)] + lit + text[m.end(1):]
            return out.encode("utf-8", "surrogatepass"), kind, \
                (text.count("\n", 0, m.start(1)) + 1) if refused else None
    if kind == "dup":  # a duplicate key in one object
        spots = [m.end() for m in re.finditer(r"\{\s*(?=\")", text)]
        if spots:
            pos = rng.choice(spots)
            key = json.dumps(rng.choice(KEYS[:20]))
            out = text[:pos] + f"{key}: 1,\n{key}: 2,\n" + text[pos:]
            return out.encode("utf-8", "surrogatepass"), kind, text.count("\n", 0, pos) + 2
    if kind == "nest":  # deep nesting in place of one value
        spots = [m for m in re.finditer(r": (-?\d+|true|false|null|\"[^\"\n]*\")", text)]
        if spots:
            m = rng.choice(spots)
            n = rng.choice([101, 150, 999, 1001, 5000, 20000])
            o, c = rng.choice([("[", "]"), ('{"a": ', "}")])
            out = text[:m.start(1)] + o * n + "1" + c * n + text[m.end(1):]
            return out.encode("utf-8", "surrogatepass"), kind, text.count("\n", 0, m.start(1)) + 1
    raw = text.encode("utf-8", "surrogatepass")
    if kind == "truncate":
        return raw[:rng.randrange(len(raw) + 1)], kind, None
    if kind == "bytes":
        pos = rng.randrange(len(raw) + 1)
        return raw[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 6))) + \
            raw[pos:], kind, None
    if kind == "drop_char":
        pos = rng.randrange(len(raw))
        return raw[:pos] + raw[pos + 1:], kind, None
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw, kind, None
    if kind == "top":
        return rng.choice([b"[]", b'"config"', b"1", b"null", b"", b"   ", b"{}",
                           b'[{"quant_method": "quark"}]']), kind, None
    pos = rng.randrange(len(text) + 1)  # "long": a 200k-character string value
    out = text[:pos] + '"' + "y" * 200_000 + '"' + text[pos:]
    return out.encode("utf-8", "surrogatepass"), kind, None


def dump(cfg, rng: random.Random) -> str:
    return json.dumps(cfg, indent=rng.choice([None, 1, 2, 4]), ensure_ascii=rng.random() < 0.5)


# --- generated from scratch: structurally plausible specs ----------------------------------------

def _choice(xs):
    return st.sampled_from(xs)


quark_spec = st.fixed_dictionaries({}, optional={
    "dtype": _choice(["fp4", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "fp8_e5m2", "int8", "mx",
                      "fp5", None, 4]),
    "mx_element_dtype": _choice(["fp4", "fp8_e4m3", None]),
    "qscheme": _choice(["per_group", "per_block", "per_tensor", "per_channel", "x", None]),
    "group_size": _choice([32, 16, 64, None, True, "32", 32.0]),
    "block_size": _choice([[1, 32], [32, 32], None, 32]),
    "scale_format": _choice(["e8m0", "float32", "fp32", None, 0]),
    "is_dynamic": _choice([True, False, None, "yes", 1]),
    "scale_calculation_mode": _choice(["even", "floor", "enhanced", "ceil", None, [1]]),
    "round_method": _choice(["half_even", "floor", None]),
    "symmetric": _choice([True, False, None]),
    "ch_axis": _choice([-1, 0, 1, None, "a"]),
    "is_scale_quant": _choice([False, True]),
    "scale_type": _choice(["float", "int", None])})
ct_args = st.fixed_dictionaries({}, optional={
    "num_bits": _choice([4, 8, 6, None, "4", 4.0, True]),
    "type": _choice(["float", "int", None, 1]),
    "strategy": _choice(["group", "tensor", "token", "channel", "tensor_group", "block",
                         "attn_head", "x", None]),
    "group_size": _choice([32, 16, None, 0, -32, 2 ** 80]),
    "scale_dtype": _choice(["torch.uint8", "uint8", "torch.float8_e8m0fnu", None,
                            "torch.float16", 3]),
    "dynamic": _choice([True, False, "local", None, 0]),
    "symmetric": _choice([True, False]), "actorder": _choice([None, "group", "weight"]),
    "block_structure": _choice([None, [128, 128]])})
names = st.one_of(_choice(["*", "*self_attn*", "Linear", "lm_head", "re:.*", "re:(", "[",
                           "model.layers.0.mlp.down_proj", "re:.*mlp.gate$"]),
                  st.text(max_size=8))
quark_layer = st.one_of(st.none(), st.integers(), st.fixed_dictionaries(
    {"weight": st.one_of(st.none(), quark_spec, st.lists(quark_spec, max_size=2)),
     "input_tensors": st.one_of(st.none(), quark_spec)},
    optional={"output_tensors": st.one_of(st.none(), quark_spec), "bias": st.none()}))
quark_cfg = st.fixed_dictionaries(
    {"quant_method": st.just("quark"), "global_quant_config": quark_layer},
    optional={"layer_quant_config": st.dictionaries(names, quark_layer, max_size=3),
              "layer_type_quant_config": st.one_of(st.dictionaries(names, quark_layer,
                                                                   max_size=2), st.lists(
                                                       st.integers(), max_size=2)),
              "exclude": st.one_of(st.lists(st.one_of(names, st.integers()), max_size=4),
                                   st.text(max_size=3)),
              "export": st.fixed_dictionaries({}, optional={"kv_cache_group": st.one_of(
                  st.lists(names, max_size=2), st.integers(), st.text(max_size=3))}),
              "algo_config": st.one_of(st.lists(st.one_of(st.fixed_dictionaries(
                  {"name": names}), st.integers()), max_size=2), st.text(max_size=3)),
              "softmax_quant_spec": st.one_of(st.none(), quark_spec)})
ct_group = st.one_of(st.integers(), st.fixed_dictionaries(
    {"targets": st.one_of(st.lists(names, max_size=3), st.text(max_size=3), st.none()),
     "weights": st.one_of(st.none(), ct_args, st.integers())},
    optional={"input_activations": st.one_of(st.none(), ct_args),
              "output_activations": st.one_of(st.none(), ct_args),
              "format": _choice(["mxfp4-pack-quantized", "nvfp4-pack-quantized", None, 7])}))
ct_cfg = st.fixed_dictionaries(
    {"quant_method": st.just("compressed-tensors"),
     "config_groups": st.one_of(st.dictionaries(names, ct_group, max_size=3), st.none())},
    optional={"format": _choice(["mxfp4-pack-quantized", "nvfp4-pack-quantized", None, 1]),
              "ignore": st.one_of(st.lists(st.one_of(names, st.none()), max_size=4),
                                  st.integers()),
              "kv_cache_scheme": st.one_of(st.none(), ct_args),
              "sparsity_config": st.one_of(st.none(), st.just({"format": "dense"}))})
wrapped = st.one_of(quark_cfg, ct_cfg).flatmap(lambda q: st.sampled_from([
    q, {"quantization_config": q}, {"text_config": {"quantization_config": q}}]))


# --- the line of a broken field: where the tensor specs are, which fields to break ------------

def spec_paths(data, path=()):
    """Paths of every tensor spec dict (Quark or compressed-tensors) in a config."""
    out = []
    if isinstance(data, dict):
        if "dtype" in data or "num_bits" in data:
            out.append(path)
        for k, v in data.items():
            out += spec_paths(v, path + (k,))
    return out


SPEC_FIELDS = ["dtype", "qscheme", "group_size", "scale_format", "is_dynamic",
               "scale_calculation_mode", "round_method", "ch_axis", "num_bits", "type",
               "strategy", "scale_dtype", "dynamic", "actorder", "block_structure"]


# --- JSON values and json.dumps's own layout --------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
              st.floats(allow_nan=False, allow_infinity=False)),
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(st.text(max_size=4), kids, max_size=4)),
    max_leaves=30)


def dumped_layout(value, line: int, path: tuple, out: dict) -> int:
    """With indent >= 1, json.dumps puts each item / key on its own line: the lines taken."""
    out[path] = line
    items = list(value.items() if isinstance(value, dict) else enumerate(value)) \
        if isinstance(value, (dict, list)) else []
    if not items:
        return 1
    used = 1
    for k, v in items:
        used += dumped_layout(v, line + used, path + (k,), out)
    return used + 1
