"""The plugin's kernel classes: weight-only kernels reusing the reference implementation."""
from __future__ import annotations

from kernels.reference.linear import DequantWeightOnlyLinear


class AcmeWeightOnlyLinear(DequantWeightOnlyLinear):
    name = "acme-weight-only"


class AcmeFirstLinear(DequantWeightOnlyLinear):
    name = "acme-first"


class NotAKernel:
    name = "acme-bad-impl"
