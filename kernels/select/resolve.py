"""Resolution: for a contract (or a key) and a platform, the kernel that implements it, and why
not the others. The one chooser of every kind of kernel: linear, moe and qdq.

Each candidate of the platform's ordered list for the kind (kernels.select.kernel_table: the
built-in orders of kernels.select.declarations with plugin kernels placed in them) goes through
the same steps, each giving (ok, reason): disabled (itself, or a QDQ kernel it `uses`)? -> runs
on this platform (or, where declared, in the Triton interpreter)? -> accepts this contract / key
(declared data, kernels.select.acceptance)? -> fits the layer's shape / dtype (when a shape is
given)? The first full match wins.

Every way the kernel that runs differs from the platform's plain first choice is a `Deviation`
in the result: `fallback` (an emulated kernel won where a kernel native here was listed first),
`forced` (force= / --force / backend= skipped the order), `disabled` (a disabled kernel would
have run) and `plugin` (a kernel plugin won). `strict` (or REGISTRY_STRICT=1) turns each of the
first three into a ResolutionError; `log_resolution` logs a layer's deviations once, where the
layer is built. A contract with an activation key is never handed to a weight-only kernel
(`accepts`), and `kernels.base.LinearKernel.prepare` refuses such a pairing too. A broken
kernel plugin makes every resolution refuse with the plugin's one-line error.

`resolve_cached` is the hot path (kernels.mx and the dispatcher call it per call): the same
answer, kept per (kind, subject, platform, force, and the REGISTRY_DISABLED_KERNELS /
REGISTRY_STRICT / TRITON_INTERPRET values, read each call). Nothing here imports torch, nor the
registry: a scheme is anything carrying a contract in `.contract` (and a `.name`), e.g.
registry.contract.Scheme. Deviations are logged on the `registry.resolve` logger (its name is
what users configure: README, tests).
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Union

from kernels.select.acceptance import accepts, describe_keys
from kernels.select.declarations import KINDS
from kernels.spec.contract import HasContract, QuantKey, SchemeContract, contract_of
from kernels.spec.env import ENV_STRICT, ENV_TRITON_INTERPRET, env_flag, triton_interpreted
from kernels.spec.platform import Platform, platform_of

__all__ = ["ENV_DISABLED", "REASON_CHARS", "STRICT_KINDS", "LOG", "Candidate", "Deviation",
           "Resolution", "ResolutionError", "describe_keys", "accepts", "env_disabled",
           "check_kernel_names", "cut_reason", "brief_reasons", "resolve", "resolve_cached",
           "clear_resolution_cache", "log_resolution"]

ENV_DISABLED = "REGISTRY_DISABLED_KERNELS"
#: Each candidate's reason is cut to this many characters in an error's one line (the
#: Resolution's candidates, and so `--json`, keep every reason whole).
REASON_CHARS = 80

#: Deviation kinds that strict mode refuses (a plugin kernel winning is the user's own choice).
STRICT_KINDS: tuple[str, ...] = ("fallback", "forced", "disabled")
LOG = logging.getLogger("registry.resolve")


@dataclass(frozen=True)
class Candidate:
    kernel: str
    accepted: bool
    reason: str
    native: bool
    source: str = "built-in"  # or "plugin DIST (entry point EP)" (kernels.select.kernel_table)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Deviation:
    """One way the kernel that runs differs from the platform's first choice, and why."""

    kind: str  # "fallback" | "forced" | "disabled" | "plugin"
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Resolution:
    scheme: Optional[str]
    platform: str
    contract: Union[SchemeContract, QuantKey]  # a qdq resolution's subject is its key
    kernel: Optional[str]
    fallback: bool
    forced: bool
    candidates: tuple[Candidate, ...]
    disabled: tuple[str, ...] = ()
    deviations: tuple[Deviation, ...] = ()
    kind: str = "linear"

    @property
    def chosen(self) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.kernel == self.kernel), None)

    def to_dict(self) -> dict:
        if self.kind == "qdq":
            subject = {"key": str(self.contract)}
        else:
            act = self.contract.activation
            subject = {"weight": str(self.contract.weight),
                       "activation": None if act is None else str(act)}
        return {
            "scheme": self.scheme,
            "kind": self.kind,
            "platform": self.platform,
            **subject,
            "kernel": self.kernel,
            "native": bool(self.chosen and self.chosen.native),
            "fallback": self.fallback,
            "forced": self.forced,
            "disabled": list(self.disabled),
            "deviations": [d.to_dict() for d in self.deviations],
            "candidates": [c.to_dict() for c in self.candidates],
        }


class ResolutionError(Exception):
    """Nothing can implement the contract / key (or strict mode refused a deviation)."""

    def __init__(self, message: str, resolution: Resolution):
        super().__init__(message)
        self.resolution = resolution


def env_disabled() -> tuple[str, ...]:
    raw = os.environ.get(ENV_DISABLED, "")
    return tuple(s.strip() for s in raw.split(",") if s.strip())


def check_kernel_names(names: Iterable[str], where: str, known: Iterable[str]) -> None:
    """ValueError (one line) for a kernel name in `where` that no kernel has."""
    known = list(known)
    for k in names:
        if k not in known:
            raise ValueError(f"unknown kernel {k!r} in {where}; known kernels: "
                             f"{', '.join(known)}")


def cut_reason(reason: str, limit: int = REASON_CHARS) -> str:
    """`reason` within `limit` characters: cut before a trailing '(...)' detail it cannot hold
    whole, else at a word, and marked '...'."""
    if len(reason) <= limit:
        return reason
    head = reason[:limit - 3]
    at = head.find(" (", limit // 2)
    while at != -1:
        if head.count("(", at) > head.count(")", at):  # a detail cut open
            return head[:at] + "..."
        at = head.find(" (", at + 2)
    return (head.rsplit(" ", 1)[0] if " " in head[limit // 2:] else head) + "..."


def brief_reasons(candidates: Iterable[Candidate]) -> str:
    """'k1, k2: reason; k3: other reason', each reason cut (cut_reason), kernels with the same
    cut reason named together, so a one-line error stays readable."""
    groups: dict[str, list[str]] = {}
    for c in candidates:
        groups.setdefault(cut_reason(c.reason), []).append(c.kernel)
    return "; ".join(f"{', '.join(kernels)}: {why}" for why, kernels in groups.items())


def resolve(
    scheme_or_contract: Union[HasContract, SchemeContract, QuantKey],
    platform: Union[str, Platform, None] = None,
    *,
    kind: str = "linear",
    strict: bool = False,
    disabled: Iterable[str] = (),
    force: Optional[str] = None,
    shape: Optional[tuple[int, int]] = None,
    act_dtype: Optional[str] = None,
    forced_by: str = "force= / --force",
) -> Resolution:
    """Pick the `kind` kernel ("linear", "moe" or "qdq") for a scheme, a bare contract or (qdq)
    a QuantKey on a platform (None: this machine).

    A scheme is anything carrying a SchemeContract in `.contract` (registry.contract.Scheme);
    its `.name`, when it has one, labels the result and the messages.

    `shape` = (out_features, in_features) checks the kernels' declared limits too. Raises
    ResolutionError listing every candidate's reason when none fits, or in strict mode
    (`strict=True` or REGISTRY_STRICT=1) when the choice is a fallback, was forced, or is not
    the kernel that would run without the disabled ones (`Resolution.deviations` lists each).
    `forced_by` names the switch that set `force` in messages (kernels.mx: "backend=...").
    """
    from kernels.select.kernel_table import kernel_table

    contract, name = _subject(scheme_or_contract, kind)
    plat = platform_of(platform)
    strict = env_flag(ENV_STRICT) or strict  # read (and checked) even when strict=True
    disabled = tuple(disabled)
    off = tuple(dict.fromkeys(disabled + env_disabled()))
    label = name or str(contract)
    table = kernel_table()
    if table.problems:
        res = Resolution(name, str(plat), contract, None, False, bool(force), (), off, (), kind)
        raise ResolutionError(f"cannot resolve {label} on {plat}: "
                              + "; ".join(str(p) for p in table.problems), res)
    check_kernel_names(disabled, "disabled=", table.names)
    check_kernel_names(env_disabled(), ENV_DISABLED, table.names)
    check_kernel_names([] if force is None else [force], "force=", table.names_of(kind))

    order = (table.entry(force).decl,) if force else table.candidates_for(plat, kind)
    sources = {e.decl.name: e.source for e in table.entries}
    req = _Request(contract, plat, kind, off, disabled, force, forced_by, shape, act_dtype,
                   triton_interpreted())
    results, chosen, fallback = _candidates(req, order, sources)
    res = Resolution(name, str(plat), contract, chosen, fallback, bool(force), results, off,
                     _deviations(req, order, chosen, fallback, results, sources), kind)
    _refuse(res, label, strict, forced_by)
    return res


@dataclass(frozen=True)
class _Request:
    """One resolve() call's question: the subject, the platform and the switches in force."""

    contract: Union[SchemeContract, QuantKey]
    plat: Platform
    kind: str
    off: tuple[str, ...]  # every disabled kernel: disabled= and REGISTRY_DISABLED_KERNELS
    disabled: tuple[str, ...]  # disabled= alone (messages name the switch)
    force: Optional[str]
    forced_by: str
    shape: Optional[tuple[int, int]]
    act_dtype: Optional[str]
    interpreted: bool

    def steps(self, decl, off: tuple[str, ...]) -> tuple[bool, str]:
        """_steps for `decl` under this request, with `off` as the disabled kernels."""
        return _steps(decl, self.plat, self.contract, off, self.shape, self.act_dtype,
                      interpreted=self.interpreted)


def _candidates(req: _Request, order, sources: dict[str, str]
                ) -> tuple[tuple[Candidate, ...], Optional[str], bool]:
    """(every kernel of `order` with its verdict, the first that fits or None, whether that one
    is an emulated fallback after a native kernel listed before it)."""
    results: list[Candidate] = []
    chosen: Optional[str] = None
    native_listed_before = False
    fallback = False
    for decl in order:
        native = decl.is_native_on(req.plat)
        ok, why = req.steps(decl, req.off)
        if ok and chosen is None:
            chosen = decl.name
            fallback = native_listed_before and not native
            results.append(Candidate(decl.name, True, why, native, sources[decl.name]))
            continue
        if chosen is not None:
            why = f"not needed: {chosen} was chosen first" if ok else why
        results.append(Candidate(decl.name, False, why, native, sources[decl.name]))
        if chosen is None and native:
            native_listed_before = True
    return tuple(results), chosen, fallback


def _refuse(res: Resolution, label: str, strict: bool, forced_by: str) -> None:
    """Raise ResolutionError when no kernel was chosen, or in strict mode when a deviation
    (fallback / forced / disabled) made the choice."""
    if res.kernel is None:
        what = "kernel" if res.kind == "linear" else f"{res.kind} kernel"
        raise ResolutionError(f"no {what} implements {label} on {res.platform}: "
                              f"{brief_reasons(res.candidates) or 'no candidates'}", res)
    refused = [d for d in res.deviations if d.kind in STRICT_KINDS]
    if strict and refused:
        # Each deviation names the kernel that runs and the switch behind it; `how` adds the fix.
        how = {"fallback": f" (drop --strict / {ENV_STRICT} to allow it)",
               "forced": f" (drop {_FORCE_SWITCHES.get(forced_by, forced_by)})", "disabled": ""}
        raise ResolutionError(f"strict mode: {label} on {res.platform}: "
                              + "; ".join(f"{d}{how[d.kind]}" for d in refused), res)


_FORCE_SWITCHES = {"force= / --force": "--force / force="}  # how the fix is worded


def _subject(value, kind: str) -> tuple[Union[SchemeContract, QuantKey], Optional[str]]:
    """(the contract or key resolved, the scheme's name or None); TypeError for anything else."""
    if kind not in KINDS:
        raise ValueError(f"unknown kernel kind {kind!r}; kinds: {', '.join(KINDS)}")
    if kind == "qdq":
        if not isinstance(value, QuantKey):
            raise TypeError(f"resolve(kind='qdq') takes a QuantKey (the key to quantize), got "
                            f"{type(value).__name__}")
        return value, None
    contract = contract_of(value)
    if contract is None:
        raise TypeError(f"resolve() takes a Scheme (anything with a SchemeContract in "
                        f".contract) or a SchemeContract, got {type(value).__name__}")
    return contract, None if contract is value else getattr(value, "name", None)


def _blocker(decl, off: tuple[str, ...]) -> Optional[str]:
    """The disabled kernel that refuses `decl`: itself, or a QDQ kernel it uses."""
    if decl.name in off:
        return decl.name
    return next((u for u in decl.uses if u in off), None)


def _deviations(req: _Request, order, chosen: Optional[str], fallback: bool,
                results: tuple[Candidate, ...], sources: dict[str, str]
                ) -> tuple[Deviation, ...]:
    """What made `chosen` differ from the kernel the platform's plain order would pick."""
    if chosen is None:
        return ()
    out = []
    if req.force:
        out.append(Deviation("forced", f"kernel {req.force} was forced ({req.forced_by}); the "
                                       f"platform's order was not consulted"))
    if fallback:
        why = brief_reasons(c for c in results if c.native and not c.accepted)
        out.append(Deviation("fallback", f"{chosen} (emulated) runs; native kernels listed "
                                         f"first cannot: {why}"))
    # The plain order's choice differs only if a kernel listed before `chosen` was refused for
    # being disabled (or using a disabled QDQ kernel) and passes every other step: re-check
    # just those.
    before = [d for d in order[:[d.name for d in order].index(chosen)] if _blocker(d, req.off)]
    plain = next((d for d in before if req.steps(d, ())[0]), None)
    if not req.force and plain is not None:
        culprit = _blocker(plain, req.off)
        via = "disabled=/--disable" if culprit in set(req.disabled) else ENV_DISABLED
        what = "is disabled" if culprit == plain.name else f"uses {culprit}, which is disabled"
        out.append(Deviation("disabled", f"{plain.name} would run but {what} ({via}); "
                                         f"{chosen} runs instead"))
    if sources.get(chosen, "built-in") != "built-in":
        out.append(Deviation("plugin", f"{chosen} comes from {sources[chosen]}"))
    return tuple(out)


def log_resolution(res: Resolution, layer: Optional[str] = None) -> None:
    """Log a layer's deviations (WARNING on logger `registry.resolve`); call it once where the
    layer is built or re-resolved, never per call."""
    if res.deviations:
        who = layer or res.scheme or str(res.contract)
        LOG.warning("%s: runs %s on %s: %s", who, res.kernel, res.platform,
                    "; ".join(str(d) for d in res.deviations))


def _steps(decl, plat: Platform, contract, off: tuple[str, ...],
           shape: Optional[tuple[int, int]], act_dtype: Optional[str], *,
           interpreted: Optional[bool] = None) -> tuple[bool, str]:
    blocker = _blocker(decl, off)
    if blocker == decl.name:
        return False, f"disabled (--disable / {ENV_DISABLED})"
    if blocker is not None:
        return False, f"uses {blocker}, which is disabled"
    mode = "native" if decl.is_native_on(plat) else "emulated"
    if not decl.runs_on(plat):
        if not decl.interpreted_on_platform(plat):
            return False, f"does not run on {plat} (runs on {', '.join(decl.platforms)})"
        if not (triton_interpreted() if interpreted is None else interpreted):
            return False, f"runs on {plat} only in the Triton interpreter: set TRITON_INTERPRET=1"
        mode = "in the Triton interpreter"
    ok, why = accepts(decl, contract, plat)
    if not ok:
        return False, why
    if shape is not None:
        ok, lim = decl.check_limits(shape[1], shape[0], act_dtype)
        if not ok:
            return False, lim
    return True, f"{why} ({mode} on {plat})"


# --- the hot path: the same answer, cached -----------------------------------------------------

_CACHE: dict[tuple, Resolution] = {}
_CACHE_LIMIT = 4096  # distinct (kind, subject, platform, switches): far more than any run has


def resolve_cached(subject: Union[SchemeContract, QuantKey], platform: Platform, *,
                   kind: str, force: Optional[str] = None,
                   forced_by: str = "force= / --force") -> Resolution:
    """resolve(subject, platform, kind=, force=) with the environment's switches, remembered per
    (kind, subject, platform, force, REGISTRY_DISABLED_KERNELS, REGISTRY_STRICT, and
    TRITON_INTERPRET when forced): the environment is read on every call (a few dict reads), so a changed
    variable is a new entry, never a stale answer. Refusals are not remembered (they raise
    again); a new entry's deviations are logged once (log_resolution). For per-call choices
    (kernels.mx, the dispatcher); a layer resolves once with `resolve` where it is built."""
    env = os.environ
    # TRITON_INTERPRET decides only for a forced kernel: the platforms' orders list no kernel
    # that runs there only interpreted (kernels.select.declarations, plugin placement)
    key = (kind, subject, platform, force, env.get(ENV_DISABLED), env.get(ENV_STRICT),
           force and env.get(ENV_TRITON_INTERPRET))
    res = _CACHE.get(key)
    if res is None:
        res = resolve(subject, platform, kind=kind, force=force, forced_by=forced_by)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = res
        log_resolution(res, f"{kind} {subject}")
    return res


def clear_resolution_cache() -> None:
    """Forget resolve_cached's answers (kernels.select.kernel_table.reset_kernel_table calls it:
    a new plugin table may answer differently)."""
    _CACHE.clear()
