"""Triton kernels: MX quantize / dequantize / fused QDQ (mx_quant) and their @triton.jit
element helpers (mx_codec), bit-exact with kernels.reference.mx.

Importing this package imports triton; set TRITON_INTERPRET=1 before it to run on the CPU.
"""
from kernels.triton.mx_quant import dequantize, qdq, quantize

__all__ = ["quantize", "dequantize", "qdq"]
