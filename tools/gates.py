"""Module attributes (a kernel's *_VERIFIED gates, tiles, the config table) set for one
measurement and restored after it, for the benchmark scripts in tools/ (`from gates import
setting`).

Why one helper: a gate is read when a plan is built (a layer's first call of an M bucket), so a
script that times a gate off and on must hold it for the whole of a measurement and put it back
before the next, exception or not; bench_pdl once set it around `prepare` only, so the plans
built later at the first call ran with the gate as shipped (docs/benchmarks.md part 31).
"""
from __future__ import annotations

import argparse
import contextlib
from typing import Any, Iterator


@contextlib.contextmanager
def setting(obj: Any, **values: Any) -> Iterator[None]:
    """obj's attributes set to `values` for the duration (a value of None: left as it is)."""
    kept = {name: getattr(obj, name) for name, v in values.items() if v is not None}
    try:
        for name in kept:
            setattr(obj, name, values[name])
        yield
    finally:
        for name, v in kept.items():
            setattr(obj, name, v)


def open_gates(names: list[str], ap: argparse.ArgumentParser) -> None:
    """Set each named *_VERIFIED gate True for this process, wherever a module of the wgmma
    paths defines it (--open-gates of bench_moe / tune_linear: time a path written without a
    GPU beside the one it would replace); an unknown name is the parser's one-line error."""
    from kernels.triton import moe_wgmma, qdq_plan, wgmma_config, wgmma_gates, wgmma_tiles
    modules = (moe_wgmma, wgmma_gates, wgmma_config, wgmma_tiles, qdq_plan)
    for name in names:
        mods = [m for m in modules if hasattr(m, name)]
        if not mods or not name.endswith("_VERIFIED"):
            ap.error(f"--open-gates {name}: not a *_VERIFIED gate of "
                     f"{', '.join(m.__name__.rsplit('.', 1)[1] for m in modules)}")
        for m in mods:
            setattr(m, name, True)
        print(f"# gate {name} on for this run")


__all__ = ["open_gates", "setting"]
