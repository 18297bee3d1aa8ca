"""`registry.configs.hf_config.schemes_from_config`: reading HF quantization configs and mapping
them to catalog schemes (the fixtures and expected schemes: tests/support/hf_config_fixtures.py; the
`registry resolve --from-config` command line: tests/registry/cli/test_from_config_cli.py).
"""
from __future__ import annotations

import copy
import json
import random

import pytest

from registry.files.catalog import load_schemes
from registry.errors import display_path
from registry.configs.hf_config import (ConfigError, group_for_module, nearest_scheme,
                                schemes_from_config)
from registry.configs.hf_quark import _enhanced_is_rceil, read_spec

from support.hf_config_fixtures import EXPECTED, FIXTURES, GLOBAL, GROUP0, LAYER, fixture
from support.paths import SCHEMES


# --- every fixture maps to the schemes written by hand (hf_config_fixtures.EXPECTED) -----------

@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_maps_to_expected_schemes(name):
    schemes, excluded = EXPECTED[name]
    groups = schemes_from_config(FIXTURES / name)
    mapped = {g.path: g.scheme.name for g in groups if g.scheme is not None}
    assert mapped == schemes
    assert [g.error for g in groups if g.error] == []
    listed = [g for g in groups if g.status == "not quantized"]
    assert [g.targets[0] for g in listed] == excluded
    word = "ignore" if name.startswith("ct_") else "exclude"
    assert all(g.note == f"not quantized ({word} pattern {g.targets[0]})" for g in listed)
    for g in groups:  # the contract the group read equals the scheme's, not just its name
        if g.scheme is not None:
            assert g.contract == g.scheme.contract


def test_inputs_dict_directory_and_bare(tmp_path):
    data = fixture("quark_mxfp4_w4a4.json")
    by_dict = schemes_from_config(data)
    (tmp_path / "config.json").write_text(json.dumps(data))
    by_dir = schemes_from_config(tmp_path)
    bare = schemes_from_config(data["quantization_config"])
    assert by_dict[0].source == "<config dict>" and by_dir[0].source.endswith("config.json")
    assert [g.scheme.name for g in by_dict if g.scheme] == ["w_mxfp4_a_mxfp4"]
    assert [g.scheme for g in by_dir] == [g.scheme for g in by_dict]
    assert bare[0].path == "global_quant_config" and bare[0].scheme.name == "w_mxfp4_a_mxfp4"


def test_contracts_not_names_third_party_scheme(tmp_path):
    """A scheme from another directory is found by its contract; a renamed copy of a shipped
    contract is chosen under its own name."""
    (tmp_path / "acme_w4a8mx.yaml").write_text(
        "name: acme_w4a8mx\nsummary: MXFP4 weights, MXFP8 activations\naliases: []\n"
        "weight:     {format: mxfp4, scale: {format: e8m0, block: 32, rounding: even}, "
        "static: true}\n"
        "activation: {format: mxfp8_e4m3, scale: {format: e8m0, block: 32, rounding: even}, "
        "static: false}\n")
    cfg = fixture("quark_mixed_layers.json")
    attn = cfg["quantization_config"]["layer_quant_config"]["*self_attn*"]
    attn["weight"]["dtype"] = "fp4"
    shipped = schemes_from_config(cfg)[1]
    assert shipped.scheme is None and "nearest scheme" in shipped.error
    with_acme = schemes_from_config(cfg, load_schemes([tmp_path]))[1]
    assert with_acme.scheme.name == "acme_w4a8mx"

    only = tmp_path / "only"
    only.mkdir()
    text = (SCHEMES / "w_mxfp4_a_mxfp4.yaml").read_text()
    renamed = text.replace("name: w_mxfp4_a_mxfp4", "name: vendor_w4a4")
    (only / "vendor_w4a4.yaml").write_text(renamed.replace("aliases: [mxfp4, mxfp4_w4a4]",
                                                           "aliases: []"))
    cat = load_schemes([only], include_shipped=False)
    assert list(cat.schemes) == ["vendor_w4a4"]
    assert schemes_from_config(FIXTURES / "quark_mxfp4_w4a4.json", cat)[0].scheme.name == \
        "vendor_w4a4"


# --- broken fixtures and broken variants: the field is named, with the nearest scheme ----------

# LINE: the line of the first offending value (by hand from the fixture files)
@pytest.mark.parametrize("name,line,path,needles", [
    ("broken_quark_group_size_64.json", 57, GLOBAL,
     ["weight.group_size: 64 but OCP MX blocks are 32",
      "nearest scheme w_mxfp4_a_mxfp4 differs in weight scale.block: 64 here"]),
    ("broken_quark_scale_mode_ceil.json", 63, GLOBAL,
     ['weight.scale_calculation_mode: "ceil"', 'input_tensors.scale_calculation_mode: "ceil"',
      "none of the registry's roundings",
      "nearest scheme w_mxfp4_a_mxfp4 differs in weight scale.rounding: ceil here"]),
    ("broken_quark_dtype_fp5.json", 138, f'{LAYER}["*.mlp.experts.*"]',
     ['weight.dtype: "fp5" is not an OCP MX element type',
      "nearest scheme w_mxfp4_a_mxfp6_e3m2 differs in weight format: fp5 here"]),
    ("broken_ct_nvfp4.json", 17, GROUP0,
     ['format: "nvfp4-pack-quantized" is NVFP4', 'weights.strategy: "tensor_group"',
      'input_activations.dynamic: "local"',
      "no registry scheme is near (the weight is not OCP MX)"]),
])
def test_broken_fixture_names_field_and_nearest(name, line, path, needles):
    groups = schemes_from_config(FIXTURES / name)
    bad = [g for g in groups if g.error]
    assert [g.path for g in bad] == [path]
    msg = bad[0].error
    assert msg.startswith(f"{display_path(FIXTURES / name)}:{line}: {path}: ") and "\n" not in msg
    assert bad[0].line == line and bad[0].where == f"{display_path(FIXTURES / name)}:{line}"
    for n in needles:
        assert n in msg, (n, msg)


def _qg(cfg):  # the global layer config of a Quark fixture
    return cfg["quantization_config"]["global_quant_config"]


def _cg(cfg):  # group_0 of a compressed-tensors fixture
    return cfg["quantization_config"]["config_groups"]["group_0"]


def _set(d, **kv):
    d.update(kv)


QUARK = "quark_mxfp4_w4a4.json"
CT = "ct_mxfp4_w4a4.json"
VARIANTS = [
    # (base, mutate, path, needles)
    (QUARK, lambda c: _set(_qg(c)["weight"], qscheme="per_channel"), GLOBAL,
     ['weight.qscheme: "per_channel" (one scale per output channel) has no registry key']),
    (QUARK, lambda c: _set(_qg(c)["weight"], scale_format=None), GLOBAL,
     ["weight.scale_format: null but OCP MX scales are e8m0", "nearest scheme w_mxfp4_a_mxfp4"]),
    (QUARK, lambda c: _qg(c)["weight"].pop("is_dynamic"), GLOBAL,
     ["weight.is_dynamic: null must be true"]),
    (QUARK, lambda c: _set(_qg(c), weight=[_qg(c)["weight"], _qg(c)["weight"]]), GLOBAL,
     ["weight: a list of 2 specs (two-level scales"]),
    (QUARK, lambda c: _set(_qg(c), output_tensors=_qg(c)["input_tensors"]), GLOBAL,
     ["output_tensors: set, but registry schemes quantize weights and inputs only"]),
    (QUARK, lambda c: _set(_qg(c), bias=_qg(c)["input_tensors"]), GLOBAL, ["bias: set"]),
    (QUARK, lambda c: _set(_qg(c)["weight"], symmetric=False), GLOBAL,
     ["weight.symmetric: false (a zero point)"]),
    (QUARK, lambda c: _set(_qg(c)["input_tensors"], round_method="floor"), GLOBAL,
     ['input_tensors.round_method: "floor" but registry elements round to nearest']),
    (QUARK, lambda c: _set(_qg(c)["weight"], ch_axis=0), GLOBAL, ["weight.ch_axis: 0"]),
    (QUARK, lambda c: _set(_qg(c)["input_tensors"], is_dynamic=False), GLOBAL,
     ["input_tensors.is_dynamic: false but static MX activation scales are not supported",
      "nearest scheme w_mxfp4_a_mxfp4 differs in activation static: static here"]),
    (QUARK, lambda c: _set(_qg(c), weight=None), GLOBAL,
     ["weight: null but the group quantizes its inputs"]),
    (QUARK, lambda c: _set(_qg(c)["weight"], scale_calculation_mode="floor"), GLOBAL,
     ["no scheme in the catalog has this contract (W=mxfp4:e8m0/b32:floor:static",
      'weight scale.rounding: floor here (weight.scale_calculation_mode: "floor")']),
    (QUARK, lambda c: _set(_qg(c)["weight"], scale_calculation_mode="enhanced"), GLOBAL,
     ["(W=mxfp4:e8m0/b32:rceil:static", "weight scale.rounding: rceil here"]),
    (QUARK, lambda c: _set(_qg(c)["weight"], dtype="fp8_e4m3", scale_calculation_mode="enhanced"),
     GLOBAL, ["not the max normal of mxfp8_e4m3, so it is not rceil"]),
    (QUARK, lambda c: _set(_qg(c)["weight"], qscheme="per_block", group_size=None,
                           block_size=[32, 32]), GLOBAL,
     ["weight.block_size: [32, 32] but an OCP MX scale covers a 1 x 32 block"]),
    (QUARK, lambda c: _set(c["quantization_config"], layer_quant_config={"*q_proj": 7}),
     f'{LAYER}["*q_proj"]', ["7 is not a layer config object"]),
    (QUARK, lambda c: _set(c["quantization_config"], layer_quant_config=[1]), LAYER,
     ["is not an object of pattern -> layer config"]),
    (CT, lambda c: _set(_cg(c)["weights"], group_size=16), GROUP0,
     ["weights.group_size: 16 but OCP MX blocks are 32", "nearest scheme w_mxfp4_a_mxfp4"]),
    (CT, lambda c: _set(_cg(c)["weights"], scale_dtype="torch.float16"), GROUP0,
     ['weights.scale_dtype: "torch.float16" but OCP MX scales are e8m0']),
    (CT, lambda c: _set(_cg(c)["weights"], num_bits=8), GROUP0,  # stored: rounding moot
     ['format: "mxfp4-pack-quantized" but weights are "mxfp8_e4m3"']),
    (CT, lambda c: _set(_cg(c)["input_activations"], num_bits=8), GROUP0,
     ["input_activations.num_bits: 8 with type \"float\": compressed-tensors rounds MXFP8 "
      "scales at E2M1"]),
    (CT, lambda c: _set(_cg(c)["weights"], num_bits=8, type="int"), GROUP0,
     ["no MX scale rule for int8"]),
    (CT, lambda c: _set(_cg(c)["weights"], num_bits=5), GROUP0,
     ['weights.num_bits: 5 with type "float" has no registry element format']),
    (CT, lambda c: _set(_cg(c)["input_activations"], dynamic="local"), GROUP0,
     ['input_activations.dynamic: "local" has no registry key']),
    (CT, lambda c: _set(_cg(c)["weights"], symmetric=False), GROUP0, ["weights.symmetric: false"]),
    (CT, lambda c: _set(_cg(c)["weights"], actorder="group"), GROUP0,
     ['weights.actorder: "group"']),
    (CT, lambda c: _set(_cg(c)["weights"], strategy="channel", group_size=None), GROUP0,
     ['weights.strategy: "channel" has no registry key (one scale per output channel)']),
    (CT, lambda c: _set(_cg(c), output_activations=_cg(c)["input_activations"]), GROUP0,
     ["output_activations: set"]),
    (CT, lambda c: _set(_cg(c), targets=[]), GROUP0, ["targets: [] must be a non-empty list"]),
    (CT, lambda c: _set(c["quantization_config"], config_groups={}),
     "quantization_config.config_groups", ["no config groups, so this config quantizes nothing"]),
    (CT, lambda c: _set(_cg(c)["input_activations"], dynamic=False), GROUP0,
     ["input_activations.dynamic: false but static MX activation scales"]),
]


@pytest.mark.parametrize("base,mutate,path,needles", VARIANTS,
                         ids=[f"{i}-{v[0][:5]}" for i, v in enumerate(VARIANTS)])
def test_broken_variant_names_field(base, mutate, path, needles):
    cfg = fixture(base)
    mutate(cfg)
    bad = [g for g in schemes_from_config(cfg) if g.error]
    assert [g.path for g in bad] == [path]
    msg = bad[0].error
    assert msg.startswith(f"<config dict>: {path}: ") and "\n" not in msg
    for n in needles:
        assert n in msg, (n, msg)


@pytest.mark.parametrize("name,needle", [
    ("broken_not_json.json", ":4: not JSON: Expecting property name"),
    ("broken_no_quantization_config.json", ":1: no quantization_config (looked at"),
    ("broken_unsupported_producer.json",
     ':19: quantization_config.quant_method: "gptq" is not supported; supported quant_method '
     "values: quark, compressed-tensors, auto-round, mxfp4 (gpt-oss)"),
    ("no_such_file.json", ": no such file"),
])
def test_unreadable_configs_raise_one_line(name, needle):
    with pytest.raises(ConfigError) as e:
        schemes_from_config(FIXTURES / name)
    assert str(e.value).startswith(display_path(FIXTURES / name) + needle), str(e.value)
    assert "\n" not in str(e.value)
    assert e.value.unreadable == (name in ("broken_not_json.json", "no_such_file.json"))


def test_positive_variants():
    """Spellings that do map: Quark `mx` + mx_element_dtype, Quark's MXFP8 per_block [1, 32],
    a layer_type_quant_config entry, compressed-tensors fp8 per-tensor activations."""
    cfg = fixture(QUARK)
    q = cfg["quantization_config"]
    _set(_qg(cfg)["weight"], dtype="mx", mx_element_dtype="fp4")
    _qg(cfg)["input_tensors"].pop("scale_calculation_mode")  # absent: Quark's default, even
    mxfp8 = copy.deepcopy(_qg(cfg))
    for spec in (mxfp8["weight"], mxfp8["input_tensors"]):
        _set(spec, dtype="fp8_e4m3", qscheme="per_block", group_size=None, block_size=[1, 32])
    q["layer_type_quant_config"] = {"Linear": mxfp8}
    groups = schemes_from_config(cfg)
    assert [(g.kind, g.scheme.name) for g in groups if g.scheme] == [
        ("global", "w_mxfp4_a_mxfp4"), ("layer type", "w_mxfp8_e4m3_a_mxfp8_e4m3")]
    assert groups[1].path == 'quantization_config.layer_type_quant_config["Linear"]'

    ct = fixture(CT)
    _cg(ct)["input_activations"] = {"num_bits": 8, "type": "float", "strategy": "tensor",
                                    "dynamic": False, "symmetric": True, "group_size": None,
                                    "scale_dtype": None, "observer": "minmax"}
    assert schemes_from_config(ct)[0].scheme.name == "w_mxfp4_a_fp8"


def test_not_mapped_parts_are_listed():
    cfg = fixture(QUARK)
    q = cfg["quantization_config"]
    q["export"]["kv_cache_group"] = ["*k_proj", "*v_proj"]
    q["algo_config"] = [{"name": "awq"}]
    kv_out = dict(copy.deepcopy(fixture("quark_w_mxfp4_a_fp8.json")["global_quant_config"]
                                ["input_tensors"]))
    q["layer_quant_config"] = {"*k_proj": dict(_qg(cfg), output_tensors=kv_out)}
    ct = fixture(CT)
    ct["quantization_config"]["kv_cache_scheme"] = {"num_bits": 8, "type": "float"}
    for c, needles in ((cfg, ["KV-cache quantization", "calibration algorithms (awq)"]),
                       (ct, ["KV-cache quantization"])):
        groups = schemes_from_config(c)
        notes = [g.note for g in groups if g.status == "not mapped"]
        assert len(notes) == len(needles) and all(n in x for n, x in zip(needles, notes))
        assert not any(g.error for g in groups)
    k_proj = schemes_from_config(cfg)[1]  # its output_tensors are the KV cache's spec
    assert k_proj.targets == ("*k_proj",) and k_proj.scheme.name == "w_mxfp4_a_mxfp4"
    q["export"]["kv_cache_group"] = []
    assert "output_tensors: set" in schemes_from_config(cfg)[1].error


# --- the nearest scheme and a seeded round trip over the catalog -------------------------------

def _quark_spec(key) -> dict | None:
    """A Quark spec (the fixture's field set) that should read back as `key`."""
    if key is None:
        return None
    base = copy.deepcopy(_qg(fixture(QUARK))["weight"])
    if not key.is_mx:
        spec = copy.deepcopy(fixture("quark_w_mxfp4_a_fp8.json")["global_quant_config"]
                             ["input_tensors"])
        return dict(spec, is_dynamic=not key.static)
    dtypes = {"mxfp4": "fp4", "mxfp6_e2m3": "fp6_e2m3", "mxfp6_e3m2": "fp6_e3m2",
              "mxfp8_e4m3": "fp8_e4m3", "mxfp8_e5m2": "fp8_e5m2", "mxint8": "int8"}
    modes = {"even": "even", "floor": "floor", "rceil": "enhanced"}
    return dict(base, dtype=dtypes[key.format], is_dynamic=not key.static,
                scale_calculation_mode=modes[key.scale.rounding])


def test_every_catalog_scheme_round_trips_and_one_field_off_names_it():
    catalog = load_schemes()
    rng = random.Random(20261206)
    for scheme in catalog:
        if any(k is not None and k.is_mx and k.scale.rounding == "rceil"
               and not _enhanced_is_rceil(k.format) for k in (scheme.weight, scheme.activation)):
            continue  # Quark cannot write this rceil (its "enhanced" divides by another max)
        layer = {"weight": _quark_spec(scheme.weight),
                 "input_tensors": _quark_spec(scheme.activation),
                 "output_tensors": None, "bias": None}
        cfg = {"quant_method": "quark", "global_quant_config": layer}
        assert schemes_from_config(cfg, catalog)[0].scheme.name == scheme.name
        roles = ["weight"] + (["input_tensors"] if scheme.activation is not None else [])
        role = rng.choice(roles)
        spec = layer[role]
        change = rng.choice(["group_size", "ceil", "is_dynamic"] if spec["qscheme"] ==
                            "per_group" else ["is_dynamic"])
        if change == "group_size":
            spec["group_size"] = rng.choice([16, 64, 128])
            field = f"{role}.group_size: {spec['group_size']}"
        elif change == "ceil":
            spec["scale_calculation_mode"] = "ceil"
            field = f'{role}.scale_calculation_mode: "ceil"'
        else:
            spec["is_dynamic"] = not spec["is_dynamic"]
            field = f"{role}.is_dynamic: {json.dumps(spec['is_dynamic'])}"
        (g,) = schemes_from_config(cfg, catalog)
        assert g.scheme is None and field in g.error, (scheme.name, change, g.error)
        assert f"nearest scheme {scheme.name} differs in" in g.error, (change, g.error)
        assert g.error.count("in the scheme") == 1


def test_nearest_scheme_counts_fields_and_breaks_ties_by_name():
    catalog = load_schemes()
    spec = read_spec({"dtype": "fp6_e3m2", "qscheme": "per_group", "group_size": 32,
                      "scale_format": "e8m0", "is_dynamic": False,
                      "scale_calculation_mode": "floor"}, "weight", "weight")
    s, diffs = nearest_scheme(spec, None, catalog)
    assert s.name == "w_mxfp6_e3m2" and [d.key_field for d in diffs] == ["scale.rounding"]
    fp5 = read_spec({"dtype": "fp5", "qscheme": "per_group", "group_size": 32,
                     "scale_format": "e8m0", "is_dynamic": False}, "weight", "weight")
    s, diffs = nearest_scheme(fp5, None, catalog)  # every weight-only scheme is 1 field off
    assert s.name == "w_mxfp4" and len(diffs) == 1 and diffs[0].config == "fp5"
    s, diffs = nearest_scheme(spec, spec.__class__("activation", "input_tensors", spec.facts),
                              catalog)  # 3 fields off: both roundings and static, or both
    # formats and static (the floor schemes); the tie goes to the first name
    assert s.name == "w_mxfp4_floor_a_mxfp4_floor"
    assert sorted(d.key_field for d in diffs) == ["format", "format", "static"]


# --- which entry decides a module ---------------------------------------------------------------

def test_group_for_module_follows_each_producer():
    groups = schemes_from_config(FIXTURES / "quark_mixed_layers.json")
    pick = {n: group_for_module(groups, n) for n in (
        "model.layers.0.self_attn.q_proj", "model.layers.3.mlp.experts.7.down_proj",
        "model.layers.3.mlp.shared_expert.up_proj", "model.layers.3.mlp.gate", "lm_head",
        "model.layers.3.mlp.down_proj")}
    assert pick["model.layers.0.self_attn.q_proj"].scheme.name == "w_mxfp8_e4m3_a_mxfp8_e4m3"
    assert pick["model.layers.3.mlp.experts.7.down_proj"].scheme.name == "w_mxfp4_a_mxfp6_e3m2"
    assert pick["model.layers.3.mlp.shared_expert.up_proj"].scheme.name == "w_mxfp6_e2m3"
    assert pick["model.layers.3.mlp.gate"].note == "not quantized (exclude pattern re:.*mlp.gate$)"
    assert pick["lm_head"].status == "not quantized"
    assert pick["model.layers.3.mlp.down_proj"].kind == "global"

    ct = schemes_from_config(FIXTURES / "ct_text_config_experts.json")
    assert group_for_module(ct, "model.layers.1.mlp.experts.3.w1").scheme.name == "w_mxfp4"
    assert group_for_module(ct, "model.layers.1.self_attn.q_proj").status == "not quantized"
    assert group_for_module(ct, "model.layers.1.mlp.experts.3.w1", "Conv1d") is None

    two = fixture(CT)  # an exact module name beats a class name, whatever the group order
    q = two["quantization_config"]
    q["config_groups"]["group_1"] = dict(_cg(two), input_activations=None,
                                         targets=["model.layers.0.mlp.down_proj"])
    q["ignore"] = ["re:.*mlp.gate"]
    g = schemes_from_config(two)
    assert group_for_module(g, "model.layers.0.mlp.down_proj").scheme.name == "w_mxfp4"
    assert group_for_module(g, "model.layers.1.mlp.down_proj").scheme.name == "w_mxfp4_a_mxfp4"
    # re: entries are re.match (anchored at the start only), as compressed-tensors matches
    assert group_for_module(g, "model.layers.0.mlp.gate_up_proj").status == "not quantized"
