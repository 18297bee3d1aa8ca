"""What this installation is and how the environment switches it: the version, the REGISTRY_* switches.

Every on/off REGISTRY_* variable is read here, by `env_flag`, so `REGISTRY_STRICT=enable` is
refused in one line everywhere (resolve, quantize_model, MXLinear, the kernel table, the CLI)
instead of silently meaning "off". Nothing here imports torch, triton or another registry module.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping, Optional

DIST_NAME = "ocp-mx-registry"
ENV_STRICT = "REGISTRY_STRICT"
ENV_DISABLE_PLUGINS = "REGISTRY_DISABLE_PLUGINS"
#: The on/off variables `check_env_flags` checks (what each one turns on).
ENV_FLAGS: tuple[str, ...] = (ENV_STRICT, ENV_DISABLE_PLUGINS)
#: Accepted spellings, compared case-insensitively after stripping blanks; unset means off.
TRUE_WORDS: tuple[str, ...] = ("1", "true", "yes", "on")
FALSE_WORDS: tuple[str, ...] = ("0", "false", "no", "off", "")


class SettingError(ValueError):
    """An environment variable holds a value the registry does not know (one line)."""


def env_flag(name: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """The on/off value of `name` (unset: off); SettingError for any other spelling."""
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return False
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SettingError(
        f"{name}={raw!r} is not an on/off value; use {'/'.join(TRUE_WORDS)} for on, "
        f"{'/'.join(w for w in FALSE_WORDS if w)} or empty / unset for off (any case)")


def check_env_flags(environ: Optional[Mapping[str, str]] = None) -> None:
    """SettingError for the first REGISTRY_* on/off variable with an unknown value."""
    for name in ENV_FLAGS:
        env_flag(name, environ)


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
