"""The switch's C event loop (csrc/mrc_swloop.c): its structs, kept in step with Python.

:class:`CLoop` owns ``struct mrc_sw`` and one ``struct mrc_sw_port`` per port, pointing at
memory Python already owns (each port's receive ring, decision cache and C egress queue,
the :class:`~mrcswitch.fastpath.Planner`'s scratch arrays, copied in as the loop's
``struct mrc_fwd_batch``). :meth:`CLoop.poll` runs the loop until something needs Python
and says what (:class:`Wake`, with the details in :attr:`CLoop.event`); the caller handles
it and calls again. The Python loop in :mod:`mrcswitch.switch` is the twin: same decisions (the
pipeline's, replayed from the caches), same queues, same counters.

What the loop counted (packets, bytes, drops by reason) accumulates in the C structs;
:meth:`CLoop.fold` moves it into the ports' Python counters (before every stats snapshot).

:class:`CGroup` runs the same loop over several switches of one process
(``mrc_sw_group_poll``, :mod:`mrcswitch.host`): one epoll set, each switch's ``struct mrc_sw``
as its :class:`CLoop` built it; the event says which switch (``event.sw``).
"""

from __future__ import annotations

import os
from enum import IntEnum

from mrcnic.io import batch as batch_io

from .fastpath import fill_rx

_mod = batch_io.c_module_with("mrc_sw_poll")


class Wake(IntEnum):
    """Why :meth:`CLoop.poll` returned (csrc/mrc_swloop.h MRC_SW_*; the details are in
    :attr:`CLoop.event`, a ``struct mrc_sw_event``)."""

    DEADLINE = 0
    OTHER_FD = 1  # event.fd: a ready fd that is not a port (signal pipe, control socket)
    MISS = 2  # port event.port: event.frames collected, not all decided yet: Python decides
    PUNT = 3  # port event.port: event.n_punt refused frames first in defer[]; release all
    LINK_DOWN = 4  # port event.port: a send failed with errno event.err; the loop downed it
    SOCK_ERR = 5  # port event.port: EPOLLERR on its receive socket
    EINTR = 6  # a signal
    PFC = 7  # port event.port: its lossless bytes crossed XOFF or fell to XON (see SwitchPfc)


def available() -> bool:
    """Whether the C module has the loop (not with MRC_PURE_PYTHON=1)."""
    return _mod is not None


class CLoop:
    """``struct mrc_sw`` for one switch. ``ports``: the switch's Port objects (ring,
    socket, queue with a ``ptr``), ``caches``: one DecisionCache per port. ``event``: the
    ``struct mrc_sw_event`` of the last :meth:`poll` (why, port, fd, err, frames, n_punt)."""

    __slots__ = ("ports", "caches", "event", "_sw", "_cports", "_drops", "_poll", "_hist_len",
                 "_slots", "_cap", "_keep")  # fmt: skip

    def __init__(
        self, epfd: int, ports: list, caches: list, planner, *, slots: int, cap: int,
        hist_len: int, batches_per_wake: int, timer_slack_ns: int, reasons: tuple[int, int, int],
        hold_ns: int = 0, pfc=None,
    ) -> None:  # fmt: skip
        if not available():
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_sw_poll is not available")
        ffi, lib = _mod.ffi, _mod.lib
        fwd = planner.c_batch()
        if fwd.hist_len != hist_len or fwd.n_ports != len(ports) or slots > fwd.max_batch:
            raise ValueError("the planner's ports, batch and histogram must match the loop's")
        self.ports = ports
        self.caches = caches
        self._hist_len = hist_len
        self._slots, self._cap = slots, cap
        n = len(ports)
        sw = self._sw = ffi.new("struct mrc_sw *")
        self._cports = ffi.new("struct mrc_sw_port[]", n)
        self._drops = [ffi.new("int64_t[]", hist_len) for _ in ports]
        self.event = ffi.new("struct mrc_sw_event *")
        sw.epfd = epfd
        sw.n_ports = n
        sw.ports = self._cports
        sw.batches_per_wake = batches_per_wake
        sw.reason_port_down, sw.reason_queue_full, sw.reason_tx_error = reasons
        sw.timer_slack_ns = timer_slack_ns
        sw.hold_ns = hold_ns
        sw.fwd = fwd[0]  # a copy: the loop points its hist at each in-port's drops
        if pfc is not None:  # a SwitchPfc over C arrays (cqueue.new_in_bytes, new_flags)
            sw.pfc_in_bytes = pfc.in_bytes
            sw.pfc_xoff = pfc.xoff
            sw.pfc_xoff_bytes = pfc.cfg.xoff_bytes
            sw.pfc_xon_bytes = pfc.cfg.xon_bytes
        self._keep = (planner, pfc)  # the arrays must outlive the struct that points at them
        self._poll = lib.mrc_sw_poll
        for p in ports:
            self.sync(p)

    def sync(self, p) -> None:
        """Copy port ``p``'s Python state (ring, sockets, up, queue) into its C port."""
        cp = self._cports[p.index]
        ring = p.ring
        cache = self.caches[p.index]
        if p.sock is not None and ring is not None and ring.ptr is not None:
            fill_rx(cp.rx, ring, cache, slots=self._slots, cap=self._cap)
            cp.head = ring.head
            cp.rx_fd = p.sock.fileno()
        else:
            cp.rx.buf = _mod.ffi.NULL
            cp.rx_fd = -1
        cp.rx.table = cache.ptr
        cp.rx.table_len = cache.table_len
        cp.tx_fd = p.tx_sock.fileno() if p.tx_sock is not None else -1
        cp.up = 1 if p.up else 0
        cp.q = p.queue.ptr
        cp.drops = self._drops[p.index]

    def sync_all(self) -> None:
        for p in self.ports:
            self.sync(p)

    def heads_in(self) -> None:
        """Copy the Python rings' heads into the C ports (before a poll)."""
        cports = self._cports
        for p in self.ports:
            if p.ring is not None:
                cports[p.index].head = p.ring.head

    def heads_out(self) -> None:
        """Copy the C ports' heads back into the Python rings (after a poll)."""
        cports = self._cports
        for p in self.ports:
            if p.ring is not None:
                p.ring.head = cports[p.index].head

    @property
    def sw(self):
        """The ``struct mrc_sw *`` (a :class:`CGroup` points at it)."""
        return self._sw

    def poll(self, deadline_ns: int) -> Wake:
        """Run the loop until ``deadline_ns`` (time.monotonic_ns) or until something needs
        Python; :attr:`event` holds the details. Ring heads are copied in and back out."""
        self.heads_in()
        r = self._poll(self._sw, deadline_ns, self.event)
        self.heads_out()
        if r < 0:
            raise OSError(-r, f"mrc_sw_poll: {os.strerror(-r)}")
        return Wake(r)

    def downed(self) -> list:
        """Ports the loop took down (a send failed with a link error) that Python still
        thinks are up: every one, whatever the last poll reported."""
        cports = self._cports
        return [p for p in self.ports if p.up and not cports[p.index].up]

    def fold(self) -> None:
        """Move what the loop counted into the ports' Python counters."""
        for p in self.ports:
            cp = self._cports[p.index]
            p.rx_packets += cp.rx_packets
            p.rx_bytes += cp.rx_bytes
            p.tx_packets += cp.tx_packets
            p.tx_bytes += cp.tx_bytes
            cp.rx_packets = cp.rx_bytes = cp.tx_packets = cp.tx_bytes = 0
            d = self._drops[p.index]
            by_reason = p.drops.by_reason
            for r in range(1, self._hist_len):
                if d[r]:
                    by_reason[r] += d[r]
                    d[r] = 0

    def counters(self) -> dict[str, int]:
        """The loop's own counters (in the stats file): wake-ups by events and by timer,
        holds (sleeps of hold_ns after a wake-up by frames), waits that found a port of
        this switch ready."""
        sw = self._sw
        return {
            "wakeups": sw.wakeups,
            "timer_wakeups": sw.timer_wakeups,
            "holds": sw.holds,
            "port_wakeups": sw.port_wakeups,
            "hold_ns": sw.hold_ns,
        }


class CGroup:
    """``struct mrc_sw_group``: one C loop over the :class:`CLoop` of every switch in
    ``loops`` (one epoll set ``epfd`` holding all their ports). :meth:`set_members` changes
    the switches (a switch stopped or started by the process hosting them)."""

    __slots__ = ("loops", "event", "_g", "_arr", "_poll")

    def __init__(self, epfd: int, loops: list[CLoop], *, timer_slack_ns: int, hold_ns: int = 0):
        if not available():
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_sw_poll is not available")
        ffi, lib = _mod.ffi, _mod.lib
        self._g = ffi.new("struct mrc_sw_group *")
        self._g.epfd = epfd
        self._g.timer_slack_ns = timer_slack_ns
        self._g.hold_ns = hold_ns
        self.event = ffi.new("struct mrc_sw_event *")
        self._poll = lib.mrc_sw_group_poll
        self.loops: list[CLoop] = []
        self._arr = None
        self.set_members(loops)

    def set_members(self, loops: list[CLoop]) -> None:
        self.loops = list(loops)
        self._arr = _mod.ffi.new("struct mrc_sw *[]", [lp.sw for lp in self.loops] or 1)
        self._g.sw = self._arr
        self._g.n_sw = len(self.loops)

    def poll(self, deadline_ns: int) -> Wake:
        """As :meth:`CLoop.poll`, over every switch; ``event.sw`` indexes :attr:`loops`."""
        loops = self.loops
        for lp in loops:
            lp.heads_in()
        r = self._poll(self._g, deadline_ns, self.event)
        for lp in loops:
            lp.heads_out()
        if r < 0:
            raise OSError(-r, f"mrc_sw_group_poll: {os.strerror(-r)}")
        return Wake(r)

    def counters(self) -> dict[str, int]:
        """The process's wake-ups (by events, by timer) and holds, for all its switches."""
        g = self._g
        return {
            "wakeups": g.wakeups,
            "timer_wakeups": g.timer_wakeups,
            "holds": g.holds,
            "hold_ns": g.hold_ns,
        }
