"""Fuzz tests that own their counts: each declares its share of a module's promise (e.g.
>= 10,000 files) as data, checks its own share when it runs, and the module's tally test checks
only the declaration — so every test passes or fails the same alone, under xdist, `-k` or in
any order (no test reads another's state)."""
from __future__ import annotations

import collections
import math
from typing import Mapping, NamedTuple


class Share(NamedTuple):
    """One fuzz test's part of its module's promise."""
    runs: int  # pytest cases (the test's parametrization)
    cases: int  # cases each of them tries (a loop bound or hypothesis max_examples)
    least: dict  # outcome -> the fewest each pytest case must see
    counted: bool = True  # its cases count toward the promised number of cases


def ran_its_share(shares: Mapping[str, Share], test: str, seen: collections.Counter) -> None:
    """The pytest case of `test` that counted `seen` tried all its cases and met its minimums."""
    share = shares[test]
    assert seen["cases"] == share.cases, (test, dict(seen), share)
    short = {k: (seen[k], n) for k, n in share.least.items() if seen[k] < n}
    assert not short, (test, "seen, least:", short)


def check_declaration(shares: Mapping[str, Share], promise: Mapping[str, int],
                      module_globals: Mapping[str, object], tally_test: str) -> dict:
    """Every test of the module but `tally_test` has a share, each share's `runs` is what its
    parametrization makes, and the shares add up to `promise`; returns the declared totals."""
    fuzz = {name for name in module_globals if name.startswith("test_")} - {tally_test}
    assert fuzz == set(shares), ("fuzz tests without a share:", fuzz - set(shares),
                                 "shares without a test:", set(shares) - fuzz)
    for name, share in shares.items():
        marks = [m for m in getattr(module_globals[name], "pytestmark", [])
                 if m.name == "parametrize"]
        assert math.prod(len(list(m.args[1])) for m in marks) == share.runs, name
    total = {"cases": sum(s.runs * s.cases for s in shares.values() if s.counted)}
    for outcome in promise.keys() - {"cases"}:
        total[outcome] = sum(s.runs * s.least.get(outcome, 0) for s in shares.values())
    assert all(total[k] >= n for k, n in promise.items()), (total, promise)
    return total
