"""A whole two-tier multi-plane Clos in virtual time, every host a NIC: ``mrc-sim --workload
permutation``.

``mrc-sim``'s default run joins two hosts (:mod:`mrcnic.sim.transfer`) and its incast one
receiver and its senders (:mod:`mrcnic.sim.incast`); this fabric holds ``t0 x hosts_per_t0``
hosts under ``t0`` T0s and ``t1`` T1s, in each of ``planes`` planes, with the lab's address
plan (``usid.ClosShape``) and real :class:`mrcnic.transport.qp.QueuePair` objects (or the
RoCEv2 baseline's) on every host.  Per plane a data packet crosses

1. the sender's NIC port (port rate, a queue that never drops: :class:`fabric.HostPort`),
2. between two T0s: the T0 -> T1 uplink its SRv6 address names, then the T1 -> T0 downlink
   (T0-T1 rate, queue, ECN, trimming, random loss on the uplink, half the propagation each);
   under one T0: neither (the T0 turns it round),
3. the last hop into the receiver's port (port rate, queue, trims to TRIMMED_LASTHOP).

The first workload is a **permutation**: every host writes ``size`` bytes to one other host
and receives from one (a seeded derangement), all at once.  MRC runs one QP per flow, sprayed
over every plane; RoCEv2 one QP per flow and plane (a rail each), its T1 chosen by the ECMP
hash of the QP's flow.  The result says how much of the fabric the flows used
(``utilisation``), per flow goodput and completion time, Jain's fairness and how unevenly
the T0-T1 links were loaded.

Faults (``ClosSpec.faults``: the lab's :class:`mrcnic.faultplan.Step` s, ``--fault``) play in
virtual time (:mod:`mrcnic.sim.closfaults`); ``ClosSpec.timeline_s`` bins the goodput of
every receiver together, so a fault's dip and the recovery after it show.

``ClosSpec.pfc`` runs RoCEv2 as deployed: its data on the lossless class, every switch with
priority flow control (:mod:`mrcnic.sim.pfc`: per in-port XOFF/XON, pauses hop by hop back
to the senders' NICs); MRC, which sends nothing lossless, keeps the plain links.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

from mrcnic.faultplan import Step
from mrcnic.rocev2.qp import RoceConfig, RoceQueuePair
from mrcnic.sim import cfabric
from mrcnic.sim import pfc as simpfc
from mrcnic.sim.closfaults import ClosFaults
from mrcnic.sim.fabric import (
    CTRL_FRAME_BYTES,
    DATA_OVERHEAD_BYTES,
    EventLoop,
    HostPort,
    Link,
    LinkSpec,
    NicGate,
    clos_fabric_links,
    clos_link_specs,
    clos_links,
    clos_path,
    host_net,
)
from mrcnic.sim.pfc import PfcHostPort, PfcLink, PfcSpec
from mrcnic.sim.pump import Pump, endpoint_for
from mrcnic.sim.scale import LAB
from mrcnic.transport.engine_choice import PY_ENGINES
from mrcnic.transport.ev import EvConfig
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import (
    NetConfig,
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
    seeded,
)
from mrcnic.wire import usid
from mrcnic.wire.layout import OFF_DST

WORKLOADS = (
    "p2p",
    "permutation",
    "allreduce",
    "alltoall",
    "incast",
)  # the last three: collectives.py
_QPN_WRITER, _QPN_READER = 0x100000, 0x200000  # + flow * 16 (+ rail): 24-bit QP numbers


@dataclass(frozen=True, slots=True)
class ClosSpec:
    """The fabric and the run (rates in bit/s, times in seconds, sizes in bytes)."""

    planes: int = 8
    t0: int = 4
    t1: int = 4
    hosts_per_t0: int = 2
    port_rate_bps: float = LAB.port_rate_bps  # the lab's scale (mrcnic.sim.scale); the CLI
    # runs the whole fabric at the paper's (mrc-sim --scale)
    path_rate_bps: float | None = None  # each T0-T1 link (default: the port rate)
    prop_s: float = LAB.prop_s  # one way, T0 -> T1 -> T0 (half on each link)
    queue_bytes: int = LAB.queue_bytes
    ecn_bytes: int | None = LAB.ecn_bytes
    trim: bool = True
    loss: float = 0.0  # random loss per packet on each uplink
    size: int = 4 << 20  # bytes per flow
    msg_size: int = 1 << 20
    mtu: int = 4096
    transport: str = "mrc"  # mrc | rocev2
    qp: QpConfig = field(default_factory=QpConfig)  # MRC QPs' policy (EVs, CC, ...)
    max_time_s: float = 60.0
    faults: tuple[Step, ...] = ()  # the lab's fault steps, in virtual time (closfaults)
    timeline_s: float | None = None  # bin width of the aggregate goodput timeline
    # priority flow control for RoCEv2's data (mrcnic.sim.pfc); None thresholds: derived
    # from queue_bytes, the rates and the propagation as the lab derives its switches'
    pfc: bool = False
    pfc_xoff_bytes: int | None = None
    pfc_xon_bytes: int | None = None
    pfc_headroom_bytes: int | None = None
    seed: int = 1
    # where the per-packet work runs (mrcnic.sim.cfabric): the fabric in C or Python, the MRC
    # QPs on the C engines or their Python twins; auto: C wherever it runs (the C fabric does
    # not run PFC, so RoCEv2 with --pfc keeps the Python fabric; C engines need the C fabric)
    fabric: str = "auto"
    engine: str = "auto"

    @property
    def hosts(self) -> int:
        return self.t0 * self.hosts_per_t0

    @property
    def shape(self) -> usid.ClosShape:
        return usid.ClosShape(self.planes, self.t0, self.t1, self.hosts_per_t0)

    @property
    def path_rate(self) -> float:
        return self.path_rate_bps if self.path_rate_bps is not None else self.port_rate_bps

    @property
    def host_capacity_bps(self) -> float:
        """What one host can send in a permutation: per plane its port, or its T0's share of
        the uplinks when they are oversubscribed."""
        up = self.t1 * self.path_rate / self.hosts_per_t0
        return self.planes * min(self.port_rate_bps, up)

    @property
    def base_rtt_s(self) -> float:
        """Unloaded RTT of a full data packet and its ACK across a T1."""
        data = (self.mtu + DATA_OVERHEAD_BYTES) * 8
        per_bit = 2 / self.port_rate_bps + 2 / self.path_rate
        return (data + CTRL_FRAME_BYTES * 8) * per_bit + 2 * self.prop_s

    @property
    def pfc_spec(self) -> PfcSpec:
        """Each switch in-port's lossless thresholds (given, or derived: PfcSpec.derive)."""
        d = PfcSpec.derive(
            self.queue_bytes,
            self.mtu + DATA_OVERHEAD_BYTES,
            max(self.port_rate_bps, self.path_rate),
            self.prop_s / 2,
        )
        return PfcSpec(
            self.pfc_xoff_bytes if self.pfc_xoff_bytes is not None else d.xoff_bytes,
            self.pfc_xon_bytes if self.pfc_xon_bytes is not None else d.xon_bytes,
            self.pfc_headroom_bytes if self.pfc_headroom_bytes is not None else d.headroom_bytes,
        )

    def check(self) -> None:
        for name in ("planes", "t0", "t1", "hosts_per_t0", "size", "msg_size", "mtu"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")
        if self.hosts < 2:
            raise ValueError("a permutation needs at least 2 hosts (t0 x hosts_per_t0)")
        if self.hosts * 16 > _QPN_READER - _QPN_WRITER:
            raise ValueError(f"{self.hosts} hosts: at most {(_QPN_READER - _QPN_WRITER) // 16}")
        if self.planes > 16:
            raise ValueError(f"planes must be <= 16, not {self.planes}")
        if self.timeline_s is not None and not self.timeline_s > 0:
            raise ValueError(f"the timeline's bin must be > 0, not {self.timeline_s}")
        if self.transport not in ("mrc", "rocev2"):
            raise ValueError(f"unknown transport {self.transport!r} (mrc or rocev2)")
        if self.pfc:
            if self.faults:
                raise ValueError("faults with PFC are not simulated yet (drop --pfc or --fault)")
            xon, xoff = self.pfc_spec.xon_bytes, self.pfc_spec.xoff_bytes
            if not 0 < xon < xoff:
                raise ValueError(f"PFC needs 0 < XON < XOFF, not XON {xon}, XOFF {xoff}")
            if self.pfc_spec.headroom_bytes <= 0:
                raise ValueError("PFC's headroom must be > 0 bytes")
        self.shape  # noqa: B018 - the address plan refuses a shape it cannot encode
        if self.fabric not in ("auto", *cfabric.FABRICS):
            raise ValueError(f"fabric {self.fabric!r}: auto, c or py")
        if self.engine not in ("auto", *cfabric.ENGINES):
            raise ValueError(f"engine {self.engine!r}: auto, c or py")
        fab, eng = self.cores
        if fab == "c" and not cfabric.available():
            raise ValueError("the C fabric needs the C module mrcnic._mrcfast: run `make setup`")
        if fab == "c" and self.pfc and self.transport == "rocev2":
            raise ValueError("PFC runs on the Python fabric only (fabric py, or auto)")
        if eng == "c" and fab != "c":
            raise ValueError("the C engines run on the C fabric only (fabric c, or auto)")

    @property
    def cores(self) -> tuple[str, str]:
        """(fabric, engine) as this run resolves them: ``auto`` is C wherever C can run."""
        c = cfabric.available()
        fab = self.fabric
        if fab == "auto":
            fab = "c" if c and not (self.pfc and self.transport == "rocev2") else "py"
        eng = self.engine
        if eng == "auto":
            eng = "c" if fab == "c" and self.transport == "mrc" else "py"
        return fab, eng


class ClosFabric(EventLoop):
    """The links and the event queue of a :class:`ClosSpec` fabric (the Network that
    :class:`mrcnic.sim.pump.Pump` drives).  ``send(host, port, frame, t)`` injects a frame;
    arrivals call ``deliver(host, port, frame, t)``; :meth:`at` schedules callbacks."""

    def __init__(self, spec: ClosSpec, deliver: Callable[[int, int, bytes, float], None]):
        super().__init__(deliver, spec.seed)
        self.spec = spec
        self.shape = spec.shape
        P, T0, T1, H = spec.planes, spec.t0, spec.t1, spec.hosts
        up, down, last = clos_link_specs(spec)
        ecn = spec.ecn_bytes
        # PFC acts only on lossless frames, which only RoCEv2 sends: MRC keeps the analytic
        # links, so its runs are the same with and without --pfc
        self.pfc = spec.pfc and spec.transport == "rocev2"
        port: Callable[[str, float, EventLoop], Any] = PfcHostPort if self.pfc else HostPort
        link: Callable[[str, LinkSpec], Any] = Link
        if self.pfc:
            link = partial(_pfc_link, loop=self, ecn=ecn)
        self.nic = [[port(f"h{h}-p{p}-nic", spec.port_rate_bps, self) for p in range(P)]
                    for h in range(H)]  # fmt: skip
        self.gates = [NicGate(ports) for ports in self.nic]  # the hosts' NICs take data by it
        # [plane][t0][t1] up, [plane][t1][t0] down, [plane][host] the last hop into a host
        self.up = [[[link(f"p{p}-t0{a}-t1{b}", up) for b in range(T1)] for a in range(T0)]
                   for p in range(P)]  # fmt: skip
        self.down = [[[link(f"p{p}-t1{b}-t0{a}", down) for a in range(T0)] for b in range(T1)]
                     for p in range(P)]  # fmt: skip
        self.last = [[link(f"p{p}-h{h}-lasthop", last) for h in range(H)] for p in range(P)]
        self._route: dict[bytes, tuple[Any, ...]] = {}
        self.misrouted = 0
        if self.pfc:  # every switch in-port: a host's NIC port into its T0, both tiers' links
            ps = spec.pfc_spec
            for x in (*(n for row in self.nic for n in row), *self.fabric_links()):
                simpfc.attach(ps, self, x, x.spec.prop_s if isinstance(x, PfcLink) else 0.0)
            self._pfc_routes: dict[tuple[bytes, int], tuple[Any, ...]] = {}

    def send(self, host: int, port: int, frame: bytes, t: float) -> None:
        key = bytes(frame[OFF_DST : OFF_DST + 16])
        route = self._route.get(key)
        if route is None:
            info = clos_path(self.shape, key, host, port)
            if info is None:
                self.misrouted += 1
                return
            p, dst = info.plane, info.dst_host
            if info.t1 is None:  # under one T0
                route = ((self.last[p][dst],), dst)
            else:
                route = (
                    (self.up[p][info.src_t0][info.t1], self.down[p][info.t1][info.dst_t0],
                     self.last[p][dst]),
                    dst,
                )  # fmt: skip
            self._route[key] = route
        stages, dst = route
        if self.pfc:
            stages = self._pfc_route(key, host, port, stages, dst)
        self.nic[host][port].enqueue(t, frame, stages, dst, port)

    def _pfc_route(self, key: bytes, host: int, port: int, links: tuple, dst: int) -> tuple:
        """``links`` as :class:`mrcnic.sim.pfc.Hop` s: each with the in-port the frame enters
        its switch by (the sender's NIC port first), so one route per sending host."""
        got = self._pfc_routes.get((key, host))
        if got is None:
            ups = (self.nic[host][port], *links[:-1])
            hops = [
                simpfc.Hop(lk, up.far, i, dst, port)
                for i, (lk, up) in enumerate(zip(links, ups, strict=True))
            ]
            got = self._pfc_routes[(key, host)] = simpfc.route(hops)
        return got

    def pfc_counters(self) -> dict[str, Any]:
        """The PFC keys of a ``--pfc`` run (:func:`mrcnic.sim.pfc.counters`); none without PFC."""
        if not self.spec.pfc:
            return {}
        if not self.pfc:  # MRC: nothing is lossless, nothing pauses
            return simpfc.counters([], self.now)
        xs = [n for row in self.nic for n in row] + self.fabric_links()
        for row in self.last:
            xs += row
        return simpfc.counters(xs, self.now)

    def fabric_links(self) -> list[Link]:
        """Every T0-T1 link, both directions."""
        return clos_fabric_links(self.up, self.down)

    def links(self) -> list[Any]:
        return clos_links(self.nic, self.up, self.down, self.last)


def make_fabric(
    spec: ClosSpec,
    deliver: Callable[[int, int, bytes, float], None],
    wake: Callable[[int, int, float], None],
) -> Any:
    """The fabric ``spec.cores`` asks for: :class:`ClosFabric`, or the C fabric
    (:class:`mrcnic.sim.cfabric.CClosFabric`, which ``wake`` s the owner when a QP on the C
    engines has work for Python: the owner pumps it)."""
    fab, eng = spec.cores
    if fab == "c":
        return cfabric.CClosFabric(spec, deliver, wake, engines=eng)
    return ClosFabric(spec, deliver)


def _pfc_link(name: str, spec: LinkSpec, loop: EventLoop, ecn: int | None) -> PfcLink:
    """A switch egress link under PFC; lossless frames are marked at ``ecn`` on every hop,
    the last included (the lab's ``pfc.ecn``: DCQCN's marks)."""
    return PfcLink(name, spec, loop, ecn)


def derangement(n: int, rng: random.Random) -> list[int]:
    """A permutation of ``range(n)`` with no fixed point (no host writes to itself)."""
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(i != d for i, d in enumerate(perm)):
            return perm


class Permutation:
    """Every host writes ``size`` bytes to ``perm[host]`` at once (:class:`ClosSpec`)."""

    def __init__(self, spec: ClosSpec) -> None:
        spec.check()
        self.spec = spec
        self.fabric = make_fabric(spec, self._deliver, self._wake)
        self.faults = ClosFaults(self.fabric, spec.faults, self._port_status)
        # bytes placed at every receiver per timeline bin (only with spec.timeline_s)
        self.placed_bins: list[int] | None = [] if spec.timeline_s else None
        shape = spec.shape
        H = spec.hosts
        rng = random.Random(spec.seed)
        self.perm = derangement(H, rng)
        self.memories = [MemoryTable(spec.seed * 131 + h) for h in range(H)]
        self.endpoints: list[dict[int, Any]] = [{} for _ in range(H)]
        self.desks = [
            EvProbeDesk(host_net(shape, h), eps.get) for h, eps in enumerate(self.endpoints)
        ]
        self.pump = Pump(self.fabric, self._on_event)
        nets = [host_net(shape, h) for h in range(H)]
        self.senders: list[list[Any]] = []  # per flow: its QPs on the writing host
        self.src: list[bytes] = []
        self.dst: list[bytearray] = []
        self.messages = [0] * H
        self.completed: list[dict[int, WcStatus]] = [{} for _ in range(H)]
        self.fct_s: list[float | None] = [None] * H
        self.done_bytes: list[list[tuple[float, int]]] = [[] for _ in range(H)]  # (t, bytes)
        self.msg_bytes: list[dict[int, int]] = [{} for _ in range(H)]  # wr_id -> bytes
        self.qp_errors: list[str] = []
        for f in range(H):
            a, b = f, self.perm[f]
            # QP numbers: writers' and readers' in two ranges, so a host's own flow and the
            # one it receives never share one; 16 per flow (a RoCEv2 QP per rail)
            pairs: list[tuple[int, int, QpConfig | RoceConfig]]
            if spec.transport == "mrc":
                base = flow_qp_config(spec, spec.qp, seed=spec.seed * 1000 + f)
                pairs = [(_QPN_WRITER + f * 16, _QPN_READER + f * 16, base)]
            else:  # one QP per rail, its T1 by the ECMP hash of its flow
                pairs = [(_QPN_WRITER + f * 16 + p, _QPN_READER + f * 16 + p,
                          rocev2_qp_config(spec, p, spec.seed + f))
                         for p in range(spec.planes)]  # fmt: skip
            flow_qps = []
            for qa, qb, cfg in pairs:
                ea, eb = connect_pair(
                    spec, nets, self.memories, (a, qa), (b, qb), cfg, net=self.fabric
                )
                self.endpoints[a][qa] = ea
                self.endpoints[b][qb] = eb
                flow_qps.append(ea)
            self.senders.append(flow_qps)
            src = rng.randbytes(spec.size)
            dst = bytearray(spec.size)
            mr = self.memories[b].register(dst)
            self.src.append(src)
            self.dst.append(dst)
            view = memoryview(src)
            for k, off in enumerate(range(0, spec.size, spec.msg_size)):
                n = min(spec.msg_size, spec.size - off)
                qp = flow_qps[k % len(flow_qps)]
                qp.post_write(k, view[off : off + n], mr.base_va + off, mr.rkey)
                self.msg_bytes[f][k] = n
                self.messages[f] += 1
        self._done = False

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        ep = endpoint_for(self.endpoints[host], self.desks[host], self.pump, host, frame, t)
        if ep is None:
            return
        bins = self.placed_bins
        if bins is None:
            self.pump.receive(host, ep, frame, t)
            return
        before = ep.stats.rx_placed_bytes
        self.pump.receive(host, ep, frame, t)
        add_to_bin(bins, t, cast(float, self.spec.timeline_s), ep.stats.rx_placed_bytes - before)

    def _wake(self, host: int, qpn: int, t: float) -> None:
        """A QP on the C engines has work for Python (the C fabric's call): pump it."""
        self.pump.pump(host, self.endpoints[host][qpn], t)

    def _port_status(self, host: int, plane: int, up: bool, t: float) -> None:
        """A host's NIC port went down or came back: its QPs hear at once, as from the shell."""
        for ep in self.endpoints[host].values():
            ep.port_status(plane, up, t)
            self.pump.pump(host, ep, t)

    def _on_event(self, host: int, e: object, t: float) -> None:
        if isinstance(e, WriteCompleted):
            f = host  # host f writes flow f, and only it (wr_ids are unique per flow)
            self.completed[f][e.wr_id] = e.status
            self.done_bytes[f].append((t, self.msg_bytes[f].get(e.wr_id, 0)))
            if len(self.completed[f]) == self.messages[f]:
                self.fct_s[f] = t
                self._done = all(c is not None for c in self.fct_s)
        elif isinstance(e, QpErrorEvent):
            self.qp_errors.append(f"host {host} QP {e.qpn:#x}: {e.status.value}: {e.reason}")
            self._done = True

    def run(self) -> dict[str, Any]:
        t0, c0 = time.perf_counter(), time.process_time()
        for h, eps in enumerate(self.endpoints):
            for ep in eps.values():
                self.pump.pump(h, ep, 0.0)
        self.fabric.run(self.spec.max_time_s, lambda: self._done)
        return self.result(time.perf_counter() - t0, time.process_time() - c0)

    def result(self, wall_s: float, cpu_s: float) -> dict[str, Any]:
        spec = self.spec
        H = spec.hosts
        ok = [
            c is not None and all(st is WcStatus.SUCCESS for st in done.values())
            for c, done in zip(self.fct_s, self.completed, strict=True)
        ]
        rates = [
            spec.size * 8 / c if good and c else 0.0 for c, good in zip(self.fct_s, ok, strict=True)
        ]
        end = max((c for c in self.fct_s if c is not None), default=None)
        total_bits = spec.size * 8 * H
        agg = total_bits / end if end and all(ok) else 0.0
        # while every flow still ran (until the first finished): the steady state of a
        # permutation, which a makespan's tail (the slowest flow alone) does not dilute
        first = min((c for c in self.fct_s if c is not None), default=None)
        window = steady = 0.0
        if first:
            window = self._done_by(first) * 8 / first
            # the same window without its first quarter: the flows' start-up left out
            steady = (self._done_by(first) - self._done_by(first / 4)) * 8 / (first * 3 / 4)
        fcts = sorted(c for c in self.fct_s if c is not None)
        qps = [qp for flow in self.senders for qp in flow]
        counters = fabric_counters(self.fabric, qps)
        out = {
            "workload": "permutation",
            "transport": spec.transport,
            "hosts": H,
            "planes": spec.planes,
            "t0": spec.t0,
            "t1": spec.t1,
            "hosts_per_t0": spec.hosts_per_t0,
            "utilisation": round(agg / (H * spec.host_capacity_bps), 4),
            "goodput_fraction": round(agg / (H * spec.host_capacity_bps), 4),
            "window_utilisation": round(window / (H * spec.host_capacity_bps), 4),
            "steady_utilisation": round(steady / (H * spec.host_capacity_bps), 4),
            "mean_flow_rate": round(statistics.mean(rates) / spec.host_capacity_bps, 4),
            "completion_s": round(end, 6) if end is not None and all(ok) else None,
            "flows": [
                {
                    "src": f,
                    "dst": self.perm[f],
                    "goodput_bps": round(rates[f]),
                    "fct_s": None if (c := self.fct_s[f]) is None else round(c, 6),
                }
                for f in range(H)
            ],  # fmt: skip
            "jain": jain_index(rates),
            "link_imbalance": link_imbalance(self.fabric),
            "link_utilisation": link_utilisation(self.fabric, self.fabric.now),
            **fct_quantiles(fcts),
            "verified": all(bytes(d) == s for d, s in zip(self.dst, self.src, strict=True)),
            "qp_errors": len(self.qp_errors),
            "qp_error_reasons": self.qp_errors,
            **counters,
            "host_capacity_bps": spec.host_capacity_bps,
            "bytes_per_flow": spec.size,
            "base_rtt_s": spec.base_rtt_s,
            "seed": spec.seed,
            "wall_s": round(wall_s, 3),
            "cpu_s": round(cpu_s, 3),
            "sim_pps": round(counters["data_packets"] / cpu_s) if cpu_s > 0 else None,
            **cores_keys(spec, self.fabric),
            **self.faults.to_json(),
        }
        if self.placed_bins is not None:
            merge_bins(self.placed_bins, self.fabric)
            timeline = self.timeline(self.fabric.now)  # the last completion, or where it stopped
            out["timeline"] = timeline
            out["timeline_bin_s"] = spec.timeline_s
            out["recovery_s"] = recovery_s(timeline, spec.faults)
        return out

    def _done_by(self, t_s: float) -> int:
        """Bytes of the writes every flow had completed by ``t_s``."""
        return sum(n for done in self.done_bytes for t, n in done if t <= t_s)

    def timeline(self, end_s: float) -> list[list[float]]:
        """``[[bin start s, goodput bit/s], ...]`` until ``end_s``: the bytes placed at every
        receiver in each bin (p2p's ``timeline`` for the whole fabric)."""
        step = cast(float, self.spec.timeline_s)
        bins = cast(list[int], self.placed_bins)
        n = max(len(bins), int(end_s / step) + (0 if end_s % step == 0 else 1))
        return [
            [round(k * step, 6), round((bins[k] if k < len(bins) else 0) * 8 / step)]
            for k in range(n)
        ]


def add_to_bin(bins: list[int], t_s: float, bin_s: float, placed: int) -> None:
    """Add ``placed`` bytes to the timeline bin of ``t_s`` (bins of ``bin_s``, grown as
    needed): the whole fabric's ``timeline``, as the permutation and the collectives keep it."""
    if placed:
        k = int(t_s / bin_s)
        if k >= len(bins):
            bins.extend([0] * (k + 1 - len(bins)))
        bins[k] += placed


#: the keys of a whole-fabric result that say how the run went on the machine, not what
#: it simulated: wall and CPU time, and which cores ran it
VOLATILE_KEYS = ("wall_s", "cpu_s", "sim_pps", "fabric", "engine", "sim_core")


def simulated(r: Any) -> Any:
    """A result without its :data:`VOLATILE_KEYS` (at any depth): what the same seed must give
    on any machine, fabric and engine."""
    if isinstance(r, dict):
        return {k: simulated(v) for k, v in r.items() if k not in VOLATILE_KEYS}
    if isinstance(r, list):
        return [simulated(v) for v in r]
    return r


def cores_keys(spec: ClosSpec, fabric: Any) -> dict[str, Any]:
    """``fabric`` and ``engine``: where a run's per-packet work ran (``c`` or ``py``); with
    the C fabric, ``sim_core``: its counters (events played, frames the C engines took and
    those Python did, Python wake-ups)."""
    fab, eng = spec.cores
    out: dict[str, Any] = {"fabric": fab, "engine": eng}
    stats = getattr(fabric, "stats", None)
    if stats is not None:
        out["sim_core"] = stats()
    return out


def merge_bins(bins: list[int], fabric: Any) -> None:
    """Add the bytes the C fabric's engines placed per bin (``placed_bins``: frames taken in
    C, which the owner's delivery never sees) to the owner's ``bins``, once."""
    get = getattr(fabric, "placed_bins", None)
    if get is None or getattr(fabric, "_bins_merged", False):
        return
    fabric._bins_merged = True
    extra = get()
    while extra and not extra[-1]:
        extra.pop()
    if len(extra) > len(bins):
        bins.extend([0] * (len(extra) - len(bins)))
    for k, v in enumerate(extra):
        bins[k] += v


def recovery_s(timeline: list[list[float]], faults: tuple[Step, ...]) -> float | None:
    """From the first fault to the start of the first timeline bin from then on whose goodput
    is back to >= 90% of the median of the bins before it (None: no fault, or no whole bin
    before it; the fault's time to the end: never back).  Bin-coarse, by design."""
    if not faults or len(timeline) < 2:
        return None
    t_fault = min(s.at_s for s in faults)
    step = timeline[1][0] - timeline[0][0]
    before = [bps for t, bps in timeline if t + step <= t_fault]
    if not before:
        return None
    target = 0.9 * statistics.median(before)
    for t, bps in timeline:
        if t >= t_fault and bps >= target:
            return round(t - t_fault, 6)
    return round(timeline[-1][0] + step - t_fault, 6)


def _quantile(sorted_xs: list[float], q: float) -> float:
    """The nearest-rank quantile (the flow whose completion time ``q`` of flows reach)."""
    k = max(0, min(len(sorted_xs) - 1, int(q * len(sorted_xs) + 0.999999) - 1))
    return sorted_xs[k]


def jain_index(rates: list[float]) -> float:
    """Jain's fairness index of the flows' goodputs (1: all equal), rounded as reported."""
    if not any(rates):
        return 0.0
    return round(sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)), 4)


def link_imbalance(fabric: ClosFabric) -> float | None:
    """The busiest T0-T1 link's packets over the mean of the links used (1: even)."""
    loads = [link.tx_packets for link in fabric.fabric_links()]
    used = [n for n in loads if n]
    return round(max(loads) / statistics.mean(used), 4) if used else None


def link_utilisation(fabric: Any, duration_s: float) -> dict[str, list[float]]:
    """Per T0-T1 link, keyed as a ``link`` fault names it (``p0-t0-1,p0-t1-2``): the share of
    its rate each direction carried over ``duration_s`` (the run), ``[up, down]`` (T0 -> T1,
    T1 -> T0), wire bytes counted as they left."""
    if not duration_s > 0:
        return {}
    spec = fabric.spec
    cap = spec.path_rate / 8 * duration_s
    out: dict[str, list[float]] = {}
    for p in range(spec.planes):
        for i in range(spec.t0):
            for j in range(spec.t1):
                up, down = fabric.up[p][i][j], fabric.down[p][j][i]
                out[f"p{p}-t0-{i},p{p}-t1-{j}"] = [round(up.tx_bytes / cap, 4),
                                                   round(down.tx_bytes / cap, 4)]  # fmt: skip
    return out


def fct_quantiles(sorted_fcts: list[float]) -> dict[str, float | None]:
    """``fct_p50_s`` and ``fct_p99_s`` of the flows' completion times (sorted)."""
    return {
        "fct_p50_s": round(_quantile(sorted_fcts, 0.5), 6) if sorted_fcts else None,
        "fct_p99_s": round(_quantile(sorted_fcts, 0.99), 6) if sorted_fcts else None,
    }


def fabric_counters(fabric: ClosFabric, qps: list[Any]) -> dict[str, Any]:
    """What a whole-fabric run counts: the sending QPs' retransmissions, timeouts and data
    packets, the links' trims, ECN marks and drops, and frames no route matched."""
    links = fabric.links()
    return {
        "retransmissions": sum(qp.stats.retransmissions for qp in qps),
        "timeouts": sum(qp.stats.timeouts for qp in qps),
        "data_packets": sum(qp.stats.tx_data_packets for qp in qps),
        "trims": sum(link.trims for link in links),
        "ecn_marks": sum(link.marks for link in links),
        "drops": sum(link.drops for link in links),
        "misrouted": fabric.misrouted,
        **fabric.pfc_counters(),
    }


def rocev2_qp_config(spec: ClosSpec, port: int, seed: int) -> RoceConfig:
    """A RoCEv2 QP of the baseline: bound to ``port`` (a rail), its T1 by the ECMP hash."""
    return RoceConfig(
        mtu_bytes=spec.mtu,
        base_rtt_s=spec.base_rtt_s,
        port=port,
        ecmp_seed=spec.seed,
        seed=seed,
        lossless=spec.pfc,  # data on the PFC class (the lab's --pfc labs)
    )


def connect_pair(
    spec: ClosSpec,
    nets: list[NetConfig],
    memories: list[MemoryTable],
    a: tuple[int, int],
    b: tuple[int, int],
    cfg: QpConfig | RoceConfig,
    cfg_b: QpConfig | RoceConfig | None = None,
    net: Any = None,
) -> tuple[Any, Any]:
    """Two connected QPs, ``a = (host, qpn)`` and ``b`` (configured by ``cfg``, or ``b`` by
    ``cfg_b`` of the same transport): MRC at the host's line rate for a QpConfig, RoCEv2 at
    one port's rate for a RoceConfig; each seeded by its QP number. ``net``: the fabric,
    when it chooses the MRC QPs' engines (``engines_for``) and hears of connections
    (``connected``: :class:`mrcnic.sim.cfabric.CClosFabric`)."""
    (ha, qa), (hb, qb) = a, b
    cb = cfg if cfg_b is None else cfg_b
    choose = getattr(net, "engines_for", None)
    if isinstance(cfg, QpConfig) and isinstance(cb, QpConfig):
        line = spec.planes * spec.port_rate_bps
        ka = choose(ha, memories[ha]) if choose else PY_ENGINES
        kb = choose(hb, memories[hb]) if choose else PY_ENGINES
        ea: Any = QueuePair(qa, nets[ha], memories[ha], line, seeded(cfg, qa), ka)
        eb: Any = QueuePair(qb, nets[hb], memories[hb], line, seeded(cb, qb), kb)
    elif isinstance(cfg, RoceConfig) and isinstance(cb, RoceConfig):
        rate = spec.port_rate_bps
        ea = RoceQueuePair(qa, nets[ha], memories[ha], rate, seeded(cfg, qa))
        eb = RoceQueuePair(qb, nets[hb], memories[hb], rate, seeded(cb, qb))
    else:
        raise ValueError("the two ends of a connection must use the same transport")
    ea.connect(eb.local_attributes())
    eb.connect(ea.local_attributes())
    connected = getattr(net, "connected", None)
    if connected is not None:
        connected(ha, ea)
        connected(hb, eb)
    return ea, eb


def flow_qp_config(spec: ClosSpec, cfg: QpConfig, seed: int) -> QpConfig:
    """An MRC flow's QP config: the run's policy, its MTU and base RTT, its own seed."""
    ev = cfg.ev if cfg.ev.ev_count >= spec.planes else EvConfig(ev_count=spec.planes)
    return replace(cfg, mtu_bytes=spec.mtu, base_rtt_s=spec.base_rtt_s, seed=seed, ev=ev)


def run_permutation(spec: ClosSpec) -> dict[str, Any]:
    return Permutation(spec).run()
