"""Runs side by side (pure): the aggregate of parallel writes and their overlap window."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any


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
