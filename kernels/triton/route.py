"""How a call of the triton-emulation kernel runs, in words: the strategy, its launch config and
where the activation QDQ runs (`registry bench`'s route column, the tools' variant labels).

Why: linear_configs' table picks a config per M bucket, weight family and layer shape, and a
figure without the config that made it can be neither compared with a sweep's nor explained.
"""
from __future__ import annotations

import dataclasses

from kernels.triton.wgmma_config import WgmmaConfig

# the launch fields every config spells the same way: short prefix, field
_SHORT = (("s", "split"), ("st", "stages"), ("w", "warps"))


def wgmma_words(c: WgmmaConfig) -> str:
    """'64x128 s2 st3 w8 sub2 r128 rep2 tma ws ovl g4 pst x3': tile, split-K, stages, warps,
    then only the parts a config turns on."""
    return (f"{c.block_m}x{c.block_k} s{c.split} st{c.stages} w{c.warps}"
            f"{' fused-act' if c.fuse_act else ''}{' sub2' if c.sub_k == 2 else ''}"
            f"{f' r{c.maxnreg}' if c.maxnreg else ''}{' rep2' if c.rep == 2 else ''}"
            f"{' tma' if c.tma_x else ''}{' ws' if c.ws else ''}{' ovl' if c.overlap else ''}"
            f"{f' g{c.group_m}' if c.group_m != 1 else ''}{' pst' if c.persistent else ''}"
            f"{f' x{c.x_stages}' if c.x_stages else ''}")


def config_words(config: object) -> str:
    """A launch config in words: wgmma's own form; another dataclass config as its tile
    (block_m x block_n x block_k, those it has), s / st / w, then each field away from its
    default; None: ''; anything else (the tiled strategy's tuple) as it prints."""
    if config is None:
        return ""
    if isinstance(config, WgmmaConfig):
        return wgmma_words(config)
    if not dataclasses.is_dataclass(config):
        return str(config)
    fields = dataclasses.fields(config)
    values = {f.name: getattr(config, f.name) for f in fields}
    words = ["x".join(str(values.pop(n)) for n in ("block_m", "block_n", "block_k")
                      if n in values)]
    words += [f"{short}{values.pop(name)}" for short, name in _SHORT if name in values]
    for f in fields:
        if f.name in values and values[f.name] != f.default:
            value = values[f.name]
            words.append(f.name if value is True else f"{f.name}={value}")
    return " ".join(w for w in words if w)


def route_words(strategy: str, config: object, qdq: str = "") -> str:
    """'wgmma 16x128 s2 st5 w4 ovl, QDQ launched first': the strategy, its config and, for
    W*A* layers, where the activation QDQ runs (`qdq`, '' where there is nothing to say)."""
    head = " ".join(w for w in (strategy, config_words(config)) if w)
    return f"{head}, {qdq}" if qdq else head


__all__ = ["config_words", "route_words", "wgmma_words"]
