"""Pure-torch numerics of the MX formats: the oracle every kernel is checked against.

`kernels.reference.mx` holds the backend functions (quantize / dequantize / qdq on [R, K] rows)
that the Triton kernels in `kernels.triton.mx_quant` mirror, signature for signature.
"""
from kernels.reference.mx import dequantize, qdq, quantize

__all__ = ["quantize", "dequantize", "qdq"]
