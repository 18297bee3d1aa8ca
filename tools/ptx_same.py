"""Whether a change to the Gluon wgmma kernels changes their sm_90a PTX: every compile case of
the sm_90a compile tests (the ws kernel's, with and without PDL, and the one-partition
kernel's) compiled from this tree and from another (a git revision or a directory), instruction
for instruction. Why: the device tool is often out; a refactor whose PTX is identical to a
GPU-verified tree's carries that tree's verification, and one whose PTX differs waits for a
whole-suite GPU run (docs/verification.md). Runs on the CPU (no GPU needed).

    python3 tools/ptx_same.py 83640d9            (or a directory holding another tree)
Exit 0: every case identical; 1: some differ (each named, with both line counts)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# In a fresh process whose `kernels` is the tree's (first on the path) and whose compile
# helpers are this tree's tests/support: each case's normalized PTX, as (sha1, lines).
_SCRIPT = """
import hashlib, json, sys
from support.sm90_compile import gluon_sm90, wgmma_signature
sys.path.insert(0, sys.argv[1])
from ptx_same import normalized
found = []
for ws, consts in json.loads(sys.stdin.read()):
    consts["ACT"] = tuple(consts.get("ACT", ()))
    kern, sig, attrs = wgmma_signature(consts, ws=ws)
    try:
        ptx = gluon_sm90(kern, sig, consts, attrs, consts["WARPS"]).asm["ptx"]
    except Exception as e:
        found.append(["error: " + f"{type(e).__name__}: {e}"[-300:], 0])
        continue
    lines = normalized(ptx)
    found.append([hashlib.sha1("\\n".join(lines).encode()).hexdigest(), len(lines)])
print(json.dumps(found))
"""

_SKIP = (".loc", ".file", ".section", "$L", "}", "{")


def normalized(ptx: str) -> list[str]:
    """The PTX's instructions and declarations, one a line, whitespace collapsed: comments,
    source locations, debug sections, labels and lone braces left out (they move with line
    numbers and layout, not with what the kernel does)."""
    lines, in_debug = [], False
    for raw in ptx.splitlines():
        line = re.sub(r"\s+", " ", raw.split("//")[0]).strip()
        if line.startswith(".section"):
            in_debug = ".debug" in line
        if in_debug or not line or line.startswith(_SKIP):
            continue
        lines.append(line)
    return lines


def cases(only: str = "") -> list[tuple[str, bool, dict]]:
    """(name, ws, constexprs) of every compile case: test_linear_wgmma_ws's (PDL off, and on
    where not grouped) and test_wgmma_compile's; `only`: those whose name holds it."""
    import importlib.util

    for path in (ROOT, ROOT / "tests"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    from support.sm90_compile import case_ids, wgmma_consts, ws_consts

    def test_module(name: str):
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "kernels" /
                                                      "triton" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    ws_test, one_test = test_module("test_linear_wgmma_ws"), test_module("test_wgmma_compile")
    ws_cases = list(ws_test.COMPILE_CASES) + [
        dict(c, PDL=True) for c in ws_test.COMPILE_CASES if not c.get("GROUPED")]
    found = [("ws-" + name, True, ws_consts(c))
             for name, c in zip(case_ids(ws_cases), ws_cases)]
    found += [("one-" + name, False, wgmma_consts(c))
              for name, c in zip(case_ids(one_test.COMPILE_CASES), one_test.COMPILE_CASES)]
    return [c for c in found if only in c[0]]


def tree_ptx(tree: Path, todo: list[tuple[str, bool, dict]]) -> list[list]:
    """[sha1 or "error: ...", lines] of each case compiled from `tree`'s kernels."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT / "tests")])
    run = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT / "tools")], env=env,
                         cwd=tree,  # (-c puts the working directory first on the path)
                         input=json.dumps([[ws, c] for _, ws, c in todo]), capture_output=True,
                         text=True, timeout=3600)
    if run.returncode != 0:
        raise SystemExit(f"ptx_same: compiling {tree} failed: {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def compare(other: Path, only: str = "") -> list[tuple[str, list, list]]:
    """(name, other's [sha1, lines], this tree's) of every case."""
    todo = cases(only)
    if not todo:
        raise SystemExit(f"ptx_same: no compile case's name holds {only!r}")
    return [(name, a, b) for (name, _, _), a, b in zip(todo, tree_ptx(other, todo),
                                                      tree_ptx(ROOT, todo))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", help="a git revision of this repository, or a directory holding "
                                  "another tree")
    ap.add_argument("--only", default="", help="the cases whose name holds this text")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        other, worktree = Path(args.other), None
        if not other.is_dir():
            other = worktree = Path(tmp) / "tree"
            got = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                                  str(worktree), args.other], capture_output=True, text=True)
            if got.returncode != 0:
                raise SystemExit(f"ptx_same: {args.other!r} is neither a directory nor a git "
                                 f"revision here: {got.stderr.strip()}")
        try:
            rows = compare(other, args.only)
        finally:
            if worktree is not None:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(worktree)], capture_output=True)
    identical = 0
    for name, a, b in rows:
        same = a == b and not a[0].startswith("error")  # (a case neither tree compiles: not same)
        identical += same
        errors = "".join(f"; {h}" for h, _ in (a, b) if h.startswith("error"))
        print(f"{'same' if same else 'DIFFERS':8s} {name}  ({a[1]} / {b[1]} lines{errors})")
    print(f"{identical} of {len(rows)} cases identical to {args.other}")
    return 0 if identical == len(rows) else 1

if __name__ == "__main__":
    sys.exit(main())
