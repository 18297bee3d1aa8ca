"""Platforms as values: moved to kernels.spec.platform.

This old path re-exports the same objects; code reads the names in kernels.spec.platform:
patch them there.
"""
from __future__ import annotations

from kernels.spec.platform import *  # noqa: F401,F403
from kernels.spec.platform import __all__  # noqa: F401
