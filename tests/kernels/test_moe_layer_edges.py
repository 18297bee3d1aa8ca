"""MXGroupedExperts (kernels.moe): routing (against float64 formulas, both renormalize modes),
empty experts, one expert for all tokens, repeated experts, no tokens, determinism, the tile
table, NaN weight blocks and NaN activations, construction from MXTensors or a name, and
one-line errors for bad inputs. Every scheme's numerics and the QDQ sabotage checks are in
test_moe.py; the per-token oracle in support/moe_oracle.py."""
from __future__ import annotations

import pytest
import torch

from registry import MXGroupedExperts
from kernels.mx import MXTensor
from kernels.reference.moe import route
from kernels.triton import moe_routing
from registry.files.catalog import load_schemes
from support.moe_oracle import (
    K, check_qdq_applied, make_layer, per_token_oracle, random_routing, seed_of,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CATALOG = load_schemes()


# --------------------------------------------------------------------------- routing
@pytest.mark.parametrize("renormalize", (True, False))
def test_route_matches_the_formula(renormalize: bool) -> None:
    gen = torch.Generator().manual_seed(seed_of("route", renormalize))
    logits = torch.randn(13, 4, generator=gen) * 3
    ids, weights = route(logits, 2, renormalize=renormalize)
    assert ids.dtype == torch.int64 and weights.dtype == torch.float32
    l64 = logits.double()
    want_ids = l64.argsort(dim=1, descending=True)[:, :2]
    assert torch.equal(ids, want_ids)
    picked = l64.gather(1, want_ids)
    if renormalize:  # softmax over the top-k logits only
        want = picked.exp() / picked.exp().sum(1, keepdim=True)
        assert torch.allclose(weights.double().sum(1), torch.ones(13, dtype=torch.float64))
    else:  # the full softmax, read at the top-k
        want = picked.exp() / l64.exp().sum(1, keepdim=True)
        assert (weights.double().sum(1) < 1).all()
    assert torch.allclose(weights.double(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ("reference", "triton"))
def test_forward_routes_then_runs_the_experts(backend: str) -> None:
    """forward(x, logits, top_k) == forward_routed(x, *route(...)), both renormalize modes,
    with leading token dims."""
    gen = torch.Generator().manual_seed(seed_of("forward", backend))
    x = torch.randn(2, 3, K, generator=gen).to(DEVICE)
    logits = torch.randn(2, 3, 4, generator=gen).to(DEVICE)
    w = (torch.randn(4, 16, K, generator=gen) * 0.1).to(DEVICE)
    for renormalize in (True, False):
        layer = MXGroupedExperts(w, "w_mxfp4_a_mxfp4", backend=backend, renormalize=renormalize)
        out = layer(x, logits, 2)
        ids, weights = route(logits.view(6, 4), 2, renormalize=renormalize)  # on x's device
        assert out.shape == (2, 3, 16)
        assert torch.equal(out, layer.forward_routed(x.view(6, K), ids, weights).view(2, 3, 16))
        assert torch.equal(out, layer.forward_routed(x, ids.view(2, 3, 2), weights.view(2, 3, 2)))


ROUTING_CASES = {
    # expert 2 and 3 get no token (and the layer has 4 M-tiles' worth of table slots to skip)
    "empty-experts": lambda t, gen: (torch.stack([torch.randperm(2, generator=gen)
                                                  for _ in range(t)]), 2),
    # all 13 tokens on expert 3: several M-tiles of one expert, three experts without tokens
    "one-expert": lambda t, gen: (torch.full((t, 1), 3), 1),
    # the same expert twice in a token's top-k: two contributions, both counted
    "repeated": lambda t, gen: (torch.randint(0, 4, (t, 1), generator=gen).repeat(1, 2), 2),
}


@pytest.mark.parametrize("case", sorted(ROUTING_CASES))
@pytest.mark.parametrize("scheme", ["w_mxfp6_e3m2_a_mxfp6_e3m2", "w_mxfp4_a_fp8", "w_mxfp4"])
def test_routing_edge_cases(case: str, scheme: str) -> None:
    gen = torch.Generator().manual_seed(seed_of(case, scheme))
    tokens = 13
    ids, top_k = ROUTING_CASES[case](tokens, gen)
    weights = torch.rand(tokens, top_k, generator=gen) + 0.1
    x = torch.randn(tokens, K, generator=gen).to(DEVICE)
    w = (torch.randn(4, 32, K, generator=gen) * 0.1).to(DEVICE)
    ref = make_layer(CATALOG.get(scheme), w, "reference", x, gen)
    tri = MXGroupedExperts(ref.weight, scheme, backend="triton", act_scale=ref.act_scale)
    oracle = per_token_oracle(ref, x, ids, weights)
    check_qdq_applied(ref, x, ids, weights, oracle)
    check_qdq_applied(tri, x, ids, weights, oracle)


def test_single_token_and_no_tokens() -> None:
    gen = torch.Generator().manual_seed(seed_of("edges"))
    w = (torch.randn(2, 16, K, generator=gen) * 0.1).to(DEVICE)
    for backend in ("reference", "triton"):
        layer = MXGroupedExperts(w, "w_mxint8_a_mxint8", backend=backend)
        x = torch.randn(1, K, generator=gen).to(DEVICE)
        ids, weights = random_routing(1, 2, 2, gen)
        check_qdq_applied(layer, x, ids, weights, per_token_oracle(layer, x, ids, weights))
        empty = layer(torch.empty(0, K, device=DEVICE), torch.empty(0, 2, device=DEVICE), 1)
        assert empty.shape == (0, 16) and empty.dtype == torch.float32


def test_triton_is_deterministic() -> None:
    gen = torch.Generator().manual_seed(seed_of("determinism"))
    x = torch.randn(13, K, generator=gen).to(DEVICE)
    logits = torch.randn(13, 4, generator=gen).to(DEVICE)
    w = torch.randn(4, 32, K, generator=gen).to(DEVICE)
    layer = MXGroupedExperts(w, "w_mxfp4_a_mxfp6_e2m3", backend="triton")
    first = layer(x, logits, 2, out_dtype=torch.float32)
    assert torch.equal(first, layer(x, logits, 2, out_dtype=torch.float32))


def test_tile_table_covers_each_expert_tile_once() -> None:
    gen = torch.Generator().manual_seed(seed_of("tiles"))
    for experts, block_m in ((4, 8), (5, 3), (1, 16)):
        rows = int(torch.randint(1, 40, (), generator=gen))
        expert_of_row = torch.sort(torch.randint(0, experts, (rows,), generator=gen)).values
        slots = -(-rows // block_m) + min(experts, rows)
        tile_e, tile_m, start, count = moe_routing.tile_table(expert_of_row, experts, block_m,
                                                               slots)
        want_count = torch.bincount(expert_of_row, minlength=experts)
        assert torch.equal(count.long(), want_count)
        assert torch.equal(start.long(), torch.cumsum(want_count, 0) - want_count)
        real = [(int(e), int(m)) for e, m in zip(tile_e, tile_m) if e < experts]
        want = [(e, m) for e in range(experts) for m in range(-(-int(want_count[e]) // block_m))]
        assert real == want and all(int(e) == experts for e in tile_e[len(real):])


# --------------------------------------------------------------------------- NaN / Inf
@pytest.mark.parametrize("scheme", ["w_mxfp4_a_mxfp4", "w_mxfp6_e2m3_a_fp8", "w_mxfp8_e4m3"])
def test_nan_blocks(scheme: str) -> None:
    """A weight scale byte 0xFF (NaN block) of expert 1, row 5: column 5 of every token routed
    to expert 1 is NaN, nothing else. A NaN in token 2's activations: its whole row is NaN."""
    gen = torch.Generator().manual_seed(seed_of("nan", scheme))
    tokens, experts, n = 13, 4, 16
    x = torch.randn(tokens, K, generator=gen).to(DEVICE)
    ids, weights = random_routing(tokens, experts, 2, gen)
    base = make_layer(CATALOG.get(scheme),
                      (torch.randn(experts, n, K, generator=gen) * 0.1).to(DEVICE), "reference",
                      x, gen)
    w = base.weight
    scales = w.scales.clone()
    scales[1, 5, 1] = 0xFF
    nan_weight = MXTensor(w.data, scales, w.fmt, w.rounding, w.shape, w.layout)
    want = torch.zeros(tokens, n, dtype=torch.bool)
    want[(ids == 1).any(1), 5] = True
    x_nan = x.clone()
    x_nan[2, 40] = float("nan")
    want_x = torch.zeros(tokens, n, dtype=torch.bool)
    want_x[2] = True
    for backend in ("reference", "triton"):
        layer = MXGroupedExperts(nan_weight, scheme, backend=backend, act_scale=base.act_scale)
        out = layer.forward_routed(x, ids, weights)
        assert torch.equal(torch.isnan(out).cpu(), want), backend
        clean = MXGroupedExperts(w, scheme, backend=backend, act_scale=base.act_scale)
        assert torch.equal(torch.isnan(clean.forward_routed(x_nan, ids, weights)).cpu(), want_x)


# --------------------------------------------------------------------------- construction
def test_built_from_expert_mxtensors_or_a_name() -> None:
    gen = torch.Generator().manual_seed(seed_of("build"))
    w = torch.randn(3, 16, K, generator=gen)
    by_name = MXGroupedExperts(w, "mxfp4", backend="reference")  # an alias
    assert by_name.contract == CATALOG.get("w_mxfp4_a_mxfp4").contract
    mx = by_name.weight
    experts = [MXTensor(mx.data[e], mx.scales[e], mx.fmt, mx.rounding, mx.shape[1:], mx.layout)
               for e in range(3)]
    from_list = MXGroupedExperts(experts, CATALOG.get("w_mxfp4_a_mxfp4"), backend="reference")
    assert torch.equal(from_list.weight_data, mx.data)
    assert torch.equal(from_list.weight_scales, mx.scales)
    assert (by_name.num_experts, by_name.out_features, by_name.in_features) == (3, 16, K)
    assert "experts=3" in repr(by_name)


def test_the_kernels_layer_takes_a_contract_and_sends_names_to_the_registry() -> None:
    """kernels.moe never reads scheme files: a contract or a Scheme works, a name is refused in
    one line that names the registry's layer, which looks names up."""
    from kernels import moe

    w = torch.randn(2, 16, K)
    scheme = CATALOG.get("w_mxfp4_a_mxfp4")
    assert moe.MXGroupedExperts(w, scheme.contract, backend="reference").contract == \
        scheme.contract
    assert moe.MXGroupedExperts(w, scheme, backend="reference").contract == scheme.contract
    assert issubclass(MXGroupedExperts, moe.MXGroupedExperts)
    one_line_error(TypeError, r"use registry\.MXGroupedExperts\(weights, 'mxfp4'\)",
                   moe.MXGroupedExperts, w, "mxfp4")
    one_line_error(TypeError, "got int", moe.MXGroupedExperts, w, 4)


def one_line_error(exc_type, match: str, fn, *args, **kwargs) -> None:
    with pytest.raises(exc_type, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_bad_inputs_get_one_line_errors() -> None:
    w = torch.randn(4, 16, K)
    layer = MXGroupedExperts(w, "w_mxfp4_a_mxfp4", backend="reference")
    x, logits = torch.randn(5, K), torch.randn(5, 4)
    contract = CATALOG.get("w_mxfp4_a_mxfp4").contract
    # construction
    one_line_error(ValueError, "K=48, not a multiple of 32", MXGroupedExperts,
                   torch.randn(4, 16, 48), contract)
    one_line_error(ValueError, "3-D", MXGroupedExperts, torch.randn(16, K), contract)
    one_line_error(ValueError, "dtype torch.int32", MXGroupedExperts,
                   torch.ones(4, 16, K, dtype=torch.int32), contract)
    one_line_error(ValueError, "unknown backend 'cuda'", MXGroupedExperts, w, contract,
                   backend="cuda")
    one_line_error(ValueError, "mxfp4/even but the contract's weight key is mxfp6_e2m3",
                   MXGroupedExperts, layer.weight, "w_mxfp6_e2m3_a_mxfp6_e2m3")
    one_line_error(ValueError, "static: pass act_scale", MXGroupedExperts, w, "w_mxfp4_a_fp8")
    one_line_error(ValueError, "takes no act_scale", MXGroupedExperts, w, contract,
                   act_scale=1.0)
    one_line_error(TypeError, "scheme must be", MXGroupedExperts, w, 4)
    # forward
    one_line_error(ValueError, "must end in in_features K=64", layer, torch.randn(5, 32),
                   logits, 2)
    one_line_error(ValueError, "dtype torch.int64", layer, x.long(), logits, 2)
    one_line_error(ValueError, "number of experts E=4", layer, x, torch.randn(5, 3), 2)
    one_line_error(ValueError, "share the token dims", layer, x, torch.randn(6, 4), 2)
    one_line_error(ValueError, r"top_k=5 must be an int in \[1, 4\]", layer, x, logits, 5)
    one_line_error(ValueError, r"top_k=0 must be", layer, x, logits, 0)
    one_line_error(ValueError, "out_dtype torch.int8", layer, x, logits, 2, out_dtype=torch.int8)
    ids, weights = route(logits, 2)
    one_line_error(ValueError, "integer expert ids", layer.forward_routed, x, ids.float(),
                   weights)
    one_line_error(ValueError, "float routing weights", layer.forward_routed, x, ids,
                   ids)
    bad = ids.clone()
    bad[0, 0] = 5  # routing is random: pin the out-of-range id the message must name
    one_line_error(ValueError, r"hold expert 5, outside \[0, 3\]", layer.forward_routed, x,
                   bad, weights)
    one_line_error(ValueError, "must be \\[5, top_k\\]", layer.forward_routed, x, ids[:3],
                   weights)
