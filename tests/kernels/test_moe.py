"""MXGroupedExperts (kernels.moe; built here through registry.MXGroupedExperts, which also takes
scheme names): the reference and the grouped Triton kernel, every scheme.

Runs in Triton's CPU interpreter when there is no GPU (tests/conftest.py); shapes stay small.
What is checked, and how tight:
- for EVERY shipped scheme: the MoE reference equals an independent per-token computation
  through ReferenceEmulationLinear (one call per token and routed slot) within ORACLE_BOUND;
  the Triton kernel equals the reference within ACC_BOUND (fp32, before the final cast); and,
  for schemes with an activation key, both differ from the weight-only output of the SAME MX
  weights by at least QDQ_VISIBLE: the declared activation QDQ is applied (the regression for
  the vLLM bug where mxfp6 activation QDQ was silently skipped);
- sabotage: a dispatcher that skips the QDQ, and a Triton kernel told to skip it, are caught
  by that same check; a key the dispatcher lacks is UnknownActivationKey, never a pass-through;
- routing (renormalize both ways, against float64 formulas), empty experts, one expert for all
  tokens, repeated experts, NaN weight blocks and NaN activations, determinism, the tile table,
  one-line errors for bad inputs.
"""
from __future__ import annotations

import zlib

import pytest
import torch

from kernels import dispatch
from kernels.base import load_kernel
from kernels.dispatch import UnknownActivationKey
from registry import MXGroupedExperts
from kernels.mx import MXTensor
from kernels.reference.moe import route
from kernels.spec.contract import QuantKey, ScaleDesc, SchemeContract
from kernels.triton import moe_grouped, moe_routing
from registry.files.catalog import load_schemes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CATALOG = load_schemes()
SCHEMES = sorted(CATALOG.schemes.values(), key=lambda s: s.name)
ACT_SCHEMES = [s for s in SCHEMES if s.activation is not None]
MXFP6_ACT_SCHEMES = [s for s in ACT_SCHEMES if s.activation.format.startswith("mxfp6")]
REFERENCE_LINEAR = load_kernel("reference-emulation")
K = 64
# Reference vs the per-token ReferenceEmulationLinear oracle: the same fp32 products, but
# F.linear over one row and over a block of rows may add the K = 64 products in another order
# (~sqrt(K) * 2**-24 relative for random data, 2e-7 measured); 1e-6 is tight, while one
# misrounded QDQ element (>= 2**-8 of one product) shows >= 1e-4.
ORACLE_BOUND = 1e-6
# Triton vs reference (fp32, before the cast): the operands are exact in the dot's input type,
# the routing-weight multiply, the slot sum and the cast are the same fp32 operations in the
# same order, so only tl.dot's summation order differs: <= K * 2**-24 * sum |x||w| at worst,
# ~1e-7 for random data; 1e-5 leaves a 10x margin over the worst seen and still flags a single
# misrounded operand (>= 1e-4), as in tests/support/emulation_cases.py.
ACC_BOUND = 1e-5
# Output with vs without the activation QDQ: the coarsest activation format here (mxint8,
# 2**-7 relative steps) moves random outputs by ~1e-2; 1e-3 is 100x above ACC_BOUND.
QDQ_VISIBLE = 1e-3


def seed_of(*parts: object) -> int:
    return zlib.crc32(" ".join(map(str, parts)).encode())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300))


def make_layer(scheme, weights, backend: str, x: torch.Tensor, gen: torch.Generator,
               act_scale: torch.Tensor | None = None) -> MXGroupedExperts:
    """A layer for `scheme`; a static key gets a scale that makes some activations saturate."""
    key = scheme.activation
    if key is not None and key.static and act_scale is None:
        amax = float(x.abs().float().nan_to_num(0.0).amax().clamp_min(1e-3))
        act_scale = torch.tensor(amax / 448.0 * float(torch.empty(()).uniform_(0.4, 1.5,
                                                                              generator=gen)))
    return MXGroupedExperts(weights, scheme, backend=backend, act_scale=act_scale)


def weight_only_twin(layer: MXGroupedExperts, backend: str) -> MXGroupedExperts:
    """The same MX expert weights with no activation quantization."""
    contract = SchemeContract(weight=layer.contract.weight, activation=None)
    return MXGroupedExperts(layer.weight, contract, backend=backend)


def random_routing(tokens: int, experts: int, top_k: int, gen: torch.Generator):
    """Distinct experts per token, positive weights (not normalized: any weights are valid)."""
    ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.rand(tokens, top_k, generator=gen) + 0.1
    return ids, weights


def per_token_terms(layer: MXGroupedExperts, x: torch.Tensor, ids: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
    """[T, top_k, N] fp32: w[t, k] * ReferenceEmulationLinear(x[t]) of expert ids[t, k], one
    call per token and slot (x fp32: the linear oracle's output is its fp32 accumulator)."""
    w = layer.weight
    experts = [REFERENCE_LINEAR.prepare(
        MXTensor(w.data[e], w.scales[e], w.fmt, w.rounding, w.shape[1:], w.layout),
        layer.contract, act_scale=layer.act_scale) for e in range(layer.num_experts)]
    def term(t: int, k: int) -> torch.Tensor:
        y = REFERENCE_LINEAR.apply(x[t:t + 1], experts[int(ids[t, k])])[0]
        return weights[t, k].float() * y.float()

    return torch.stack([torch.stack([term(t, k) for k in range(ids.shape[1])])
                        for t in range(x.shape[0])])


def per_token_oracle(layer: MXGroupedExperts, x: torch.Tensor, ids: torch.Tensor,
                     weights: torch.Tensor) -> torch.Tensor:
    """sum over slots k = 0, 1, ... of per_token_terms, in fp32."""
    terms = per_token_terms(layer, x, ids, weights)
    out = terms[:, 0].clone()
    for k in range(1, terms.shape[1]):
        out = out + terms[:, k]
    return out


def check_qdq_applied(layer: MXGroupedExperts, x, ids, weights, oracle: torch.Tensor) -> None:
    """THE regression check: the layer's fp32 output equals the oracle (reference: within
    ORACLE_BOUND; triton: within ORACLE_BOUND + ACC_BOUND) and, with an activation key, is
    farther than QDQ_VISIBLE from the weight-only output of the same weights."""
    got = layer.forward_routed(x, ids, weights, out_dtype=torch.float32)
    bound = ORACLE_BOUND if layer.backend == "reference" else ORACLE_BOUND + ACC_BOUND
    err = rel_err(got, oracle)
    assert err <= bound, f"{layer.backend} {layer.contract}: {err:.3g} from the oracle"
    if layer.contract.activation is not None:
        plain = weight_only_twin(layer, layer.backend).forward_routed(
            x, ids, weights, out_dtype=torch.float32)
        gap = rel_err(got, plain)
        assert gap >= QDQ_VISIBLE, (f"{layer.backend} {layer.contract}: output is within "
                                    f"{gap:.3g} of the weight-only output: activation QDQ "
                                    "not applied")


# --------------------------------------------------------------------------- every scheme
GRID = [(t, e, k, n) for t in (1, 5, 13) for e in (2, 4) for k in (1, 2) for n in (16, 32)]


def case_of(scheme) -> tuple[int, int, int, int]:
    """(tokens, experts, top_k, N) of a scheme: the schemes walk the grid with a stride that
    is prime to its length, so together they cover every value of every axis."""
    return GRID[(7 * SCHEMES.index(scheme) + 3) % len(GRID)]


def half_dtype_of(scheme) -> torch.dtype:
    return (torch.bfloat16, torch.float16)[SCHEMES.index(scheme) % 2]


def test_the_scheme_cases_cover_the_grid() -> None:
    cases = [case_of(s) for s in SCHEMES]
    for axis, values in enumerate(((1, 5, 13), (2, 4), (1, 2), (16, 32))):
        assert {c[axis] for c in cases} == set(values)
    assert {half_dtype_of(s) for s in SCHEMES} == {torch.bfloat16, torch.float16}
    # the sabotage tests re-enact the bug on both mxfp6 activation formats
    assert {s.activation.format for s in MXFP6_ACT_SCHEMES} == {"mxfp6_e2m3", "mxfp6_e3m2"}
    assert len(SCHEMES) > len(ACT_SCHEMES) > 0  # weight-only schemes are in the loop too


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
def test_every_scheme(scheme) -> None:
    gen = torch.Generator().manual_seed(seed_of(scheme.name))
    tokens, experts, top_k, n = case_of(scheme)
    x = torch.randn(tokens, K, generator=gen).to(DEVICE)
    w = (torch.randn(experts, n, K, generator=gen) * 0.1).to(DEVICE)
    ids, weights = random_routing(tokens, experts, top_k, gen)
    ref = make_layer(scheme, w, "reference", x, gen)
    tri = MXGroupedExperts(ref.weight, scheme, backend="triton", act_scale=ref.act_scale)
    oracle = per_token_oracle(ref, x, ids, weights)
    check_qdq_applied(ref, x, ids, weights, oracle)
    check_qdq_applied(tri, x, ids, weights, oracle)
    want = ref.forward_routed(x, ids, weights, out_dtype=torch.float32)
    got = tri.forward_routed(x, ids, weights, out_dtype=torch.float32)
    assert rel_err(got, want) <= ACC_BOUND, f"T={tokens} E={experts} k={top_k} N={n}"


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
def test_every_scheme_half_inputs(scheme) -> None:
    """bf16 / fp16 activations (QDQ in x's dtype): Triton == reference on the fp32 result, the
    default output is that result cast once, and the reference stays within the rounding of
    the per-token oracle's x-dtype expert outputs (u = 2**-8 bf16, 2**-11 fp16, per slot)."""
    gen = torch.Generator().manual_seed(seed_of(scheme.name, "half"))
    dtype = half_dtype_of(scheme)
    tokens, experts, n, top_k = (5, 13)[SCHEMES.index(scheme) // 2 % 2], 4, 32, 2
    x = torch.randn(tokens, K, generator=gen).to(dtype).to(DEVICE)
    w = (torch.randn(experts, n, K, generator=gen) * 0.1).to(DEVICE)
    logits = torch.randn(tokens, experts, generator=gen).to(dtype).to(DEVICE)
    ref = make_layer(scheme, w, "reference", x, gen)
    tri = MXGroupedExperts(ref.weight, scheme, backend="triton", act_scale=ref.act_scale)
    want = ref(x, logits, top_k, out_dtype=torch.float32)
    got = tri(x, logits, top_k, out_dtype=torch.float32)
    assert rel_err(got, want) <= ACC_BOUND, f"{dtype}: {rel_err(got, want):.3g}"
    for layer, acc in ((ref, want), (tri, got)):
        out = layer(x, logits, top_k)
        assert out.dtype == dtype and torch.equal(out, acc.to(dtype)), layer.backend
    # the oracle rounds each expert output to x's dtype (ReferenceEmulationLinear's output),
    # the MoE keeps fp32: at most u * |w_k y_k| per slot apart (+ fp32 summation order)
    ids, weights = route(logits, top_k)
    terms = per_token_terms(ref, x, ids, weights)
    oracle = terms[:, 0] + terms[:, 1]
    mag = terms.abs().sum(1)
    u = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    slack = (want - oracle).abs() - (u * mag + ACC_BOUND * mag.max())
    assert (slack <= 0).all(), f"{dtype}: exceeds the rounding bound by {float(slack.max()):.3g}"


@pytest.mark.parametrize("fmt,layout", [("mxfp6_e3m2", "packed"), ("mxfp6_e2m3", "packed"),
                                        ("mxfp4", "unpacked")])
def test_non_default_weight_layouts(fmt: str, layout: str) -> None:
    """The kernel reads every storage layout of the stacked codes (fp6 4-in-3 words too)."""
    gen = torch.Generator().manual_seed(seed_of(fmt, layout))
    contract = SchemeContract(weight=QuantKey.mx(fmt, rounding="even", static=True),
                              activation=QuantKey.mx("mxfp6_e2m3", rounding="rceil",
                                                     static=False))
    x = torch.randn(13, K, generator=gen).to(DEVICE)
    w = (torch.randn(4, 16, K, generator=gen) * 0.1).to(DEVICE)
    ids, weights = random_routing(13, 4, 2, gen)
    ref = MXGroupedExperts(w, contract, backend="reference", layout=layout)
    assert ref.weight.layout == layout
    tri = MXGroupedExperts(ref.weight, contract, backend="triton")
    oracle = per_token_oracle(ref, x, ids, weights)
    check_qdq_applied(ref, x, ids, weights, oracle)
    check_qdq_applied(tri, x, ids, weights, oracle)


# --------------------------------------------------------------------------- sabotage
@pytest.mark.parametrize("scheme", MXFP6_ACT_SCHEMES, ids=lambda s: s.name)
def test_a_dispatcher_that_skips_qdq_is_caught(scheme, monkeypatch) -> None:
    """The vLLM bug, re-enacted: the dispatcher's entry for the mxfp6 key passes x through.
    The reference (which calls the dispatcher) then matches the weight-only output, and the
    regression check must fail."""
    gen = torch.Generator().manual_seed(seed_of(scheme.name, "sabotage"))
    x = torch.randn(13, K, generator=gen)
    w = torch.randn(4, 32, K, generator=gen) * 0.1
    ids, weights = random_routing(13, 4, 2, gen)
    layer = make_layer(scheme, w, "reference", x, gen)
    oracle = per_token_oracle(layer, x, ids, weights)
    check_qdq_applied(layer, x, ids, weights, oracle)  # honest dispatcher: passes
    monkeypatch.setitem(dispatch._TABLE, scheme.activation, lambda x, s, key, backend: x)
    with pytest.raises(AssertionError, match="activation QDQ not applied"):
        check_qdq_applied(layer, x, ids, weights, per_token_oracle(layer, x, ids, weights))


@pytest.mark.parametrize("scheme", MXFP6_ACT_SCHEMES, ids=lambda s: s.name)
def test_a_triton_kernel_that_skips_qdq_is_caught(scheme, monkeypatch) -> None:
    """The Triton kernel told to skip the activation QDQ (ACT_MODE none) must fail the check."""
    gen = torch.Generator().manual_seed(seed_of(scheme.name, "sabotage-triton"))
    x = torch.randn(5, K, generator=gen).to(DEVICE)
    w = (torch.randn(2, 16, K, generator=gen) * 0.1).to(DEVICE)
    ids, weights = random_routing(5, 2, 1, gen)
    real = moe_grouped.prepare_tensors

    def skipping(prepared):
        out = real(prepared)
        out["consts"]["ACT_MODE"] = 0  # ACT_NONE
        return out

    monkeypatch.setattr(moe_grouped, "prepare_tensors", skipping)
    layer = make_layer(scheme, w, "triton", x, gen)
    with pytest.raises(AssertionError):
        check_qdq_applied(layer, x, ids, weights, per_token_oracle(layer, x, ids, weights))


def test_a_key_the_dispatcher_lacks_is_an_error(monkeypatch) -> None:
    unknown = QuantKey(format="fp8_e4m3", scale=ScaleDesc(format="fp32", granularity="token",
                                                          static=False))
    contract = SchemeContract(weight=QuantKey.mx("mxfp4", rounding="even", static=True),
                              activation=unknown)
    w = torch.randn(2, 16, K)
    for backend in ("reference", "triton"):
        with pytest.raises(UnknownActivationKey, match="no entry for fp8_e4m3:fp32/token"):
            MXGroupedExperts(w, contract, backend=backend)
    # a shipped key removed from the dispatcher: an error at build time, never a pass-through
    scheme = MXFP6_ACT_SCHEMES[0]
    monkeypatch.delitem(dispatch._TABLE, scheme.activation)
    with pytest.raises(UnknownActivationKey, match=str(scheme.activation)):
        MXGroupedExperts(w, scheme, backend="reference")


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
