"""Fuzz: >= 10,000 mutated and generated scheme files (seeded, reproducible); every outcome is
a valid scheme or clean located findings.

Never an exception, never a finding without `file:line`, never an "internal error". Volume:
a seeded random.Random mutator over the shipped files, hypothesis-generated scheme dicts dumped
in block and flow style, arbitrary bytes; a few hundred also through `load_files` and
`registry lint`.

Each test owns its count. SHARES declares, for every fuzz test, how many pytest cases it is
(its parametrization reads `runs`), the files one case tries (its loop bound or hypothesis
max_examples reads `cases`) and the fewest of each outcome one case must see. A case counts what
it did in a Counter of its own and asserts that it tried every declared file and met its
minimums, so each test passes or fails the same alone, under xdist, `-k` or in any order.
`test_tally_reaches_ten_thousand` checks the declaration: the shares add up to >= 10,000 files,
their minimums to > 200 valid schemes, > 5,000 refused and >= 300 through catalog and lint, and
every fuzz test of this module has a share (an undeclared one fails it).
"""
import collections
import contextlib
import io
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import yaml

from kernels.spec.contract import QuantKey
from registry.files.catalog import load_files
from registry.cli import main
from registry.errors import display_path
from registry.files.loader import SchemeDir, read_scheme_file

from support.fuzz_shares import Share, check_declaration, ran_its_share
from support.paths import REPO

SHIPPED = sorted((REPO / "schemes").glob("*.yaml"))

BLOCK_STYLE = """\
name: w_mxfp4_a_mxfp6_e2m3
summary: block-style copy of a shipped scheme
aliases:
  - fuzz_alias
weight:
  format: mxfp4
  scale:
    format: e8m0
    block: 32
    rounding: even
  static: true
activation:
  format: mxfp6_e2m3
  scale: {format: e8m0, granularity: block, block: 32, rounding: floor}
  static: false
"""

BASES = [(p.stem, p.read_text()) for p in SHIPPED] + [("w_mxfp4_a_mxfp6_e2m3", BLOCK_STYLE)]

KEYS = ["name", "summary", "aliases", "weight", "activation", "format", "scale", "static",
        "block", "rounding", "granularity", "Format", "activations", "rounding_mode", "<<", "",
        "null", "32", "ü"]

VALUES = ["42", "-1", "0", "3.5", ".inf", ".nan", "1e400", "99999999999999999999999999",
          "9" * 5000, "0x20", "0o40", "1_000", "[]", "{}", "null", "~", "", "true", "false",
          "yes", "no", "on", "none", "None", "'none'", '"ünïcødé ☃ 𝔘"', '"\\ud800"', '"\\x00"',
          "'32'", "[mxfp4, [nested]]", "{format: e8m0}", "{format: fp32, granularity: token}",
          "mxfp4", "fp8_e4m3", "e8m0", "fp32", "even", "rceil", "floor", "token", "tensor",
          "!!python/object/apply:os.system ['true']", "!!str x", "&anchor x", "*anchor",
          "|\n  literal\n  block", ">\n  folded", "? complex", "- item", "'unterminated",
          '"bad \\escape"', "{a: 1, a: 2}", "[1, 2", "%YAML 1.1", "@reserved", "`tick"]


#: What the shares must add up to: >= 10,000 files, > 200 valid, > 5,000 refused, >= 300 linted.
PROMISE = {"cases": 10_000, "schemes": 201, "refused": 5001, "through_catalog_and_lint": 300}
SHARES = {
    "test_mutated_files_give_a_scheme_or_clean_findings":
        Share(1, 300, {"schemes": 5, "refused": 200, "through_catalog_and_lint": 300}),
    "test_seeded_mutations_give_a_scheme_or_clean_findings":
        Share(4, 2500, {"schemes": 51, "refused": 1100}),
    "test_generated_scheme_dicts_give_a_scheme_or_clean_findings":
        Share(1, 1600, {"refused": 1000}),
    "test_arbitrary_bytes_give_clean_findings": Share(1, 500, {"refused": 500}),
}


class HypothesisChoices:
    """The mutator's choices drawn by hypothesis (shrinkable)."""

    def __init__(self, data):
        self.data = data

    def pick(self, xs):
        return self.data.draw(st.sampled_from(xs))

    def integer(self, lo, hi):
        return self.data.draw(st.integers(lo, hi))

    def text(self, lo, hi):
        return self.data.draw(st.text(min_size=lo, max_size=hi))

    def binary(self, lo, hi):
        return self.data.draw(st.binary(min_size=lo, max_size=hi))


class SeededChoices:
    """The same choices from a seeded random.Random (volume at a fraction of the cost)."""

    ALPHABET = "abcxyz_-:{}[],#&*!|>'\" 0123456789\t\n ü☃𝔘\x00\x85\u2028\ufeff"

    def __init__(self, rng: random.Random):
        self.rng = rng

    def pick(self, xs):
        return self.rng.choice(xs)

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)

    def text(self, lo, hi):
        return "".join(self.rng.choice(self.ALPHABET) for _ in range(self.rng.randint(lo, hi)))

    def binary(self, lo, hi):
        return bytes(self.rng.randrange(256) for _ in range(self.rng.randint(lo, hi)))


def _mutate(text: str, ch) -> bytes:
    lines = text.split("\n")
    kind = ch.pick([
        "drop", "rename", "retype", "duplicate", "indent", "bytes", "unicode", "deep",
        "truncate", "tab", "document", "text_value", "inner_value", "inner_value"])
    i = ch.integer(0, max(len(lines) - 1, 0))
    line = lines[i] if lines else ""
    if kind == "drop" and lines:
        del lines[i]
    elif kind == "rename":
        new = ch.pick(KEYS) if ch.integer(0, 1) else ch.text(0, 12)
        lines[i] = re.sub(r"[^\s:{},\[\]-][^:{},\[\]]*(?=:)", lambda _: new, line, count=1)
    elif kind == "retype":
        value = ch.pick(VALUES)
        key = ch.pick(KEYS)
        lines[i] = re.sub(r":\s.*$", lambda _: ": " + value, line, count=1) if ":" in line \
            else line.replace(key, value)
    elif kind == "inner_value":  # one `key: value` inside a flow mapping, or a block line
        pairs = list(re.finditer(r"(\w+): ([^,{}\n]+)", line))
        if pairs:
            m = pairs[ch.integer(0, len(pairs) - 1)]
            value = ch.pick(VALUES)
            lines[i] = line[:m.start(2)] + value + line[m.end(2):]
    elif kind == "text_value":
        value = ch.text(0, 20)
        lines[i] = line.split(":", 1)[0] + ": " + value if ":" in line else value
    elif kind == "duplicate":
        lines.insert(i, line)
    elif kind == "indent":
        n = ch.integer(0, 7)
        lines[i] = " " * n + line.lstrip()
    elif kind == "tab":
        lines[i] = "\t" + line
    elif kind == "document":
        lines.insert(i, ch.pick(["---", "...", "--- !!map", "%TAG ! x:"]))
    elif kind == "deep":
        n = ch.integer(1, 60)
        opener = ch.pick(["[", "{a: "])
        closer = "]" if opener == "[" else "}"
        lines[i] = line.split(":", 1)[0] + ": " + opener * n + "1" + closer * n
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        pos = ch.integer(0, len(raw))
        raw = raw[:pos] + ch.binary(1, 8) + raw[pos:]
    elif kind == "unicode":
        pos = ch.integer(0, len(text))
        raw = (text[:pos] + ch.text(1, 8) + text[pos:]).encode(
            "utf-8", "surrogatepass")
    elif kind == "truncate":
        raw = raw[:ch.integer(0, len(raw))]
    return raw


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _check(path: Path, raw: bytes, seen: collections.Counter):
    scheme, findings = read_scheme_file(path)
    seen["cases"] += 1
    seen["schemes" if scheme is not None else "refused"] += 1
    shown = display_path(path)
    max_line = raw.count(b"\n") + raw.count(b"\r") + 2
    for f in findings:
        text = str(f)
        assert f.path == shown and isinstance(f.line, int) and 1 <= f.line <= max_line, text
        assert text.startswith(f"{shown}:{f.line}: {f.severity}: "), text
        assert "\n" not in text and "internal error" not in text, text
        assert "Input should" not in text and "Value error" not in text, text  # all translated
        text.encode("utf-8", "backslashreplace")
        assert len(text) < 600 + len(shown), text[:300]  # values are cut, never echoed whole
    if scheme is None:
        assert any(f.is_error for f in findings)
    else:
        assert not any(f.is_error for f in findings)
        assert scheme.name == path.stem
        assert QuantKey.parse(str(scheme.weight)) == scheme.weight
        if scheme.activation is not None:
            assert QuantKey.parse(str(scheme.activation)) == scheme.activation
    return scheme, findings


def test_mutated_files_give_a_scheme_or_clean_findings(workdir):
    seen = collections.Counter()
    _mutated_file(workdir, seen)
    ran_its_share(SHARES, "test_mutated_files_give_a_scheme_or_clean_findings", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_mutated_files_give_a_scheme_or_clean_findings"].cases,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), data=st.data())
def _mutated_file(workdir, seen, base, data):
    stem, text = base
    raw = text.encode()
    ch = HypothesisChoices(data)
    for _ in range(data.draw(st.integers(1, 3))):
        raw = _mutate(raw.decode("utf-8", "surrogateescape"), ch)
    d = workdir / "one"
    d.mkdir(exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    path = d / f"{stem}.yaml"
    path.write_bytes(raw)
    scheme, findings = _check(path, raw, seen)
    # The same file through a catalog (beside the shipped dir) and through `registry lint`.
    catalog = load_files([SchemeDir(d, "--schemes")])
    assert [str(f) for f in catalog.file_findings] == [str(f) for f in findings]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["lint", str(path)])
    assert rc == (1 if out.getvalue() else 0)
    assert all(line.startswith(f"{display_path(path)}:") for line in out.getvalue().splitlines())
    seen["through_catalog_and_lint"] += 1


@pytest.mark.parametrize(
    "seed", range(SHARES["test_seeded_mutations_give_a_scheme_or_clean_findings"].runs))
def test_seeded_mutations_give_a_scheme_or_clean_findings(workdir, seed):
    """Volume: 2,500 files per seed, each 1-4 mutations of a shipped (or block-style) file."""
    share = SHARES["test_seeded_mutations_give_a_scheme_or_clean_findings"]
    rng = random.Random(4100 + seed)
    ch = SeededChoices(rng)
    d = workdir / f"seeded_{seed}"
    d.mkdir(exist_ok=True)
    seen = collections.Counter()
    for _ in range(share.cases):
        stem, text = rng.choice(BASES)
        raw = text.encode()
        for _ in range(rng.randint(1, 4)):
            raw = _mutate(raw.decode("utf-8", "surrogateescape"), ch)
        path = d / f"{stem}.yaml"
        path.write_bytes(raw)
        _check(path, raw, seen)
    ran_its_share(SHARES, "test_seeded_mutations_give_a_scheme_or_clean_findings", seen)


# --- generated from scratch: structurally plausible scheme dicts, block and flow style ---------

FORMATS = ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3", "mxfp8_e5m2", "mxint8",
           "fp8_e4m3", "fp4", "bf16", "MXFP4", ""]
odd = st.one_of(st.none(), st.booleans(), st.integers(-2, 2 ** 70), st.floats(),
                st.text(max_size=6), st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
scale = st.fixed_dictionaries({}, optional={
    "format": st.one_of(st.sampled_from(["e8m0", "fp32", "e4m3", "ue8m0"]), odd),
    "granularity": st.one_of(st.sampled_from(["block", "tensor", "token", "channel"]), odd),
    "block": st.one_of(st.sampled_from([32, 16, 64, 0, -32]), odd),
    "rounding": st.one_of(st.sampled_from(["even", "floor", "rceil", "ceil"]), odd),
    "static": st.booleans(), "extra": odd})
tensor = st.fixed_dictionaries({}, optional={
    "format": st.one_of(st.sampled_from(FORMATS), odd), "scale": st.one_of(scale, odd),
    "static": st.one_of(st.booleans(), st.sampled_from(["yes", "true", 1])),
    "Format": odd})
NAMES = ["w_mxfp4", "w_mxfp4_a_mxfp4", "gen_scheme", "Bad-Name", "x" * 70, "", "w mx"]
scheme_dict = st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.sampled_from(NAMES), odd),
    "summary": st.one_of(st.sampled_from(["one line", " ", "two\nlines", "x" * 300]), odd),
    "aliases": st.one_of(st.lists(st.one_of(st.sampled_from(NAMES + ["mx4"]), odd),
                                  max_size=3), odd),
    "weight": st.one_of(tensor, odd),
    "activation": st.one_of(tensor, st.just("none"), odd),
    "notes": odd})


def test_generated_scheme_dicts_give_a_scheme_or_clean_findings(workdir):
    seen = collections.Counter()
    _generated_dict(workdir, seen)
    ran_its_share(SHARES, "test_generated_scheme_dicts_give_a_scheme_or_clean_findings", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_generated_scheme_dicts_give_a_scheme_or_clean_findings"].cases,
          suppress_health_check=list(HealthCheck))
@given(doc=scheme_dict, style=st.sampled_from([False, True, None]),
       stem=st.sampled_from(["w_mxfp4", "gen_scheme", "w_mxfp4_a_mxfp4"]))
def _generated_dict(workdir, seen, doc, style, stem):
    text = yaml.safe_dump(doc, default_flow_style=style, allow_unicode=True, sort_keys=False)
    raw = text.encode("utf-8", "surrogatepass")
    d = workdir / "generated"
    d.mkdir(exist_ok=True)
    path = d / f"{stem}.yaml"
    path.write_bytes(raw)
    scheme, _ = _check(path, raw, seen)
    if scheme is not None:  # what was accepted is what the dict said
        assert doc["name"] == stem and scheme.weight.format == doc["weight"]["format"]


def test_arbitrary_bytes_give_clean_findings(workdir):
    seen = collections.Counter()
    _arbitrary_bytes(workdir, seen)
    ran_its_share(SHARES, "test_arbitrary_bytes_give_clean_findings", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_arbitrary_bytes_give_clean_findings"].cases)
@given(raw=st.one_of(st.binary(max_size=200),
                     st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.lists(st.sampled_from(KEYS + VALUES + [": ", "\n", "  ", "- ", "{", "}",
                                                               "[", "]", ",", "#", "&", "*"]),
                              max_size=40).map(lambda xs: "".join(xs).encode("utf-8",
                                                                               "surrogatepass"))))
def _arbitrary_bytes(workdir, seen, raw):
    path = workdir / "arbitrary.yaml"
    path.write_bytes(raw)
    scheme, findings = _check(path, raw, seen)
    assert scheme is None and findings


def test_tally_reaches_ten_thousand():
    """The declared shares promise >= 10,000 files (the brief's number) and cover every fuzz
    test; each test asserts its own share when it runs, so this one reads no other's state."""
    total = check_declaration(SHARES, PROMISE, globals(), "test_tally_reaches_ten_thousand")
    print("scheme fuzz: declared cases and minimums", total)
