"""Resolution: moved to kernels.select.resolve.

This old path re-exports the same objects; code reads the names in kernels.select.resolve:
patch them there.
"""
from __future__ import annotations

from kernels.select.resolve import *  # noqa: F401,F403
from kernels.select.resolve import __all__  # noqa: F401
