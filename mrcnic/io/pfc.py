"""A port's pause of the lossless priority (IEEE 802.1Qbb PFC), sans-I/O: the pause timer
at the port's rate, resume on time 0, the time spent paused, and the watchdog that breaks a
pause storm. A NIC's port (``mrcnic.io.pacing.PortPacer``) and a switch's egress port
(``mrcswitch.pfc``) hold one each; ``now_s`` is passed in."""

from __future__ import annotations

from mrcnic.wire import pfc as wire_pfc

DEFAULT_PRIORITY = 3  # the lossless class's 802.1p priority (RoCEv2's data)
# a pause unbroken this long is a storm: released (lab time runs ~1000x slower than
# hardware's; docs/design/pfc.md)
DEFAULT_WATCHDOG_S = 1.0


class PortPause:
    """One port's pause of the lossless priority, from the PFC frames it receives, with
    the watchdog (a switch's egress port, a NIC's port)."""

    __slots__ = (
        "priority",
        "watchdog_s",
        "watchdog_restore_s",
        "rate_bps",
        "paused_until",
        "pause_rx",
        "paused_s",
        "watchdog_trips",
        "ignored",
        "_since",
        "_ignore_until",
        "_last_s",
    )

    def __init__(
        self,
        rate_bps: float,
        priority: int = DEFAULT_PRIORITY,
        watchdog_s: float = DEFAULT_WATCHDOG_S,
        watchdog_restore_s: float = DEFAULT_WATCHDOG_S,
    ) -> None:
        self.priority = priority
        self.watchdog_s = watchdog_s
        self.watchdog_restore_s = watchdog_restore_s
        self.rate_bps = rate_bps
        self.paused_until = 0.0
        self.pause_rx = 0  # PFC frames received for the lossless priority
        self.paused_s = 0.0  # time spent paused
        self.watchdog_trips = 0
        self.ignored = 0  # PFC frames ignored while the watchdog held the port
        self._since: float | None = None  # start of the current unbroken pause
        self._ignore_until = 0.0
        self._last_s: float | None = None

    def receive(self, frame: bytes | bytearray | memoryview, now_s: float) -> bool:
        """A PFC frame came in on this port; True if it named the lossless priority."""
        pf = wire_pfc.decode_pause(frame)
        prio = self.priority
        if prio not in pf.quanta:
            return False
        self._account(now_s)
        self.pause_rx += 1
        if now_s < self._ignore_until:
            self.ignored += 1
            return True
        q = pf.quanta[prio]
        if q == 0:
            self.paused_until = now_s
            self._since = None
        else:
            if self._since is None or now_s >= self.paused_until:
                self._since = now_s
            self.paused_until = now_s + wire_pfc.pause_s(q, self.rate_bps)
        return True

    def paused(self, now_s: float) -> bool:
        """May the lossless priority not be sent now? (Runs the watchdog.)"""
        self._account(now_s)
        if now_s >= self.paused_until:
            self._since = None
            return False
        if self._since is not None and now_s - self._since > self.watchdog_s:
            self.watchdog_trips += 1  # a storm: release, and ignore pauses for a while
            self.paused_until = now_s
            self._since = None
            self._ignore_until = now_s + self.watchdog_restore_s
            return False
        return True

    def _account(self, now_s: float) -> None:
        last = self._last_s
        if last is not None and now_s > last:
            self.paused_s += max(0.0, min(now_s, self.paused_until) - last)
        self._last_s = now_s
