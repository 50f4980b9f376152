"""The lab's collective workloads on the whole-fabric simulator: ``mrc-sim --workload
allreduce|alltoall|incast``.

Each runs on a :class:`mrcnic.sim.clos.ClosFabric` with real QPs (MRC, or the RoCEv2
baseline bound to rails as the lab binds them) on every host, and follows the definition the
lab's ``mrc-bench`` follows (:mod:`mrcnic.workloads`):

- **allreduce**: the ring all-reduce of ``mrc-bench allreduce``, one write-with-immediate per
  step, a rank sending step ``s + 1`` only once step ``s`` arrived (and, in reduce-scatter,
  was added into its data: the sums are real and checked against every rank's data);
- **alltoall**: every host writes its chunk to every other at once, one QP per pair;
- **incast**: ``mrc-bench incast``: senders write messages of ``--size`` to one host for a
  duration, optionally beside a victim flow that first runs alone.

One iteration each by default (virtual time has no noise to average); the all-reduce runs
``iters`` of them back to back, as a training job does, and plays the spec's faults
(:mod:`mrcnic.sim.closfaults`) with an optional goodput timeline, as the permutation does.
The results carry ``mrc-bench``'s keys for the workload, plus the whole-fabric keys
(``workload``, ``utilisation``, ``flows``, ``jain``, ``fct_p50_s``, ``link_imbalance``, the
counters).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from mrcnic import workloads as wl
from mrcnic.optional import load
from mrcnic.rocev2.qp import RoceConfig
from mrcnic.sim.clos import (
    ClosSpec,
    add_to_bin,
    connect_pair,
    cores_keys,
    fabric_counters,
    fct_quantiles,
    flow_qp_config,
    jain_index,
    link_imbalance,
    link_utilisation,
    make_fabric,
    merge_bins,
    recovery_s,
    rocev2_qp_config,
)
from mrcnic.sim.closfaults import ClosFaults
from mrcnic.sim.fabric import host_net
from mrcnic.sim.pump import OnEvent, Pump, endpoint_for
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp_types import (
    ImmReceived,
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
)

np = load("numpy", "the simulated collectives")  # (the 'collectives' extra)

# QP numbers (24 bits, unique per host): a collective's QP towards peer j is _QPN_PEER + j
# (the ring's "next" and "prev" are two peers' numbers in two ranges); an incast flow f's QP
# q is _QPN_WRITER / _QPN_READER + f * 256 + q
_QPN_NEXT, _QPN_PREV, _QPN_PEER = 0x100000, 0x200000, 0x300000
_QPN_WRITER, _QPN_READER = 0x400000, 0x500000
WRITE_DEPTH = 16  # writes outstanding per incast flow: mrc-bench write's default depth


def host_name(h: int) -> str:
    return f"h{h}"


def pair_capacity_bps(spec: ClosSpec, a: int, b: int) -> float:
    """What the fabric carries from ``a`` to ``b``: per plane the port, or under different
    T0s the smaller of the port and the T0's uplinks (the lab's ``pair_capacity_bps``)."""
    hpt = spec.hosts_per_t0
    same_t0 = a // hpt == b // hpt
    per_plane = spec.port_rate_bps if same_t0 else min(spec.port_rate_bps, spec.t1 * spec.path_rate)
    return spec.planes * per_plane


class ClosHosts:
    """Every host of a :class:`ClosFabric` with its memory, its QPs and its EV probe desk;
    each QP has its own event handler (a workload needs to know which peer an immediate
    came from, and ``ImmReceived`` does not say).  The spec's faults play on the fabric
    (:class:`ClosFaults`) and, with ``spec.timeline_s``, the bytes placed at every receiver
    are binned, as the permutation does."""

    def __init__(self, spec: ClosSpec) -> None:
        spec.check()
        self.spec = spec
        self.fabric = make_fabric(spec, self._deliver, self._wake)
        self.faults = ClosFaults(self.fabric, spec.faults, self._port_status)
        self.placed_bins: list[int] | None = [] if spec.timeline_s else None
        H = spec.hosts
        self.nets = [host_net(spec.shape, h) for h in range(H)]
        self.memories = [MemoryTable(spec.seed * 131 + h) for h in range(H)]
        self.endpoints: list[dict[int, tuple[Any, Pump]]] = [{} for _ in range(H)]
        self.desks = [
            EvProbeDesk(self.nets[h], lambda q, h=h: self._endpoint(h, q)) for h in range(H)
        ]
        self.desk_pump = Pump(self.fabric, lambda _h, _e, _t: None)
        self.qp_errors: list[str] = []
        self.senders: list[Any] = []  # the QPs that write (their counters are the run's)

    def _endpoint(self, host: int, qpn: int) -> Any:
        got = self.endpoints[host].get(qpn)
        return None if got is None else got[0]

    def mrc_config(self, seed: int) -> QpConfig:
        return flow_qp_config(self.spec, self.spec.qp, seed=seed)

    def qp_config(self, rail: int, seed: int) -> QpConfig | RoceConfig:
        """MRC sprays over every plane; a RoCEv2 QP is bound to port ``rail mod planes`` (the
        lab's ``transport_qp_config``)."""
        if self.spec.transport == "mrc":
            return self.mrc_config(seed)
        return rocev2_qp_config(self.spec, rail % self.spec.planes, seed)

    def add_pair(
        self,
        a: tuple[int, int],
        b: tuple[int, int],
        cfg: QpConfig | RoceConfig,
        on_a: OnEvent,
        on_b: OnEvent,
        cfg_b: QpConfig | RoceConfig | None = None,
    ) -> tuple[Any, Any]:
        """Connect QP ``a = (host, qpn)`` with ``b`` (configured by ``cfg``, ``b`` by
        ``cfg_b`` if given); their events go to ``on_a``, ``on_b``."""
        for h, q in (a, b):
            if q in self.endpoints[h]:
                raise ValueError(f"host {h} has two QPs numbered {q:#x}")
        ea, eb = connect_pair(self.spec, self.nets, self.memories, a, b, cfg, cfg_b, self.fabric)
        self.endpoints[a[0]][a[1]] = (ea, Pump(self.fabric, self._guard(on_a)))
        self.endpoints[b[0]][b[1]] = (eb, Pump(self.fabric, self._guard(on_b)))
        return ea, eb

    def _guard(self, on: OnEvent) -> OnEvent:
        def handle(host: int, e: Any, t: float) -> None:
            if isinstance(e, QpErrorEvent):
                self.qp_errors.append(f"host {host} QP {e.qpn:#x}: {e.status.value}: {e.reason}")
            on(host, e, t)

        return handle

    def pump(self, host: int, qpn: int, t: float) -> None:
        ep, p = self.endpoints[host][qpn]
        p.pump(host, ep, t)

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        got = endpoint_for(self.endpoints[host], self.desks[host], self.desk_pump, host, frame, t)
        if got is None:
            return
        ep, p = got
        bins = self.placed_bins
        if bins is None:
            p.receive(host, ep, frame, t)
            return
        before = ep.stats.rx_placed_bytes
        p.receive(host, ep, frame, t)
        add_to_bin(bins, t, cast(float, self.spec.timeline_s), ep.stats.rx_placed_bytes - before)

    def _wake(self, host: int, qpn: int, t: float) -> None:
        """A QP on the C engines has work for Python (the C fabric's call): pump it."""
        ep, p = self.endpoints[host][qpn]
        p.pump(host, ep, t)

    def _port_status(self, host: int, plane: int, up: bool, t: float) -> None:
        """A host's NIC port went down or came back: its QPs hear at once, as from the shell."""
        for ep, p in self.endpoints[host].values():
            ep.port_status(plane, up, t)
            p.pump(host, ep, t)

    def fault_keys(self) -> dict[str, Any]:
        """The permutation's fault keys (``faults``, ``fault_schedule``, ``fault_log``,
        ``lost_in_flight``) and, with a timeline, ``timeline``, ``timeline_bin_s`` and
        ``recovery_s`` (until the fabric's clock: the run's end)."""
        out: dict[str, Any] = self.faults.to_json()
        bins = self.placed_bins
        if bins is not None:
            merge_bins(bins, self.fabric)
            step = cast(float, self.spec.timeline_s)
            end = self.fabric.now
            n = max(len(bins), int(end / step) + (0 if end % step == 0 else 1))
            timeline = [
                [round(k * step, 6), round((bins[k] if k < len(bins) else 0) * 8 / step)]
                for k in range(n)
            ]
            out["timeline"] = timeline
            out["timeline_bin_s"] = step
            out["recovery_s"] = recovery_s(timeline, self.spec.faults)
        return out

    def t1_packets(self) -> dict[str, int]:
        """Packets each T1 sent down to the T0s (both directions of every flow), by the
        lab's switch name: which T1 a run crossed most."""
        spec, fab = self.spec, self.fabric
        return {
            f"p{p}-t1-{j}": sum(link.tx_packets for link in fab.down[p][j])
            for p in range(spec.planes)
            for j in range(spec.t1)
        }

    def link_packets(self) -> dict[str, int]:
        """Packets each T0-T1 link carried, both directions, keyed as a ``link`` fault names
        it (``p0-t0-1,p0-t1-2``): which links a run crossed most."""
        spec, fab = self.spec, self.fabric
        return {
            f"p{p}-t0-{i},p{p}-t1-{j}": fab.up[p][i][j].tx_packets + fab.down[p][j][i].tx_packets
            for p in range(spec.planes)
            for i in range(spec.t0)
            for j in range(spec.t1)
        }

    def run(self, done: Callable[[], bool]) -> tuple[float, float]:
        """Pump every QP at time 0, run until ``done()``, a QP error or the time limit;
        returns (wall, cpu) seconds."""
        t0, c0 = time.perf_counter(), time.process_time()
        for h, eps in enumerate(self.endpoints):
            for ep, p in list(eps.values()):
                p.pump(h, ep, 0.0)
        self.fabric.run(self.spec.max_time_s, lambda: bool(self.qp_errors) or done())
        return time.perf_counter() - t0, time.process_time() - c0

    def run_keys(self, wall_s: float, cpu_s: float) -> dict[str, Any]:
        """The whole-fabric keys every workload reports (after its own)."""
        spec = self.spec
        counters = fabric_counters(self.fabric, self.senders)
        return {
            "link_imbalance": link_imbalance(self.fabric),
            "link_utilisation": link_utilisation(self.fabric, self.fabric.now),
            **counters,
            "tx_data_packets": counters["data_packets"],
            "spurious_timeouts": sum(
                getattr(qp.stats, "spurious_timeouts", 0) for qp in self.senders
            ),
            "qp_error_reasons": self.qp_errors,
            "host_capacity_bps": spec.host_capacity_bps,
            "base_rtt_s": spec.base_rtt_s,
            "seed": spec.seed,
            "wall_s": round(wall_s, 3),
            "cpu_s": round(cpu_s, 3),
            "sim_pps": round(counters["data_packets"] / cpu_s) if cpu_s > 0 else None,
            **cores_keys(spec, self.fabric),
        }

    def head(self, workload: str) -> dict[str, Any]:
        """The keys a result opens with: the workload (as ``mrc-bench``'s ``test``) and the
        fabric."""
        spec = self.spec
        return {
            "workload": workload,
            "test": workload,
            "transport": spec.transport,
            "planes": spec.planes,
            "t0": spec.t0,
            "t1": spec.t1,
            "hosts_per_t0": spec.hosts_per_t0,
            "port_rate_bps": spec.port_rate_bps,
        }


def refuse_faults(spec: ClosSpec, workload: str) -> None:
    """For the workloads that do not play faults or bin a timeline yet."""
    if spec.faults or spec.timeline_s is not None:
        raise ValueError(f"--fault, --timeline: not supported by --workload {workload} yet")


def _flow_keys(flows: list[dict[str, Any]]) -> dict[str, Any]:
    """``flows`` (each with ``bytes`` and ``fct_s``: its goodput added), ``jain`` and the
    FCT quantiles."""
    for f in flows:
        fct = f["fct_s"]
        f["goodput_bps"] = round(f["bytes"] * 8 / fct) if fct else 0
    fcts = sorted(f["fct_s"] for f in flows if f["fct_s"] is not None)
    return {
        "flows": flows,
        "jain": jain_index([float(f["goodput_bps"]) for f in flows]),
        **fct_quantiles(fcts),
    }


# --- ring all-reduce -----------------------------------------------------------------------------


@dataclass
class _Rank:
    """One rank's part of the current iteration (the lab's ``_Iteration``, in virtual time)."""

    data: bytearray
    recv: bytearray
    got: int = 0
    sent: int = 0
    completed: int = 0
    wr: int = 0  # never reset: work request ids stay unique over the iterations
    t_end: float = 0.0
    last_write_s: float | None = None
    errors: list[str] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)  # arrival time of each step


class Allreduce:
    """``mrc-bench allreduce`` on every host of a :class:`ClosSpec` fabric: ranks in host
    order, ``spec.size`` bytes per rank (rounded as the lab rounds it), ``iters`` iterations
    back to back: the next starts when every rank has finished the previous one (its last
    write completed and its last step arrived), each from every rank's seeded data again and
    checked against the sum, as the lab's.  The spec's faults play meanwhile; a QP error
    ends the run (the iteration it hit counts as failed: a launcher would restart the job)."""

    def __init__(self, spec: ClosSpec, iters: int = 1) -> None:
        if iters < 1:
            raise ValueError(f"--iters must be >= 1, not {iters}")
        self.hosts = ClosHosts(spec)
        self.spec = spec
        self.iters = iters
        n = self.n = spec.hosts
        self.size = wl.allreduce_size(spec.size, n)
        self.c = c = self.size // n
        self.expect_steps = wl.ring_steps(n)
        self.ranks: list[_Rank] = []
        self.inputs: list[bytes] = []  # each rank's seeded data, restored every iteration
        self.mr_data, self.mr_recv = [], []
        for r in range(n):
            data = bytearray(self.size)
            np.frombuffer(data, dtype=np.uint32)[:] = wl.rank_data(spec.seed, r, self.size // 4)
            self.inputs.append(bytes(data))
            rank = _Rank(data, bytearray((n - 1) * c))
            self.ranks.append(rank)
            self.mr_data.append(self.hosts.memories[r].register(rank.data))
            self.mr_recv.append(self.hosts.memories[r].register(rank.recv))
        self.expect = wl.allreduce_expected(spec.seed, n, self.size // 4)
        self.qp_next: list[Any] = []
        for r in range(n):
            nxt = (r + 1) % n
            # the lab's QP indices (RoCEv2: rails): rank r's next QP r, its prev QP r + 1
            ca = self.hosts.qp_config(r, spec.seed * 977 + 2 * r + 1)
            cb = self.hosts.qp_config(nxt + 1, spec.seed * 977 + 2 * nxt + 2)
            ea, _ = self.hosts.add_pair(
                (r, _QPN_NEXT), (nxt, _QPN_PREV), ca, self._on_next, self._on_prev, cb
            )
            self.qp_next.append(ea)
        self.hosts.senders = list(self.qp_next)
        self.it = 0  # the iteration running
        self.start_s = 0.0  # when it started
        # per iteration finished and verified: start, time, the slowest rank's step durations
        self.starts: list[float] = []
        self.times: list[float] = []
        self.step_times: list[list[float]] = []
        self.failed_s: float | None = None  # when an iteration ended wrong
        for r in range(n):
            self._send(r, wl.RS, 0)

    def _send(self, r: int, phase: int, s: int) -> None:
        c, rank = self.c, self.ranks[r]
        w = wl.ring_write(phase, s, r, self.n)
        nxt = (r + 1) % self.n
        mr = self.mr_recv[nxt] if w.to_recv else self.mr_data[nxt]
        view = memoryview(rank.data)[w.chunk * c : (w.chunk + 1) * c]
        imm = wl.imm_tag(self.it, phase, s)
        self.qp_next[r].post_write(rank.wr, view, mr.base_va + w.slot * c, mr.rkey, imm=imm)
        rank.wr += 1
        rank.sent += 1

    def _on_next(self, r: int, e: Any, t: float) -> None:
        rank = self.ranks[r]
        if isinstance(e, WriteCompleted):
            if e.status is not WcStatus.SUCCESS:
                rank.errors.append(f"rank {r}: write {e.wr_id}: {e.status.value}")
            rank.completed += 1
            rank.t_end = max(rank.t_end, t)
            rank.last_write_s = t
            self._maybe_finish(t)

    def _on_prev(self, r: int, e: Any, t: float) -> None:
        if not isinstance(e, ImmReceived):
            return
        rank = self.ranks[r]
        if rank.got >= len(self.expect_steps):
            rank.errors.append(f"rank {r}: unexpected immediate {e.imm:#x}")
            return
        phase, s = self.expect_steps[rank.got]
        want = wl.imm_tag(self.it, phase, s)
        if e.imm != want:
            rank.errors.append(f"rank {r}: immediate {e.imm:#x}, expected {want:#x}")
            return
        rank.got += 1
        e32 = self.c // 4
        if phase == wl.RS:
            k = wl.ring_reduce_chunk(s, r, self.n)
            d32 = np.frombuffer(rank.data, dtype=np.uint32)[k * e32 : (k + 1) * e32]
            np.add(d32, np.frombuffer(rank.recv, dtype=np.uint32)[s * e32 : (s + 1) * e32], out=d32)
        rank.steps.append(t)
        rank.t_end = max(rank.t_end, t)
        nxt = wl.ring_next(phase, s, self.n)
        if nxt is not None:
            self._send(r, *nxt)
            self.hosts.pump(r, _QPN_NEXT, t)
        self._maybe_finish(t)

    def _rank_done(self, k: _Rank) -> bool:
        steps = 2 * (self.n - 1)
        return k.got == steps and k.completed == k.sent == steps

    def _maybe_finish(self, t: float) -> None:
        """Every rank finished the iteration: record and check it, release the next."""
        if len(self.times) > self.it or self.failed_s is not None:
            return
        if not all(self._rank_done(k) for k in self.ranks):
            return
        reports = [{"start": self.start_s, "end": k.t_end, "steps": k.steps} for k in self.ranks]
        ok = True
        for r, k in enumerate(self.ranks):
            if k.errors or not np.array_equal(np.frombuffer(k.data, np.uint32), self.expect):
                k.errors.append(f"rank {r}: iteration {self.it}: wrong result")
                ok = False
        if not ok:  # a failed step: the job stops here (a launcher would restart it)
            self.failed_s = t
            return
        self.starts.append(self.start_s)
        self.times.append(wl.iteration_time(reports))
        self.step_times.append(wl.slowest_steps(reports, self.n))
        if self.it + 1 < self.iters:
            # released once the events being handled are done (the QPs are mid-pump)
            self.hosts.fabric.at(t, lambda: self._start(t))

    def _start(self, t: float) -> None:
        """The next iteration: every rank's data restored, step 0 posted and pumped."""
        self.it += 1
        self.start_s = t
        for r, k in enumerate(self.ranks):
            k.data[:] = self.inputs[r]
            k.got = k.sent = k.completed = 0
            k.t_end = t
            k.steps = []
            self._send(r, wl.RS, 0)
        for r in range(self.n):
            self.hosts.pump(r, _QPN_NEXT, t)

    def _done(self) -> bool:
        return (
            len(self.times) == self.iters
            or self.failed_s is not None
            or any(bool(k.errors) for k in self.ranks)
        )

    def run(self) -> dict[str, Any]:
        wall, cpu = self.hosts.run(self._done)
        return self.result(wall, cpu)

    def result(self, wall_s: float, cpu_s: float) -> dict[str, Any]:
        spec, n, size = self.spec, self.n, self.size
        steps = 2 * (n - 1)
        errors: list[str] = []
        failed_at = failed_after = None
        if len(self.times) < self.iters:  # stopped inside an iteration: it failed
            failed_at = self.start_s
            end = self.failed_s if self.failed_s is not None else self.hosts.fabric.now
            failed_after = end - self.start_s
            for r, k in enumerate(self.ranks):
                if not self._rank_done(k) and not k.errors:
                    k.errors.append(
                        f"rank {r}: iteration {self.it} did not complete ({k.got} of {steps} steps)"
                    )
        for k in self.ranks:
            errors += k.errors
        errors += self.hosts.qp_errors
        done = len(self.times)
        verified = done == self.iters and not errors
        if done:
            t = statistics.fmean(self.times)
            step_times = [statistics.fmean(col) for col in zip(*self.step_times, strict=True)]
        else:  # none finished: the partial iteration's figures, as far as it got
            reports = [{"start": self.start_s, "end": k.t_end, "steps": k.steps}
                       for k in self.ranks]  # fmt: skip
            t = wl.iteration_time(reports)
            step_times = wl.slowest_steps(reports, n)
        algbw = size * 8 / t if t > 0 and verified else 0.0
        busbw = wl.allreduce_busbw_bps(algbw, n)
        capacity = min(pair_capacity_bps(spec, r, (r + 1) % n) for r in range(n))
        hop_bytes = steps * self.c * done
        flows = [
            {"src": r, "dst": (r + 1) % n, "bytes": hop_bytes, "fct_s": _r6(k.last_write_s)}
            for r, k in enumerate(self.ranks)
        ]
        return {
            **self.hosts.head("allreduce"),
            "hosts": [host_name(h) for h in range(n)],
            "ranks": n,
            "size": size,
            "elements": size // 4,
            "type": "uint32",
            "redop": "sum",
            "iters": self.iters,
            "iterations": done,
            "warmup": 0,
            "time_s": round(t, 6),
            "iteration_times_s": [round(x, 6) for x in self.times],
            "iteration_starts_s": [round(x, 6) for x in self.starts],
            "iteration_step_times_s": [[round(x, 6) for x in row] for row in self.step_times],
            "failed_iterations": 0 if failed_at is None else 1,
            "failed_at_s": _r6(failed_at),
            "failed_after_s": _r6(failed_after),
            "algbw_bps": round(algbw, 1),
            "busbw_bps": round(busbw, 1),
            "goodput_bps": round(busbw, 1),
            "capacity_bps": capacity,
            "goodput_fraction": round(busbw / capacity, 4) if capacity else 0.0,
            "utilisation": round(busbw / spec.host_capacity_bps, 4),
            "step_names": wl.ring_step_names(n),
            "step_times_s": [round(x, 6) for x in step_times],
            "verified": verified,
            "qp_errors": len(self.hosts.qp_errors),
            "errors": errors,
            "bytes": size * done,
            "duration_s": round(sum(self.times) if done else t, 6),
            **_flow_keys(flows),
            **self.hosts.run_keys(wall_s, cpu_s),
            **self.hosts.fault_keys(),
        }


def _r6(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


# --- all-to-all ----------------------------------------------------------------------------------


class Alltoall:
    """``mrc-bench alltoall`` on every host of a :class:`ClosSpec` fabric: ``spec.size``
    bytes per rank, one QP per pair of ranks (``n - 1`` per host)."""

    def __init__(self, spec: ClosSpec) -> None:
        refuse_faults(spec, "alltoall")
        self.hosts = ClosHosts(spec)
        self.spec = spec
        n = self.n = spec.hosts
        (self.size,) = wl.check_alltoall_sizes([spec.size], n)
        self.c = c = self.size // n
        self.data: list[bytearray] = []
        self.recv: list[bytearray] = []
        self.mr_recv = []
        for r in range(n):
            d = bytearray(self.size)
            np.frombuffer(d, dtype=np.uint32)[:] = wl.rank_data(spec.seed, r, self.size // 4)
            self.data.append(d)
            self.recv.append(bytearray(self.size))
            self.mr_recv.append(self.hosts.memories[r].register(self.recv[r]))
        self.qps: list[dict[int, Any]] = [{} for _ in range(n)]  # [rank][peer]
        for i in range(n):
            for j in range(i + 1, n):
                rl = wl.rail(i, j, n)
                ca = self.hosts.qp_config(rl, spec.seed * 977 + n * i + j + 1)
                cb = self.hosts.qp_config(rl, spec.seed * 977 + n * j + i + 1)
                ea, eb = self.hosts.add_pair(
                    (i, _QPN_PEER + j), (j, _QPN_PEER + i), ca, self._on(j), self._on(i), cb
                )
                self.qps[i][j], self.qps[j][i] = ea, eb
        self.hosts.senders = [qp for row in self.qps for qp in row.values()]
        self.got = [[False] * n for _ in range(n)]  # [dst][src]
        self.arrival: list[list[float | None]] = [[None] * n for _ in range(n)]
        self.fct: list[list[float | None]] = [[None] * n for _ in range(n)]  # [src][dst]
        self.completed = [0] * n
        self.t_end = [0.0] * n
        self.errors: list[str] = []
        for r in range(n):
            self.recv[r][r * c : (r + 1) * c] = self.data[r][r * c : (r + 1) * c]
            for j in wl.peer_order(r, n):
                mr = self.mr_recv[j]
                view = memoryview(self.data[r])[j * c : (j + 1) * c]
                imm = wl.imm_tag(0, wl.A2A, r & 0xFF)
                self.qps[r][j].post_write(j, view, mr.base_va + r * c, mr.rkey, imm=imm)

    def _on(self, peer: int) -> OnEvent:
        """Events of the QP (on ``host``) that joins ``host`` with ``peer``."""

        def handle(host: int, e: Any, t: float) -> None:
            if isinstance(e, WriteCompleted):
                if e.status is not WcStatus.SUCCESS:
                    self.errors.append(f"rank {host}: write to rank {peer}: {e.status.value}")
                self.completed[host] += 1
                self.fct[host][peer] = t
                self.t_end[host] = max(self.t_end[host], t)
            elif isinstance(e, ImmReceived):
                want = wl.imm_tag(0, wl.A2A, peer & 0xFF)
                if self.got[host][peer] or e.imm != want:
                    self.errors.append(
                        f"rank {host}: immediate {e.imm:#x} from rank {peer}, expected {want:#x}"
                    )
                    return
                self.got[host][peer] = True
                self.arrival[host][peer] = t
                self.t_end[host] = max(self.t_end[host], t)

        return handle

    def _done(self) -> bool:
        n = self.n
        return bool(self.errors) or all(
            sum(self.got[r]) == n - 1 and self.completed[r] == n - 1 for r in range(n)
        )

    def run(self) -> dict[str, Any]:
        wall, cpu = self.hosts.run(self._done)
        return self.result(wall, cpu)

    def result(self, wall_s: float, cpu_s: float) -> dict[str, Any]:
        spec, n, size, c = self.spec, self.n, self.size, self.c
        expect_ok = [
            bytes(self.recv[r]) == wl.alltoall_expected(spec.seed, r, n, [size])[0].tobytes()
            for r in range(n)
        ]
        reports = [
            {
                "start": 0.0,
                "end": self.t_end[r],
                "arrival": self.arrival[r],
                "ok": expect_ok[r] and not self.errors and not self.hosts.qp_errors,
            }
            for r in range(n)
        ]
        cap = min(pair_capacity_bps(spec, a, b) for a in range(n) for b in range(n) if a != b)
        row = wl.alltoall_row(size, n, 1, [reports], cap)
        flows = [
            {"src": a, "dst": b, "bytes": c, "fct_s": _r6(self.fct[a][b])}
            for a in range(n)
            for b in wl.peer_order(a, n)
        ]
        errors = self.errors + self.hosts.qp_errors
        return {
            **self.hosts.head("alltoall"),
            "hosts": [host_name(h) for h in range(n)],
            "ranks": n,
            "qps_per_rank": n - 1,
            "size": size,
            "sizes": [size],
            "elements": row["elements"],
            "type": "uint32",
            "redop": "none",
            "iterations": row["iterations"],
            "warmup": 0,
            "time_s": row["time_s"],
            "iteration_times_s": row["iteration_times_s"],
            "algbw_bps": row["algbw_bps"],
            "busbw_bps": row["busbw_bps"],
            "goodput_bps": row["busbw_bps"],
            "avg_busbw_bps": row["busbw_bps"],
            "capacity_bps": cap,
            "goodput_fraction": row["goodput_fraction"],
            "utilisation": round(row["busbw_bps"] / spec.host_capacity_bps, 4),
            "rows": [row],
            "arrival_s": wl.arrival_matrix([reports], n),
            "verified": row["verified"],
            "qp_errors": len(self.hosts.qp_errors),
            "errors": errors,
            "bytes": size,
            "duration_s": row["time_s"],
            **_flow_keys(flows),
            **self.hosts.run_keys(wall_s, cpu_s),
        }


# --- incast ----------------------------------------------------------------------------------------


@dataclass
class _WriteFlow:
    """One ``mrc-bench write`` of an incast: ``src`` writes messages of ``size`` bytes to
    ``dst`` over its QPs, ``WRITE_DEPTH`` outstanding, until the duration is up."""

    src: int
    dst: int
    role: str
    qpns: list[int]
    qps: list[Any]
    data: bytes
    recv: bytearray
    base_va: int
    rkey: int
    posted: int = 0
    completed: int = 0
    failed: int = 0
    qp_errors: int = 0  # of its QPs, at either end
    done_s: list[float] = field(default_factory=list)  # each write's completion, in order


class _IncastPhase:
    """The flows of one phase on a fresh fabric, run for ``duration_s`` of virtual time."""

    def __init__(
        self, spec: ClosSpec, flows: list[tuple[int, int, str]], qps: int, duration_s: float
    ) -> None:
        self.hosts = h = ClosHosts(spec)
        self.spec, self.duration_s = spec, duration_s
        size = spec.size
        self.flows: list[_WriteFlow] = []
        for f, (src, dst, role) in enumerate(flows):
            data = random_bytes(spec.seed * 7919 + f, WRITE_DEPTH * size)
            recv = bytearray(WRITE_DEPTH * size)
            mr = h.memories[dst].register(recv)
            flow = _WriteFlow(src, dst, role, [], [], data, recv, mr.base_va, mr.rkey)
            for q in range(qps):
                qa, qb = _QPN_WRITER + f * 256 + q, _QPN_READER + f * 256 + q
                cfg = h.qp_config(q, spec.seed * 1000 + f * 256 + q)
                on_b = self._on_reader(flow)
                ea, _ = h.add_pair((src, qa), (dst, qb), cfg, self._on(flow, q), on_b)
                flow.qpns.append(qa)
                flow.qps.append(ea)
            self.flows.append(flow)
        h.senders = [qp for fl in self.flows for qp in fl.qps]
        for fl in self.flows:
            for _ in range(WRITE_DEPTH):
                self._post(fl)

    def _post(self, fl: _WriteFlow) -> int:
        """Post the flow's next write (round robin over its QPs); returns the QP's index."""
        size = self.spec.size
        m = fl.posted
        slot = m % WRITE_DEPTH
        q = m % len(fl.qps)
        view = memoryview(fl.data)[slot * size : (slot + 1) * size]
        fl.qps[q].post_write(m, view, fl.base_va + slot * size, fl.rkey)
        fl.posted += 1
        return q

    def _on_reader(self, fl: _WriteFlow) -> OnEvent:
        def handle(_host: int, e: Any, _t: float) -> None:
            if isinstance(e, QpErrorEvent):
                fl.qp_errors += 1

        return handle

    def _on(self, fl: _WriteFlow, _q: int) -> OnEvent:
        def handle(host: int, e: Any, t: float) -> None:
            if isinstance(e, QpErrorEvent):
                fl.qp_errors += 1
            if not isinstance(e, WriteCompleted):
                return
            fl.completed += 1
            if e.status is not WcStatus.SUCCESS:
                fl.failed += 1
                return
            fl.done_s.append(t)
            if t < self.duration_s:
                q = self._post(fl)
                # posted from inside this QP's own events: pumped once they are handled
                qpn = fl.qpns[q]
                self.hosts.fabric.at(t, lambda: self.hosts.pump(host, qpn, t))

        return handle

    def _done(self) -> bool:
        return all(fl.completed == fl.posted for fl in self.flows)

    def run(self) -> tuple[float, float]:
        return self.hosts.run(self._done)

    def window_bps(self, fl: _WriteFlow, lo_s: float, hi_s: float) -> float:
        """The flow's goodput over (lo, hi]: bytes of the writes that completed in it."""
        n = sum(1 for t in fl.done_s if lo_s < t <= hi_s)
        return n * self.spec.size * 8 / (hi_s - lo_s) if hi_s > lo_s else 0.0

    def verified(self, fl: _WriteFlow) -> bool:
        """Every write completed successfully and every slot written holds its data."""
        n = min(fl.posted, WRITE_DEPTH) * self.spec.size
        return (
            fl.completed == fl.posted
            and not fl.failed
            and not fl.qp_errors
            and bytes(fl.recv[:n]) == fl.data[:n]
        )

    def entry(self, fl: _WriteFlow, skip_s: float) -> dict[str, Any]:
        """One row of ``flows``: mrc-bench incast's keys."""
        spec = self.spec
        last = fl.done_s[-1] if fl.done_s else None
        nbytes = len(fl.done_s) * spec.size
        return {
            "src": host_name(fl.src),
            "dst": host_name(fl.dst),
            "role": fl.role,
            "goodput_bps": round(self.window_bps(fl, skip_s, self.duration_s), 1),
            "verified": self.verified(fl),
            "qp_errors": fl.qp_errors,
            "goodput_run_bps": round(nbytes * 8 / last, 1) if last else 0.0,
            "capacity_bps": pair_capacity_bps(spec, fl.src, fl.dst),
            "bytes": nbytes,
            "duration_s": None if last is None else round(last, 6),
            "retransmissions": sum(qp.stats.retransmissions for qp in fl.qps),
            "timeouts": sum(qp.stats.timeouts for qp in fl.qps),
        }


def random_bytes(seed: int, n: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8).tobytes()


@dataclass(frozen=True, slots=True)
class IncastParams:
    """``mrc-bench incast``'s parameters: ``spec.size`` is the bytes per write."""

    senders: tuple[int, ...]
    dst: int
    victim: tuple[int, int] | None = None
    qps: int = 1
    duration_s: float = 0.2

    def check(self, spec: ClosSpec) -> None:
        H = spec.hosts
        hosts = [*self.senders, self.dst, *(self.victim or ())]
        if not self.senders:
            raise ValueError("an incast needs at least one sender")
        if any(not 0 <= h < H for h in hosts):
            raise ValueError(f"hosts are h0 .. h{H - 1}")
        if len(set(self.senders)) != len(self.senders):
            raise ValueError("--senders names a host twice")
        if self.dst in self.senders:
            raise ValueError(f"--dst h{self.dst} is also a sender")
        if self.victim is not None and (
            self.victim[1] == self.dst or self.victim[0] == self.victim[1]
        ):
            raise ValueError("the victim must write to another host than itself and --dst")
        if not 1 <= self.qps <= 256:
            raise ValueError("--qps must be 1..256")
        if (len(self.senders) + 1) * 256 > _QPN_READER - _QPN_WRITER:
            raise ValueError(f"at most {(_QPN_READER - _QPN_WRITER) // 256 - 1} senders")
        if self.duration_s <= 0:
            raise ValueError("--duration must be > 0")
        if spec.size >= 1 << 32:
            raise ValueError("--size must be 1 byte .. 4 GiB - 1 (one RDMA Write)")


class Incast:
    """``mrc-bench incast`` on a :class:`ClosSpec` fabric: the victim alone (when there is
    one), then the senders writing to ``dst`` with the victim beside them, each phase
    ``duration_s`` of virtual time on a fresh fabric; goodput over the window after
    ``skip_for(duration)`` of ramp-up."""

    def __init__(self, spec: ClosSpec, p: IncastParams) -> None:
        refuse_faults(spec, "incast")
        spec.check()
        p.check(spec)
        self.spec, self.p = spec, p

    def run(self) -> dict[str, Any]:
        spec, p = self.spec, self.p
        skip = wl.skip_for(p.duration_s)
        alone = None
        if p.victim is not None:
            alone = _IncastPhase(spec, [(*p.victim, "victim")], p.qps, p.duration_s)
            alone.run()
        flows = [(s, p.dst, "incast") for s in p.senders]
        if p.victim is not None:
            flows.append((*p.victim, "victim"))
        ph = _IncastPhase(spec, flows, p.qps, p.duration_s)
        wall, cpu = ph.run()
        entries = [ph.entry(fl, skip) for fl in ph.flows]
        victim = None
        if alone is not None:
            a = alone.entry(alone.flows[0], skip)
            with_bps = entries[-1]["goodput_bps"]
            victim = {
                "src": a["src"],
                "dst": a["dst"],
                "alone_bps": a["goodput_bps"],
                "with_incast_bps": with_bps,
                "ratio": round(with_bps / a["goodput_bps"], 4) if a["goodput_bps"] else None,
                "alone_verified": a["verified"],
                "alone_qp_errors": a["qp_errors"],
            }
        incast = [e for e in entries if e["role"] == "incast"]
        incast_total = sum(e["goodput_bps"] for e in incast)
        dst_capacity = spec.planes * spec.port_rate_bps
        qp_errors = sum(e["qp_errors"] for e in entries)
        if victim is not None:
            qp_errors += victim["alone_qp_errors"]
        verified = all(e["verified"] for e in entries) and (
            victim is None or victim["alone_verified"]
        )
        run = ph.hosts.run_keys(wall, cpu)
        return {
            **ph.hosts.head("incast"),
            "scenario": "incast",
            "hosts": spec.hosts,
            "senders": [host_name(s) for s in p.senders],
            "dst": host_name(p.dst),
            "qps": p.qps,
            "size": spec.size,
            "duration_s": p.duration_s,
            "flows": entries,
            "victim": victim,
            "incast_goodput_bps": round(incast_total, 1),
            "dst_capacity_bps": dst_capacity,
            "incast_fraction": round(incast_total / dst_capacity, 4),
            "utilisation": round(incast_total / dst_capacity, 4),
            "jain": jain_index([e["goodput_bps"] for e in incast]),
            "window_s": round(p.duration_s - skip, 6),
            "start_skew_s": 0.0,
            "skip_s": skip,
            "trims_total": run["trims"],
            "ecn_marks_total": run["ecn_marks"],
            "drops_total": run["drops"],
            "qp_errors_total": qp_errors,
            "verified": verified,
            **run,
        }
