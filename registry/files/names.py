"""One namespace for scheme names and aliases: who claims each token, clashes, look-up errors.

A name or alias defined twice never resolves silently (seed bug: a user file named like a
shipped alias turned a W4A4 look-up into W4A16). The first definition in load order (shipped,
then $REGISTRY_SCHEMES_PATH, then --schemes) keeps the token in the index and the finding goes
on the later file, naming the earlier one; a look-up of the token refuses, naming both files.
A token claimed by a file with errors (it did not load, or it clashes) refuses too, naming
that file and its first error, rather than "no such scheme" or another file's scheme.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

from registry.contract import Scheme
from registry.errors import (
    AmbiguousSchemeError, BrokenSchemeError, Finding, UnknownSchemeError, error,
)

Role = Literal["name", "alias"]


@dataclass(frozen=True)
class Claim:
    """`token` is defined as a scheme name or an alias in file `path` (as shown) at `line`;
    `owner` is the scheme it names; `scheme` is None when the file did not load."""

    token: str
    role: Role
    path: str
    line: int | None
    owner: str
    scheme: Scheme | None = None

    @property
    def where(self) -> str:
        return self.path if self.line is None else f"{self.path}:{self.line}"

    def describe(self) -> str:
        what = "the scheme name" if self.role == "name" else f"an alias of {self.owner!r}"
        return f"{what} in {self.where}" + (" (a file with errors)" if self.scheme is None
                                              else "")


def scheme_claims(s: Scheme) -> list[Claim]:
    """The tokens a loaded scheme defines: its name, then its aliases."""
    out = [Claim(s.name, "name", str(s.source), s.line("name"), s.name, s)]
    out += [Claim(a, "alias", str(s.source), s.line(f"aliases.{i}"), s.name, s)
            for i, a in enumerate(s.aliases)]
    return out


def _clash(later: Claim, first: Claim) -> Finding:
    field = "name" if later.role == "name" else \
        f"aliases.{later.scheme.aliases.index(later.token)}"  # type: ignore[union-attr]
    if later.role == "name" and first.role == "name":
        msg = (f"scheme name {later.token!r} is already defined in {first.where}; names must "
               "be unique across all scheme directories")
    elif later.role == "name":
        msg = (f"scheme name {later.token!r} is already an alias of {first.owner!r} "
               f"({first.where}); names and aliases share one namespace: rename this scheme "
               "and its file")
    elif first.role == "name":
        msg = (f"alias {later.token!r} is the name of the scheme in {first.where}; pick "
               "another alias")
    else:
        msg = (f"alias {later.token!r} is already an alias of {first.owner!r} "
               f"({first.where}); aliases must be unique")
    return error(later.path, later.line, field, msg)


@dataclass
class NameIndex:
    """Every claim by token (load order), the clean winners, and the clash findings."""

    claims: dict[str, list[Claim]]
    schemes: dict[str, Scheme]  # name -> scheme, for schemes whose file has no error
    aliases: dict[str, str]  # alias -> scheme name, likewise
    clash_findings: list[Finding]


def build_index(claims: Iterable[Claim], bad_files: set[str]) -> NameIndex:
    """Index `claims` (in load order); `bad_files`: files with errors (their schemes stay out
    of the index, their tokens refuse on look-up)."""
    by_token: dict[str, list[Claim]] = {}
    first: dict[str, Claim] = {}
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for c in claims:
        if (c.token, c.path) in seen:
            continue  # a file with errors may claim a token twice (stem and name, alias)
        seen.add((c.token, c.path))
        by_token.setdefault(c.token, []).append(c)
        if c.scheme is None:
            continue
        if c.token in first:
            findings.append(_clash(c, first[c.token]))
        else:
            first[c.token] = c
    bad = bad_files | {f.path for f in findings}
    schemes = {t: c.scheme for t, c in first.items()
               if c.role == "name" and c.path not in bad and c.scheme is not None}
    aliases = {t: c.owner for t, c in first.items() if c.role == "alias" and c.path not in bad}
    return NameIndex(by_token, schemes, aliases, findings)


def lookup(index: NameIndex, token: str, errors: Sequence[Finding],
           notes: Sequence[Finding] = ()) -> Scheme:
    """The one scheme `token` names, else an UnknownSchemeError (or subclass) in one line.

    `errors`: every error finding (to name a broken file's first one); `notes`: problems that
    may explain an unknown name (a missing scheme directory)."""
    found = index.claims.get(token) if isinstance(token, str) else None
    if not found:
        raise UnknownSchemeError(token, unknown_message(token, index, notes))
    if len(found) > 1:
        times = "twice" if len(found) == 2 else f"{len(found)} times"
        later = ", ".join(dict.fromkeys(c.path for c in found[1:]))
        raise AmbiguousSchemeError(
            token, f"{token!r} is defined {times}: as "
                   f"{' and as '.join(c.describe() for c in found)}; a scheme name or alias "
                   f"must be defined once: rename or remove it in {later}")
    c = found[0]
    if resolves(index, token):
        return c.scheme  # type: ignore[return-value]
    mine = [f for f in errors if f.path == c.path]
    first = mine[0] if mine else None
    what = "scheme" if c.role == "name" else f"alias (of {c.owner!r})"
    detail = "" if first is None else ": " + ": ".join(
        ([f"line {first.line}"] if first.line else []) + ([first.field] if first.field else [])
        + [first.message])
    more = f" (and {len(mine) - 1} more)" if len(mine) > 1 else ""
    raise BrokenSchemeError(token, f"{what} {token!r} is defined in {c.path}, which has "
                                   f"errors{detail}{more}; fix it (registry lint {c.path})")


def resolves(index: NameIndex, token: object) -> bool:
    """Whether `lookup` returns a scheme for `token` (one claim, by a file without errors)."""
    found = index.claims.get(token) if isinstance(token, str) else None
    return bool(found) and len(found) == 1 and found[0].scheme is not None and \
        index.schemes.get(found[0].scheme.name) is found[0].scheme


def unknown_message(token: object, index: NameIndex, notes: Iterable[Finding] = ()) -> str:
    """"no scheme or alias named X", with close matches (case-insensitive: names are lower
    case, so `MXFP4` is told `mxfp4`) and any missing scheme directory."""
    known = sorted(index.schemes) + sorted(index.aliases)
    text = str(token)
    by_lower = {k.lower(): k for k in known}
    exact = by_lower.get(text.lower())
    if exact is not None:
        hint = f"; names are lower case: did you mean {exact}?"
    else:
        close = difflib.get_close_matches(text.lower(), list(by_lower), n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else \
            f"; known schemes: {', '.join(sorted(index.schemes)) or '(none)'}"
    note = "".join(f"; note: {f}" for f in notes)
    return f"no scheme or alias named {token!r}{hint}{note}"
