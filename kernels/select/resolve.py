"""Resolution: for a contract and a platform, the kernel that implements it, and why not the others.

Each candidate of the platform's ordered list (kernels.select.kernel_table: the built-in
PRIORITY of kernels.select.declarations with plugin kernels placed in it) goes through the same
steps, each giving (ok, reason): disabled? -> runs on this platform? -> accepts this contract
(declared data)? -> fits the layer's shape / dtype (when a shape is given)? The first full
match wins.

Every way the kernel that runs differs from the platform's plain first choice is a `Deviation`
in the result: `fallback` (an emulated kernel won where a kernel native here was listed first),
`forced` (force= / --force skipped the order), `disabled` (a disabled kernel would have run) and
`plugin` (a kernel plugin won). `strict` (or REGISTRY_STRICT=1) turns each of the first three into
a ResolutionError; `log_resolution` logs a layer's deviations once, where the layer is built.
A contract with an activation key is never handed to a weight-only kernel (`accepts`), and
`kernels.base.LinearKernel.prepare` refuses such a pairing too. A broken kernel plugin makes
every resolution refuse with the plugin's one-line error. Nothing here imports torch, nor
the registry: a scheme is anything carrying a contract in `.contract` (and a `.name`), e.g.
registry.contract.Scheme. Deviations are logged on the `registry.resolve` logger (its name
is what users configure: README, tests).
"""
from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Union

from kernels.spec.contract import HasContract, QuantKey, SchemeContract, contract_of
from kernels.spec.env import ENV_STRICT, env_flag
from kernels.spec.platform import Platform, platform_of

__all__ = ["ENV_DISABLED", "REASON_CHARS", "STRICT_KINDS", "LOG", "Candidate", "Deviation",
           "Resolution", "ResolutionError", "describe_keys", "accepts", "env_disabled",
           "check_kernel_names", "cut_reason", "brief_reasons", "resolve", "log_resolution"]

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
    contract: SchemeContract
    kernel: Optional[str]
    fallback: bool
    forced: bool
    candidates: tuple[Candidate, ...]
    disabled: tuple[str, ...] = ()
    deviations: tuple[Deviation, ...] = ()

    @property
    def chosen(self) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.kernel == self.kernel), None)

    def to_dict(self) -> dict:
        act = self.contract.activation
        return {
            "scheme": self.scheme,
            "platform": self.platform,
            "weight": str(self.contract.weight),
            "activation": None if act is None else str(act),
            "kernel": self.kernel,
            "native": bool(self.chosen and self.chosen.native),
            "fallback": self.fallback,
            "forced": self.forced,
            "disabled": list(self.disabled),
            "deviations": [d.to_dict() for d in self.deviations],
            "candidates": [c.to_dict() for c in self.candidates],
        }


class ResolutionError(Exception):
    """Nothing can implement the contract (or strict mode refused a fallback)."""

    def __init__(self, message: str, resolution: Resolution):
        super().__init__(message)
        self.resolution = resolution


def describe_keys(keys: Iterable[Optional[QuantKey]]) -> str:
    """A compact list of key families: 'mxfp4|mxfp8_e4m3 (e8m0/b32, dynamic), none'."""
    groups: dict[tuple, set[str]] = {}
    has_none = False
    for k in keys:
        if k is None:
            has_none = True
            continue
        s = k.scale
        where = f"b{s.block}" if s.granularity == "block" else s.granularity
        groups.setdefault((s.format, where, s.static), set()).add(k.format)
    parts = [f"{'|'.join(sorted(fmts))} ({sf}/{where}, {'static' if st else 'dynamic'})"
             for (sf, where, st), fmts in sorted(groups.items())]
    if has_none:
        parts.append("none (weight-only)")
    return ", ".join(parts)


def accepts(decl, contract: SchemeContract,
            platform: Optional[Platform] = None) -> tuple[bool, str]:
    """Whether a kernel's declared families hold this contract (on `platform`, when given)."""
    w, a = contract.weight, contract.activation
    with_weight = [f for f in decl.accepts if w in f.weights]
    if platform is not None and with_weight:
        here = [f for f in with_weight if f.runs_on(platform)]
        if not here:
            where = ", ".join(r for f in with_weight for r in f.platforms)
            return False, f"weight {w}: this kernel implements it only on {where}, not {platform}"
        with_weight = here
    if not with_weight:
        every = set().union(*(f.weights for f in decl.accepts))
        return False, f"weight {w} not implemented (takes {describe_keys(every)})"
    for fam in with_weight:
        if a in fam.activations:
            return True, f"implements {fam.note}"
    takes = set().union(*(f.activations for f in with_weight))
    if a is None:
        return False, ("weight-only contract (activation none) not implemented: this kernel "
                       f"quantizes activations ({describe_keys(takes)})")
    if a.is_mx and a.static:
        return False, f"static MX activation key {a} rejected: MX activation scales are dynamic"
    if None in takes and len(takes) == 1:
        return False, (f"activation {a} rejected: this kernel is weight-only and would run the "
                       "layer unquantized")
    return False, f"activation {a} not implemented (takes {describe_keys(takes)})"


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
    scheme_or_contract: Union[HasContract, SchemeContract],
    platform: Union[str, Platform, None] = None,
    *,
    strict: bool = False,
    disabled: Iterable[str] = (),
    force: Optional[str] = None,
    shape: Optional[tuple[int, int]] = None,
    act_dtype: Optional[str] = None,
) -> Resolution:
    """Pick the kernel for a scheme (or bare contract) on a platform (None: this machine).

    A scheme is anything carrying a SchemeContract in `.contract` (registry.contract.Scheme);
    its `.name`, when it has one, labels the result and the messages.

    `shape` = (out_features, in_features) checks the kernels' declared limits too. Raises
    ResolutionError listing every candidate's reason when none fits, or in strict mode
    (`strict=True` or REGISTRY_STRICT=1) when the choice is a fallback, was forced, or is not
    the kernel that would run without the disabled ones (`Resolution.deviations` lists each).
    """
    from kernels.select.kernel_table import kernel_table

    contract = contract_of(scheme_or_contract)
    if contract is None:
        raise TypeError(f"resolve() takes a Scheme (anything with a SchemeContract in "
                        f".contract) or a SchemeContract, got {type(scheme_or_contract).__name__}")
    name = None if contract is scheme_or_contract else getattr(scheme_or_contract, "name", None)
    plat = platform_of(platform)
    strict = env_flag(ENV_STRICT) or strict  # read (and checked) even when strict=True
    off = tuple(dict.fromkeys(list(disabled) + list(env_disabled())))
    label = name or str(contract)
    table = kernel_table()
    if table.problems:
        res = Resolution(name, str(plat), contract, None, False, bool(force), (), off)
        raise ResolutionError(f"cannot resolve {label} on {plat}: "
                              + "; ".join(str(p) for p in table.problems), res)
    check_kernel_names(list(disabled), "disabled=", table.names)
    check_kernel_names(env_disabled(), ENV_DISABLED, table.names)
    check_kernel_names([] if force is None else [force], "force=", table.names)

    order = table.candidates_for(plat)
    if force:
        order = (table.entry(force).decl,)
    sources = {e.decl.name: e.source for e in table.entries}
    results: list[Candidate] = []
    chosen: Optional[str] = None
    native_listed_before = False
    fallback = False
    for decl in order:
        native = decl.is_native_on(plat)
        ok, why = _steps(decl, plat, contract, off, shape, act_dtype)
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

    deviations = _deviations(order, plat, contract, shape, act_dtype, chosen, force, fallback,
                             results, sources, off, disabled)
    res = Resolution(name, str(plat), contract, chosen, fallback, bool(force), tuple(results), off,
                     deviations)
    if chosen is None:
        raise ResolutionError(f"no kernel implements {label} on {plat}: "
                              f"{brief_reasons(results) or 'no candidates'}", res)
    refused = [d for d in deviations if d.kind in STRICT_KINDS]
    if strict and refused:
        # Each deviation names the kernel that runs and the switch behind it; `how` adds the fix.
        how = {"fallback": f" (drop --strict / {ENV_STRICT} to allow it)",
               "forced": " (drop --force / force=)", "disabled": ""}
        raise ResolutionError(f"strict mode: {label} on {plat}: "
                              + "; ".join(f"{d}{how[d.kind]}" for d in refused), res)
    return res


def _deviations(order, plat: Platform, contract: SchemeContract, shape, act_dtype,
                chosen: Optional[str], force: Optional[str], fallback: bool,
                results: list[Candidate], sources: dict[str, str], off: tuple[str, ...],
                disabled: Iterable[str]) -> tuple[Deviation, ...]:
    """What made `chosen` differ from the kernel the platform's plain order would pick."""
    if chosen is None:
        return ()
    out = []
    if force:
        out.append(Deviation("forced", f"kernel {force} was forced (force= / --force); the "
                                       f"platform's order was not consulted"))
    if fallback:
        why = brief_reasons(c for c in results if c.native and not c.accepted)
        out.append(Deviation("fallback", f"{chosen} (emulated) runs; native kernels listed "
                                         f"first cannot: {why}"))
    # The plain order's choice differs only if a kernel listed before `chosen` was refused for
    # being disabled and passes every other step: re-check just those.
    before = [d for d in order[:[d.name for d in order].index(chosen)] if d.name in off]
    plain = next((d.name for d in before
                  if _steps(d, plat, contract, (), shape, act_dtype)[0]), None)
    if not force and plain is not None:
        via = "disabled=/--disable" if plain in set(disabled) else ENV_DISABLED
        out.append(Deviation("disabled", f"{plain} would run but is disabled ({via}); "
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


def _steps(decl, plat: Platform, contract: SchemeContract, off: tuple[str, ...],
           shape: Optional[tuple[int, int]], act_dtype: Optional[str]) -> tuple[bool, str]:
    if decl.name in off:
        return False, f"disabled (--disable / {ENV_DISABLED})"
    if not decl.runs_on(plat):
        return False, f"does not run on {plat} (runs on {', '.join(decl.platforms)})"
    ok, why = accepts(decl, contract, plat)
    if not ok:
        return False, why
    if shape is not None:
        ok, lim = decl.check_limits(shape[1], shape[0], act_dtype)
        if not ok:
            return False, lim
    mode = "native" if decl.is_native_on(plat) else "emulated"
    return True, f"{why} ({mode} on {plat})"
