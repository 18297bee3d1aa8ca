"""The loaded set of schemes: look-up by name or alias, and every finding from loading.

`load_schemes()` is the public entry point; names and aliases must be unique across every
scheme directory, and a clash is reported on the later file, naming the earlier one.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from registry.contract import Scheme
from registry.errors import Finding, SchemeLoadError, UnknownSchemeError, display_path, error
from registry.loader import SchemeDir, read_dir, read_scheme_file, scheme_dirs


@dataclass
class Catalog:
    """Schemes by name (first definition wins on a clash), aliases, and all findings."""

    loaded: list[Scheme]  # every valid file, in load order (clashing ones too)
    file_findings: list[Finding]  # per-file problems and missing directories
    dirs: list[SchemeDir] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file read, as shown in messages
    schemes: dict[str, Scheme] = field(init=False)
    aliases: dict[str, str] = field(init=False)  # alias -> scheme name
    clash_findings: list[Finding] = field(init=False)

    def __post_init__(self) -> None:
        self.schemes, self.aliases, self.clash_findings = _index(self.loaded)

    @property
    def findings(self) -> list[Finding]:
        return self.file_findings + self.clash_findings

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]

    def raise_for_errors(self) -> None:
        """Raise SchemeLoadError listing every error, if there is any."""
        if self.errors:
            raise SchemeLoadError(self.errors)

    def get(self, name_or_alias: str) -> Scheme:
        """The scheme with this name or alias; UnknownSchemeError lists the close matches."""
        if name_or_alias in self.schemes:
            return self.schemes[name_or_alias]
        if name_or_alias in self.aliases:
            return self.schemes[self.aliases[name_or_alias]]
        known = sorted(self.schemes) + sorted(self.aliases)
        close = difflib.get_close_matches(str(name_or_alias), known, n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else \
            f"; known schemes: {', '.join(sorted(self.schemes)) or '(none)'}"
        raise UnknownSchemeError(name_or_alias,
                                 f"no scheme or alias named {name_or_alias!r}{hint}")

    def __contains__(self, name_or_alias: object) -> bool:
        return name_or_alias in self.schemes or name_or_alias in self.aliases

    def __iter__(self) -> Iterator[Scheme]:
        return iter(self.schemes.values())

    def __len__(self) -> int:
        return len(self.schemes)


def _index(loaded: list[Scheme]) -> tuple[dict[str, Scheme], dict[str, str], list[Finding]]:
    schemes: dict[str, Scheme] = {}
    findings: list[Finding] = []
    for s in loaded:
        if s.name in schemes:
            first = schemes[s.name]
            findings.append(error(str(s.source), s.line("name"), "name",
                                  f"scheme name {s.name!r} is already defined in "
                                  f"{first.location}; names must be unique across all scheme "
                                  "directories"))
        else:
            schemes[s.name] = s
    aliases: dict[str, str] = {}
    alias_owner: dict[str, Scheme] = {}
    for s in loaded:
        if schemes.get(s.name) is not s:
            continue
        for i, alias in enumerate(s.aliases):
            where = f"aliases.{i}"
            if alias in schemes and alias != s.name:
                other = schemes[alias]
                findings.append(error(str(s.source), s.line(where), where,
                                      f"alias {alias!r} is the name of the scheme in "
                                      f"{other.location}; pick another alias"))
            elif alias in alias_owner:
                other = alias_owner[alias]
                other_line = other.line(f"aliases.{other.aliases.index(alias)}")
                findings.append(error(str(s.source), s.line(where), where,
                                      f"alias {alias!r} is already an alias of {other.name!r} "
                                      f"({other.source}:{other_line}); aliases must be unique"))
            else:
                alias_owner[alias] = s
                aliases[alias] = s.name
    return schemes, aliases, findings


def load_files(dirs: Iterable[SchemeDir], files: Iterable[str | os.PathLike] = ()) -> Catalog:
    """Read every `*.yaml` of `dirs` (each once), then the single `files`."""
    loaded: list[Scheme] = []
    findings: list[Finding] = []
    read: list[str] = []
    seen: set[Path] = set()
    used_dirs: list[SchemeDir] = []

    def take(path: Path, source_dir: Path) -> None:
        key = path.resolve()
        if key in seen:
            return
        seen.add(key)
        scheme, found = read_scheme_file(path, source_dir)
        read.append(display_path(path))
        findings.extend(found)
        if scheme is not None:
            loaded.append(scheme)

    seen_dirs: set[Path] = set()
    for d in dirs:
        key = d.path.resolve()
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        used_dirs.append(d)
        paths, found = read_dir(d)
        findings.extend(found)
        for p in paths:
            take(p, d.path)
    for f in files:
        take(Path(f), Path(f).parent)
    return Catalog(loaded=loaded, file_findings=findings, dirs=used_dirs, files=read)


def load_schemes(extra_dirs: Iterable[str | os.PathLike] = (), *,
                 env: Mapping[str, str] | None = None, include_shipped: bool = True) -> Catalog:
    """All schemes: shipped, then $REGISTRY_SCHEMES_PATH, then `extra_dirs`; never raises for
    bad files (see `.findings`, or call `.raise_for_errors()`)."""
    return load_files(scheme_dirs(extra_dirs, env=env, include_shipped=include_shipped))
