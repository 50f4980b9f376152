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
iteration; ``algbw = S / time``, ``busbw = algbw * (n - 1) / n`` (nccl-tests). The pairing,
the rails, the expected buffers and the table's rows are :mod:`mrcnic.workloads`' (``mrc-sim
--workload alltoall`` runs the same exchange on a simulated Clos).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.fabric.host import LabHost, lab_frame_time_s
from lab.proc import cpu
from lab.workloads.bench import common as bc
from lab.workloads.bench.allreduce import (
    IterationHook,
    LoopPlan,
    ReportHook,
    drive,
    rendezvous,
    result_head,
)
from mrcnic import workloads as wl
from mrcnic.io.aio import AioNic
from mrcnic.optional import load
from mrcnic.verbs import QP, RemoteBuffer, WcStatus
from mrcnic.workloads import A2A, imm_tag, peer_order, rail, rank_data

np = load("numpy", "mrc-bench alltoall")  # (the 'collectives' extra)

# the definitions live in mrcnic.workloads (the simulator's all-to-all uses them too)
usable_size = wl.alltoall_size
check_sizes = wl.check_alltoall_sizes
expected = wl.alltoall_expected
busbw_factor = wl.alltoall_busbw_factor
iteration_time = wl.iteration_time
row = wl.alltoall_row
arrival_matrix = wl.arrival_matrix


@dataclass
class AlltoallParams:
    hosts: list[int]
    sizes: list[int] = field(default_factory=lambda: [4 << 20])
    iters: int = 5
    warmup: int = 1
    transport: str = "mrc"
    seed: int = 1
    timeout_s: float = 120.0


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
        **cpu.cpu_verdict(
            cpu0.get("machine_cpu_percent"),
            cpu_ranks,
            cpu0.get("cpu_pressure_fraction"),
            cpu0.get("switch_cpu_percent_max"),
            # every rank's process, and the switch processes (rank 0 measures them)
            cpu.wait_per_wake(
                [f.get("cpu", {}).get("cpu_wait_us_per_wake") for f in finals]
                + [cpu0.get("switch_wait_us_per_wake")]
            ),
            lab_frame_time_s(plan.params),
        ),
    }
