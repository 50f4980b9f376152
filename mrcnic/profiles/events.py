"""EV events a controller receives, and the device's capabilities."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from mrcnic.profiles.evs import EVENT_STATES, STATUS_OF, EvMode, EvStatus
from mrcnic.profiles.limits import (
    EV_BITS,
    MAX_ACK_TIMEOUT,
    MAX_EXP_RETRIES,
    MAX_LINEAR_RETRIES,
    MAX_WIMM_INFLIGHT,
    MAX_WINDOW_UNITS,
    WINDOW_UNIT_PSNS,
)
from mrcnic.transport import cc as _cc
from mrcnic.transport.ev import EvStateChanged


@dataclass(frozen=True, slots=True)
class EvEvent:
    """An EV of a QP changed state as a controller sees it (:class:`EvStatus`).

    ``dropped``: events lost (queue full) between the previous event delivered and this one.
    """

    qpn: int
    profile_id: int | None  # the QP's EV profile, if it was created from one
    ev: int
    plane: int
    status: EvStatus
    previous: EvStatus
    time_s: float
    dropped: int = 0


class EvEventQueue:
    """A controller's queue of :class:`EvEvent` (``Device.ev_event_queue()``).  Bounded: an
    event that finds it full is counted, and the count rides on the next event delivered."""

    def __init__(self, capacity: int = 1024, collect: Callable[[], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._q: deque[EvEvent] = deque()
        self._dropped = 0
        self._collect = collect  # moves pending events in (the device's QPs)

    def offer(
        self, qpn: int, profile_id: int | None, mask: frozenset[EvStatus], e: EvStateChanged
    ) -> None:
        """Queue ``e`` if its controller-visible status changed and ``mask`` asks for it."""
        new, old = STATUS_OF[e.new], STATUS_OF[e.old]
        if new is old or new not in mask:
            return
        if len(self._q) >= self.capacity:
            self._dropped += 1
            return
        ev = EvEvent(qpn, profile_id, e.ev, e.plane, new, old, e.time_s, self._dropped)
        self._dropped = 0
        self._q.append(ev)

    def poll(self, max_entries: int = 64) -> list[EvEvent]:
        """Up to ``max_entries`` events, oldest first."""
        if self._collect is not None:
            self._collect()
        q = self._q
        return [q.popleft() for _ in range(min(max_entries, len(q)))]

    def __len__(self) -> int:
        return len(self._q)


# -- what this implementation supports (libmrc's device query) ---------------------------------


@dataclass(frozen=True, slots=True)
class Capabilities:
    ev_modes: tuple[EvMode, ...]
    ev_bits: int
    event_states: tuple[EvStatus, ...]
    cc_algorithms: tuple[str, ...]
    window_unit_psns: int
    max_window_units: int
    max_wimm_inflight: int
    max_ack_timeout: int
    max_linear_retries: int
    max_exp_retries: int
    edit_online: bool  # profiles can be edited while ONLINE
    replace_live_ev: bool  # a live QP's EV can be replaced
    precise_drop_count: bool  # EvEvent.dropped is a count, not a flag


def capabilities() -> Capabilities:
    return Capabilities(
        ev_modes=tuple(EvMode),
        ev_bits=EV_BITS,
        event_states=tuple(sorted(EVENT_STATES, key=lambda s: s.name)),
        cc_algorithms=tuple(_cc.available()),
        window_unit_psns=WINDOW_UNIT_PSNS,
        max_window_units=MAX_WINDOW_UNITS,
        max_wimm_inflight=MAX_WIMM_INFLIGHT,
        max_ack_timeout=MAX_ACK_TIMEOUT,
        max_linear_retries=MAX_LINEAR_RETRIES,
        max_exp_retries=MAX_EXP_RETRIES,
        edit_online=False,
        replace_live_ev=False,
        precise_drop_count=True,
    )
