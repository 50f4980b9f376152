"""Priority flow control for one switch, sans-I/O: what to send and when to stop sending.

Three parts, each a small state machine driven by the switch (``now_s`` is passed in, nothing
here reads a clock or touches a socket):

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
(``lossless_drops``, which must stay 0). :func:`headroom_bytes` sizes it from the link's
rate, the one-way delay and the lab's reaction time (a software switch or NIC wakes, reads
the PFC frame and stops its pacer: milliseconds on a loaded machine, not the microseconds of
silicon), plus a maximum frame in flight at each end.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass
from enum import Enum

from mrcnic.io.pfc import DEFAULT_PRIORITY, DEFAULT_WATCHDOG_S, PortPause
from mrcnic.wire import pfc as wire_pfc
from mrcnic.wire.layout import Dscp

from .queue import LosslessClass

#: while a port asks for a pause or is paused, the switch looks this often (pause refresh,
#: watchdog); otherwise only XOFF/XON crossings reach Python
PFC_TICK_NS = 10_000_000


@dataclass(frozen=True, slots=True)
class PfcConfig:
    """The lossless class of a switch (config key ``pfc``; docs/switch.md)."""

    priority: int = DEFAULT_PRIORITY  # the lossless class's 802.1p priority (RoCEv2's data)
    xoff_bytes: int = 96 << 10  # per ingress port: ask upstream to pause above this
    xon_bytes: int = 48 << 10  # ... and to resume at or below this
    headroom_bytes: int = 256 << 10  # room above XOFF for what arrives before the pause acts
    pause_quanta: int = 0xFFFF  # the pause time asked for (refreshed while above XON)
    watchdog_s: float = DEFAULT_WATCHDOG_S  # paused this long without a break: released
    watchdog_restore_s: float = DEFAULT_WATCHDOG_S  # ... and PFC ignored on the port this long
    dscp: int = Dscp.LOSSLESS  # the IP class of the lossless priority's frames
    ecn: bool = True  # lossless frames get CE above a port's ECN threshold (DCQCN)

    def __post_init__(self) -> None:
        if not 0 <= self.priority < 8:
            raise ValueError(f"pfc.priority {self.priority}: must be 0..7")
        if not 0 < self.xon_bytes < self.xoff_bytes:
            raise ValueError("pfc: need 0 < xon_bytes < xoff_bytes")
        if self.headroom_bytes <= 0:
            raise ValueError("pfc.headroom_bytes must be > 0")
        if not 0 < self.pause_quanta <= wire_pfc.MAX_QUANTA:
            raise ValueError("pfc.pause_quanta must be 1..65535")
        if self.watchdog_s <= 0 or self.watchdog_restore_s < 0:
            raise ValueError("pfc.watchdog_s must be > 0, watchdog_restore_s >= 0")
        if not 0 <= self.dscp < 64:
            raise ValueError(f"pfc.dscp {self.dscp}: must be 0..63")

    @property
    def in_limit_bytes(self) -> int:
        """What one in-port may have queued in the lossless class: XOFF + headroom."""
        return self.xoff_bytes + self.headroom_bytes

    def lossless_class(self, n_ports: int) -> LosslessClass:
        """The egress queues' lossless class: room for every in-port's limit at once, so
        only the per in-port bound (the headroom) ever refuses a frame."""
        lim = self.in_limit_bytes
        return LosslessClass(self.dscp, n_ports * lim, lim, self.ecn)


def headroom_bytes(rate_bps: float, reaction_s: float, one_way_s: float, mtu_bytes: int) -> int:
    """Bytes that can still arrive on a port after it crossed XOFF: the upstream keeps sending
    for a round trip plus its reaction time, and a frame may be on the wire at each end."""
    in_flight = rate_bps / 8 * (2 * one_way_s + reaction_s)
    return int(in_flight + 2 * mtu_bytes)


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
    reads it to report only crossings). The switch does the I/O: it sends the frames
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
        out = []
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
