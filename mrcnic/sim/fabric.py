"""The deterministic virtual-time fabric under ``mrc-sim``: links, paths, planes, failures.

Two hosts (h0 under T0 0, h1 under T0 1 of every plane) joined by ``planes`` planes of
``paths_per_plane`` T1 switches each.  Per direction, a packet crosses three links:

1. the NIC port of its plane (:class:`HostPort`: the NIC paces at the port rate, its queue
   never drops, and control frames never wait behind queued data: the I/O shell's rule),
2. the fabric path T0 -> T1 -> T0 (rate, propagation delay, queue, ECN threshold, trimming,
   random loss, failures), chosen by routing the packet's real SRv6 destination address,
3. the last hop T0 -> destination port (queue and trimming to TRIMMED_LASTHOP; no ECN,
   as MRC deployments disable marking on last-hop ports).

A fabric link is a FIFO with two classes: high priority (control DSCP, trimmed headers) goes
first and never trims.  Its queue is computed analytically (``busy_until``), so each packet
costs one heap event per link.  A host's own port is an event-driven two-class queue instead
(:class:`HostPort`), because there the order of service is the point: a SACK the host
produces leaves after the data frame being serialised, ahead of every queued data frame, as
it does from the shell's pacer (``mrcnic.io.pacing.PortPacer``; tests/unit/test_ack_timing.py
holds both to it); and, as the shell does, the host takes data from its QPs only while its
ports' data queues have room (:class:`NicGate`), so the excess waits in the QPs, untimed.  Everything random comes from one seeded generator: same arguments, same
run, bit for bit.
"""

from __future__ import annotations

import gc
import heapq
import random
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from mrcnic.sim.scale import LAB
from mrcnic.transport.port_queues import data_limit_frames
from mrcnic.transport.qp_types import NetConfig, PortAddr
from mrcnic.wire import layout, usid
from mrcnic.wire.trim import TrimRule, overflows

_DSCP_HIGH = layout.HIGH_PRIORITY_DSCPS  # control and trimmed headers: served first, never cut
_DST = slice(layout.OFF_DST, layout.OFF_DST + layout.IPV6_ADDR_SIZE)
_OFF_TC_HI = layout.OFF_TC_HI
_OFF_TC_LO = layout.OFF_TC_LO
_DSCP_HI = layout.TC_HI_DSCP_MASK
_ECN_BITS = layout.TC_LO_ECN_MASK
#: The data frames a NIC port queues before its host stops taking data from its QPs: the
#: shell's rule (``PacerConfig.queue_s`` of the port's rate) at the lab's rate, so a port
#: holds as many frames as the lab's does at any simulated rate. (The paper's scale is the
#: lab's with serialisation 1000 times faster; the shell's 2 ms at 100 Gb/s would be ~6000
#: frames, ~200 base RTTs of queue, far past the QPs' RTO.)
NIC_DATA_LIMIT_FRAMES = data_limit_frames(LAB.port_rate_bps)


@dataclass(frozen=True, slots=True)
class LinkSpec:
    rate_bps: float
    prop_s: float = 0.0
    queue_bytes: int | None = None  # None: unbounded (a NIC's own transmit queue)
    ecn_bytes: int | None = None  # mark CE above this data backlog; None: never
    trim: bool = True  # trim trimmable data on overflow (otherwise drop)
    last_hop: bool = False  # trims become TRIMMED_LASTHOP
    loss: float = 0.0  # random loss probability per packet


class Link:
    __slots__ = (
        "name",
        "spec",
        "bytes_per_s",
        "busy_until",
        "up",
        "tx_packets",
        "tx_bytes",
        "drops",
        "trims",
        "marks",
        "losses",
        "max_backlog",
        "loss",
        "_trim",
    )

    def __init__(self, name: str, spec: LinkSpec) -> None:
        self.name = name
        self.spec = spec
        self.bytes_per_s = spec.rate_bps / 8.0
        self.busy_until = 0.0
        self.up = True
        self.tx_packets = 0
        self.tx_bytes = 0  # wire bytes it carried (a trimmed frame's header only)
        self.drops = 0  # overflow of non-trimmable data, or down
        self.trims = 0
        self.marks = 0
        self.losses = 0  # random loss
        self.max_backlog = 0
        self.loss = spec.loss  # random loss probability (Fabric.set_path_loss sets one link's)
        self._trim = TrimRule(spec.trim, spec.last_hop)  # the switch's rule (mrcnic.wire.trim)

    def transmit(self, t: float, frame: bytes, rng: random.Random) -> tuple[float, bytes] | None:
        """The packet enters at ``t``; returns (arrival time at the far end, frame) or None."""
        spec = self.spec
        if not self.up:
            self.drops += 1
            return None
        if self.loss and rng.random() < self.loss:
            self.losses += 1
            return None
        n = len(frame)
        high = ((frame[_OFF_TC_HI] & _DSCP_HI) << 2 | frame[_OFF_TC_LO] >> 6) in _DSCP_HIGH
        busy = self.busy_until
        backlog = (busy - t) * self.bytes_per_s if busy > t else 0.0
        if not high:
            cap = spec.queue_bytes
            if cap is not None and overflows(backlog, n, cap):
                trimmed = self._trim.overflow(frame)
                if trimmed is None:
                    self.drops += 1
                    return None
                frame, n, high = trimmed, len(trimmed), True  # the header goes high priority
                self.trims += 1
            elif (
                spec.ecn_bytes is not None
                and backlog > spec.ecn_bytes
                and frame[_OFF_TC_LO] & _ECN_BITS
            ):
                self.marks += 1
                b = bytearray(frame)
                layout.set_ce(b)
                frame = bytes(b)
        if backlog > self.max_backlog:
            self.max_backlog = int(backlog)
        start = busy if busy > t else t
        done = start + n / self.bytes_per_s
        self.busy_until = done
        self.tx_packets += 1
        self.tx_bytes += n
        # high priority: served ahead of queued data (approximation: it waits only for the
        # packet in service, but still consumes link time, pushing the data queue back)
        if high and busy > t:
            done = t + n / self.bytes_per_s
        return done + spec.prop_s, frame


class HostPort:
    """A host's NIC port: the shell's pacing rule (``mrcnic.io.pacing.PortPacer``) in virtual time.

    Line rate, a two-class queue served non-preemptively: control frames and trimmed headers
    first, so a control frame waits only for the frame being serialised, never for queued
    data; it never drops (a port that goes down drops what it holds, as the shell flushes its
    pacer).  Its data queue is kept short the shell's way: once it holds ``data_limit``
    frames the host's :class:`NicGate` stops taking data from the QPs (the excess waits in
    them, unsent and with no timer running), and when it drains below the limit the gate
    pumps the waiting QPs again.  ``enqueue(t, frame, ...)`` at the fabric's current time;
    each frame's departure (start of serialisation) is reported to ``on_depart(t, frame)``
    when set, and the frame enters the next stage when its serialisation ends.  Counters as
    :class:`Link`'s, plus ``max_data_frames`` (the longest its data queue was).
    """

    __slots__ = (
        "name",
        "bytes_per_s",
        "up",
        "tx_packets",
        "drops",
        "trims",
        "marks",
        "losses",
        "max_backlog",
        "backlog",
        "high",
        "data",
        "busy",
        "on_depart",
        "data_limit",
        "max_data_frames",
        "gate",
        "_fabric",
    )

    def __init__(
        self, name: str, rate_bps: float, fabric: EventLoop, data_limit: int | None = None
    ) -> None:
        self.name = name
        self.bytes_per_s = rate_bps / 8.0
        self.up = True
        self.tx_packets = 0
        self.drops = 0  # what was queued or sent to the port while it was down
        self.trims = self.marks = self.losses = 0  # a NIC port neither trims, marks nor loses
        self.max_backlog = 0
        self.backlog = 0  # bytes queued, not counting the frame in service
        self.high: deque[tuple[bytes, tuple, int, int]] = deque()
        self.data: deque[tuple[bytes, tuple, int, int]] = deque()
        self.busy = False  # a frame is being serialised
        self.on_depart: Callable[[float, bytes], None] | None = None
        #: data frames queued (not counting the one in service) at which the host stops
        #: taking data from its QPs
        self.data_limit = NIC_DATA_LIMIT_FRAMES if data_limit is None else data_limit
        if self.data_limit < 1:
            raise ValueError(f"{name}: data_limit must be >= 1 frame, not {self.data_limit}")
        self.max_data_frames = 0
        self.gate: NicGate | None = None  # the host's, when the fabric has one (NicGate sets it)
        self._fabric = fabric

    def enqueue(self, t: float, frame: bytes, stages: tuple, dst: int, port: int) -> None:
        """Queue ``frame`` at ``t`` (the fabric's now); ``stages`` are the links after this
        port, ``dst``/``port`` where it is delivered."""
        if not self.up:
            self.drops += 1
            return
        dscp = (frame[_OFF_TC_HI] & _DSCP_HI) << 2 | frame[_OFF_TC_LO] >> 6
        if dscp in _DSCP_HIGH:
            self.high.append((frame, stages, dst, port))
        else:
            data = self.data
            data.append((frame, stages, dst, port))
            n = len(data)
            if n > self.max_data_frames:
                self.max_data_frames = n
            if n == self.data_limit and self.gate is not None:
                self.gate.full += 1  # the host takes no more data until this port drains
        if self.busy:
            self.backlog += len(frame)
            if self.backlog > self.max_backlog:
                self.max_backlog = self.backlog
        else:
            self._serve(t)

    def set_up(self, up: bool) -> None:
        self.up = up
        if not up:
            was_full = len(self.data) >= self.data_limit
            self.drops += len(self.high) + len(self.data)
            self.high.clear()
            self.data.clear()
            self.backlog = 0
            gate = self.gate
            if was_full and gate is not None:
                gate.full -= 1
                gate.drained(self._fabric.now)

    def _serve(self, t: float) -> None:
        q = self.high or self.data
        if not q:
            self.busy = False
            return
        frame, stages, dst, port = q.popleft()
        drained = q is self.data and len(q) == self.data_limit - 1 and self.gate is not None
        if self.busy:
            self.backlog -= len(frame)
        self.busy = True
        self.tx_packets += 1
        if self.on_depart is not None:
            self.on_depart(t, frame)
        done = t + len(frame) / self.bytes_per_s
        fab = self._fabric
        fab._seq += 1
        heapq.heappush(fab._heap, (done, fab._seq, stages, 0, (dst, port, frame)))
        fab.at(done, self._done)
        if drained:  # (last: the frame is in service, so a frame the gate sends now queues)
            gate = self.gate
            assert gate is not None
            gate.full -= 1
            gate.drained(t)

    def _done(self) -> None:
        self._serve(self._fabric.now)


class NicGate:
    """A host's rule for taking data from its QPs, the I/O shell's (``mrcnic.io.aio``): control
    frames always leave; data is taken only while none of the host's live ports holds
    ``data_limit`` data frames (``full == 0``).  A QP pumped while the gate is shut hands over
    its control frames only and :meth:`wait` s; when a port drains below its limit
    (:meth:`drained`) the waiting QPs are pumped again in the order they came, each once, while
    the gate stays open (round robin: a QP that sends and is shut out again goes to the back).
    """

    __slots__ = ("ports", "full", "_waiting", "_draining")

    def __init__(self, ports: Sequence[HostPort]) -> None:
        self.ports = list(ports)
        self.full = 0  # live ports whose data queue is at its limit
        self._waiting: dict[int, Callable[[float], None]] = {}  # id(QP) -> pump it at t
        self._draining = False
        for p in self.ports:
            p.gate = self

    def wait(self, key: int, pump: Callable[[float], None]) -> None:
        """A QP (``key``: its id) was shut out: ``pump(t)`` it when there is room."""
        if key not in self._waiting:
            self._waiting[key] = pump

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def drained(self, t: float) -> None:
        """A port drained below its limit (or went down) at ``t``: pump the waiting QPs, oldest
        first, while every live port has room."""
        if self._draining:
            return  # (a QP pumped below sent a frame that started on an idle port)
        self._draining = True
        try:
            waiting = self._waiting
            while waiting and not self.full:
                key = next(iter(waiting))
                pump = waiting.pop(key)
                pump(t)
        finally:
            self._draining = False


def host_net(shape: usid.ClosShape, host: int) -> NetConfig:
    """A simulated host's NetConfig: one port per plane, MAC 02:00:hh:hh:pp:01 (its peer,
    the T0 switch, ...:02), so every (host, plane) has its own addresses."""
    hi, lo = host >> 8, host & 0xFF
    return NetConfig(
        shape,
        host,
        tuple(
            PortAddr(bytes((2, 0, hi, lo, p, 1)), bytes((2, 0, hi, lo, p, 2)))
            for p in range(shape.planes)
        ),
    )


def clos_path(shape: usid.ClosShape, key: bytes, host: int, port: int) -> usid.PathInfo | None:
    """Where a frame that ``host`` sends on ``port`` goes in a whole Clos: its destination
    address ``key`` decoded, or None when it names no path of the fabric or not one that
    starts at that host's T0 in that port's plane (the frame is misrouted)."""
    try:
        info = usid.decode_path(shape, key)
    except usid.UsidError:
        return None
    if info.plane != port or info.src_t0 != host // shape.hosts_per_t0:
        return None
    return info


def clos_link_specs(spec: Any) -> tuple[LinkSpec, LinkSpec, LinkSpec]:
    """A whole Clos's links (``spec``: a ``clos.ClosSpec``): T0 -> T1 uplinks (random loss on
    them), T1 -> T0 downlinks (half the propagation each), and the last hop into a host (port
    rate, no ECN, trims to TRIMMED_LASTHOP)."""
    half = spec.prop_s / 2
    q, ecn, trim = spec.queue_bytes, spec.ecn_bytes, spec.trim
    return (
        LinkSpec(spec.path_rate, half, q, ecn, trim, False, spec.loss),
        LinkSpec(spec.path_rate, half, q, ecn, trim, False),
        LinkSpec(spec.port_rate_bps, 0.0, q, None, trim, True),
    )


def clos_fabric_links(up: Sequence[Any], down: Sequence[Any]) -> list[Any]:
    """Every T0-T1 link of a whole Clos, both directions, plane by plane (``up[plane][t0][t1]``
    then ``down[plane][t1][t0]``): ``ClosFabric`` and the C fabric list theirs alike."""
    out: list[Any] = []
    for up_p, down_p in zip(up, down, strict=True):
        for row in up_p:
            out += row
        for row in down_p:
            out += row
    return out


def clos_links(nic: Sequence[Any], up: Sequence[Any], down: Sequence[Any],
               last: Sequence[Any]) -> list[Any]:  # fmt: skip
    """Every NIC port, T0-T1 link and last hop of a whole Clos, in that order."""
    out: list[Any] = [port for ports in nic for port in ports]
    out += clos_fabric_links(up, down)
    for row in last:
        out += row
    return out


@dataclass(frozen=True, slots=True)
class FabricSpec:
    planes: int = 8
    paths_per_plane: int = 4
    port_rate_bps: float = LAB.port_rate_bps  # the lab's scale (mrcnic.sim.scale)
    path_rate_bps: float | None = None  # default: the port rate (a non-blocking Clos)
    prop_s: float = LAB.prop_s  # one-way propagation, whole path
    queue_bytes: int = LAB.queue_bytes
    ecn_bytes: int | None = LAB.ecn_bytes
    trim: bool = True
    loss: float = 0.0
    # ((path, loss), ...): a path's own loss probability, data direction (h0 -> h1) only, as a
    # switch dropping one path's packets would (path = plane * paths_per_plane + t1)
    path_loss: tuple[tuple[int, float], ...] = ()
    seed: int = 1

    @property
    def shape(self) -> usid.ClosShape:
        return usid.ClosShape(planes=self.planes, t0=2, t1=self.paths_per_plane, hosts_per_t0=1)

    @property
    def path_rate(self) -> float:
        return self.path_rate_bps if self.path_rate_bps is not None else self.port_rate_bps

    def capacity_bps(
        self, plane_up: list[bool] | None = None, path_up: list[list[bool]] | None = None
    ) -> float:
        """What the fabric carries one way: per plane min(port, sum of live paths)."""
        total = 0.0
        for p in range(self.planes):
            if plane_up is not None and not plane_up[p]:
                continue
            paths = self.paths_per_plane
            if path_up is not None:
                paths = sum(path_up[p])
            total += min(self.port_rate_bps, paths * self.path_rate)
        return total


Deliver = Callable[[int, int, bytes, float], None]  # (host, port, frame, t)
#: wire bytes of a data packet besides its payload, and of a control frame (SACK, NACK): what
#: every simulated fabric's base RTT counts
DATA_OVERHEAD_BYTES = 110
CTRL_FRAME_BYTES = 120
# an event queue entry: (t, seq, fn, None, None) calls fn at t; (t, seq, stages, i,
# (dst, port, frame)) is a frame reaching stages[i] of its route (i == len(stages): delivered)
HeapEntry = tuple[float, int, Any, int | None, Any]


@contextmanager
def frozen_gc() -> Iterator[None]:
    """While a run plays: the objects built before it (the fabric, the QPs, their memory) are
    left out of the cyclic garbage collector's passes (``gc.freeze``). They live as long as the
    run; walking them on every full pass made a 128-host permutation of 1 MiB flows take 0.75 s
    of wall time against 0.54 s frozen (the C fabric and engines, the 2-core machine,
    2026-11-28). Nothing is left out if the caller froze objects of its own."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class EventLoop:
    """A fabric's clock and event queue, in virtual time: :meth:`at` schedules a callback, a
    frame entry ``(t, seq, stages, i, (dst, port, frame))`` reaches ``stages[i]`` of its route
    at ``t`` (``i == len(stages)``: delivered to ``deliver(dst, port, frame, t)``), and
    :meth:`run` plays them in order. Every simulated fabric is one (:class:`Fabric`,
    ``incast.IncastFabric``, ``clos.ClosFabric``); they differ in their links and routes."""

    def __init__(self, deliver: Deliver, seed: int) -> None:
        self.deliver = deliver
        self.rng = random.Random(seed)
        self.now = 0.0
        self._heap: list[HeapEntry] = []
        self._seq = 0
        #: per host, the NIC's rule for taking data from its QPs (the Pump follows it); None:
        #: a fabric whose NIC ports are plain links (``incast.IncastFabric``)
        self.gates: list[NicGate] | None = None

    def at(self, t: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, None, None))

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        with frozen_gc():
            self._run(until, stop)

    def _run(self, until: float, stop: Callable[[], bool] | None) -> None:
        heap = self._heap
        rng = self.rng
        pop = heapq.heappop
        push = heapq.heappush
        while heap:
            t, _, a, b, c = heap[0]
            if t > until:
                break
            pop(heap)
            self.now = t
            if b is None:
                a()
                if stop is not None and stop():
                    return
                continue
            stages, i, (dst, port, frame) = a, b, c
            if i == len(stages):
                self.deliver(dst, port, frame, t)
                if stop is not None and stop():
                    return
                continue
            r = stages[i].transmit(t, frame, rng)
            if r is not None:
                self._seq += 1
                push(heap, (r[0], self._seq, stages, i + 1, (dst, port, r[1])))

    def cut(self, links: Sequence[Link]) -> int:
        """Take ``links`` down now and lose what they hold, as a real link does: a link's
        queue is analytic, so a frame queued on it or on its wire is already an entry for
        its next stage; those entries go (each counted in its link's ``drops``).  Returns
        how many frames were lost.  (p2p's ``set_path`` only stops new frames.)"""
        if not links:
            return 0
        ids = {id(link) for link in links}
        for link in links:
            link.up = False
            link.busy_until = min(link.busy_until, self.now)
        keep: list[HeapEntry] = []
        lost = 0
        for e in self._heap:
            stages, i = e[2], e[3]
            if i and id(stages[i - 1]) in ids:
                stages[i - 1].drops += 1
                lost += 1
            else:
                keep.append(e)
        if lost:
            heapq.heapify(keep)
            self._heap[:] = keep  # in place: run() holds the list
        return lost

    @property
    def pending(self) -> int:
        return len(self._heap)


class Fabric(EventLoop):
    """Links plus an event queue.  ``send(host, port, frame, t)`` injects; arrivals call
    ``deliver``; :meth:`at` schedules arbitrary callbacks (timers, failures)."""

    def __init__(self, spec: FabricSpec, deliver: Deliver) -> None:
        super().__init__(deliver, spec.seed)
        self.spec = spec
        self.shape = spec.shape
        P, T = spec.planes, spec.paths_per_plane
        fab = LinkSpec(
            spec.path_rate,
            spec.prop_s,
            spec.queue_bytes,
            spec.ecn_bytes,
            spec.trim,
            False,
            spec.loss,
        )
        last = LinkSpec(spec.port_rate_bps, 0.0, spec.queue_bytes, None, spec.trim, True)
        # [direction][plane] / [direction][plane][t1]; direction 0 = h0 -> h1
        self.nic = [
            [HostPort(f"h{d}-p{p}-nic", spec.port_rate_bps, self) for p in range(P)]
            for d in range(2)
        ]
        self.gates = [NicGate(ports) for ports in self.nic]
        self.path = [
            [[Link(f"d{d}-p{p}-t1-{t}", fab) for t in range(T)] for p in range(P)] for d in range(2)
        ]
        self.last = [[Link(f"h{1 - d}-p{p}-lasthop", last) for p in range(P)] for d in range(2)]
        self._route: dict[bytes, int] = {}
        self.misrouted = 0
        for path, loss in spec.path_loss:
            self.path[0][path // T][path % T].loss = loss

    def send(self, host: int, port: int, frame: bytes, t: float) -> None:
        """Host ``host`` hands ``frame`` to its port ``port`` at time ``t``."""
        t1 = self._route.get(frame[_DST])
        if t1 is None:
            try:
                info = usid.decode_path(self.shape, bytes(frame[_DST]))
            except usid.UsidError:
                self.misrouted += 1
                return
            if info.plane != port or info.dst_host != 1 - host or info.t1 is None:
                self.misrouted += 1
                return
            t1 = info.t1
            self._route[bytes(frame[_DST])] = t1
        d = host
        nic = self.nic[d][port]
        stages = (self.path[d][port][t1], self.last[d][port])
        if t <= self.now:
            nic.enqueue(self.now, frame, stages, 1 - host, port)
        else:
            self.at(t, lambda: nic.enqueue(t, frame, stages, 1 - host, port))

    # -- faults --------------------------------------------------------------------------------

    def set_path(self, plane: int, t1: int, up: bool) -> None:
        for d in range(2):
            self.path[d][plane][t1].up = up

    def set_plane(self, plane: int, up: bool) -> None:
        for t in range(self.spec.paths_per_plane):
            self.set_path(plane, t, up)

    def set_port(self, host: int, plane: int, up: bool) -> None:
        """A host's NIC port: its transmit link and the last hop into it."""
        self.nic[host][plane].set_up(up)
        self.last[1 - host][plane].up = up

    def links(self) -> list[Link | HostPort]:
        out: list[Link | HostPort] = [*self.nic[0], *self.nic[1], *self.last[0], *self.last[1]]
        for d in range(2):
            for row in self.path[d]:
                out.extend(row)
        return out

    def surviving_capacity_bps(self) -> float:
        cap = 0.0
        s = self.spec
        for p in range(s.planes):
            if not (self.nic[0][p].up and self.last[0][p].up):
                continue
            live = sum(1 for link in self.path[0][p] if link.up)
            cap += min(s.port_rate_bps, live * s.path_rate)
        return cap
