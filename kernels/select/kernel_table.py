"""The merged kernel table: the built-in declarations (every kind) plus third-party kernel plugins.

Every reader of kernel declarations (resolve, lint, `registry matrix`, `load_kernel`) goes
through this module, so a plugin kernel resolves, lints, shows in the matrix and runs exactly
like a built-in one.

Plugin contract (docs/plugins.md has a worked example). A distribution declares entry points
in the group `registry.kernels`:

    [project.entry-points."registry.kernels"]
    acme = "acme_kernels.registry:kernels"

The object an entry point names is one of
- a `KernelDecl` (kernels.select.declarations), placed at the default position;
- a `PluginKernel(decl, before="triton-emulation")` or `PluginKernel(decl, after=...)`;
- a list / tuple of those;
- a function taking no arguments that returns any of the above.
Each declaration's `impl` is "package.module:Class", a `kernels.base.LinearKernel` subclass whose
`name` equals the declaration's name, imported only by `load_kernel` (keep the entry-point
module free of torch / triton). Plugins declare linear kernels; `uses` names QDQ kernels.

Placement: a plugin kernel joins the candidate list of each platform it runs on, just before
the named `before` kernel (or just after `after`) when that kernel is a candidate there, and
otherwise just before the reference fallbacks (REFERENCE_FALLBACKS), else at the end.

Plugins load lazily (on the first look-up), once, and are cached. A plugin that fails to import,
raises, returns something that is not a declaration, or declares a kernel name already taken
(built-in or another plugin) is a problem naming the entry point and its distribution: every
look-up then raises `KernelPluginError` with those lines (resolve refuses, lint reports it,
matrix prints it), never silently dropped. REGISTRY_DISABLE_PLUGINS=1 turns plugin loading off.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from kernels.select.declarations import ALL_KERNELS, KINDS, Family, KernelDecl
from kernels.select.declarations import candidates_for as builtin_candidates_for
from kernels.spec.env import ENV_DISABLE_PLUGINS, env_flag
from kernels.spec.platform import Platform

__all__ = ["ENTRY_POINT_GROUP", "BUILTIN", "BUILTIN_MODULE", "REFERENCE_FALLBACKS", "PluginKernel",
           "PluginOrigin", "PluginProblem", "KernelPluginError", "KernelEntry", "KernelTable",
           "kernel_decls", "kernel_by_name", "candidates_for", "source_of", "plugins_enabled",
           "kernel_table", "reset_kernel_table", "load_impl"]

ENTRY_POINT_GROUP = "registry.kernels"
BUILTIN = "built-in"
BUILTIN_MODULE = "kernels.select.declarations"
#: The default plugin position is just before the first of these in a platform's list.
REFERENCE_FALLBACKS: tuple[str, ...] = ("dequant-weight-only", "reference-emulation")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_IMPL = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class PluginKernel:
    """A plugin's declaration and where it goes in each platform's candidate order."""

    decl: KernelDecl
    before: Optional[str] = None  # a kernel name: place just before it where it is listed
    after: Optional[str] = None  # or just after it

    def __post_init__(self) -> None:
        if not isinstance(self.decl, KernelDecl):
            raise TypeError(f"PluginKernel.decl must be a KernelDecl, got "
                            f"{type(self.decl).__name__}")
        if self.before is not None and self.after is not None:
            raise ValueError(f"PluginKernel {self.decl.name!r}: give before= or after=, not both")
        for anchor in (self.before, self.after):
            if anchor is not None and not isinstance(anchor, str):
                raise TypeError(f"PluginKernel {self.decl.name!r}: before= / after= take a "
                                f"kernel name, got {type(anchor).__name__}")


@dataclass(frozen=True)
class PluginOrigin:
    """Where a plugin came from: its distribution and entry point (and the file declaring it)."""

    dist: str
    entry_point: str
    value: str  # "module:attr" as written in entry_points.txt
    path: Optional[str] = None  # the dist-info's entry_points.txt, when it can be found
    line: Optional[int] = None

    def __str__(self) -> str:
        return f"plugin {self.dist} (entry point {self.entry_point})"


@dataclass(frozen=True)
class PluginProblem:
    """One plugin that could not be used, as one line naming it and the fix."""

    origin: PluginOrigin
    message: str  # names the plugin itself

    def __str__(self) -> str:
        return (f"{self.message}; fix or uninstall {self.origin.dist}, or set "
                f"{ENV_DISABLE_PLUGINS}=1 to load no kernel plugins")

    @classmethod
    def of(cls, origin: PluginOrigin, text: str) -> "PluginProblem":
        """A problem with the plugin as a whole: 'kernel plugin D (entry point E = V): text'."""
        return cls(origin, f"kernel plugin {origin.dist} (entry point {origin.entry_point} = "
                           f"{origin.value}): {text}")


class KernelPluginError(Exception):
    """The kernel table is unusable because of broken plugins (one line per problem)."""

    def __init__(self, problems: Sequence[PluginProblem]):
        self.problems = tuple(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of the table: its declaration, its origin (None: built-in), its placement."""

    decl: KernelDecl
    origin: Optional[PluginOrigin] = None
    before: Optional[str] = None
    after: Optional[str] = None

    @property
    def source(self) -> str:
        return BUILTIN if self.origin is None else str(self.origin)


@dataclass(frozen=True)
class KernelTable:
    """Built-in entries first, then plugin entries in (distribution, entry point) order."""

    entries: tuple[KernelEntry, ...]
    problems: tuple[PluginProblem, ...]
    plugins_enabled: bool
    plugins: tuple[PluginOrigin, ...]  # every entry point seen (broken ones too)

    @property
    def names(self) -> tuple[str, ...]:
        """Every kernel name that loaded, all kinds (what --disable may name; problems or not)."""
        return tuple(e.decl.name for e in self.entries)

    def names_of(self, kind: str) -> tuple[str, ...]:
        """The kernel names of one kind."""
        return tuple(e.decl.name for e in self.entries if e.decl.kind == kind)

    def check(self) -> None:
        if self.problems:
            raise KernelPluginError(self.problems)

    def entry(self, name: str) -> KernelEntry:
        self.check()
        for e in self.entries:
            if e.decl.name == name:
                return e
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(self.names)}")

    def candidates_for(self, platform: Platform, kind: str = "linear") -> tuple[KernelDecl, ...]:
        """The platform's built-in order of `kind` with each plugin kernel of that kind that
        runs there inserted."""
        self.check()
        order = list(builtin_candidates_for(platform, kind))
        for e in self.entries:
            if e.origin is None or e.decl.kind != kind or not e.decl.runs_on(platform):
                continue
            names = [d.name for d in order]
            if e.before in names:
                at = names.index(e.before)
            elif e.after in names:
                at = names.index(e.after) + 1
            else:
                at = next((names.index(n) for n in REFERENCE_FALLBACKS if n in names), len(names))
            order.insert(at, e.decl)
        return tuple(order)

    def status(self) -> str:
        """One line: are plugins on, which loaded, which failed."""
        if not self.plugins_enabled:
            return (f"kernel plugins: disabled ({ENV_DISABLE_PLUGINS}="
                    f"{os.environ.get(ENV_DISABLE_PLUGINS, '')}); built-in kernels only")
        if not self.plugins:
            return f"kernel plugins: none installed (entry-point group {ENTRY_POINT_GROUP})"
        bad = {p.origin for p in self.problems}
        parts = [f"{o.dist} (entry point {o.entry_point}){' BROKEN' if o in bad else ''}"
                 for o in self.plugins]
        return f"kernel plugins ({ENTRY_POINT_GROUP}): {', '.join(parts)}"


# --- the public look-ups ------------------------------------------------------------------------

def kernel_decls(kind: Optional[str] = "linear") -> tuple[KernelDecl, ...]:
    """The kernel declarations of `kind` (None: every kind): built-in, then plugins
    (KernelPluginError if one is broken)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kernel kind {kind!r}; kinds: {', '.join(KINDS)}")
    table = kernel_table()
    table.check()
    return tuple(e.decl for e in table.entries if kind is None or e.decl.kind == kind)


def kernel_by_name(name: str) -> KernelDecl:
    """The declaration called `name` (KeyError naming the known kernels if none)."""
    return kernel_table().entry(name).decl


def candidates_for(platform: Platform, kind: str = "linear") -> tuple[KernelDecl, ...]:
    """The ordered candidate list of a platform for `kind`, plugin kernels included."""
    return kernel_table().candidates_for(platform, kind)


def source_of(kernel_name: str) -> str:
    """'built-in' or 'plugin DIST (entry point EP)'."""
    return kernel_table().entry(kernel_name).source


def load_impl(name: str) -> Any:
    """What a kernel's `impl` names, imported: "module" -> the module (a qdq kernel's quantize /
    dequantize / qdq), "module:attr" -> that attribute (a moe kernel's function, a linear
    kernel's class). Cached by Python's module cache."""
    module, _, attr = kernel_table().entry(name).decl.impl.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


# Thread safety: the table is built (plugins imported and called) under _LOCK, so threads that
# ask for it at once wait for ONE build and all get the same table object. Plugin code runs
# while the lock is held: a plugin that looks kernels up while it loads would wait on its own
# thread's lock forever, so that re-entry is refused (_BUILDING) and becomes its plugin problem.
_LOCK = threading.Lock()
_CACHE: dict[bool, KernelTable] = {}
_BUILDING = threading.local()  # .active: this thread is inside _build (running plugin code)
_REENTRY = ("{what} was called while the kernel table is being built: a kernel plugin's entry "
            "point must only return declarations, not look kernels up (kernel_by_name, "
            "candidates_for, load_kernel, resolve) while it loads")


def plugins_enabled() -> bool:
    """False under REGISTRY_DISABLE_PLUGINS=1 (kernels.spec.env.env_flag refuses odd values)."""
    return not env_flag(ENV_DISABLE_PLUGINS)


def _refuse_reentry(what: str) -> None:
    if getattr(_BUILDING, "active", False):
        raise RuntimeError(_REENTRY.format(what=what))


def kernel_table() -> KernelTable:
    """The merged table, built once per value of REGISTRY_DISABLE_PLUGINS and cached; safe
    from many threads (one build, one shared table)."""
    enabled = plugins_enabled()
    _refuse_reentry("kernel_table()")
    with _LOCK:
        table = _CACHE.get(enabled)
        if table is None:
            _BUILDING.active = True
            try:
                table = _CACHE[enabled] = _build(enabled)
            finally:
                _BUILDING.active = False
    return table


def reset_kernel_table() -> None:
    """Forget the cached table (after installing a plugin in a running process, and in tests)."""
    from kernels.select.resolve import clear_resolution_cache

    _refuse_reentry("reset_kernel_table()")
    with _LOCK:
        _CACHE.clear()
    clear_resolution_cache()
    importlib.invalidate_caches()


# --- building the table -------------------------------------------------------------------------

def _build(enabled: bool) -> KernelTable:
    entries = [KernelEntry(d) for d in ALL_KERNELS]
    if not enabled:
        return KernelTable(tuple(entries), (), False, ())
    problems: list[PluginProblem] = []
    origins: list[PluginOrigin] = []
    for ep in _entry_points():
        origin = _origin(ep)
        origins.append(origin)
        found, problem = _load(ep)
        if problem:
            problems.append(PluginProblem.of(origin, problem))
            continue
        for item in found:
            decl, before, after = (item.decl, item.before, item.after) \
                if isinstance(item, PluginKernel) else (item, None, None)
            clash = next((e for e in entries if e.decl.name == decl.name), None)
            if clash is not None:
                other = (f"the built-in kernel of {BUILTIN_MODULE}" if clash.origin is None
                         else f"kernel {decl.name!r} from {clash.origin}")
                problems.append(PluginProblem(origin, f"kernel {decl.name!r} from {origin} "
                                                      f"clashes with {other}; rename one"))
                continue
            entries.append(KernelEntry(decl, origin, before, after))
    names = {e.decl.name for e in entries}
    qdq = {e.decl.name for e in entries if e.decl.kind == "qdq"}
    for e in entries:
        for used in e.decl.uses:
            if e.origin is not None and used not in qdq:
                problems.append(PluginProblem.of(e.origin, (
                    f"kernel {e.decl.name!r} uses {used!r}, which is no QDQ kernel (QDQ "
                    f"kernels: {', '.join(sorted(qdq))})")))
        for anchor in (e.before, e.after):
            if anchor is not None and anchor not in names:
                problems.append(PluginProblem.of(e.origin, (
                    f"kernel {e.decl.name!r} is placed relative to {anchor!r}, which is no "
                    f"known kernel (known: {', '.join(sorted(names))})")))
    return KernelTable(tuple(entries), tuple(problems), True, tuple(origins))


def _entry_points() -> list:
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return sorted(eps, key=lambda ep: (_dist_name(ep), ep.name))


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return (dist.metadata["Name"] if dist is not None else None) or "an unknown distribution"


def _origin(ep: Any) -> PluginOrigin:
    path, line = None, None
    root = getattr(getattr(ep, "dist", None), "_path", None)  # a dist-info directory
    if root is not None:
        file = Path(root) / "entry_points.txt"
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
            path = str(file)
            line = next((i for i, text in enumerate(lines, 1)
                         if text.split("=", 1)[0].strip() == ep.name), None)
        except OSError:
            pass
    return PluginOrigin(_dist_name(ep), ep.name, ep.value, path, line)


def _load(ep: Any) -> tuple[list, Optional[str]]:
    """The plugin's declarations, or a one-line problem."""
    try:
        obj = ep.load()
    except Exception as e:  # third-party code: any failure is the plugin's problem
        return [], f"cannot import it: {type(e).__name__}: {_one_line(e)}"
    if isinstance(obj, type):
        return [], (f"it names a class ({obj.__name__}); an entry point names a "
                    "KernelDecl, a PluginKernel, a list of them or a function returning them "
                    "(the kernel class goes in KernelDecl.impl)")
    if callable(obj):
        try:
            obj = obj()
        except Exception as e:
            return [], f"calling it raised {type(e).__name__}: {_one_line(e)}"
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    if not items:
        return [], f"it declares no kernels (an empty {type(obj).__name__})"
    for item in items:
        problem = _check_item(item)
        if problem:
            return [], problem
    return items, None


def _check_item(item: Any) -> Optional[str]:
    if not isinstance(item, (KernelDecl, PluginKernel)):
        shown = repr(item) if len(repr(item)) <= 60 else repr(item)[:57] + "..."
        return (f"it gave {type(item).__name__} {shown}; expected a KernelDecl, a "
                "PluginKernel, a list of them or a function returning them")
    decl = item.decl if isinstance(item, PluginKernel) else item
    if decl.kind != "linear":
        return (f"kernel {decl.name!r} has kind {decl.kind!r}; kernel plugins declare linear "
                "kernels (kind 'linear'): MoE and QDQ kernels are built in")
    if not isinstance(decl.name, str) or not _NAME.fullmatch(decl.name):
        return (f"kernel name {decl.name!r} is not a plain name (letters, digits, "
                "'.', '_', '-')")
    if not isinstance(decl.impl, str) or not _IMPL.fullmatch(decl.impl):
        return (f"kernel {decl.name!r} has impl {decl.impl!r}; write "
                "'package.module:Class' (a kernels.base.LinearKernel subclass)")
    if not decl.accepts or not all(isinstance(f, Family) for f in decl.accepts):
        return (f"kernel {decl.name!r} must accept at least one contract: "
                "accepts= is a tuple of kernels.select.declarations.Family")
    if not all(isinstance(p, str) for p in decl.platforms) or not decl.platforms:
        return f"kernel {decl.name!r} needs platforms= (requirement strings)"
    return None


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or "(no message)"
