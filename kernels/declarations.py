"""The built-in kernel declarations: moved to kernels.select.declarations.

This old path re-exports the same objects; code reads the names in kernels.select.declarations:
patch them there.
"""
from __future__ import annotations

from kernels.select.declarations import *  # noqa: F401,F403
from kernels.select.declarations import __all__  # noqa: F401
