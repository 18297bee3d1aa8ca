"""QuantKey / ScaleDesc / SchemeContract: validity rules, hashing, the short string form."""
import ast
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kernels.spec.contract import (ELEMENT_FORMATS, GRANULARITIES, MX_BLOCK, MX_FORMATS, ROUNDINGS,
                                   SCALE_FORMATS, QuantKey, ScaleDesc, SchemeContract)
from registry.contract import Scheme


def test_contract_names_are_derived_from_the_format_table():
    """One place per concept: the contract's format / rounding names and block size come from
    the format table (kernels/spec/formats.py); the Literal types pydantic validates with are
    built from it, and the contract module's code never writes one of those names itself."""
    import kernels.spec.contract as contract
    import kernels.spec.formats as kf

    assert ELEMENT_FORMATS == get_args(contract.ElementFormat) == \
        tuple(kf.FORMATS) + kf.NON_MX_FORMATS == kf.ELEMENT_FORMATS
    assert set(ELEMENT_FORMATS) == set(kf.FORMATS) | {"fp8_e4m3"}
    assert MX_FORMATS == tuple(kf.FORMATS)
    assert ROUNDINGS == get_args(contract.Rounding) == kf.ROUNDINGS
    assert MX_BLOCK == kf.BLOCK
    for fmt, rounding in itertools.product(kf.FORMATS, kf.ROUNDINGS):  # the table validates
        assert QuantKey.mx(fmt, rounding=rounding, static=True).is_mx
    tree = ast.parse(Path(contract.__file__).read_text(encoding="utf-8"))
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    written = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
               and isinstance(n.value, str) and id(n) not in docs}
    assert not written & set(kf.ELEMENT_FORMATS + kf.ROUNDINGS), \
        "kernels/spec/contract.py restates names of the format table: derive them instead"


def test_contract_module_imports_no_torch_triton_or_kernel_code():
    """The registry's contract, loader and catalog read the bottom vocabulary (kernels.spec)
    and nothing else of `kernels`: no kernel code, no torch, no triton."""
    code = ("import sys, json; import registry.contract, registry.files.loader, "
            "registry.files.catalog; "
            "print(json.dumps(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'triton', 'kernels'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = json.loads(out.stdout)
    assert [m for m in imported if m != "kernels" and not m.startswith("kernels.spec")] == []
    assert "kernels.spec.contract" in imported


def _all_candidates():
    """Every combination of field values, valid or not."""
    for fmt, sfmt, gran, block, rounding, static in itertools.product(
            ELEMENT_FORMATS, SCALE_FORMATS, GRANULARITIES, (None, 16, 32),
            (None,) + ROUNDINGS, (False, True)):
        yield dict(format=fmt, scale=dict(format=sfmt, granularity=gran, block=block,
                                          rounding=rounding, static=static))


def _is_valid(c):
    s = c["scale"]
    if c["format"] in MX_FORMATS:
        return (s["format"] == "e8m0" and s["granularity"] == "block"
                and s["block"] in (None, 32) and s["rounding"] is not None)
    return (s["format"] == "fp32" and s["granularity"] in ("tensor", "token")
            and s["block"] is None and s["rounding"] is None
            and not (s["granularity"] == "token" and s["static"]))


def test_exactly_the_valid_keys_construct_and_round_trip():
    keys = set()
    for c in _all_candidates():
        if _is_valid(c):
            key = QuantKey(format=c["format"], scale=ScaleDesc(**c["scale"]))
            assert QuantKey.parse(str(key)) == key
            assert hash(QuantKey.parse(str(key))) == hash(key)
            assert ScaleDesc.parse(str(key.scale)) == key.scale
            keys.add(key)
        else:
            with pytest.raises(ValueError):
                QuantKey(format=c["format"], scale=ScaleDesc(**c["scale"]))
    # 6 MX formats x 3 roundings x static/dynamic, plus fp8 per-tensor (2) and per-token (1)
    assert len(keys) == 6 * 3 * 2 + 3
    assert len({str(k) for k in keys}) == len(keys)


def test_short_forms_of_the_examples():
    mx = QuantKey.mx("mxfp4", rounding="even", static=False)
    assert str(mx) == "mxfp4:e8m0/b32:even:dynamic"
    fp8 = QuantKey(format="fp8_e4m3",
                   scale=ScaleDesc(format="fp32", granularity="tensor", static=True))
    assert str(fp8) == "fp8_e4m3:fp32/tensor:static"
    assert QuantKey.parse("fp8_e4m3:fp32/tensor:static") == fp8
    assert repr(mx) == "QuantKey.parse('mxfp4:e8m0/b32:even:dynamic')"


def test_e8m0_scale_defaults_to_block_32():
    s = ScaleDesc(format="e8m0", static=False, rounding="floor")
    assert (s.granularity, s.block) == ("block", 32)
    assert s == ScaleDesc(format="e8m0", granularity="block", block=32, static=False,
                          rounding="floor")


def test_keys_are_frozen_hashable_and_equal_by_value():
    a = QuantKey.mx("mxfp6_e2m3", rounding="rceil", static=False)
    b = QuantKey.parse("mxfp6_e2m3:e8m0/b32:rceil:dynamic")
    assert a == b and hash(a) == hash(b) and a is not b
    assert {a: 1}[b] == 1
    assert a != QuantKey.mx("mxfp6_e2m3", rounding="even", static=False)
    with pytest.raises(ValidationError):
        a.format = "mxfp4"
    with pytest.raises(ValidationError):
        a.scale.static = True
    c = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True), activation=a)
    assert hash(c) == hash(SchemeContract(weight=QuantKey.parse("mxfp4:e8m0/b32:even:static"),
                                          activation=b))
    assert str(c) == "W=mxfp4:e8m0/b32:even:static A=mxfp6_e2m3:e8m0/b32:rceil:dynamic"


def test_contract_rejects_static_mx_activation_and_accepts_weight_only():
    w = QuantKey.mx("mxfp4", rounding="even", static=True)
    with pytest.raises(ValueError, match="activation.static: static MX activation"):
        SchemeContract(weight=w, activation=QuantKey.mx("mxfp4", rounding="even", static=True))
    wo = SchemeContract(weight=w, activation=None)
    assert wo.is_weight_only and str(wo).endswith("A=none")
    with pytest.raises(ValidationError):
        SchemeContract(weight=w)  # the activation must be given, even as None


def test_keys_are_strict():
    with pytest.raises(ValidationError):
        QuantKey(format="mxfp4", scale="e8m0/b32:even:dynamic")
    with pytest.raises(ValidationError):
        ScaleDesc(format="e8m0", static="yes", rounding="even")
    with pytest.raises(ValidationError):
        ScaleDesc(format="e8m0", static=False, rounding="even", block=32.0)


@pytest.mark.parametrize("text, needles", [
    ("mxfp5:e8m0/b32:even:dynamic", ["element format 'mxfp5'", "mxfp4, mxfp6_e2m3"]),
    ("mxfp4", ["missing the scale"]),
    ("mxfp4:e9m0/b32:even:dynamic", ["scale format 'e9m0'", "e8m0, fp32"]),
    ("mxfp4:e8m0", ["missing '/b32', '/tensor' or '/token'"]),
    ("mxfp4:e8m0/row:even:dynamic", ["granularity 'row'", "b32, tensor, token"]),
    ("mxfp4:e8m0/b16:even:dynamic", ["must be 32"]),
    ("mxfp4:e8m0/b32:dynamic", ["ROUNDING:static|dynamic"]),
    ("mxfp4:e8m0/b32:nearest:dynamic", ["rounding 'nearest'", "floor, even, rceil"]),
    ("mxfp4:e8m0/b32:even:sometimes", ["'sometimes' must be 'static' or 'dynamic'"]),
    ("fp8_e4m3:fp32/tensor:even:static", ["no rounding"]),
    ("fp8_e4m3:e8m0/b32:even:static", ["fp8_e4m3 takes an fp32 scale"]),
    ("mxfp4:fp32/tensor:static", ["mxfp4 takes e8m0 block scales"]),
    ("fp8_e4m3:fp32/token:static", ["per-token scale is computed at run time"]),
    ("fp8_e4m3:fp32/b32:static", ["fp32 block scales are not supported"]),
])
def test_parse_errors_name_the_bad_part(text, needles):
    with pytest.raises(ValueError) as info:
        QuantKey.parse(text)
    message = str(info.value)
    assert repr(text) in message and "\n" not in message
    for needle in needles:
        assert needle in message


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(list(ELEMENT_FORMATS + SCALE_FORMATS + ROUNDINGS) +
                             ["b32", "b16", "tensor", "token", "static", "dynamic", "", "e8m0/b32",
                              "fp32/tensor", "fp32/token"]),
             max_size=6).map(":".join),
))
def test_parse_never_raises_anything_but_value_error(text):
    try:
        key = QuantKey.parse(text)
    except ValueError as e:
        assert str(e)
    else:
        assert str(key) == text and QuantKey.parse(str(key)) == key


def test_scheme_line_falls_back_to_the_nearest_parent():
    w = QuantKey.mx("mxfp4", rounding="even", static=True)
    s = Scheme(name="x", summary="s", contract=SchemeContract(weight=w, activation=None),
               source="x.yaml", source_dir=".", field_lines=(("name", 2), ("weight", 5)))
    assert s.line("name") == 2
    assert s.line("weight.scale.block") == 5
    assert s.line("activation") == 1
    assert s.location == "x.yaml:2"
    assert hash(s) == hash(s.model_copy())
