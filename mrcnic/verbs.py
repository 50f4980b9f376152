"""The user API: a device on a set of ports, registered memory, queue pairs, writes and
completions (ibverbs in spirit, MRC in substance).  Walkthrough: docs/api.md.

A :class:`Device` owns the host's ports and demultiplexes frames to its QPs; it is itself
sans-I/O (``receive_frame`` / ``frames_to_send`` / ``get_timer`` / ``handle_timer``), so the
same object runs over real AF_PACKET ports (``mrcnic.io.aio``) or over the simulated fabric
(:class:`SimNetwork`, no root needed).  A device hosts QPs of more than one transport:
``create_qp(transport="mrc")`` (this project's MRC, :class:`mrcnic.transport.qp.QueuePair`) or
``transport="rocev2"`` (the RoCEv2 baseline, ``mrcnic.rocev2.qp.RoceQueuePair``: one path per QP,
go-back-N), both driven through the same sans-I/O surface.

    dev = Device(net, port_rate_bps=100e6)
    mr = dev.register(bytearray(1 << 20))
    qp = dev.create_qp()
    blob = qp.export()                        # send to the peer out of band
    qp.connect(QpAttributes.from_json(peer_blob))
    qp.post_write(1, data, remote_buffer, imm=7)
    for wc in qp.poll_cq(): ...
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mrcnic.profiles import (
    DEFAULT_EVENTS,
    CcProfile,
    EvEventQueue,
    EvProfile,
    EvStatus,
    QpLimits,
    QpOptions,
    ev_status,
)
from mrcnic.sim.fabric import Fabric, FabricSpec, host_net
from mrcnic.sim.pump import Pump
from mrcnic.transport.engine import EngineChoice
from mrcnic.transport.engine_choice import PY_ENGINES, CEngines
from mrcnic.transport.ev import EvStateChanged, EvStats
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import Access, MemoryRegion, MemoryTable
from mrcnic.transport.port_queues import PortQueues
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import (
    DEFAULT_MAX_QPS,
    MAX_OUTSTANDING_WRITES,
    Event,
    ImmReceived,
    NetConfig,
    QpAttributes,
    QpConfig,
    QpErrorEvent,
    QpState,
    QpStateError,
    QpStats,
    ResourceLimitError,
    WcStatus,
    WriteCompleted,
    peek_dest_qp,
    seeded,
)
from mrcnic.transport.rx_engine import ENGINES, MAX_REGIONS, RxEngines, engine_from_env
from mrcnic.wire import usid
from mrcnic.wire.layout import EV_PROBE_QPN
from mrcnic.wire.pfc import is_pfc

__all__ = [
    "Access",
    "Device",
    "DeviceLimits",
    "DeviceStats",
    "EvStateChanged",
    "ImmReceived",
    "MemoryRegion",
    "ResourceLimitError",
    "QP",
    "QpAttributes",
    "QpConfig",
    "QpErrorEvent",
    "RemoteBuffer",
    "SimNetwork",
    "WcStatus",
    "WriteCompleted",
]


@dataclass(frozen=True, slots=True)
class RemoteBuffer:
    """What a peer needs to write into a region: exchanged out of band like QP attributes."""

    va: int
    rkey: int
    length: int

    @classmethod
    def of(cls, mr: MemoryRegion) -> RemoteBuffer:
        return cls(mr.base_va, mr.rkey, mr.length)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> RemoteBuffer:
        try:
            d = json.loads(text)
            rb = cls(int(d["va"]), int(d["rkey"]), int(d["length"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad remote buffer record: {e}") from None
        if not (0 <= rb.va < 1 << 64 and 0 <= rb.rkey < 1 << 32 and rb.length >= 0):
            raise ValueError("bad remote buffer record: field out of range")
        return rb


class QP:
    """A queue pair as the user sees it: post writes, poll or await completions, stats."""

    def __init__(self, device: Device, core: QueuePair) -> None:
        self.device = device
        self.core = core
        self._cq: deque[WriteCompleted] = deque()
        self._rq: deque[ImmReceived] = deque()
        self._other: deque[Event] = deque()
        self._waiters: dict[int, asyncio.Future[WriteCompleted]] = {}
        self.transport = "mrc"
        self.ev_profile: EvProfile | None = None  # the profiles it was created from, if any
        self.cc_profile: CcProfile | None = None
        self.destroyed = False  # Device.destroy_qp

    @property
    def qpn(self) -> int:
        return self.core.qpn

    @property
    def state(self) -> QpState:
        return self.core.state

    def attributes(self) -> QpAttributes:
        return self.core.local_attributes()

    def export(self) -> str:
        """This QP's attributes as a small JSON record for the out-of-band exchange."""
        return self.core.local_attributes().to_json()

    def connect(self, remote: QpAttributes | str | bytes) -> None:
        if not isinstance(remote, QpAttributes):
            remote = QpAttributes.from_json(remote)
        self.core.connect(remote)

    def post_write(
        self,
        wr_id: int,
        data: bytes | bytearray | memoryview,
        remote: RemoteBuffer,
        offset: int = 0,
        imm: int | None = None,
    ) -> None:
        """RDMA Write ``data`` to ``remote.va + offset`` (with immediate if ``imm`` is set)."""
        if self.destroyed:
            raise QpStateError(f"QP {self.qpn:#x} was destroyed: create another QP")
        if offset < 0 or offset + len(data) > remote.length:
            raise ValueError(
                f"write of {len(data)} bytes at offset {offset} overflows the {remote.length}-byte "
                "remote buffer"
            )
        self.core.post_write(wr_id, data, remote.va + offset, remote.rkey, imm)
        wake = self.device.on_work
        if wake is not None:
            wake()  # an I/O shell sends at once instead of at its next timer

    def _dispatch(self) -> None:
        core = self.core
        while (e := core.next_event()) is not None:
            if isinstance(e, WriteCompleted):
                fut = self._waiters.pop(e.wr_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(e)
                else:
                    self._cq.append(e)
            elif isinstance(e, ImmReceived):
                self._rq.append(e)
            else:
                self._other.append(e)
                if self.device.ev_event_queues and isinstance(e, EvStateChanged):
                    prof = self.ev_profile
                    mask = prof.events if prof is not None else DEFAULT_EVENTS
                    pid = prof.profile_id if prof is not None else None
                    for q in self.device.ev_event_queues:
                        q.offer(self.qpn, pid, mask, e)

    def poll_cq(self, max_entries: int = 64) -> list[WriteCompleted]:
        """Requester completions (in posting order), at most ``max_entries``."""
        self._dispatch()
        cq = self._cq
        if not cq:
            return []
        return [cq.popleft() for _ in range(min(max_entries, len(cq)))]

    def poll_recv(self, max_entries: int = 64) -> list[ImmReceived]:
        """Write-with-immediate completions at this (responder) side, in the sender's order."""
        self._dispatch()
        return [self._rq.popleft() for _ in range(min(max_entries, len(self._rq)))]

    def poll_events(self) -> list[Event]:
        """Everything else: EV state changes, peer port status, QP errors."""
        self._dispatch()
        other = self._other
        if not other:
            return []
        out = list(other)
        other.clear()
        return out

    def completion(self, wr_id: int) -> asyncio.Future[WriteCompleted]:
        """A future resolved with the completion of ``wr_id`` (for the asyncio shell):
        ``wc = await qp.completion(wr_id)``.  Call it before the completion can happen."""
        fut: asyncio.Future[WriteCompleted] = asyncio.get_running_loop().create_future()
        self._waiters[wr_id] = fut
        return fut

    def stats(self) -> QpStats:
        return self.core.get_stats()

    def ev_stats(self) -> list[EvStats]:
        # A RoCEv2 QP has one path and no EV table: nothing per EV to report.
        evs = getattr(self.core, "evs", None)
        return evs.stats() if evs is not None else []

    def ev_states(self) -> dict[str, int]:
        return self.core.ev_states()

    def deny_ev(self, ev: int) -> None:
        self.core.deny_ev(ev, self.device.clock())

    def allow_ev(self, ev: int) -> None:
        self.core.allow_ev(ev, self.device.clock())

    # -- the controller's view (mrcnic.profiles; docs/api.md, "The OCP libmrc control model") --

    def ev_status(self, ev: int) -> EvStatus:
        """One EV's state as a controller sees it (SKIP shows as GOOD; UNKNOWN: not ours)."""
        evs = getattr(self.core, "evs", None)
        if evs is None:
            return ev_status(None)
        slot = evs.slot_of.get(ev)
        return ev_status(evs.state[slot] if slot is not None else None)

    def ev_statuses(self) -> dict[int, EvStatus]:
        """Every EV of the QP (sprayed and backups) and its state as a controller sees it."""
        evs = getattr(self.core, "evs", None)
        if evs is None:
            return {}
        return {ev: ev_status(st) for ev, st in zip(evs.ev_values, evs.state, strict=True)}

    def set_ev_status(self, ev: int, status: EvStatus | str) -> None:
        """The controller sets an EV DENIED (never sent on) or GOOD (in use again, whatever
        its state).  ValueError for another status or an EV the QP does not hold."""
        status = EvStatus(status)
        if status is EvStatus.DENIED:
            self.deny_ev(ev)
        elif status is EvStatus.GOOD:
            self.allow_ev(ev)
        else:
            raise ValueError(f"a controller sets EVs DENIED or GOOD, not {status.name}")

    def limits(self) -> QpLimits:
        """The window and write-with-immediate limits in both directions."""
        mine = self.core.local_attributes()
        peer = self.core.peer
        return QpLimits(
            mine.window_psns,
            mine.max_wimm_inflight,
            peer.window_psns if peer is not None else None,
            peer.max_wimm_inflight if peer is not None else None,
        )


TRANSPORTS = ("mrc", "rocev2")


def _core_class(transport: str) -> type:
    """The sans-I/O QP class of a transport (both share QueuePair's constructor and surface)."""
    if transport == "mrc":
        return QueuePair
    if transport == "rocev2":
        try:
            from mrcnic.rocev2.qp import RoceQueuePair  # lazy: the baseline is optional
        except ImportError as e:
            raise ValueError(
                "transport 'rocev2' needs mrcnic.rocev2.qp.RoceQueuePair, which this installation "
                f"does not have ({e})"
            ) from None
        return RoceQueuePair
    raise ValueError(f"unknown transport {transport!r}: choose one of {', '.join(TRANSPORTS)}")


@dataclass(frozen=True, slots=True)
class DeviceLimits:
    """What one device holds at most; beyond, the call raises ResourceLimitError and changes
    nothing (docs/api.md, "Limits")."""

    max_qps: int = DEFAULT_MAX_QPS
    max_regions: int = MAX_REGIONS  # the C engines' memory table: both engines agree
    #: per QP, both engines (MAX_OUTSTANDING_WRITES: the C send engine's message ring)
    max_outstanding_writes: int = MAX_OUTSTANDING_WRITES

    def __post_init__(self) -> None:
        if self.max_qps < 1:
            raise ValueError("max_qps must be >= 1")
        if not 1 <= self.max_regions <= MAX_REGIONS:
            raise ValueError(f"max_regions must be in 1..{MAX_REGIONS}")
        if self.max_outstanding_writes != MAX_OUTSTANDING_WRITES:
            raise ValueError(
                f"max_outstanding_writes is fixed at {MAX_OUTSTANDING_WRITES} (the C engine's ring)"
            )


@dataclass(slots=True)
class DeviceStats:
    """Frames the device dropped before any QP saw them (each QP counts the rest in its
    QpStats; the EV-probe QP 0x2 in ``Device.ev_probes``)."""

    rx_not_mrc: int = 0  # not IPv6/UDP to port 4791, or too short for a BTH
    rx_unknown_qp: int = 0  # an MRC frame to a QP number this device does not have
    rx_too_big: int = 0  # longer than the receive ring's slots
    rx_pfc: int = 0  # PFC (802.1Qbb) frames: handed to the port's pause (``on_pfc``)

    def as_dict(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in self.__slots__}


class Device:
    """A NIC: one port per plane, a memory registry, QPs; sans-I/O like the QPs it holds.

    ``on_work`` (None by default) is called after every ``post_write``: an I/O shell sets it to
    pump the device at once rather than at its next timer.
    """

    def __init__(
        self,
        net: NetConfig,
        port_rate_bps: float | Sequence[float] = 100e6,
        clock: Callable[[], float] = time.monotonic,
        seed: int | None = None,
        engine: str | None = None,
        limits: DeviceLimits | None = None,
    ) -> None:
        self.net = net
        self.limits = limits if limits is not None else DeviceLimits()
        rates = (
            [port_rate_bps] * len(net.ports)
            if isinstance(port_rate_bps, int | float)
            else list(port_rate_bps)
        )
        if len(rates) != len(net.ports):
            raise ValueError("one port rate per port")
        self.port_rates_bps = rates
        self.clock = clock
        self.memory = MemoryTable(seed)
        #: the responder data path's engine (MRC_NIC_ENGINE: "c" or "py";
        #: mrcnic.transport.rx_engine); ``engine`` overrides the environment
        self.engine_name = engine if engine is not None else engine_from_env()
        if self.engine_name not in ENGINES:
            raise ValueError(f"engine {self.engine_name!r}: not an engine (c, py)")
        self._rx_engines = RxEngines(self.memory) if self.engine_name == "c" else None
        self._engine_choice: EngineChoice = (
            CEngines(self._rx_engines) if self._rx_engines is not None else PY_ENGINES
        )
        self._rx_batch: tuple[Any, float] = (None, 0.0)  # (ring, now) while dispatching
        self.qps: dict[int, QP] = {}
        # QP 0x2: answers EV probes, hands their answers to the QP they name
        self.ev_probes = EvProbeDesk(net, lambda qpn: q.core if (q := self.qps.get(qpn)) else None)
        self._cores: list = []  # the sans-I/O QPs, for the per-frame loops
        self.on_work: Callable[[], None] | None = None
        # QP numbers start at 0x10 (0x2 is the EV-probe QP). Unseeded devices start at a random
        # base: several NIC processes on one host see every frame of its ports and tell their
        # QPs apart by number only, so two processes must not both hand out 0x10.
        base = (seed or 0) % 0x1000 if seed is not None else secrets.randbelow(0xFF0000)
        self._next_qpn = 0x10 + base
        self._seed = seed if seed is not None else int(time.time_ns() & 0xFFFF)
        self._seeded = seed is not None
        self.ev_event_queues: list[EvEventQueue] = []  # controllers' EV event queues
        self.stats = DeviceStats()
        #: PFC frames: ``on_pfc(port, frame, now_s)`` (the I/O shell pauses that port)
        self.on_pfc: Callable[[int, Any, float], None] | None = None
        self._rx_port = 0
        #: the burst a RoCEv2 QP's pacing may send at once (RoceQueuePair.pace_burst_s)
        self.pace_burst_s = 0.0

    def set_pace_burst(self, seconds: float) -> None:
        """Let every RoCEv2 QP of the device (and every one made later) send up to
        ``seconds`` of its rate at once: an I/O shell that wakes at a coarser tick than one
        frame's time sets its tick, so a paced QP hands over a tick's frames per wake (its
        port's pacer still spaces them on the wire). MRC QPs have no pacing of their own."""
        if not seconds >= 0:
            raise ValueError(f"a pacing burst is >= 0 seconds, got {seconds!r}")
        self.pace_burst_s = seconds
        for core in self._cores:
            if hasattr(core, "pace_burst_s"):
                core.pace_burst_s = seconds

    def register(
        self,
        buffer: bytearray | memoryview,
        access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE,
    ) -> MemoryRegion:
        if len(self.memory) >= self.limits.max_regions:
            raise ResourceLimitError(
                f"{self.limits.max_regions} regions registered (the device's limit): "
                "deregister one, or register one larger buffer and write at offsets in it"
            )
        return self.memory.register(buffer, access)

    def deregister(self, mr: MemoryRegion) -> None:
        self.memory.deregister(mr)

    def create_qp(
        self,
        config: QpConfig | None = None,
        transport: str = "mrc",
        *,
        ev_profile: EvProfile | None = None,
        cc_profile: CcProfile | None = None,
        options: QpOptions | None = None,
    ) -> QP:
        """A new QP of ``transport`` ("mrc", or "rocev2" for the baseline).  An MRC QP sprays
        over every port, so its line rate is the sum of the port rates; a RoCEv2 QP uses one
        path, so its line rate is one port's.  An MRC QP may take its EVs, congestion control
        and libmrc-style attributes from ONLINE profiles and :class:`QpOptions`, applied over
        ``config`` (``mrcnic.profiles``)."""
        cls = _core_class(transport)
        if len(self.qps) >= self.limits.max_qps:
            raise ResourceLimitError(
                f"{self.limits.max_qps} QPs on this device (its limit): destroy one first"
            )
        if transport != "mrc" and any(x is not None for x in (ev_profile, cc_profile, options)):
            raise ValueError("EV and CC profiles and QpOptions apply to MRC QPs only")
        qpn = self._next_qpn
        self._next_qpn += 1
        if config is None:
            config = QpConfig(seed=self._seed + qpn)
            if self._seeded:  # a seeded device reproduces its runs, first PSNs included
                config = seeded(config, qpn)
        for prof in (ev_profile, cc_profile, options):
            if prof is not None:
                config = prof.apply(config)
        rate = sum(self.port_rates_bps) if transport == "mrc" else max(self.port_rates_bps)
        # an MRC QP's engines: chosen here, once (connect() builds them); a RoCEv2 QP on the
        # C engine is the twin's C-backed form, served by the same dispatch
        kw: dict[str, Any] = {}
        if transport == "mrc":
            kw["engines"] = self._engine_choice
        elif self._rx_engines is not None:
            from mrcnic.rocev2.c_engine import CRoceQueuePair

            cls = CRoceQueuePair
            kw["engines"] = self._rx_engines
        core = cls(qpn, self.net, self.memory, rate, config, **kw)
        if transport == "rocev2":
            core.pace_burst_s = self.pace_burst_s
        qp = QP(self, core)
        qp.transport = transport
        for prof in (ev_profile, cc_profile):
            if prof is not None:
                prof._attach()
        qp.ev_profile, qp.cc_profile = ev_profile, cc_profile
        self.qps[qpn] = qp
        self._cores = [q.core for q in self.qps.values()]
        return qp

    def destroy_qp(self, qp: QP) -> None:
        """Take ``qp`` out of the device: it receives nothing more, its memory is freed now,
        and posting on it raises QpStateError; its stats stay readable."""
        if self._rx_engines is not None:
            self._rx_engines.remove(qp.qpn)
        release = getattr(qp.core, "release", None)
        if release is not None:
            release()
        qp.destroyed = True
        if self.qps.pop(qp.qpn, None) is not None:
            for prof in (qp.ev_profile, qp.cc_profile):
                if prof is not None:
                    prof._detach()
        self._cores = [q.core for q in self.qps.values()]

    # -- the controller (mrcnic.profiles; docs/api.md, "The OCP libmrc control model") -------

    def ev_event_queue(self, capacity: int = 1024) -> EvEventQueue:
        """A new queue of EV state changes (GOOD / ASSUMED_BAD, as each QP's EV profile asks)
        for every QP of this device; ``queue.poll()`` collects them.  Remove it from
        ``ev_event_queues`` to stop it."""
        q = EvEventQueue(capacity, collect=self._collect_ev_events)
        self.ev_event_queues.append(q)
        return q

    def _collect_ev_events(self) -> None:
        for qp in self.qps.values():
            qp._dispatch()  # events reach the queues on their way to poll_events

    def _controlled(self, profile: EvProfile | None) -> list[QP]:
        return [
            q
            for q in self.qps.values()
            if hasattr(q.core, "evs") and (profile is None or q.ev_profile is profile)
        ]

    def set_ev_status(
        self, ev: int, status: EvStatus | str, profile: EvProfile | None = None
    ) -> int:
        """Set ``ev`` DENIED or GOOD in every MRC QP holding it (only those created from
        ``profile``, if given); returns how many.  ValueError if none holds it."""
        status = EvStatus(status)
        qps = [q for q in self._controlled(profile) if q.ev_status(ev) is not EvStatus.UNKNOWN]
        if not qps:
            where = f" of EV profile {profile.profile_id}" if profile is not None else ""
            raise ValueError(f"EV {ev:#x} is not held by any QP{where}")
        for q in qps:
            q.set_ev_status(ev, status)
        return len(qps)

    def ev_statuses(self, profile: EvProfile | None = None) -> dict[int, dict[int, EvStatus]]:
        """QP number -> (EV -> state) for every MRC QP (created from ``profile``, if given)."""
        return {q.qpn: q.ev_statuses() for q in self._controlled(profile)}

    # -- sans-I/O surface for the shell ------------------------------------------------------

    def receive_batch(self, ring: Any, n: int, now_s: float, port: int = 0) -> int:
        """The first ``n`` frames of a receive ring (``mrcnic.io.batch.RecvRing``): data
        frames of QPs with a C engine go through it in one call, the rest one by one through
        :meth:`receive_frame`. Returns how many frames were too long for the ring's slots
        (also counted in ``stats.rx_too_big``)."""
        self._rx_port = port  # (the port a PFC frame among them paused)
        too_big = self._receive_batch(ring, n, now_s)
        if too_big:
            self.stats.rx_too_big += too_big
        return too_big

    def _receive_batch(self, ring: Any, n: int, now_s: float) -> int:
        eng = self._rx_engines
        cap = ring.cap
        view = ring.view
        lens = ring.lens
        rx = self.receive_frame
        too_big = 0
        if eng is None or not eng.engines or ring.ptr is None:
            for i in range(n):
                ln = lens[i]
                if ln > cap:
                    too_big += 1
                    continue
                off = i * cap
                rx(view[off : off + ln], now_s)
            return too_big

        self._rx_batch = (ring, now_s)
        done = eng.dispatch(ring.ptr, ring.c_offs, ring.c_lens, n, cap, now_s, self._in_order)
        if done is None:
            return 0  # the common case: every frame was a data frame an engine took
        for i in range(n):
            d = done[i]
            if d == 0:
                off = i * cap
                rx(view[off : off + lens[i]], now_s)
            elif d == 2:
                too_big += 1
        return too_big

    def _in_order(self, i: int) -> None:
        """Frame ``i`` of the batch being dispatched, taken by the per-frame path in its
        place (a control frame of an engine's QP)."""
        ring, now_s = self._rx_batch
        off = i * ring.cap
        self.receive_frame(ring.view[off : off + ring.lens[i]], now_s)

    def attach_port_queues(self, caps: list[int] | None) -> Any:
        """Per-port C queues for the frames the C engines build (data frames of the send
        engine, SACKs and NACKs of the receive engine), which the I/O shell's pacers drain
        (``mrcnic.transport.port_queues.PortQueues``; ``caps``: each port's data queue limit,
        in frames), or None to detach them (the engines then hand frames back as bytes).
        Returns the PortQueues, or None when this device has no C engine."""
        eng = self._rx_engines
        if eng is None:
            return None
        if caps is None:
            eng.port_queues = None
            return None
        pq = PortQueues([max(1, c) for c in caps])
        eng.port_queues = pq
        return pq

    def receive_frame(self, data: bytes | memoryview, now_s: float) -> None:
        qpn = peek_dest_qp(data)
        qp = self.qps.get(qpn) if qpn is not None else None
        if qp is not None:
            qp.core.receive_frame(data, now_s)
        elif qpn == EV_PROBE_QPN:
            self.ev_probes.receive_frame(data, now_s)
        elif qpn is None:
            if is_pfc(data):
                self.stats.rx_pfc += 1
                on_pfc = self.on_pfc
                if on_pfc is not None:
                    on_pfc(self._rx_port, data, now_s)
            else:
                self.stats.rx_not_mrc += 1
        else:
            self.stats.rx_unknown_qp += 1

    def _engine_ctrl(self) -> list[tuple[int, bytes]]:
        eng = self._rx_engines
        if eng is None or not eng.ctrl:
            return []
        out = eng.ctrl
        eng.ctrl = []
        return out

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        cores = self._cores
        eng = self._rx_engines
        if len(cores) == 1 and not self.ev_probes._out and (eng is None or not eng.ctrl):
            return cores[0].frames_to_send(now_s)
        out: list[tuple[int, bytes]] = self._engine_ctrl()
        out += self.ev_probes.control_frames_to_send()
        for core in cores:
            out += core.frames_to_send(now_s)
        return out

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        """Only the control frames waiting in every QP (ACKs, SACKs, NACKs, probes, port
        status): what the I/O shell takes on every pump, even when every port's data queue is
        full, so control never waits behind data.  ``frames_to_send`` returns them too."""
        cores = self._cores
        eng = self._rx_engines
        if len(cores) == 1 and not self.ev_probes._out and (eng is None or not eng.ctrl):
            return cores[0].control_frames_to_send()
        out: list[tuple[int, bytes]] = self._engine_ctrl()
        out += self.ev_probes.control_frames_to_send()
        for core in cores:
            ctrl = core.control_frames_to_send()
            if ctrl:
                out += ctrl
        return out

    def get_timer(self) -> float | None:
        best = None
        for core in self._cores:
            t = core.get_timer()
            if t is not None and (best is None or t < best):
                best = t
        return best

    def handle_timer(self, now_s: float) -> None:
        for core in self._cores:
            t = core.get_timer()
            if t is not None and t <= now_s:
                core.handle_timer(now_s)

    def port_status(self, port: int, up: bool, now_s: float) -> None:
        for core in self._cores:
            core.port_status(port, up, now_s)

    def dispatch(self) -> None:
        """Resolve the futures of ``QP.completion`` whose completions have arrived (the
        asyncio shell calls this after each round of I/O)."""
        for qp in self.qps.values():
            if qp._waiters:
                qp._dispatch()


class SimNetwork:
    """Two devices (h0, h1) over the simulated fabric of ``mrcnic.sim.fabric``, in virtual
    time: the API without root, for examples, tests and experiments."""

    def __init__(self, spec: FabricSpec | None = None, seed: int = 1) -> None:
        self.spec = spec or FabricSpec(planes=2, paths_per_plane=2, seed=seed)
        self.fabric = Fabric(self.spec, self._deliver)
        shape: usid.ClosShape = self.spec.shape
        self.devices: list[Device] = []
        for h in range(2):
            dev = Device(
                host_net(shape, h),
                self.spec.port_rate_bps,
                clock=lambda: self.fabric.now,
                seed=seed + h,
            )
            self.devices.append(dev)
        self._pump_loop = Pump(self.fabric)

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        self.devices[host].receive_frame(frame, t)
        self._pump(host)

    def _pump(self, host: int) -> None:
        # events stay queued in the QPs: the user polls them (QP.poll_cq, QP.poll_recv)
        self._pump_loop.pump(host, self.devices[host], self.fabric.now)

    def run_until(
        self, done: Callable[[], bool], max_s: float = 10.0, *, strict: bool = True
    ) -> float:
        """Advance virtual time until ``done()``; returns the time. When ``done()`` is still
        false after ``max_s`` more seconds: TimeoutError (``strict``, the default: a run that
        did not get there says so), or return then (``strict=False``: just advance time)."""
        for h in range(2):
            self._pump(h)
        start = self.fabric.now
        reached = False

        def check() -> bool:  # done() may consume what it looks at (poll_cq): ask it once
            nonlocal reached
            reached = reached or bool(done())
            return reached

        self.fabric.run(start + max_s, check)
        if strict and not (reached or check()):
            raise TimeoutError(
                f"run_until: the condition was still false after {max_s:g} s of virtual time "
                f"(from {start:g} s to {self.fabric.now:g} s); check the QPs' poll_events() "
                "for errors, give more max_s, or pass strict=False to only advance time"
            )
        return self.fabric.now
