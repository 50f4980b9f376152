"""The asyncio shell of the NIC: a sans-I/O :class:`mrcnic.verbs.Device` on real ports.

This is the only asyncio code of the NIC.  :class:`AioNic` opens one AF_PACKET socket pair per
port (one veth per plane, in the host's network namespace), and then only moves bytes:

- **receive**: each port's socket is a loop reader; a wake-up reads every waiting frame with
  ``recvmmsg`` (``mrcnic.io.batch.RecvRing``, the C module) and hands each one, as a view
  into the receive ring (no copy), to ``Device.receive_frame``;
- **pump**: once per loop iteration with something new (frames in, a timer, a posted write):
  ``Device.handle_timer`` when due, ``Device.control_frames_to_send`` *always* (control never
  waits behind data), ``Device.frames_to_send`` *only when the ports' data queues have room*,
  then every port sends what its pacer allows;
- **pacing**: :class:`PortPacer`, a token bucket at the port's link rate over a small two-class
  queue (control frames and trimmed headers first), so the NIC never builds a deep local
  queue and the fabric, not the veth, sees the link rate.  A control frame waits at most for
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

    host = LabHost.load("mrc", "h0")          # lab.host: Device + port names of h0
    async with host.nic() as nic:              # sockets opened in the host's namespace
        qp = host.device.create_qp(host.qp_config())
        ...
        await nic.wait_for(lambda: done, timeout_s=10)
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mrcnic.io import batch as batch_io
from mrcnic.io.afpacket import NETDOWN_ERRNOS, open_rx_socket, open_tx_socket
from mrcnic.io.linkstate import LinkWatcher, link_up
from mrcnic.io.netns import in_netns
from mrcnic.verbs import Device

_NETDOWN = NETDOWN_ERRNOS
LINK_POLL_S = 1.0  # fallback link check (netlink is the fast path)
RX_BATCHES_PER_WAKE = 8  # bound the time one busy port can hold the loop
MIN_TIMER_S = 0.001  # LoopTimer: libuv timers are in ms, a shorter delay would spin the loop
PACE_TICK_S = 0.001  # a port with only data queued wakes at most this often (bursts: burst_s)
FINE_MIN_S = 20e-6  # FdTimer: a deadline is at least this far after the pump (a spin guard)
TIMER_SLACK_S = 10e-6  # a new deadline this close to the armed one keeps the armed one


def is_control_frame(frame: bytes | bytearray | memoryview) -> bool:
    """DSCP CONTROL (46) or a trimmed header (12, 16): served before data.  The traffic class
    is bits 4..11 of the IPv6 header; DSCP 44..47 is ``frame[14] & 0xF == 0xB``."""
    return (frame[14] & 0x0F) == 0x0B


# --- pacing (sans-I/O: unit-tested with a fake clock) -------------------------------------------


@dataclass(frozen=True, slots=True)
class PacerConfig:
    """Per-port pacing: ``burst_s`` of line rate is the token bucket depth (at least two
    frames); the data queue holds ``queue_s`` of line rate (at least ``min_queue_frames``)
    before the NIC stops pulling frames from the transport."""

    burst_s: float = 0.002
    queue_s: float = 0.002
    min_queue_frames: int = 4
    high_queue_frames: int = 512
    frame_bytes: int = 4202  # a full 4096-byte MRC data frame, for sizing the above


class PortPacer:
    """A token bucket at the port's link rate over a two-class queue (control, then data).

    ``push`` queues a frame; ``take(now)`` returns the frames that may leave now (tokens may go
    one frame negative, so the average rate is exact); ``next_due(now)`` is when the next frame
    may leave (None when empty); ``room()`` is how many more data frames the queue wants.
    """

    __slots__ = (
        "rate_Bps",
        "burst_bytes",
        "tokens",
        "last_s",
        "high",
        "data",
        "data_limit",
        "high_limit",
        "high_drops",
        "max_data_frames",
    )

    def __init__(self, rate_bps: float, config: PacerConfig = PacerConfig(), now_s: float = 0.0):
        if rate_bps <= 0:
            raise ValueError("a port rate must be > 0")
        self.rate_Bps = rate_bps / 8.0
        fb = config.frame_bytes
        self.burst_bytes = max(2.0 * fb, config.burst_s * self.rate_Bps)
        self.tokens = self.burst_bytes  # an idle port may send a burst at once
        self.last_s = now_s
        self.high: deque[bytes] = deque()
        self.data: deque[bytes] = deque()
        self.data_limit = max(config.min_queue_frames, int(config.queue_s * self.rate_Bps / fb))
        self.high_limit = config.high_queue_frames
        self.high_drops = 0
        self.max_data_frames = 0

    def __len__(self) -> int:
        return len(self.high) + len(self.data)

    def room(self) -> int:
        return self.data_limit - len(self.data)

    def push(self, frame: bytes) -> None:
        if is_control_frame(frame):
            if len(self.high) >= self.high_limit:
                self.high_drops += 1  # never in practice: control frames are few and small
                return
            self.high.append(frame)
        else:
            data = self.data
            data.append(frame)
            if len(data) > self.max_data_frames:
                self.max_data_frames = len(data)

    def _refill(self, now_s: float) -> None:
        dt = now_s - self.last_s
        if dt > 0:
            t = self.tokens + dt * self.rate_Bps
            self.tokens = t if t < self.burst_bytes else self.burst_bytes
            self.last_s = now_s

    def take(self, now_s: float) -> list[bytes]:
        """The frames that may leave now, control first."""
        self._refill(now_s)
        tokens = self.tokens
        if tokens <= 0:
            return []
        out = []
        high, data = self.high, self.data
        while tokens > 0:
            if high:
                f = high.popleft()
            elif data:
                f = data.popleft()
            else:
                break
            tokens -= len(f)
            out.append(f)
        self.tokens = tokens
        return out

    def next_due(self, now_s: float) -> float | None:
        if not self.high and not self.data:
            return None
        self._refill(now_s)
        if self.tokens > 0:
            return now_s
        return now_s + (1e-9 - self.tokens) / self.rate_Bps

    def flush(self) -> int:
        n = len(self.high) + len(self.data)
        self.high.clear()
        self.data.clear()
        return n


# --- the timer --------------------------------------------------------------------------------


class LoopTimer:
    """The twin: ``loop.call_later``, floored at ``floor_s`` (libuv's timers are in ms, and a
    shorter delay would make the loop spin).  ``arm(at, now)`` (``at`` in the NIC's clock)
    replaces the deadline; ``fire`` is called once when it passes."""

    kind = "loop"

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        floor_s: float = MIN_TIMER_S,
    ) -> None:
        self.loop = loop
        self.fire = fire
        self.floor_s = floor_s
        self.at: float | None = None  # the deadline armed (None: disarmed)
        self.fired_at: float | None = None  # the deadline of the last firing
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, at: float, now: float) -> None:
        if self._handle is not None:
            if self.at is not None and abs(at - self.at) < max(TIMER_SLACK_S, self.floor_s / 5):
                return
            self._handle.cancel()
        delay = at - now
        if delay < self.floor_s:
            delay = self.floor_s
        self.at = at
        self._handle = self.loop.call_later(delay, self._on_fire)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.at = None

    def _on_fire(self) -> None:
        self._handle = None
        self.fired_at, self.at = self.at, None
        self.fire()

    def close(self) -> None:
        self.disarm()


@dataclass(frozen=True, slots=True)
class TimerfdOps:
    """A CLOCK_MONOTONIC timerfd's operations, each returning a status (-errno on failure):
    ``open()`` -> fd, ``arm(fd, deadline_s)`` (absolute), ``disarm(fd)``, ``ack(fd)`` ->
    expirations read."""

    source: str
    open: Callable[[], int]
    arm: Callable[[int, float], int]
    disarm: Callable[[int], int]
    ack: Callable[[int], int]


def timerfd_ops() -> TimerfdOps | None:
    """The C module's timerfd (csrc/mrc_timer.c), else ``os.timerfd_*`` (Python >= 3.13),
    else None (the NIC then uses :class:`LoopTimer`)."""
    mod = batch_io.c_module_with("mrc_timer_arm")
    if mod is not None:
        lib = mod.lib
        return TimerfdOps(
            "c", lib.mrc_timer_open, lib.mrc_timer_arm, lib.mrc_timer_disarm, lib.mrc_timer_ack
        )
    if not hasattr(os, "timerfd_create"):  # pragma: no cover - Python 3.13 and later
        return None

    def _open() -> int:  # pragma: no cover
        try:
            return os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)
        except OSError as e:
            return -(e.errno or 1)

    def _arm(fd: int, at: float) -> int:  # pragma: no cover
        if not math.isfinite(at):
            return -22
        try:
            os.timerfd_settime(fd, flags=os.TFD_TIMER_ABSTIME, initial=max(at, 1e-9))
        except OSError as e:
            return -(e.errno or 1)
        return 0

    def _disarm(fd: int) -> int:  # pragma: no cover
        try:
            os.timerfd_settime(fd, initial=0)
        except OSError as e:
            return -(e.errno or 1)
        return 0

    def _ack(fd: int) -> int:  # pragma: no cover
        try:
            return int.from_bytes(os.read(fd, 8), "little")
        except BlockingIOError:
            return 0
        except OSError as e:
            return -(e.errno or 1)

    return TimerfdOps("os", _open, _arm, _disarm, _ack)


class FdTimer:
    """A timerfd (CLOCK_MONOTONIC, non-blocking) registered as a reader of the loop: wakes the
    loop at the deadline to tens of microseconds, where the loop's own timers are in ms.
    Arming is one system call (absolute time, so it needs no "now"); idle costs nothing.
    ``open(loop, fire, clock)`` returns None when no timerfd can be had."""

    kind = "timerfd"

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        fd: int,
        ops: TimerfdOps,
        clock: Callable[[], float],
    ) -> None:
        self.loop = loop
        self.fire = fire
        self.fd = fd
        self.ops = ops
        self._arm_abs = ops.arm
        self._ack = ops.ack
        # time.monotonic() is CLOCK_MONOTONIC: its deadlines are the timerfd's; another clock's
        # deadlines become CLOCK_MONOTONIC ones through the delay
        self._absolute = clock is time.monotonic
        self.at: float | None = None  # the deadline asked for (None: disarmed)
        self.fired_at: float | None = None  # the deadline of the last firing
        self.errors = 0
        loop.add_reader(fd, self._on_readable)

    @classmethod
    def open(
        cls,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> FdTimer | None:
        ops = timerfd_ops()
        if ops is None:
            return None
        fd = ops.open()
        if fd < 0:
            return None
        try:
            return cls(loop, fire, fd, ops, clock)
        except BaseException:
            os.close(fd)
            raise

    def arm(self, at: float, now: float) -> None:
        armed = self.at
        if armed is not None and abs(at - armed) < TIMER_SLACK_S:
            return
        self.at = at
        if at < now + FINE_MIN_S:
            at = now + FINE_MIN_S
        mono = at if self._absolute else time.monotonic() + (at - now)
        if self._arm_abs(self.fd, mono) < 0:  # never seen: fire from the loop, coarsely
            self.errors += 1
            self.loop.call_later(max(at - now, MIN_TIMER_S), self._fire)

    def disarm(self) -> None:
        if self.at is not None:
            self.ops.disarm(self.fd)
            self.at = None

    def _on_readable(self) -> None:
        if self._ack(self.fd) == 0:
            return  # re-armed (or disarmed) after the expiry was signalled: not due
        self._fire()

    def _fire(self) -> None:
        self.fired_at, self.at = self.at, None
        self.fire()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        self.at = None


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
        "tx_frames",
        "tx_bytes",
        "tx_lost",
        "tx_down_drops",
        "last_errno",
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
        self.tx_frames = self.tx_bytes = self.tx_lost = self.tx_down_drops = 0
        self.last_errno = 0

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
        frame_cap: int = 9216,
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
            NicPort(i, name, rate, PortPacer(rate, cfg, now))
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
        self.timer_fires = 0
        self.timer_late_sum_s = 0.0
        self.timer_late_max_s = 0.0
        self._link_poll_at = 0.0
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[bool]]] = []
        self._open = False
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
        now = self.clock()
        self._link_poll_at = now + LINK_POLL_S
        for p in self.ports:  # tell the core about ports that are already down
            if not p.up:
                self.device.port_status(p.index, False, now)
        self.kick()

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
        dev_rx = self.device.receive_frame
        cap = ring.cap
        slots = ring.slots
        lens = ring.lens  # fixed views over the ring, refilled in place by every recv
        view = ring.view
        fd = p.rx_fd
        now = self.clock()
        for _ in range(RX_BATCHES_PER_WAKE):
            n = ring.recv(fd)
            if n <= 0:
                if n < 0 and -n in _NETDOWN:
                    self._set_port(p, False, now)
                break
            nbytes = 0
            for i in range(n):
                ln = lens[i]
                if ln > cap:
                    p.rx_too_big += 1
                    continue
                off = i * cap
                nbytes += ln
                dev_rx(view[off : off + ln], now)
            p.rx_frames += n
            p.rx_bytes += nbytes
            if n < slots:
                break
        if not self._pump_scheduled:
            self._pump_scheduled = True
            self._loop.call_soon(self._pump)  # type: ignore[union-attr]

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
        self._pump()

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
        p.link_changes += 1
        if not up:
            p.tx_down_drops += p.pacer.flush()
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
        t = dev.get_timer()
        if t is not None and t <= now:
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
        # QPs rotate over the planes, so one pull fills them evenly.
        room = True
        for p in ports:
            if p.up and len(p.pacer.data) >= p.pacer.data_limit:
                room = False
                break
        if room:
            frames = dev.frames_to_send(now)
            if frames:
                self._queue(frames)
        nxt = dev.get_timer()
        tick = now + self.pace_tick_s
        for p in ports:
            pacer = p.pacer
            if not pacer.high and not pacer.data:
                continue
            frames = pacer.take(now)
            if frames:
                self._send(p, frames, now)
            d = pacer.next_due(now)
            if d is None:
                continue
            if d < tick and not pacer.high:
                d = tick  # only data waits: the next pacing tick (the bucket bounds the burst)
            if nxt is None or d < nxt:
                nxt = d
        if nxt is None or self._link_poll_at < nxt:
            nxt = self._link_poll_at  # an idle NIC still checks its links once a second
        self._arm(nxt, now)

    def _queue(self, frames: list[tuple[int, bytes]]) -> None:
        ports = self.ports
        for port, frame in frames:
            p = ports[port]
            if p.up:
                p.pacer.push(frame)
            else:
                p.tx_down_drops += 1  # the core learns of the port at once anyway

    def _send(self, p: NicPort, frames: list[bytes], now: float) -> None:
        if p.tx_fd < 0:
            p.tx_down_drops += len(frames)
            return
        res = self.sender.send(p.tx_fd, frames)
        if res.failed:
            p.last_errno = res.errno
            if res.errno in _NETDOWN:
                # which frames went is not reported; the failed ones are the last ones
                p.tx_down_drops += res.failed
                self._set_port(p, False, now)
            else:  # ENOBUFS (tc/nft dropped it), EAGAIN...: a loss the transport repairs
                p.tx_lost += res.failed
        p.tx_frames += res.sent
        if res.sent == len(frames):
            p.tx_bytes += sum(map(len, frames))
        else:
            p.tx_bytes += sum(map(len, frames)) * res.sent // len(frames)

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
