"""The instruction mix of each loop of a kernel's SASS (`nvdisasm -c`, which names branch
targets as labels): for every backward branch, the count of each opcode of the body it closes.
Offline evidence of what bounds a kernel, read without a GPU: e.g. the MXFP8 x MXFP8 ws
kernel's consumer loop (docs/benchmarks.md part 18).

    nvdisasm -c k.cubin > k.sass && python3 tools/sass_loops.py k.sass [--min 40]
(nvdisasm: triton/backends/nvidia/bin of a Triton wheel; the cubin: compiled.asm["cubin"];
instruction lines are read as tools/sass_quant.py reads them)."""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sass_quant import _INSTR  # noqa: E402

_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
_TARGET = re.compile(r"`\((\.L_x_\d+)\)")


def loops(sass: str, min_len: int = 1) -> list[tuple[str, int, dict[str, int]]]:
    """(label, instructions in the body, {opcode without modifiers: count}) of each loop: a
    branch to a label at or before it; bodies shorter than `min_len` left out."""
    ops: list[tuple[str, str]] = []  # (opcode, line)
    labels: dict[str, int] = {}
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = len(ops)
            continue
        m = _INSTR.match(line)
        if m:
            ops.append((m.group(2), line))
    found = []
    for i, (op, line) in enumerate(ops):
        target = _TARGET.search(line) if op.startswith("BRA") else None
        if target and labels.get(target.group(1), i + 1) <= i:
            body = ops[labels[target.group(1)]:i + 1]
            if len(body) >= min_len:
                hist = collections.Counter(o.split(".")[0] for o, _ in body)
                found.append((target.group(1), len(body), dict(hist.most_common())))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sass", help="nvdisasm -c output of one cubin")
    p.add_argument("--min", type=int, default=40, help="shortest loop body shown")
    args = p.parse_args(argv)
    for label, n, hist in loops(Path(args.sass).read_text(), args.min):
        print(f"{label}: {n} instructions", dict(list(hist.items())[:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
