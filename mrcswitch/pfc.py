"""Priority flow control for one switch: what to send and when to stop sending (sans-I/O),
and :class:`PfcHandler`, which does the switch's PFC I/O.

Three sans-I/O parts, each a small state machine driven by the switch (``now_s`` is passed
in, none of them reads a clock or touches a socket):

- :class:`IngressPfc`, per ingress port: the bytes of the lossless priority that came in on
  this port and sit in any egress queue of the switch. Above ``xoff_bytes`` the port asks its
  upstream neighbour to pause (a PFC frame with ``pause_quanta``), and asks again before that
  pause runs out while still above ``xon_bytes``; at or below ``xon_bytes`` it sends the
  resume (time 0). The transitions are the table ``INGRESS_TABLE`` (h11's style).
- :class:`EgressPause`, per egress port: a PFC frame received on the port pauses the
  lossless priority's transmission until ``now + quanta x 512 bit times`` at the port's rate;
  a time of 0 resumes it. ``paused_s`` accumulates the time spent paused.
- the **watchdog** (in :class:`EgressPause`): a priority paused without a break for longer
  than ``watchdog_s`` (a peer that stopped draining: a pause storm) is released and PFC
  frames on that port are ignored for ``watchdog_restore_s``, counted in ``watchdog_trips``,
  as switch vendors' PFC watchdogs do.

Headroom: between the moment a port crosses XOFF and the moment the upstream sender stops,
more bytes arrive; the lossless class must have room for them or it drops
(``lossless_drops``, which must stay 0). :func:`mrcnic.wire.pfc.headroom_bytes` sizes it from the link's
rate, the one-way delay and the lab's reaction time (a software switch or NIC wakes, reads
the PFC frame and stops its pacer: milliseconds on a loaded machine, not the microseconds of
silicon), plus a maximum frame in flight at each end.

:class:`PfcHandler` holds them (:class:`SwitchPfc`) and the switch's data path: it pauses and
resumes the egress queues and sends the PAUSE / resume frames on the ports.
"""

from __future__ import annotations

import logging
from collections.abc import MutableSequence, Sequence
from enum import Enum
from typing import TYPE_CHECKING

from mrcnic.io.pfc import PortPause
from mrcnic.wire import pfc as wire_pfc

from .config import PfcConfig

if TYPE_CHECKING:  # annotations only: the state machines import nothing of the data path
    from .datapath import DataPath
    from .port import Port

log = logging.getLogger("mrc-switch")

#: while a port asks for a pause or is paused, the switch looks this often (pause refresh,
#: watchdog); otherwise only XOFF/XON crossings reach Python
PFC_TICK_NS = 10_000_000
NEVER_NS = 1 << 62  # a due time that never comes


class IngressState(Enum):
    XON = "xon"  # the upstream may send
    XOFF = "xoff"  # the upstream was asked to pause


class Action(Enum):
    NONE = "none"
    PAUSE = "pause"  # send a PFC frame with pause_quanta for the priority
    RESUME = "resume"  # send a PFC frame with time 0 for the priority


def _ingress_next(
    state: IngressState, above_xoff: bool, at_or_below_xon: bool, pause_expiring: bool
) -> tuple[IngressState, Action]:
    if state is IngressState.XON:
        return (IngressState.XOFF, Action.PAUSE) if above_xoff else (state, Action.NONE)
    if at_or_below_xon:
        return IngressState.XON, Action.RESUME
    if pause_expiring:  # still congested and the pause asked for runs out: ask again
        return state, Action.PAUSE
    return state, Action.NONE


_B = (False, True)
#: (state, above xoff, at or below xon, pause running out) -> (next state, action)
INGRESS_TABLE: dict[tuple[IngressState, bool, bool, bool], tuple[IngressState, Action]] = {
    (st, a, b, e): _ingress_next(st, a, b, e)
    for st in IngressState
    for a in _B
    for b in _B
    for e in _B
}


class IngressPfc:
    """One ingress port's lossless bytes and the pause it asks of its upstream."""

    __slots__ = ("cfg", "pause_s", "queued_bytes", "state", "pause_tx", "_refresh_at")

    def __init__(self, cfg: PfcConfig, rate_bps: float) -> None:
        self.cfg = cfg
        # a pause asked for lasts this long; asked again at half of it while still congested
        self.pause_s = wire_pfc.pause_s(cfg.pause_quanta, rate_bps)
        self.queued_bytes = 0
        self.state = IngressState.XON
        self.pause_tx = 0  # PFC frames sent, pauses and resumes
        self._refresh_at = 0.0

    def admit(self, nbytes: int) -> bool:
        """A lossless frame that came in on this port wants queueing: False if even the
        headroom is full (a lossless drop, which correct sizing never lets happen)."""
        if self.queued_bytes + nbytes > self.cfg.xoff_bytes + self.cfg.headroom_bytes:
            return False
        self.queued_bytes += nbytes
        return True

    def left(self, nbytes: int) -> None:
        """A lossless frame that came in on this port left its egress queue (sent or
        dropped there)."""
        self.queued_bytes = max(0, self.queued_bytes - nbytes)

    def step(self, now_s: float) -> Action:
        """What to send upstream now (call after admit/left and on the switch's tick)."""
        key = (
            self.state,
            self.queued_bytes > self.cfg.xoff_bytes,
            self.queued_bytes <= self.cfg.xon_bytes,
            now_s >= self._refresh_at,
        )
        self.state, action = INGRESS_TABLE[key]
        if action is Action.PAUSE:
            self._refresh_at = now_s + self.pause_s / 2
        if action is not Action.NONE:
            self.pause_tx += 1
        return action

    def not_sent(self, action: Action) -> None:
        """The frame ``step`` asked for could not be sent (its port is down): uncount it; a
        pause is asked for again at the next step."""
        self.pause_tx -= 1
        if action is Action.PAUSE:
            self._refresh_at = 0.0

    def frame(self, src_mac: bytes, action: Action) -> bytes:
        """The PFC frame for ``action`` (PAUSE or RESUME) from this port's MAC."""
        q = self.cfg.pause_quanta if action is Action.PAUSE else 0
        return wire_pfc.encode_pause(src_mac, {self.cfg.priority: q})


class EgressPause(PortPause):
    """A switch egress port's :class:`mrcnic.io.pfc.PortPause`, from the switch's config."""

    __slots__ = ()

    def __init__(self, cfg: PfcConfig, rate_bps: float) -> None:
        super().__init__(rate_bps, cfg.priority, cfg.watchdog_s, cfg.watchdog_restore_s)


def port_stats(ingress: IngressPfc, egress: EgressPause, lossless_drops: int) -> dict:
    """The ``pfc`` block of a port's stats (a contract: docs/switch.md)."""
    return {
        "pause_tx": ingress.pause_tx,
        "pause_rx": egress.pause_rx,
        "paused_s": round(egress.paused_s, 6),
        "lossless_drops": lossless_drops,
        "watchdog_trips": egress.watchdog_trips,
    }


class SwitchPfc:
    """A switch's PFC, sans-I/O: per port its :class:`IngressPfc` (what it asks of its
    upstream, from ``in_bytes``: the lossless bytes that came in on it and sit in any of the
    switch's queues, kept by the queues) and its :class:`EgressPause` (what its downstream
    asked of it). ``xoff``: per port 1 while its upstream is asked to pause (the C loop
    reads it to report only crossings). :class:`PfcHandler` does the I/O: it sends the frames
    :meth:`step` returns and sets each queue's ``paused_until_ns``."""

    __slots__ = ("cfg", "in_bytes", "xoff", "ingress", "egress", "_paused")

    def __init__(
        self, cfg: PfcConfig, rates_bps: Sequence[float], in_bytes: MutableSequence[int],
        xoff: MutableSequence[int],
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.in_bytes = in_bytes
        self.xoff = xoff
        self.ingress = [IngressPfc(cfg, r) for r in rates_bps]
        self.egress = [EgressPause(cfg, r) for r in rates_bps]
        self._paused: set[int] = set()  # ports whose egress a PAUSE may still hold

    def step(self, now_ns: int) -> list[tuple[int, Action]]:
        """The ports whose upstream must be sent a PAUSE or a resume now."""
        now_s = now_ns / 1e9
        out: list[tuple[int, Action]] = []
        in_bytes, xoff = self.in_bytes, self.xoff
        for i, ing in enumerate(self.ingress):
            ing.queued_bytes = in_bytes[i]
            action = ing.step(now_s)
            if action is not Action.NONE:
                out.append((i, action))
            xoff[i] = 1 if ing.state is IngressState.XOFF else 0
        return out

    def crossing(self) -> bool:
        """Whether some port's lossless bytes crossed XOFF (while XON) or fell to XON (while
        XOFF): what the C loop checks (MRC_SW_PFC), so :meth:`step` runs only then (and on
        the switch's PFC tick, which refreshes pauses), not on every wake-up."""
        on_, off = self.cfg.xon_bytes, self.cfg.xoff_bytes
        return any(
            (b <= on_) if x else (b > off) for b, x in zip(self.in_bytes, self.xoff, strict=False)
        )

    def on_frame(self, port: int, frame: bytes | bytearray, now_ns: int) -> int | None:
        """A PFC frame came in on ``port``: its queue's new ``paused_until_ns`` (0: not
        paused), or None if the frame does not name the lossless priority."""
        if not self.egress[port].receive(frame, now_ns / 1e9):
            return None
        return self.paused_until_ns(port, now_ns)

    def paused_until_ns(self, port: int, now_ns: int) -> int:
        """When ``port``'s pause ends (0: not paused); runs the watchdog."""
        ep = self.egress[port]
        if ep.paused(now_ns / 1e9):
            self._paused.add(port)
            return round(ep.paused_until * 1e9)
        self._paused.discard(port)
        return 0

    def paused_ports(self) -> list[int]:
        return sorted(self._paused)

    def due_ns(self, now_ns: int) -> int | None:
        """When to look again (pause refresh, watchdog), or None while nothing is asked or
        paused."""
        if self._paused or any(self.xoff):
            return now_ns + PFC_TICK_NS
        return None

    def port_stats(self, port: int, lossless_drops: int) -> dict:
        return port_stats(self.ingress[port], self.egress[port], lossless_drops)


class PfcHandler:
    """A switch's PFC I/O around its :class:`SwitchPfc` (``state``): PFC frames that came in
    pause or resume a queue's lossless class, and the PAUSE / resume frames ``state`` calls
    for go out on the ports' send sockets. ``due_ns``: when :meth:`tick` has work next
    (pause refresh, watchdog)."""

    __slots__ = ("state", "path", "due_ns")

    def __init__(self, state: SwitchPfc, path: DataPath) -> None:
        self.state = state
        self.path = path
        self.due_ns = NEVER_NS

    def on_frame(self, p: Port, f: bytearray, now: int) -> None:
        """A PFC frame came in on ``p``: pause (or resume) the lossless class of its queue."""
        until = self.state.on_frame(p.index, f, now)
        if until is not None:
            self.set_paused(p, until, now)

    def set_paused(self, p: Port, until_ns: int, now: int) -> None:
        q = p.queue
        if q.paused_until_ns == until_ns:
            return
        q.paused_until_ns = until_ns
        path = self.path
        if path.planner is not None:
            if until_ns > now:
                path.planner.budget[p.index] = -1  # nothing may leave at once while paused
            else:
                path.refresh_budget(p, now)
        if len(q):
            path.queued.add(p)
        self._note_due(now)

    def _note_due(self, now: int) -> None:
        due = self.state.due_ns(now)
        self.due_ns = NEVER_NS if due is None else due

    def step(self, now: int) -> None:
        """Send the PAUSE / resume frames the in-ports' lossless bytes call for."""
        pfc = self.state
        ports = self.path.ports
        for i, action in pfc.step(now):
            p = ports[i]
            ing = pfc.ingress[i]
            try:
                if p.tx_sock is None or not p.up or p.mac is None:
                    raise OSError("port down")
                p.tx_sock.send(ing.frame(p.mac, action))
            except OSError as exc:
                ing.not_sent(action)
                log.debug("port %s: PFC frame not sent: %s", p.cfg.name, exc)
        self._note_due(now)

    def check(self, now: int) -> None:
        """The data path's PFC work: nothing unless an in-port crossed XOFF or XON."""
        if self.state.crossing():
            self.step(now)

    def tick(self, now: int) -> None:
        """Refresh pauses still needed, run the watchdog on paused ports."""
        pfc = self.state
        self.step(now)
        for i in pfc.paused_ports():
            self.set_paused(self.path.ports[i], pfc.paused_until_ns(i, now), now)
        self._note_due(now)
