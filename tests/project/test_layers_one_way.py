"""The house has one direction: `registry` imports `kernels`, never the other way round.

- an AST scan of every .py under kernels/ (function-local imports included) finds no import of
  the `registry` package: `import registry...`, `from registry... import`, or importlib /
  __import__ called with a literal naming it;
- the bottom vocabulary (kernels.spec) and the chooser (kernels.select) import no torch / triton;
- the old module paths (kernels.formats / declarations / kernel_table, registry.contract /
  platform / resolve / settings) still answer with the very same objects.
The look-up commands importing no torch / triton is tests/registry/cli/test_cli.py's check.
"""
from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

IMPORTERS = {"import_module", "__import__", "find_spec", "import_string"}


def _names_registry(module: str | None) -> bool:
    return module is not None and (module == "registry" or module.startswith("registry."))


def registry_imports(root: Path, base: Path) -> list[str]:
    """'path:line: statement' for each import of `registry` in the .py files under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Import):
                hit = next((a.name for a in node.names if _names_registry(a.name)), None)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                hit = node.module if _names_registry(node.module) else None
            elif isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                if name in IMPORTERS and node.args and isinstance(node.args[0], ast.Constant) \
                        and isinstance(node.args[0].value, str) \
                        and _names_registry(node.args[0].value):
                    hit = node.args[0].value
            if hit:
                found.append(f"{path.relative_to(base).as_posix()}:{node.lineno}: {hit}")
    return found


def test_nothing_under_kernels_imports_registry():
    found = registry_imports(REPO / "kernels", REPO)
    assert not found, ("kernels/ is the bottom layer and must not import registry/ (move the "
                       "shared piece into kernels/spec or kernels/select): " + "; ".join(found))


def test_the_scan_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "kernels"
    pkg.mkdir()
    (pkg / "probe.py").write_text(
        "import os\n"
        "import registry\n"
        "from registry.catalog import load_schemes\n"
        "def late():\n"
        "    import registry.contract as c\n"
        "    from registry import layers\n"
        "    return importlib.import_module('registry.resolve')\n"
        "class K:\n"
        "    def m(self):\n"
        "        return __import__('registry')\n"
        "from . import registry_like\n"
        "import registry_tools\n", encoding="utf-8")
    found = registry_imports(pkg, tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == [
        "registry", "registry.catalog", "registry.contract", "registry", "registry.resolve",
        "registry"]
    assert all(f.startswith("kernels/probe.py:") for f in found)


def _imported_by(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "; import sys, json; print(json.dumps("
                          "sorted(m for m in sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_spec_and_select_import_no_torch_triton_or_registry():
    mods = _imported_by("import kernels.spec, kernels.select.resolve, "
                        "kernels.select.declarations, kernels.select.kernel_table, "
                        "kernels.spec.contract, kernels.spec.platform, kernels.spec.env, "
                        "kernels.spec.formats")
    assert "kernels.select.resolve" in mods
    bad = [m for m in mods if m.split(".")[0] in ("torch", "triton", "registry")]
    assert bad == []


def test_the_format_table_imports_nothing_heavy():
    """kernels.spec.formats is plain data: no torch, and not even pydantic."""
    mods = _imported_by("import kernels.spec.formats")
    assert [m for m in mods if m.split(".")[0] in ("torch", "triton", "pydantic")] == []


OLD_PATHS = {  # old module -> where its names live now
    "kernels.formats": "kernels.spec.formats",
    "kernels.declarations": "kernels.select.declarations",
    "kernels.kernel_table": "kernels.select.kernel_table",
    "registry.platform": "kernels.spec.platform",
    "registry.resolve": "kernels.select.resolve",
    "registry.contract": "kernels.spec.contract",
    "registry.settings": "kernels.spec.env",
}


def _public(module) -> set[str]:
    """The names a module defines at its top level (not imported, not private)."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("old, new", sorted(OLD_PATHS.items()))
def test_old_paths_answer_with_the_same_objects(old: str, new: str):
    old_mod, new_mod = importlib.import_module(old), importlib.import_module(new)
    missing = _public(new_mod) - set(new_mod.__all__) - {"ActKey"}
    assert not missing, f"{new}.__all__ leaves out {sorted(missing)}: the old path {old} lacks them"
    for name in new_mod.__all__:
        assert getattr(old_mod, name) is getattr(new_mod, name), f"{old}.{name}"


def test_readme_python_names_still_import():
    from kernels.declarations import Family, KernelDecl  # noqa: F401 - docs/plugins.md, old path
    from kernels.kernel_table import PluginKernel  # noqa: F401
    from kernels.moe import MXGroupedExperts as KernelsExperts
    from registry import MXGroupedExperts, Scheme, load_schemes  # noqa: F401
    from registry.resolve import resolve

    assert issubclass(MXGroupedExperts, KernelsExperts)
    assert resolve(load_schemes().get("w_mxfp4"), "cpu").kernel == "dequant-weight-only"
