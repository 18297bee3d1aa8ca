"""Issue 12, part 2: odd numbers in a checkpoint config (defect 2) and compressed-tensors
config groups claiming the same modules (defect 5), through `registry resolve --from-config`
and `quantize_model_from_config`."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from torch import nn

from registry import quantize_model_from_config
from registry.cli import main
from registry.errors import display_path
from registry.configs.hf_config import ClaimError, schemes_from_config
from registry.nn.layers import MXLinear

from support.hf_config_fixtures import fixture

CT = "ct_mxfp4_w4a4.json"
QUARK = "quark_mxfp4_w4a4.json"
GROUPS = 'quantization_config.config_groups["group_{}"]'


def write(tmp_path: Path, cfg: dict) -> tuple[Path, list[str]]:
    path = tmp_path / "config.json"
    text = json.dumps(cfg, indent=2)
    path.write_text(text)
    return path, text.splitlines()


def line_of(lines: list[str], needle: str, nth: int = 0) -> int:
    """The 1-based line of the nth line holding `needle` (found by text, not by the code
    under test)."""
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    assert len(hits) > nth, (needle, hits)
    return hits[nth]


def cli(capsys, path: Path) -> tuple[int, str, list[str]]:
    rc = main(["resolve", "--from-config", str(path), "--platform", "cpu"])
    out, err = capsys.readouterr()
    return rc, err, [line for line in out.splitlines() if line.startswith("error: ")]


def spec_of(cfg: dict, producer: str, role: str) -> dict:
    q = cfg["quantization_config"]
    if producer == "ct":
        return q["config_groups"]["group_0"][role]
    return q["global_quant_config"]["weight" if role == "weights" else "input_tensors"]


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(64, 64).requires_grad_(False)
        self.o_proj = nn.Linear(64, 64).requires_grad_(False)


def schemes_of(model: nn.Module) -> dict[str, str]:
    return {n: m.scheme_name for n, m in model.named_modules() if isinstance(m, MXLinear)}


# --- defect 2: group_size 32.0 and other odd numbers ---------------------------------------------

ODD = [32.5, "32", True, -32, 0, 1e3, [32], None]


@pytest.mark.parametrize("role", ["weights", "input_activations"])
@pytest.mark.parametrize("producer", ["ct", "quark"])
def test_integral_group_size_reads_as_32(capsys, tmp_path, producer, role):
    """JSON has one number type; compressed-tensors (pydantic, lax) and vLLM's Quark checks
    (`== 32`) read 32.0 as 32, and so does the registry (before: IndexError traceback)."""
    cfg = fixture(CT if producer == "ct" else QUARK)
    spec_of(cfg, producer, role)["group_size"] = 32.0
    path, _ = write(tmp_path, cfg)
    rc, err, errors = cli(capsys, path)
    assert (rc, err, errors) == (0, "", [])
    assert schemes_from_config(path)[0].scheme.name == "w_mxfp4_a_mxfp4"
    model = Tiny()
    quantize_model_from_config(model, path)
    assert schemes_of(model) == {"q_proj": "w_mxfp4_a_mxfp4", "o_proj": "w_mxfp4_a_mxfp4"}


@pytest.mark.parametrize("value", ODD, ids=repr)
@pytest.mark.parametrize("role", ["weights", "input_activations"])
@pytest.mark.parametrize("producer", ["ct", "quark"])
def test_odd_group_size_is_one_line_at_its_line(capsys, tmp_path, producer, role, value):
    cfg = fixture(CT if producer == "ct" else QUARK)
    spec_of(cfg, producer, role)["group_size"] = value
    path, lines = write(tmp_path, cfg)
    shown = display_path(path)
    raw = json.dumps(value)
    at = line_of(lines, f'"group_size": {raw}' if value != [32] else '"group_size": [')
    field = ("weights" if role == "weights" else "input_activations") if producer == "ct" \
        else ("weight" if role == "weights" else "input_tensors")

    rc, err, errors = cli(capsys, path)
    assert rc == 1 and err == "" and len(errors) == 1, (rc, err, errors)
    assert errors[0].startswith(f"error: {shown}:{at}: "), errors[0]
    assert f"{field}.group_size: {raw} but OCP MX blocks are 32" in errors[0]

    model = Tiny()
    with pytest.raises(ValueError) as e:
        quantize_model_from_config(model, path)
    text = str(e.value)
    assert "\n" not in text and f"{shown}:{at}: " in text and f"{field}.group_size" in text
    assert schemes_of(model) == {}


@pytest.mark.parametrize("bad_role", ["weight", "activation"])
def test_a_spec_no_key_forms_from_is_a_problem_not_an_index_error(bad_role):
    """The root cause: `_contract_of` dropped a spec whose key failed, so the activation's
    index ran past the list. Any value a producer check lets through (here a float block
    built by hand) must come back as a one-line group error."""
    from registry.files.catalog import load_schemes
    from registry.configs.hf_config import ConfigSource, GroupReading, SpecBuilder, map_group

    def spec(role: str, field: str, block: Any) -> Any:
        b = SpecBuilder(role, field, ("q", field))
        for k, v in (("format", "mxfp4"), ("scale.format", "e8m0"),
                     ("scale.granularity", "block"), ("scale.block", block),
                     ("scale.rounding", "even"), ("static", role == "weight")):
            b.fact(k, v, f"{field}.{k}")
        return b.build()

    w = spec("weight", "weights", 32.0 if bad_role == "weight" else 32)
    a = spec("activation", "input_activations", 32.0 if bad_role == "activation" else 32)
    g = map_group(GroupReading("q.g", "config group", ("Linear",), w, a, loc=("q",)),
                  load_schemes(), ConfigSource("<config dict>"), "compressed-tensors",
                  ("weights: null", "input_activations: null"))
    field = "weights" if bad_role == "weight" else "input_activations"
    assert g.scheme is None and g.error.startswith(
        f"<config dict>: q.g: {field}: does not form a valid {bad_role} key: "), g.error
    assert "\n" not in g.error


def test_nearest_scheme_quotes_a_text_number(tmp_path):
    """"32" (text) differs from 32: the hint must not read `32 here, 32 in the scheme`."""
    cfg = fixture(CT)
    spec_of(cfg, "ct", "weights")["group_size"] = "32"
    (g,) = [g for g in schemes_from_config(write(tmp_path, cfg)[0]) if g.error]
    assert 'weight scale.block: "32" here (weights.group_size: "32"), 32 in the scheme' \
        in g.error


@pytest.mark.parametrize("shape, ok", [([1, 32.0], True), ([True, 32], False),
                                       ([1.0, 32], True), ([1, "32"], False)], ids=repr)
def test_quark_per_block_size(shape, ok):
    """Quark's MXFP8 spelling, block_size [1, 32]: [true, 32] equals [1, 32] in Python but is
    not a size (before: silently accepted)."""
    spec = {"dtype": "fp8_e4m3", "qscheme": "per_block", "block_size": shape,
            "scale_format": "e8m0", "is_dynamic": False}
    layer = {"weight": spec, "input_tensors": dict(spec, is_dynamic=True)}
    (g,) = schemes_from_config({"quant_method": "quark", "global_quant_config": layer})
    if ok:
        assert g.scheme.name == "w_mxfp8_e4m3_a_mxfp8_e4m3", g.error
    else:
        assert g.scheme is None and f"weight.block_size: {json.dumps(shape)} but" in g.error


@pytest.mark.parametrize("field, value, needle", [
    ("symmetric", 0, "weights.symmetric: 0 must be true or false"),
    ("symmetric", "false", 'weights.symmetric: "false" must be true or false'),
    ("actorder", True, "weights.actorder: true (groups permuted through g_idx)"),
    ("actorder", 0, "weights.actorder: 0 is not a compressed-tensors actorder"),
], ids=repr)
def test_compressed_odd_flags_are_refused(tmp_path, field, value, needle):
    """compressed-tensors reads symmetric 0 / "false" as false (a zero point) and actorder
    true as "group" (g_idx); before, the registry read them as symmetric / no reordering."""
    cfg = fixture(CT)
    spec_of(cfg, "ct", "weights")[field] = value
    (g,) = [g for g in schemes_from_config(write(tmp_path, cfg)[0])
            if g.kind == "config group"]
    assert g.scheme is None and needle in g.error, g.error


def test_quark_symmetric_zero_is_refused():
    cfg = fixture(QUARK)
    spec_of(cfg, "quark", "weights")["symmetric"] = 0
    g = schemes_from_config(cfg)[0]
    assert g.scheme is None and "weight.symmetric: 0 must be true, false or null" in g.error


# --- defect 5: two compressed-tensors groups claiming the same modules ---------------------------

def two_groups(first: list[str], second: list[str]) -> dict:
    """group_0 (W4A4) and group_1 (W4A16, the same weights), in this order."""
    cfg = fixture(CT)
    q = cfg["quantization_config"]
    g0 = q["config_groups"]["group_0"]
    g0["targets"] = first
    q["config_groups"]["group_1"] = dict(copy.deepcopy(g0), input_activations=None,
                                         targets=second)
    return cfg


@pytest.mark.parametrize("target", ["Linear", "re:.*proj", "q_proj"])
def test_same_target_in_two_groups_is_refused(capsys, tmp_path, target):
    """Both runtimes give a shared target to the last group; the registry took the first."""
    path, lines = write(tmp_path, two_groups([target], ["o_proj", target]))
    shown = display_path(path)
    first, second = (line_of(lines, f'"{target}"', n) for n in (0, 1))
    rc, err, errors = cli(capsys, path)
    assert rc == 1 and err == "" and len(errors) == 1, errors
    assert errors[0].startswith(
        f"error: {shown}:{second}: {GROUPS.format(1)}: targets[1]: {json.dumps(target)} is "
        f"also a target of {GROUPS.format(0)} (line {first}); "), errors[0]
    assert "make the groups' targets disjoint, or list the modules in ignore" in errors[0]

    model = Tiny()
    with pytest.raises(ClaimError) as e:
        quantize_model_from_config(model, path)
    text = str(e.value)
    assert "\n" not in text and schemes_of(model) == {}
    assert text.startswith(f"{shown}:{second}: {GROUPS.format(1)}: target ") and \
        f"of {GROUPS.format(0)} (line {first})" in text and "module q_proj" in text


@pytest.mark.parametrize("first, second", [
    (["re:.*q_proj"], ["re:.*proj"]),  # two patterns
    (["q_proj"], ["re:.*proj"]),  # an exact name and a pattern: the runtimes disagree
    (["re:.*proj"], ["q_proj"]),
], ids=repr)
def test_module_claimed_by_two_groups_is_refused(capsys, tmp_path, first, second):
    path, lines = write(tmp_path, two_groups(first, second))
    shown = display_path(path)
    rc, _, errors = cli(capsys, path)
    assert rc == 0 and errors == []  # different strings: only a model shows the overlap
    model = Tiny()
    with pytest.raises(ClaimError) as e:
        quantize_model_from_config(model, path)
    at0, at1 = line_of(lines, json.dumps(first[0])), line_of(lines, json.dumps(second[0]))
    assert str(e.value).startswith(
        f"{shown}:{at1}: {GROUPS.format(1)}: target {json.dumps(second[0])} claims module "
        f"q_proj, and so does target {json.dumps(first[0])} of {GROUPS.format(0)} "
        f"(line {at0}); "), str(e.value)
    assert schemes_of(model) == {}


@pytest.mark.parametrize("first, second, want", [
    # a name target beats a class name, in compressed-tensors and vLLM alike
    (["Linear"], ["re:.*q_proj"], {"q_proj": "w_mxfp4", "o_proj": "w_mxfp4_a_mxfp4"}),
    (["q_proj"], ["Linear"], {"q_proj": "w_mxfp4_a_mxfp4", "o_proj": "w_mxfp4"}),
], ids=repr)
def test_name_target_beats_class_name(tmp_path, first, second, want):
    model = Tiny()
    quantize_model_from_config(model, write(tmp_path, two_groups(first, second))[0])
    assert schemes_of(model) == want


def test_ignore_settles_a_shared_claim(tmp_path):
    cfg = two_groups(["re:.*q_proj"], ["re:.*proj"])
    cfg["quantization_config"]["ignore"] = ["q_proj"]
    model = Tiny()
    report = quantize_model_from_config(model, write(tmp_path, cfg)[0])
    assert schemes_of(model) == {"o_proj": "w_mxfp4"}
    assert any(n.startswith("q_proj: not quantized") for n in report.notes)
