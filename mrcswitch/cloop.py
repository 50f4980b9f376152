"""The switch's C event loop (csrc/mrc_swloop.c): its structs, kept in step with Python.

:class:`CLoop` owns ``struct mrc_sw`` and one ``struct mrc_sw_port`` per port, pointing at
memory Python already owns (each port's receive ring, decision cache and C egress queue,
the :class:`~mrcswitch.fastpath.Planner`'s scratch arrays). :meth:`CLoop.poll` runs the
loop until something needs Python and says what (:class:`Wake`); the caller handles it and
calls again. The Python loop in :mod:`mrcswitch.switch` is the twin: same decisions (the
pipeline's, replayed from the caches), same queues, same counters.

What the loop counted (packets, bytes, drops by reason) accumulates in the C structs;
:meth:`CLoop.fold` moves it into the ports' Python counters (before every stats snapshot).
"""

from __future__ import annotations

import os
from enum import IntEnum

from mrcnic.io import batch as batch_io

_mod = batch_io.c_module_with("mrc_sw_poll")


class Wake(IntEnum):
    """Why :meth:`CLoop.poll` returned (csrc/mrc_swloop.h MRC_SW_*)."""

    DEADLINE = 0
    OTHER_FD = 1  # out[1]: a ready fd that is not a port (signal pipe, control socket)
    MISS = 2  # port out[1]: out[2] frames collected, not all decided yet: Python decides
    PUNT = 3  # port out[1]: out[3] refused frames listed first in defer[], then release out[2]
    LINK_DOWN = 4  # port out[1]: a send failed with errno out[3]; the loop downed it
    SOCK_ERR = 5  # port out[1]: EPOLLERR on its receive socket
    EINTR = 6  # a signal


def available() -> bool:
    """Whether the C module has the loop (not with MRC_PURE_PYTHON=1)."""
    return _mod is not None


class CLoop:
    """``struct mrc_sw`` for one switch. ``ports``: the switch's Port objects (ring,
    socket, queue with a ``ptr``), ``caches``: one DecisionCache per port."""

    __slots__ = ("ports", "caches", "out", "_sw", "_cports", "_drops", "_poll", "_hist_len",
                 "_keep")  # fmt: skip

    def __init__(
        self, epfd: int, ports: list, caches: list, planner, *, slots: int, cap: int,
        hist_len: int, batches_per_wake: int, timer_slack_ns: int, reasons: tuple[int, int, int],
    ) -> None:  # fmt: skip
        if not available():
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_sw_poll is not available")
        ffi, lib = _mod.ffi, _mod.lib
        self.ports = ports
        self.caches = caches
        self._hist_len = hist_len
        n = len(ports)
        sw = self._sw = ffi.new("struct mrc_sw *")
        self._cports = ffi.new("struct mrc_sw_port[]", n)
        self._drops = [ffi.new("int64_t[]", hist_len) for _ in ports]
        self.out = ffi.new("int64_t[4]")
        sw.epfd = epfd
        sw.n_ports = n
        sw.ports = self._cports
        sw.slots = slots
        sw.cap = cap
        sw.batches_per_wake = batches_per_wake
        sw.reason_port_down, sw.reason_queue_full, sw.reason_tx_error = reasons
        sw.timer_slack_ns = timer_slack_ns
        sw.hist_len = hist_len
        c = planner.c_arrays()
        sw.l2 = c["l2"]
        sw.block_bytes = planner.block_bytes
        for name in ("dec", "verdict", "order", "defer", "budget", "port_bytes", "port_count",
                     "port_start", "fds", "port_out", "res", "rate_per_ns", "burst",
                     "stamp_ns", "totals"):  # fmt: skip
            setattr(sw, name, c[name])
        self._keep = c  # the arrays must outlive the struct that points at them
        self._poll = lib.mrc_sw_poll
        for p in ports:
            self.sync(p)

    def sync(self, p) -> None:
        """Copy port ``p``'s Python state (ring, sockets, up, queue) into its C port."""
        cp = self._cports[p.index]
        ring = p.ring
        if p.sock is not None and ring is not None and ring.ptr is not None:
            cp.ring = ring.ptr
            cp.ring_len = ring.buf_len
            cp.block_size = ring.block_size
            cp.frame_size = ring.frame_size
            cp.frame_nr = ring.frame_nr
            cp.head = ring.head
            cp.offs = ring.c_offs
            cp.lens = ring.c_lens
            cp.rx_fd = p.sock.fileno()
        else:
            cp.ring = _mod.ffi.NULL
            cp.rx_fd = -1
        cache = self.caches[p.index]
        cp.fcache = cache.ptr
        cp.fcache_len = cache.table_len
        cp.tx_fd = p.tx_sock.fileno() if p.tx_sock is not None else -1
        cp.up = 1 if p.up else 0
        cp.q = p.queue.ptr
        cp.drops = self._drops[p.index]

    def sync_all(self) -> None:
        for p in self.ports:
            self.sync(p)

    def poll(self, deadline_ns: int) -> Wake:
        """Run the loop until ``deadline_ns`` (time.monotonic_ns) or until something needs
        Python; ``out`` holds the details. Ring heads are copied in and back out."""
        cports = self._cports
        for p in self.ports:
            if p.ring is not None:
                cports[p.index].head = p.ring.head
        r = self._poll(self._sw, deadline_ns, self.out)
        for p in self.ports:
            if p.ring is not None:
                p.ring.head = cports[p.index].head
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
        """The loop's own counters: wake-ups by events and by timer (in the stats file)."""
        return {"wakeups": self._sw.wakeups, "timer_wakeups": self._sw.timer_wakeups}
