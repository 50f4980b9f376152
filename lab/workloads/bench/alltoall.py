"""``mrc-bench alltoall``: an all-to-all over write-with-immediate, one process per rank.

With ``n`` ranks and ``S`` bytes per rank (``S / 4`` uint32 elements), each rank's send
buffer is cut into ``n`` chunks of ``c = S / n`` bytes and rank ``r`` writes its chunk ``j``
into chunk ``r`` of rank ``j``'s receive buffer (``n - 1`` writes, one per peer, all posted at
once, peer ``r+1`` first as nccl-tests staggers them; its own chunk is copied locally), with
immediate ``(A2A, r)``. Each pair of ranks shares one QP (one per peer at each rank, used
both ways); a RoCEv2 QP is bound at both ends to the port numbered by its pair
(:func:`rail`), so each connection stays on one rail and, while the pairs fit the planes,
has that rail to itself.
An iteration ends at a rank when every write it posted completed and every peer's immediate
arrived; the rank then compares its whole receive buffer with what every peer's seeded data
says it must hold (it was zeroed before the iteration, so a write that never landed shows).

The rendezvous and the iteration loop (rank 0 releases each iteration with a barrier over
the management network, gathers the reports, stops at the first error) are the all-reduce's
(:func:`lab.workloads.bench.allreduce.rendezvous`, :func:`~lab.workloads.bench.allreduce.coordinate`,
:func:`~lab.workloads.bench.allreduce.follow`). ``sizes`` sweeps message sizes as nccl-tests does:
``warmup`` + ``iters`` iterations per size on the same QPs. ``time`` is the slowest rank's
iteration; ``algbw = S / time``, ``busbw = algbw * (n - 1) / n`` (nccl-tests).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lab.fabric.host import LabHost
from lab.proc import cpu
from lab.workloads.bench import common as bc
from lab.workloads.bench.allreduce import (
    IterationHook,
    LoopPlan,
    ReportHook,
    drive,
    imm_tag,
    rank_data,
    rendezvous,
    result_head,
)
from mrcnic.io.aio import AioNic
from mrcnic.verbs import QP, RemoteBuffer, WcStatus

A2A = 2  # the immediate's phase byte (the all-reduce uses 0 and 1)


@dataclass
class AlltoallParams:
    hosts: list[int]
    sizes: list[int] = field(default_factory=lambda: [4 << 20])
    iters: int = 5
    warmup: int = 1
    transport: str = "mrc"
    seed: int = 1
    timeout_s: float = 120.0


def usable_size(size: int, n: int) -> int:
    """Bytes per rank really exchanged: a multiple of 4 x ranks (uint32 elements, equal
    chunks), as the all-reduce rounds its size."""
    return size - size % (4 * n)


def check_sizes(sizes: list[int], n: int) -> list[int]:
    """The sizes rounded to what ``n`` ranks exchange; ValueError for one that is too small
    or whose chunk does not fit one RDMA Write."""
    if n < 2:
        raise ValueError("an all-to-all needs at least 2 hosts")
    if not sizes:
        raise ValueError("no message size")
    out = []
    for s in sizes:
        u = usable_size(s, n)
        if u <= 0:
            raise ValueError(f"size {s} must be at least {4 * n} bytes for {n} ranks")
        if u // n >= 1 << 32:
            raise ValueError(f"size {s}: a chunk of {u // n} bytes exceeds one RDMA Write")
        out.append(u)
    return out


def peer_order(r: int, n: int) -> list[int]:
    """The peers rank ``r`` writes to, in posting order: ``r+1, r+2, ...`` (mod n), so that
    the ranks do not all write to rank 0 first."""
    return [(r + k) % n for k in range(1, n)]


def rail(i: int, j: int, n: int) -> int:
    """The QP index (RoCEv2: the port, mod planes) of the connection between ranks ``i`` and
    ``j`` of ``n``: the pair's number in the list (0,1), (0,2), ..., (n-2,n-1), the same at
    both ends. While n (n - 1) / 2 <= planes every connection has a rail of its own, so the
    baseline's lossless all-to-all suffers no collision of two QPs on one plane (its best
    case; beyond that they share rails, as a port hash would make them)."""
    a, b = min(i, j), max(i, j)
    if a == b or not 0 <= a < b < n:
        raise ValueError(f"no connection between ranks {i} and {j} of {n}")
    return a * n - a * (a + 1) // 2 + (b - a - 1)


def expected(seed: int, r: int, n: int, sizes: list[int]) -> list[np.ndarray]:
    """What rank ``r``'s receive buffer holds after an iteration of each size: chunk ``j`` is
    rank ``j``'s chunk ``r`` (its own included)."""
    top = max(sizes) // 4
    peers = [rank_data(seed, j, top) for j in range(n)]
    out = []
    for s in sizes:
        e = s // n // 4
        out.append(np.concatenate([peers[j][r * e : (r + 1) * e] for j in range(n)]))
    return out


class _Exchange:
    """One rank's part of one all-to-all of ``size`` bytes, driven by the NIC's pump."""

    def __init__(
        self,
        r: int,
        n: int,
        it: int,
        size: int,
        data: bytearray,
        recv: bytearray,
        qps: list[QP | None],
        remotes: list[RemoteBuffer | None],
    ) -> None:
        self.r, self.n, self.it = r, n, it
        self.c = size // n
        self.data, self.recv = data, recv
        self.qps, self.remotes = qps, remotes
        self.got = [False] * n
        self.arrival: list[float | None] = [None] * n  # seconds after the start, per peer
        self.completed = 0
        self.errors: list[str] = []
        self.t_start = 0.0
        self.t_end = 0.0

    @property
    def done(self) -> bool:
        return bool(self.errors) or (sum(self.got) == self.n - 1 and self.completed == self.n - 1)

    def start(self, now: float) -> None:
        r, c = self.r, self.c
        self.t_start = self.t_end = now
        self.recv[r * c : (r + 1) * c] = self.data[r * c : (r + 1) * c]
        for j in peer_order(r, self.n):
            qp, remote = self.qps[j], self.remotes[j]
            assert qp is not None and remote is not None
            view = memoryview(self.data)[j * c : (j + 1) * c]
            qp.post_write(j, view, remote, offset=r * c, imm=imm_tag(self.it, A2A, r & 0xFF))

    def on_progress(self, now: float) -> None:
        for j, qp in enumerate(self.qps):
            if qp is None:
                continue
            for wc in qp.poll_cq(16):
                if wc.status is not WcStatus.SUCCESS:
                    self.errors.append(f"rank {self.r}: write to rank {j}: {wc.status.value}")
                self.completed += 1
                self.t_end = max(self.t_end, wc.time_s)
            for e in qp.poll_recv(16):
                want = imm_tag(self.it, A2A, j & 0xFF)
                if self.got[j] or e.imm != want:
                    self.errors.append(
                        f"rank {self.r}: immediate {e.imm:#x} from rank {j}, expected {want:#x}"
                        + (" (a second one)" if self.got[j] else "")
                    )
                    continue
                self.got[j] = True
                t = time.monotonic()
                self.arrival[j] = t - self.t_start
                self.t_end = max(self.t_end, t)
            for ev in qp.poll_events():
                if type(ev).__name__ == "QpErrorEvent":
                    self.errors.append(
                        f"rank {self.r}: QP {ev.qpn:#x}: {ev.status.value}: {ev.reason}"
                    )


class _AlltoallRank:
    """This rank's part of every iteration, as the shared loop drives it."""

    def __init__(
        self,
        nic: AioNic,
        rank: int,
        p: AlltoallParams,
        sizes: list[int],
        table: list[dict],
        qps: list[QP | None],
        data: bytearray,
        recv: bytearray,
    ) -> None:
        n = len(table)
        self.nic, self.rank, self.n, self.p, self.sizes = nic, rank, n, p, sizes
        self.qps, self.data, self.recv = qps, data, recv
        self.remotes: list[RemoteBuffer | None] = [None] * n
        for j in range(n):
            qp = qps[j]
            if qp is not None:
                qp.connect(table[j]["qps"][rank])
                self.remotes[j] = RemoteBuffer.from_json(table[j]["recv"])
        self.expect = expected(p.seed, rank, n, sizes)

    def reset(self) -> None:
        # Zeroed before every iteration: a chunk that never arrived cannot pass for one that did.
        np.frombuffer(self.recv, dtype=np.uint8)[:] = 0

    async def iteration(self, it: int, rnd: int) -> dict[str, Any]:
        size = self.sizes[rnd]
        ex = _Exchange(self.rank, self.n, it, size, self.data, self.recv, self.qps, self.remotes)
        self.nic.on_progress = ex.on_progress
        ex.start(time.monotonic())
        ok = await self.nic.wait_for(lambda: ex.done, self.p.timeout_s)
        self.nic.on_progress = None
        if not ok:
            ex.errors.append(
                f"rank {self.rank}: iteration {it} timed out after {self.p.timeout_s:.0f} s"
            )
        got = np.frombuffer(self.recv, dtype=np.uint32)[: size // 4]
        return {
            "iter": it,
            "round": rnd,
            "start": ex.t_start,
            "end": ex.t_end,
            "arrival": ex.arrival,
            "ok": not ex.errors and bool(np.array_equal(got, self.expect[rnd])),
            "errors": ex.errors,
        }

    def final(self) -> dict[str, Any]:
        return {
            "nic": self.nic.stats(),
            "qp": [asdict(qp.stats()) for qp in self.qps if qp is not None],
        }


async def run_rank(
    st: Any,
    rank: int,
    p: AlltoallParams,
    port: int,
    on_iteration: IterationHook | None = None,
    on_report: ReportHook | None = None,
) -> dict[str, Any] | None:
    """Run one rank; rank 0 returns the result, the others None."""
    n = len(p.hosts)
    if len(set(p.hosts)) != n:
        raise ValueError("--hosts lists a host twice")
    sizes = check_sizes(p.sizes, n)
    plan = st.plan
    host = p.hosts[rank]
    lh = LabHost.from_state(st, host)
    async with lh.nic() as nic:
        qps: list[QP | None] = [None] * n
        for j in range(n):
            if j != rank:
                cfg = lh.transport_qp_config(
                    p.transport, rail(rank, j, n), seed=p.seed * 977 + n * rank + j + 1
                )
                qps[j] = lh.device.create_qp(cfg, p.transport)
        top = max(sizes)
        data = bytearray(top)
        np.frombuffer(data, dtype=np.uint32)[:] = rank_data(p.seed, rank, top // 4)
        recv = bytearray(top)
        mr_r = lh.device.register(recv)  # the send buffer is only read here: not registered
        me = {
            "rank": rank,
            "host": host,
            "qps": [qp.export() if qp is not None else None for qp in qps],
            "recv": RemoteBuffer.of(mr_r).to_json(),
            "live_ports": [pt.up for pt in nic.ports],
        }
        coord = plan.mgmt_address(p.hosts[0])
        table, chans = await rendezvous(coord, port, rank, n, me, "alltoall: rank 0")
        try:
            ops = _AlltoallRank(nic, rank, p, sizes, table, qps, data, recv)
            lp = LoopPlan(p.warmup, p.iters, p.timeout_s, rounds=len(sizes))
            done = await drive(ops, lp, rank, chans, st, on_iteration, on_report)
            return None if done is None else result(st, p, sizes, *done, table)
        finally:
            for ch in chans.values():
                ch.close()


# --- the result ----------------------------------------------------------------------------


def busbw_factor(n: int) -> float:
    """nccl-tests' all-to-all bus bandwidth factor: busbw = algbw x (n - 1) / n."""
    return (n - 1) / n


def iteration_time(reports: list[dict[str, Any]]) -> float:
    """An iteration's time: the first rank's start to the last rank's end (every rank reads
    the machine's one monotonic clock)."""
    return max(r["end"] for r in reports) - min(r["start"] for r in reports)


def row(size: int, n: int, iters: int, its: list[list[dict]], capacity_bps: float) -> dict:
    """One line of the nccl-tests table: a size's timed iterations."""
    times = [iteration_time(reps) for reps in its]
    t_avg = statistics.fmean(times) if times else 0.0
    algbw = size * 8 / t_avg if t_avg > 0 else 0.0
    busbw = algbw * busbw_factor(n)
    ok = len(its) == iters and all(rep["ok"] for reps in its for rep in reps)
    return {
        "size": size,
        "elements": size // 4,
        "iterations": len(times),
        "time_s": round(t_avg, 6),
        "iteration_times_s": [round(t, 6) for t in times],
        "algbw_bps": round(algbw, 1),
        "busbw_bps": round(busbw, 1),
        "goodput_fraction": round(busbw / capacity_bps, 4) if capacity_bps else 0.0,
        "verified": ok,
    }


def arrival_matrix(its: list[list[dict]], n: int) -> list[list[float | None]]:
    """``m[dst][src]``: mean seconds from ``dst``'s start until ``src``'s chunk arrived there."""
    m: list[list[float | None]] = [[None] * n for _ in range(n)]
    for dst in range(n):
        for src in range(n):
            v = [
                reps[dst]["arrival"][src]
                for reps in its
                if len(reps) > dst and reps[dst]["arrival"][src] is not None
            ]
            m[dst][src] = round(statistics.fmean(v), 6) if v else None
    return m


def capacity(plan: Any, table: list[dict]) -> float:
    """The smallest pair capacity between any two ranks (each rank's NIC sends at busbw)."""
    caps = [
        bc.pair_capacity_bps(plan, int(a["host"]), int(b["host"]), a["live_ports"], b["live_ports"])
        for a in table
        for b in table
        if a is not b
    ]
    return min(caps) if caps else 0.0


def result(
    st: Any,
    p: AlltoallParams,
    sizes: list[int],
    iterations: list[list[dict]],
    finals: list[dict],
    table: list[dict],
) -> dict[str, Any]:
    n = len(p.hosts)
    plan = st.plan
    cap = capacity(plan, table)
    by_round: list[list[list[dict]]] = [[] for _ in sizes]
    errors: list[str] = []
    for reps in iterations:
        by_round[int(reps[0].get("round", 0))].append(reps)
        for rep in reps:
            errors += rep["errors"]
    rows = [row(s, n, p.iters, by_round[k], cap) for k, s in enumerate(sizes)]
    # a run that stopped early (an error ends it) misses the later sizes' iterations, and
    # the failed iteration itself is timed but not ok: either way it is unverified
    verified = all(r["verified"] for r in rows)
    last = rows[-1]
    cpu_ranks = [f.get("cpu", {}).get("cpu_percent") for f in finals]
    cpu0 = finals[0]["cpu"]
    qps = [q for f in finals for q in f.get("qp", [])]
    busbws = [r["busbw_bps"] for r in rows if r["iterations"]]
    return {
        **result_head("alltoall", st, p),
        "qps_per_rank": n - 1,
        "size": last["size"],
        "sizes": sizes,
        "elements": last["elements"],
        "type": "uint32",
        "redop": "none",
        "iterations": last["iterations"],
        "warmup": p.warmup,
        "time_s": last["time_s"],
        "iteration_times_s": last["iteration_times_s"],
        "algbw_bps": last["algbw_bps"],
        "busbw_bps": last["busbw_bps"],
        "goodput_bps": last["busbw_bps"],
        "avg_busbw_bps": round(statistics.fmean(busbws), 1) if busbws else 0.0,
        "capacity_bps": cap,
        "goodput_fraction": last["goodput_fraction"],
        "rows": rows,
        "arrival_s": arrival_matrix(by_round[-1], n),
        "verified": verified,
        "qp_errors": sum(1 for e in errors if "QP " in e),
        "errors": errors,
        "bytes": sum(r["size"] * r["iterations"] for r in rows),
        "duration_s": round(sum(sum(r["iteration_times_s"]) for r in rows), 6),
        "cpu_percent": round(sum(c or 0 for c in cpu_ranks), 1),
        "cpu_percent_ranks": cpu_ranks,
        "switch_cpu_percent": cpu0.get("switch_cpu_percent"),
        "machine_cpu_percent": cpu0.get("machine_cpu_percent"),
        "cpus": cpu0.get("cpus"),
        "retransmissions": sum(q["retransmissions"] for q in qps),
        "timeouts": sum(q["timeouts"] for q in qps),
        "spurious_timeouts": sum(q.get("spurious_timeouts", 0) for q in qps),
        "tx_data_packets": sum(q["tx_data_packets"] for q in qps),
        **cpu.cpu_verdict(cpu0.get("machine_cpu_percent"), cpu_ranks),
    }
