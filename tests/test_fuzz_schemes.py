"""Fuzz: mutate valid scheme files; every outcome is a valid scheme or clean located findings.

Never an exception, never a finding without `file:line`, never an "internal error".
"""
import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.catalog import load_files
from registry.cli import main
from registry.contract import QuantKey
from registry.errors import display_path
from registry.loader import SchemeDir, read_scheme_file

REPO = Path(__file__).resolve().parent.parent
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


def _mutate(text: str, data) -> bytes:
    lines = text.split("\n")
    kind = data.draw(st.sampled_from([
        "drop", "rename", "retype", "duplicate", "indent", "bytes", "unicode", "deep",
        "truncate", "tab", "document", "text_value", "inner_value", "inner_value"]))
    i = data.draw(st.integers(0, max(len(lines) - 1, 0)))
    line = lines[i] if lines else ""
    if kind == "drop" and lines:
        del lines[i]
    elif kind == "rename":
        new = data.draw(st.one_of(st.sampled_from(KEYS), st.text(max_size=12)))
        lines[i] = re.sub(r"[^\s:{},\[\]-][^:{},\[\]]*(?=:)", lambda _: new, line, count=1)
    elif kind == "retype":
        value = data.draw(st.sampled_from(VALUES))
        key = data.draw(st.sampled_from(KEYS))
        lines[i] = re.sub(r":\s.*$", lambda _: ": " + value, line, count=1) if ":" in line \
            else line.replace(key, value)
    elif kind == "inner_value":  # one `key: value` inside a flow mapping, or a block line
        pairs = list(re.finditer(r"(\w+): ([^,{}\n]+)", line))
        if pairs:
            m = pairs[data.draw(st.integers(0, len(pairs) - 1))]
            value = data.draw(st.sampled_from(VALUES))
            lines[i] = line[:m.start(2)] + value + line[m.end(2):]
    elif kind == "text_value":
        value = data.draw(st.text(max_size=20))
        lines[i] = line.split(":", 1)[0] + ": " + value if ":" in line else value
    elif kind == "duplicate":
        lines.insert(i, line)
    elif kind == "indent":
        n = data.draw(st.integers(0, 7))
        lines[i] = " " * n + line.lstrip()
    elif kind == "tab":
        lines[i] = "\t" + line
    elif kind == "document":
        lines.insert(i, data.draw(st.sampled_from(["---", "...", "--- !!map", "%TAG ! x:"])))
    elif kind == "deep":
        n = data.draw(st.integers(1, 60))
        opener = data.draw(st.sampled_from(["[", "{a: "]))
        closer = "]" if opener == "[" else "}"
        lines[i] = line.split(":", 1)[0] + ": " + opener * n + "1" + closer * n
    raw = "\n".join(lines).encode("utf-8", "surrogatepass")
    if kind == "bytes":
        pos = data.draw(st.integers(0, len(raw)))
        raw = raw[:pos] + data.draw(st.binary(min_size=1, max_size=8)) + raw[pos:]
    elif kind == "unicode":
        pos = data.draw(st.integers(0, len(text)))
        raw = (text[:pos] + data.draw(st.text(min_size=1, max_size=8)) + text[pos:]).encode(
            "utf-8", "surrogatepass")
    elif kind == "truncate":
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    return raw


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _check(path: Path, raw: bytes):
    scheme, findings = read_scheme_file(path)
    shown = display_path(path)
    max_line = raw.count(b"\n") + raw.count(b"\r") + 2
    for f in findings:
        text = str(f)
        assert f.path == shown and isinstance(f.line, int) and 1 <= f.line <= max_line, text
        assert text.startswith(f"{shown}:{f.line}: {f.severity}: "), text
        assert "\n" not in text and "internal error" not in text, text
        assert "Input should" not in text and "Value error" not in text, text  # all translated
        text.encode("utf-8", "backslashreplace")
    if scheme is None:
        assert any(f.is_error for f in findings)
    else:
        assert not any(f.is_error for f in findings)
        assert scheme.name == path.stem
        assert QuantKey.parse(str(scheme.weight)) == scheme.weight
        if scheme.activation is not None:
            assert QuantKey.parse(str(scheme.activation)) == scheme.activation
    return scheme, findings


@settings(derandomize=True, max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), data=st.data())
def test_mutated_files_give_a_scheme_or_clean_findings(workdir, base, data):
    stem, text = base
    raw = text.encode()
    for _ in range(data.draw(st.integers(1, 3))):
        raw = _mutate(raw.decode("utf-8", "surrogateescape"), data)
    d = workdir / "one"
    d.mkdir(exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    path = d / f"{stem}.yaml"
    path.write_bytes(raw)
    scheme, findings = _check(path, raw)
    # The same file through a catalog (beside the shipped dir) and through `registry lint`.
    catalog = load_files([SchemeDir(d, "--schemes")])
    assert [str(f) for f in catalog.file_findings] == [str(f) for f in findings]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["lint", str(path)])
    assert rc == (1 if out.getvalue() else 0)
    assert all(line.startswith(f"{display_path(path)}:") for line in out.getvalue().splitlines())


@settings(derandomize=True, max_examples=100, deadline=None)
@given(raw=st.one_of(st.binary(max_size=200),
                     st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.lists(st.sampled_from(KEYS + VALUES + [": ", "\n", "  ", "- ", "{", "}",
                                                               "[", "]", ",", "#", "&", "*"]),
                              max_size=40).map(lambda xs: "".join(xs).encode("utf-8",
                                                                               "surrogatepass"))))
def test_arbitrary_bytes_give_clean_findings(workdir, raw):
    path = workdir / "arbitrary.yaml"
    path.write_bytes(raw)
    scheme, findings = _check(path, raw)
    assert scheme is None and findings
