"""The MX element-format table: moved to kernels.spec.formats.

This old path re-exports the same objects; code reads the names in kernels.spec.formats:
patch them there.
"""
from __future__ import annotations

from kernels.spec.formats import *  # noqa: F401,F403
from kernels.spec.formats import __all__  # noqa: F401
