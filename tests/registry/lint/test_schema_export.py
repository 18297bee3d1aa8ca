"""The exported JSON Schema as CI and editors use it, `registry schema --check`, the pre-commit
hook, and the "did you mean" of an unknown format.

The promise under test: a file the exported schema (validated by the `jsonschema` library, as
check-jsonschema does) accepts is a file `registry lint` passes, except for what JSON Schema
cannot express (listed below, and asserted to be exactly what it misses); and `registry schema
--check FILE` reports what `registry lint FILE` reports.
"""
import itertools
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from kernels.spec.contract import ELEMENT_FORMATS, QuantKey, suggestions
from registry.files.catalog import load_files
from registry.cli import main
from registry.lint.checks import run_lint
from registry.files.loader import read_scheme_file

from support.paths import BROKEN_SCHEMES, REPO

SHIPPED = sorted((REPO / "schemes").glob("*.yaml"))

# Broken files the exported schema accepts although lint refuses them, and why JSON Schema
# cannot see the problem. The test below asserts this is *exactly* the set it accepts: adding
# a rule the schema can express, or losing one, fails it until this list is updated.
SCHEMA_CANNOT_SEE = {
    "alias_own_name.yaml": "compares two fields' values (an alias equal to `name`)",
    "anchor_alias.yaml": "YAML anchors are resolved by the YAML loader before validation",
    "duplicate_key.yaml": "the YAML loader keeps the last of two equal keys",
    "explicit_str_tag.yaml": "YAML tags are resolved by the YAML loader before validation",
    "static_yes.yaml": "a YAML 1.1 loader (PyYAML) reads `yes` as true",
    "stem_mismatch.yaml": "the schema does not see the file name",
}

# Generated cases the schema cannot tell from valid ones (see test_generated_top_level).
GENERATED_CANNOT_SEE = {
    "block_float": "JSON has one number type: 32.0 is the integer 32 to a validator",
    "alias_is_name": "compares two fields' values",
}

GOOD_WEIGHT = {"format": "mxfp4", "scale": {"format": "e8m0", "block": 32, "rounding": "even"},
               "static": True}
ABSENT = object()


@pytest.fixture(autouse=True)
def _own_env(monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("REGISTRY_SCHEMES_PATH", raising=False)
    monkeypatch.delenv("REGISTRY_DISABLED_KERNELS", raising=False)


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def exported(capsys) -> jsonschema.protocols.Validator:
    """`registry schema`'s output as a validator of the draft it declares."""
    rc, out, _ = cli(capsys, "schema")
    assert rc == 0
    schema = json.loads(out)
    cls = jsonschema.validators.validator_for(schema, default=None)
    assert cls is jsonschema.Draft202012Validator
    cls.check_schema(schema)
    return cls(schema)


def schema_accepts(validator, path: Path) -> bool:
    """Does a validator accept the file? A file a YAML loader refuses is refused."""
    try:
        data = yaml.safe_load(path.read_bytes())
    except yaml.YAMLError:
        return False
    return validator.is_valid(data)


def lint_refused(paths: list[Path]) -> set[str]:
    """The files lint reports on, checked together as `registry schema --check` does."""
    return {f.path for f in run_lint(load_files([], paths))}


def write(d: Path, name: str, doc: dict) -> Path:
    path = d / f"{name}.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML, and reads the same in every loader
    return path


def test_the_exported_schema_is_valid_and_accepts_every_shipped_scheme(capsys):
    validator = exported(capsys)
    assert len(SHIPPED) >= 11
    for path in SHIPPED:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], path.name


def test_the_exported_schema_refuses_the_broken_corpus(capsys):
    validator = exported(capsys)
    corpus = sorted(BROKEN_SCHEMES.glob("*.yaml"))
    assert lint_refused(corpus) == {str(p.relative_to(REPO)) for p in corpus}
    accepted = {p.name for p in corpus if schema_accepts(validator, p)}
    assert accepted == set(SCHEMA_CANNOT_SEE)


def test_the_exported_schema_points_at_the_field_lint_names(capsys):
    """An editor underlines the field lint names, or the mapping that lacks it / has a stray
    key (JSON Schema reports `required` and unknown keys on the mapping)."""
    validator = exported(capsys)
    checked = 0
    for path in sorted(BROKEN_SCHEMES.glob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_bytes())
        except yaml.YAMLError:
            continue  # a validator cannot read it at all
        if validator.is_valid(data):
            continue  # SCHEMA_CANNOT_SEE (test_the_exported_schema_refuses_the_broken_corpus)
        at = {".".join(map(str, e.absolute_path)) for e in validator.iter_errors(data)}
        for field in {f.field for f in read_scheme_file(path)[1]}:
            parent = field.rpartition(".")[0]
            assert field in at or parent in at, (path.name, field, at)
        checked += 1
    assert checked >= 20


def _tensors(fmt: str):
    """Every shape of a tensor key around `fmt`: scale format x granularity x block x
    rounding x static, each field also left out."""
    for sfmt, gran, block, rnd, static in itertools.product(
            ("e8m0", "fp32"), (ABSENT, "block", "tensor", "token"), (ABSENT, 32, 16),
            (ABSENT, "even", "rceil"), (True, False)):
        scale = {"format": sfmt}
        scale.update({k: v for k, v in (("granularity", gran), ("block", block),
                                        ("rounding", rnd)) if v is not ABSENT})
        yield {"format": fmt, "scale": scale, "static": static}


@pytest.mark.parametrize("role", ["weight", "activation"])
@pytest.mark.parametrize("fmt", ELEMENT_FORMATS)
def test_schema_and_lint_agree_on_every_key_shape(capsys, tmp_path, role, fmt):
    validator = exported(capsys)
    docs = {}
    for i, tensor in enumerate(_tensors(fmt)):
        doc = {"name": f"k{i}", "summary": "generated", "weight": GOOD_WEIGHT,
               "activation": "none", role: tensor}
        docs[write(tmp_path, f"k{i}", doc)] = doc
    refused = lint_refused(list(docs))
    disagree = [(json.dumps(doc[role]), validator.is_valid(doc))
                for path, doc in docs.items()
                if validator.is_valid(doc) == (str(path) in refused)]
    assert disagree == []
    assert refused and (len(refused) < len(docs) or (role, fmt) == ("weight", "fp8_e4m3"))


def _tensor_of(key: QuantKey) -> dict:
    s = key.scale
    scale = {"format": s.format, "granularity": s.granularity}
    scale.update({k: v for k, v in (("block", s.block), ("rounding", s.rounding)) if v})
    return {"format": key.format, "scale": scale, "static": s.static}


@pytest.mark.parametrize("picked", [
    "fp8_e4m3:fp32/tensor:static fp8_e4m3:fp32/token:dynamic",  # not a product: one by one
    "mxfp4:e8m0/b32:floor:dynamic mxfp4:e8m0/b32:rceil:dynamic mxint8:e8m0/b32:floor:static",
    "mxfp6_e3m2:e8m0/b32:even:static mxfp6_e3m2:e8m0/b32:even:dynamic",
])
def test_role_rules_hold_a_role_to_exactly_its_keys(capsys, picked):
    """Whatever set of keys the kernel table allows a role, the rules allow exactly it."""
    from registry.lint.schema_rules import role_rules, valid_keys

    keys = {QuantKey.parse(k) for k in picked.split()}
    defs = exported(capsys).schema["$defs"]
    role = jsonschema.Draft202012Validator(
        {"$defs": defs, "allOf": [{"$ref": "#/$defs/TensorSpec"}, *role_rules(keys, "x")]})
    assert {k for k in valid_keys() if role.is_valid(_tensor_of(k))} == keys


TOP_LEVEL = {  # case -> change to a valid file
    "summary_blank": {"summary": "   "},
    "summary_two_lines": {"summary": "one\ntwo"},
    "summary_padded": {"summary": "  a summary  \n"},
    "summary_100": {"summary": "x" * 100},
    "summary_101": {"summary": "x" * 101},  # lint warns, and exits 1
    "aliases_twice": {"aliases": ["a1", "a1"]},
    "aliases_two": {"aliases": ["a1", "a2"]},
    "alias_is_name": {"aliases": ["alias_is_name"]},
    "block_float": {"weight": {**GOOD_WEIGHT, "scale": {**GOOD_WEIGHT["scale"], "block": 32.0}}},
    "block_null": {"weight": {**GOOD_WEIGHT, "scale": {**GOOD_WEIGHT["scale"], "block": None}}},
    "static_number": {"weight": {**GOOD_WEIGHT, "static": 1}},
    "activation_null": {"activation": None},
    "fp8_dynamic_tensor": {"activation": {"format": "fp8_e4m3", "static": False,
                                          "scale": {"format": "fp32", "granularity": "tensor"}}},
    "fp8_weight": {"weight": {"format": "fp8_e4m3", "static": True,
                              "scale": {"format": "fp32", "granularity": "tensor"}}},
}


def test_generated_top_level(capsys, tmp_path):
    validator = exported(capsys)
    docs = {}
    for case, change in TOP_LEVEL.items():
        doc = {"name": case, "summary": "generated", "weight": GOOD_WEIGHT,
               "activation": "none", **change}
        docs[case] = (write(tmp_path, case, doc), doc)
    refused = lint_refused([p for p, _ in docs.values()])
    disagree = {case for case, (path, doc) in docs.items()
                if validator.is_valid(doc) == (str(path) in refused)}
    assert disagree == set(GENERATED_CANNOT_SEE)
    assert {c for c, (p, _) in docs.items() if str(p) not in refused} == {
        "summary_padded", "summary_100", "aliases_two", "block_null"}


# --- registry schema --check reports what registry lint reports -------------------------------

def _findings(capsys, *argv):
    rc, out, _ = cli(capsys, *argv, "--json")
    return rc, json.loads(out)["findings"]


@pytest.mark.parametrize("case", ["fp8_dynamic_tensor", "fp8_weight", "summary_101"])
def test_schema_check_reports_what_lint_reports_generated(capsys, tmp_path, case):
    doc = {"name": case, "summary": "generated", "weight": GOOD_WEIGHT, "activation": "none",
           **TOP_LEVEL[case]}
    path = str(write(tmp_path, case, doc))
    lint = _findings(capsys, "lint", path)
    assert lint[0] and lint[1]  # lint refuses it ...
    assert _findings(capsys, "schema", "--check", path) == lint  # ... and so does --check


@pytest.mark.parametrize("name", sorted(p.name for p in BROKEN_SCHEMES.glob("*.yaml")))
def test_schema_check_reports_what_lint_reports_corpus(capsys, name):
    path = f"tests/data/broken_schemes/{name}"
    lint = _findings(capsys, "lint", path)
    assert lint[0] == 1 and lint[1]
    assert _findings(capsys, "schema", "--check", path) == lint


def test_schema_check_leaves_clashes_with_the_scheme_directories_to_lint(capsys, tmp_path):
    doc = {"name": "mxfp4", "summary": "mine", "weight": GOOD_WEIGHT, "activation": "none"}
    path = str(write(tmp_path, "mxfp4", doc))  # `mxfp4` is a shipped alias
    assert cli(capsys, "schema", "--check", path)[0] == 0
    assert cli(capsys, "lint", path)[0] == 1
    helptext = " ".join(cli(capsys, "schema", "--help")[1].split())
    assert "same findings, output and exit code as `registry lint FILE...`" in helptext
    assert "except name / alias clashes with the scheme directories" in helptext


# --- the pre-commit hook ----------------------------------------------------------------------

def test_pre_commit_hook_runs_registry_lint(tmp_path):
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    [hook] = [h for h in hooks if h["id"] == "registry-lint"]
    assert hook["language"] == "python" and hook.get("pass_filenames", True) is True
    files = re.compile(hook["files"])
    assert all(files.search(p) for p in ("schemes/w_mxfp4.yaml", "schemes/sub/x.yml"))
    assert not any(files.search(p) for p in (".github/workflows/ci.yml", "docs/x.yaml",
                                             "schemes/notes.md"))
    entry = shlex.split(hook["entry"])
    assert entry[:2] == ["registry", "lint"]
    assert 'registry = "registry.cli:main"' in (REPO / "pyproject.toml").read_text()
    command = [sys.executable, "-m", "registry", *entry[1:]]  # the console script, portably
    good = subprocess.run(command + [str(REPO / "schemes" / "w_mxfp4.yaml")], cwd=tmp_path,
                          capture_output=True, text=True)
    assert (good.returncode, good.stdout) == (0, ""), good.stderr
    bad_file = BROKEN_SCHEMES / "static_mx_activation.yaml"
    bad = subprocess.run(command + [str(bad_file)], cwd=tmp_path, capture_output=True,
                         text=True)
    assert bad.returncode == 1
    assert f"{bad_file}:14: error: activation.static: static MX activation" in bad.stdout


# --- did you mean: unknown formats ------------------------------------------------------------

@pytest.mark.parametrize("typed, meant", [
    ("mxfp6", "(did you mean mxfp6_e2m3 or mxfp6_e3m2?)"),
    ("MXFP4", "(did you mean mxfp4?)"),
    ("fp8", "(did you mean fp8_e4m3?)"),
    ("mxfp8", "(did you mean mxfp8_e4m3 or mxfp8_e5m2?)"),
    ("Mxfp6_E3M2", "(did you mean mxfp6_e3m2?)"),
])
def test_unknown_format_suggests_what_it_may_mean(capsys, tmp_path, typed, meant):
    doc = {"name": "typo", "summary": "typo", "weight": {**GOOD_WEIGHT, "format": typed},
           "activation": "none"}
    rc, out, _ = cli(capsys, "schema", "--check", str(write(tmp_path, "typo", doc)))
    assert rc == 1 and len(out.splitlines()) == 1
    assert f"weight.format: unknown element format '{typed}' {meant}; valid formats: " in out
    with pytest.raises(ValueError, match=re.escape(meant)):
        QuantKey.parse(f"{typed}:e8m0/b32:even:dynamic")


@pytest.mark.parametrize("typed, meant", [
    ("E8M0", ["e8m0"]), ("mx", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3",
                                "mxfp8_e5m2", "mxint8"]),
    ("mxfp5", ["mxfp4", "mxfp8_e5m2"]), ("nearest", []), ("", [])])
def test_suggestions(typed, meant):
    choices = ELEMENT_FORMATS + ("e8m0", "fp32")
    assert suggestions(typed, choices) == meant
