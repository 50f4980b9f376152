"""``mrc-bench --plot FILE.png``: a benchmark's goodput over time with its faults, in the style
every experiment PNG has (:mod:`lab.views.plot`: colours per transport, capacity in grey).

- ``write``: goodput per bin of the ``timeline`` key beside the ``capacity_timeline`` (what
  the fabric could carry for the pair; it falls when a NIC port of either side goes down);
  every stretch below the starting capacity is shaded and labelled as a fault;
- ``incast``: the victim flow alone and beside the incast (``victim.alone_timeline``,
  ``victim.timeline``), each from its own start, with the incast flows' total goodput.

Pure functions of the result JSON, so a saved ``--json`` can be plotted again later:
``python -m lab.views.benchplot run.json run.png``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.proc.analysis import Timeline
from lab.views.plot import COLOURS, LABELS, pyplot, save

FAULT_COLOUR = "#d62728"
LAB_FAULT_COLOUR = "#9467bd"  # the faults of the lab journal (not a NIC port's capacity)


def capacity_steps(
    cap: Sequence[Sequence[float]], end_s: float
) -> list[tuple[float, float, float]]:
    """``[[t, bps], ...]`` (a change at each t) -> ``[(start, end, bps)]`` up to ``end_s``."""
    pts = sorted((float(t), float(c)) for t, c in cap)
    out = []
    for i, (t, c) in enumerate(pts):
        nxt = pts[i + 1][0] if i + 1 < len(pts) else max(end_s, t)
        if nxt > t or i + 1 == len(pts):
            out.append((t, nxt, c))
    return out


def fault_spans(steps: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    """The stretches where the capacity is below where it started: (start, end, bps)."""
    if not steps:
        return []
    full = steps[0][2]
    return [(a, b, c) for a, b, c in steps if c < full and b > a]


def mark_lab_faults(ax: Any, faults: Sequence[dict[str, Any]], end_s: float) -> None:
    """Every fault the lab journaled during the run (``lab_faults``: links, reboots, loss,
    shaping, delay, NIC ports), shaded and named at the top of the plot."""
    for k, f in enumerate(faults):
        a = float(f["start_s"])
        b = float(f["end_s"]) if f.get("end_s") is not None else end_s
        ax.axvspan(a, max(b, a + end_s / 400), color=LAB_FAULT_COLOUR, alpha=0.12, lw=0,
                   label="fault (mrc-lab)" if k == 0 else None)  # fmt: skip
        ax.annotate(f" {f['label']}", (a, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                    color=LAB_FAULT_COLOUR, rotation=90, va="top", ha="left")  # fmt: skip


def rebin(tl: Timeline, k: int, end_s: float | None = None) -> Timeline:
    """Every ``k`` bins as one (a rate averaged over the time each bin covers; the last bin
    of a run covers only up to ``end_s``), so that a bin holds several messages."""
    if k <= 1 or not tl.points:
        return tl
    out = []
    pts = tl.points
    for g in range(0, len(pts), k):
        group = pts[g : g + k]
        num = den = 0.0
        for t, v in group:
            length = tl.bin_s
            if end_s is not None and t + length > end_s:
                length = max(0.0, end_s - t)
            num += v * length
            den += length
        if den > 0:
            out.append((group[0][0], num / den))
    return Timeline(tl.bin_s * k, tuple(out))


def plot_bins(bin_s: float, msg_rate_pps: float | None, per_bin: float = 4.0) -> int:
    """How many timeline bins make one plotted bin: enough for ``per_bin`` messages on
    average (a 256 KiB write at 20 Mb/s takes 100 ms: single bins read 0 or 2x)."""
    if not msg_rate_pps or msg_rate_pps <= 0:
        return 1
    return max(1, math.ceil(per_bin / (msg_rate_pps * bin_s)))


def _series(tl: Timeline) -> tuple[list[float], list[float]]:
    """Stairs as a line: each bin's value held over the bin."""
    xs, ys = [], []
    for t, g in tl.points:
        xs += [t, t + tl.bin_s]
        ys += [g / 1e6, g / 1e6]
    return xs, ys


def write_png(res: dict[str, Any], path: str | Path) -> Path:
    """The PNG of one ``mrc-bench write`` result (needs its ``timeline``)."""

    if not res.get("timeline"):
        raise ValueError("the result has no timeline (mrc-bench write --timeline-ms MS)")
    bin_s = float(res.get("timeline_ms") or 100) / 1000
    tl = Timeline.from_json(res["timeline"], bin_s)
    dur = res.get("duration_s")
    end = float(dur) if dur else tl.end_s
    tl = rebin(tl, plot_bins(bin_s, res.get("msg_rate_pps")), end)
    steps = capacity_steps(res.get("capacity_timeline") or [[0.0, res["capacity_bps"]]], end)
    tr = res.get("transport", "mrc")
    plt = pyplot()
    fig, ax = plt.subplots()
    xs, ys = _series(tl)
    ax.plot(xs, ys, color=COLOURS.get(tr), lw=1.2, label=f"{LABELS.get(tr, tr)} goodput")
    cx = [x for a, b, _c in steps for x in (a, b)]
    cy = [c / 1e6 for _a, _b, c in steps for _ in (0, 1)]
    ax.plot(cx, cy, color=COLOURS["capacity"], lw=1.0, ls="--", label="capacity")
    for k, (a, b, c) in enumerate(fault_spans(steps)):
        ax.axvspan(a, b, color=FAULT_COLOUR, alpha=0.10, lw=0,
                   label="fault: NIC port down" if k == 0 else None)  # fmt: skip
        ax.annotate(f"{c / 1e6:g} Mb/s", (a, c / 1e6), fontsize=7, color=FAULT_COLOUR,
                    va="bottom")  # fmt: skip
    mark_lab_faults(ax, res.get("lab_faults") or [], end)
    ax.set_xlim(0, max(end, 1e-3))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the write started")
    ax.set_ylabel("Mb/s")
    frac = res.get("goodput_fraction")
    ax.set_title(
        f"{LABELS.get(tr, tr)} write {res.get('src')} -> {res.get('dst')}, {res.get('qps')} QP: "
        f"goodput {frac:.2f} of capacity"
        if frac is not None
        else "write"
    )
    ax.legend(fontsize=7, loc="lower right")
    verified = "verified" if res.get("verified") else "NOT verified"
    note = (
        f"lab {res.get('lab')}: {res.get('planes')} planes x "
        f"{(res.get('port_rate_bps') or 0) / 1e6:g} Mb/s, {res.get('switch_mode')} switches; "
        f"{res.get('size')} B messages, {tl.bin_s * 1e3:g} ms bins; {verified}, retransmissions "
        f"{res.get('retransmissions')}, timeouts {res.get('timeouts')}, QP errors "
        f"{res.get('qp_errors')}"
    )
    return save(plt, fig, Path(path), note)


def incast_png(res: dict[str, Any], path: str | Path) -> Path:
    """The PNG of one ``mrc-bench incast`` result: the victim alone and beside the incast."""

    v = res.get("victim") or {}
    if not v.get("timeline") and not v.get("alone_timeline"):
        raise ValueError("the incast has no victim timeline (mrc-bench incast --victim ...)")
    bin_s = float(v.get("timeline_ms") or 100) / 1000
    tr = res.get("transport", "mrc")
    plt = pyplot()
    fig, ax = plt.subplots()
    if v.get("alone_timeline"):
        xs, ys = _series(Timeline.from_json(v["alone_timeline"], bin_s))
        ax.plot(xs, ys, color=COLOURS["capacity"], lw=1.0, label="victim alone")
    if v.get("timeline"):
        xs, ys = _series(Timeline.from_json(v["timeline"], bin_s))
        ax.plot(xs, ys, color=COLOURS.get(tr), lw=1.2, label="victim beside the incast")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since each run started")
    ax.set_ylabel("Mb/s")
    ratio = v.get("ratio")
    ax.set_title(
        f"{LABELS.get(tr, tr)} incast {','.join(res.get('senders') or [])} -> {res.get('dst')}: "
        f"victim {v.get('src')} -> {v.get('dst')}"
        + (f" keeps {ratio:.2f} of its goodput" if ratio is not None else "")
    )
    ax.legend(fontsize=7, loc="lower right")
    note = (
        f"lab {res.get('lab')}, {res.get('qps')} QPs per flow; trims {res.get('trims_total')}, "
        f"drops {res.get('drops_total')}, PFC pauses {res.get('pause_tx_total')}; "
        + ("verified" if res.get("verified") else "NOT verified")
    )
    return save(plt, fig, Path(path), note)


def plot_result(res: dict[str, Any], path: str | Path) -> Path:
    """The PNG of any result that has a timeline (write, incast)."""
    if res.get("scenario") == "incast":
        return incast_png(res, path)
    if res.get("test") == "write":
        return write_png(res, path)
    raise ValueError(f"no plot for {res.get('test') or res.get('scenario')!r} results")


def main(argv: list[str] | None = None) -> int:
    a = sys.argv[1:] if argv is None else argv
    if len(a) != 2:
        print("usage: python -m lab.views.benchplot RESULT.json OUT.png", file=sys.stderr)
        return 2
    res = json.loads(Path(a[0]).read_text())
    print(plot_result(res, a[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
