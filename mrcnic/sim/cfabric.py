"""The whole Clos's fabric in C (``csrc/mrc_simnet.c``) and, on it, QPs on the C engines.

:class:`CClosFabric` is :class:`mrcnic.sim.clos.ClosFabric` with its event queue, links, NIC
ports and routes in C: the same interface (``send``, ``at``, ``run``, ``cut``, ``nic``, ``up``,
``down``, ``last``, ``gates``, counters), the same events in the same order and the same
arithmetic, so a run with the QPs' Python engines gives the same output bytes on either
fabric (tests/unit/test_simnet.py). Frames live in C: a frame costs Python nothing on its
way through the fabric.

With ``engines="c"`` the MRC QPs run on the C engines, as in the lab
(:class:`mrcnic.transport.engine_choice.CEngines`, one :class:`RxEngines` per host): a frame
for such a host is taken in C (placement, SACKs, the send engine's scoreboard), the SACKs and
NACKs its engines build go to its ports in C, and its delayed-ACK timers run in C. Python is
woken (:meth:`CClosFabric.run` calls ``wake(host, qpn, t)``, which pumps that QP) only when the
engines leave it work: congestion-control feedback, a completion or immediate, a frame they
did not take, a SACK while no reverse-EV probe is scheduled. The QPs' policy (EV states,
NSCC, timers, probes, errors) stays the Python the lab runs.

What it does not do: priority flow control (``--pfc`` with RoCEv2 runs the Python fabric,
:mod:`mrcnic.sim.pfc`), and ``HostPort.on_depart``.
"""

from __future__ import annotations

import mmap
import random
from collections.abc import Callable, Sequence
from typing import Any

from mrcnic.sim import pfc as simpfc
from mrcnic.sim.fabric import (
    DATA_OVERHEAD_BYTES,
    NIC_DATA_LIMIT_FRAMES,
    LinkSpec,
    NicGate,
    clos_fabric_links,
    clos_link_specs,
    clos_links,
    clos_path,
    frozen_gc,
)
from mrcnic.transport.engine_choice import PY_ENGINES, CEngines
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp_types import QpState
from mrcnic.transport.rx_engine import CRxEngine, RxEngines, c_module
from mrcnic.transport.tx_engine import CTxEngine
from mrcnic.wire.layout import OFF_DST

FABRICS = ("c", "py")
ENGINES = ("c", "py")
_HEAP_START = 1 << 16
_MAX_START_CHUNKS = 96  # 1.7 GB of frame slots
_BINS_START = 1 << 16  # timeline bins to begin with (they grow)
_SLOT_LEN = 4352  # bytes per frame slot: a 4096-byte MTU's data frame (4206) and headroom
_NO_FRAME, _NO_EVENT, _NO_ROUTE = -1, -2, -3
_IDLE, _CALL, _DELIVER, _GATE, _WAKE, _BINS = 0, 1, 2, 3, 4, 5
_WAKE_RX, _WAKE_TX = 1, 2


def available() -> bool:
    """The C module is built with the C fabric."""
    m = c_module()
    return m is not None and hasattr(m.lib, "mrc_simnet_run")


def pool_chunks(spec: Any) -> int:
    """Chunks of 4,096 frame slots the pool starts with: what the run will likely hold at once
    (every host's initial window, NSCC's 1.5 BDPs, in flight or in its NIC's queues, and some
    control frames), so their pages are mapped while the fabric is built, not per frame while
    it runs; at most ``_MAX_START_CHUNKS`` (it grows beyond as it needs)."""
    frame = spec.mtu + DATA_OVERHEAD_BYTES
    bdp = spec.host_capacity_bps * spec.base_rtt_s / 8 / frame
    want = spec.hosts * (int(1.5 * bdp) + 64)
    return max(1, min(_MAX_START_CHUNKS, -(-want // 4096)))


class CLink:
    """A link of the C fabric, as :class:`mrcnic.sim.fabric.Link` (its state is C's)."""

    __slots__ = ("name", "spec", "index", "_c")

    def __init__(self, name: str, spec: LinkSpec, index: int, c: Any) -> None:
        self.name = name
        self.spec = spec
        self.index = index
        self._c = c

    @property
    def up(self) -> bool:
        return bool(self._c.up)

    @up.setter
    def up(self, v: bool) -> None:
        self._c.up = 1 if v else 0

    @property
    def loss(self) -> float:
        return float(self._c.loss)

    @loss.setter
    def loss(self, v: float) -> None:
        self._c.loss = v

    busy_until = property(lambda self: float(self._c.busy_until))
    tx_packets = property(lambda self: int(self._c.tx_packets))
    tx_bytes = property(lambda self: int(self._c.tx_bytes))
    drops = property(lambda self: int(self._c.drops))
    trims = property(lambda self: int(self._c.trims))
    marks = property(lambda self: int(self._c.marks))
    losses = property(lambda self: int(self._c.losses))
    max_backlog = property(lambda self: int(self._c.max_backlog))


class CHostPort:
    """A NIC port of the C fabric, as :class:`mrcnic.sim.fabric.HostPort`."""

    __slots__ = ("name", "index", "gate", "_c", "_fabric")
    trims = marks = losses = 0  # a NIC port neither trims, marks nor loses

    def __init__(self, name: str, index: int, c: Any, fabric: CClosFabric) -> None:
        self.name = name
        self.index = index
        self._c = c
        self._fabric = fabric
        self.gate: CNicGate | None = None

    @property
    def up(self) -> bool:
        return bool(self._c.up)

    def set_up(self, up: bool) -> None:
        fab = self._fabric
        if fab._lib.mrc_simnet_port_set_up(fab.c, self.index, 1 if up else 0) == 1:
            assert self.gate is not None
            self.gate.drained(fab.now)

    data_limit = property(lambda self: int(self._c.data_limit))
    tx_packets = property(lambda self: int(self._c.tx_packets))
    drops = property(lambda self: int(self._c.drops))
    max_backlog = property(lambda self: int(self._c.max_backlog))
    max_data_frames = property(lambda self: int(self._c.max_data_frames))
    backlog = property(lambda self: int(self._c.backlog))


class CNicGate(NicGate):
    """A host's rule for taking data from its QPs (:class:`mrcnic.sim.fabric.NicGate`), its
    count of full ports kept in C (``struct mrc_simnet_host.gate_full``, which the C ports
    change); C also hears whether QPs wait (``gate_waiting``), to hand a drained port over."""

    __slots__ = ("_host",)

    def __init__(self, ports: Sequence[CHostPort], host: Any) -> None:
        self._host = host  # the C struct mrc_simnet_host
        super().__init__(ports)  # type: ignore[arg-type]  # (C ports, the same gate rule)

    @property  # type: ignore[override]  # (NicGate's slot, here C's)
    def full(self) -> int:
        return int(self._host.gate_full)

    @full.setter
    def full(self, v: int) -> None:
        self._host.gate_full = v

    def wait(self, key: int, pump: Callable[[float], None]) -> None:
        super().wait(key, pump)
        self._host.gate_waiting = 1

    def drained(self, t: float) -> None:
        try:
            super().drained(t)
        finally:
            self._host.gate_waiting = 1 if self._waiting else 0


class _HostSink:
    """A host's frames built in C, straight into its ports: the control frames its
    RxEngines build when Python called them (a timer, an EV probe's answer, the per-frame
    path; the ``port_queues`` hook of :class:`RxEngines`, whose ``slot_len`` 0 keeps the send
    engine from writing into port queues of its own), and its send engines' data frames
    (``CTxEngine.sink``). Either way they enter the fabric when and in the order the pump
    would have sent them as bytes, so the NIC's rule (the gate) is the same for both engines."""

    slot_len = 0
    n = 0

    def __init__(self, fabric: CClosFabric, host: int) -> None:
        self._fabric = fabric
        self._host = host

    def push_high(self, buf: Any, slot_len: int, lens: Any, planes: Any, n: int) -> None:
        self._fabric._send_many(self._host, buf, slot_len, lens, planes, n)

    def engine_out(self, o: Any) -> None:
        self._fabric._send_many(self._host, o.buf, o.slot_len, o.len, o.plane, o.n)

    def frames(self, frames: list[tuple[int, Any]]) -> None:
        fab, host = self._fabric, self._host
        now = fab.now
        for port, frame in frames:
            fab.send(host, port, frame, now)


class CClosFabric:
    """A :class:`mrcnic.sim.clos.ClosSpec` fabric in C (module doc). ``deliver(host, port,
    frame, t)`` takes the frames for hosts without C engines (and those the engines leave);
    ``wake(host, qpn, t)`` is called when a QP on the C engines has work for Python (its owner
    pumps it); ``engines``: ``c`` to run MRC QPs on the C engines (:meth:`engines_for`)."""

    def __init__(
        self,
        spec: Any,
        deliver: Callable[[int, int, bytes, float], None],
        wake: Callable[[int, int, float], None] | None = None,
        engines: str = "py",
    ) -> None:
        m = c_module()
        if m is None or not hasattr(m.lib, "mrc_simnet_run"):
            raise RuntimeError("the C fabric needs the C module mrcnic._mrcfast: run `make setup`")
        if engines not in ENGINES:
            raise ValueError(f"engines {engines!r}: c or py")
        self._ffi = ffi = m.ffi
        self._lib = lib = m.lib
        self.spec = spec
        self.shape = spec.shape
        self.deliver = deliver
        self.wake = wake
        self.engines = engines
        self.pfc = False
        P, T0, T1, H = spec.planes, spec.t0, spec.t1, spec.hosts
        up, down, last = clos_link_specs(spec)
        n_links = 2 * P * T0 * T1 + P * H
        self._keep: list[Any] = []
        c = self.c = ffi.new("struct mrc_simnet *")
        self._links_arr = ffi.new("struct mrc_simnet_link[]", n_links)
        self._ports_arr = ffi.new("struct mrc_simnet_port[]", H * P)
        self._hosts_arr = ffi.new("struct mrc_simnet_host[]", H)
        c.links, c.n_links = self._links_arr, n_links
        c.ports, c.n_ports, c.planes = self._ports_arr, H * P, P
        c.hosts, c.n_hosts = self._hosts_arr, H
        # routes: one per destination address a frame may carry (a host's per plane: its T0's
        # downlink, or across each T1 from each other T0)
        routes = max(64, H * P * (T1 * (T0 - 1) + 1))
        self._routes_arr = ffi.new("struct mrc_simnet_route[]", routes)
        hash_cap = 1 << (2 * routes - 1).bit_length()
        self._keys = ffi.new("uint8_t[]", hash_cap * 16)
        self._slots = ffi.new("int32_t[]", hash_cap)
        c.routes, c.routes_cap = self._routes_arr, routes
        c.keys, c.slots, c.hash_cap = self._keys, self._slots, hash_cap
        c.slot_len = _SLOT_LEN
        self._heap = ffi.new("struct mrc_simnet_event[]", _HEAP_START)
        c.heap, c.heap_cap = self._heap, _HEAP_START
        lib.mrc_simnet_reset(c)
        for _ in range(pool_chunks(spec)):
            self._add_chunk()
        # the fabric's random.Random (link loss), as EventLoop's
        state = random.Random(spec.seed).getstate()[1]
        for k in range(624):
            c.mt[k] = state[k]
        c.mti = state[624]
        # links, in ClosFabric's order: [plane][t0][t1] up, [plane][t1][t0] down, [plane][host]
        self._all: list[CLink] = []

        def link(name: str, s: LinkSpec) -> CLink:
            i = len(self._all)
            x = self._links_arr[i]
            x.bytes_per_s = s.rate_bps / 8.0
            x.prop_s = s.prop_s
            x.busy_until = 0.0
            x.loss = s.loss
            x.queue_bytes = -1 if s.queue_bytes is None else s.queue_bytes
            x.ecn_bytes = -1 if s.ecn_bytes is None else s.ecn_bytes
            x.up, x.trim, x.last_hop = 1, 1 if s.trim else 0, 1 if s.last_hop else 0
            lk = CLink(name, s, i, self._links_arr + i)
            self._all.append(lk)
            return lk

        self.up = [[[link(f"p{p}-t0{a}-t1{b}", up) for b in range(T1)] for a in range(T0)]
                   for p in range(P)]  # fmt: skip
        self.down = [[[link(f"p{p}-t1{b}-t0{a}", down) for a in range(T0)] for b in range(T1)]
                     for p in range(P)]  # fmt: skip
        self.last = [[link(f"p{p}-h{h}-lasthop", last) for h in range(H)] for p in range(P)]
        self.nic: list[list[CHostPort]] = []
        for h in range(H):
            row = []
            for p in range(P):
                i = h * P + p
                x = self._ports_arr[i]
                x.bytes_per_s = spec.port_rate_bps / 8.0
                x.host, x.data_limit, x.up = h, NIC_DATA_LIMIT_FRAMES, 1
                row.append(CHostPort(f"h{h}-p{p}-nic", i, self._ports_arr + i, self))
            self.nic.append(row)
        self.gates = [CNicGate(self.nic[h], self._hosts_arr[h]) for h in range(H)]
        self._py_misrouted = 0
        self._calls: dict[int, Callable[[], None]] = {}
        self._next_call = 0
        self._todo = ffi.new("struct mrc_simnet_todo *")
        self._len = ffi.new("uint32_t *")
        self._drained = ffi.new("int32_t *")
        self._rx: dict[int, RxEngines] = {}  # host -> its C engines' device
        self._routed: set[tuple[bytes, int, int]] = set()  # (address, host, plane) added
        # (host, QP number or -1: all of the host's) whose engines Python touched since C ran
        self._dirty: set[tuple[int, int]] = set()
        self._waking: tuple[int, int] | None = None  # (host, QP number) being woken
        self._bins: Any = None
        if spec.timeline_s:  # grown as the run goes (_grow_bins)
            n_bins = min(int(spec.max_time_s / spec.timeline_s) + 2, _BINS_START)
            self._bins = ffi.new("int64_t[]", n_bins)
            c.bins, c.n_bins, c.bin_s = self._bins, n_bins, spec.timeline_s

    # -- the clock and the queue ---------------------------------------------------------------

    @property
    def now(self) -> float:
        return float(self.c.now)

    @property
    def pending(self) -> int:
        return int(self.c.heap_n)

    @property
    def misrouted(self) -> int:
        return self._py_misrouted + int(self.c.st.misrouted)

    def stats(self) -> dict[str, int]:
        """What the C fabric did: events played, frames C's engines took and those Python
        did, Python wake-ups, control frames the engines sent."""
        st = self.c.st
        return {k: int(getattr(st, k)) for k in ("events", "c_frames", "py_frames", "wakes",
                                                 "ctrl_frames")}  # fmt: skip

    def _add_chunk(self) -> None:
        """4,096 more frame slots. Their pages are mapped at once (MAP_POPULATE): touched one
        by one as frames first land in them, they cost a page fault each: 0.9-1.0 s of system
        time in a 4.6-5.0 s run (a 128-host permutation of 4 MiB flows, the 2-core machine,
        2026-11-28), against 0.08 s with the pool mapped while the fabric is built."""
        ffi = self._ffi
        size = (1 << 12) * _SLOT_LEN
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
        block = mmap.mmap(-1, size, flags=flags)
        data = ffi.from_buffer("uint8_t[]", block)
        meta = ffi.new("struct mrc_simnet_frame[]", 1 << 12)
        if self._lib.mrc_simnet_add_chunk(self.c, data, meta) != 0:
            raise MemoryError("the C fabric's frame pool is at its limit (4,194,304 frames)")
        self._keep += [block, data, meta]

    def _grow_heap(self) -> None:
        cap = 2 * self.c.heap_cap
        heap = self._ffi.new("struct mrc_simnet_event[]", cap)
        self._lib.mrc_simnet_grow_heap(self.c, heap, cap)
        self._heap = heap  # (the old array is freed with its last reference)

    def _grow_bins(self) -> None:
        """The timeline reached bin ``late_k``: a bigger array, and its bytes in it."""
        c = self.c
        k = int(c.late_k)
        n = int(c.n_bins)
        cap = max(2 * n, k + 1)
        bins = self._ffi.new("int64_t[]", cap)
        self._ffi.memmove(bins, self._bins, n * 8)
        bins[k] += c.late_bytes
        self._bins = bins
        c.bins, c.n_bins = bins, cap
        c.late_k, c.late_bytes = -1, 0

    def _make_room(self, r: int) -> bool:
        """The pool or the heap had too little room (``r``: a C call's NO_FRAME or NO_EVENT):
        grow it and say so; False for any other result."""
        if r == _NO_FRAME:
            self._add_chunk()
        elif r == _NO_EVENT:
            self._grow_heap()
        else:
            return False
        return True

    def at(self, t: float, fn: Callable[[], None]) -> None:
        i = self._next_call
        self._next_call = i + 1
        self._calls[i] = fn
        while self._lib.mrc_simnet_at(self.c, t, i) == _NO_EVENT:
            self._grow_heap()

    # -- sending -------------------------------------------------------------------------------

    def send(self, host: int, port: int, frame: bytes, t: float) -> None:
        lib = self._lib
        buf = self._ffi.from_buffer(frame)  # (a bytes argument would be copied byte by byte)
        while True:
            r = lib.mrc_simnet_send(self.c, host, port, buf, len(frame), t)
            if r >= 0:
                if r == 1:
                    self.gates[host].drained(self.now)
                return
            if r == _NO_ROUTE:
                if not self._add_route(bytes(frame[OFF_DST : OFF_DST + 16]), host, port):
                    self._py_misrouted += 1
                    return
            elif not self._make_room(r):
                raise ValueError(f"host {host} port {port}: a frame of {len(frame)} bytes")

    def _send_many(
        self, host: int, buf: Any, slot_len: int, lens: Any, planes: Any, n: int
    ) -> None:
        lib, c, drained = self._lib, self.c, self._drained
        k = 0
        while k < n:
            r = lib.mrc_simnet_send_many(c, host, buf + k * slot_len, slot_len, lens + k,
                                         planes + k, n - k, drained)  # fmt: skip
            if r < 0:
                if not self._make_room(r):
                    raise ValueError(f"host {host}: no such host")
                continue
            k += r
            if drained[0]:
                self.gates[host].drained(self.now)

    def _add_route(self, key: bytes, host: int, port: int) -> bool:
        """The route of destination ``key`` (ClosFabric.send's): False when it names none."""
        info = clos_path(self.shape, key, host, port)
        if info is None:
            return False
        p, dst = info.plane, info.dst_host
        if info.t1 is None:  # under one T0
            links = [self.last[p][dst].index]
        else:
            links = [self.up[p][info.src_t0][info.t1].index,
                     self.down[p][info.t1][info.dst_t0].index, self.last[p][dst].index]  # fmt: skip
        r = self._lib.mrc_simnet_add_route(self.c, key, links, len(links), dst)
        if r < 0:
            raise RuntimeError(f"the C fabric's route table is full ({self.c.routes_cap} routes)")
        return True

    # -- the QPs' engines ------------------------------------------------------------------------

    def engines_for(self, host: int, memory: MemoryTable) -> Any:
        """The engine choice for a QP of ``host`` (whose memory is ``memory``)."""
        if self.engines != "c":
            return PY_ENGINES
        rx = self._rx.get(host)
        if rx is None:
            rx = self._rx[host] = RxEngines(memory)
            rx.port_queues = _HostSink(self, host)
            memory.on_change = lambda: self._dirty.add((host, -1))
        return CEngines(rx)

    def connected(self, host: int, qp: Any) -> None:
        """``qp`` of ``host`` is connected: when it runs on the C engines, its host's frames
        are taken in C from now on, and the routes of every address its engines build frames
        for are known (C adds none itself)."""
        rx = getattr(qp, "rx", None)
        if not isinstance(rx, CRxEngine):
            return
        self._host(host).dev = rx.dev.dev
        if isinstance(qp.tx, CTxEngine):
            qp.tx.sink = rx.dev.port_queues
        addrs = {(t[4], qp.evs.plane_of[i]) for i, t in enumerate(qp._slot_tmpl)}
        planes = qp.planes
        addrs |= {(qp._make_tmpl(ev)[4], ev % planes) for ev in qp.evs.reverse}
        known = self._routed
        for dst, plane in addrs:
            key = bytes(dst)
            if (key, host, plane) not in known:  # (a fabric of 1,024 hosts: 300,000 asks)
                known.add((key, host, plane))
                self._add_route(key, host, plane)  # (none: C counts its frames misrouted)
        self._dirty.add((host, -1))

    def _host(self, host: int) -> Any:
        return self._hosts_arr[host]

    def after_pump(self, host: int, ep: Any, t: float) -> None:
        """The Pump pumped ``ep`` of ``host``: its engines' state (reverse EVs, QP states) goes
        to C before C takes its next frame (every engine of the host when ``ep`` is not a QP
        on them: the host's EV probe desk may have changed any QP's reverse EVs)."""
        if host in self._rx:
            qpn = ep.qpn if isinstance(getattr(ep, "rx", None), CRxEngine) else -1
            if (host, qpn) != self._waking:  # (the QP being woken: _wake brings it up to date)
                self._dirty.add((host, qpn))

    def _sync(self) -> None:
        """Before C takes more frames: what Python changed of the engines' view (RxEngines.prepare:
        regions, reverse EVs, QP states) and when a SACK must wake Python (the first SACK
        while no reverse-EV probe round is scheduled starts one, in Python)."""
        for host, qpn in self._dirty:
            rx = self._rx.get(host)
            if rx is None:
                continue
            if qpn < 0:
                rx.sync()  # (a region registered or withdrawn marks its host: engines_for)
            for e, (q, eng) in enumerate(rx.engines.items()):
                if qpn < 0 or q == qpn:
                    eng.sync_reverse()
                    self._qp_state_to_c(host, e, eng)
        self._dirty.clear()

    def _qp_state_to_c(self, host: int, e: int, eng: CRxEngine) -> None:
        """What C reads of engine ``e``'s QP between wakes: whether it failed, and whether its
        next SACK must wake Python (none while a reverse-EV probe round is scheduled)."""
        qp = eng.qp
        if qp.state is QpState.ERROR:
            eng.q.dead = 1
        self._hosts_arr[host].notify_sacked[e] = 1 if qp._rev_probe_at is None else 0

    def _wake(self, host: int, e: int, why: int, now: float) -> None:
        """Engine ``e`` of ``host`` left work (``why``: _WAKE_RX, _WAKE_TX): its events,
        counters and feedback to its QP (the shell's per-batch flush, for that QP), then its
        owner pumps it."""
        rx = self._rx[host]
        rx.drain_out()
        eng = rx.engines[rx.dev.qpn[e]]
        qp = eng.qp
        qp.evs.now_s = now
        if why & _WAKE_RX:
            eng.flush()
        if why & _WAKE_TX:
            qp.tx.after_batch(now)
        if self.wake is not None:
            self._waking = (host, qp.qpn)
            try:
                self.wake(host, qp.qpn, now)
            finally:
                self._waking = None
        # (its reverse EVs change only on timers, EV probes and port status, which mark the
        # host for _sync)
        self._qp_state_to_c(host, e, eng)

    def flush_engines(self, host: int) -> None:
        """Before Python reads a C-engine QP of ``host`` outside a wake (a timer): its engines'
        counters and feedback as of now."""
        rx = self._rx.get(host)
        if rx is not None:
            now = self.now
            rx.flush()
            for eng in rx.engines.values():
                eng.qp.tx.after_batch(now)
            self._dirty.add((host, -1))

    # -- the loop --------------------------------------------------------------------------------

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        with frozen_gc():
            self._run(until, stop)
        for host in self._rx:  # what the engines counted since they last woke Python
            self.flush_engines(host)

    def _run(self, until: float, stop: Callable[[], bool] | None) -> None:
        lib, c, todo = self._lib, self.c, self._todo
        calls = self._calls
        ffi = self._ffi
        while True:
            if self._dirty:
                self._sync()
            r = lib.mrc_simnet_run(c, until, todo)
            if r == _IDLE:
                return
            if r < 0:
                if not self._make_room(r):
                    raise RuntimeError(f"mrc_simnet_run: {r}")
                continue
            now = c.now
            if r == _CALL:
                calls.pop(todo.a)()
            elif r == _DELIVER:
                ptr = lib.mrc_simnet_frame(c, todo.frame, self._len)
                if todo.a in self._rx:  # (what its engines counted so far is theirs: the
                    self.flush_engines(todo.a)  # owner's count of this frame starts here)
                self.deliver(todo.a, todo.b, ffi.buffer(ptr, self._len[0])[:], now)
            elif r == _GATE:
                self.gates[todo.a].drained(now)
            elif r == _WAKE:
                self._wake(todo.a, todo.b, todo.frame, now)
            elif r == _BINS:
                self._grow_bins()
                continue  # (nothing Python decides changed)
            if stop is not None and stop():
                return

    # -- faults and counters -----------------------------------------------------------------------

    def cut(self, links: Sequence[CLink]) -> int:
        if not links:
            return 0
        idx = [link.index for link in links]
        return int(self._lib.mrc_simnet_cut(self.c, idx, len(idx)))

    def placed_bins(self) -> list[int]:
        """Bytes the C engines placed per timeline bin (those of frames Python took are the
        owner's)."""
        if self._bins is None:
            return []
        n = int(self.c.n_bins)
        return list(self._bins[0:n])

    def pfc_counters(self) -> dict[str, Any]:
        if not self.spec.pfc:
            return {}
        return simpfc.counters([], self.now)  # MRC: nothing is lossless, nothing pauses

    def fabric_links(self) -> list[CLink]:
        return clos_fabric_links(self.up, self.down)

    def links(self) -> list[Any]:
        return clos_links(self.nic, self.up, self.down, self.last)
