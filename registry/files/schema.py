"""Pydantic models of a scheme *file* (what a person writes), and the translation of
pydantic's errors into messages that name the fix.

The file models check shape and spelling (keys, types, choices); the MX rules that tie fields
together live in `kernels.spec.contract` and are applied by the loader afterwards. The exported
JSON Schema (registry.lint.json_schema) is these models' schema plus the lint rules one file
can be checked against, for validators that see only the schema.
"""
from __future__ import annotations

import difflib
import functools
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError,
)

from kernels.spec.contract import (ELEMENT_FORMATS, GRANULARITIES, MX_BLOCK, ROUNDINGS,
                                   SCALE_FORMATS, ElementFormat, Granularity, Rounding,
                                   ScaleFormat, did_you_mean)

NAME_PATTERN = r"^[a-z0-9][a-z0-9_]*$"
NAME_MAX = 64
SUMMARY_MAX = 200

Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=NAME_MAX)]
_FILE = dict(strict=True, extra="forbid")


class ScaleSpec(BaseModel):
    """`scale:` of a weight or activation."""

    model_config = ConfigDict(title="scale", **_FILE)

    format: ScaleFormat = Field(description="e8m0: OCP MX power-of-two block scales; "
                                            "fp32: a float scale per tensor or per token")
    granularity: Optional[Granularity] = Field(
        None, description="e8m0: block (the default); fp32: tensor or token (required)")
    block: Optional[int] = Field(
        None, description=f"elements per e8m0 scale: {MX_BLOCK} (the default, and the only "
                          "value OCP MX allows); not for fp32")
    rounding: Optional[Rounding] = Field(
        None, description="how an e8m0 shared exponent is rounded (required for e8m0, "
                          "not allowed for fp32)")


class TensorSpec(BaseModel):
    """`weight:` or `activation:`: an element format, its scale and when the scale is known."""

    model_config = ConfigDict(title="tensor", **_FILE)

    format: ElementFormat = Field(description="element format")
    scale: ScaleSpec
    static: bool = Field(description="true: the scale is fixed ahead of time (in the "
                                     "checkpoint); false: computed at run time")


def _activation_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "key"
    if value == "none":
        return "none"
    return None


Activation = Annotated[
    Union[Annotated[Literal["none"], Tag("none")], Annotated[TensorSpec, Tag("key")]],
    Discriminator(_activation_kind, custom_error_type="activation_kind",
                  custom_error_message="must be `none` or a mapping"),
    Field(description="the activation key, or `none` for a weight-only scheme (required)"),
]


class SchemeFile(BaseModel):
    """One scheme file: `schemes/<name>.yaml`."""

    model_config = ConfigDict(title="OCP MX quantization scheme", **_FILE)

    name: Name = Field(description="the scheme's name; equals the file name without .yaml")
    summary: str = Field(min_length=1, max_length=SUMMARY_MAX,
                         description="one line saying what the scheme is")
    aliases: list[Name] = Field(default_factory=list, description="other names to look it up by")
    weight: TensorSpec
    activation: Activation


def is_valid_name(value: Any) -> bool:
    """Is `value` a valid scheme name or alias ([a-z0-9][a-z0-9_]*, at most NAME_MAX)?"""
    return isinstance(value, str) and len(value) <= NAME_MAX and \
        re.fullmatch(NAME_PATTERN[1:-1], value) is not None


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def describe(value: Any) -> str:
    """A short, printable description of a YAML value for a message."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        text = repr(value)
        return text if len(text) <= 30 else text[:27] + "..."
    if isinstance(value, str):
        text = ascii(value) if not value.isprintable() else repr(value)
        return text if len(text) <= 50 else text[:47] + "...'"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def model_at(path: tuple) -> type[BaseModel] | None:
    """The file model that describes the mapping at `path` (None if it is not a mapping)."""
    if path == ():
        return SchemeFile
    if len(path) == 1 and path[0] in ("weight", "activation"):
        return TensorSpec
    if len(path) == 2 and path[0] in ("weight", "activation") and path[1] == "scale":
        return ScaleSpec
    return None


_CHOICES = {  # (model, field) -> (what it is, its plural, the valid values)
    (TensorSpec, "format"): ("element format", "formats", ELEMENT_FORMATS),
    (ScaleSpec, "format"): ("scale format", "scale formats", SCALE_FORMATS),
    (ScaleSpec, "granularity"): ("granularity", "granularities", GRANULARITIES),
    (ScaleSpec, "rounding"): ("rounding", "roundings", ROUNDINGS),
}

_MISSING_HINT = {
    (SchemeFile, "name"): "add `name: <the file name without .yaml>`",
    (SchemeFile, "summary"): "add `summary: <one line saying what the scheme is>`",
    (SchemeFile, "weight"): "add `weight: {format: mxfp4, scale: {format: e8m0, block: 32, "
                            "rounding: even}, static: true}`",
    (TensorSpec, "format"): f"add `format: <one of {', '.join(ELEMENT_FORMATS)}>`",
    (TensorSpec, "scale"): "add `scale: {format: e8m0, block: 32, rounding: even}` (MX) or "
                           "`scale: {format: fp32, granularity: tensor}`",
    (TensorSpec, "static"): "add `static: true` (scale fixed ahead of time) or `static: false` "
                            "(computed at run time)",
    (ScaleSpec, "format"): "add `format: e8m0` (MX block scales) or `format: fp32`",
}


def _fields(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _clean_loc(loc: tuple) -> tuple:
    # The activation union adds its tag ('key' / 'none') after 'activation'; drop it.
    if len(loc) >= 2 and loc[0] == "activation" and loc[1] in ("key", "none"):
        return loc[:1] + loc[2:]
    return tuple(loc)


def _message(kind: str, path: tuple, value: Any, ctx: dict, default: str) -> str:
    field = path[-1] if path else ""
    parent = model_at(path[:-1]) if path else None
    own = model_at(path) if path and isinstance(field, str) else None
    if kind == "missing":
        if path == ("activation",):
            return "missing; weight-only schemes must say `activation: none`"
        return "missing; " + _MISSING_HINT.get((parent, field), f"add `{field}: ...`")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(field), list(parent.model_fields), n=1) \
            if parent else []
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        valid = _fields(parent) if parent else ""
        return f"unknown key {describe(field)}{hint}; valid keys here: {valid}"
    if kind == "activation_kind":
        if value is None:
            return "is empty; weight-only schemes must say `activation: none`"
        return (f"must be `none` (weight-only) or a mapping with keys {_fields(TensorSpec)}; "
                f"got {describe(value)}")
    if kind == "literal_error" and (parent, field) in _CHOICES:
        what, whats, valid = _CHOICES[(parent, field)]
        if isinstance(value, str):
            return (f"unknown {what} {describe(value)}{did_you_mean(value, valid)}; "
                    f"valid {whats}: {', '.join(valid)}")
        return f"must be one of {', '.join(valid)}; got {describe(value)}"
    if kind in ("model_type", "model_attributes_type", "dict_type") and own is not None:
        return f"must be a mapping with keys {_fields(own)}; got {describe(value)}"
    if kind == "bool_type":
        return f"must be true or false; got {describe(value)}"
    if kind == "int_type":
        return f"must be a whole number; got {describe(value)}"
    if kind == "string_type":
        return f"must be text; got {describe(value)}"
    if kind == "list_type":
        return f"must be a list of names, e.g. `aliases: [mxfp4]`; got {describe(value)}"
    if kind == "string_pattern_mismatch":
        what = "alias" if path[:1] == ("aliases",) else "name"
        return (f"{describe(value)} is not a valid {what}: use lower-case letters, digits and "
                "'_', starting with a letter or digit ([a-z0-9][a-z0-9_]*)")
    if kind == "string_unicode":
        return (f"{describe(value)} is not valid Unicode text (an unpaired surrogate escape); "
                "write the character itself")
    if kind == "string_too_short":
        return "must not be empty; write one line saying what the scheme is"
    if kind == "string_too_long":
        return f"is {len(value)} characters long; at most {ctx.get('max_length')}"
    return default


def validation_problems(error: ValidationError) -> list[tuple[tuple, str]]:
    """(path, message) for each error pydantic found, in file order."""
    out = []
    for err in error.errors(include_url=False):
        path = _clean_loc(err["loc"])
        out.append((path, _message(err["type"], path, err.get("input"), err.get("ctx") or {},
                                   err["msg"])))
    return out


def check_file(data: dict) -> tuple[SchemeFile | None, list[tuple[tuple, str]]]:
    """Validate a file's plain data: the model, or None and the problems."""
    try:
        return SchemeFile.model_validate(data), []
    except ValidationError as e:
        return None, validation_problems(e)


@functools.lru_cache(maxsize=None)
def _field_adapter(model: type[BaseModel], field: str) -> TypeAdapter:
    return TypeAdapter(model.model_fields[field].annotation, config=ConfigDict(strict=True))


def field_ok(model: type[BaseModel], field: str, value: Any) -> bool:
    """Would `value` be accepted for `model.field` on its own?"""
    try:
        _field_adapter(model, field).validate_python(value)
        return True
    except ValidationError:
        return False
