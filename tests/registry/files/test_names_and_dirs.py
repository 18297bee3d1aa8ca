"""Issue 12, part 2: one namespace for names and aliases, broken files and missing directories
said (never skipped), lint checks what the loader loads, and case-insensitive suggestions."""
import logging
from pathlib import Path

import pytest

from registry.files.catalog import load_schemes
from registry.cli import main
from registry.errors import AmbiguousSchemeError, BrokenSchemeError, UnknownSchemeError
from registry.files.loader import ENV_VAR

from support.paths import REPO

SHIPPED_W4A4 = REPO / "schemes" / "w_mxfp4_a_mxfp4.yaml"
WEIGHT = "{format: mxfp4, scale: {format: e8m0, block: 32, rounding: even}, static: true}"
# The repro, byte for byte: a weight-only file named like the shipped W4A4 alias.
REPRO = f"name: mxfp4\nsummary: mine\nweight: {WEIGHT}\nactivation: none\n"
STATIC_ACT = WEIGHT  # a static MX activation: refused by the loader


def _scheme(d: Path, name: str, activation: str = "none", aliases: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{name}.yaml"
    extra = f"aliases: [{aliases}]\n" if aliases else ""
    path.write_text(f"name: {name}\nsummary: a user scheme\n{extra}weight: {WEIGHT}\n"
                    f"activation: {activation}\n")
    return path


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """tmp_path as the working directory, with my/mxfp4.yaml of the issue."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    (tmp_path / "my").mkdir()
    (tmp_path / "my" / "mxfp4.yaml").write_text(REPRO)
    return tmp_path / "my"


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _names_both(message: str) -> bool:
    return f"{SHIPPED_W4A4}:3" in message and "my/mxfp4.yaml:1" in message and \
        "\n" not in message


# --- 1. a name or alias defined twice never resolves ------------------------------------------

def test_a_user_file_named_like_a_shipped_alias_is_refused_by_get(user_dir):
    catalog = load_schemes([user_dir])
    with pytest.raises(AmbiguousSchemeError) as info:
        catalog.get("mxfp4")
    assert isinstance(info.value, KeyError) and _names_both(str(info.value))
    assert "mxfp4" not in catalog
    # the finding is on the user's (later) file, naming the shipped one; none on the shipped
    assert [(f.path, f.line, f.field) for f in catalog.errors] == [("my/mxfp4.yaml", 1, "name")]
    assert f"already an alias of 'w_mxfp4_a_mxfp4' ({SHIPPED_W4A4}:3)" in \
        catalog.errors[0].message
    # the shipped scheme keeps the alias in the index and still resolves by its name
    assert catalog.aliases["mxfp4"] == "w_mxfp4_a_mxfp4" and "mxfp4" not in catalog.schemes
    assert catalog.get("w_mxfp4_a_mxfp4").contract.activation is not None


def test_a_user_alias_that_is_a_later_name_is_refused_both_ways(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _scheme(tmp_path / "a", "alpha", aliases="beta")
    _scheme(tmp_path / "b", "beta")
    catalog = load_schemes([tmp_path / "a", tmp_path / "b"], env={})
    assert [str(f) for f in catalog.errors] == [
        "b/beta.yaml:1: error: name: scheme name 'beta' is already an alias of 'alpha' "
        "(a/alpha.yaml:3); names and aliases share one namespace: rename this scheme and its "
        "file"]
    with pytest.raises(AmbiguousSchemeError, match=r"as an alias of 'alpha' in a/alpha.yaml:3 "
                                                   r"and as the scheme name in b/beta.yaml:1"):
        catalog.get("beta")
    assert catalog.get("alpha").name == "alpha"


def test_cli_resolve_refuses_the_repro(user_dir, capsys):
    rc, out, err = run(capsys, "--schemes", "my", "resolve", "mxfp4", "--platform", "cpu")
    assert rc == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2  # the finding, said once, then the refusal
    assert lines[0].startswith("my/mxfp4.yaml:1: error: name: scheme name 'mxfp4' is already")
    assert lines[1].startswith("registry: error: 'mxfp4' is defined twice") and \
        _names_both(lines[1])


def test_quantize_model_refuses_the_repro(user_dir, monkeypatch):
    torch = pytest.importorskip("torch")
    from registry.nn.quantize import quantize_model

    monkeypatch.setenv(ENV_VAR, str(user_dir))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    with pytest.raises(AmbiguousSchemeError) as info:
        quantize_model(model, "mxfp4")
    assert _names_both(str(info.value))
    assert type(model[0]) is torch.nn.Linear  # nothing was replaced


def test_grouped_experts_refuse_the_repro(user_dir, monkeypatch):
    torch = pytest.importorskip("torch")
    from registry import MXGroupedExperts

    monkeypatch.setenv(ENV_VAR, str(user_dir))
    with pytest.raises(AmbiguousSchemeError) as info:
        MXGroupedExperts(torch.randn(2, 64, 64), "mxfp4")
    assert _names_both(str(info.value))


# --- 4. broken files and missing directories are said ----------------------------------------

def test_a_name_whose_file_is_broken_names_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _scheme(tmp_path / "my", "foo", activation=STATIC_ACT, aliases="foo_w4a4")
    catalog = load_schemes([tmp_path / "my"], env={})
    for token, what in (("foo", "scheme 'foo'"), ("foo_w4a4", "alias (of 'foo') 'foo_w4a4'")):
        with pytest.raises(BrokenSchemeError) as info:
            catalog.get(token)
        assert str(info.value) == (
            f"{what} is defined in my/foo.yaml, which has errors: line 5: activation.static: "
            "static MX activation scales are not supported: an e8m0 block scale is computed "
            "from each block at run time; use `static: false`; fix it (registry lint "
            "my/foo.yaml)")


def test_a_broken_file_claiming_a_shipped_name_makes_it_refuse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _scheme(tmp_path / "my", "w_mxfp4", activation=STATIC_ACT)
    catalog = load_schemes([tmp_path / "my"], env={})
    with pytest.raises(AmbiguousSchemeError, match=r"and as the scheme name in "
                                                   r"my/w_mxfp4.yaml:1 \(a file with errors\)"):
        catalog.get("w_mxfp4")


def test_python_api_on_a_missing_directory_warns_and_names_it(tmp_path, caplog):
    typo = tmp_path / "typo"
    with caplog.at_level(logging.WARNING, logger="registry.catalog"):
        catalog = load_schemes(env={ENV_VAR: str(typo)})
    said = f"{typo}: error: scheme directory does not exist (from {ENV_VAR}); create it or " \
           "fix the path"
    assert [str(f) for f in catalog.findings] == [said]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("WARNING", said)]
    assert catalog.get("mxfp4").name == "w_mxfp4_a_mxfp4"  # the rest still loads
    with pytest.raises(UnknownSchemeError) as info:
        catalog.get("my_scheme")
    assert str(info.value).endswith(f"; note: {said}")


@pytest.mark.parametrize("argv", [["resolve", "--all", "--platform", "cpu"],
                                  ["matrix", "--platform", "cpu"], ["list"]])
def test_every_catalog_command_says_missing_dirs_and_broken_files_once(
        argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _scheme(tmp_path / "bad", "foo", activation=STATIC_ACT)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "typo"))
    _, _, err = run(capsys, "--schemes", "nope", "--schemes", "bad", *argv)
    lines = err.splitlines()
    for needle in (f"typo: error: scheme directory does not exist (from {ENV_VAR})",
                   "nope: error: scheme directory does not exist (from --schemes)",
                   "bad/foo.yaml:4: error: activation.static: static MX activation"):
        assert sum(line.startswith(needle) for line in lines) == 1, (needle, err)


# --- 3 and 6. lint checks what the loader loads -------------------------------------------------

def test_lint_dir_checks_a_symlink_to_a_file_outside_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    target = _scheme(tmp_path / "elsewhere", "foo", activation=STATIC_ACT)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "foo.yaml").symlink_to(target)
    assert "foo" not in load_schemes(["dir"], env={})  # the loader reads it (and refuses it)
    rc, out, _ = run(capsys, "lint", "dir")
    assert rc == 1
    assert out.splitlines() == [
        "dir/foo.yaml:4: error: activation.static: static MX activation scales are not "
        "supported: an e8m0 block scale is computed from each block at run time; use "
        "`static: false`"]
    rc, out, _ = run(capsys, "lint", "--json", "dir")
    assert rc == 1 and '"dir/foo.yaml"' in out


@pytest.mark.parametrize("name", ["x.yml", "x.YAML", "x.json", "x.Yaml"])
def test_lint_refuses_a_file_the_loader_would_never_read(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    good = _scheme(tmp_path, "x")  # a valid scheme: only its file name is wrong
    good.rename(tmp_path / name)
    rc, out, err = run(capsys, "lint", name)
    assert (rc, err) == (1, "")
    assert out.splitlines() == [f"{name}: error: not read: the loader only reads *.yaml files; "
                                "rename it to x.yaml"]


def test_a_scheme_dir_warns_about_any_misnamed_scheme_file(tmp_path):
    for name in ("a.YAML", "b.yml", "c.json"):
        (tmp_path / name).write_text("name: a\n")
    (tmp_path / "notes.txt").write_text("not a scheme")
    catalog = load_schemes([tmp_path], include_shipped=False)
    assert [(Path(f.path).name, f.severity, f.message) for f in catalog.findings] == [
        (name, "warning", f"not loaded: scheme files end in .yaml; rename it to {stem}.yaml")
        for name, stem in (("a.YAML", "a"), ("b.yml", "b"), ("c.json", "c"))]


# --- 10. suggestions ignore case, look-ups do not ----------------------------------------------

@pytest.mark.parametrize("typed, meant", [("MXFP4", "mxfp4"), ("W_MXFP4", "w_mxfp4"),
                                          ("Mxfp8_E4M3", "mxfp8_e4m3")])
def test_a_wrong_case_name_is_told_the_right_one(typed, meant, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.delenv(ENV_VAR, raising=False)
    rc, out, err = run(capsys, "show", typed)
    assert (rc, out) == (2, "")
    assert err == (f"registry show: error: no scheme or alias named {typed!r}; names are lower "
                   f"case: did you mean {meant}?\n")


def test_a_wrong_case_typo_still_gets_suggestions():
    with pytest.raises(UnknownSchemeError, match=r"did you mean w_mxfp4_a_mxfp4\b"):
        load_schemes(env={}).get("W_MXFP4_A_MXFP44")
