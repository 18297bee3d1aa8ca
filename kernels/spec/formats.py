"""The MX element formats, roundings and storage layouts as plain data (no torch import).

Every kernel, the reference and the registry read these facts from here, so a format's
numbers are written down once (OCP Microscaling Formats v1.0, see docs/numerics.md). The
contract's names (`kernels.spec.contract`: ELEMENT_FORMATS, MX_FORMATS, ROUNDINGS, MX_BLOCK)
are derived from this table, so a format added here is a format a scheme may name.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BLOCK", "E8M0_BIAS", "E8M0_NAN", "E_MIN", "E_MAX", "ElemFormat", "FORMATS", "NON_MX_FORMATS",
    "ELEMENT_FORMATS", "ROUNDINGS", "LAYOUTS", "DEFAULT_LAYOUT", "get_format", "check_rounding",
    "resolve_layout", "bytes_per_row",
]

BLOCK = 32  # elements sharing one E8M0 scale, along the last (reduction) axis
E8M0_BIAS = 127
E8M0_NAN = 0xFF  # scale byte of a block that held a NaN or an Inf
E_MIN, E_MAX = -127, 127  # shared-exponent clamp; an all-zero block gets E_MIN


@dataclass(frozen=True)
class ElemFormat:
    """One MX element format. For mxint8 `ebits` is 0 and the value is code * 2**-6."""

    name: str
    ebits: int
    mbits: int  # explicit mantissa bits (mxint8: 6 fractional bits)
    bias: int
    emax: int  # exponent of the largest power of two <= max_normal
    max_normal: float
    min_subnormal: float
    bits: int  # bits of one element code
    is_int: bool = False
    # How the top code of the exponent field is spent: "none" (E2M1, E2M3, E3M2: all finite),
    # "nan_only_all_ones" (E4M3: S.1111.111 is NaN), "ieee" (E5M2: Inf and NaNs).
    specials: str = "none"

    @property
    def sign_bit(self) -> int:
        return self.bits - 1


FORMATS: dict[str, ElemFormat] = {
    f.name: f
    for f in (
        ElemFormat("mxfp4", 2, 1, 1, 2, 6.0, 0.5, 4),
        ElemFormat("mxfp6_e2m3", 2, 3, 1, 2, 7.5, 0.125, 6),
        ElemFormat("mxfp6_e3m2", 3, 2, 3, 4, 28.0, 0.0625, 6),
        ElemFormat("mxfp8_e4m3", 4, 3, 7, 8, 448.0, 2.0**-9, 8, specials="nan_only_all_ones"),
        ElemFormat("mxfp8_e5m2", 5, 2, 15, 15, 57344.0, 2.0**-16, 8, specials="ieee"),
        ElemFormat("mxint8", 0, 6, 0, 0, 127.0 / 64.0, 1.0 / 64.0, 8, is_int=True),
    )
}

#: Element formats outside MX: fp8 E4M3 with an fp32 scale per tensor or per token (the
#: activations of the `*_a_fp8` schemes). Not in FORMATS: they take no E8M0 block scale.
NON_MX_FORMATS: tuple[str, ...] = ("fp8_e4m3",)
#: Every element format a QuantKey may name: the MX table's, then the non-MX ones.
ELEMENT_FORMATS: tuple[str, ...] = tuple(FORMATS) + NON_MX_FORMATS

ROUNDINGS: tuple[str, ...] = ("floor", "even", "rceil")

# Storage layouts of MXTensor.data:
#   "packed":   mxfp4 two codes a byte, element 2i in the low nibble;
#               mxfp6 four codes in three bytes: w = c0 | c1<<6 | c2<<12 | c3<<18 stored
#               little-endian as bytes (w & 0xFF, w >> 8 & 0xFF, w >> 16).
#   "unpacked": one code a byte, in the low bits (fp4: low nibble, fp6: low 6 bits).
# 8-bit formats have only "unpacked" (one code a byte is already dense).
LAYOUTS: tuple[str, ...] = ("packed", "unpacked")
DEFAULT_LAYOUT: dict[str, str] = {
    "mxfp4": "packed",
    "mxfp6_e2m3": "unpacked",
    "mxfp6_e3m2": "unpacked",
    "mxfp8_e4m3": "unpacked",
    "mxfp8_e5m2": "unpacked",
    "mxint8": "unpacked",
}


def get_format(name: str) -> ElemFormat:
    """The format called `name`, or a ValueError that lists the valid names."""
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown MX element format {name!r}; valid formats: {', '.join(FORMATS)}"
        ) from None


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise ValueError(
            f"unknown scale rounding {rounding!r}; valid roundings: {', '.join(ROUNDINGS)}"
        )
    return rounding


def resolve_layout(fmt: ElemFormat, layout: str | None) -> str:
    """The layout to use for `fmt` (its default when None), or a ValueError naming the fix."""
    if layout is None:
        return DEFAULT_LAYOUT[fmt.name]
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    if fmt.bits == 8 and layout == "packed":
        raise ValueError(
            f"{fmt.name} has no packed layout (one code a byte is already dense); "
            "use layout='unpacked' or leave it unset"
        )
    return layout


def bytes_per_row(fmt: ElemFormat, layout: str, k: int) -> int:
    """Bytes of MXTensor.data along the last axis for `k` elements (k a multiple of 32)."""
    if layout == "unpacked" or fmt.bits == 8:
        return k
    return k * fmt.bits // 8
