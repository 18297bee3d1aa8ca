"""Producer-written configs (issue 15, section 4): AutoRound, gpt-oss (transformers' Mxfp4Config),
compressed-tensors 0.20 presets and amd-quark map to the schemes whose numbers they run, or are
refused in one short line that points the right way. The configs come from the producers' own
code (tests/support/producer_configs.py); the numerics checks use the producers' own quantizers
as the oracle for the activation roundings the mapping claims.
"""
from __future__ import annotations

import json

import pytest
import torch

from kernels import mx_qdq, mx_quantize
from registry.configs.hf_config import group_for_module, schemes_from_config
from registry.files.catalog import load_schemes

from support.producer_configs import (PRODUCERS_DIR, QUARK_FILES, autoround_configs,
                                      compressed_tensors_config, gptoss_config, quark_configs)

SHORT = 400  # a refusal is one line, short enough to read


def _mapped(groups) -> dict[str, str]:
    return {g.path: g.scheme.name for g in groups if g.scheme is not None}


# --- AutoRound ------------------------------------------------------------------------------

AR_RUNS = {
    # MXFP4 (floor activations) with per-layer overrides written into extra_config
    "mxfp4": ("MXFP4", {"layer_config": {
        "model.layers.0.mlp.down_proj": {"bits": 16},
        "model.layers.0.self_attn.v_proj": {"act_data_type": "mx_fp_rceil"},
        "model.layers.0.self_attn.k_proj": {"act_bits": 16},
        "model.layers.0.self_attn.q_proj": {"bits": 8, "act_bits": 8},
        "lm_head": {"bits": 8, "data_type": "mx_fp", "act_bits": 16}}}),
    "mxfp8_rceil": ("MXFP8_RCEIL", {}),
    # weight-only, act_data_type written with act_bits 16
    "w4a16": ({"bits": 4, "group_size": 32, "data_type": "mx_fp", "act_bits": 16,
               "act_data_type": "mx_fp"}, {}),
}
L0 = "model.layers.0"
EXTRA = 'quantization_config.extra_config["{}"]'


@pytest.fixture(scope="module")
def autoround(tmp_path_factory):
    pytest.importorskip("auto_round")
    return autoround_configs(tmp_path_factory.mktemp("autoround"), AR_RUNS)


def test_autoround_maps_each_layer_to_its_rounding(autoround):
    cfg = autoround["mxfp4"]
    q = cfg["quantization_config"]
    assert q["quant_method"] == "auto-round" and q["act_data_type"] == "mx_fp"
    groups = schemes_from_config(cfg)
    assert [g.error for g in groups if g.error] == []
    assert _mapped(groups) == {
        "quantization_config": "w_mxfp4_floor_a_mxfp4_floor",
        EXTRA.format(f"{L0}.self_attn.v_proj"): "w_mxfp4_floor_a_mxfp4_rceil",
        EXTRA.format(f"{L0}.self_attn.k_proj"): "w_mxfp4",
        EXTRA.format(f"{L0}.self_attn.q_proj"): "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_floor",
        EXTRA.format("lm_head"): "w_mxfp8_e4m3"}
    pick = {n: group_for_module(groups, n) for n in (
        f"{L0}.mlp.down_proj", f"{L0}.mlp.up_proj", f"{L0}.self_attn.k_proj", "lm_head",
        "model.embed_tokens")}
    assert pick[f"{L0}.mlp.down_proj"].note.startswith("not quantized (bits 16: a float layer")
    assert pick[f"{L0}.mlp.up_proj"].scheme.name == "w_mxfp4_floor_a_mxfp4_floor"
    assert pick[f"{L0}.self_attn.k_proj"].scheme.name == "w_mxfp4"
    assert pick["lm_head"].scheme.name == "w_mxfp8_e4m3" and pick["model.embed_tokens"] is None
    # stored weights: floor-rounded scales load exactly; a scheme with even says so
    assert "re-quantizing from float with w_mxfp4 rounds them by even" in \
        pick[f"{L0}.self_attn.k_proj"].caveats[0]
    assert pick[f"{L0}.mlp.up_proj"].caveats == ()


def test_autoround_rceil_and_weight_only(autoround):
    (g, *_) = schemes_from_config(autoround["mxfp8_rceil"])
    assert g.scheme.name == "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil" and g.caveats == ()
    cfg = autoround["w4a16"]
    assert "act_bits" not in cfg["quantization_config"]  # auto-round drops act_* at 16 bits
    (g, *_) = schemes_from_config(cfg)
    assert g.scheme.name == "w_mxfp4" and g.scheme.activation is None and len(g.caveats) == 1
    q = dict(cfg["quantization_config"], act_bits=16, act_data_type="mx_fp_rceil",
             act_dynamic=True)  # written anyway: still weight-only
    assert schemes_from_config(q)[0].scheme.name == "w_mxfp4"


def test_autoround_refusals_are_short_and_named(autoround):
    q = autoround["mxfp4"]["quantization_config"]
    for change, needle in (({"act_group_size": 64}, "act_group_size: 64 but OCP MX blocks"),
                           ({"data_type": "int"}, 'data_type: "int" is not an OCP MX'),
                           ({"act_dynamic": False}, "act_dynamic: false but static MX"),
                           ({"act_data_type": "mx_fp8e5m2_rceil"}, "write mx_fp_rceil")):
        (g, *_) = schemes_from_config(dict(q, **change))
        assert g.scheme is None and needle in g.error and len(g.error) < SHORT, g.error
        assert g.error.startswith("<config dict>: quantization_config: ")


@pytest.mark.parametrize("name,fmt,bits", [("mxfp4", "mxfp4", 4), ("mxfp8_e4m3", "mxfp8_e4m3", 8)])
def test_autoround_activation_roundings_are_the_schemes(name, fmt, bits):
    """auto-round's own activation quantizers equal the mapped schemes' activation keys bit for
    bit, and `even` (what the mapping used to need) differs."""
    mxfp = pytest.importorskip("auto_round.data_type.mxfp")
    catalog = load_schemes()
    torch.manual_seed(0)
    x = (torch.randn(64, 256) * torch.logspace(-3, 3, 256)).to(torch.bfloat16)
    for quant, data_type, scheme in (
            (mxfp.quant_mx, "mx_fp", f"w_{name}_floor_a_{name}_floor"),
            (mxfp.quant_mx_rceil, "mx_fp_rceil", f"w_{name}_floor_a_{name}_rceil")):
        theirs = quant(x, bits=bits, group_size=32, data_type=data_type)[0]
        key = catalog.get(scheme).activation
        assert key.format == fmt and not key.static
        ours = mx_qdq(x, fmt, rounding=key.scale.rounding, backend="reference")
        assert torch.equal(theirs, ours), scheme
        assert not torch.equal(theirs, mx_qdq(x, fmt, rounding="even", backend="reference"))


# --- gpt-oss (transformers' Mxfp4Config) ----------------------------------------------------

GPT_OSS_SKIP = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                "lm_head", "model.layers.1.mlp.experts"]


def test_gptoss_experts_map_to_w_mxfp4_and_skips_follow_transformers():
    pytest.importorskip("transformers")
    from transformers.quantizers.quantizers_utils import should_convert_module

    cfg = gptoss_config(GPT_OSS_SKIP)
    assert cfg["quantization_config"]["quant_method"] == "mxfp4"
    groups = schemes_from_config(cfg)
    assert _mapped(groups) == {"quantization_config": "w_mxfp4"} and groups[0].producer == \
        "gpt-oss"
    assert "not recorded" in groups[0].caveats[0]
    assert [g.targets[0] for g in groups if g.status == "not quantized"] == GPT_OSS_SKIP
    for layer in (0, 1):
        experts = f"model.layers.{layer}.mlp.experts"
        converted = should_convert_module(experts, GPT_OSS_SKIP)  # transformers' own rule
        for name in (experts, f"{experts}.gate_up_proj", f"{experts}.down_proj"):
            g = group_for_module(groups, name)
            assert (g.status == "mapped") == converted, (name, g.status)
    assert group_for_module(groups, "model.layers.0.self_attn.q_proj").status == "not quantized"
    assert group_for_module(groups, "model.layers.0.mlp.router").status == "not quantized"


# --- compressed-tensors 0.20 presets --------------------------------------------------------

CT_EXPECTED = {"MXFP4A16": "w_mxfp4", "MXFP4": "w_mxfp4_a_mxfp4", "MXFP6A16": "w_mxfp6_e2m3",
               "MXFP8A16": "w_mxfp8_e4m3"}
CT_REFUSED = {
    "MXFP4XFP8": ["input_activations.scale_dtype: null", "scales in the model's dtype",
                  "no registry scheme is near (the activation is not OCP MX)"],
    "MXFP6A8": ["input_activations.num_bits: 8", "at E2M1's mantissa width"],
    "MXFP8": ["input_activations.num_bits: 8", "at E2M1's mantissa width"],
    "NVFP4": ['"nvfp4-pack-quantized" is NVFP4', "no registry scheme is near"],
}


@pytest.fixture(scope="module")
def presets():
    pytest.importorskip("compressed_tensors")
    return {p: compressed_tensors_config(p) for p in (*CT_EXPECTED, *CT_REFUSED)}


def test_compressed_tensors_presets(presets):
    for preset, scheme in CT_EXPECTED.items():
        g = schemes_from_config(presets[preset])[0]
        assert g.scheme is not None and g.scheme.name == scheme, (preset, g.error)
        assert bool(g.caveats) == (preset == "MXFP8A16"), (preset, g.caveats)
    for preset, needles in CT_REFUSED.items():
        g = schemes_from_config(presets[preset])[0]
        assert g.scheme is None and len(g.error) < SHORT, (preset, g.error)
        for n in needles:
            assert n in g.error, (preset, n, g.error)
        assert "e8m0 MXFP8" not in g.error and "mxfp8_e4m3:e8m0/b128" not in g.error


def test_compressed_tensors_mxfp6_scales_are_even():
    """compressed-tensors' generate_mx_scales for num_bits 6 (E2M3) is the registry's `even`."""
    mx = pytest.importorskip("compressed_tensors.quantization.utils.mxfp_utils")
    torch.manual_seed(1)
    x = (torch.randn(256, 32) * torch.logspace(-4, 4, 256)[:, None]).to(torch.bfloat16)
    theirs = mx.generate_mx_scales(x.abs().amax(dim=-1, keepdim=True), 6).to(torch.uint8)
    ours = mx_quantize(x, "mxfp6_e2m3", rounding="even", backend="reference").scales
    assert torch.equal(theirs, ours)


# --- amd-quark -------------------------------------------------------------------------------

def _quark_file(name: str) -> dict:
    return json.loads((PRODUCERS_DIR / name).read_text())


def test_quark_mxint8_block_fp8_nvfp4():
    mxint8 = schemes_from_config(PRODUCERS_DIR / "quark_mxint8.json")
    assert _mapped(mxint8) == {"quantization_config.global_quant_config": "w_mxint8_a_mxint8"}
    for name, needles in (("quark_block_fp8.json", ["[128, 128] blocks is block-scaled"]),
                          ("quark_nvfp4.json", ["a list of 2 specs"])):
        (g, *_) = schemes_from_config(PRODUCERS_DIR / name)
        assert g.scheme is None and len(g.error) < SHORT, g.error
        assert "no registry scheme is near" in g.error and "e8m0\\\")" not in g.error
        assert "write scale_format" not in g.error and "w_mxfp4_a_fp8" not in g.error
        assert all(n in g.error for n in needles), g.error


def test_quark_files_are_what_quark_writes():
    """The committed Quark configs (importing quark.torch takes 20-50 s, so the mapping tests
    read files) are what Quark's own code writes today."""
    pytest.importorskip("quark")
    assert {n: _quark_file(n) for n in QUARK_FILES} == \
        json.loads(json.dumps(quark_configs(), sort_keys=True))


# --- robustness: the new producers' configs, mutated ----------------------------------------

def test_mutated_producer_configs_never_crash(autoround):
    """AutoRound, gpt-oss and Quark producer configs under the fuzz mutator: every outcome is
    groups (mapped / one-line error / note) or one ConfigError, never another exception."""
    import copy
    import random

    from registry.configs.hf_config import ConfigError
    from support.config_fuzzing import mutate_dict

    catalog = load_schemes()
    bases = [*autoround.values(), gptoss_config(["lm_head", "model.layers.*.self_attn"]),
             *(_quark_file(n) for n in QUARK_FILES)]
    rng = random.Random(20261201)
    for _ in range(600):
        cfg = copy.deepcopy(rng.choice(bases))
        for _ in range(rng.choice([1, 2, 3])):
            mutate_dict(cfg, rng)
        try:
            groups = schemes_from_config(cfg, catalog)
        except ConfigError as e:
            assert "\n" not in str(e)
            continue
        for g in groups:
            assert g.status in ("mapped", "unmapped", "not quantized", "not mapped")
            assert g.error is None or ("\n" not in g.error and len(g.error) < 4000)
            assert g.scheme is None or g.contract == g.scheme.contract
        for name in ("model.layers.0.mlp.experts.down_proj", "lm_head", f"{L0}.mlp.up_proj"):
            try:
                group_for_module(groups, name)
            except ValueError:
                pass
