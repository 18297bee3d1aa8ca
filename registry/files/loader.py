"""Read scheme files into `Scheme` values and located findings; find the scheme directories.

Every problem in every file becomes a `Finding` (`file:line: error: field: message`); reading
never raises for bad input (bytes that are not UTF-8, not YAML, the wrong shapes...).
"""
from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

from kernels.spec.contract import (ELEMENT_FORMATS, SCALE_FORMATS, QuantKey, ScaleDesc,
                                   SchemeContract, activation_problems, key_problems,
                                   scale_defaults, scale_problems)
from registry.contract import Scheme
from registry.errors import Finding, display_path, error, warning
from registry.files.names import Claim
from registry.files.schema import (
    ScaleSpec, SchemeFile, TensorSpec, check_file, describe, field_ok, is_valid_name,
)
from registry.files.yaml_lines import YamlProblem, dotted, line_of, parse_yaml

MAX_FILE_BYTES = 1 << 20
ENV_VAR = "REGISTRY_SCHEMES_PATH"
ROLES = ("weight", "activation")


# ---------------------------------------------------------------------------------------------
# One file
# ---------------------------------------------------------------------------------------------

class FileRead(NamedTuple):
    """One file read: its scheme (None when it has errors), every finding about it, and the
    names and aliases it claims when it has errors (so a look-up of them names this file)."""

    scheme: Scheme | None
    findings: list[Finding]
    claims: list[Claim]


def read_scheme_file(path: Path, source_dir: Path | None = None
                     ) -> tuple[Scheme | None, list[Finding]]:
    """The scheme in `path` (None when it has errors) and every finding about it."""
    scheme, findings, _ = read_scheme(path, source_dir)
    return scheme, findings


def read_scheme(path: Path, source_dir: Path | None = None) -> FileRead:
    """As read_scheme_file, plus the tokens a file with errors claims."""
    scheme, findings, data, lines = _read_scheme(path, source_dir)
    claims = [] if scheme is not None else _broken_claims(path, data, lines)
    return FileRead(scheme, findings, claims)


def _broken_claims(path: Path, data: object, lines: dict) -> list[Claim]:
    """A file that did not load still claims its stem, its `name` and its aliases."""
    shown = display_path(path)
    name = data.get("name") if isinstance(data, dict) else None
    owner = name if is_valid_name(name) else path.stem
    out = [Claim(path.stem, "name", shown, line_of(lines, ("name",)), owner)]
    if is_valid_name(name) and name != path.stem:
        out.append(Claim(name, "name", shown, line_of(lines, ("name",)), owner))
    aliases = data.get("aliases") if isinstance(data, dict) else None
    for i, alias in enumerate(aliases if isinstance(aliases, list) else []):
        if is_valid_name(alias):
            out.append(Claim(alias, "alias", shown, line_of(lines, ("aliases", i)), owner))
    return out


def _read_scheme(path: Path, source_dir: Path | None
                 ) -> tuple[Scheme | None, list[Finding], object, dict]:
    shown = display_path(path)
    text, problem = _read_text(path)
    if problem is not None:
        return None, [error(shown, problem[0], "", problem[1])], None, {}
    try:
        parsed = parse_yaml(text)
    except YamlProblem as p:
        return None, [error(shown, p.line, "", p.message)], None, {}
    findings = [error(shown, line, field, msg) for line, field, msg in parsed.problems]
    lines = parsed.lines

    def at(path_: tuple, message: str) -> Finding:
        return error(shown, line_of(lines, path_), dotted(path_), message)

    data = parsed.data
    if not isinstance(data, dict):
        findings.append(error(shown, lines[()], "",
                              "the top level must be a mapping with the keys "
                              f"{', '.join(SchemeFile.model_fields)}; got {describe(data)}"))
        return None, findings, data, lines
    model, problems = check_file(data)
    findings += [at(p, m) for p, m in problems]
    findings += [at(p, m) for p, m in _rule_problems(data)]
    findings += [at(p, m) for p, m in _name_problems(data, path)]
    if any(f.is_error for f in findings) or model is None:
        return None, sorted(findings, key=lambda f: (f.line or 0, f.field)), data, lines
    try:
        scheme = _make_scheme(model, path, source_dir or path.parent, lines)
    except ValueError as e:  # the contract refused what the file checks let through
        return None, findings + [error(shown, 1, "", f"internal error, please report: {e}")], \
            data, lines
    return scheme, findings, data, lines


def _read_text(path: Path) -> tuple[str, None] | tuple[None, tuple[int, str]]:
    try:
        if not path.is_file():
            return None, (1, "not a file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            return None, (1, f"file is {size} bytes; scheme files are at most "
                             f"{MAX_FILE_BYTES} bytes (1 MiB)")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        return None, (1, f"cannot read the file: {e.strerror or e}")
    if len(raw) > MAX_FILE_BYTES:
        return None, (1, f"file is over {MAX_FILE_BYTES} bytes (1 MiB); scheme files are smaller")
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        return None, (line, f"not UTF-8 text (byte 0x{raw[e.start]:02x}); save the file as UTF-8")


def _rule_problems(data: dict) -> list[tuple[tuple, str]]:
    """The MX rules (kernels.spec.contract) for each weight / activation, reading only the fields
    that are well formed (the malformed ones are already reported)."""
    out: list[tuple[tuple, str]] = []
    for role in ROLES:
        spec = data.get(role)
        scale = spec.get("scale") if isinstance(spec, dict) else None
        if not isinstance(scale, dict) or scale.get("format") not in SCALE_FORMATS:
            continue
        fields = {name: scale.get(name) for name in ("granularity", "block", "rounding")}
        fields["static"] = spec.get("static")
        unknown = {name for name, value in fields.items()
                   if not field_ok(TensorSpec if name == "static" else ScaleSpec, name, value)}
        if set(scale) - set(ScaleSpec.model_fields):  # a misspelt key may be the absent field
            unknown |= {name for name in ("granularity", "block", "rounding") if name not in scale}
        sfmt = scale["format"]
        known = {k: (None if k in unknown else v) for k, v in fields.items()}
        granularity, block = scale_defaults(sfmt, known["granularity"], known["block"])
        problems = []
        if spec.get("format") in ELEMENT_FORMATS:
            problems += key_problems(spec["format"], sfmt)
        problems += scale_problems(sfmt, granularity, block, fields["rounding"],
                                   fields["static"], unknown=unknown)
        if role == "activation" and "static" not in unknown:
            problems += activation_problems(sfmt, fields["static"])
        out += [((role,) + tuple(field.split(".")), msg) for field, msg in problems]
    return out


def _name_problems(data: dict, path: Path) -> list[tuple[tuple, str]]:
    out: list[tuple[tuple, str]] = []
    name = data.get("name")
    name_ok = is_valid_name(name)
    if name_ok and name != path.stem:
        out.append((("name",), f"{name!r} must equal the file name {path.stem!r}; rename the "
                               f"file to {name}.yaml or change the name"))
    summary = data.get("summary")
    if isinstance(summary, str) and summary and not summary.strip():
        out.append((("summary",), "is blank; write one line saying what the scheme is"))
    elif isinstance(summary, str) and "\n" in summary.strip():
        out.append((("summary",), "must be one line; put details in a comment"))
    aliases = data.get("aliases")
    if isinstance(aliases, list):
        seen: dict[str, int] = {}
        for i, alias in enumerate(aliases):
            if not isinstance(alias, str):
                continue
            if name_ok and alias == name:
                out.append((("aliases", i), f"alias {alias!r} is the scheme's own name; remove it"))
            elif alias in seen:
                out.append((("aliases", i), f"alias {alias!r} is listed twice (also item "
                                            f"{seen[alias]}); remove one"))
            seen.setdefault(alias, i)
    return out


def _key(spec: TensorSpec) -> QuantKey:
    s: ScaleSpec = spec.scale
    scale = ScaleDesc(format=s.format, granularity=s.granularity, block=s.block,
                      static=spec.static, rounding=s.rounding)  # fills e8m0 defaults
    return QuantKey(format=spec.format, scale=scale)


def _make_scheme(model: SchemeFile, path: Path, source_dir: Path, lines: dict) -> Scheme:
    activation = None if model.activation == "none" else _key(model.activation)
    contract = SchemeContract(weight=_key(model.weight), activation=activation)
    field_lines = tuple(sorted((dotted(p), line) for p, line in lines.items() if p))
    return Scheme(name=model.name, summary=model.summary.strip(), aliases=tuple(model.aliases),
                  contract=contract, source=Path(display_path(path)),
                  source_dir=Path(display_path(source_dir)), field_lines=field_lines)


# ---------------------------------------------------------------------------------------------
# Directories
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SchemeDir:
    """A directory of scheme files and where it was named (shown in messages)."""

    path: Path
    origin: str  # "shipped", "REGISTRY_SCHEMES_PATH", "--schemes", "argument"


def shipped_dir() -> Path:
    """The shipped `schemes/`: the data package `registry._shipped` of an install, or the
    checkout's `schemes/` beside the `registry` package."""
    try:
        files = importlib.resources.files("registry._shipped")
        if isinstance(files, Path) and files.is_dir():
            return files
        # A namespace package (no __init__.py) gives a MultiplexedPath: its entries are Paths.
        for entry in sorted(files.iterdir(), key=str):
            if isinstance(entry, Path) and entry.suffix == ".yaml":
                return entry.parent
    except (ModuleNotFoundError, TypeError, ValueError, OSError):
        pass
    return Path(__file__).resolve().parents[2] / "schemes"  # registry/files/loader.py


def scheme_dirs(extra_dirs: Iterable[str | os.PathLike] = (), *,
                env: Mapping[str, str] | None = None, include_shipped: bool = True
                ) -> list[SchemeDir]:
    """Shipped dir, then $REGISTRY_SCHEMES_PATH (os.pathsep-separated), then `extra_dirs`."""
    env = os.environ if env is None else env
    dirs = [SchemeDir(shipped_dir(), "shipped")] if include_shipped else []
    for part in (env.get(ENV_VAR) or "").split(os.pathsep):
        if part.strip():
            dirs.append(SchemeDir(Path(part), ENV_VAR))
    dirs += [SchemeDir(Path(d), "--schemes") for d in extra_dirs]
    return dirs


def read_dir(d: SchemeDir) -> tuple[list[Path], list[Finding]]:
    """The `*.yaml` files of a directory, or a finding naming the missing directory."""
    shown = display_path(d.path)
    if not d.path.exists():
        return [], [error(shown, None, "", f"scheme directory does not exist (from {d.origin}); "
                                           "create it or fix the path")]
    if not d.path.is_dir():
        return [], [error(shown, None, "", f"not a directory (from {d.origin}); name a "
                                           "directory of *.yaml scheme files")]
    try:
        entries = sorted(d.path.iterdir())
    except OSError as e:
        return [], [error(shown, None, "", f"cannot list the directory: {e.strerror or e}")]
    files = [p for p in entries if p.suffix == ".yaml"]
    findings = [warning(display_path(p), None, "", f"not loaded: scheme files end in .yaml; "
                                                   f"rename it to {p.stem}.yaml")
                for p in entries if misnamed(p)]
    return files, findings


def misnamed(path: Path) -> bool:
    """A file that looks meant as a scheme file (.yml, .YAML, .json...) but that the loader,
    which reads only `*.yaml`, skips."""
    return path.suffix != ".yaml" and path.suffix.lower() in (".yaml", ".yml", ".json")
