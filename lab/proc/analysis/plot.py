"""Timelines as a PNG: one panel per run, capacity and threshold drawn, faults shaded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lab.proc.analysis.capacity import FaultWindow
from lab.proc.analysis.dips import Timeline
from lab.proc.provenance import stamp


@dataclass(frozen=True, slots=True)
class PlotSeries:
    """One run to plot: its timeline, capacity per bin and threshold."""

    title: str
    timeline: Timeline
    capacities_bps: Sequence[float]
    threshold: float
    faults: Sequence[FaultWindow] | None = None  # this run's own (else the plot's)


def plot_timelines(
    series: Sequence[PlotSeries], faults: Sequence[FaultWindow], path: str, title: str = ""
) -> str:
    """A PNG: one panel per series (goodput, capacity, threshold), faults shaded (each series'
    own when it has them, else ``faults``). Returns path."""
    from mrcnic.optional import agg_pyplot

    plt = agg_pyplot("a timeline plot")

    n = max(1, len(series))
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.8 * n + 0.6), sharex=True, squeeze=False)
    colours = ["tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"]
    for ax, s in zip(axes[:, 0], series, strict=False):
        ts = [t for t, _g in s.timeline.points]
        ys = [g / 1e6 for _t, g in s.timeline.points]
        edges = ts + ([ts[-1] + s.timeline.bin_s] if ts else [])
        if ts:
            ax.stairs(ys, edges, color="tab:blue", label="goodput", linewidth=1.5, baseline=None)
            caps = [c / 1e6 for c in s.capacities_bps]
            ax.stairs(caps, edges, color="black", linewidth=0.8, label="capacity", baseline=None)
            ax.stairs(
                [c * s.threshold for c in caps],
                edges,
                baseline=None,
                color="grey",
                linestyle="--",
                linewidth=0.8,
                label=f"{s.threshold:.0%} of capacity",
            )
        for k, f in enumerate(s.faults if s.faults is not None else faults):
            end = f.end_s if f.end_s is not None else (edges[-1] if ts else f.start_s)
            ax.axvspan(f.start_s, end, color=colours[k % len(colours)], alpha=0.12)
            ax.axvline(f.start_s, color=colours[k % len(colours)], linewidth=1)
            ax.text(
                f.start_s,
                0.02,
                f" {f.label}",
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                color=colours[k % len(colours)],
                rotation=90,
                va="bottom",
            )
        ax.set_ylabel("Mb/s")
        ax.set_title(s.title, fontsize=10, loc="left")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=7)
    axes[-1, 0].set_xlabel("seconds since the write started")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    stamp(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
