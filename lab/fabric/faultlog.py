"""The lab's fault journal: every fault `mrc-lab` (or a schedule) applies or undoes is one
JSON line in the lab's run directory (``faults.jsonl``, removed with the lab), so a run that
did not apply it (``mrc-bench write --plot``) can still mark it: :func:`windows` pairs each
fault with its undoing on the run's clock."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

FILE = "faults.jsonl"


def note(run_dir: Path, label: str, on: bool, now_unix: float | None = None) -> None:
    """Record that the fault ``label`` (``link p0-t0-0-p0-t1-0 down``, ``reboot p1-t1-0``, ...)
    began (``on``) or ended. Best effort: a journal that cannot be written loses nothing else."""
    rec = {"t_unix": time.time() if now_unix is None else now_unix, "fault": label, "on": on}
    with contextlib.suppress(OSError):
        run_dir.mkdir(exist_ok=True)  # (a kernel-switch lab has none until now; down removes it)
        with open(run_dir / FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


def windows(run_dir: Path, t0_unix: float, t1_unix: float) -> list[dict[str, Any]]:
    """The faults that overlapped [t0_unix, t1_unix]: ``{"label", "start_s", "end_s"}`` on a
    clock whose 0 is ``t0_unix`` (``end_s`` None: still applied at t1)."""
    try:
        lines = (run_dir / FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    open_at: dict[str, float] = {}
    spans: list[tuple[str, float, float | None]] = []
    for line in lines:
        try:
            rec = json.loads(line)
            label, t, on = str(rec["fault"]), float(rec["t_unix"]), bool(rec["on"])
        except (ValueError, KeyError, TypeError):
            continue  # a torn last line
        if on:
            open_at.setdefault(label, t)
        elif label in open_at:
            spans.append((label, open_at.pop(label), t))
    spans += [(label, t, None) for label, t in open_at.items()]
    out = []
    for label, a, b in sorted(spans, key=lambda s: s[1]):
        if a <= t1_unix and (b is None or b >= t0_unix):
            out.append({"label": label, "start_s": round(max(a - t0_unix, 0.0), 6),
                        "end_s": None if b is None or b > t1_unix else round(b - t0_unix, 6)})  # fmt: skip
    return out
