"""Goodput timelines against capacity (pure): per-bin fractions, the undisturbed level, the
threshold, each fault's dip and the analysis of a run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.proc.analysis.capacity import FaultWindow

THRESHOLD = 0.9
DEFAULT_WARMUP_S = 1.0


@dataclass(frozen=True, slots=True)
class Timeline:
    """Goodput per bin: ``points[i] = (t_start_s, goodput_bps)``, bins ``bin_s`` wide."""

    bin_s: float
    points: tuple[tuple[float, float], ...]

    @classmethod
    def from_json(cls, data: Sequence[Sequence[float]], bin_s: float | None = None) -> Timeline:
        pts = tuple((float(t), float(g)) for t, g in data)
        if bin_s is None:
            gaps = [b[0] - a[0] for a, b in zip(pts, pts[1:], strict=False) if b[0] > a[0]]
            bin_s = statistics.median(gaps) if gaps else 1.0
        if bin_s <= 0:
            raise ValueError("a timeline needs bins of positive width")
        return cls(bin_s, pts)

    def __len__(self) -> int:
        return len(self.points)

    @property
    def end_s(self) -> float:
        return self.points[-1][0] + self.bin_s if self.points else 0.0

    def shifted(self, offset_s: float) -> Timeline:
        """The same bins on a clock that is ``offset_s`` later (t -> t - offset_s)."""
        return Timeline(self.bin_s, tuple((t - offset_s, g) for t, g in self.points))

    def to_json(self) -> list[list[float]]:
        return [[round(t, 4), round(g)] for t, g in self.points]


def sum_timelines(timelines: Sequence[Timeline]) -> Timeline:
    """Bin-wise sum of timelines with the same bin width (aggregate of parallel writers);
    bins are matched by index of ``round(t / bin_s)``."""
    if not timelines:
        return Timeline(1.0, ())
    bin_s = timelines[0].bin_s
    acc: dict[int, float] = {}
    for tl in timelines:
        if not math.isclose(tl.bin_s, bin_s, rel_tol=1e-6):
            raise ValueError("timelines with different bin widths cannot be summed")
        for t, g in tl.points:
            k = round(t / bin_s)
            acc[k] = acc.get(k, 0.0) + g
    return Timeline(bin_s, tuple((k * bin_s, acc[k]) for k in sorted(acc)))


def mean_capacity(
    cap: Callable[[float], float], a: float, b: float, breaks: Iterable[float]
) -> float:
    """Time-weighted mean of a piecewise-constant capacity over [a, b); ``breaks`` are the
    instants where it may change."""
    if b <= a:
        return cap(a)
    cuts = sorted({a, b, *(x for x in breaks if a < x < b)})
    return sum(cap(lo) * (hi - lo) for lo, hi in zip(cuts, cuts[1:], strict=False)) / (b - a)


def bin_fractions(
    tl: Timeline, cap: Callable[[float], float], faults: Sequence[FaultWindow] = ()
) -> list[float]:
    """goodput / capacity per bin (capacity averaged over the bin; 0 capacity -> fraction 1 if
    nothing could flow and nothing did, else inf)."""
    breaks = [x for f in faults for x in (f.start_s, f.end_s) if x is not None]
    out = []
    for t, g in tl.points:
        c = mean_capacity(cap, t, t + tl.bin_s, breaks)
        out.append(g / c if c > 0 else (1.0 if g <= 0 else math.inf))
    return out


def baseline_fraction(
    tl: Timeline,
    fractions: Sequence[float],
    first_fault_s: float | None,
    warmup_s: float = DEFAULT_WARMUP_S,
) -> float | None:
    """Median fraction of the undisturbed part: from ``warmup_s`` after the first bin that
    carried anything, to the bin before the first fault. None when no such bin exists."""
    start = next((t for (t, g) in tl.points if g > 0), None)
    if start is None:
        return None
    lo = start + warmup_s
    hi = math.inf if first_fault_s is None else first_fault_s
    vals = [
        f for (t, _g), f in zip(tl.points, fractions, strict=True) if t >= lo and t + tl.bin_s <= hi
    ]
    return statistics.median(vals) if vals else None


def threshold_fraction(baseline: float | None) -> float:
    """0.9, or 0.9 x the run's own undisturbed level when that is below 0.9 (module doc)."""
    if baseline is None or baseline >= THRESHOLD:
        return THRESHOLD
    return THRESHOLD * max(baseline, 0.0)


@dataclass(frozen=True, slots=True)
class Dip:
    """The effect of one event (a fault, or the repair that undid it) on goodput."""

    label: str
    t_s: float
    capacity_bps: float  # just after the event
    threshold: float  # fraction of capacity that counts as "recovered"
    lowest_fraction: float  # depth: lowest goodput / capacity from t_s to recovery
    lowest_bps: float
    duration_s: float  # below threshold for this long (0: no dip); resolution one bin
    recovered: bool  # back to threshold (held) before the window ended
    window_s: float  # how long after t_s we looked (to the next fault or the run's end)
    bin_s: float
    kind: str = "fault"  # "fault" or "repair"
    observed: bool = True  # False: the timeline had ended before the event

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "kind": self.kind,
            "t_s": round(self.t_s, 3),
            "capacity_bps": round(self.capacity_bps),
            "threshold_fraction": round(self.threshold, 4),
            "lowest_fraction": round(self.lowest_fraction, 4),
            "lowest_bps": round(self.lowest_bps),
            "duration_s": round(self.duration_s, 3),
            "recovered": self.recovered,
            "window_s": round(self.window_s, 3),
            "resolution_s": self.bin_s,
            "observed": self.observed,
        }


def find_dip(
    tl: Timeline,
    fractions: Sequence[float],
    cap: Callable[[float], float],
    t_event: float,
    t_window_end: float,
    threshold: float,
    label: str,
    *,
    kind: str = "fault",
    onset_s: float | None = None,
    hold_bins: int = 2,
) -> Dip:
    """The dip an event at ``t_event`` caused, looking no further than ``t_window_end``."""
    w = tl.bin_s
    onset = max(1.0, 2 * w) if onset_s is None else onset_s
    idx = [i for i, (t, _g) in enumerate(tl.points) if t + w > t_event and t < t_window_end]
    cap_after = cap(t_event)
    window_s = max(0.0, min(t_window_end, tl.end_s) - t_event)
    if not idx:  # the run was over before the event: nothing to say about it
        return Dip(
            label, t_event, cap_after, threshold, 1.0, cap_after, 0.0, False, 0.0, w, kind, False
        )

    def dip(low: int, duration_s: float, recovered: bool) -> Dip:  # its depth: bin ``low``
        return Dip(
            label,
            t_event,
            cap_after,
            threshold,
            fractions[low],
            tl.points[low][1],
            duration_s,
            recovered,
            window_s,
            w,
            kind,
        )

    # a bin at the threshold has recovered, whatever the float rounding of goodput / capacity
    below = [fractions[i] < threshold - 1e-9 for i in idx]
    first_bad = next(
        (k for k, b in enumerate(below) if b and tl.points[idx[k]][0] < t_event + onset), None
    )
    if first_bad is None:  # nothing fell below: the lowest bin near the event is the depth
        near = [i for i in idx if tl.points[i][0] < t_event + onset] or idx[:1]
        low = min(near, key=lambda i: fractions[i])
        return dip(low, 0.0, True)
    rec = None
    k = first_bad
    while k < len(idx):
        if not below[k]:
            run = below[k : k + hold_bins]
            if not any(run):  # held for hold_bins (or to the window's end)
                rec = k
                break
        k += 1
    upto = idx[first_bad : rec if rec is not None else len(idx)]
    low = min(upto, key=lambda i: fractions[i])
    if rec is None:
        return dip(low, window_s, False)
    duration = max(0.0, tl.points[idx[rec]][0] - t_event)
    return dip(low, duration, True)


@dataclass(frozen=True, slots=True)
class RunAnalysis:
    """A timeline with its faults: per-event dips and the whole run's figures."""

    baseline_fraction: float | None
    threshold: float
    mean_fraction: float
    fractions: tuple[float, ...]
    capacities_bps: tuple[float, ...]
    dips: tuple[Dip, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_fraction": None
            if self.baseline_fraction is None
            else round(self.baseline_fraction, 4),
            "threshold_fraction": round(self.threshold, 4),
            "mean_fraction": round(self.mean_fraction, 4),
            "dips": [d.to_dict() for d in self.dips],
        }


def analyse(
    tl: Timeline,
    cap: Callable[[float], float],
    faults: Sequence[FaultWindow],
    *,
    warmup_s: float = DEFAULT_WARMUP_S,
    hold_bins: int = 2,
    repairs: bool = True,
) -> RunAnalysis:
    """Dips of every fault (and, with ``repairs``, of every repair) in ``tl``.

    A fault's window runs to the next fault's start (or the end of the timeline), so a slow
    recovery is seen past its own repair; a repair's window also ends at the next fault. A
    repair that comes while the fault's dip is still open has no dip of its own."""
    fractions = bin_fractions(tl, cap, faults)
    breaks = [x for f in faults for x in (f.start_s, f.end_s) if x is not None]
    caps = tuple(mean_capacity(cap, t, t + tl.bin_s, breaks) for t, _g in tl.points)
    ordered = sorted(faults, key=lambda f: f.start_s)
    first = ordered[0].start_s if ordered else None
    base = baseline_fraction(tl, fractions, first, warmup_s)
    thr = threshold_fraction(base)
    dips: list[Dip] = []
    for n, f in enumerate(ordered):
        nxt = ordered[n + 1].start_s if n + 1 < len(ordered) else tl.end_s
        dip = find_dip(tl, fractions, cap, f.start_s, nxt, thr, f.label, hold_bins=hold_bins)
        dips.append(dip)
        # A repair inside the fault's own dip is part of that dip, not a dip of its own.
        over = dip.recovered and f.start_s + dip.duration_s <= (f.end_s or math.inf)
        if repairs and f.end_s is not None and f.end_s < nxt and over:
            dips.append(
                find_dip(
                    tl,
                    fractions,
                    cap,
                    f.end_s,
                    nxt,
                    thr,
                    f.heal_label or f"{f.label} undone",
                    kind="repair",
                    hold_bins=hold_bins,
                )
            )
    total_cap = sum(caps)
    mean = sum(g for _t, g in tl.points) / total_cap if total_cap > 0 else 0.0
    return RunAnalysis(base, thr, mean, tuple(fractions), caps, tuple(dips))
