"""The loaded set of schemes: look-up by name or alias, and every finding from loading.

`load_schemes()` is the public entry point. Names and aliases are one namespace across every
scheme directory (registry.files.names): a clash is reported on the later file, naming the earlier
one, and a look-up of a clashing token, or of one whose file has errors, raises naming the
files. The Python API does not raise for a missing directory or a broken file (a catalog is
still useful without them): each becomes a finding in `.findings`, is logged once per load
as a WARNING on the `registry.catalog` logger, and a look-up that then fails names the
missing directories. `.raise_for_errors()` turns them into an exception.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from registry.contract import Scheme
from registry.errors import Finding, SchemeLoadError, display_path, error
from registry.files.loader import SchemeDir, read_dir, read_scheme, scheme_dirs
from registry.files.names import Claim, NameIndex, build_index, lookup, resolves, scheme_claims

log = logging.getLogger("registry.catalog")


@dataclass
class Catalog:
    """Schemes by name and alias (the first definition keeps a token; a look-up of a token
    defined twice, or by a file with errors, raises), and all findings."""

    loaded: list[Scheme]  # every valid file, in load order (clashing ones too)
    file_findings: list[Finding]  # per-file problems and missing directories
    dirs: list[SchemeDir] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file read, as shown in messages
    claims: list[Claim] | None = None  # every token of every file read (default: `loaded`'s)
    schemes: dict[str, Scheme] = field(init=False)  # schemes whose file has no error
    aliases: dict[str, str] = field(init=False)  # alias -> scheme name, likewise
    clash_findings: list[Finding] = field(init=False)
    _names: NameIndex = field(init=False, repr=False)

    def __post_init__(self) -> None:
        claims = self.claims if self.claims is not None else \
            [c for s in self.loaded for c in scheme_claims(s)]
        self._names = build_index(claims, {f.path for f in self.file_findings if f.is_error})
        self.schemes, self.aliases = self._names.schemes, self._names.aliases
        self.clash_findings = self._names.clash_findings

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
        """The scheme with this name or alias. UnknownSchemeError lists the close matches;
        its subclasses AmbiguousSchemeError / BrokenSchemeError name the files involved."""
        shown_dirs = {display_path(d.path) for d in self.dirs}
        missing = [f for f in self.file_findings if f.is_error and f.path in shown_dirs]
        return lookup(self._names, name_or_alias, self.errors, missing)

    def __contains__(self, name_or_alias: object) -> bool:
        """Whether `get` would return a scheme."""
        return resolves(self._names, name_or_alias)

    def __iter__(self) -> Iterator[Scheme]:
        return iter(self.schemes.values())

    def __len__(self) -> int:
        return len(self.schemes)


def load_files(dirs: Iterable[SchemeDir], files: Iterable[str | os.PathLike] = ()) -> Catalog:
    """Read every `*.yaml` of `dirs` (each once), then the single `files` (a file not named
    `*.yaml` is an error: the loader would never read it from a directory)."""
    loaded: list[Scheme] = []
    findings: list[Finding] = []
    claims: list[Claim] = []
    read: list[str] = []
    seen: set[Path] = set()
    used_dirs: list[SchemeDir] = []

    def take(path: Path, source_dir: Path) -> None:
        key = path.resolve()
        if key in seen:
            return
        seen.add(key)
        result = read_scheme(path, source_dir)
        read.append(display_path(path))
        findings.extend(result.findings)
        claims.extend(result.claims if result.scheme is None else scheme_claims(result.scheme))
        if result.scheme is not None:
            loaded.append(result.scheme)

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
        path = Path(f)
        if path.suffix != ".yaml":
            findings.append(error(display_path(path), None, "",
                                  "not read: the loader only reads *.yaml files; rename it to "
                                  f"{path.stem}.yaml"))
            continue
        take(path, path.parent)
    return Catalog(loaded=loaded, file_findings=findings, dirs=used_dirs, files=read,
                   claims=claims)


def load_schemes(extra_dirs: Iterable[str | os.PathLike] = (), *,
                 env: Mapping[str, str] | None = None, include_shipped: bool = True) -> Catalog:
    """All schemes: shipped, then $REGISTRY_SCHEMES_PATH, then `extra_dirs`. Never raises for a
    missing directory or a bad file: each finding is kept in `.findings` and logged as a
    WARNING on the `registry.catalog` logger (call `.raise_for_errors()` to refuse them)."""
    catalog = load_files(scheme_dirs(extra_dirs, env=env, include_shipped=include_shipped))
    for f in catalog.findings:
        log.warning("%s", f)
    return catalog
