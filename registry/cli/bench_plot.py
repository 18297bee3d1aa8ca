"""The PNG of `registry bench --plot`: bars of each row's ratio to its bf16 baseline, one panel a
shape, grouped along M (linear layers) or T tokens (`--moe`), one colour a (scheme, kernel).

One drawing serves both reports; a `PlotSpec` says which fields are the panels and the x axis
and what 1.0 is. matplotlib is imported here only, when a plot is drawn (the CLI checks that it
imports before any work: registry.cli.bench.require_matplotlib)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class PlotSpec:
    """How a report's rows become panels and bars."""
    x_key: str  # the rows' field along the x axis
    x_name: str  # its name on the ticks
    panel_of: Callable[[dict], tuple]  # a row's panel (its shape)
    panel_title: Callable[[tuple], str]
    baseline: str  # what 1.0 is
    timed: str  # what the ratio divides by


LINEAR = PlotSpec("m", "M", lambda r: (r["n"], r["k"]),
                  lambda p: f"N x K = {p[0]} x {p[1]}", "bf16 F.linear", "the kernel")
MOE = PlotSpec("tokens", "T", lambda r: (r["experts"], r["top_k"], r["n"], r["k"]),
               lambda p: f"E = {p[0]}, top-{p[1]}, N x K = {p[2]} x {p[3]}",
               "bf16 torch._grouped_mm", "the layer (routing included)")


def plot_results(data: dict, path: str, spec: PlotSpec = LINEAR) -> None:
    """Bars of the ratio to bf16 grouped along `spec.x_key`, one panel a shape (stacked), one
    colour a (scheme, kernel); a dashed line at 1 (bf16). A failed row has no bar but its
    status. The legend goes below the panels, sized from the columns it gets."""
    from matplotlib.figure import Figure

    rows = data["rows"]
    panels = list(dict.fromkeys(spec.panel_of(r) for r in rows))
    series = list(dict.fromkeys((r["scheme"], r["kernel"]) for r in rows))
    xs_all = sorted({r[spec.x_key] for r in rows})
    by = {(r["scheme"], r["kernel"], spec.panel_of(r), r[spec.x_key]): r for r in rows}
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    width = min(24.0, max(8.0, 0.22 * len(xs_all) * max(1, len(series)) + 2.0))
    ncol = max(1, min(3, int(width // 5)))
    legend_rows = -(-(len(series) + 1) // ncol)  # (+1: the bf16 line)
    height = 3.6 * max(1, len(panels)) + 0.22 * legend_rows + 1.0
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(max(1, len(panels)), 1, squeeze=False, sharey=True)[:, 0]
    bar = 0.8 / max(1, len(series))
    for ax, panel in zip(axes, panels or [None]):
        for j, (s, kern) in enumerate(series):
            xs = [i - 0.4 + bar * (j + 0.5) for i in range(len(xs_all))]
            got = [by.get((s, kern, panel, x)) for x in xs_all]
            ax.bar(xs, [r["ratio"] if r and r["ratio"] else float("nan") for r in got], bar,
                   label=f"{s} / {kern}", color=f"C{j % 10}",
                   hatch=None if j < 10 else "//")
            for x, r in zip(xs, got):
                if r is not None and r["status"] != "ok":
                    ax.text(x, 1.0, r["status"], rotation=90, ha="center", va="bottom",
                            color="red", fontsize="x-small")
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label=spec.baseline)
        ax.set_xticks(range(len(xs_all)))
        ax.set_xticklabels([f"{spec.x_name}={x}" for x in xs_all])
        ax.set_title(spec.panel_title(panel) if panel is not None else "(no rows)")
        ax.set_ylabel("speed-up over bf16 (x)")
        ax.grid(axis="y", alpha=0.3)
    if ratios and max(ratios) / min(ratios) > 20:
        axes[0].set_yscale("log")
    env = data["environment"]
    fig.suptitle(f"time of {spec.baseline} / time of {spec.timed} (higher is faster)\n"
                 f"{env['device']} ({env['platform']}), torch {env['torch']}, {env['date']}")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize="small")
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.3) / height, 1, 1))  # legend below
    fig.savefig(path, dpi=100, bbox_inches="tight")


__all__ = ["LINEAR", "MOE", "PlotSpec", "plot_results"]
