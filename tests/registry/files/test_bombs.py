"""Bombs: scheme YAML and config.json built to hang or blow up a reader are refused (or
reported) fast, in one short line naming FILE:LINE.

A real bomb takes minutes or exhausts memory; each case here must finish within 5 s (generous
for 2 slow cores) and its message must stay short (a megabyte value is never echoed).
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from registry.files.catalog import load_schemes
from registry.errors import display_path
from registry.configs.hf_config import ConfigError, schemes_from_config
from registry.configs.json_lines import MAX_BYTES, MAX_DEPTH
from registry.files.loader import read_scheme_file

from support.hf_config_fixtures import FIXTURES
from support.paths import REPO

SCHEME = (REPO / "schemes" / "w_mxfp4_a_mxfp4.yaml").read_text()
SECONDS = 5.0
SHORT = 300  # characters in one message
MEGA = 1_000_000
WEIGHT = next(i for i, line in enumerate(SCHEME.splitlines(), 1) if line.startswith("weight:"))


def _b36(i: int) -> str:
    digits = "abcdefghijklmnopqrstuvwxyz0123456789"
    out = ""
    while True:
        out, i = digits[i % 36] + out, i // 36
        if not i:
            return out


def _laughs() -> str:
    """Billion laughs: 9 anchors, each a list of 9 aliases of the one before."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n" + SCHEME


# (case id, file text, expected line, a needle of the one error)
YAML_BOMBS = [
    ("flow_deep_lists", "name: w_mxfp4_a_mxfp4\nweight: " + "[" * 10_000 + "1" + "]" * 10_000,
     2, "nested deeper than 20 levels"),
    ("flow_deep_maps", "name: w_mxfp4_a_mxfp4\nweight: " + "{a: " * 10_000 + "1" + "}" * 10_000,
     2, "nested deeper than 20 levels"),
    ("block_deep_lists", "- " * 10_000 + "1\n", 1, "nested deeper than 20 levels"),
    ("block_deep_maps", "".join(" " * i + f"k{i}:\n" for i in range(1200)), 20,
     "nested deeper than 20 levels"),
    ("billion_laughs", _laughs(), 1, "YAML anchor '&l0' is not allowed"),
    ("alias_only", SCHEME.replace("summary:", "summary: *boom #"), 2, "YAML alias '*boom'"),
    ("megabyte_summary", SCHEME.replace("summary: ", "summary: " + "x" * MEGA + " "), 2,
     "summary: is 1000"),
    ("megabyte_name", SCHEME.replace("name: w_mxfp4_a_mxfp4", "name: " + "a" * MEGA), 1,
     "name: is 1000000 characters long; at most 64"),
    ("megabyte_plain_key", "x" * MEGA + ": 1\n" + SCHEME, 1, "not valid YAML"),
    ("megabyte_quoted_key", '"' + "x" * MEGA + '": 1\n' + SCHEME, 1, "not valid YAML"),
    ("megabyte_alias", SCHEME.replace("aliases: [", "aliases: [" + "a" * MEGA + ", "), 3,
     "aliases.0: is 1000000 characters long"),
    ("megabyte_format", SCHEME.replace("format: mxfp4,", "format: " + "q" * MEGA + ",", 1), WEIGHT,
     "unknown"),
    ("two_megabyte_file", SCHEME + "#" * (2 * MEGA) + "\n", 1, "scheme files are at most"),
    ("long_line", "summary: " + " ".join(["word"] * 200_000) + "\n" + SCHEME, 1, ""),
    ("many_keys_block", "".join(f"{_b36(i)}: 1\n" for i in range(100_000)), 500,
     "more than 1000 keys, values and list items"),
    ("many_keys_flow", "{" + ", ".join(f"{_b36(i)}: 1" for i in range(100_000)) + "}\n", 1,
     "more than 1000 keys"),
    ("many_items", "aliases: [" + ", ".join(["a"] * 200_000) + "]\n", 1, "more than 1000"),
    ("many_documents", "---\na: 1\n" * 50_000, 3, "a second YAML document"),
    ("huge_int", SCHEME.replace("block: 32", "block: " + "9" * 5000, 1), WEIGHT,
     "is too long to read"),
]


@pytest.mark.parametrize("text,line,needle", [c[1:] for c in YAML_BOMBS],
                         ids=[c[0] for c in YAML_BOMBS])
def test_yaml_bomb_refused_fast_in_one_short_line(tmp_path, text, line, needle):
    path = tmp_path / "w_mxfp4_a_mxfp4.yaml"
    path.write_text(text)
    start = time.perf_counter()
    scheme, findings = read_scheme_file(path)
    took = time.perf_counter() - start
    assert took < SECONDS, took
    assert scheme is None and findings
    assert len(findings) <= 5, [str(f)[:120] for f in findings[:8]]  # no flood of findings
    shown = display_path(path)
    for f in findings:
        text_ = str(f)
        assert text_.startswith(f"{shown}:{f.line}: error: ") and "\n" not in text_, text_[:200]
        assert len(text_) < SHORT + len(shown), text_[:400]
    first = findings[0]
    assert first.line == line and needle in str(first), str(first)[:300]


# --- config.json -----------------------------------------------------------------------------

QUARK = json.loads((FIXTURES / "quark_mxfp4_w4a4.json").read_text())


def _config_text(replace: str) -> str:
    """The Quark fixture, indent 2, with the global weight's `"group_size": 32` replaced."""
    text = json.dumps(QUARK, indent=2)
    assert text.count('"group_size": 32') == 2
    return text.replace('"group_size": 32', replace, 1)


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


GS = _line_of(json.dumps(QUARK, indent=2), '"group_size": 32')  # the weight's group_size line

# (id, text, expected line, needle): ConfigError
JSON_REFUSED = [
    ("deep_lists_10k", _config_text('"group_size": ' + "[" * 10_000 + "]" * 10_000), GS,
     f"nested deeper than {MAX_DEPTH} levels"),
    ("deep_maps_10k", _config_text('"group_size": ' + '{"a": ' * 10_000 + "1" + "}" * 10_000),
     GS, f"nested deeper than {MAX_DEPTH} levels"),
    ("deep_150", _config_text('"group_size": ' + "[" * 150 + "]" * 150), GS,
     f"nested deeper than {MAX_DEPTH} levels"),
    ("int_5000_digits", _config_text('"group_size": ' + "9" * 5000), GS,
     "group_size: 999999999999999999999... is a number of 5000 characters"),
    ("float_5000_digits", _config_text('"group_size": 0.' + "1" * 5000), GS,
     "is a number of 5002 characters"),
    ("nan", _config_text('"group_size": NaN'), GS, "NaN is not JSON (RFC 8259)"),
    ("infinity", _config_text('"group_size": -Infinity'), GS, "-Infinity is not JSON"),
    ("overflow", _config_text('"group_size": 1e400'), GS, "1e400 overflows to infinity"),
    ("duplicate_key", _config_text('"group_size": 32,\n"group_size": 64'), GS + 1,
     'group_size: duplicate key "group_size" (first at line'),
    ("duplicate_top_key", '{"quantization_config": {},\n "quantization_config": {}}', 2,
     'duplicate key "quantization_config" (first at line 1)'),
    ("not_utf8", _config_text('"group_size": "\xff"').replace("\xff", "\udcff"), GS,
     "not UTF-8 text (byte 0xff)"),
    ("top_level_list", "[" + json.dumps(QUARK) + "]", 1, "holds a JSON object, got"),
    ("megabyte_quant_method", json.dumps({"quantization_config": {
        "quant_method": "q" * MEGA}}, indent=1), 3, "is not supported"),
]


def _check_error(path: Path, text: str) -> str:
    start = time.perf_counter()
    with pytest.raises(ConfigError) as e:
        schemes_from_config(path)
    assert time.perf_counter() - start < SECONDS
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < SHORT + len(str(path)), msg[:400]
    return msg


@pytest.mark.parametrize("text,line,needle", [c[1:] for c in JSON_REFUSED],
                         ids=[c[0] for c in JSON_REFUSED])
def test_json_bomb_refused_fast_in_one_short_line(tmp_path, text, line, needle):
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    msg = _check_error(path, text)
    assert msg.startswith(f"{display_path(path)}:{line}: "), (msg[:300], line)
    assert needle in msg, msg[:300]


def test_json_over_the_size_cap_is_refused_unread(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as fh:  # sparse: the reader must refuse it by its size alone
        fh.seek(MAX_BYTES + 10)
        fh.write(b"}")
    msg = _check_error(path, "")
    assert msg == (f"{display_path(path)}:1: file is {MAX_BYTES + 11} bytes; config.json is "
                   f"read up to {MAX_BYTES} bytes (16 MiB)")


@pytest.mark.parametrize("what", ["dtype", "pattern_key", "exclude_entry", "algo_name",
                                  "many_top_keys", "long_ignore_list"])
def test_json_megabyte_values_and_floods_are_reported_short(tmp_path, what):
    """Values that are well-formed JSON but huge: mapped or reported, never echoed whole."""
    cfg = json.loads(json.dumps(QUARK))
    q = cfg["quantization_config"]
    big = "z" * MEGA
    if what == "dtype":
        q["global_quant_config"]["weight"]["dtype"] = big
    elif what == "pattern_key":
        q["layer_quant_config"] = {big: {"weight": {"dtype": big}, "input_tensors": None}}
    elif what == "exclude_entry":
        q["exclude"] = [big + "\n" + big]
    elif what == "algo_name":
        q["algo_config"] = [{"name": big}] * 5
    elif what == "many_top_keys":
        cfg.update({f"k{i}": i for i in range(100_000)})
    else:
        q["exclude"] = [f"model.layers.{i}.mlp.gate" for i in range(20_000)]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg, indent=1))
    start = time.perf_counter()
    groups = schemes_from_config(path, load_schemes())
    assert time.perf_counter() - start < SECONDS
    for g in groups:
        for text in (g.error, g.note, g.path):
            if text is not None:
                assert "\n" not in text and len(text) < 2000, text[:300]
    errors = [g for g in groups if g.error]
    if what in ("dtype", "pattern_key"):
        assert errors and all(re.match(re.escape(display_path(path)) + r":\d+: ", g.error)
                              for g in errors)
        assert "zzz..." in errors[-1].error
    else:
        assert not errors and groups[0].scheme is not None
