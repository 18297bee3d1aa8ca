"""The merged kernel table: moved to kernels.select.kernel_table.

This old path re-exports the same objects; code reads the names in kernels.select.kernel_table:
patch them there.
"""
from __future__ import annotations

from kernels.select.kernel_table import *  # noqa: F401,F403
from kernels.select.kernel_table import __all__  # noqa: F401
