"""Loading scheme files: the shipped golden table, the broken-file corpus, directories."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from registry import LINT_CHECKS, Catalog, Finding, QuantKey, load_schemes, run_lint
from registry.files.catalog import load_files
from registry.errors import AmbiguousSchemeError, SchemeLoadError, UnknownSchemeError, warning
from registry.files.loader import ENV_VAR, SchemeDir, read_scheme_file, scheme_dirs, shipped_dir

from support.paths import BROKEN_SCHEMES, REPO

W = "e8m0/b32:even:static"  # static e8m0 block-32 scales, even rounding (all but the floor ones)
A = "e8m0/b32:even:dynamic"  # every shipped MX activation: dynamic
FP8 = "fp8_e4m3:fp32/tensor:static"

# name -> (aliases, weight key, activation key or None). Written out, not read from the files.
GOLDEN = {
    "w_mxfp4": (["mxfp4_w4a16"], f"mxfp4:{W}", None),
    "w_mxfp4_a_mxfp4": (["mxfp4", "mxfp4_w4a4"], f"mxfp4:{W}", f"mxfp4:{A}"),
    "w_mxfp4_a_mxfp6_e3m2": (["mxfp4_w4a6_e3m2"], f"mxfp4:{W}", f"mxfp6_e3m2:{A}"),
    "w_mxfp4_a_mxfp6_e2m3": (["mxfp4_w4a6_e2m3"], f"mxfp4:{W}", f"mxfp6_e2m3:{A}"),
    "w_mxfp4_a_fp8": (["mxfp4_w4a8_fp8"], f"mxfp4:{W}", FP8),
    "w_mxfp6_e3m2": (["mxfp6_e3m2_w6a16"], f"mxfp6_e3m2:{W}", None),
    "w_mxfp6_e3m2_a_mxfp6_e3m2": (["mxfp6_e3m2", "mxfp6_e3m2_w6a6"], f"mxfp6_e3m2:{W}",
                                  f"mxfp6_e3m2:{A}"),
    "w_mxfp6_e3m2_a_fp8": (["mxfp6_e3m2_w6a8_fp8"], f"mxfp6_e3m2:{W}", FP8),
    "w_mxfp6_e2m3": (["mxfp6_e2m3_w6a16"], f"mxfp6_e2m3:{W}", None),
    "w_mxfp6_e2m3_a_mxfp6_e2m3": (["mxfp6_e2m3", "mxfp6_e2m3_w6a6"], f"mxfp6_e2m3:{W}",
                                  f"mxfp6_e2m3:{A}"),
    "w_mxfp6_e2m3_a_fp8": (["mxfp6_e2m3_w6a8_fp8"], f"mxfp6_e2m3:{W}", FP8),
    "w_mxfp8_e4m3_a_mxfp8_e4m3": (["mxfp8", "mxfp8_e4m3"], f"mxfp8_e4m3:{W}", f"mxfp8_e4m3:{A}"),
    "w_mxfp8_e4m3": (["mxfp8_e4m3_w8a16"], f"mxfp8_e4m3:{W}", None),
    "w_mxint8_a_mxint8": (["mxint8"], f"mxint8:{W}", f"mxint8:{A}"),
    # AutoRound's MX presets: floor weights, floor or rceil run-time activations (issue 15)
    "w_mxfp4_floor_a_mxfp4_floor": (["autoround_mxfp4"], "mxfp4:e8m0/b32:floor:static",
                                    "mxfp4:e8m0/b32:floor:dynamic"),
    "w_mxfp4_floor_a_mxfp4_rceil": (["autoround_mxfp4_rceil"], "mxfp4:e8m0/b32:floor:static",
                                    "mxfp4:e8m0/b32:rceil:dynamic"),
    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_floor": (["autoround_mxfp8"],
                                              "mxfp8_e4m3:e8m0/b32:floor:static",
                                              "mxfp8_e4m3:e8m0/b32:floor:dynamic"),
    "w_mxfp8_e4m3_floor_a_mxfp8_e4m3_rceil": (["autoround_mxfp8_rceil"],
                                              "mxfp8_e4m3:e8m0/b32:floor:static",
                                              "mxfp8_e4m3:e8m0/b32:rceil:dynamic"),
}

VLLM_OCP_MX_SCHEMES = {  # vLLM's OCP_MX_Scheme names, kept exactly
    "w_mxfp4", "w_mxfp4_a_mxfp4", "w_mxfp4_a_mxfp6_e3m2", "w_mxfp4_a_mxfp6_e2m3", "w_mxfp4_a_fp8",
    "w_mxfp6_e3m2", "w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp6_e3m2_a_fp8", "w_mxfp6_e2m3",
    "w_mxfp6_e2m3_a_mxfp6_e2m3", "w_mxfp6_e2m3_a_fp8",
}


@pytest.fixture(scope="module")
def shipped() -> Catalog:
    return load_schemes(env={})


def test_shipped_schemes_match_the_golden_table(shipped):
    assert shipped.findings == []
    assert set(shipped.schemes) == set(GOLDEN)
    assert VLLM_OCP_MX_SCHEMES <= set(shipped.schemes)
    for name, (aliases, weight, activation) in GOLDEN.items():
        s = shipped.schemes[name]
        assert list(s.aliases) == aliases, name
        assert str(s.weight) == weight and s.weight == QuantKey.parse(weight), name
        if activation is None:
            assert s.activation is None and s.contract.is_weight_only, name
        else:
            assert str(s.activation) == activation, name
            assert s.activation == QuantKey.parse(activation), name
        assert s.source.name == f"{name}.yaml" and s.line("name") == 1
        assert s.summary and "\n" not in s.summary
        for alias in aliases:
            assert shipped.get(alias) is s
        assert shipped.get(name) is s


def test_shipped_files_say_activation_explicitly():
    for path in sorted((REPO / "schemes").glob("*.yaml")):
        assert "\nactivation:" in path.read_text(), path


def test_shipped_lint_is_clean(shipped):
    assert run_lint(shipped) == []


# file -> every finding, exactly as printed (paths relative to tests/data/broken_schemes).
BROKEN_EXPECTED = {
    "Bad-Name.yaml": ["1: error: name: 'Bad-Name' is not a valid name: use lower-case letters, "
                      "digits and '_', starting with a letter or digit ([a-z0-9][a-z0-9_]*)"],
    "activation_empty.yaml": ["8: error: activation: is empty; weight-only schemes must say "
                              "`activation: none`"],
    "alias_own_name.yaml": ["3: error: aliases.1: alias 'alias_own_name' is the scheme's own "
                            "name; remove it"],
    "alias_twice.yaml": ["5: error: aliases.1: alias 'twice' is listed twice (also item 0); "
                         "remove one"],
    "aliases_not_list.yaml": ["3: error: aliases: must be a list of names, e.g. "
                              "`aliases: [mxfp4]`; got 'mxfp4'"],
    "anchor_alias.yaml": ["6: error: YAML anchor '&mx' is not allowed in scheme files; remove it "
                          "and write values out"],
    "block_16.yaml": ["12: error: activation.scale.block: must be 32 for e8m0 scales (OCP MX)"],
    "block_as_text.yaml": ["6: error: weight.scale.block: must be a whole number; got '32'"],
    "control_char.yaml": ["2: error: character U+0007 is not allowed in YAML text; remove it"],
    "duplicate_key.yaml": ["6: error: weight.format: duplicate key 'format' (first at line 5); "
                           "YAML would silently keep the last one: remove one"],
    "e8m0_per_tensor.yaml": ["6: error: weight.scale.granularity: e8m0 scales are per block of "
                             "32 (OCP MX), not per tensor; write `granularity: block` or leave "
                             "it out"],
    "e8m0_static_token.yaml": [
        "6: error: weight.scale.granularity: e8m0 scales are per block of 32 (OCP MX), not per "
        "token; write `granularity: block` or leave it out",
        "7: error: weight.static: a per-token scale is computed at run time; use `static: false` "
        "or `granularity: tensor`"],
    "empty.yaml": ["1: error: empty file; a scheme file holds one mapping with the keys name, "
                   "summary, aliases, weight, activation"],
    "explicit_str_tag.yaml": ["5: error: explicit YAML tag '!!str' is not allowed in scheme "
                              "files; write plain values"],
    "fp32_no_granularity.yaml": ["10: error: activation.scale.granularity: missing; fp32 scales "
                                 "need `granularity: tensor` or `granularity: token`"],
    "fp32_with_block.yaml": ["10: error: activation.scale.block: only e8m0 block scales have a "
                             "block size; remove `block`"],
    "fp32_with_rounding.yaml": ["10: error: activation.scale.rounding: fp32 scales have no "
                                "rounding (only e8m0 scales do); remove `rounding`"],
    "fp8_with_e8m0_scale.yaml": ["10: error: activation.scale.format: fp8_e4m3 takes an fp32 "
                                 "scale (per tensor or per token), not e8m0; e8m0 block scales "
                                 "are for the MX formats (mxfp4, mxfp6_e2m3, mxfp6_e3m2, "
                                 "mxfp8_e4m3, mxfp8_e5m2, mxint8)"],
    "key_is_a_list.yaml": ["15: error: a key must be a plain word, not a list or mapping"],
    "many_problems.yaml": [
        "6: error: weight.scale.block: must be 32 for e8m0 scales (OCP MX)",
        "6: error: weight.scale.rounding: unknown rounding 'up'; valid roundings: floor, even, "
        "rceil",
        "7: error: weight.static: must be true or false; got 'maybe'",
        "11: error: activation.static: static MX activation scales are not supported: an e8m0 "
        "block scale is computed from each block at run time; use `static: false`",
        "12: error: activation.extra: unknown key 'extra'; valid keys here: format, scale, "
        "static"],
    "missing_activation.yaml": ["1: error: activation: missing; weight-only schemes must say "
                                "`activation: none`"],
    "missing_rounding.yaml": ["6: error: weight.scale.rounding: missing; e8m0 scales need a "
                              "rounding: floor, even, rceil"],
    "mx_with_fp32_scale.yaml": ["6: error: weight.scale.format: MX format mxfp4 takes e8m0 block "
                                "scales (OCP MX), not fp32"],
    "not_utf8.yaml": ["2: error: not UTF-8 text (byte 0xe9); save the file as UTF-8"],
    "not_yaml.yaml": ["4: error: not valid YAML: while parsing a flow mapping; expected ',' or "
                      "'}', but got ':'"],
    "python_tag.yaml": ["2: error: explicit YAML tag '!!python/object/apply:os.system' is not "
                        "allowed in scheme files; write plain values"],
    "static_mx_activation.yaml": ["14: error: activation.static: static MX activation scales are "
                                  "not supported: an e8m0 block scale is computed from each "
                                  "block at run time; use `static: false`"],
    "static_per_token.yaml": ["11: error: activation.static: a per-token scale is computed at "
                              "run time; use `static: false` or `granularity: tensor`"],
    "static_yes.yaml": ["7: error: weight.static: must be true or false; got 'yes'"],
    "stem_mismatch.yaml": ["1: error: name: 'w_mxfp4_a_mxfp4' must equal the file name "
                           "'stem_mismatch'; rename the file to w_mxfp4_a_mxfp4.yaml or change "
                           "the name"],
    "summary_empty.yaml": ["2: error: summary: must not be empty; write one line saying what the "
                           "scheme is"],
    "too_deep.yaml": ["3: error: nested deeper than 20 levels; a scheme file needs 3"],
    "top_level_list.yaml": ["1: error: the top level must be a mapping with the keys name, "
                            "summary, aliases, weight, activation; got a list"],
    "two_documents.yaml": ["15: error: a second YAML document ('---'); put one scheme in each "
                           "file"],
    "typo_activations.yaml": [
        "1: error: activation: missing; weight-only schemes must say `activation: none`",
        "8: error: activations: unknown key 'activations' (did you mean 'activation'?); valid "
        "keys here: name, summary, aliases, weight, activation"],
    "unknown_format.yaml": ["5: error: weight.format: unknown element format 'mxfp5' (did you "
                            "mean mxfp4 or mxfp8_e5m2?); valid formats: mxfp4, mxfp6_e2m3, mxfp6_e3m2, mxfp8_e4m3, mxfp8_e5m2, "
                            "mxint8, fp8_e4m3"],
    "unknown_key.yaml": ["13: error: activation.scale.rounding_mode: unknown key 'rounding_mode' "
                         "(did you mean 'rounding'?); valid keys here: format, granularity, "
                         "block, rounding"],
    "unknown_rounding.yaml": ["6: error: weight.scale.rounding: unknown rounding 'nearest'; "
                              "valid roundings: floor, even, rceil"],
    "weight_none.yaml": ["4: error: weight: must be a mapping with keys format, scale, static; "
                         "got 'none'"],
}


def test_the_corpus_is_complete():
    files = {p.name for p in BROKEN_SCHEMES.iterdir() if p.is_file()}
    assert files == set(BROKEN_EXPECTED), "every broken file needs its expected findings"
    assert len(files) >= 20


@pytest.mark.parametrize("name", sorted(BROKEN_EXPECTED))
def test_broken_file_gives_exactly_its_findings(name, monkeypatch):
    monkeypatch.chdir(BROKEN_SCHEMES)
    scheme, findings = read_scheme_file(Path(name))
    assert scheme is None
    assert [str(f) for f in findings] == [f"{name}:{line}" for line in BROKEN_EXPECTED[name]]
    assert all(f.is_error and f.path == name and f.line >= 1 for f in findings)


def test_paths_are_shown_relative_to_cwd_when_under_it(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)
    _, findings = read_scheme_file(BROKEN_SCHEMES / "block_16.yaml")
    assert str(findings[0]) == ("tests/data/broken_schemes/block_16.yaml:12: error: "
                                "activation.scale.block: must be 32 for e8m0 scales (OCP MX)")
    monkeypatch.chdir(tmp_path)  # not under cwd: shown as given
    _, findings = read_scheme_file(BROKEN_SCHEMES / "block_16.yaml")
    assert findings[0].path == str(BROKEN_SCHEMES / "block_16.yaml")


def test_all_problems_of_all_files_in_one_run(monkeypatch):
    monkeypatch.chdir(BROKEN_SCHEMES)
    catalog = load_files([SchemeDir(Path("."), "--schemes")])
    expected = sorted(f"{name}:{line}" for name, lines in BROKEN_EXPECTED.items()
                      for line in lines)
    assert sorted(str(f) for f in catalog.findings) == expected
    assert len(catalog) == 0


def _write(d: Path, name: str, aliases=(), activation="none") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nsummary: test scheme {name}\naliases: [{', '.join(aliases)}]\n"
        "weight: {format: mxfp8_e5m2, scale: {format: e8m0, rounding: floor}, static: true}\n"
        f"activation: {activation}\n")
    return path


def test_user_dirs_from_argument_and_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a", "user_a", aliases=["ua"])
    _write(tmp_path / "b", "user_b")
    _write(tmp_path / "c", "user_c")
    env = {ENV_VAR: os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")])}
    catalog = load_schemes([tmp_path / "c"], env=env)
    assert catalog.findings == []
    assert set(GOLDEN) | {"user_a", "user_b", "user_c"} == set(catalog.schemes)
    assert catalog.get("ua").source == Path("a/user_a.yaml")
    assert catalog.get("user_b").source_dir == Path("b")
    assert [d.origin for d in catalog.dirs] == ["shipped", ENV_VAR, ENV_VAR, "--schemes"]
    assert str(catalog.get("user_c").weight) == "mxfp8_e5m2:e8m0/b32:floor:static"


def test_the_same_dir_twice_is_read_once(tmp_path):
    _write(tmp_path / "a", "user_a")
    catalog = load_schemes([tmp_path / "a", tmp_path / "a" / ".." / "a", REPO / "schemes"])
    assert catalog.findings == [] and len(catalog) == len(GOLDEN) + 1


def test_missing_dir_is_an_error_naming_it(tmp_path):
    catalog = load_schemes([tmp_path / "nope"], env={ENV_VAR: str(tmp_path / "gone")})
    msgs = [str(f) for f in catalog.findings]
    assert msgs == [
        f"{tmp_path / 'gone'}: error: scheme directory does not exist (from {ENV_VAR}); create "
        "it or fix the path",
        f"{tmp_path / 'nope'}: error: scheme directory does not exist (from --schemes); create "
        "it or fix the path"]
    assert len(catalog) == len(GOLDEN)  # the rest still loads


def test_name_clash_across_dirs_names_both_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a", "w_mxfp4")  # clashes with the shipped scheme
    _write(tmp_path / "b", "mine", aliases=["mxfp4"])  # alias = a shipped alias
    _write(tmp_path / "c", "theirs", aliases=["w_mxfp6_e2m3", "mine2"])  # alias = a shipped name
    _write(tmp_path / "d", "mine2")  # name = an alias of an earlier scheme
    catalog = load_schemes([tmp_path / x for x in "abcd"], env={})
    shipped_file = catalog.schemes["w_mxfp4"].source
    assert [str(f) for f in catalog.findings] == [
        f"a/w_mxfp4.yaml:1: error: name: scheme name 'w_mxfp4' is already defined in "
        f"{shipped_file}:1; names must be unique across all scheme directories",
        f"b/mine.yaml:3: error: aliases.0: alias 'mxfp4' is already an alias of "
        f"'w_mxfp4_a_mxfp4' ({shipped_file.parent}/w_mxfp4_a_mxfp4.yaml:3); aliases must be "
        "unique",
        f"c/theirs.yaml:3: error: aliases.0: alias 'w_mxfp6_e2m3' is the name of the scheme in "
        f"{shipped_file.parent}/w_mxfp6_e2m3.yaml:1; pick another alias",
        # load order decides: c's alias came first, so the finding goes on d (issue 12)
        "d/mine2.yaml:1: error: name: scheme name 'mine2' is already an alias of 'theirs' "
        "(c/theirs.yaml:3); names and aliases share one namespace: rename this scheme and its "
        "file",
    ]
    assert catalog.schemes["w_mxfp4"].source == shipped_file  # the first definition keeps it
    assert catalog.aliases["mxfp4"] == "w_mxfp4_a_mxfp4"
    assert not {"mine", "theirs", "mine2"} & set(catalog.schemes)  # files with errors
    for token in ("w_mxfp4", "mxfp4", "w_mxfp6_e2m3", "mine2"):  # but never silently
        with pytest.raises(AmbiguousSchemeError):
            catalog.get(token)
    assert catalog.get("w_mxfp4_a_mxfp4").name == "w_mxfp4_a_mxfp4"
    with pytest.raises(SchemeLoadError) as info:
        catalog.raise_for_errors()
    assert len(info.value.findings) == 4
    assert [f.field for f in run_lint(catalog)] == ["name", "aliases.0", "aliases.0", "name"]


def test_yml_files_are_reported_not_skipped(tmp_path):
    _write(tmp_path, "good")
    (tmp_path / "other.yml").write_text("name: other\n")
    catalog = load_schemes([tmp_path], include_shipped=False)
    assert set(catalog.schemes) == {"good"}
    assert [(f.severity, f.message) for f in catalog.findings] == [
        ("warning", "not loaded: scheme files end in .yaml; rename it to other.yaml")]


def test_huge_and_deep_files_are_refused_quickly(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"name: big\nsummary: " + b"x" * (1 << 20) + b"\n")
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: deep\naliases: " + "[" * 200_000 + "]" * 200_000 + "\n")
    t0 = time.perf_counter()
    _, big_findings = read_scheme_file(big)
    _, deep_findings = read_scheme_file(deep)
    assert time.perf_counter() - t0 < 2.0
    assert [f.message for f in big_findings] == [
        f"file is {big.stat().st_size} bytes; scheme files are at most 1048576 bytes (1 MiB)"]
    assert [(f.line, f.message) for f in deep_findings] == [
        (2, "nested deeper than 20 levels; a scheme file needs 3")]


def test_billion_laughs_is_refused_at_the_first_anchor(tmp_path):
    laughs = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"{c}: &{c} [{', '.join(['*' + p] * 9)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(laughs) + "\n")
    _, findings = read_scheme_file(path)
    assert [(f.line, f.message.split(";")[0]) for f in findings] == [
        (1, "YAML anchor '&a' is not allowed in scheme files")]


def test_unknown_name_lists_close_matches(shipped):
    with pytest.raises(UnknownSchemeError) as info:
        shipped.get("w_mxfp4_a_mxfp44")
    assert isinstance(info.value, KeyError)
    assert str(info.value).startswith("no scheme or alias named 'w_mxfp4_a_mxfp44'; did you mean "
                                      "w_mxfp4_a_mxfp4")
    with pytest.raises(KeyError, match="known schemes: w_mxfp4, "):
        shipped.get("zzzzzzzzzzzzzzzzzzzzzzzzz")
    assert "mxfp4" in shipped and "nothing" not in shipped


def test_lint_checks_are_a_list_to_extend(shipped, monkeypatch):
    def no_mxint8(catalog):
        for s in catalog:
            if s.weight.format == "mxint8":
                yield warning(str(s.source), s.line("weight.format"), "weight.format", "no int")

    monkeypatch.setattr("registry.lint.checks.LINT_CHECKS", LINT_CHECKS + [no_mxint8])
    found = run_lint(shipped)
    assert [str(f) for f in found] == [
        f"{shipped.get('mxint8').source}:4: warning: weight.format: no int"]
    assert isinstance(found[0], Finding)


def test_shipped_dir_is_found_from_a_checkout():
    assert shipped_dir().resolve() == (REPO / "schemes").resolve()
    assert scheme_dirs(env={})[0].origin == "shipped"


def test_public_api_is_lazy_and_imports_no_torch():
    code = ("import sys, json; import registry; before = 'registry.files.catalog' in sys.modules; "
            "c = registry.load_schemes(); c.get('mxfp4'); "
            "print(json.dumps([before, len(c), sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('torch', 'triton'))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert json.loads(out.stdout) == [False, len(GOLDEN), []]
