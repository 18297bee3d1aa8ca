"""The MoE layer tests' shared pieces (tests/kernels/test_moe*.py): the bounds, a layer for a
scheme, random routing, and the per-token oracle through ReferenceEmulationLinear (one call per
token and routed slot) with THE regression check that the declared activation QDQ is applied."""
from __future__ import annotations

import zlib

import torch

from kernels.base import load_kernel
from kernels.mx import MXTensor
from kernels.spec.contract import SchemeContract
from registry import MXGroupedExperts

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
