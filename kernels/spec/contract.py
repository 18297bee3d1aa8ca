"""The contract a scheme promises its kernels: frozen, hashable `QuantKey` values.

Kernels and the activation-QDQ dispatcher are keyed by these values, never by strings, so a
misspelt format cannot slip through as a silent pass-through. The rules that make a key valid
(OCP MX: e8m0 scales per block of 32, with a rounding; fp32 scales per tensor or token, without
one) are written once here, as `*_problems` functions that return (field, message) pairs: the
models below raise them, and the registry's loader turns them into `file:line` findings.

The element-format names, the roundings and the block size are derived from the format table
(kernels/spec/formats.py), not repeated. This module imports neither torch nor triton. The
scheme-file model (`Scheme`: a named contract and where it was written) is the registry's
(registry/contract.py); anything carrying a contract in `.contract` is a `HasContract`.
"""
from __future__ import annotations

import difflib
from typing import Any, Literal, Optional, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, model_validator

from kernels.spec import formats

__all__ = [
    "ElementFormat", "ScaleFormat", "Granularity", "Rounding", "ELEMENT_FORMATS", "MX_FORMATS",
    "SCALE_FORMATS", "GRANULARITIES", "ROUNDINGS", "MX_BLOCK", "Problems", "suggestions",
    "did_you_mean", "scale_defaults", "scale_problems", "key_problems", "activation_problems",
    "ScaleDesc", "QuantKey", "SchemeContract", "HasContract", "contract_of", "plain_message",
]

# The Literal types pydantic validates with are built from the format table's names.
ElementFormat = Literal[formats.ELEMENT_FORMATS]  # type: ignore[valid-type]
ScaleFormat = Literal["e8m0", "fp32"]
Granularity = Literal["block", "tensor", "token"]
Rounding = Literal[formats.ROUNDINGS]  # type: ignore[valid-type]

ELEMENT_FORMATS: tuple[str, ...] = get_args(ElementFormat)
MX_FORMATS: tuple[str, ...] = tuple(formats.FORMATS)
SCALE_FORMATS: tuple[str, ...] = get_args(ScaleFormat)
GRANULARITIES: tuple[str, ...] = get_args(Granularity)
ROUNDINGS: tuple[str, ...] = get_args(Rounding)
MX_BLOCK = formats.BLOCK  # elements sharing one e8m0 scale (OCP MX v1.0)

Problems = list[tuple[str, str]]  # (field relative to a QuantKey in YAML terms, message)


def _choices(values: tuple[str, ...]) -> str:
    return ", ".join(values)


def suggestions(text: str, choices: tuple[str, ...]) -> list[str]:
    """The choices a mistyped `text` may mean, case-insensitively: the exact match alone, else
    else every choice it begins (`mxfp6` -> mxfp6_e2m3, mxfp6_e3m2), else the close spellings."""
    want = text.strip().lower()
    if not want:
        return []
    lower = {c.lower(): c for c in choices}
    if want in lower:
        return [lower[want]]
    begun = [c for c in choices if c.lower().startswith(want)]
    close = difflib.get_close_matches(want, list(lower), n=len(choices), cutoff=0.6)
    return begun or [lower[c] for c in close]


def did_you_mean(text: Any, choices: tuple[str, ...]) -> str:
    """` (did you mean a or b?)` for a mistyped string, else ''."""
    found = suggestions(text, choices) if isinstance(text, str) else []
    if not found:
        return ""
    listed = found[0] if len(found) == 1 else f"{', '.join(found[:-1])} or {found[-1]}"
    return f" (did you mean {listed}?)"


# ---------------------------------------------------------------------------------------------
# The rules (shared by the models and the loader)
# ---------------------------------------------------------------------------------------------

def scale_defaults(
    scale_format: str, granularity: str | None, block: int | None
) -> tuple[str | None, int | None]:
    """Fill what an e8m0 scale implies: granularity `block`, block size 32."""
    if scale_format == "e8m0":
        granularity = granularity or "block"
        if granularity == "block" and block is None:
            block = MX_BLOCK
    return granularity, block


def scale_problems(
    scale_format: str, granularity: str | None, block: Any, rounding: str | None, static: bool,
    *, unknown: frozenset[str] | set[str] = frozenset(),
) -> Problems:
    """What is wrong with a scale description (after `scale_defaults`). Checks that read a
    field named in `unknown` (a value already reported as malformed) are skipped."""
    out: Problems = []
    g_ok, b_ok, r_ok = ("granularity" not in unknown, "block" not in unknown,
                        "rounding" not in unknown)
    if scale_format == "e8m0":
        if g_ok and granularity != "block":
            out.append(("scale.granularity",
                        f"e8m0 scales are per block of {MX_BLOCK} (OCP MX), not per {granularity}; "
                        "write `granularity: block` or leave it out"))
        elif g_ok and b_ok and (block != MX_BLOCK or isinstance(block, bool)):
            out.append(("scale.block", f"must be {MX_BLOCK} for e8m0 scales (OCP MX)"))
        if r_ok and rounding is None:
            out.append(("scale.rounding",
                        f"missing; e8m0 scales need a rounding: {_choices(ROUNDINGS)}"))
    elif scale_format == "fp32":
        if g_ok and granularity is None:
            out.append(("scale.granularity",
                        "missing; fp32 scales need `granularity: tensor` or `granularity: token`"))
        elif g_ok and granularity == "block":
            out.append(("scale.granularity",
                        "fp32 block scales are not supported; use `tensor` or `token` "
                        "(block scales are e8m0)"))
        if b_ok and block is not None:
            out.append(("scale.block", "only e8m0 block scales have a block size; remove `block`"))
        if r_ok and rounding is not None:
            out.append(("scale.rounding",
                        "fp32 scales have no rounding (only e8m0 scales do); remove `rounding`"))
    if g_ok and "static" not in unknown and static is True and granularity == "token":
        out.append(("static",
                    "a per-token scale is computed at run time; use `static: false` "
                    "or `granularity: tensor`"))
    return out


def key_problems(element_format: str, scale_format: str) -> Problems:
    """Does the element format take this kind of scale?"""
    if element_format in MX_FORMATS:
        if scale_format != "e8m0":
            return [("scale.format", f"MX format {element_format} takes e8m0 block scales "
                     f"(OCP MX), not {scale_format}")]
        return []
    if scale_format != "fp32":
        return [("scale.format",
                 f"{element_format} takes an fp32 scale (per tensor or per token), not "
                 f"{scale_format}; e8m0 block scales are for the MX formats "
                 f"({_choices(MX_FORMATS)})")]
    return []


def activation_problems(scale_format: str, static: bool) -> Problems:
    """Rules for the activation key only: MX activation scales come from the data at run time."""
    if scale_format == "e8m0" and static:
        return [("static",
                 "static MX activation scales are not supported: an e8m0 block scale is computed "
                 "from each block at run time; use `static: false`")]
    return []


def _raise(problems: Problems, prefix: str = "") -> None:
    if problems:
        raise ValueError("; ".join(f"{prefix}{field}: {msg}" for field, msg in problems))


# ---------------------------------------------------------------------------------------------
# The values
# ---------------------------------------------------------------------------------------------

_FROZEN = ConfigDict(frozen=True, strict=True, extra="forbid")


class ScaleDesc(BaseModel):
    """How a tensor's scales are stored and found.

    Short form (see `QuantKey`): `e8m0/b32:even:dynamic`, `fp32/tensor:static`.
    """

    model_config = _FROZEN

    format: ScaleFormat
    granularity: Granularity
    block: Optional[int] = None
    static: bool
    rounding: Optional[Rounding] = None

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("format"), str):
            granularity, block = scale_defaults(
                data["format"], data.get("granularity"), data.get("block")
            )
            data = dict(data)
            if granularity is not None:
                data["granularity"] = granularity
            data["block"] = block
        return data

    @model_validator(mode="after")
    def _check(self) -> "ScaleDesc":
        problems = scale_problems(self.format, self.granularity, self.block, self.rounding,
                                  self.static)
        _raise([(f.removeprefix("scale."), m) for f, m in problems])
        return self

    def __str__(self) -> str:
        where = f"b{self.block}" if self.granularity == "block" else self.granularity
        rounding = f":{self.rounding}" if self.rounding else ""
        return f"{self.format}/{where}{rounding}:{'static' if self.static else 'dynamic'}"

    def __repr__(self) -> str:
        return f"ScaleDesc.parse({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> "ScaleDesc":
        """The inverse of `str()`; a ValueError names the bad part and the valid choices."""
        return _parse_scale(text, text)


class QuantKey(BaseModel):
    """One quantized tensor's contract: element format + scale description.

    Short stable string form, parsed back by `QuantKey.parse`:

        key         = FORMAT ":" SCALE_FORMAT "/" WHERE [":" ROUNDING] ":" WHEN
        FORMAT      = mxfp4 | mxfp6_e2m3 | mxfp6_e3m2 | mxfp8_e4m3 | mxfp8_e5m2 | mxint8 | fp8_e4m3
        SCALE_FORMAT= e8m0 | fp32
        WHERE       = b32 (a block of 32 elements) | tensor | token
        ROUNDING    = floor | even | rceil      (present exactly for e8m0 scales)
        WHEN        = static | dynamic

    e.g. `mxfp4:e8m0/b32:even:dynamic`, `fp8_e4m3:fp32/tensor:static`.
    """

    model_config = _FROZEN

    format: ElementFormat
    scale: ScaleDesc

    @model_validator(mode="after")
    def _check(self) -> "QuantKey":
        _raise(key_problems(self.format, self.scale.format))
        return self

    @classmethod
    def mx(cls, format: str, *, rounding: str, static: bool) -> "QuantKey":
        """An MX key: e8m0 scales per block of 32."""
        return cls(format=format,
                   scale=ScaleDesc(format="e8m0", static=static, rounding=rounding))

    @property
    def is_mx(self) -> bool:
        return self.format in MX_FORMATS

    @property
    def static(self) -> bool:
        return self.scale.static

    def __str__(self) -> str:
        return f"{self.format}:{self.scale}"

    def __repr__(self) -> str:
        return f"QuantKey.parse({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> "QuantKey":
        """The inverse of `str()`; a ValueError names the bad part and the valid choices."""
        if not isinstance(text, str):
            raise ValueError(f"a quant key is a string like 'mxfp4:e8m0/b32:even:dynamic', "
                             f"got {type(text).__name__}")
        fmt, sep, rest = text.partition(":")
        if fmt not in ELEMENT_FORMATS:
            raise ValueError(f"bad quant key {text!r}: unknown element format {fmt!r}"
                             f"{did_you_mean(fmt, ELEMENT_FORMATS)}; "
                             f"valid formats: {_choices(ELEMENT_FORMATS)}")
        if not sep:
            raise ValueError(f"bad quant key {text!r}: missing the scale after {fmt!r}, "
                             "e.g. 'mxfp4:e8m0/b32:even:dynamic'")
        scale = _parse_scale(rest, text)
        try:
            return cls(format=fmt, scale=scale)
        except ValueError as e:
            raise ValueError(f"bad quant key {text!r}: {plain_message(e)}") from None


class SchemeContract(BaseModel):
    """A scheme's promise: the weight key and the activation key (None: weight-only)."""

    model_config = _FROZEN

    weight: QuantKey
    activation: Optional[QuantKey]

    @model_validator(mode="after")
    def _check(self) -> "SchemeContract":
        if self.activation is not None:
            _raise(activation_problems(self.activation.scale.format, self.activation.static),
                   prefix="activation.")
        return self

    @property
    def is_weight_only(self) -> bool:
        return self.activation is None

    def __str__(self) -> str:
        return f"W={self.weight} A={self.activation if self.activation is not None else 'none'}"


@runtime_checkable
class HasContract(Protocol):
    """Anything carrying a scheme contract in `.contract`: the registry's `Scheme` (which also
    has a `.name`), a built layer. `resolve` and `kernels.moe` take one, or a bare contract."""

    @property
    def contract(self) -> SchemeContract: ...


def contract_of(value: Any) -> Optional[SchemeContract]:
    """The contract of a SchemeContract or of an object carrying one in `.contract`, else None."""
    if isinstance(value, SchemeContract):
        return value
    found = getattr(value, "contract", None)
    return found if isinstance(found, SchemeContract) else None


# ---------------------------------------------------------------------------------------------
# Parsing the short form
# ---------------------------------------------------------------------------------------------

def plain_message(e: Exception) -> str:
    """A pydantic ValidationError's first message without its framing."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        msgs = [err["msg"].removeprefix("Value error, ") for err in errors()]
        return "; ".join(msgs)
    return str(e)


def _parse_scale(text: str, whole: str) -> ScaleDesc:
    bad = f"bad quant key {whole!r}" if whole != text else f"bad scale {text!r}"
    parts = text.split(":")
    head = parts[0]
    sfmt, slash, where = head.partition("/")
    if sfmt not in SCALE_FORMATS:
        raise ValueError(f"{bad}: unknown scale format {sfmt!r}; valid: {_choices(SCALE_FORMATS)}")
    if not slash:
        raise ValueError(f"{bad}: missing '/b32', '/tensor' or '/token' after {sfmt!r}")
    block = None
    if where in ("tensor", "token"):
        granularity = where
    elif where.startswith("b") and where[1:].isdigit() and where[1:] == str(int(where[1:])):
        granularity, block = "block", int(where[1:])
    else:
        raise ValueError(f"{bad}: unknown scale granularity {where!r}; valid: b{MX_BLOCK}, "
                         "tensor, token")
    rest = parts[1:]
    want = 2 if sfmt == "e8m0" else 1
    if len(rest) != want:
        shape = "ROUNDING:static|dynamic" if want == 2 else "static|dynamic (no rounding)"
        raise ValueError(f"{bad}: {sfmt} scales are written '{head}:{shape}', got "
                         f"{len(rest)} part(s) after {head!r}")
    rounding = rest[0] if want == 2 else None
    if rounding is not None and rounding not in ROUNDINGS:
        raise ValueError(f"{bad}: unknown rounding {rounding!r}; valid: {_choices(ROUNDINGS)}")
    when = rest[-1]
    if when not in ("static", "dynamic"):
        raise ValueError(f"{bad}: {when!r} must be 'static' or 'dynamic'")
    try:
        return ScaleDesc(format=sfmt, granularity=granularity, block=block,
                         static=when == "static", rounding=rounding)
    except ValueError as e:
        raise ValueError(f"{bad}: {plain_message(e)}") from None
