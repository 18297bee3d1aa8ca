"""MXGroupedExperts under torch.compile: one graph (fullgraph=True) holding the routing's torch
ops and the `ocp_mx::grouped_experts` custom op (kernels/moe_op.py), outputs bit-equal to the
eager layer's: the reference kernel, and the Triton kernel (on a CPU in the interpreter; on a
GPU machine every tensor here is on the GPU, where the Triton kernel runs).

The op's body is the layer's eager path, so what traced code cannot check without a host sync
(the range of expert ids given to forward_routed) is checked there, on the real values."""
from __future__ import annotations

import copy
import gc

import pytest
import torch

from kernels import moe_op
from kernels.dispatch import activation_qdq
from kernels.mx import mx_dequantize
from kernels.reference.moe import route
from kernels.op_handles import UnknownHandleError
from registry import MXGroupedExperts

from support.bad_tensors import one_line_error
from support.compile_recorder import Recorder

E, N, K, TOP_K = 4, 32, 64, 2
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def experts(scheme: str = "w_mxfp4_a_mxfp4", backend: str = "reference") -> MXGroupedExperts:
    gen = torch.Generator().manual_seed(1)
    return MXGroupedExperts(torch.randn(E, N, K, generator=gen).to(DEVICE), scheme,
                            backend=backend)


def tokens(t: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(t)
    return (torch.randn(t, K, generator=gen).to(DEVICE, dtype),
            torch.randn(t, E, generator=gen).to(DEVICE))


@pytest.mark.parametrize("compiler", ["eager", "aot_eager"])
@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("scheme", ["w_mxfp4", "w_mxfp4_a_mxfp4"])
def test_compiled_experts_equal_eager(scheme, backend, compiler):
    layer = experts(scheme, backend)
    x, logits = tokens(5)
    with torch.no_grad():
        want = layer(x, logits, TOP_K)
        got = torch.compile(lambda a, b: layer(a, b, TOP_K), fullgraph=True,
                            backend=compiler)(x, logits)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_one_graph_with_the_routing_and_the_op():
    layer, rec = experts(), Recorder()
    x, logits = tokens(3)
    got = torch.compile(lambda a, b: layer(a, b, TOP_K, out_dtype=torch.bfloat16),
                        fullgraph=True, backend=rec)(x, logits)
    assert got.dtype == torch.bfloat16 and torch.equal(got, layer(x, logits, TOP_K,
                                                                  out_dtype=torch.bfloat16))
    assert len(rec.graphs) == 1
    calls = rec.op_calls("ocp_mx.grouped_experts")
    assert [c.args[-2] for c in calls] == [layer._handle]  # (the handle, then out_dtype)
    assert rec.op_calls("topk")  # the routing is traced, not hidden in the op


def test_dynamic_tokens_compile_once():
    layer, rec = experts(), Recorder()
    compiled = torch.compile(lambda a, b: layer(a, b, TOP_K), fullgraph=True, backend=rec,
                             dynamic=True)
    for t in (3, 6, 11):
        x, logits = tokens(t)
        got = compiled(x, logits)
        assert got.shape == (t, N) and torch.equal(got, layer(x, logits, TOP_K))
    assert len(rec.graphs) == 1


def test_routed_ids_are_range_checked_inside_the_op():
    layer = experts()
    x, _ = tokens(3)
    ids = torch.tensor([[0, 1], [2, 3], [1, 0]], device=DEVICE)
    weights = torch.full((3, 2), 0.5, device=DEVICE)
    compiled = torch.compile(layer.forward_routed, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x, ids, weights), layer.forward_routed(x, ids, weights))
    bad = ids.clone()
    bad[1, 1] = E  # one past the last expert: only the values say so
    one_line_error(ValueError, lambda: compiled(x, bad, weights),
                   f"topk_ids hold expert {E}, outside [0, {E - 1}]")


def test_bad_out_dtype_and_unknown_handle_are_one_line():
    layer = experts()
    x, logits = tokens(2)
    compiled = torch.compile(lambda a, b: layer(a, b, TOP_K, out_dtype=torch.int8),
                             fullgraph=True, backend="eager")
    with pytest.raises(Exception, match="out_dtype torch.int8 is not float32, bfloat16 or"):
        compiled(x, logits)
    ids = torch.zeros(2, 1, dtype=torch.long, device=DEVICE)
    weights = torch.ones(2, 1, device=DEVICE)
    one_line_error(UnknownHandleError, lambda: torch.ops.ocp_mx.grouped_experts(
        x, layer.weight_data, layer.weight_scales, None, ids, weights, False, 10**9, None),
        "unknown handle 1000000000", "register_layer")


@pytest.mark.parametrize("scheme", ["w_mxfp4", "w_mxfp4_a_mxfp4"])
def test_every_kernel_gives_the_reference_gradients_eager_and_compiled(scheme):
    """The tokens (weight-only; none through an activation QDQ) and the router logits get the
    same gradients whichever kernel runs, eager or compiled — the Triton kernel's output alone
    would have no grad_fn — and they are the dequantized experts' (plain torch, the oracle)."""
    x0, logits0 = tokens(4)

    def grads(fn):
        x, logits = x0.clone().requires_grad_(True), logits0.clone().requires_grad_(True)
        out = fn(x, logits)
        out.square().sum().backward()
        return out.detach(), x.grad, logits.grad

    def close(a, b):
        return torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))

    ref = experts(scheme, "reference")
    want = grads(lambda a, b: ref(a, b, TOP_K))
    assert (want[1] is None) == (scheme != "w_mxfp4") and want[2] is not None
    for backend in ("reference", "triton"):
        layer = experts(scheme, backend)
        eager = grads(lambda a, b: layer(a, b, TOP_K))
        compiled = grads(torch.compile(lambda a, b: layer(a, b, TOP_K), fullgraph=True,
                                       backend="aot_eager"))
        for got in (eager, compiled):  # one formula: the same bits eager and compiled
            assert torch.equal(got[0], eager[0]) and torch.equal(got[2], eager[2]), backend
            assert (got[1] is None) == (want[1] is None), backend
            assert got[1] is None or torch.equal(got[1], eager[1]), backend
        # the Triton kernel's fp32 output is the reference's within fp32 rounding; so are the
        # gradients taken from it
        assert close(eager[0], want[0]) and close(eager[2], want[2]), backend
        assert eager[1] is None or close(eager[1], want[1]), backend
    w = mx_dequantize(ref.weight, torch.float32)  # [E, N, K]
    x, logits = x0.clone().requires_grad_(True), logits0.clone().requires_grad_(True)
    ids, rw = route(logits, TOP_K)
    act = x if scheme == "w_mxfp4" else activation_qdq(
        ref.contract.activation, backend="reference-qdq")(x, ref.act_scale)
    out = sum(rw[:, k, None] * torch.einsum("tc,tnc->tn", act, w[ids[:, k]])
              for k in range(TOP_K))
    out.square().sum().backward()
    assert close(want[0], out.detach()) and close(want[2], logits.grad)
    assert want[1] is None or close(want[1], x.grad)


def test_backward_computes_only_the_gradients_autograd_asks_for(monkeypatch):
    """Tokens alone, or router logits alone, requiring grad: the backward op is told so and
    skips the other gradient, and the one asked for has the bits of a run that asked for
    both."""
    layer = experts("w_mxfp4", "triton")
    x0, logits0 = tokens(4)
    seen = []
    real = moe_op.grouped_experts_reference_grads
    monkeypatch.setattr(moe_op, "grouped_experts_reference_grads",
                        lambda *a, **kw: (seen.append((kw["need_x"], kw["need_w"])),
                                          real(*a, **kw))[1])

    def grads(x_grad: bool, w_grad: bool):
        x, logits = x0.clone().requires_grad_(x_grad), logits0.clone().requires_grad_(w_grad)
        layer(x, logits, TOP_K).square().sum().backward()
        return x.grad, logits.grad

    both = grads(True, True)
    only_x, only_w = grads(True, False), grads(False, True)
    assert seen == [(True, True), (True, False), (False, True)]
    assert only_x[1] is None and torch.equal(only_x[0], both[0])
    assert only_w[0] is None and torch.equal(only_w[1], both[1])
    seen.clear()  # tokens alone through a QDQ layer: nothing to compute, the op is not called
    x = x0.clone().requires_grad_(True)
    experts("w_mxfp4_a_mxfp4", "triton")(x, logits0, TOP_K).square().sum().backward()
    assert x.grad is None and seen == []


def test_inference_calls_skip_the_op(monkeypatch):
    """No grad recorded (no_grad, or nothing requires grad): the kernel runs with no op
    dispatch, its output has no grad_fn."""
    layer = experts("w_mxfp4", "triton")
    x, logits = tokens(2)
    calls = []
    real = torch.ops.ocp_mx.grouped_experts
    monkeypatch.setattr(torch.ops.ocp_mx, "grouped_experts",
                        lambda *a: (calls.append(1), real(*a))[1], raising=False)
    with torch.no_grad():
        assert layer(x.requires_grad_(True), logits, TOP_K).grad_fn is None
    assert layer(x.detach(), logits, TOP_K).grad_fn is None and not calls
    assert layer(x, logits, TOP_K).grad_fn is not None and calls == [1]


def test_opcheck():
    layer = experts()
    x, _ = tokens(3)
    ids = torch.tensor([[0, 1], [2, 3], [1, 0]], device=DEVICE)
    weights = torch.full((3, 2), 0.5, device=DEVICE)
    for out_dtype in (None, torch.bfloat16):
        torch.library.opcheck(torch.ops.ocp_mx.grouped_experts.default,
                              (x, layer.weight_data, layer.weight_scales, layer.act_scale, ids,
                               weights, True, layer._handle, out_dtype),
                              test_utils=("test_schema", "test_faketensor"))


def test_handles_die_with_layers_and_copies_get_their_own():
    gc.collect()
    before = moe_op.live_handles()
    layer = experts()
    assert moe_op.live_handles() == before + 1
    twin = copy.deepcopy(layer)
    assert twin._handle != layer._handle
    x, logits = tokens(2)
    want = layer(x, logits, TOP_K)
    del layer
    gc.collect()
    assert moe_op.live_handles() == before + 1
    got = torch.compile(lambda a, b: twin(a, b, TOP_K), fullgraph=True, backend="eager")(
        x, logits)
    assert torch.equal(got, want)
    del twin
    torch._dynamo.reset()
    gc.collect()
    assert moe_op.live_handles() == before
