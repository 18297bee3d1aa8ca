"""The REGISTRY_* on/off switches of the environment, read in one place (no torch import).

Every on/off REGISTRY_* variable is read here, by `env_flag`, so `REGISTRY_STRICT=enable` is
refused in one line everywhere (resolve, quantize_model, MXLinear, the kernel table, the CLI)
instead of silently meaning "off". Nothing here imports torch, triton or the registry.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

__all__ = ["ENV_STRICT", "ENV_DISABLE_PLUGINS", "ENV_TRITON_INTERPRET", "ENV_FLAGS", "TRUE_WORDS",
           "FALSE_WORDS", "SettingError", "env_flag", "check_env_flags", "triton_interpreted"]

ENV_STRICT = "REGISTRY_STRICT"
ENV_DISABLE_PLUGINS = "REGISTRY_DISABLE_PLUGINS"
#: Triton's own switch: "1" runs Triton kernels in its CPU interpreter (read when kernels.triton
#: is first imported, so set it before that).
ENV_TRITON_INTERPRET = "TRITON_INTERPRET"
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


def triton_interpreted(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether Triton kernels run in the CPU interpreter here (TRITON_INTERPRET=1, as Triton
    reads it); the one answer resolve and the kernels' own checks share."""
    return (os.environ if environ is None else environ).get(ENV_TRITON_INTERPRET) == "1"
