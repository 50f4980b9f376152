"""A congestion onset on the whole-fabric simulator: a steady write fills a receiver's links,
then a second write joins it, and the result says when the senders first heard of a loss.

The lab's claim 10 (``lab/workloads/experiments/trim.py``) in virtual time: ``steady``
writes to ``dst`` from time 0; at ``join_s`` (the onset: the joiner's first post)
``joiner`` starts writing to ``dst`` too with ``joiner_qps`` QPs, so each of ``dst``'s
plane links is asked for twice its rate.  A :class:`mrcnic.sim.loss_clock.LossClock` on
every writing QP gives the first NACK received and the first retransmission after the onset,
of either write.  Both writes are finite and checked byte for byte at the end.

MRC writes with one QP for the steady write (sprayed over every plane); RoCEv2 with one QP
per plane (a rail each, as the lab binds them), unless ``steady_qps`` says otherwise.  The
fabric and its queues are :class:`mrcnic.sim.clos.ClosFabric`'s (``ClosSpec.trim``: trim or
drop on overflow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.collectives import ClosHosts, host_name, random_bytes
from mrcnic.sim.loss_clock import LossClock
from mrcnic.sim.pump import OnEvent
from mrcnic.transport.qp_types import WcStatus, WriteCompleted

_QPN_WRITER, _QPN_READER = 0x600000, 0x700000  # + flow * 256 + QP index


@dataclass(frozen=True, slots=True)
class OnsetParams:
    """Who writes to whom, how much and when (sizes in bytes per write, times in seconds)."""

    dst: int = 0
    steady: int = 1
    joiner: int = 2
    join_s: float = 300e-6  # the onset: the joiner's first post
    steady_bytes: int = 64 << 20
    joiner_bytes: int = 16 << 20
    joiner_qps: int = 8
    steady_qps: int | None = None  # default: MRC 1, RoCEv2 one per plane

    def check(self, spec: ClosSpec) -> None:
        hosts = (self.dst, self.steady, self.joiner)
        if len(set(hosts)) != 3 or not all(0 <= h < spec.hosts for h in hosts):
            raise ValueError(f"dst, steady and joiner: three different hosts of h0 .. "
                             f"h{spec.hosts - 1}")  # fmt: skip
        if not 1 <= self.joiner_qps <= 256 or not 1 <= (self.steady_qps or 1) <= 256:
            raise ValueError("QPs per write: 1 .. 256")
        if self.join_s < 0 or self.steady_bytes < 1 or self.joiner_bytes < 1:
            raise ValueError("join_s >= 0, and each write at least a byte")


@dataclass
class _Write:
    src: int
    qps: list[Any]
    qpns: list[int]
    data: bytes
    recv: bytearray
    messages: int = 0
    completed: int = 0
    failed: int = 0
    done_s: float | None = None
    posts: list[tuple[int, memoryview, int, int]] = field(default_factory=list)


class Onset:
    """The two writes on a fresh :class:`ClosSpec` fabric (module doc)."""

    def __init__(self, spec: ClosSpec, p: OnsetParams) -> None:
        p.check(spec)
        self.spec, self.p = spec, p
        self.hosts = h = ClosHosts(spec)
        self.clock = LossClock(since_s=p.join_s)
        steady_qps = p.steady_qps or (1 if spec.transport == "mrc" else spec.planes)
        self.writes = [
            self._write(0, p.steady, p.steady_bytes, steady_qps),
            self._write(1, p.joiner, p.joiner_bytes, p.joiner_qps),
        ]
        h.senders = [qp for w in self.writes for qp in w.qps]
        self._post_all(self.writes[0])  # pumped by ClosHosts.run at 0
        h.fabric.at(p.join_s, lambda: self._start(self.writes[1], p.join_s))

    def _write(self, f: int, src: int, size: int, qps: int) -> _Write:
        h, spec, dst = self.hosts, self.spec, self.p.dst
        data = random_bytes(spec.seed * 7919 + f, size)
        recv = bytearray(size)
        mr = h.memories[dst].register(recv)
        w = _Write(src, [], [], data, recv)
        for q in range(qps):
            qa, qb = _QPN_WRITER + f * 256 + q, _QPN_READER + f * 256 + q
            cfg = h.qp_config(q, spec.seed * 1000 + f * 256 + q)
            ea, _ = h.add_pair((src, qa), (dst, qb), cfg, self._on(w), lambda *_: None)
            h.endpoints[src][qa][1].on_pumped = self.clock  # the writer's pump
            w.qps.append(ea)
            w.qpns.append(qa)
        view = memoryview(data)
        for k, off in enumerate(range(0, size, spec.msg_size)):
            n = min(spec.msg_size, size - off)
            w.posts.append((k, view[off : off + n], mr.base_va + off, mr.rkey))
        w.messages = len(w.posts)
        return w

    def _post_all(self, w: _Write) -> None:
        for k, (wr_id, view, va, rkey) in enumerate(w.posts):
            w.qps[k % len(w.qps)].post_write(wr_id, view, va, rkey)

    def _start(self, w: _Write, t: float) -> None:
        self._post_all(w)
        for qpn in w.qpns:
            self.hosts.pump(w.src, qpn, t)

    def _on(self, w: _Write) -> OnEvent:
        def handle(_host: int, e: Any, t: float) -> None:
            if not isinstance(e, WriteCompleted):
                return
            w.completed += 1
            if e.status is not WcStatus.SUCCESS:
                w.failed += 1
            if w.completed == w.messages:
                w.done_s = t

        return handle

    def _done(self) -> bool:
        return all(w.done_s is not None for w in self.writes)

    def run(self) -> dict[str, Any]:
        wall, cpu = self.hosts.run(self._done)
        return self.result(wall, cpu)

    def result(self, wall_s: float, cpu_s: float) -> dict[str, Any]:
        spec, p, clock = self.spec, self.p, self.clock
        qps = self.hosts.senders

        def after(x: float | None) -> float | None:
            return None if x is None else round(x - p.join_s, 9)

        nack = clock.earliest(qps, "rx_nacks")
        retx = clock.earliest(qps, "retransmissions")
        first = nack if nack is not None else retx
        steady_end = self.writes[0].done_s
        end = max((w.done_s for w in self.writes if w.done_s is not None), default=None)
        into_dst = sum(len(w.data) for w in self.writes) * 8
        flows = [
            {
                "src": host_name(w.src),
                "dst": host_name(p.dst),
                "role": role,
                "qps": len(w.qps),
                "bytes": len(w.data),
                "completion_s": None if w.done_s is None else round(w.done_s, 9),
                "verified": w.done_s is not None and not w.failed and bytes(w.recv) == w.data,
                "first_nack_s": after(clock.earliest(w.qps, "rx_nacks")),
                "first_retx_s": after(clock.earliest(w.qps, "retransmissions")),
                "nacks": sum(q.stats.rx_nacks for q in w.qps),
                "retransmissions": sum(q.stats.retransmissions for q in w.qps),
                "timeouts": sum(q.stats.timeouts for q in w.qps),
                "sack_losses": sum(q.stats.sack_losses for q in w.qps),
            }
            for role, w in zip(("steady", "joiner"), self.writes, strict=True)
        ]
        return {
            **self.hosts.head("onset"),
            "hosts": spec.hosts,
            "trim": spec.trim,
            "onset_s": p.join_s,
            # after the onset, of either write: the first NACK (MRC: a trimmed packet's; RoCEv2:
            # a NAK), the first retransmission, and the first request (the NACK, else the
            # retransmission: what a dropping switch leaves MRC to infer)
            "first_nack_s": after(nack),
            "first_retx_s": after(retx),
            "first_request_s": after(first),
            # how a loss was found without a NACK: from SACKs, or by a timeout
            "first_sack_loss_s": after(clock.earliest(qps, "sack_losses")),
            "first_timeout_s": after(clock.earliest(qps, "timeouts")),
            # the steady write still ran when the onset came and when the request did
            "valid": steady_end is not None and first is not None and steady_end > first,
            "flows": flows,
            "verified": all(f["verified"] for f in flows),
            # what reached dst over the run, of what its ports take in
            "goodput_fraction": round(into_dst / (end * spec.planes * spec.port_rate_bps), 4)
            if end
            else 0.0,
            "qp_errors": len(self.hosts.qp_errors),
            "sack_losses": sum(f["sack_losses"] for f in flows),
            "nacks": sum(f["nacks"] for f in flows),
            "queue_drain_s": spec.queue_bytes * 8 / spec.path_rate,
            **self.hosts.run_keys(wall_s, cpu_s),
        }


def run_onset(spec: ClosSpec, p: OnsetParams | None = None) -> dict[str, Any]:
    return Onset(spec, p or OnsetParams()).run()
