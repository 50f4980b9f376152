"""Incast in virtual time: N senders write to one receiver at once, through a multi-plane Clos.

``mrc-sim`` (``mrcnic.sim.transfer``) joins two hosts; an incast needs more.  This module builds a
small fabric of its own from the public pieces of ``mrcnic.sim.fabric`` (:class:`Link`,
:class:`LinkSpec`; links trim by ``mrcnic.wire.trim``) and drives real
:class:`mrcnic.transport.qp.QueuePair` objects through it, deterministically (one seeded generator, a heap of events).

Topology (``ClosShape(planes, t0=senders + 1, t1=paths_per_plane, hosts_per_t0=1)``): sender
``s`` sits under T0 ``s``, the receiver (host ``senders``) under the last T0.  Per plane and
direction a data packet crosses

1. the sender's NIC port (port rate, the NIC's own queue never drops),
2. the sender T0 -> T1 uplink chosen by the packet's SRv6 address (path rate, queue, ECN,
   trimming, random loss, half the propagation delay): one per sender, T1 and plane,
3. the T1 -> receiver T0 downlink (same, no loss): **shared by every sender** using that T1,
4. the last hop into the receiver's port (port rate, queue, trims to TRIMMED_LASTHOP, no
   ECN): **shared by every sender** — with N senders at full rate, N:1 oversubscribed.

ACKs take the mirror path.  Capacity is the receiver's: per plane ``min(port, paths x
path rate)``.  The run reports the aggregate goodput fraction, per-sender completion times
and Jain's fairness index, retransmissions, timeouts and spurious timeouts, trims, marks.

    python -m mrcnic.sim.incast --senders 4 --size 8M --json
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mrcnic import plugins
from mrcnic.cliflags import deprecated, rate_with_unit
from mrcnic.sim.fabric import (
    CTRL_FRAME_BYTES,
    DATA_OVERHEAD_BYTES,
    EventLoop,
    Link,
    LinkSpec,
    host_net,
)
from mrcnic.sim.pump import Pump, endpoint_for
from mrcnic.transport.ev import EvConfig
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import (
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
    seeded,
)
from mrcnic.units import rate_arg, size_arg, time_arg
from mrcnic.wire import usid


@dataclass(frozen=True, slots=True)
class IncastConfig:
    senders: int = 4
    planes: int = 8
    paths_per_plane: int = 4
    port_rate_bps: float = 100e6
    path_rate_bps: float | None = None  # default: the port rate
    prop_s: float = 20e-6  # one-way propagation, whole path (split over up- and downlink)
    queue_bytes: int = 64 * 1024
    ecn_bytes: int | None = 16 * 1024
    trim: bool = True
    loss: float = 0.0  # random loss per packet on each uplink (both directions)
    size: int = 4 << 20  # bytes per sender
    msg_size: int = 1 << 20
    mtu: int = 4096
    cc: str = "nscc"
    evs: int = 128
    path_policy: str = "mrc"  # mrcnic.transport.path_policy
    plane_share: str = "equal"  # equal | capacity
    stagger_s: float = 0.0  # sender s starts at s * stagger_s
    max_time_s: float = 60.0
    seed: int = 1

    @property
    def path_rate(self) -> float:
        return self.path_rate_bps if self.path_rate_bps is not None else self.port_rate_bps

    @property
    def capacity_bps(self) -> float:
        """What the receiver can take in: per plane min(port, paths x path rate)."""
        per_plane = min(self.port_rate_bps, self.paths_per_plane * self.path_rate)
        return self.planes * per_plane

    @property
    def base_rtt_s(self) -> float:
        """Unloaded RTT of a full data packet and its ACK (four store-and-forward links)."""
        data = (self.mtu + DATA_OVERHEAD_BYTES) * 8
        ctrl = CTRL_FRAME_BYTES * 8
        per_bit = 2 / self.port_rate_bps + 2 / self.path_rate
        return (data + ctrl) * per_bit + 2 * self.prop_s


class IncastFabric(EventLoop):
    """The links and the event queue.  ``send(host, port, frame, t)`` injects a frame;
    arrivals call ``deliver(host, port, frame, t)``; :meth:`at` schedules callbacks."""

    def __init__(self, cfg: IncastConfig, deliver: Callable[[int, int, bytes, float], None]):
        if cfg.senders < 1:
            raise ValueError("need at least one sender")
        self.cfg = cfg
        self.shape = usid.ClosShape(
            planes=cfg.planes, t0=cfg.senders + 1, t1=cfg.paths_per_plane, hosts_per_t0=1
        )
        self.receiver = cfg.senders
        super().__init__(deliver, cfg.seed)
        P, T, N = cfg.planes, cfg.paths_per_plane, cfg.senders
        half = cfg.prop_s / 2
        nic = LinkSpec(cfg.port_rate_bps)
        up = LinkSpec(
            cfg.path_rate, half, cfg.queue_bytes, cfg.ecn_bytes, cfg.trim, False, cfg.loss
        )
        down = LinkSpec(cfg.path_rate, half, cfg.queue_bytes, cfg.ecn_bytes, cfg.trim, False)
        last = LinkSpec(cfg.port_rate_bps, 0.0, cfg.queue_bytes, None, cfg.trim, True)
        hosts = N + 1
        # indexed [host][plane] or [host][plane][t1]; "down"/"last" are the links *into* host
        self.nic = [[Link(f"h{h}-p{p}-nic", nic) for p in range(P)] for h in range(hosts)]
        self.up = [
            [[Link(f"t0{h}-p{p}-t1{t}-up", up) for t in range(T)] for p in range(P)]
            for h in range(hosts)
        ]
        self.down = [
            [[Link(f"t1{t}-p{p}-t0{h}-down", down) for t in range(T)] for p in range(P)]
            for h in range(hosts)
        ]
        self.last = [[Link(f"h{h}-p{p}-lasthop", last) for p in range(P)] for h in range(hosts)]
        self._route: dict[bytes, tuple[int, int]] = {}
        self.misrouted = 0

    def send(self, host: int, port: int, frame: bytes, t: float) -> None:
        key = bytes(frame[38:54])
        route = self._route.get(key)
        if route is None:
            try:
                info = usid.decode_path(self.shape, key)
            except usid.UsidError:
                self.misrouted += 1
                return
            if info.plane != port or info.t1 is None or info.src_t0 != host:
                self.misrouted += 1
                return
            route = (info.t1, info.dst_host)
            self._route[key] = route
        t1, dst = route
        stages = (
            self.nic[host][port],
            self.up[host][port][t1],
            self.down[dst][port][t1],
            self.last[dst][port],
        )
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, stages, 0, (dst, port, frame)))

    def links(self) -> list[Link]:
        out: list[Link] = []
        for h in range(len(self.nic)):
            out += self.nic[h] + self.last[h]
            for p in range(len(self.up[h])):
                out += self.up[h][p] + self.down[h][p]
        return out


class Incast:
    """One incast: every sender writes ``size`` bytes to its own region on the receiver."""

    def __init__(self, cfg: IncastConfig, qp_config: QpConfig | None = None) -> None:
        self.cfg = cfg
        self.fabric = IncastFabric(cfg, self._deliver)
        shape = self.fabric.shape
        rx = self.fabric.receiver
        self.memories = [MemoryTable(cfg.seed * 31 + h) for h in range(cfg.senders + 1)]
        self.endpoints: list[dict[int, QueuePair]] = [{} for _ in range(cfg.senders + 1)]
        # each host's QP 0x2 (EV probes), which finds the QP an answer names in endpoints
        self.desks = [
            EvProbeDesk(host_net(shape, h), eps.get) for h, eps in enumerate(self.endpoints)
        ]
        self.pump = Pump(self.fabric, self._on_event)
        line = cfg.planes * cfg.port_rate_bps

        base = qp_config or QpConfig(
            mtu_bytes=cfg.mtu,
            ev=EvConfig(
                ev_count=max(cfg.evs, cfg.planes),
                path_policy=cfg.path_policy,
                plane_share=cfg.plane_share,
            ),
            cc=cfg.cc,
            base_rtt_s=cfg.base_rtt_s,
        )
        rng = random.Random(cfg.seed)
        self.senders: list[QueuePair] = []
        self.receivers: list[QueuePair] = []
        self.src: list[bytes] = []
        self.dst: list[bytearray] = []
        self.messages = [0] * cfg.senders
        self.completed: list[dict[int, WcStatus]] = [{} for _ in range(cfg.senders)]
        self.completion_s: list[float | None] = [None] * cfg.senders
        self.qp_errors: list[str] = []
        rx_net = host_net(shape, rx)
        for s in range(cfg.senders):
            qa, qb = 0x100 + s, 0x200 + s
            cfg_s = _with_seed(base, cfg.seed * 1000 + s)
            a = QueuePair(qa, host_net(shape, s), self.memories[s], line, seeded(cfg_s, qa))
            b = QueuePair(
                qb, rx_net, self.memories[rx], line, seeded(_with_seed(base, cfg.seed + 7 * s), qb)
            )
            a.connect(b.local_attributes())
            b.connect(a.local_attributes())
            self.endpoints[s][qa] = a
            self.endpoints[rx][qb] = b
            self.senders.append(a)
            self.receivers.append(b)
            src = rng.randbytes(cfg.size)
            dst = bytearray(cfg.size)
            mr = self.memories[rx].register(dst)
            self.src.append(src)
            self.dst.append(dst)
            view = memoryview(src)
            for k, off in enumerate(range(0, cfg.size, cfg.msg_size)):
                n = min(cfg.msg_size, cfg.size - off)
                last = off + n >= cfg.size
                self.messages[s] += 1
                post = _poster(a, k, view[off : off + n], mr.base_va + off, mr.rkey, last)
                if cfg.stagger_s:
                    self.fabric.at(s * cfg.stagger_s, post)
                else:
                    post()
        self._done = False

    # -- driving ---------------------------------------------------------------------------------

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        ep = endpoint_for(self.endpoints[host], self.desks[host], self.pump, host, frame, t)
        if ep is None:
            return
        self.pump.receive(host, ep, frame, t)

    def _on_event(self, host: int, e: object, t: float) -> None:
        if isinstance(e, WriteCompleted) and host < self.cfg.senders:
            self.completed[host][e.wr_id] = e.status
            if len(self.completed[host]) == self.messages[host]:
                self.completion_s[host] = t
                self._done = all(c is not None for c in self.completion_s)
        elif isinstance(e, QpErrorEvent):
            self.qp_errors.append(f"host {host} QP {e.qpn:#x}: {e.status.value}: {e.reason}")
            self._done = True

    def run(self) -> dict:
        for h, eps in enumerate(self.endpoints):
            for ep in eps.values():
                self.pump.pump(h, ep, 0.0)
        self.fabric.run(self.cfg.max_time_s, lambda: self._done)
        return self.result()

    def result(self) -> dict:
        cfg = self.cfg
        ok = [
            c is not None and all(st is WcStatus.SUCCESS for st in done.values())
            for c, done in zip(self.completion_s, self.completed, strict=True)
        ]
        rates = [
            cfg.size * 8 / (c - s * cfg.stagger_s) if good and c else 0.0
            for s, (c, good) in enumerate(zip(self.completion_s, ok, strict=True))
        ]
        end = max((c for c in self.completion_s if c is not None), default=None)
        total = cfg.size * cfg.senders
        goodput = total * 8 / end if end and all(ok) else 0.0
        jain = (sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))) if any(rates) else 0.0
        links = self.fabric.links()
        last_trims = sum(link.trims for link in links if link.spec.last_hop)
        return {
            "senders": cfg.senders,
            "goodput_fraction": round(goodput / cfg.capacity_bps, 4),
            "completion_s": round(end, 6) if end is not None else None,
            "sender_completion_s": [round(c, 6) if c else None for c in self.completion_s],
            "jain_fairness": round(jain, 4),
            "verified": all(bytes(d) == s for d, s in zip(self.dst, self.src, strict=True)),
            "qp_errors": len(self.qp_errors),
            "qp_error_reasons": self.qp_errors,
            "retransmissions": sum(a.stats.retransmissions for a in self.senders),
            "timeouts": sum(a.stats.timeouts for a in self.senders),
            "spurious_timeouts": sum(
                getattr(a.stats, "spurious_timeouts", 0) for a in self.senders
            ),
            "trims": sum(link.trims for link in links),
            "lasthop_trims": last_trims,
            "ecn_marks": sum(link.marks for link in links),
            "drops": sum(link.drops for link in links),
            "ev_states": _sum_states(self.senders),
            "capacity_bps": cfg.capacity_bps,
            "base_rtt_s": cfg.base_rtt_s,
            "bytes_per_sender": cfg.size,
            "seed": cfg.seed,
        }


def _with_seed(c: QpConfig, seed: int) -> QpConfig:
    return replace(c, seed=seed)


def _poster(
    qp: QueuePair, wr_id: int, data: memoryview, va: int, rkey: int, last: bool
) -> Callable[[], None]:
    def post() -> None:
        qp.post_write(wr_id, data, va, rkey, imm=wr_id if last else None)

    return post


def _sum_states(qps: Sequence[QueuePair]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in qps:
        for k, v in q.ev_states().items():
            out[k] = out.get(k, 0) + v
    return out


def run(cfg: IncastConfig, qp_config: QpConfig | None = None) -> dict:
    return Incast(cfg, qp_config).run()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mrcnic.sim.incast",
        description="N-to-1 incast of MRC queue pairs.",
        epilog="Units (mrcnic.units): BYTES 4096, 64K, 1.5M (binary: 1K = 1024); RATE in bit/s "
        "100M, 100Mbit, 1gbit (decimal); TIME 20us, 10ms, 1.5s, or plain seconds.",
    )
    d = IncastConfig()
    p.add_argument("--senders", type=int, default=d.senders, help="senders (default 4)")
    p.add_argument("--planes", type=int, default=d.planes, help="planes (default 8)")
    p.add_argument("--t1", dest="paths_per_plane", type=int, default=d.paths_per_plane,
                   help="T1 switches per plane (default 4)")  # fmt: skip
    deprecated(p, "--paths-per-plane", "--t1", dest="paths_per_plane", type=int)
    p.add_argument(
        "--size", type=size_arg, default=d.size, metavar="BYTES", help="per sender (default 4M)"
    )
    p.add_argument(
        "--msg-size", type=size_arg, default=d.msg_size, metavar="BYTES", help="default 1M"
    )
    p.add_argument(
        "--rate", dest="port_rate", type=rate_with_unit, default=d.port_rate_bps, metavar="RATE",
        help="NIC port rate with its unit (default 100Mbit)",
    )  # fmt: skip
    deprecated(p, "--port-rate", "--rate", dest="port_rate", type=rate_arg)
    p.add_argument(
        "--path-rate", type=rate_arg, default=None, metavar="RATE", help="default: port rate"
    )
    p.add_argument(
        "--delay", type=time_arg, default=d.prop_s, metavar="TIME", help="one way (default 20us)"
    )
    p.add_argument(
        "--buffer", dest="queue", type=size_arg, default=d.queue_bytes, metavar="BYTES",
        help="switch buffer per port (default 64K)",
    )  # fmt: skip
    deprecated(p, "--queue", "--buffer", dest="queue", type=size_arg)
    p.add_argument("--loss", type=float, default=0.0, help="per packet per uplink")
    p.add_argument(
        "--stagger", type=time_arg, default=0.0, metavar="TIME", help="sender s starts at s*TIME"
    )
    plugins.add_arguments(p)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        choice = plugins.choice_from_args(a)
    except plugins.PluginError as e:
        parser.error(str(e))
    cfg = IncastConfig(
        senders=a.senders,
        planes=a.planes,
        paths_per_plane=a.paths_per_plane,
        port_rate_bps=a.port_rate,
        path_rate_bps=a.path_rate,
        prop_s=a.delay,
        queue_bytes=a.queue,
        loss=a.loss,
        size=a.size,
        msg_size=a.msg_size,
        stagger_s=a.stagger,
        cc=choice.cc or "nscc",
        path_policy=choice.path_policy or "mrc",
        plane_share=choice.plane_share or "equal",
        seed=a.seed,
    )
    r = run(cfg)
    if a.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:20s} {v}")
    return 0 if r["verified"] and not r["qp_errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
