"""The one-partition wgmma kernel (kernels/triton/linear_wgmma.py) compiled for sm_90a on the CPU
(CI: this triton's Gluon and ptxas, no GPU needed), in one fresh process: every format (mxint8
too), MoE, K tails, tile sizes, split-K and gated part (two warpgroups, the fused activation
QDQ, K halves, rep 2, x by TMA) compiles with no decoded weight value through shared memory.
"""
from __future__ import annotations

import pytest

from support.sm90_compile import compile_cases, wgmma_consts


COMPILE_CASES = [  # every format, grouped (MoE), K tails, block_m 8..128, split-K on / off
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=1),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=3, GROUPED=True, HAS_BIAS=False, K_TAIL=True),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, GROUPED=True, HAS_BIAS=False, FMT=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=1, STAGES=3, WARPS=8),  # two warpgroups (gated)
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, FMT=2, K_TAIL=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, WARPS=8, GROUPED=True, HAS_BIAS=False),
    # W*A*: the activation QDQ in the kernel (fuse_act, gated): three formats, every rounding
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even"),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, ACT="mxint8:rceil"),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, K_TAIL=True, ACT="mxfp8_e4m3:floor"),
    # ... on the rows a plan can have (ACT_ROWS, gated): one (the swizzled tile's row 0 seen
    # unswizzled) at every K tile width, x by TMA too; 16 of 32 (a slice of whole swizzle rows)
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even", ACT_ROWS=1),
    dict(BLOCK_M=8, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=2, ACT="mxfp6_e3m2:even", ACT_ROWS=1),
    dict(BLOCK_M=16, BLOCK_K=512, SPLIT=1, STAGES=3, ACT="mxint8:floor", ACT_ROWS=1,
         X_TMA=True),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3, ACT="mxfp8_e4m3:rceil", ACT_ROWS=16),
    # mxfp8 e4m3 weights (FMT 3, gated): A and B words; grouped, K tails, two warpgroups
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, FMT=3, K_TAIL=True, WARPS=8),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=3, GROUPED=True, HAS_BIAS=False),
    # mxint8 weights (FMT 4, gated): fp8's words, its own decode; K tails, two warpgroups,
    # halves, rep 2, x by TMA
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=4),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, FMT=4, K_TAIL=True, WARPS=8),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, FMT=4, SUB_K=2, REP=2, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=4, GROUPED=True, HAS_BIAS=False),
    # K tiles in halves (sub_k 2, gated): every format, one and two warpgroups, grouped
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, SUB_K=2),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=1, SUB_K=2, K_TAIL=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=2, FMT=2, WARPS=8, SUB_K=2),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, FMT=3, SUB_K=2),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=2, WARPS=8, GROUPED=True, HAS_BIAS=False,
         SUB_K=2),
    # two 64-row blocks a warpgroup (rep 2, gated): every format, split-K, grouped, K halves
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, REP=2, FMT=2, K_TAIL=True),
    dict(BLOCK_M=32, BLOCK_K=256, SPLIT=2, STAGES=3, REP=2, FMT=3, SUB_K=2),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=3, REP=2, FMT=1, GROUPED=True,
         HAS_BIAS=False),
    # the x tile by TMA (tma_x, gated): every format, K tails, two warpgroups, grouped, the
    # fused QDQ, K halves, rep 2
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=4, FMT=2, K_TAIL=True, WARPS=8, X_TMA=True),
    dict(BLOCK_M=16, BLOCK_K=256, SPLIT=2, STAGES=2, FMT=3, SUB_K=2, X_TMA=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=1, GROUPED=True, HAS_BIAS=False,
         X_TMA=True),
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=3, ACT="mxfp4:even", X_TMA=True),
    # K tiles in pairs, each wgmma in flight under the next decode (OVERLAP, gated): every
    # weight format, K tails, two warpgroups, x by TMA, grouped
    dict(BLOCK_M=8, BLOCK_K=256, SPLIT=2, STAGES=4, OVERLAP=True),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=2, K_TAIL=True, OVERLAP=True),
    dict(BLOCK_M=64, BLOCK_K=128, SPLIT=1, STAGES=3, FMT=3, WARPS=8, OVERLAP=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=2, STAGES=3, FMT=4, X_TMA=True, OVERLAP=True),
    dict(BLOCK_M=16, BLOCK_K=128, SPLIT=2, STAGES=4, FMT=1, GROUPED=True, HAS_BIAS=False,
         OVERLAP=True),
    dict(BLOCK_M=128, BLOCK_K=128, SPLIT=4, STAGES=2, REP=2, X_TMA=True)]


_COMPILE = """
import json, re, sys
from support.sm90_compile import gluon_sm90, wgmma_signature
found = []
for consts in json.loads(sys.stdin.read()):
    consts["ACT"] = tuple(consts["ACT"])
    kern, sig, attrs = wgmma_signature(consts)
    try:
        ptx = gluon_sm90(kern, sig, consts, attrs, consts["WARPS"]).asm["ptx"]
    except Exception as e:  # reported by the case's own test
        found.append({"error": f"{type(e).__name__}: {e}"[-3000:]})
        continue
    found.append({p: len(re.findall(p, ptx)) for p in (
        r"wgmma\\.mma_async", r"st\\.shared", r"wgmma\\.wait_group\\.sync\\.aligned 0",
        r"shfl\\.sync", r"cvt\\.rn\\.bf16", r"cp\\.async\\.bulk\\.tensor",
        r"cp\\.async\\.cg\\.shared\\.global", r"mbarrier\\.try_wait", r"redux\\.sync")})
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def compiled_cases() -> list:
    """Every COMPILE_CASES entry compiled in ONE fresh process (triton imported once: ~3 s a
    case saved). Fresh: the interpreter, once it has run a kernel in this process, has patched
    triton.language."""
    cases = [wgmma_consts(c) for c in COMPILE_CASES]
    assert all(bool(c["ACT"]) == bool(case.get("ACT")) for c, case in zip(cases, COMPILE_CASES))
    return compile_cases(_COMPILE, cases)


@pytest.mark.parametrize("index", range(len(COMPILE_CASES)), ids=[
    "-".join(f"{k}{v}" for k, v in c.items()) for c in COMPILE_CASES])
def test_the_kernel_compiles_for_sm90_without_a_shared_round_trip(index: int,
                                                                  compiled_cases: list) -> None:
    """Compiled here for sm_90a (no GPU needed; this triton's Gluon and ptxas) with the launch's
    specialization (16-byte aligned pointers; K and the row strides multiples of 16, as the
    host guarantees): the decoders' layouts convert with no data movement (assert_trivial,
    checked at compile time), one wgmma per 16 of K a tile (and 64-row block: REP), and no
    decoded value goes through shared memory (at most the split-K flag's one st.shared)."""
    case, found = COMPILE_CASES[index], compiled_cases[index]
    assert "error" not in found, found.get("error")
    assert found[r"wgmma\.mma_async"] == \
        case["BLOCK_K"] // 16 * case.get("REP", 1) * (2 if case.get("OVERLAP") else 1)
    if case.get("ACT"):  # the x tile's QDQ: block maxima across lanes (shuffles, or one
        # redux.sync where a block spans 16-32 lanes), an RNE cast, shared stores
        assert found[r"shfl\.sync"] + found[r"redux\.sync"] > 0 and found[r"cvt\.rn\.bf16"] > 0
    else:  # no decoded weight value through shared memory
        assert found[r"st\.shared"] <= 1
    assert found[r"wgmma\.wait_group\.sync\.aligned 0"] >= 1
    # X_TMA: x by TMA copies waited on through mbarriers; else no TMA at all
    assert (found[r"cp\.async\.bulk\.tensor"] > 0) == bool(case.get("X_TMA"))
    assert (found[r"mbarrier\.try_wait"] > 0) == bool(case.get("X_TMA"))


_X_SMEM_MAP = """
import json, sys
from triton._C.libtriton import gluon_ir, ir
from kernels.triton.wgmma_tiles import X_SMEM
ctx = ir.context()
ir.load_dialects(ctx)
builder = gluon_ir.GluonOpBuilder(ctx)
found = []
for rows, cols in json.loads(sys.stdin.read()):
    bases = builder.to_linear_layout(X_SMEM._to_ir(builder), [rows, cols]).offset_bases
    row0 = {}
    for offset in range(rows * cols):
        r = c = 0
        for bit, (br, bc) in enumerate(bases):
            if offset >> bit & 1:
                r, c = r ^ br, c ^ bc
        if r == 0:
            row0[c] = offset
    found.append([row0.get(c, -1) for c in range(cols)])
print(json.dumps(found))
"""


def test_row_0_of_the_x_tile_is_unswizzled() -> None:
    """The fused QDQ of one row (wgmma_tiles._qdq_rows_view) reads and writes row 0 of the
    128-byte-swizzled x tile as [block_k / 64, 64] unswizzled: element (0, c) at offset
    (c // 64) * block_m * 64 + c % 64, by X_SMEM's own address map (this triton's linear
    layout of it; the swizzle is the wgmma operand format, the same in every version)."""
    import triton
    if tuple(int(v) for v in triton.__version__.split(".")[:2]) < (3, 9):
        pytest.skip(f"triton {triton.__version__}'s builder aborts on a shared layout's linear "
                    "layout (3.6: an LLVM assertion); CPU CI's 3.9 checks the map, the GPU "
                    "tests the bits through it")
    shapes = [(r, c) for r in (8, 16, 32, 64, 128) for c in (128, 256, 512)]
    for (rows, cols), row0 in zip(shapes, compile_cases(_X_SMEM_MAP, shapes)):
        assert row0 == [(c // 64) * rows * 64 + c % 64 for c in range(cols)], (rows, cols)


_HAZARDS = """
import json, os, subprocess, sys, tempfile
from triton import knobs
import support
from support.sm90_compile import gluon_sm90, wgmma_signature
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(support.__file__)), "..", "tools"))
from sass_loops import wgmma_a_hazards
found = []
for consts in json.loads(sys.stdin.read()):
    consts["ACT"] = tuple(consts["ACT"])
    kern, sig, attrs = wgmma_signature(consts)
    cubin = gluon_sm90(kern, sig, consts, attrs, consts["WARPS"]).asm["cubin"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        open(path, "wb").write(cubin)
        sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-c", path], capture_output=True,
                              text=True, check=True).stdout
    found.append({"hazards": wgmma_a_hazards(sass), "hgmma": sass.count("HGMMA")})
print(json.dumps(found))
"""


def test_no_write_reaches_an_in_flight_wgmmas_registers() -> None:
    """OVERLAP's K loop in ptxas' own SASS (sm_90a, this triton): each K tile's wgmma is still
    in flight under the next tile's decode, across the back edge for the pair's second tile,
    and no instruction writes its A registers before the DEPBAR that retires it
    (tools/sass_loops.wgmma_a_hazards: a write there is the wrong-sums race of part 32). The
    kernel as shipped (every wgmma retired at once) is checked the same way."""
    cases = [c for c in COMPILE_CASES if c.get("OVERLAP")] + [COMPILE_CASES[0]]
    found = compile_cases(_HAZARDS, [wgmma_consts(c) for c in cases])
    for case, got in zip(cases, found):
        assert got["hazards"] == [], (case, got["hazards"][:3])
        assert got["hgmma"] >= case["BLOCK_K"] // 16, case
