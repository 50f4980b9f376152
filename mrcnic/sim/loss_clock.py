"""When the endpoints of a simulation first heard of a loss: the virtual time at which each
one's loss counters (NACKs received, retransmissions, ...) first grew at or after a moment
(``since_s``).

Set an instance as a :class:`mrcnic.sim.pump.Pump`'s ``on_pumped``: every change of an
endpoint's ``stats`` (a frame received, a timer fired, frames sent) is followed by a pump at
the same virtual time, so the times are exact.  It only reads the counters: the run is the
same with or without it.
"""

from __future__ import annotations

from typing import Any

#: what it watches by default: QpStats counters (both transports' stats have them)
COUNTERS = ("rx_nacks", "retransmissions", "sack_losses", "timeouts")


class LossClock:
    """Per endpoint (by ``id``) and counter of ``counters``, the first virtual time at or
    after ``since_s`` that the counter grew; growth before ``since_s`` is not a first."""

    def __init__(self, since_s: float = 0.0, counters: tuple[str, ...] = COUNTERS) -> None:
        self.since_s = since_s
        self.counters = counters
        self._seen: dict[int, tuple[int, ...]] = {}
        self.first: dict[int, dict[str, float]] = {}  # id(endpoint) -> counter -> time

    def __call__(self, _host: int, ep: Any, t: float) -> None:
        st = ep.stats
        now = tuple(getattr(st, c) for c in self.counters)
        key = id(ep)
        seen = self._seen.get(key)
        if now == seen:
            return
        self._seen[key] = now
        if t < self.since_s:
            return
        rec = self.first.setdefault(key, {})
        for c, n, before in zip(self.counters, now, seen or (0,) * len(now), strict=True):
            if n > before:
                rec.setdefault(c, t)

    def earliest(self, eps: list[Any], counter: str) -> float | None:
        """The first growth of ``counter`` on any of ``eps``; None when none."""
        ts = [self.first.get(id(ep), {}).get(counter) for ep in eps]
        got = [t for t in ts if t is not None]
        return min(got) if got else None
