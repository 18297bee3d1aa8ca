"""The MoE host steps as kernels (kernels/triton/moe_routing.py): the one-launch sort + tile
table against its torch twin, and the one-launch slot combine against kernels.reference.moe's
combine_slots, bit for bit (in the interpreter on the CPU, compiled on a GPU)."""
from __future__ import annotations

import pytest
import torch

from kernels.reference.moe import combine_slots
from kernels.triton import moe_routing

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def routing(tokens: int, experts: int, top_k: int, gen: torch.Generator, case: str):
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    if case == "one hot expert":  # expert 1 takes a slot of every token, others empty
        ids[:, 0] = 1
        ids[:, 1:] = torch.where(ids[:, 1:] == 1, 0, ids[:, 1:])
    elif case == "skewed":  # experts past the first few unused
        ids = ids % min(3, experts) if top_k == 1 else ids
    weights = torch.rand(tokens, top_k, generator=gen)
    return ids, weights


# (tokens, experts, top_k, block_m): T = 1 decode, a padded E (3, 384), E = 1, rows past a
# chunk of the kernel's one-hot (4096 // E_PAD rows), block_m past the rows, more chunks than
# the scan's one-hot holds (E = 384: 16 rows a chunk, 6000 rows -> 375 chunks)
CASES = [(1, 8, 2, 8), (16, 8, 2, 16), (37, 64, 6, 8), (5, 1, 1, 16), (300, 32, 4, 64),
         (3, 384, 8, 8), (200, 3, 2, 128), (700, 8, 1, 16), (750, 384, 8, 16)]


@pytest.mark.parametrize("programs", ["one", "a chunk each"])
@pytest.mark.parametrize("tokens,experts,top_k,block_m", CASES)
@pytest.mark.parametrize("case", ["random", "one hot expert", "skewed"])
def test_sort_rows_matches_the_torch_twin(tokens: int, experts: int, top_k: int, block_m: int,
                                          case: str, programs: str, monkeypatch) -> None:
    """Both ways of the sort: one program over every chunk of rows, or (past
    ONE_PROGRAM_CHUNKS) a program a chunk with the scan over chunks in between."""
    if case == "one hot expert" and (experts < 2 or top_k == experts):
        pytest.skip("needs an expert left out")
    monkeypatch.setattr(moe_routing, "ONE_PROGRAM_CHUNKS", 10**9 if programs == "one" else 0)
    gen = torch.Generator().manual_seed(tokens * 1000 + experts * 10 + top_k + len(case))
    ids, weights = routing(tokens, experts, top_k, gen, case)
    for id_dtype, w_dtype in ((torch.int64, torch.float32), (torch.int32, torch.bfloat16)):
        i, w = ids.to(DEVICE, id_dtype), weights.to(DEVICE, w_dtype)
        got = moe_routing.sort_rows(i, w, experts, block_m)
        want = moe_routing.sort_rows_torch(i, w, experts, block_m)
        assert got[3] == want[3]  # the table's length
        for name, a, b in zip(("src", "rw_sorted", "dest", "", "table"), got, want):
            if name:
                assert a.dtype == b.dtype and torch.equal(a, b), (name, id_dtype, a, b)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens,top_k,n", [(1, 2, 50), (7, 6, 1030), (3, 1, 16)])
def test_combine_is_combine_slots_bit_for_bit(out_dtype: torch.dtype, tokens: int, top_k: int,
                                              n: int) -> None:
    gen = torch.Generator().manual_seed(tokens * 100 + top_k * 10 + n)
    w = torch.randn(tokens, top_k, n, generator=gen) * 1000
    w[0, 0, 3] = float("nan")
    w[-1, -1, 4] = float("inf")
    w[0, :, 5] = 2.0 ** -140  # subnormal sums
    w[0, :, 6] = -0.0
    w[-1, 0, 7] = 70000.0  # past fp16's range: inf in fp16
    w = w.to(DEVICE)
    got = moe_routing.combine(w, out_dtype)
    want = combine_slots(w).to(out_dtype)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    bits = {torch.float32: torch.int32}.get(out_dtype, torch.int16)
    assert torch.equal(got[~nan].view(bits), want[~nan].view(bits))


_COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.triton import moe_routing as mr
P = {"ids_ptr": "*i64", "rw_ptr": "*fp32", "src_ptr": "*i32", "rws_ptr": "*fp32",
     "dest_ptr": "*i32", "grp_ptr": "*i32", "hist_ptr": "*i32"}
found = []
for c in json.loads(sys.stdin.read()):
    kern = getattr(mr, c.pop("kernel"))
    sig = {n: "constexpr" if n in c else P.get(n, "i32") for n in kern.arg_names}
    try:
        triton.compile(ASTSource(kern, sig, c), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=4))
        found.append({})
    except Exception as e:  # reported by the case's own test
        found.append({"error": f"{type(e).__name__}: {e}"[-3000:]})
print(json.dumps(found))
"""

COMPILE_CASES = [dict(kernel=k, **{n: v for n, v in consts.items() if n in names.split()})
                 for e, top_k in ((64, 6), (384, 8))
                 for k, names in (("_sort_rows_kernel", "TOP_K E E_PAD BLOCK_M CHUNK"),
                                  ("_counts_kernel", "E_PAD CHUNK"),
                                  ("_offsets_kernel", "E E_PAD BLOCK_M CHUNK"),
                                  ("_place_kernel", "TOP_K E E_PAD CHUNK"))
                 for consts in [dict(TOP_K=top_k, E=e, E_PAD=1 << (e - 1).bit_length(),
                                     BLOCK_M=128, CHUNK=max(16, 4096 >> (e - 1).bit_length()))]]


def test_the_sort_kernels_compile_for_sm90() -> None:
    """The interpreter runs their semantics; this compiles them (sm_90a, no GPU needed): the
    one-program sort and the three launches of the many-program one, E = 64 and a padded 384."""
    from support.sm90_compile import compile_cases

    found = compile_cases(_COMPILE, [dict(c) for c in COMPILE_CASES])
    assert [f.get("error") for f in found] == [None] * len(COMPILE_CASES)
