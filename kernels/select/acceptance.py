"""Whether a kernel's declared families hold a contract (or, for a qdq kernel, a key), and why.

The one place acceptance is explained: resolve's third step, the matrix's cells and lint all
read `accepts`. Nothing here imports torch or triton.
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

from kernels.spec.contract import QuantKey, SchemeContract
from kernels.spec.platform import Platform

__all__ = ["describe_keys", "accepts"]


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


def accepts(decl, contract: Union[SchemeContract, QuantKey],
            platform: Optional[Platform] = None) -> tuple[bool, str]:
    """Whether a kernel's declared families hold this contract (a qdq kernel: this key), on
    `platform` when given."""
    if decl.kind == "qdq":
        return _accepts_key(decl, contract, platform)
    if not isinstance(contract, SchemeContract):
        return False, (f"a {decl.kind} kernel implements scheme contracts, not the key "
                       f"{contract}")
    w, a = contract.weight, contract.activation
    with_weight, elsewhere = _here([f for f in decl.accepts if w in f.weights], platform)
    if elsewhere:
        return False, f"weight {w}: this kernel implements it only on {elsewhere}, not {platform}"
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


def _here(fams: list, platform: Optional[Platform]) -> tuple[list, str]:
    """(the families of `fams` that run on `platform`, "") — or ([], the platforms they run
    on) when some hold the key but none here. No platform given: all of them."""
    if platform is None or not fams:
        return fams, ""
    here = [f for f in fams if f.runs_on(platform)]
    if here:
        return here, ""
    return [], ", ".join(r for f in fams for r in f.platforms)


def _accepts_key(decl, key, platform: Optional[Platform]) -> tuple[bool, str]:
    if not isinstance(key, QuantKey):
        return False, ("a qdq kernel implements quantization keys, not a scheme contract "
                       "(resolve its activation key with kind='qdq')")
    fams, elsewhere = _here([f for f in decl.accepts if key in f.activations], platform)
    if elsewhere:
        return False, f"key {key}: this kernel implements it only on {elsewhere}, not {platform}"
    if fams:
        return True, f"implements {fams[0].note}"
    if key.is_mx and key.static:
        return False, f"static MX key {key} rejected: MX activation scales are dynamic"
    return False, f"key {key} not implemented (takes {describe_keys(decl.keys)})"
