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
- routing, edge cases, NaN blocks, construction and bad inputs: test_moe_layer_edges.py; the
  bounds and the per-token oracle: support/moe_oracle.py.
"""
from __future__ import annotations

import pytest
import torch

from kernels import dispatch
from kernels.dispatch import UnknownActivationKey
from registry import MXGroupedExperts
from kernels.reference.moe import route
from kernels.spec.contract import QuantKey, ScaleDesc, SchemeContract
from kernels.triton import moe_grouped
from registry.files.catalog import load_schemes
from support.moe_oracle import (
    ACC_BOUND, K, check_qdq_applied, make_layer, per_token_oracle, per_token_terms,
    random_routing, rel_err, seed_of,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CATALOG = load_schemes()
SCHEMES = sorted(CATALOG.schemes.values(), key=lambda s: s.name)
ACT_SCHEMES = [s for s in SCHEMES if s.activation is not None]
MXFP6_ACT_SCHEMES = [s for s in ACT_SCHEMES if s.activation.format.startswith("mxfp6")]


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
