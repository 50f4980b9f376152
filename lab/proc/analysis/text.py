"""Timelines as text (pure): bars of block characters, fault markers, a time axis, the dip's line."""

from __future__ import annotations

import math
from collections.abc import Sequence

from lab.proc.analysis.dips import Dip

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
