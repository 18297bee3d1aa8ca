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


_HGMMA_A = re.compile(r"HGMMA\S*\s+R\d+,\s+R(\d+),")  # a wgmma with its A operand in registers
_DEST = re.compile(r"^\s*(?:/\*[0-9a-f]{4,}\*/)\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s+R(\d+)\b")
_DEPBAR = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x(\d+)")
# opcodes whose first register operand is read, not written (stores, wgmma's accumulator is
# its own: not an A register)
_NO_DEST = ("ST", "RED", "ATOM", "HGMMA", "BAR", "BRA", "WARPGROUP", "MEMBAR", "FENCE")


def _written(op: str, first: int) -> range:
    """The registers an instruction writes from its first operand: a vector load or move (.64 /
    .128, LDSM's .2 / .4 matrices) or a wide result (.WIDE) several, else one."""
    width = 4 if ".128" in op or (op.startswith("LDSM") and op.endswith(".4")) else \
        2 if ".64" in op or ".WIDE" in op or (op.startswith("LDSM") and op.endswith(".2")) \
        else 1
    return range(first, first + width)


def wgmma_a_hazards(sass: str) -> list[str]:
    """Writes to a wgmma group's A registers while the group may still be in flight, in each
    loop of `sass` walked twice (so its back edge is crossed): a group (HGMMAs up to one
    marked gsb0) is in flight from its first HGMMA's issue until a `WARPGROUP.DEPBAR.LE gsb0,
    N` leaves at most N newer ones. wgmma reads A from registers asynchronously; ptxas does
    not hold them across a loop's back edge (linear_wgmma's OVERLAP), so none may exist."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    found = []
    for i, line in enumerate(lines):
        target = _TARGET.search(line) if "BRA" in line else None
        if not target or labels.get(target.group(1), i + 1) > i:
            continue
        body = lines[labels[target.group(1)]:i + 1]
        flight: list[set[int]] = []  # groups in flight, oldest first
        group: set[int] = set()
        for turn in range(2):
            for text in body:
                a = _HGMMA_A.search(text)
                if a:
                    group |= set(range(int(a.group(1)), int(a.group(1)) + 4))
                    if "gsb0" in text:
                        flight.append(group)
                        group = set()
                    continue
                bar = _DEPBAR.search(text)
                if bar:
                    del flight[:max(0, len(flight) - int(bar.group(1)))]
                    continue
                d = _DEST.match(text)
                if d and not d.group(1).startswith(_NO_DEST):
                    busy = set().union(group, *flight)  # (a group's HGMMAs read as issued)
                    hit = set(_written(d.group(1), int(d.group(2)))) & busy
                    if hit and turn == 1:
                        found.append(f"{target.group(1)}: {text.strip()} writes "
                                     f"R{min(hit)} of a wgmma group in flight")
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
