"""A sweep's variants: the explicit wgmma configs its command lines name (tune_linear's
`--wgmma-specs`, bench_moe's `--wgmma`, wgmma_occupancy's), their printed names, and the order
they are timed in. One module, so that one spec string means one config in all three tools.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.triton.route import wgmma_words  # noqa: E402
from kernels.triton.wgmma_config import WgmmaConfig  # noqa: E402


def forced_spec(spec: str) -> WgmmaConfig:
    """block_m:block_k:split:stages:warps[:maxnreg[:sub_k[:rep[:tma_x[:ws[:overlap[:group_m
    [:persistent[:x_stages]]]]]]]]] -> its WgmmaConfig."""
    try:
        v = [int(t) for t in spec.split(":")]
    except ValueError:
        v = []
    if not 5 <= len(v) <= 14:
        raise ValueError(f"wgmma spec {spec!r}: want 5 to 14 integers, "
                         f"{SPEC_FIELDS}")
    v += [0, 1, 1, 0, 0, 0, 1, 0, 0][len(v) - 5:]  # the optional fields' defaults
    return WgmmaConfig(*v[:4], warps=v[4], maxnreg=v[5], sub_k=v[6], rep=v[7],
                       tma_x=bool(v[8]), ws=bool(v[9]), overlap=bool(v[10]), group_m=v[11],
                       persistent=bool(v[12]), x_stages=v[13])


SPEC_FIELDS = ("block_m:block_k:split:stages:warps"
               "[:maxnreg[:sub_k[:rep[:tma_x[:ws[:overlap[:group_m[:persistent[:x_stages]]]]]]]]]")


def wgmma_name(c: WgmmaConfig) -> str:
    return f"wgmma {wgmma_words(c)}"


def interleaved(variants: list[tuple[str, object]], rounds: int,
                time_one: Callable[[object], dict]) -> list[tuple[str, dict]]:
    """Each variant timed `rounds` times, round r starting at variant r (rotated order), and
    its median kept (`us`: the lower middle of an even count; every round in `us_rounds`).
    Why: in one pass on an H100 (2026-12-07, benchmarks part 36) the table's own config, timed
    first, ran up to 12 % faster than the same config named and timed right after it (5 of 6
    cells), so a fixed order favours whichever variant goes first."""
    runs: list[list[dict]] = [[] for _ in variants]  # by position: two variants may share a name
    for r in range(rounds):
        for i in [(r + j) % len(variants) for j in range(len(variants))]:
            runs[i].append(time_one(variants[i][1]))
    out = []
    for (name, _), got in zip(variants, runs):
        bad = [res for res in got if res.get("us") is None]
        if bad or rounds == 1:
            out.append((name, (bad or got)[0]))
            continue
        us = sorted(res["us"] for res in got)
        out.append((name, {**got[0], "us": us[(len(us) - 1) // 2],
                           "us_rounds": [res["us"] for res in got]}))
    return out
