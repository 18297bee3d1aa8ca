"""Eager MX linear calls that autograd records take the `ocp_mx::linear` op (kernels.linear_op):
its formula gives every kernel the same gradients. Before, a Triton kernel's output had no
grad_fn, so an input's gradient was silently missing (e.g. adapters trained on frozen MX layers
behind a residual). Inference calls still skip the op. triton-emulation beside the reference
kernel: on a CPU in the interpreter, whose output matches the reference's bit for bit; on a GPU
machine on the GPU, where the dot's summation order may move an output by a bf16 rounding step
(the gradients follow the kernel's own output, so they are compared within that step)."""
from __future__ import annotations

import pytest
import torch

from kernels.base import load_kernel
from kernels.linear_op import mx_linear, register_prepared, release
from kernels.mx import mx_dequantize
from kernels.spec.contract import QuantKey, SchemeContract

WEIGHT = QuantKey.mx("mxfp4", rounding="even", static=True)
ACT = QuantKey.mx("mxfp4", rounding="even", static=False)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit-equal in the interpreter; on a GPU within two bf16 rounding steps of the largest
    value (the kernels' fp32 sums differ in order only; a wrong gradient misses by its size)."""
    if DEVICE == "cpu":
        return torch.equal(got, want)
    return torch.allclose(got.float(), want.float(), rtol=2**-7,
                          atol=2**-7 * float(want.float().abs().max()))


@pytest.mark.parametrize("activation", [None, ACT], ids=["w4a16", "w4a4"])
def test_every_kernel_gives_the_ops_gradients(activation):
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(32, 64, generator=gen).to(DEVICE)
    x0 = torch.randn(5, 64, generator=gen).to(DEVICE, torch.bfloat16)  # (bf16: bits agree)
    bias0 = torch.randn(32, generator=gen).to(DEVICE, torch.bfloat16)
    contract = SchemeContract(weight=WEIGHT, activation=activation)
    got = {}
    for name in ("reference-emulation", "triton-emulation"):
        kernel = load_kernel(name)
        prepared = kernel.prepare(w, contract)
        handle = register_prepared(kernel, prepared)
        try:
            x = x0.clone().requires_grad_(True)
            bias = bias0.clone().requires_grad_(True)
            out = mx_linear(x, kernel, prepared, bias, handle)
            assert out.grad_fn is not None, name  # recorded: through the op
            out.square().sum().backward()
            got[name] = (out.detach(), x.grad, bias.grad)
            with torch.no_grad():  # inference: the kernel alone, no op, no grad_fn
                assert mx_linear(x, kernel, prepared, bias, handle).grad_fn is None
            assert mx_linear(x0, kernel, prepared, None, handle).grad_fn is None
        finally:
            release(handle)
    ref, tri = got["reference-emulation"], got["triton-emulation"]
    assert same(tri[0], ref[0]) and same(tri[2], ref[2])
    assert same(tri[2], (2 * tri[0]).sum(0))  # the bias: the summed output grad
    if activation is None:  # through the dequantized weight
        assert same(tri[1], ref[1])
        want = (2 * ref[0].float()) @ mx_dequantize(prepared.weight, torch.float32)
        assert torch.allclose(tri[1].float(), want, rtol=2e-2, atol=2e-2 * float(want.abs().max()))
    else:  # an activation QDQ is piecewise constant: no gradient, as in the reference QDQ
        assert tri[1] is None and ref[1] is None
