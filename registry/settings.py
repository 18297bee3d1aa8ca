"""What this installation is: its distribution name and version.

The REGISTRY_* on/off switches (`env_flag`, `SettingError`, `ENV_STRICT`, ...) are read in
kernels/spec/env.py, the bottom layer, and re-exported here under their old path. Nothing here
imports torch, triton or another registry module.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from kernels.spec.env import *  # noqa: F401,F403 - the switches, under their old path
from kernels.spec.env import __all__ as _SWITCHES

__all__ = [*_SWITCHES, "DIST_NAME", "registry_version"]

DIST_NAME = "ocp-mx-registry"


def registry_version() -> str:
    """The installed distribution's version; in a source tree not installed, pyproject's."""
    import importlib.metadata

    try:
        return importlib.metadata.version(DIST_NAME)
    except importlib.metadata.PackageNotFoundError:
        return _source_tree_version() or "unknown (not installed, and no pyproject.toml)"


def _source_tree_version(root: Optional[Path] = None) -> Optional[str]:
    """`version = "..."` of the [project] table of the checkout's pyproject.toml, if any."""
    path = (root or Path(__file__).resolve().parent.parent) / "pyproject.toml"
    if not path.is_file():
        return None
    project = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", path.read_text(encoding="utf-8"),
                        re.M | re.S)
    found = project and re.search(r'^version\s*=\s*"([^"]+)"', project.group(1), re.M)
    return found.group(1) if found else None
