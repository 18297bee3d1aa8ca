"""MXGroupedExperts under torch.compile: one graph (fullgraph=True) holding the routing's torch
ops and the `ocp_mx::grouped_experts` custom op (kernels/moe_op.py), outputs bit-equal to the
eager layer's, on CPU: the reference kernel, and the Triton kernel in the interpreter.

The op's body is the layer's eager path, so what traced code cannot check without a host sync
(the range of expert ids given to forward_routed) is checked there, on the real values."""
from __future__ import annotations

import copy
import gc

import pytest
import torch

from kernels import moe_op
from kernels.op_handles import UnknownHandleError
from registry import MXGroupedExperts

from support.bad_tensors import one_line_error
from support.compile_recorder import Recorder

E, N, K, TOP_K = 4, 32, 64, 2


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def experts(scheme: str = "w_mxfp4_a_mxfp4", backend: str = "reference") -> MXGroupedExperts:
    gen = torch.Generator().manual_seed(1)
    return MXGroupedExperts(torch.randn(E, N, K, generator=gen), scheme, backend=backend)


def tokens(t: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(t)
    return torch.randn(t, K, generator=gen).to(dtype), torch.randn(t, E, generator=gen)


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
    ids = torch.tensor([[0, 1], [2, 3], [1, 0]])
    weights = torch.full((3, 2), 0.5)
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
    ids, weights = torch.zeros(2, 1, dtype=torch.long), torch.ones(2, 1)
    one_line_error(UnknownHandleError, lambda: torch.ops.ocp_mx.grouped_experts(
        x, layer.weight_data, layer.weight_scales, None, ids, weights, False, 10**9, None),
        "unknown handle 1000000000", "register_layer")


def test_a_backward_through_the_compiled_op_raises():
    """No autograd formula is registered: training through the compiled experts fails loudly
    (torch's error), never with a silent missing gradient."""
    layer = experts("w_mxfp4")
    x, logits = tokens(2)
    x.requires_grad_(True)
    compiled = torch.compile(lambda a, b: layer(a, b, TOP_K), fullgraph=True,
                             backend="aot_eager")
    with pytest.raises(Exception, match="no autograd formula was registered"):
        compiled(x, logits).sum().backward()


def test_opcheck():
    layer = experts()
    x, _ = tokens(3)
    ids, weights = torch.tensor([[0, 1], [2, 3], [1, 0]]), torch.full((3, 2), 0.5)
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
