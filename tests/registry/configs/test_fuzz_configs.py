"""Fuzz: >= 10,000 mutated / generated HF config.json quantization configs (Quark and
compressed-tensors), seeded and reproducible.

Every outcome is either groups (each mapped, or unmapped with a one-line error, or a note) or
one ConfigError; never another exception. Every error reads `FILE:LINE: ...` with LINE inside
the file, and where the test knows which value it broke (a marker value, a NaN / duplicate key
/ deep nesting inserted at one place), LINE is that value's line.

Each test owns its count. SHARES declares, for every fuzz test, how many pytest cases it is
(its parametrization reads `runs`), the cases one of them tries (its loop bound or hypothesis
max_examples reads `cases`; `counted` says whether they are config files, which count toward
the 10,000) and the fewest of each outcome one pytest case must see. A case counts what it did
in a Counter of its own and asserts that it tried every declared case and met its minimums, so
each test passes or fails the same alone, under xdist, `-k` or in any order.
`test_tally_reaches_ten_thousand` checks the declaration: the shares add up to >= 10,000 config
files, their minimums to > 500 mapped, unmapped and refused (ConfigError) configs, > 300
checked lines and > 5 models quantized and refused, and every fuzz test of this module has a
share (an undeclared one fails it).
"""
from __future__ import annotations

import collections
import contextlib
import copy
import io
import json
import random
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from registry import quantize_model_from_config
from registry.files.catalog import load_schemes
from registry.cli import main
from registry.errors import display_path
from registry.configs.hf_config import ConfigError, schemes_from_config

from support.config_fuzzing import (BASES, SPEC_FIELDS, dump, dumped_layout, json_depth,
                                    json_values, mutate_dict, mutate_text, spec_paths, wrapped)
from support.fuzz_shares import Share, check_declaration, ran_its_share


#: What the shares must add up to: >= 10,000 configs, > 500 mapped / unmapped / refused,
#: > 300 lines checked, > 5 models quantized and > 5 refused.
PROMISE = {"cases": 10_000, "mapped": 501, "unmapped": 501, "config_errors": 501,
           "lines_checked": 301, "models_quantized": 6, "models_refused": 6}
SHARES = {
    "test_mutated_fixture_configs": Share(4, 2000, {
        "mapped": 150, "unmapped": 150, "config_errors": 150, "lines_checked": 101}),
    "test_generated_configs": Share(1, 1400, {"unmapped": 1000}),
    "test_marker_value_error_points_at_its_line": Share(1, 500, {
        "mapped": 100, "unmapped": 50, "lines_checked": 100}),
    "test_json_lines_match_the_dumped_layout": Share(1, 300, {"lines_checked": 1000},
                                                     counted=False),
    "test_cli_and_quantize_subset": Share(2, 100, {
        "mapped": 20, "unmapped": 10, "config_errors": 10, "models_quantized": 3,
        "models_refused": 3}),
}


MAX_MESSAGE = 4000  # a message lists every problem of a group, each value cut to 60 chars


# --- the invariant -------------------------------------------------------------------------------

def check_one(path: Path, raw: bytes, catalog,
              seen: collections.Counter) -> tuple[str, int | None]:
    """Run one file; assert the invariant; count it in `seen`. ('groups' | 'error', line of a
    ConfigError)."""
    shown = display_path(path)
    n_lines = raw.count(b"\n") + 1
    seen["cases"] += 1
    try:
        groups = schemes_from_config(path, catalog)
    except ConfigError as e:
        seen["config_errors"] += 1
        text = str(e)
        m = re.match(re.escape(shown) + r":(\d+): \S", text)
        assert m, text[:300]
        line = int(m.group(1))
        assert 1 <= line <= n_lines and "\n" not in text and len(text) < 600, text[:300]
        return "error", line
    for g in groups:
        seen["groups"] += 1
        assert g.status in ("mapped", "unmapped", "not quantized", "not mapped"), g
        assert g.source == shown and isinstance(g.line, int) and 1 <= g.line <= n_lines, g
        for text in (g.error, g.note, g.path):
            if text is not None:
                assert "\n" not in text and "\r" not in text and len(text) < MAX_MESSAGE, \
                    text[:300]
        if g.scheme is not None:
            seen["mapped"] += 1
            assert g.error is None and g.contract == g.scheme.contract
        elif g.error is not None:
            seen["unmapped"] += 1
            assert g.error.startswith(f"{shown}:{g.line}: {g.path}: "), g.error[:300]
            assert "Traceback" not in g.error and "internal error" not in g.error
        else:
            assert g.note, g
    return "groups", None


@pytest.fixture(scope="module")
def catalog():
    return load_schemes()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz_configs")


# --- volume: a seeded mutator over the fixtures ----------------------------------------------

@pytest.mark.parametrize("seed", range(SHARES["test_mutated_fixture_configs"].runs))
def test_mutated_fixture_configs(catalog, workdir, seed):
    rng = random.Random(20270 + seed)
    path = workdir / f"config_{seed}.json"
    names = sorted(BASES)
    seen = collections.Counter()
    for _ in range(SHARES["test_mutated_fixture_configs"].cases):
        cfg = copy.deepcopy(BASES[rng.choice(names)])
        for _ in range(rng.choice([0, 1, 1, 2, 3, 6])):
            mutate_dict(cfg, rng)
        if rng.random() < 0.1:  # bare, or under text_config
            q = cfg.get("quantization_config")
            if isinstance(q, dict):
                cfg = q if rng.random() < 0.5 else {"text_config": {"quantization_config": q}}
        try:
            text = dump(cfg, rng)
        except ValueError:  # an unpaired surrogate with ensure_ascii=False
            text = json.dumps(cfg)
        raw, want_line = text.encode("utf-8", "surrogatepass"), None
        if rng.random() < 0.35:
            raw, _, want_line = mutate_text(text, rng)
            try:  # a refusal the dict mutations made (too deep, not UTF-8) may come first
                raw.decode("utf-8")
            except UnicodeDecodeError:
                want_line = None
            if json_depth(cfg) > 100:
                want_line = None
        path.write_bytes(raw)
        outcome, line = check_one(path, raw, catalog, seen)
        if want_line is not None:  # exactly one located refusal was made: it names its line
            assert outcome == "error" and line == want_line, (raw[:200], line, want_line)
            seen["lines_checked"] += 1
    ran_its_share(SHARES, "test_mutated_fixture_configs", seen)  # the located mutations did happen


# --- generated from scratch: structurally plausible specs ----------------------------------------

def test_generated_configs(catalog, workdir):
    seen = collections.Counter()
    _generated_config(catalog, workdir, seen)
    ran_its_share(SHARES, "test_generated_configs", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_generated_configs"].cases,
          suppress_health_check=list(HealthCheck))
@given(cfg=wrapped, indent=st.sampled_from([None, 2]))
def _generated_config(catalog, workdir, seen, cfg, indent):
    path = workdir / "generated.json"
    text = json.dumps(cfg, indent=indent)
    raw = text.encode("utf-8", "surrogatepass")
    path.write_bytes(raw)
    check_one(path, raw, catalog, seen)


# --- the line of a broken field: a marker value, found in the text independently -----------------

def test_marker_value_error_points_at_its_line(catalog, workdir):
    seen = collections.Counter()
    _marker_value(catalog, workdir, seen)
    ran_its_share(SHARES, "test_marker_value_error_points_at_its_line", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_marker_value_error_points_at_its_line"].cases,
          suppress_health_check=list(HealthCheck))
@given(data=st.data())
def _marker_value(catalog, workdir, seen, data):
    name = data.draw(st.sampled_from(sorted(n for n in BASES if not n.startswith("broken_"))))
    cfg = copy.deepcopy(BASES[name])
    spec_path = data.draw(st.sampled_from(spec_paths(cfg)))
    spec = cfg
    for k in spec_path:
        spec = spec[k]
    field = data.draw(st.sampled_from(SPEC_FIELDS))
    spec[field] = "MARKER-VALUE"
    text = json.dumps(cfg, indent=data.draw(st.sampled_from([1, 2, 4])))
    path = workdir / "marker.json"
    path.write_text(text)
    marker_line = next(i for i, line in enumerate(text.splitlines(), 1) if "MARKER-VALUE" in line)
    check_one(path, text.encode(), catalog, seen)
    for g in schemes_from_config(path, catalog):
        first = g.error.split(": ", 2)[2] if g.error else ""
        if first.startswith(f"{spec_path[-1]}.{field}: \"MARKER-VALUE\""):
            assert g.line == marker_line, (g.error, marker_line)
            seen["lines_checked"] += 1


# --- JsonLines against json.dumps's own layout ------------------------------------------------

def test_json_lines_match_the_dumped_layout():
    seen = collections.Counter()
    _json_lines(seen)
    ran_its_share(SHARES, "test_json_lines_match_the_dumped_layout", seen)


@settings(derandomize=True, database=None, deadline=None,
          max_examples=SHARES["test_json_lines_match_the_dumped_layout"].cases)
@given(value=json_values, indent=st.sampled_from([1, 3]))
def _json_lines(seen, value, indent):
    from registry.configs.json_lines import read_json_text

    text = json.dumps(value, indent=indent)
    data, lines = read_json_text(text)
    assert data == value
    want: dict = {}
    dumped_layout(value, 1, (), want)
    assert {p: lines.line(p) for p in want} == want
    seen["cases"] += 1
    seen["lines_checked"] += len(want)


# --- a subset through the command line and through quantize_model_from_config ------------------

@pytest.mark.parametrize("seed", range(SHARES["test_cli_and_quantize_subset"].runs))
def test_cli_and_quantize_subset(catalog, workdir, seed):
    rng = random.Random(777 + seed)
    path = workdir / f"cli_{seed}.json"
    shown = display_path(path)
    seen = collections.Counter()
    for i in range(SHARES["test_cli_and_quantize_subset"].cases):
        cfg = copy.deepcopy(BASES[rng.choice(sorted(BASES))])
        for _ in range(rng.choice([0, 1, 2])):
            mutate_dict(cfg, rng)
        raw = json.dumps(cfg).encode()
        if rng.random() < 0.3:
            raw, _, _ = mutate_text(raw.decode(), rng)
        path.write_bytes(raw)
        check_one(path, raw, catalog, seen)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["resolve", "--from-config", str(path), "--platform", "cpu"]
                      + (["--json"] if i % 3 == 0 else []))
        assert rc in (0, 1, 2)
        assert "Traceback" not in err.getvalue() + out.getvalue()
        for line in err.getvalue().splitlines():
            assert line.startswith(f"registry: error: {shown}:"), line[:300]
        for line in out.getvalue().splitlines():
            if line.startswith("error: "):
                assert line.startswith(f"error: {shown}:"), line[:300]
        if i % 4 == 0:  # quantize a tiny model the config targets by class name / global
            model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 64)).requires_grad_(False)
            try:
                report = quantize_model_from_config(model, path, catalog=catalog)
            except ValueError as e:  # ConfigError included
                assert "\n" not in str(e) and str(e), str(e)[:300]
                seen["models_refused"] += 1
            else:
                assert report.quantized
                seen["models_quantized"] += 1
                model(torch.randn(2, 64))
    ran_its_share(SHARES, "test_cli_and_quantize_subset", seen)


def test_tally_reaches_ten_thousand():
    """The declared shares promise >= 10,000 configs (the brief's number) and cover every fuzz
    test; each test asserts its own share when it runs, so this one reads no other's state."""
    total = check_declaration(SHARES, PROMISE, globals(), "test_tally_reaches_ten_thousand")
    print("config fuzz: declared cases and minimums", total)
