"""``mrc-bench allreduce``: a ring all-reduce over write-with-immediate, one process per rank.

With ``n`` ranks and ``S`` bytes (``S / 4`` uint32 elements, summed modulo 2^32), the buffer is
cut into ``n`` chunks of ``c = S / n`` bytes.  Rank ``r`` writes to rank ``r+1`` (its ``next``
QP) and is written by rank ``r-1`` (its ``prev`` QP):

- reduce-scatter, steps ``s = 0 .. n-2``: write data chunk ``(r - s) mod n`` into the next
  rank's receive slot ``s`` with immediate ``(RS, s)``; on the immediate of step ``s`` from the
  previous rank, add slot ``s`` into data chunk ``(r - 1 - s) mod n``, then send the next step.
  Rank ``r`` then holds the fully reduced chunk ``(r + 1) mod n``;
- all-gather, steps ``s = 0 .. n-2``: write data chunk ``(r + 1 - s) mod n`` straight into the
  same place of the next rank's data, immediate ``(AG, s)``; each arrival is forwarded next.

The schedule, the data and the bandwidth formulas are :mod:`mrcnic.workloads`' (``mrc-sim
--workload allreduce`` runs the same ring on a simulated Clos). Immediates arrive in posting
order (MRC's RQMSN), so a rank processes them as a sequence.
Rank 0 coordinates over the management network (:mod:`lab.proc.control`): it gathers every
rank's QP attributes and buffers, releases each iteration with a barrier, collects step times
and checks, and prints the result.  ``time`` is the slowest rank's iteration (all ranks share
the machine's monotonic clock); ``algbw = S / time``, ``busbw = algbw * 2 (n - 1) / n``
(nccl-tests).  Every iteration starts from each rank's seeded data and every rank checks its
result against the sum computed locally.

The rendezvous (:func:`rendezvous`) and the iteration loop (:func:`coordinate` at rank 0,
:func:`follow` at the others, driving a :class:`RankOps`) do not depend on the collective:
``lab.workloads.bench.alltoall`` uses them too.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from lab.fabric.host import LabHost, lab_frame_time_s
from lab.proc import control, cpu
from lab.workloads.bench import common as bc
from mrcnic import workloads as wl
from mrcnic.io.aio import AioNic
from mrcnic.optional import load
from mrcnic.verbs import QP, RemoteBuffer, WcStatus
from mrcnic.workloads import RS, imm_tag, rank_data

np = load("numpy", "mrc-bench allreduce")  # (the 'collectives' extra)


@dataclass
class AllreduceParams:
    hosts: list[int]
    size: int = 4 << 20
    iters: int = 5
    warmup: int = 1
    transport: str = "mrc"
    seed: int = 1
    timeout_s: float = 120.0
    # Timed iterations for this long (after the warm-up) instead of ``iters``: a soak
    # (lab/workloads/soak/) runs for minutes and cannot know how many iterations fit.
    duration_s: float | None = None


#: rank 0 calls this after every iteration (warm-up ones too) with the iteration number and
#: every rank's report (``_report``): a long run can stream its steps as they complete.
IterationHook = Callable[[int, list[dict[str, Any]]], None]
#: every rank calls this with its own report as soon as its part of an iteration ends, before
#: rank 0 has heard of it: a rank whose QP failed can say so while the others still wait.
ReportHook = Callable[[int, dict[str, Any]], None]


class _Iteration:
    """One rank's part of one all-reduce, driven by the NIC's pump."""

    def __init__(
        self,
        r: int,
        n: int,
        it: int,
        data: bytearray,
        recv: bytearray,
        qp_next: QP,
        qp_prev: QP,
        rdata: RemoteBuffer,
        rrecv: RemoteBuffer,
    ) -> None:
        self.r, self.n, self.it = r, n, it
        self.c = len(data) // n
        self.data = data
        self.recv = recv
        self.d32 = np.frombuffer(data, dtype=np.uint32)
        self.r32 = np.frombuffer(recv, dtype=np.uint32)
        self.qp_next, self.qp_prev = qp_next, qp_prev
        self.rdata, self.rrecv = rdata, rrecv
        self.expect = wl.ring_steps(n)
        self.got = 0
        self.sent = 0
        self.completed = 0
        self.step_t: list[float] = []
        self.errors: list[str] = []
        self.t_start = 0.0
        self.t_end = 0.0
        self.wr = 0
        self.pending_send: list[tuple[int, int]] = []

    @property
    def done(self) -> bool:
        return bool(self.errors) or (
            self.got == len(self.expect) and self.completed == self.sent == 2 * (self.n - 1)
        )

    def start(self, now: float) -> None:
        self.t_start = now
        self._send(RS, 0)

    def _send(self, phase: int, s: int) -> None:
        c = self.c
        w = wl.ring_write(phase, s, self.r, self.n)
        remote = self.rrecv if w.to_recv else self.rdata
        view = memoryview(self.data)[w.chunk * c : (w.chunk + 1) * c]
        self.qp_next.post_write(
            self.wr, view, remote, offset=w.slot * c, imm=imm_tag(self.it, phase, s)
        )
        self.wr += 1
        self.sent += 1

    def on_progress(self, now: float) -> None:
        for wc in self.qp_next.poll_cq(256):
            if wc.status is not WcStatus.SUCCESS:
                self.errors.append(f"rank {self.r}: write {wc.wr_id}: {wc.status.value}")
            self.completed += 1
            self.t_end = max(self.t_end, wc.time_s)
        for e in self.qp_prev.poll_recv(256):
            if self.got >= len(self.expect):
                self.errors.append(f"rank {self.r}: unexpected immediate {e.imm:#x}")
                continue
            phase, s = self.expect[self.got]
            if e.imm != imm_tag(self.it, phase, s):
                self.errors.append(
                    f"rank {self.r}: immediate {e.imm:#x}, expected {imm_tag(self.it, phase, s):#x}"
                )
                continue
            self.got += 1
            e32 = self.c // 4
            if phase == RS:
                k = wl.ring_reduce_chunk(s, self.r, self.n)
                dst = self.d32[k * e32 : (k + 1) * e32]
                np.add(dst, self.r32[s * e32 : (s + 1) * e32], out=dst)
            nxt = wl.ring_next(phase, s, self.n)
            t = time.monotonic()
            self.step_t.append(t)
            self.t_end = max(self.t_end, t)
            if nxt is not None:
                self._send(*nxt)
        for qp in (self.qp_next, self.qp_prev):
            for ev in qp.poll_events():
                if type(ev).__name__ == "QpErrorEvent":
                    self.errors.append(
                        f"rank {self.r}: QP {ev.qpn:#x}: {ev.status.value}: {ev.reason}"
                    )


async def run_rank(
    st: Any,
    rank: int,
    p: AllreduceParams,
    port: int,
    on_iteration: IterationHook | None = None,
    on_report: ReportHook | None = None,
) -> dict[str, Any] | None:
    """Run one rank; rank 0 returns the result, the others None.  ``on_iteration`` (rank 0
    only) sees every iteration as it completes, ``on_report`` this rank's own part."""
    n = len(p.hosts)
    if n < 2:
        raise ValueError("an all-reduce needs at least 2 hosts")
    if len(set(p.hosts)) != n:
        raise ValueError("--hosts lists a host twice")
    size = wl.allreduce_size(p.size, n)
    plan = st.plan
    host = p.hosts[rank]
    lh = LabHost.from_state(st, host)
    async with lh.nic() as nic:
        qp_next = lh.device.create_qp(
            lh.transport_qp_config(p.transport, rank, seed=p.seed * 977 + 2 * rank + 1), p.transport
        )
        qp_prev = lh.device.create_qp(
            lh.transport_qp_config(p.transport, rank + 1, seed=p.seed * 977 + 2 * rank + 2),
            p.transport,
        )
        data = bytearray(size)
        recv = bytearray((n - 1) * (size // n))
        mr_d, mr_r = lh.device.register(data), lh.device.register(recv)
        me = {
            "rank": rank,
            "host": host,
            "next": qp_next.export(),
            "prev": qp_prev.export(),
            "data": RemoteBuffer.of(mr_d).to_json(),
            "recv": RemoteBuffer.of(mr_r).to_json(),
            "live_ports": [pt.up for pt in nic.ports],
        }
        coord = plan.mgmt_address(p.hosts[0])
        table, chans = await rendezvous(coord, port, rank, n, me, "allreduce: rank 0")
        try:
            ops = _AllreduceRank(nic, rank, n, p, size, table, qp_next, qp_prev, data, recv)
            lp = LoopPlan(p.warmup, p.iters, p.timeout_s, p.duration_s)
            done = await drive(ops, lp, rank, chans, st, on_iteration, on_report)
            return None if done is None else _result(st, p, size, *done, table)
        finally:
            for ch in chans.values():
                ch.close()


def _connect(
    rank: int, n: int, table: list[dict], qp_next: QP, qp_prev: QP
) -> tuple[RemoteBuffer, RemoteBuffer]:
    nxt, prv = table[(rank + 1) % n], table[(rank - 1) % n]
    qp_next.connect(nxt["prev"])
    qp_prev.connect(prv["next"])
    return RemoteBuffer.from_json(nxt["data"]), RemoteBuffer.from_json(nxt["recv"])


async def _one_iteration(
    nic: AioNic,
    rank: int,
    n: int,
    it: int,
    data: bytearray,
    recv: bytearray,
    qp_next: QP,
    qp_prev: QP,
    rdata: RemoteBuffer,
    rrecv: RemoteBuffer,
    timeout_s: float,
) -> _Iteration:
    itr = _Iteration(rank, n, it, data, recv, qp_next, qp_prev, rdata, rrecv)
    nic.on_progress = itr.on_progress
    itr.start(time.monotonic())
    ok = await nic.wait_for(lambda: itr.done, timeout_s)
    nic.on_progress = None
    if not ok:
        itr.errors.append(f"rank {rank}: iteration {it} timed out after {timeout_s:.0f} s")
    return itr


def _report(itr: _Iteration, expect: np.ndarray, it: int) -> dict[str, Any]:
    ok = not itr.errors and bool(np.array_equal(itr.d32, expect))
    return {
        "iter": it,
        "start": itr.t_start,
        "end": itr.t_end,
        "steps": itr.step_t,
        "ok": ok,
        "errors": itr.errors,
    }


class _AllreduceRank:
    """This rank's part of the all-reduce, as the shared loop (:func:`coordinate`,
    :func:`follow`) drives it."""

    def __init__(
        self,
        nic: AioNic,
        rank: int,
        n: int,
        p: AllreduceParams,
        size: int,
        table: list[dict],
        qp_next: QP,
        qp_prev: QP,
        data: bytearray,
        recv: bytearray,
    ) -> None:
        self.nic, self.rank, self.n, self.timeout_s = nic, rank, n, p.timeout_s
        self.qp_next, self.qp_prev, self.data, self.recv = qp_next, qp_prev, data, recv
        self.rdata, self.rrecv = _connect(rank, n, table, qp_next, qp_prev)
        self.mine = rank_data(p.seed, rank, size // 4)
        self.expect = wl.allreduce_expected(p.seed, n, size // 4)

    def reset(self) -> None:
        np.frombuffer(self.data, dtype=np.uint32)[:] = self.mine

    async def iteration(self, it: int, rnd: int) -> dict[str, Any]:
        itr = await _one_iteration(
            self.nic, self.rank, self.n, it, self.data, self.recv, self.qp_next, self.qp_prev,
            self.rdata, self.rrecv, self.timeout_s,
        )  # fmt: skip
        return _report(itr, self.expect, it)

    def final(self) -> dict[str, Any]:
        return {
            "nic": self.nic.stats(),
            "qp": [asdict(self.qp_next.stats()), asdict(self.qp_prev.stats())],
        }


# --- the loop every collective shares (lab.workloads.bench.alltoall uses it too) -----------------------


class RankOps(Protocol):
    """One rank's part of a collective: what :func:`coordinate` and :func:`follow` drive."""

    def reset(self) -> None:
        """Restore this rank's input before an iteration (before it says "ready")."""

    async def iteration(self, it: int, rnd: int) -> dict[str, Any]:
        """Run iteration ``it`` (of round ``rnd``: a size of a sweep) and return its report:
        at least ``iter``, ``start``, ``end``, ``ok`` and ``errors``."""
        ...

    def final(self) -> dict[str, Any]:
        """``nic`` and ``qp`` statistics at the end."""
        ...


@dataclass(frozen=True)
class LoopPlan:
    """Which iterations run: ``rounds`` rounds (one per message size of a sweep) of
    ``warmup`` untimed and ``iters`` timed iterations, or, with ``duration_s``, one round of
    ``warmup`` untimed iterations and then timed ones until the time is up."""

    warmup: int
    iters: int
    timeout_s: float
    duration_s: float | None = None
    rounds: int = 1

    @property
    def per_round(self) -> int:
        return self.warmup + self.iters

    def round_of(self, it: int) -> int:
        if self.duration_s is not None or self.per_round == 0:
            return 0
        return min(it // self.per_round, self.rounds - 1)

    def timed(self, it: int) -> bool:
        if self.duration_s is not None:
            return it >= self.warmup
        return it % self.per_round >= self.warmup

    def finished(self, it: int, deadline: float | None) -> bool:
        """Whether iteration ``it`` should not start: the count is done, or the duration is up."""
        if self.duration_s is None:
            return it >= self.rounds * self.per_round
        return deadline is not None and time.monotonic() >= deadline


async def rendezvous(
    coord: str, port: int, rank: int, n: int, me: dict[str, Any], who: str
) -> tuple[list[dict], dict[int, control.Channel]]:
    """Rank 0 listens on ``[coord]:port``, gathers every rank's ``me`` (its QPs and buffers)
    and sends the table back; the others join.  Returns the table (index = rank) and the
    channels: rank 0 has one per other rank, the others ``{0: channel}``."""
    if rank == 0:
        listener = await bc.listen_announced(coord, port, who)
        try:
            chans: list[control.Channel] = []
            for _ in range(n - 1):
                chans.append(await listener.accept(60))
        finally:
            listener.close()
        joins = {0: me}
        by_rank: dict[int, control.Channel] = {}
        try:
            for ch in chans:
                j = await ch.recv("join", timeout_s=30)
                joins[int(j["rank"])] = j
                by_rank[int(j["rank"])] = ch
            if sorted(joins) != list(range(n)):
                for ch in chans:
                    await ch.fail("ranks missing or duplicated")
                raise control.ControlError(f"ranks {sorted(joins)} joined, expected 0..{n - 1}")
            table = [joins[i] for i in range(n)]
            for ch in chans:
                await ch.send("table", ranks=table)
        except BaseException:
            for ch in chans:
                ch.close()
            raise
        return table, by_rank
    ch = await control.connect(coord, port, timeout_s=30)
    try:
        await ch.send("join", **me)
        table = (await ch.recv("table", timeout_s=60))["ranks"]
    except BaseException:
        ch.close()
        raise
    return table, {0: ch}


async def follow(
    ops: RankOps,
    lp: LoopPlan,
    ch: control.Channel,
    meter: cpu.SelfCpuMeter,
    on_report: ReportHook | None = None,
) -> None:
    """A rank other than 0: iterations as rank 0 releases them, then the final statistics."""
    timed = False
    while True:
        # Rank 0 decides how many iterations run (a count, a duration, or an error): every
        # round starts with "ready" and rank 0 answers "go" or "go" with stop.
        ops.reset()
        await ch.send("ready")
        go = await ch.recv("go", timeout_s=lp.timeout_s + 60)
        if go.get("stop"):
            break
        it = int(go["iter"])
        if it == lp.warmup:
            meter.start()
            timed = True
        report = await ops.iteration(it, lp.round_of(it))
        if on_report is not None:
            on_report(it, report)
        await ch.send("iter_done", **report)
    cpu = meter.stop().to_json() if timed else {}
    await ch.send("final", cpu=cpu, **ops.final())
    await ch.recv("bye", timeout_s=30)


async def coordinate(
    ops: RankOps,
    lp: LoopPlan,
    chans: dict[int, control.Channel],
    meter: cpu.SelfCpuMeter,
    on_iteration: IterationHook | None = None,
    on_report: ReportHook | None = None,
) -> tuple[list[list[dict]], list[dict]]:
    """Rank 0: release every iteration once all ranks are ready, gather the reports, stop at
    the plan's end or at the first error.  Returns the timed iterations' reports (one list
    per iteration, rank 0 first) and every rank's final statistics (``cpu``, ``nic``, ``qp``)."""
    n = len(chans) + 1
    iterations: list[list[dict]] = []
    deadline: float | None = None
    it = 0
    failed = False
    while True:
        ops.reset()
        for r in range(1, n):
            await chans[r].recv("ready", timeout_s=lp.timeout_s + 60)
        if failed or lp.finished(it, deadline):
            for r in range(1, n):
                await chans[r].send("go", stop=True)
            break
        if it == lp.warmup:
            meter.start()
            if lp.duration_s is not None:
                deadline = time.monotonic() + lp.duration_s
        for r in range(1, n):
            await chans[r].send("go", iter=it)
        reports = [await ops.iteration(it, lp.round_of(it))]
        if on_report is not None:
            on_report(it, reports[0])
        for r in range(1, n):
            reports.append(await chans[r].recv("iter_done", timeout_s=lp.timeout_s + 30))
        if lp.timed(it):
            iterations.append(reports)
        if on_iteration is not None:
            on_iteration(it, reports)
        # an error ends the run (a QP in ERROR cannot carry the next one): the result says which
        failed = any(rep["errors"] for rep in reports)
        it += 1
    cpu = meter.stop().to_json() if iterations else {"cpu_percent": 0.0}
    finals = [{"cpu": cpu, **ops.final()}]
    for r in range(1, n):
        with_f = await chans[r].recv("final", timeout_s=lp.timeout_s)
        finals.append(with_f)
        await chans[r].send("bye")
    return iterations, finals


async def drive(
    ops: RankOps,
    lp: LoopPlan,
    rank: int,
    chans: dict[int, control.Channel],
    lab_state: Any,
    on_iteration: IterationHook | None = None,
    on_report: ReportHook | None = None,
) -> tuple[list[list[dict]], list[dict]] | None:
    """A rank's part of the loop: rank 0 :func:`coordinate` s (its CPU meter counts the lab's
    switches too) and returns (iterations, finals); the others :func:`follow` (None)."""
    if rank == 0:
        meter = cpu.SelfCpuMeter(cpu.switch_pids(lab_state))
        return await coordinate(ops, lp, chans, meter, on_iteration, on_report)
    await follow(ops, lp, chans[0], cpu.SelfCpuMeter(), on_report)
    return None


def result_head(test: str, st: Any, p: Any) -> dict[str, Any]:
    """The keys a collective's result opens with: the test, the lab, the ranks."""
    plan = st.plan
    return {
        "test": test,
        "lab": st.name,
        "switch_mode": st.params.switch,
        "realtime": st.params.realtime,
        "planes": plan.params.planes,
        "port_rate_bps": plan.params.rate_mbit * 1e6,
        "hosts": [plan.host_name(h) for h in p.hosts],
        "ranks": len(p.hosts),
        "transport": p.transport,
    }


def _result(
    st: Any,
    p: AllreduceParams,
    size: int,
    iterations: list[list[dict]],
    finals: list[dict],
    table: list[dict],
) -> dict[str, Any]:
    n = len(p.hosts)
    plan = st.plan
    times = []
    steps: list[list[float]] = []
    wanted = p.iters if p.duration_s is None else len(iterations)
    verified = bool(iterations) and len(iterations) == wanted
    errors: list[str] = []
    for reps in iterations:
        start = min(r["start"] for r in reps)
        end = max(r["end"] for r in reps)
        times.append(end - start)
        for rep in reps:
            verified = verified and rep["ok"]
            errors += rep["errors"]
        steps.append(wl.slowest_steps(reps, n))
    caps = []
    for r in range(n):
        a, b = table[r], table[(r + 1) % n]
        caps.append(
            bc.pair_capacity_bps(
                plan, int(a["host"]), int(b["host"]), a["live_ports"], b["live_ports"]
            )
        )
    capacity = min(caps) if caps else 0.0
    t_avg = statistics.fmean(times) if times else 0.0
    algbw = size * 8 / t_avg if t_avg > 0 else 0.0
    busbw = wl.allreduce_busbw_bps(algbw, n)
    cpu_ranks = [f.get("cpu", {}).get("cpu_percent") for f in finals]
    cpu0 = finals[0]["cpu"]
    qp_errors = sum(1 for e in errors if "QP " in e)
    step_means = (
        [round(statistics.fmean(col), 6) for col in zip(*steps, strict=False)] if steps else []
    )
    return {
        **result_head("allreduce", st, p),
        "size": size,
        "elements": size // 4,
        "type": "uint32",
        "redop": "sum",
        "iterations": len(times),
        "warmup": p.warmup,
        "time_s": round(t_avg, 6),
        "iteration_times_s": [round(t, 6) for t in times],
        "algbw_bps": round(algbw, 1),
        "busbw_bps": round(busbw, 1),
        "goodput_bps": round(busbw, 1),
        "capacity_bps": capacity,
        "goodput_fraction": round(busbw / capacity, 4) if capacity else 0.0,
        "step_names": wl.ring_step_names(n),
        "step_times_s": step_means,
        "verified": verified,
        "qp_errors": qp_errors,
        "errors": errors,
        "bytes": size * len(times),
        "duration_s": round(sum(times), 6),
        "cpu_percent": round(sum(c or 0 for c in cpu_ranks), 1),
        "cpu_percent_ranks": cpu_ranks,
        "switch_cpu_percent": cpu0.get("switch_cpu_percent"),
        "machine_cpu_percent": cpu0.get("machine_cpu_percent"),
        "cpus": cpu0.get("cpus"),
        "retransmissions": sum(q["retransmissions"] for f in finals for q in f.get("qp", [])),
        "timeouts": sum(q["timeouts"] for f in finals for q in f.get("qp", [])),
        # timed out, but the original had arrived: a process not scheduled in time (a busy
        # machine), not a loss
        "spurious_timeouts": sum(
            q.get("spurious_timeouts", 0) for f in finals for q in f.get("qp", [])
        ),
        # data packets sent once each (retransmissions not counted; warm-up included, as
        # above): retransmissions / tx_data_packets is the retransmission rate
        "tx_data_packets": sum(q["tx_data_packets"] for f in finals for q in f.get("qp", [])),
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
