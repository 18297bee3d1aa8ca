"""Tensor-parallel splits of MX layers: can a layer be cut N ways, and what padding fixes it.

Why: engines (vLLM, SGLang) shard a linear layer column-parallel (the output features N: each
rank holds N/tp whole rows, codes and scales alike) or row-parallel (the input features K: each
rank holds K/tp of every row). An MX row is blocks of 32 elements sharing one E8M0 scale, and
fp4 / fp6 codes share bytes: a row-parallel cut must fall on a block edge, K/tp a multiple of
32 (which also keeps packed bytes whole); a column-parallel cut needs N/tp whole. Which layers
are row-parallel follows the engines' naming (o_proj, down_proj, ...): the rest is
column-parallel. MoE experts split the same way along their [E, N, K] stacks (gate/up: the
intermediate size N; down: K).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from kernels.spec.formats import BLOCK

DEFAULT_TPS: tuple[int, ...] = (1, 2, 4, 8)
#: Module names the engines shard row-parallel (split K); any other linear is column-parallel.
ROW_PARALLEL: tuple[str, ...] = ("o_proj", "down_proj", "out_proj", "fc2", "dense_4h_to_h",
                                 "w2", "wo", "c_proj")


def split_kind(layer: str) -> str:
    """"row" (split K) or "column" (split N) for a layer, by its last name component."""
    last = layer.rsplit(".", 1)[-1]
    return "row" if last in ROW_PARALLEL else "column"


@dataclass(frozen=True)
class SplitCheck:
    """One layer split `tp` ways: ok, or why not and the padded size that fixes it."""

    layer: str
    kind: str  # "row" | "column"
    n: int
    k: int
    tp: int
    ok: bool
    why: str = ""
    pad_to: Optional[int] = None  # the size of the split axis after padding (None: ok)

    def to_dict(self) -> dict:
        return {"layer": self.layer, "split": self.kind, "n": self.n, "k": self.k, "tp": self.tp,
                "ok": self.ok, "why": self.why or None, "pad_to": self.pad_to}

    @property
    def cell(self) -> str:
        """One table cell: "ok" or "pad K 100->128"."""
        if self.ok:
            return "ok"
        axis = "K" if self.kind == "row" else "N"
        size = self.k if self.kind == "row" else self.n
        return f"pad {axis} {size}->{self.pad_to}"


def _ceil_to(value: int, step: int) -> int:
    return -(-value // step) * step


def check_split(layer: str, n: int, k: int, tp: int, kind: Optional[str] = None) -> SplitCheck:
    """Whether an [N, K] MX weight splits `tp` ways as the engines shard `layer`."""
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"--tp: a tensor-parallel size is a positive integer, got {tp!r}")
    kind = kind or split_kind(layer)
    if kind == "row":
        step = BLOCK * tp
        if k % step == 0:
            return SplitCheck(layer, kind, n, k, tp, True)
        why = (f"row-parallel: K={k} / {tp} = {k / tp:g} is not a multiple of the MX block "
               f"{BLOCK} (a cut would split a block and its scale byte)")
        return SplitCheck(layer, kind, n, k, tp, False, why, _ceil_to(k, step))
    if n % tp == 0:
        return SplitCheck(layer, kind, n, k, tp, True)
    why = f"column-parallel: N={n} output rows do not divide by {tp}"
    return SplitCheck(layer, kind, n, k, tp, False, why, _ceil_to(n, tp))


def split_table(layers: Iterable[tuple[str, tuple[int, ...]]],
                tps: Iterable[int] = DEFAULT_TPS) -> list[list[SplitCheck]]:
    """Per layer (name, MX shape [..., N, K]) its checks for every tp in `tps`."""
    tps = tuple(tps)
    return [[check_split(name, shape[-2], shape[-1], tp) for tp in tps]
            for name, shape in layers]


def parse_tps(text: str) -> tuple[int, ...]:
    """"4" or "1,2,4,8" -> the sizes (ValueError naming the bad entry)."""
    sizes = []
    for part in text.split(","):
        try:
            size = int(part)
        except ValueError:
            raise ValueError(f"--tp: {part!r} is not an integer; pass e.g. --tp 4 or "
                             "--tp 1,2,4,8") from None
        if size < 1:
            raise ValueError(f"--tp: {size} is not a positive tensor-parallel size")
        sizes.append(size)
    return tuple(dict.fromkeys(sizes))


__all__ = ["DEFAULT_TPS", "ROW_PARALLEL", "SplitCheck", "check_split", "parse_tps",
           "split_kind", "split_table"]
