"""How every benchmark row (`registry bench`, `--moe`, tools/bench_peer.py) is checked and
filled: one bound, one error formula, one way to say a row raised, one ratio rule."""
from __future__ import annotations

from registry.machine.probe import MATCH_TOL

ERR_TOL = MATCH_TOL  # row-wise ‖out − ref‖ / ‖ref‖ bound, as `registry lint --probe`


def mark_raised(row, step: str, error: Exception) -> None:
    """A row whose `step` ("check" / "timing") raised: ERROR, and what raised in one line."""
    row.status = "ERROR"
    row.notes.append(f"{step} raised {type(error).__name__}: {error}".replace("\n", " "))


def judge(row, out, want, against: str, where: str) -> None:
    """Mark `row` FAIL (never timed) where `out` holds NaN/Inf (the inputs are finite) or
    differs from `want` by more than ERR_TOL row-wise; record the error. Every bench's check."""
    import torch

    if not bool(torch.isfinite(out).all()):
        row.status = "FAIL"
        row.notes.append(f"output holds NaN/Inf on finite input ({where}); not timed")
        return
    row.err = row_error(out, want)
    if not row.err <= ERR_TOL:
        row.status = "FAIL"
        row.notes.append(f"output differs from {against}: max row rel err {row.err:.2e} > "
                         f"{ERR_TOL:.2e} on {where}; not timed")


def row_error(out, want) -> float:
    """max over rows of ‖out − want‖ / ‖want‖ (fp32): the check every benchmark row passes."""
    out, want = out.float(), want.float()
    return float(((out - want).norm(dim=1) / want.norm(dim=1).clamp_min(1e-30)).max())


def fill_ratio(row, base) -> float:
    """The bf16 baseline's times (`base`: `_time_both`'s ms) on a row with its own graph_us /
    eager_us, and `ratio`: graph where both have one, else eager (the baseline's graph failure
    noted once). Returns the kernel time (us) the ratio used. Linear and MoE rows alike."""
    b_graph, b_eager, b_note = base
    row.bf16_graph_us = None if b_graph is None else b_graph * 1e3
    row.bf16_eager_us = b_eager * 1e3
    if row.graph_us is not None and row.bf16_graph_us is not None:
        row.ratio = row.bf16_graph_us / row.graph_us
        return row.graph_us
    row.ratio = row.bf16_eager_us / row.eager_us
    note = f"bf16 baseline: {b_note}"
    if b_note and note not in row.notes:  # the kernel's graph worked, the baseline's not
        row.notes.append(note)
    return row.eager_us
