"""Instruction mix of each loop of a kernel's SASS (nvdisasm -c output): for a loop (a backward
branch), the count of each opcode in its body. Offline evidence of what bounds a kernel: e.g.
the MXFP8 x MXFP8 ws kernel's consumer loop (docs/benchmarks.md part 18).

    nvdisasm -c k.cubin > k.sass && python3 tools/sass_loops.py k.sass
(nvdisasm: triton/backends/nvidia/bin of a Triton wheel; the cubin: compiled.asm["cubin"])."""
import collections
import re
import sys

lines = open(sys.argv[1] if len(sys.argv) > 1 else "k.sass").read().splitlines()
ins = []  # (addr, opcode, text)
labels = {}
for ln in lines:
    m = re.match(r"^\s*(\.L_x_\d+):", ln)
    if m:
        labels[m.group(1)] = len(ins)
        continue
    m = re.match(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
    if m:
        txt = m.group(2).strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", txt).split()[0]
        ins.append((int(m.group(1), 16), op, txt))
# backward branches = loops
for i, (a, op, txt) in enumerate(ins):
    if op.startswith("BRA"):
        t = re.search(r"`\((\.L_x_\d+)\)", txt)
        if t and labels.get(t.group(1), 1e9) <= i:
            body = ins[labels[t.group(1)]:i + 1]
            cnt = collections.Counter(o.split(".")[0] for _, o, _ in body)
            if len(body) > 40:
                print(f"loop {t.group(1)} at {body[0][0]:#x}: {len(body)} instructions",
                      dict(cnt.most_common(25)))
