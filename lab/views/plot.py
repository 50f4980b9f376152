"""One look for every experiment's PNG: MRC and RoCEv2 in the same two colours everywhere, the
paper's figure as a dashed line, titles that state the claim. matplotlib, Agg backend
(no display needed)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.proc.provenance import stamp

COLOURS = {"mrc": "#1f77b4", "rocev2": "#d62728", "rocev2_pfc": "#ff7f0e", "paper": "#555555",
           "capacity": "#999999"}  # fmt: skip
LABELS = {"mrc": "MRC", "rocev2": "RoCEv2", "rocev2_pfc": "RoCEv2 + PFC"}


def pyplot():
    from mrcnic.optional import agg_pyplot

    plt = agg_pyplot("a plot")

    plt.rcParams.update(
        {
            "figure.figsize": (8, 4.2),
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 9,
            "axes.titlesize": 10,
        }
    )
    return plt


def bars(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    *,
    ylabel: str,
    paper: dict[str, float] | None = None,
    note: str = "",
) -> Path:
    """Grouped bars: one group per condition (e.g. loss rate), one bar per transport
    (``series``: transport key -> one value per group); ``paper``: transport key -> the
    published figure, drawn as a dashed line in that transport's colour."""
    plt = pyplot()
    fig, ax = plt.subplots()
    n = max(1, len(series))
    width = 0.8 / n
    for i, (key, vals) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None else 0.0 for v in vals]
        ax.bar(xs, ys, width, label=LABELS.get(key, key), color=COLOURS.get(key))
        for x, v in zip(xs, vals, strict=False):
            ax.annotate("n/a" if v is None else f"{v:.3g}", (x, v or 0.0), ha="center",
                        va="bottom", fontsize=7)  # fmt: skip
    for key, v in (paper or {}).items():
        ax.axhline(v, ls="--", lw=1, color=COLOURS.get(key, COLOURS["paper"]),
                   label=f"paper: {LABELS.get(key, key)} {v:g}")  # fmt: skip
    ax.set_xticks(range(len(groups)), list(groups))
    return finish(plt, fig, ax, title, ylabel, note, path)


def lines(
    path: Path,
    title: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    marks: Sequence[tuple[float, str]] = (),
    note: str = "",
    points: dict[str, tuple[Sequence[float], Sequence[float]]] | None = None,
) -> Path:
    """Time series (``series``: label -> (xs, ys)); transport keys get their colours, and a
    label ending in "control" a dashed line (the run without the fault, beside the one with
    it); ``marks``: (x, text) vertical lines, e.g. faults; ``points``: label -> (xs, ys) as
    crosses, e.g. failed steps."""
    plt = pyplot()
    fig, ax = plt.subplots()
    for key, (xs, ys) in series.items():
        base = key.split(" ")[0]
        label = LABELS.get(base, base) + key[len(base) :]
        ax.plot(list(xs), list(ys), label=label, color=COLOURS.get(base), lw=1.2,
                ls="--" if key.endswith("control") else "-")  # fmt: skip
    for key, (xs, ys) in (points or {}).items():
        if len(xs):
            base = key.split(" ")[0]
            label = LABELS.get(base, base) + key[len(base) :]
            ax.plot(list(xs), list(ys), "x", color=COLOURS.get(base), ms=7, mew=1.5, label=label)
    for x, text in marks:
        ax.axvline(x, ls=":", lw=1, color="#888888")
        ax.annotate(text, (x, ax.get_ylim()[1]), fontsize=7, rotation=90, va="top", ha="right")
    ax.set_xlabel(xlabel)
    return finish(plt, fig, ax, title, ylabel, note, path)


def finish(plt: Any, fig: Any, ax: Any, title: str, ylabel: str, note: str, path: Path) -> Path:
    """What every chart ends with: its labels, legend, footnote, and the file."""
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return save(plt, fig, path, note)


NOTE_CHARS = 150  # a footnote's line, at 7 pt across the default 8-inch figure


def save(plt: Any, fig: Any, path: Path, note: str = "") -> Path:
    """The file, with the date/machine/commit stamp in the corner and ``note`` small and grey
    above it, wrapped so that it stays on the figure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = textwrap.wrap(note, NOTE_CHARS) if note else []
    if lines:
        fig.text(0.01, 0.03, "\n".join(lines), fontsize=7, color="#555555", va="bottom")
    fig.tight_layout(rect=(0, 0.035 + 0.03 * len(lines), 1, 1))  # (the bottom: stamp and note)
    stamp(fig)
    fig.savefig(path)
    plt.close(fig)
    return path
