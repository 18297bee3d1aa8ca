"""tools/sweep_variants.py: the rotated timing order that takes a pass's order bias out."""
from __future__ import annotations

from support.tools import load_tool

sweep_variants = load_tool("sweep_variants")


def order_biased_timer(true_us: dict[str, float], first_bonus: float):
    """A fake GPU: each call's time is its variant's own, less `first_bonus` for the first
    variant timed in a pass (the bias seen on the H100); it records the order it was called."""
    calls: list[str] = []

    def time_one(name: str) -> dict:
        first = not calls or len(calls) % len(true_us) == 0
        calls.append(name)
        return {"us": true_us[name] - (first_bonus if first else 0.0), "err": 0.0}
    return time_one, calls


def test_one_round_is_one_pass_in_the_given_order():
    true_us = {"a": 10.0, "b": 10.0, "c": 12.0}
    time_one, calls = order_biased_timer(true_us, first_bonus=1.5)
    got = sweep_variants.interleaved([(n, n) for n in true_us], 1, time_one)
    assert calls == ["a", "b", "c"]
    assert [n for n, _ in got] == ["a", "b", "c"]
    assert [r["us"] for _, r in got] == [8.5, 10.0, 12.0]  # the bias, as one pass has it
    assert all("us_rounds" not in r for _, r in got)


def test_rotated_rounds_give_equal_configs_equal_medians():
    true_us = {"a": 10.0, "b": 10.0, "c": 12.0}
    time_one, calls = order_biased_timer(true_us, first_bonus=1.5)
    got = dict(sweep_variants.interleaved([(n, n) for n in true_us], 3, time_one))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # each variant went first once: its median is its own time
    assert got["a"]["us"] == got["b"]["us"] == 10.0 and got["c"]["us"] == 12.0
    assert sorted(got["a"]["us_rounds"]) == [8.5, 10.0, 10.0]


def test_variants_of_one_name_keep_their_own_times():
    times = iter([{"us": 1.0}, {"us": 2.0}])
    got = sweep_variants.interleaved([("x", 0), ("x", 1)], 1, lambda call: next(times))
    assert got == [("x", {"us": 1.0}), ("x", {"us": 2.0})]


def test_a_failed_round_is_reported_not_averaged_away():
    results = iter([{"us": 5.0}, {"us": None, "error": "RuntimeError: boom"}, {"us": 5.0}])
    got = sweep_variants.interleaved([("a", "a")], 3, lambda call: next(results))
    assert got == [("a", {"us": None, "error": "RuntimeError: boom"})]
