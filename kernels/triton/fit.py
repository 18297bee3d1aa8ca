"""Launch configs that fit the device they run on.

A tile config measured on one GPU can ask for more shared memory than another device (or
another activation dtype: fp32 operands take twice the bytes of bf16) has. Guessing the
compiler's shared-memory use from the tile sizes is fragile, so the compiler's own count
decides: a launch whose kernel needs more than the device's per-block limit fails in Triton's
loader with `OutOfResources` before anything runs, and `launch_fitting` then retries with the
next smaller config (fewer pipeline stages first, then narrower tiles) until one fits. The
config that fitted is remembered per (kernel, device, specialization key), so the search runs
once; the choice is a pure function of the device and the key, so results stay deterministic
run to run. Under the interpreter nothing is limited and the first config always runs.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable, Hashable, Iterator, Optional, TypeVar

from triton.runtime.errors import OutOfResources

C = TypeVar("C", bound=Hashable)
_FITTED: dict[tuple, Any] = {}
_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """An output-tile kernel's launch config: block sizes, warps, pipeline stages."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


def smaller_configs(config: C, *, stages: str, blocks: tuple[tuple[str, int], ...]) -> Iterator[C]:
    """The configs to try after `config`, largest first: its pipeline stages down to 1, then
    each block field of `blocks` (name, smallest value) halved in turn (stages back to the
    original), as long as it stays >= its smallest value. `config`: a frozen dataclass."""
    first_stages = getattr(config, stages)
    current = config
    while True:
        for s in range(first_stages - 1, 0, -1):
            yield dataclasses.replace(current, **{stages: s})
        for name, smallest in blocks:
            if getattr(current, name) // 2 >= smallest:
                current = dataclasses.replace(current, **{name: getattr(current, name) // 2,
                                                          stages: first_stages})
                yield current
                break
        else:
            return


def launch_fitting(kernel_name: str, key: Hashable, config: C, launch: Callable[[C], Any],
                   smaller: Callable[[C], Iterator[C]]) -> C:
    """Run `launch(config)`, or the first config of `smaller(config)` that fits the device's
    shared memory (see the module docstring); returns the config that ran. When none fits,
    a one-line ValueError names the kernel, the config tried last and the shortfall."""
    memo = (kernel_name, key, config)
    cfg = _FITTED.get(memo, config)
    candidates: Optional[Iterator[C]] = None
    while True:
        try:
            launch(cfg)
        except OutOfResources as err:
            candidates = candidates or smaller(config)
            nxt = _next_after(candidates, cfg)
            if nxt is None:
                raise ValueError(f"{kernel_name}: no launch config fits this device ({err}); the "
                                 f"smallest tried was {cfg}") from err
            cfg = nxt
            continue
        with _LOCK:
            _FITTED[memo] = cfg
        return cfg


def _next_after(candidates: Iterator[C], current: C) -> Optional[C]:
    for cand in candidates:
        if cand != current:
            return cand
    return None


def k_slices(tiles: int, split: int) -> tuple[int, int]:
    """(slices, K tiles per slice) for `tiles` K tiles cut `split` ways at most: no slice is
    left empty (7 tiles asked in 4 slices: 4 slices of 2, the last of 1)."""
    split = max(1, min(split, tiles))
    per_slice = -(-tiles // split)
    return -(-tiles // per_slice), per_slice


def fitted_configs() -> dict[tuple, Any]:
    """A copy of what was fitted so far: {(kernel, key, asked config): config that ran}."""
    with _LOCK:
        return dict(_FITTED)


__all__ = ["TileConfig", "fitted_configs", "k_slices", "launch_fitting", "smaller_configs"]
