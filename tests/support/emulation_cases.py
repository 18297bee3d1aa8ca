"""Shared by the tests of `triton-emulation` against the reference-emulation oracle
(test_linear_emulation.py, test_emulation_strategies.py): the kernel and the oracle, the fp32
accumulator bound, seeds and ids from a case's parts, preparing a contract, the oracle's fp32
accumulator and the relative error."""
from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F

from kernels.base import PreparedWeight, load_kernel
from kernels.mx import mx_dequantize
from kernels.select.activation_keys import FP8_STATIC_TENSOR_KEY
from kernels.spec.contract import QuantKey, SchemeContract
from kernels.triton.linear_emulation import TritonEmulationLinear

# fp32 summation-order bound. Both sides add the same exact products in fp32 (the operands are
# exact in the dot's input type), only in another order; each order errs by <= K * 2**-24 * sum
# |x||w| at worst and ~sqrt(K) * 2**-24 * sum |x||w| for random data. For K <= 128 and
# zero-mean data (sum |x||w| / |sum x w| ~ sqrt(K)) that is ~1e-6; 1e-5 leaves a 10x margin,
# while one misrounded operand (>= one element quantum, 2**-8 relative or more) shows >= 1e-4.
ACC_BOUND = 1e-5
KERNEL = TritonEmulationLinear()
REFERENCE = load_kernel("reference-emulation")


def key_id(key: QuantKey | None) -> str:
    return "none" if key is None else str(key)


def seed_of(*parts: object) -> int:
    return zlib.crc32(" ".join(map(str, parts)).encode())


def prepare(kernel, weight, wkey: QuantKey, akey: QuantKey | None, gen: torch.Generator,
            sample: torch.Tensor | None = None) -> PreparedWeight:
    """Prepare for (wkey, akey); a static fp8 key gets a scale that makes some values saturate."""
    contract = SchemeContract(weight=wkey, activation=akey)
    if akey != FP8_STATIC_TENSOR_KEY:
        return kernel.prepare(weight, contract)
    amax = float(sample.abs().float().amax()) if sample is not None else 4.0
    scale = amax / 448.0 * float(torch.empty(()).uniform_(0.4, 1.5, generator=gen))
    return kernel.prepare(weight, contract, act_scale=scale)


def reference_fp32(x: torch.Tensor, prepared: PreparedWeight, bias: torch.Tensor | None):
    """ReferenceEmulationLinear.apply before its final cast: the fp32 accumulator."""
    xq = REFERENCE.qdq_activation(x, prepared, backend="reference")
    w = mx_dequantize(prepared.weight, torch.float32, backend="reference")
    return F.linear(xq.float(), w, None if bias is None else bias.float())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-300))
