"""Goodput timelines under faults: capacity that survives, dips, text and PNG rendering.

Pure arithmetic over what ``mrc-bench write --timeline-ms MS --json`` prints (a list of
``[t_s, goodput_bps]``, ``t_s`` the start of each bin, relative to the start of the write) and
a schedule of faults on the lab. Used by ``make demo`` (lab/workloads/demo.py) and ``make bench``
(bench/bench_e2e.py); tested on synthetic timelines in tests/unit/test_timeline*.py.

Definitions (docs/performance.md quotes them):

- **capacity** at time t: what the fabric that survives at t can carry for one flow src ->
  dst. Per plane: ``min(src port, dst port, sum over live T1 j of the T0a-T1j-T0b path)``,
  summed over the planes, each link at the lab's rate. Random loss does not reduce it
  (the links still carry their rate; repairing loss is the transport's job).
  :func:`scaled_capacity` multiplies mrc-bench's own ``capacity_bps`` (the undisturbed
  figure) by the surviving share, so both agree on what "full" is.
- **fraction** of a bin: goodput / time-weighted capacity over the bin.
- **threshold**: 0.9 of capacity (the issue's "back to >= 90% of what the surviving fabric
  can carry"). A run whose own undisturbed level (the median fraction before the first
  fault, after a warm-up) is below 0.9 -- CPU-bound, or a baseline that never reaches line
  rate -- would never "recover" by that rule, so its threshold is 0.9 x its undisturbed
  level instead; the threshold used is reported with every dip.
- **dip** of a fault at t_f: the first bin below threshold that starts within ``onset_s`` of
  t_f opens it; it lasts until the first of ``hold_bins`` consecutive bins at or above the
  threshold. ``lowest_fraction`` (the depth) is the lowest bin fraction from t_f to the
  recovery; ``duration_s`` is the start of that first good bin minus t_f (0 when no bin
  fell below the threshold). Resolution: one bin. A dip still open when the window ends
  (the next fault, or the end of the run) is reported ``recovered: false`` with the time
  until then.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

THRESHOLD = 0.9
DEFAULT_WARMUP_S = 1.0

# --- fabric shape and outages --------------------------------------------------------------

_SWITCH_RE = re.compile(r"^p(\d+)-t([01])-(\d+)$")
_HOST_RE = re.compile(r"^h(\d+)$")


@dataclass(frozen=True, slots=True)
class Shape:
    """The lab's Clos: the part of ``lab.fabric.params.LabParams`` capacity depends on."""

    planes: int
    t0: int
    t1: int
    hosts_per_t0: int
    rate_bps: float

    @classmethod
    def from_params(cls, params: Any) -> Shape:
        """From a ``LabParams`` (or anything with its attribute names)."""
        return cls(params.planes, params.t0, params.t1, params.hosts_per_t0, params.rate_mbit * 1e6)

    @property
    def host_count(self) -> int:
        return self.t0 * self.hosts_per_t0

    def host_t0(self, host: int) -> int:
        return host // self.hosts_per_t0

    @property
    def full_bps(self) -> float:
        """One host's NIC: every plane's port at the link rate."""
        return self.planes * self.rate_bps


class OutageKind(Enum):
    SWITCH = "switch"  # a switch is down (reboot): every link it has is gone
    LINK = "link"  # one link is down (either end)
    PORT = "port"  # a host's NIC port on one plane is down
    LOSS = "loss"  # random loss on a link: capacity unchanged, recorded for the report


@dataclass(frozen=True, slots=True)
class Outage:
    """What a fault removes. ``a``/``b`` are lab node names (``p3-t1-0``, ``h0``); ``plane``
    is the plane of a PORT outage."""

    kind: OutageKind
    a: str
    b: str = ""
    plane: int = -1

    @classmethod
    def switch(cls, node: str) -> Outage:
        return cls(OutageKind.SWITCH, node)

    @classmethod
    def link(cls, a: str, b: str) -> Outage:
        return cls(OutageKind.LINK, a, b)

    @classmethod
    def port(cls, host: str, plane: int) -> Outage:
        return cls(OutageKind.PORT, host, plane=plane)

    @classmethod
    def loss(cls, a: str, b: str) -> Outage:
        return cls(OutageKind.LOSS, a, b)


def _parse_switch(name: str) -> tuple[int, int, int]:
    """``p3-t1-0`` -> (plane 3, tier 1, index 0)."""
    m = _SWITCH_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a switch name (p<plane>-t0-<i> or p<plane>-t1-<j>)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _parse_host(name: str) -> int:
    m = _HOST_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a host name (h<N>)")
    return int(m.group(1))


class _Dead:
    """The elements the active outages remove, in the form the capacity sum asks for."""

    def __init__(self, outages: Iterable[Outage]) -> None:
        self.switches: set[tuple[int, int, int]] = set()
        self.fabric_links: set[tuple[int, int, int]] = set()  # (plane, t0, t1)
        self.host_ports: set[tuple[int, int]] = set()  # (host, plane)
        for o in outages:
            if o.kind is OutageKind.SWITCH:
                self.switches.add(_parse_switch(o.a))
            elif o.kind is OutageKind.PORT:
                self.host_ports.add((_parse_host(o.a), o.plane))
            elif o.kind is OutageKind.LINK:
                self._add_link(o.a, o.b)

    def _add_link(self, a: str, b: str) -> None:
        ha, hb = _HOST_RE.match(a), _HOST_RE.match(b)
        if ha or hb:  # a host link: the same as that host's NIC port on the T0's plane
            host, sw = (a, b) if ha else (b, a)
            plane, _tier, _i = _parse_switch(sw)
            self.host_ports.add((_parse_host(host), plane))
            return
        pa, ta, ia = _parse_switch(a)
        pb, tb, ib = _parse_switch(b)
        if pa != pb or ta == tb:
            raise ValueError(f"{a} - {b} is not a T0-T1 link")
        t0, t1 = (ia, ib) if ta == 0 else (ib, ia)
        self.fabric_links.add((pa, t0, t1))

    def path_up(self, plane: int, t0a: int, t1: int, t0b: int) -> bool:
        return (
            (plane, 1, t1) not in self.switches
            and (plane, t0a, t1) not in self.fabric_links
            and (plane, t0b, t1) not in self.fabric_links
        )


def flow_capacity_bps(shape: Shape, src: int, dst: int, outages: Iterable[Outage] = ()) -> float:
    """What the fabric without ``outages`` can carry for one flow from host src to dst."""
    dead = _Dead(outages)
    ta, tb = shape.host_t0(src), shape.host_t0(dst)
    total = 0.0
    for p in range(shape.planes):
        if (src, p) in dead.host_ports or (dst, p) in dead.host_ports:
            continue
        if (p, 0, ta) in dead.switches or (p, 0, tb) in dead.switches:
            continue
        if ta == tb:
            total += shape.rate_bps
            continue
        live = sum(1 for j in range(shape.t1) if dead.path_up(p, ta, j, tb))
        total += min(shape.rate_bps, live * shape.rate_bps)
    return total


def permutation_pairs(shape: Shape, one_way: bool = False) -> list[tuple[int, int]]:
    """Every host writes to a distinct host under the next T0 (h -> h + hosts_per_t0, wrapping):
    a permutation in which every flow crosses the T1 tier. Needs at least 2 T0s.

    ``one_way``: only the hosts under even T0s write, each to its counterpart under the next
    T0 (T0 0 -> T0 1, T0 2 -> T0 3, ...): no host both sends and receives, and every flow
    still crosses the T1 tier in the same direction, so the uplinks of the sending T0s and
    the downlinks of the receiving ones see every collision a hash makes."""
    if shape.t0 < 2:
        raise ValueError("a permutation across T0s needs at least 2 T0s")
    n = shape.host_count
    if one_way:
        return [
            (h, h + shape.hosts_per_t0)
            for h in range(n)
            if shape.host_t0(h) % 2 == 0 and shape.host_t0(h) + 1 < shape.t0
        ]
    return [(h, (h + shape.hosts_per_t0) % n) for h in range(n)]


def permutation_capacity_bps(shape: Shape, pairs: Sequence[tuple[int, int]]) -> float:
    """What a non-blocking share of the fabric can carry for all ``pairs`` at once: each flow's
    NIC rate, reduced per plane where a T0's uplinks (t1 x rate) carry less than the flows
    leaving it (or its downlinks receive) ask for."""
    per_flow = shape.rate_bps
    total = 0.0
    out_load: dict[int, int] = {}
    in_load: dict[int, int] = {}
    for s, d in pairs:
        if shape.host_t0(s) != shape.host_t0(d):
            out_load[shape.host_t0(s)] = out_load.get(shape.host_t0(s), 0) + 1
            in_load[shape.host_t0(d)] = in_load.get(shape.host_t0(d), 0) + 1
    up = shape.t1 * shape.rate_bps
    for s, d in pairs:
        ta, tb = shape.host_t0(s), shape.host_t0(d)
        if ta == tb:
            total += shape.planes * per_flow
            continue
        share = min(per_flow, up / out_load[ta], up / in_load[tb])
        total += shape.planes * share
    return total


# --- fault schedule -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A fault as it happened: ``start_s`` when it was applied and ``end_s`` when it was undone
    (None: lasted to the end), both on the timeline's clock (seconds from the write's start)."""

    label: str
    start_s: float
    end_s: float | None = None
    outage: Outage | None = None
    heal_label: str = ""

    def active(self, t: float) -> bool:
        return self.start_s <= t and (self.end_s is None or t < self.end_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "start_s": round(self.start_s, 4),
            "end_s": None if self.end_s is None else round(self.end_s, 4),
            "heal_label": self.heal_label,
        }


def capacity_fn(
    shape: Shape, src: int, dst: int, faults: Sequence[FaultWindow], full_bps: float | None = None
) -> Callable[[float], float]:
    """Capacity at time t, scaled so that the undisturbed fabric gives ``full_bps`` (default:
    the arithmetic figure)."""
    base = flow_capacity_bps(shape, src, dst)
    scale = 1.0 if full_bps is None or base == 0 else full_bps / base

    def at(t: float) -> float:
        active = [f.outage for f in faults if f.outage is not None and f.active(t)]
        return flow_capacity_bps(shape, src, dst, active) * scale

    return at


def scaled_capacity(
    shape: Shape, src: int, dst: int, faults: Sequence[FaultWindow], bench_capacity_bps: float
) -> Callable[[float], float]:
    """:func:`capacity_fn` anchored on mrc-bench's ``capacity_bps``."""
    return capacity_fn(shape, src, dst, faults, bench_capacity_bps)


# --- timelines ------------------------------------------------------------------------------


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


# --- text rendering -------------------------------------------------------------------------

BLOCKS = " ▁▂▃▄▅▆▇█"
ASCII_BLOCKS = " .:-=+*#%@"


def can_encode(text: str, encoding: str | None) -> bool:
    try:
        text.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def resample(values: Sequence[float], width: int) -> list[float]:
    """``values`` squeezed (bin means) or stretched (repeated) to ``width`` columns."""
    n = len(values)
    if n == 0 or width <= 0:
        return []
    out = []
    for c in range(width):
        lo = c * n / width
        hi = (c + 1) * n / width
        i0, i1 = int(lo), max(int(lo) + 1, math.ceil(hi))
        chunk = values[i0 : min(i1, n)]
        out.append(sum(chunk) / len(chunk))
    return out


def bars(fractions: Sequence[float], width: int, rows: int = 1, unicode: bool = True) -> list[str]:
    """A bar chart of fractions (0..1, clipped) ``rows`` lines tall, top line first."""
    glyphs = BLOCKS if unicode else ASCII_BLOCKS
    levels = len(glyphs) - 1
    cols = [min(max(f, 0.0), 1.0) * rows * levels for f in resample(fractions, width)]
    lines = []
    for r in range(rows - 1, -1, -1):
        line = []
        for v in cols:
            part = v - r * levels
            line.append(glyphs[levels] if part >= levels else glyphs[max(0, round(part))])
        lines.append("".join(line).rstrip() if r else "".join(line))
    return lines


def marker_line(
    events: Sequence[tuple[float, str]], t_end_s: float, width: int, fill: str = "·"
) -> str:
    """One character per column; ``events`` are (t_s, one-character mark)."""
    line = [fill] * width
    for t, mark in events:
        if t_end_s <= 0:
            continue
        c = min(width - 1, max(0, int(t / t_end_s * width)))
        line[c] = mark
    return "".join(line)


def axis_line(t_end_s: float, width: int, step_s: float | None = None) -> str:
    """Tick labels in seconds under a ``width``-column chart of ``t_end_s`` seconds."""
    if t_end_s <= 0 or width <= 0:
        return ""
    if step_s is None:
        step_s = next(s for s in (1, 2, 5, 10, 20, 30, 60, 120, 300, 600) if t_end_s / s <= 8)
    chars = [" "] * (width + 8)
    t = 0.0
    while t <= t_end_s + 1e-9:
        c = min(width - 1, int(t / t_end_s * width))
        label = f"{t:g}s"
        if all(ch == " " for ch in chars[c : c + len(label) + 1]):
            chars[c : c + len(label)] = label
        t += step_s
    return "".join(chars).rstrip()


def fmt_bps(bps: float) -> str:
    if bps >= 1e9:
        return f"{bps / 1e9:.2f} Gb/s"
    if bps >= 1e6:
        return f"{bps / 1e6:.1f} Mb/s"
    return f"{bps / 1e3:.0f} kb/s"


def describe_dip(d: Dip) -> str:
    """One line: what happened to goodput after an event."""
    if not d.observed:
        return "not observed: the write had ended"
    if d.duration_s == 0:
        what = f"no dip below {d.threshold:.0%}; lowest bin {d.lowest_fraction:.0%}"
    elif d.recovered:
        what = (
            f"dip to {d.lowest_fraction:.0%}, back to >= {d.threshold:.0%} after "
            f"{_fmt_s(d.duration_s)}"
        )
    else:
        what = (
            f"dip to {d.lowest_fraction:.0%}, NOT back to {d.threshold:.0%} within "
            f"{_fmt_s(d.window_s)}"
        )
    return f"{what} (capacity {fmt_bps(d.capacity_bps)})"


def _fmt_s(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


# --- plot -----------------------------------------------------------------------------------


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- aggregation of parallel runs -----------------------------------------------------------


def aggregate(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several mrc-bench --json results run at once -> one: sums of goodput, capacity, bytes,
    the fraction of the sums, all verified, all QP errors; CPU summed."""
    if not results:
        raise ValueError("nothing to aggregate")
    goodput = sum(float(r.get("goodput_bps") or 0) for r in results)
    capacity = sum(float(r.get("capacity_bps") or 0) for r in results)
    cpu = [r.get("cpu_percent") for r in results]
    return {
        "runs": len(results),
        "goodput_bps": goodput,
        "capacity_bps": capacity,
        "goodput_fraction": goodput / capacity if capacity > 0 else 0.0,
        "min_pair_fraction": min(float(r.get("goodput_fraction") or 0) for r in results),
        "verified": all(bool(r.get("verified")) for r in results),
        "qp_errors": sum(int(r.get("qp_errors") or 0) for r in results),
        "bytes": sum(int(r.get("bytes") or 0) for r in results),
        "duration_s": max(float(r.get("duration_s") or 0) for r in results),
        "cpu_percent": sum(float(c) for c in cpu if isinstance(c, int | float)),
        "errors": [e for r in results for e in (r.get("errors") or [])[:2]][:8],
    }


def median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def window_mean_bps(
    timeline: Sequence[Sequence[float]], bin_s: float, lo: float, hi: float,
    offset_s: float = 0.0,
) -> float | None:  # fmt: skip
    """Mean goodput (bit/s) over [lo, hi) from a ``[[t_s, bps], ...]`` timeline whose times
    count from ``offset_s`` (0: the same clock as lo/hi; a write's ``start_unix_s``: unix
    times). Bins that straddle an edge count in proportion; time no bin covers counts as 0.
    None for an empty window."""
    if hi <= lo:
        return None
    bits = 0.0
    for t, g in timeline:
        a = offset_s + t
        ov = min(a + bin_s, hi) - max(a, lo)
        if ov > 0:
            bits += g * ov
    return bits / (hi - lo)


def overlap_aggregate(
    runs: Sequence[tuple[float, float, Sequence[Sequence[float]], float]],
    skip_s: float = 0.0,
    max_len_s: float | None = None,
) -> dict[str, float] | None:
    """Aggregate goodput of writes that ran at the same time, over the window in which all
    of them ran: ``runs`` are (start_unix_s, bin_s, timeline, capacity_bps). Bins that only
    partly overlap the window count in proportion. ``skip_s`` drops the first seconds of the
    window (ramp-up); ``max_len_s`` ends each run that long after its start at the latest (a
    write of --duration S stops posting at S; what completes after is its tail). None when
    the runs never overlapped."""
    if not runs:
        return None
    starts = [s + skip_s for s, _b, _tl, _c in runs]
    ends = [
        s + min(tl[-1][0] + b if tl else 0.0, math.inf if max_len_s is None else max_len_s)
        for s, b, tl, _c in runs
    ]
    lo, hi = max(starts), min(ends)
    if hi <= lo:
        return None
    total_bits = 0.0
    for start, bin_s, tl, _c in runs:
        for t, g in tl:
            a, b = start + t, start + t + bin_s
            ov = min(b, hi) - max(a, lo)
            if ov > 0:
                total_bits += g * ov
    goodput = total_bits / (hi - lo)
    capacity = sum(c for _s, _b, _tl, c in runs)
    return {
        "window_s": hi - lo,
        "window_start_unix_s": lo,
        "start_skew_s": max(starts) - min(starts),
        "goodput_bps": goodput,
        "capacity_bps": capacity,
        "goodput_fraction": goodput / capacity if capacity > 0 else 0.0,
    }
