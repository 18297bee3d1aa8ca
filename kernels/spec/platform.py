"""Platforms as values: `cpu`, `cuda:sm90`, `rocm:gfx950`, `xpu`, ...

A platform is what resolution is asked about: detected from the running machine, or named for a
what-if answer (`registry resolve w_mxfp4 --platform cuda:sm100` on a laptop). Kernel
declarations name the platforms they run on with requirement strings matched here
(`cuda:sm90+`, `rocm:gfx950`, `rocm:*`, `*`), so no kernel code is needed to answer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

__all__ = ["KNOWN_PLATFORMS", "Platform", "check_requirement", "detect", "platform_of",
           "device_platform", "driver_version"]

#: The platforms a user may name (`--platform`, `platform=`); a named one outside this list is
#: refused, so a typo such as cuda:sm00 never answers a what-if. Every exact architecture a
#: shipped kernel declaration names is here (tests/registry/cli/test_cli_options.py checks it).
KNOWN_PLATFORMS: tuple[str, ...] = (
    "cpu",
    "cuda:sm80",
    "cuda:sm89",
    "cuda:sm90",
    "cuda:sm100",
    "cuda:sm103",
    "cuda:sm120",
    "rocm:gfx942",
    "rocm:gfx950",
    "xpu",
)

_CUDA = re.compile(r"^cuda:sm(\d{2,3})$")
_ROCM = re.compile(r"^rocm:(gfx[0-9a-f]+)$")


@dataclass(frozen=True, order=True)
class Platform:
    """A device family and architecture: vendor in {cpu, cuda, rocm, xpu}; arch e.g. 'sm90'."""

    vendor: str
    arch: str = ""

    def __str__(self) -> str:
        return f"{self.vendor}:{self.arch}" if self.arch else self.vendor

    @property
    def sm(self) -> int | None:
        """The CUDA compute capability as an int (90 for sm90), None off CUDA."""
        return int(self.arch[2:]) if self.vendor == "cuda" else None

    @property
    def is_gpu(self) -> bool:
        return self.vendor in ("cuda", "rocm", "xpu")

    @classmethod
    def parse(cls, text: str, *, any_arch: bool = False) -> "Platform":
        """A platform a user named: one of KNOWN_PLATFORMS (any case), else a one-line
        ValueError listing them. A well-formed but unlisted architecture (cuda:sm86) is refused,
        not mapped to a listed one: a what-if answer is only given for a platform the kernel
        declarations were written against. `any_arch=True` takes any well-formed `cuda:smNN` /
        `rocm:gfxNNN`: for names the registry wrote itself from a detected device."""
        s = str(text).strip().lower()
        known = s in KNOWN_PLATFORMS or (any_arch and (_CUDA.match(s) or _ROCM.match(s)))
        if not known:
            raise ValueError(
                f"unknown platform {text!r}; use one of {', '.join(KNOWN_PLATFORMS)} (a GPU not "
                "listed: name the listed one it matches; this machine's own is detected as is)")
        vendor, _, arch = s.partition(":")
        return cls(vendor, arch)

    def matches(self, requirement: str) -> bool:
        """Whether this platform meets a requirement string.

        `*` any; `cpu` / `xpu`; `cuda:*`; `cuda:sm90` exactly; `cuda:sm90+` sm90 or newer;
        `rocm:*`; `rocm:gfx950` exactly.
        """
        req = requirement.strip().lower()
        if req == "*":
            return True
        vendor, _, arch = req.partition(":")
        if vendor != self.vendor:
            return False
        if arch in ("", "*"):
            return True
        if arch.endswith("+"):
            if self.vendor != "cuda":
                raise ValueError(f"platform requirement {requirement!r}: '+' is only for cuda:smNN+")
            return (self.sm or 0) >= int(arch[2:-1])
        return arch == self.arch


def check_requirement(requirement: str) -> str:
    """Validate a requirement string (used when kernel declarations are built)."""
    req = requirement.strip().lower()
    ok = (
        req in ("*", "cpu", "xpu", "cuda:*", "rocm:*")
        or re.fullmatch(r"cuda:sm\d{2,3}\+?", req) is not None
        or re.fullmatch(r"rocm:gfx[0-9a-f]+", req) is not None
    )
    if not ok:
        raise ValueError(
            f"bad platform requirement {requirement!r}; write '*', 'cpu', 'xpu', 'cuda:*', "
            "'cuda:sm90', 'cuda:sm90+', 'rocm:*' or 'rocm:gfx950'"
        )
    return req


def detect() -> Platform:
    """The platform of the running machine's first accelerator, else `cpu` (imports torch)."""
    import torch

    if torch.cuda.is_available():
        if getattr(torch.version, "hip", None):
            name = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
            return Platform("rocm", name)
        major, minor = torch.cuda.get_device_capability(0)
        return Platform("cuda", f"sm{major * 10 + minor}")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return Platform("xpu")
    return Platform("cpu")


def platform_of(value: "str | Platform | None") -> Platform:
    """A Platform from a name, a Platform, or None (detect the running machine)."""
    if value is None:
        return detect()
    if isinstance(value, Platform):
        return value
    return Platform.parse(value)


_BY_DEVICE: dict = {}  # torch.device (with an index) -> Platform: a device's arch never changes


def device_platform(device) -> Platform:
    """The platform a tensor on `device` (a torch.device or its name) runs on: `cpu`,
    `cuda:smNN`, `rocm:gfxNNN`, `xpu`; another device type (mps, ...) is a platform of that
    name, which only `*` requirements match. Cached per device: no device sync, no query after
    the first call (kernels call it per forward)."""
    plat = _BY_DEVICE.get(device)
    if plat is not None:
        return plat
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if getattr(torch.version, "hip", None):
            plat = Platform("rocm", torch.cuda.get_device_properties(dev).gcnArchName.split(":")[0])
        else:
            major, minor = torch.cuda.get_device_capability(dev)
            plat = Platform("cuda", f"sm{major * 10 + minor}")
    else:
        plat = Platform(dev.type)
    if dev.type != "cuda" or dev.index is not None:  # "cuda" alone follows the current device
        _BY_DEVICE[device] = plat
    return plat


def driver_version() -> Optional[str]:
    """The NVIDIA driver version from nvidia-smi, or None where there is none to ask."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.strip().splitlines()[0] if out.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
