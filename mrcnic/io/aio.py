"""The asyncio shell of the NIC: a sans-I/O :class:`mrcnic.verbs.Device` on real ports.

This is the only asyncio code of the NIC.  :class:`AioNic` opens one AF_PACKET socket pair per
port (one veth per plane, in the host's network namespace), and then only moves bytes:

- **receive**: each port's socket is a loop reader; a wake-up reads every waiting frame with
  ``recvmmsg`` (``mrcnic.io.batch.RecvRing``, the C module) and hands each one, as a view
  into the receive ring (no copy), to ``Device.receive_frame``;
- **pump**: once per loop iteration with something new (frames in, a timer, a posted write):
  ``Device.handle_timer`` when due, ``Device.control_frames_to_send`` *always* (control never
  waits behind data), ``Device.frames_to_send`` *only when the ports' data queues have room*,
  then every port sends what its pacer allows; a pull that stopped at a full queue, which
  then left at once, is followed by another, with the clock read again (at most
  ``PULL_ROUNDS``). The timerfd's firing pumps after the receive callbacks of the same poll,
  so what a late process finds in its sockets reaches the transport before its
  retransmission timers run;
- **pacing**: :class:`PortPacer`, a token bucket at the port's link rate over a small two-class
  queue (control frames first), so the NIC never builds a deep local
  queue (2 ms of the link rate, at most ``pacing.MAX_DATA_FRAMES``) and the fabric, not the
  veth, sees the link rate.  A control frame waits at most for
  the token debt of the data frame before it (one frame's serialisation), never for queued
  data: the rule the simulator's host port follows too (``mrcnic.sim.fabric.HostPort``);
- **one timer**: at min(device timer, earliest pacer wake-up), a *timerfd* read as a loop
  reader (:class:`FdTimer`, ``csrc/mrc_timer.c``): the transport's deadlines (the delayed ACK
  is base RTT / 8, ~0.1 ms in the lab) and control frames waiting for tokens are served to
  tens of microseconds (docs/bench.md has the measured lateness), while a port with only
  data to pace wakes at most every ``PACE_TICK_S`` (1 ms: the token bucket keeps the average
  rate exact and bounds the burst), so the NIC does not pay a wake-up per data frame.  Without
  the C module (or ``MRC_PURE_PYTHON=1``) the twin is ``loop.call_later`` (:class:`LoopTimer`),
  floored at 1 ms as libuv's timers are;
- **C queues**: with the C engines (``MRC_NIC_ENGINE=c``) the data frames the send engine
  builds and the SACKs and NACKs the receive engine builds go straight into per-port C queues
  (``Device.attach_port_queues``, ``csrc/mrc_txq.c``) that each pacer serves by the same
  token rule (Python control, C control, Python data, C data) and sends with ``sendmmsg``
  from their slots: no Python object per frame. The send engine builds data only while every
  port's C data queue is below the pacer's data limit. While no port holds a Python frame,
  one C call serves every port's C queues by the same rule (``mrcnic.io.cpacing.CPacers``,
  ``csrc/mrc_pace.c``; the pacers keep their token buckets in its structs, so the Python
  pacers, its twin, take over whenever a Python frame waits; ``MRC_NIC_C_PACE=0``: always);
- **send**: ``sendmmsg`` per port and wake-up (``batch_io.Sender``); ``ENOBUFS`` (a tc/nft
  fault dropped the frame) and other per-frame refusals count as losses, which the transport
  repairs; ``ENETDOWN`` means the port is down;
- **link state**: ``ENETDOWN`` on send or receive, netlink ``RTMGRP_LINK`` notifications and
  a cheap once-a-second ``SIOCGIFFLAGS`` check (both :mod:`mrcnic.io.linkstate`) become
  ``Device.port_status(port, up, now)``;
  a port that comes back gets a fresh receive socket (libuv drops an fd from the loop after
  the EPOLLERR a link-down leaves on it), and every socket is registered again once a second.

Time is ``time.monotonic()`` seconds (CLOCK_MONOTONIC, the timerfd's clock), read once per
callback and passed into the core.  Pacing is exact on average and bursts are bounded by the
token bucket depth (``PacerConfig.burst_s``).

    host = LabHost.load("mrc", "h0")          # lab.fabric.host: Device + port names of h0
    async with host.nic() as nic:              # sockets opened in the host's namespace
        qp = host.device.create_qp(host.qp_config())
        ...
        await nic.wait_for(lambda: done, timeout_s=10)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mrcnic.io import batch as batch_io
from mrcnic.io.afpacket import NETDOWN_ERRNOS, open_rx_socket, open_tx_socket
from mrcnic.io.cpacing import CPacers
from mrcnic.io.linkstate import LinkWatcher, link_up
from mrcnic.io.netns import in_netns
from mrcnic.io.pacing import OutBatch, PacerConfig, PortPacer, earliest_due, pull_room
from mrcnic.io.pfc import PortPause
from mrcnic.io.timer import FdTimer, LoopTimer
from mrcnic.verbs import Device

_NETDOWN = NETDOWN_ERRNOS
#: a port's send counters: NicPort's Python part (py_<name>) plus its C pacer's (<name>)
TX_COUNTERS = ("tx_frames", "tx_bytes", "tx_lost", "tx_down_drops")
LINK_POLL_S = 1.0  # fallback link check (netlink is the fast path)
RX_BATCHES_PER_WAKE = 8  # bound the time one busy port can hold the loop
RX_SLOT_BYTES = 9216  # a receive slot: a jumbo frame (a longer one is cut and counted)
#: pulls of the transport per pump while each goes out at once (a pump's bound: the
#: receive path and timers get the loop back after at most this many queue-fulls)
PULL_ROUNDS = 8
PACE_TICK_S = 0.001  # a port with only data queued wakes at most this often (bursts: burst_s)


# --- the NIC ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _maybe_netns(netns: str | None) -> Iterator[None]:
    if netns is None:
        yield
        return

    with in_netns(netns):
        yield


class NicPort:
    """One port: its sockets, pacer and counters."""

    __slots__ = (
        "index",
        "ifname",
        "rate_bps",
        "pacer",
        "rx",
        "tx",
        "rx_fd",
        "tx_fd",
        "ifindex",
        "up",
        "link_changes",
        "rx_frames",
        "rx_bytes",
        "rx_too_big",
        "py_tx_frames",
        "py_tx_bytes",
        "py_tx_lost",
        "py_tx_down_drops",
        "last_errno",
        "c",
    )

    def __init__(self, index: int, ifname: str, rate_bps: float, pacer: PortPacer) -> None:
        self.index = index
        self.ifname = ifname
        self.rate_bps = rate_bps
        self.pacer = pacer
        self.rx: socket.socket | None = None
        self.tx: socket.socket | None = None
        self.rx_fd = self.tx_fd = -1
        self.ifindex = 0
        self.up = False
        self.link_changes = 0
        self.rx_frames = self.rx_bytes = self.rx_too_big = 0
        # what the Python path sent; the C pacers count theirs in ``c`` (mrcnic.io.cpacing)
        self.py_tx_frames = self.py_tx_bytes = self.py_tx_lost = self.py_tx_down_drops = 0
        self.last_errno = 0  # the Python path's last send error (the C pacers keep theirs)
        # the port's struct mrc_pace_port while the C pacers serve it (the CPacers object,
        # which AioNic._cpace holds, owns its memory: a struct does not keep it alive)
        self.c: Any = None

    def _count(self, name: str) -> int:
        c = self.c
        return getattr(self, "py_" + name) + (getattr(c, name) if c is not None else 0)

    def fold_c(self) -> None:
        """Add what the C pacers counted to the Python counters and let the struct go."""
        c = self.c
        if c is not None:
            for name in TX_COUNTERS:
                setattr(self, "py_" + name, getattr(self, "py_" + name) + getattr(c, name))
            self.c = None

    tx_frames = property(lambda self: self._count("tx_frames"))
    tx_bytes = property(lambda self: self._count("tx_bytes"))
    tx_lost = property(lambda self: self._count("tx_lost"))
    tx_down_drops = property(lambda self: self._count("tx_down_drops"))

    def open(self) -> None:
        tx = open_tx_socket(self.ifname)  # sends only: it receives nothing, so no wake-ups
        try:
            self.rx = open_rx_socket(self.ifname)
        except BaseException:
            tx.close()
            raise
        self.tx = tx
        self.rx_fd, self.tx_fd = self.rx.fileno(), tx.fileno()
        self.ifindex = socket.if_nametoindex(self.ifname)  # in the namespace we opened in
        self.up = link_up(self.ifname, tx)

    def close(self) -> None:
        for s in (self.rx, self.tx):
            if s is not None:
                s.close()
        self.rx = self.tx = None
        self.rx_fd = self.tx_fd = -1

    def stats(self) -> dict[str, Any]:
        p = self.pacer
        return {
            "ifname": self.ifname,
            "up": self.up,
            "link_changes": self.link_changes,
            "rate_bps": self.rate_bps,
            "rx_frames": self.rx_frames,
            "rx_bytes": self.rx_bytes,
            "rx_too_big": self.rx_too_big,
            "tx_frames": self.tx_frames,
            "tx_bytes": self.tx_bytes,
            "tx_lost": self.tx_lost,
            "tx_down_drops": self.tx_down_drops,
            "queue_frames": len(p),
            "max_queue_data_frames": p.max_data_frames,
            "queue_limit_frames": p.data_limit,
            "pfc": {
                "pause_rx": p.pause.pause_rx,
                "paused_s": round(p.pause.paused_s, 6),
                "watchdog_trips": p.pause.watchdog_trips,
            },
        }


class AioNic:
    """A :class:`Device` bound to real ports: ``ifnames[p]`` is the port of plane ``p``.

    Use ``async with AioNic(...)`` (or :meth:`open` / :meth:`close`) inside a running loop;
    uvloop is recommended (:func:`run`).  ``netns`` opens the sockets in that namespace (by
    name, as ``ip netns`` knows it), so one process can drive NICs of several hosts (tests);
    a benchmark process normally runs inside its host's namespace and leaves it None.

    ``on_progress(now_s)``, when set, is called after every pump: the place to poll
    completions and post more work without an extra wake-up.
    """

    def __init__(
        self,
        device: Device,
        ifnames: Sequence[str],
        *,
        netns: str | None = None,
        pacer: PacerConfig | None = None,
        frame_cap: int = RX_SLOT_BYTES,
        rx_batch: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if len(ifnames) != len(device.port_rates_bps):
            raise ValueError(
                f"{len(ifnames)} interfaces for a device of {len(device.port_rates_bps)} ports"
            )
        self.device = device
        self.netns = netns
        self.clock = clock
        cfg = pacer or PacerConfig()
        now = clock()
        self.ports = [
            NicPort(i, name, rate, PortPacer(rate, cfg, now, pause=PortPause(rate)))
            for i, (name, rate) in enumerate(zip(ifnames, device.port_rates_bps, strict=True))
        ]
        self._by_ifindex: dict[int, NicPort] = {}
        self.ring = batch_io.RecvRing(frame_cap, rx_batch)
        self.sender = batch_io.Sender()
        self.on_progress: Callable[[float], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._links: LinkWatcher | None = None
        self._pump_scheduled = False
        # the one timer: an FdTimer from open(), else (no timerfd, or a test that never opens
        # sockets) a LoopTimer made on first use
        self._timer: LoopTimer | FdTimer | None = None
        self.pace_tick_s = PACE_TICK_S
        # a RoCEv2 QP paces itself (DCQCN's rate, or its port's): in bursts of one tick, as
        # the port's pacer, so it does not cost a wake-up per frame
        set_burst = getattr(device, "set_pace_burst", None)
        if set_burst is not None:
            set_burst(PACE_TICK_S)
        self.timer_fires = 0
        self.timer_late_sum_s = 0.0
        self.timer_late_max_s = 0.0
        self._link_poll_at = 0.0
        # the device's earliest deadline as the last pump left it: every change to the
        # device's timers (a receive batch, a post, a timer) is followed by a pump, whose end
        # reads it again, so the next pump need not ask every QP before its timers
        self._dev_due: float | None = None
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[bool]]] = []
        self._open = False
        #: the ports' pacers served in C (mrcnic.io.cpacing), with the C engines' queues
        self._cpace: CPacers | None = None
        #: a pacer may hold Python frames: the pump serves the ports in Python (the twin)
        self._py_queued = False
        self.pumps = 0
        self.rx_wakeups = 0

    # -- life cycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> AioNic:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Open the sockets (in ``netns``) and start serving; needs a running loop."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        try:
            with _maybe_netns(self.netns):
                for p in self.ports:
                    p.open()
                self._links = LinkWatcher.open()
        except BaseException:
            self._close_sockets()
            raise
        for p in self.ports:
            self._by_ifindex[p.ifindex] = p
            loop.add_reader(p.rx_fd, self._on_readable, p)
        if self._links is not None:
            loop.add_reader(self._links.fileno(), self._on_netlink)
        self._timer = FdTimer.open(loop, self._on_timer, self.clock) or LoopTimer(
            loop, self._on_timer
        )
        self._open = True
        self.device.on_work = self.kick
        self.device.on_pfc = self._on_pfc  # a port honours PFC for the lossless priority
        self._attach_port_queues(os.environ.get("MRC_NIC_C_PACE", "1") != "0")
        now = self.clock()
        self._link_poll_at = now + LINK_POLL_S
        for p in self.ports:  # tell the core about ports that are already down
            if not p.up:
                self.device.port_status(p.index, False, now)
        self.kick()

    def _attach_port_queues(self, c_pace: bool) -> None:
        """Data frames of the C send engine go straight into per-port C queues the pacers
        drain with sendmmsg (no Python object per data frame); with ``c_pace`` (not
        MRC_NIC_C_PACE=0) the ports are served in C while no Python frame waits. The ports'
        sockets are open (their send fds go to C)."""
        pq = self.device.attach_port_queues([p.pacer.data_limit for p in self.ports])
        if pq is None:
            return
        for p, cq, chq in zip(self.ports, pq.queues, pq.high_queues, strict=True):
            p.pacer.cq, p.pacer.chq = cq, chq
        cp = self._cpace = CPacers.make([p.pacer for p in self.ports]) if c_pace else None
        if cp is not None:
            for p in self.ports:
                c = p.c = cp.port(p.index)
                c.fd, c.up = p.tx_fd, int(p.up)

    def close(self) -> None:
        if not self._open:
            self._close_sockets()
            return
        self._open = False
        loop = self._loop
        if self._timer is not None:
            if loop is not None and not loop.is_closed():
                self._timer.close()
            elif isinstance(self._timer, FdTimer) and self._timer.fd >= 0:
                os.close(self._timer.fd)  # the loop is gone: nothing to unregister from
                self._timer.fd = -1
            self._timer = None
        if loop is not None and not loop.is_closed():
            for p in self.ports:
                if p.rx_fd >= 0:
                    loop.remove_reader(p.rx_fd)
            if self._links is not None:
                loop.remove_reader(self._links.fileno())
        if self.device.on_work == self.kick:
            self.device.on_work = None
        if self.device.on_pfc == self._on_pfc:
            self.device.on_pfc = None
        self.device.attach_port_queues(None)
        cp, self._cpace = self._cpace, None
        for p in self.ports:
            p.fold_c()  # (the C pacers' counts stay with the port)
        if cp is not None:
            cp.detach()
        for p in self.ports:
            p.pacer.flush()
            p.pacer.cq = p.pacer.chq = None
        self._close_sockets()
        for _pred, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)
        self._waiters.clear()

    def _close_sockets(self) -> None:
        # Closing an AF_PACKET socket waits for an RCU grace period (~10 ms): close them all
        # at once, from threads, rather than one after the other.
        socks = [s for p in self.ports for s in (p.rx, p.tx) if s is not None]
        for p in self.ports:
            p.rx = p.tx = None
            p.rx_fd = p.tx_fd = -1
        if self._links is not None:
            self._links.close()
            self._links = None
        if len(socks) > 2:
            with ThreadPoolExecutor(max_workers=min(16, len(socks))) as ex:
                list(ex.map(socket.socket.close, socks))
        else:
            for s in socks:
                s.close()

    # -- waking up -----------------------------------------------------------------------------

    def kick(self) -> None:
        """Pump soon (once per loop iteration however often it is called)."""
        if not self._pump_scheduled and self._open:
            self._pump_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._pump)

    def _on_readable(self, p: NicPort) -> None:
        self.rx_wakeups += 1
        ring = self.ring
        dev_rx = self.device.receive_batch
        slots = ring.slots
        lens = ring.lens  # a fixed view over the ring, refilled in place by every recv
        fd = p.rx_fd
        now = self.clock()
        for _ in range(RX_BATCHES_PER_WAKE):
            n = ring.recv(fd)
            if n <= 0:
                if n < 0 and -n in _NETDOWN:
                    self._set_port(p, False, now)
                break
            # one call per batch: data frames go through the C engine (if the device has
            # one), the rest frame by frame
            p.rx_too_big += dev_rx(ring, n, now, p.index)
            p.rx_frames += n
            p.rx_bytes += sum(lens[:n])
            if n < slots:
                break
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)  # type: ignore[union-attr]

    def _on_pfc(self, port: int, frame: Any, now_s: float) -> None:
        """A PFC frame came in on ``port``: pause (or resume) its lossless data."""
        if 0 <= port < len(self.ports):
            self.ports[port].pacer.pause.receive(frame, now_s)
            self.kick()  # a resume lets frames go: pump and re-arm the timer

    def _on_timer(self) -> None:
        timer = self._timer
        at = timer.fired_at if timer is not None else None
        if at is not None:
            late = self.clock() - at
            self.timer_fires += 1
            if late > 0:
                self.timer_late_sum_s += late
                if late > self.timer_late_max_s:
                    self.timer_late_max_s = late
        # Not at once: after the receive callbacks of the same poll. A process that was late
        # finds its timer and its sockets ready together; the acknowledgments waiting in its
        # sockets must reach the transport before the retransmission timers run, or packets
        # the peer has acknowledged are timed out (spurious timeouts, probes, EVs retired).
        # The timerfd is a reader like the sockets, so call_soon runs the pump after them
        # (the twin, LoopTimer, fires before the poll: no such order). The lateness counted
        # above is the timer's; the pump follows that poll's receive callbacks.
        self.kick()

    def _on_netlink(self) -> None:
        assert self._links is not None
        now = self.clock()
        events, lost = self._links.read()
        for ev in events:
            p = self._by_ifindex.get(ev.ifindex)
            if p is not None:
                self._set_port(p, ev.up, now)
        if lost:  # the kernel dropped notifications: the ports' flags as they are now
            self._poll_links(now)
        self.kick()

    def _poll_links(self, now: float) -> None:
        for p in self.ports:
            if p.tx is not None:
                self._set_port(p, link_up(p.ifname, p.tx), now)

    def _refresh_readers(self) -> None:
        """Register every socket with the loop again.  libuv stops watching an fd for good
        after an EPOLLERR (a link flap, a netlink overflow); a flap too quick for us to see
        as down-then-up would otherwise leave a port deaf.  Cheap: once per LINK_POLL_S."""
        loop = self._loop
        if loop is None:
            return
        for p in self.ports:
            if p.rx_fd >= 0:
                loop.remove_reader(p.rx_fd)
                loop.add_reader(p.rx_fd, self._on_readable, p)
        if self._links is not None:
            fd = self._links.fileno()
            loop.remove_reader(fd)
            loop.add_reader(fd, self._on_netlink)

    def _set_port(self, p: NicPort, up: bool, now: float) -> None:
        if p.up == up:
            return
        if up and not self._reopen_rx(p):
            return  # not usable yet: the next link event or check tries again
        p.up = up
        if p.c is not None:
            p.c.up = int(up)
        p.link_changes += 1
        if not up:
            p.py_tx_down_drops += p.pacer.flush()
        self.device.port_status(p.index, up, now)
        self.kick()

    def _reopen_rx(self, p: NicPort) -> bool:
        """A fresh receive socket after the link came back.  When a port goes down the kernel
        flags an error on its socket (ENETDOWN), and libuv answers the resulting EPOLLERR by
        dropping the fd from the loop for good: the old socket would never be read again."""
        loop = self._loop
        if loop is None or not self._open:
            return True
        try:
            with _maybe_netns(self.netns):
                new = open_rx_socket(p.ifname)
        except OSError:
            return False
        old = p.rx
        if old is not None:
            loop.remove_reader(p.rx_fd)
            # closing waits for an RCU grace period: not on the loop's time
            loop.run_in_executor(None, old.close)
        p.rx, p.rx_fd = new, new.fileno()
        loop.add_reader(p.rx_fd, self._on_readable, p)
        return True

    # -- the pump ------------------------------------------------------------------------------

    def _pump(self) -> None:
        if not self._open:
            self._pump_scheduled = False
            return
        self.pumps += 1
        now = self.clock()
        dev = self.device
        due = self._dev_due
        if due is not None and due <= now:
            dev.handle_timer(now)
        if now >= self._link_poll_at:
            self._link_poll_at = now + LINK_POLL_S
            self._poll_links(now)
            self._refresh_readers()
        # The application first (completions, new work), while kicks are no-ops: what it
        # posts leaves in this same pump.
        if dev.qps:
            dev.dispatch()
        cb = self.on_progress
        if cb is not None:
            cb(now)
        if self._waiters:
            self._check_waiters()
        self._pump_scheduled = False
        ports = self.ports
        # Control frames (ACKs, SACKs, NACKs, probes) on every pump, whatever the data queues:
        # they go to the pacers' high-priority class and never wait behind data.
        ctrl = dev.control_frames_to_send()
        if ctrl:
            self._queue(ctrl)
        # Pull data from the transport only when every live port's data queue has room: the
        # QPs rotate over the planes, so one pull fills them evenly. A pull that stopped at a
        # full queue, all of which then left at once, is followed by another (up to
        # PULL_ROUNDS), with the clock read again: a frame is built just before it leaves,
        # while it is still in the cache, and stamped with about the time it left (one pull of
        # a whole window stamped every frame with the pump's start, and the last ones' RTT
        # samples carried the time the process took to send the ones before them).
        for _ in range(PULL_ROUNDS):
            filled = False
            if self._data_room(now):  # (no live port: one pull, as ever; its frames drop)
                frames = dev.frames_to_send(now)
                if frames:
                    self._queue(frames)
                filled = self._data_room(now) == 0  # the queue, not the transport, stopped it
            blocking = self._serve(now)  # (every round sends what the pacers allow)
            if not filled or blocking:
                break  # the transport had no more, or the pacers hold the rest back
            now = self.clock()
        else:
            self.kick()  # the bound, not the transport, ended the rounds: go on after the poll
        nxt = self._dev_due = dev.get_timer()
        cp = self._cpace
        if cp is not None and not self._py_queued:  # every frame waits in a C queue
            d = cp.next_due(now, self.pace_tick_s)
        else:
            d = earliest_due((p.pacer for p in ports), now, self.pace_tick_s)
        if d is not None and (nxt is None or d < nxt):
            nxt = d
        if nxt is None or self._link_poll_at < nxt:
            nxt = self._link_poll_at  # an idle NIC still checks its links once a second
        self._arm(nxt, now)

    def _serve(self, now: float) -> bool:
        """Let each port send what its pacer allows: in one C call while every frame waits
        in a C queue, else in Python. True when a port still holds data frames."""
        cp = self._cpace
        if cp is None or self._py_queued:
            return self._serve_py(now)
        blocking = cp.serve(now)
        if cp.ps.errs:
            self._c_send_errors(now)
        return blocking > 0

    def _serve_py(self, now: float) -> bool:
        """Every port's pacer in Python (the twin of ``CPacers.serve``, which serves the C
        queues alone): True when a port still holds data frames."""
        ports = self.ports
        for p in ports:
            pacer = p.pacer
            if len(pacer):
                was_up = p.up
                for batch in pacer.due(now):  # control first, then data
                    if was_up and not p.up:  # a send found the port down (queues flushed)
                        p.py_tx_down_drops += batch.drop()
                        continue
                    self._send(p, batch, now)
        self._py_queued = any(p.pacer.py_len() for p in ports)
        return any(p.pacer.blocking_len(now) for p in ports)

    def _c_send_errors(self, now: float) -> None:
        """A send of the C pacers failed or dropped frames: a port that said it is down is
        down (its frames counted in its struct)."""
        assert self._cpace is not None
        self._cpace.errors()
        for p in self.ports:
            c = p.c
            if c is not None and c.netdown:
                c.netdown = 0
                self._set_port(p, False, now)

    def _data_room(self, now: float) -> int:
        """1: every live port's data queue has room (pull); 0: a live port's queue is full
        (the last pull stopped there); -1: no live port (nothing to pull for). In C while
        every frame waits in a C queue."""
        cp = self._cpace
        if cp is not None and not self._py_queued:
            return cp.room()
        return pull_room(((p.pacer, p.up) for p in self.ports), now)

    def _queue(self, frames: list[tuple[int, bytes]]) -> None:
        self._py_queued = True
        ports = self.ports
        for port, frame in frames:
            p = ports[port]
            if p.up:
                p.pacer.push(frame)
            else:
                p.py_tx_down_drops += 1  # the core learns of the port at once anyway

    def _send(self, p: NicPort, batch: OutBatch, now: float) -> None:
        """Send what the pacer let go (Python frames, or the first frames of a C queue)."""
        if p.tx_fd < 0:
            p.py_tx_down_drops += batch.drop()
            return
        sent, failed, err, nbytes = batch.send(self.sender, p.tx_fd)
        if failed:
            p.last_errno = err
            if err in _NETDOWN:
                # which frames went is not reported; the failed ones are the last ones
                p.py_tx_down_drops += failed
                self._set_port(p, False, now)
            else:  # ENOBUFS (tc/nft dropped it), EAGAIN...: a loss the transport repairs
                p.py_tx_lost += failed
        p.py_tx_frames += sent
        p.py_tx_bytes += nbytes

    def _arm(self, at: float | None, now: float) -> None:
        timer = self._timer
        if timer is None:
            if at is None:
                return
            assert self._loop is not None
            timer = self._timer = LoopTimer(self._loop, self._on_timer)
        if at is None:
            timer.disarm()
        else:
            timer.arm(at, now)

    # -- waiting ---------------------------------------------------------------------------------

    def _check_waiters(self) -> None:
        keep = []
        for pred, fut in self._waiters:
            if fut.done():
                continue
            try:
                ok = pred()
            except BaseException as e:  # surface the predicate's bug to the waiter
                fut.set_exception(e)
                continue
            if ok:
                fut.set_result(True)
            else:
                keep.append((pred, fut))
        self._waiters = keep

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Wait until ``predicate()`` is true (checked after every pump); False on timeout."""
        if predicate():
            return True
        assert self._loop is not None
        fut: asyncio.Future[bool] = self._loop.create_future()
        self._waiters.append((predicate, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False

    # -- reporting -------------------------------------------------------------------------------

    def live_rate_bps(self) -> float:
        return sum(p.rate_bps for p in self.ports if p.up)

    def stats(self) -> dict[str, Any]:
        fires = self.timer_fires
        return {
            "io_backend": batch_io.BACKEND,
            "pumps": self.pumps,
            "rx_wakeups": self.rx_wakeups,
            "timer": {
                "kind": self._timer.kind if self._timer is not None else None,
                "fires": fires,
                "mean_late_us": round(self.timer_late_sum_s / fires * 1e6, 1) if fires else None,
                "max_late_us": round(self.timer_late_max_s * 1e6, 1),
            },
            "ports": [p.stats() for p in self.ports],
        }


def run(coro: Any) -> Any:
    """Run a coroutine on uvloop (the NIC's loop of choice), or plain asyncio without it."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.run(coro)
    return uvloop.run(coro)
