"""``mrc-bench write`` and ``mrc-bench lat``: one client and one server process, each in its
host's namespace, each with its own NIC (:class:`mrcnic.io.aio.AioNic`) on its host's ports.

Control protocol (JSON lines over TCP on the management network, :mod:`lab.proc.control`):

1. client -> ``hello``: test, transport, QP count, message size, region size, seed, the
   client's QP attributes and live ports;
2. server -> ``ready``: its QP attributes, the region (va, rkey, length), its live ports;
3. the client writes; then -> ``done``: how many messages completed;
4. server -> ``result``: the byte-for-byte check of its region against the seeded pattern
   (:mod:`lab.workloads.bench.common`), its CPU use and QP errors; client -> ``bye``.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from lab.fabric import faultlog
from lab.fabric.host import LabHost, lab_frame_time_s
from lab.proc import control
from lab.proc.cpu import SelfCpu, SelfCpuMeter, cpu_verdict, switch_pids, wait_per_wake
from lab.workloads.bench import common as bc
from mrcnic.io.aio import AioNic
from mrcnic.transport.ev import EvStateChanged
from mrcnic.transport.qp_types import PeerPortStatus, QpErrorEvent
from mrcnic.verbs import QP, RemoteBuffer, WcStatus

DEFAULT_REGION_CAP = 32 << 20
LAT_WARMUP = 10


@dataclass
class WriteParams:
    """What the client asks for (the server learns it from ``hello``)."""

    test: str = "write"  # write | lat
    size: int = 65536
    iters: int | None = None
    duration_s: float | None = None
    qps: int = 1
    depth: int = 16
    transport: str = "mrc"
    timeline_ms: float | None = None
    region_cap: int = DEFAULT_REGION_CAP
    seed: int | None = None
    progress_s: float = 1.0
    timeout_s: float | None = None
    warmup: int = 0
    # record up to this many EV state changes with their times (the ``ev_log`` key; 0: off)
    ev_log: int = 0


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _qp_errors(qps: list[QP], sink: list[str]) -> None:
    for qp in qps:
        for e in qp.poll_events():
            if isinstance(e, QpErrorEvent):
                sink.append(f"QP {e.qpn:#x}: {e.status.value}: {e.reason}")


# --- server ---------------------------------------------------------------------------------------


async def serve(
    st: Any, host: int, port: int, bind: str | None, accept_timeout_s: float = 120.0
) -> int:
    """Serve one client, then return (exit status)."""
    lh = LabHost.from_state(st, host)
    addr = bind if bind is not None else st.plan.mgmt_address(host)
    listener = await bc.listen_announced(addr, port, f"server: h{host}")
    try:
        ch = await listener.accept(accept_timeout_s)
    finally:
        listener.close()
    try:
        async with lh.nic() as nic:
            return await _serve_client(st, lh, nic, ch)
    except control.ControlError as e:
        _err(f"mrc-bench server: {e}")
        return 1
    finally:
        ch.close()


async def _serve_client(st: Any, lh: LabHost, nic: AioNic, ch: control.Channel) -> int:
    hello = await ch.recv("hello", timeout_s=30)
    if hello.get("version") != control.PROTOCOL_VERSION:
        await ch.fail(f"protocol version {hello.get('version')} != {control.PROTOCOL_VERSION}")
        return 1
    try:
        size = int(hello["size"])
        nchunks = int(hello["nchunks"])
        seed = int(hello["seed"])
        transport = str(hello["transport"])
        peer_attrs = list(hello["qps"])
        client_host = int(hello["client_host"])
        qps = [
            lh.device.create_qp(
                lh.transport_qp_config(transport, i, seed=seed * 131 + i + 1), transport
            )
            for i in range(len(peer_attrs))
        ]
        for qp, attrs in zip(qps, peer_attrs, strict=True):
            qp.connect(attrs)
    except (KeyError, TypeError, ValueError) as e:
        await ch.fail(f"bad hello: {e}")
        return 1
    region = bytearray(size * nchunks)
    mr = lh.device.register(region)
    errors: list[str] = []

    def on_progress(_now: float) -> None:
        _qp_errors(qps, errors)

    nic.on_progress = on_progress
    meter = SelfCpuMeter()
    meter.start()
    await ch.send(
        "ready",
        server_host=lh.host,
        qps=[qp.export() for qp in qps],
        buffer=RemoteBuffer.of(mr).to_json(),
        live_ports=[p.up for p in nic.ports],
    )
    done = await ch.recv("done", timeout_s=None)
    cpu = meter.stop().to_json()  # to the client, over the control channel
    _qp_errors(qps, errors)
    messages = int(done["messages"])
    src = bc.source_pattern(seed, size * nchunks)
    want = bc.expected_region(src, size, nchunks, messages)
    ok = region == want
    result: dict[str, Any] = {
        "verified": ok,
        "digest": bc.digest(region),
        "expected_digest": bc.digest(want),
        "region_bytes": len(region),
        "placed_bytes": sum(qp.stats().rx_placed_bytes for qp in qps),
        "cpu": cpu,
        "qp_errors": errors,
        "nic": nic.stats(),
        "client_host": client_host,
    }
    if not ok:
        result["first_mismatch"] = bc.first_difference(region, want)
    await ch.send("result", **result)
    with contextlib.suppress(control.ControlError):
        await ch.recv("bye", timeout_s=10)
    return 0


# --- client ---------------------------------------------------------------------------------------


LOSS_LOG_MAX = 1024  # rows of a write's loss_log (retransmission / NACK count changes)


class _Run:
    """The client's bookkeeping while writes are in flight (driven by the NIC's pump)."""

    def __init__(
        self,
        qps: list[QP],
        remote: RemoteBuffer,
        src: bytes,
        p: WriteParams,
        nchunks: int,
        depth: int,
    ) -> None:
        self.qps = qps
        self.remote = remote
        self.src = memoryview(src)
        self.p = p
        self.nchunks = nchunks
        self.depth = depth
        self.next_m = 0
        self.outstanding: dict[int, float] = {}  # wr_id -> post time
        self.completed = 0
        self.completed_ok = 0
        self.bytes_ok = 0
        self.events: list[tuple[float, int]] = []  # (completion time, bytes)
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.errors: list[str] = []
        self.stopping = False
        self.t_start = 0.0
        self.t_end = 0.0
        self.last_completion = 0.0
        self.warmup_left = p.warmup
        self.retired_warmup = 0
        self.ev_transitions = 0
        self.ev_log: list[list[Any]] = []  # --ev-log: one row per EV state change
        self.ev_log_dropped = 0
        # capacity over time: [(t, bps)], updated on local port changes and peer port status
        self.capacity_fn: Any = None
        self.nic: AioNic | None = None
        self.local_up: list[bool] = []
        self.peer_up: list[bool] = []
        self.capacity_changes: list[tuple[float, float]] = []
        # when the client's QPs' retransmission and NACK (RoCEv2: NAK) counters grew: the
        # time from a congestion onset to the first loss repair after it (issue 15);
        # [pump time, retransmissions, NACKs] at each change, the first LOSS_LOG_MAX
        self.loss_log: list[tuple[float, int, int]] = []
        self.loss_log_truncated = False
        self._loss_counts = (0, 0)

    @property
    def finished(self) -> bool:
        return self.stopping and not self.outstanding

    def _note_losses(self, now: float) -> None:
        """Log the pump at which the QPs' retransmission or NACK counts changed (counters
        only: the C engine folds its counts in after every batch, so a retransmission shows
        at the next pump, a NACK at the pump that received it)."""
        retx = nack = 0
        for qp in self.qps:
            st = getattr(qp.core, "stats", None)
            if st is not None:
                retx += st.retransmissions
                nack += st.rx_nacks
        if (retx, nack) == self._loss_counts:
            return
        self._loss_counts = (retx, nack)
        if len(self.loss_log) < LOSS_LOG_MAX:
            self.loss_log.append((now, retx, nack))
        else:
            self.loss_log_truncated = True

    def on_progress(self, now: float) -> None:
        if not self.loss_log_truncated:
            self._note_losses(now)
        for qp in self.qps:
            while True:
                wcs = qp.poll_cq(256)
                if not wcs:
                    break
                for wc in wcs:
                    self._complete(wc.wr_id, wc.status, wc.byte_len, wc.time_s)
        self._events(now)
        if self.errors or self.failures:
            self.stopping = True
        self._post(now)

    def _events(self, now: float) -> None:
        peer = None
        for qp in self.qps:
            for e in qp.poll_events():
                if isinstance(e, QpErrorEvent):
                    self.errors.append(f"QP {e.qpn:#x}: {e.status.value}: {e.reason}")
                elif isinstance(e, PeerPortStatus):
                    peer = [bool(e.port_mask >> i & 1) for i in range(len(self.peer_up))]
                else:
                    self.ev_transitions += 1
                    if isinstance(e, EvStateChanged) and self.p.ev_log:
                        self._log_ev(qp, e)
        if self.capacity_fn is None or self.nic is None:
            return
        local = [pt.up for pt in self.nic.ports]
        if local != self.local_up or (peer is not None and peer != self.peer_up):
            self.local_up = local
            if peer is not None:
                self.peer_up = peer
            cap = self.capacity_fn(self.local_up, self.peer_up)
            if not self.capacity_changes or cap != self.capacity_changes[-1][1]:
                self.capacity_changes.append((now, cap))

    def _log_ev(self, qp: QP, e: EvStateChanged) -> None:
        """One row of ``ev_log``: [t_s (from the run's start), QP index, EV, plane, T1, old,
        new, cause, EVs active on the plane, backups among them]. The active set is read
        when the event is polled (within one batch of the change)."""
        if len(self.ev_log) >= self.p.ev_log:
            self.ev_log_dropped += 1
            return
        evs = getattr(qp.core, "evs", None)
        active = backups = None
        if evs is not None:
            pool = evs.pool[e.plane]
            rank = {slot: k for k, slot in enumerate(pool)}
            mine = [s for s in evs.active if evs.plane_of[s] == e.plane]
            active = len(mine)
            backups = sum(1 for s in mine if rank.get(s, 0) >= evs.active_per_plane)
        t1 = (e.ev // evs.planes) % evs.t1_count if evs is not None else None
        self.ev_log.append([
            round(e.time_s - self.t_start, 6), self.qps.index(qp), e.ev, e.plane, t1,
            e.old.value, e.new.value, e.cause.value, active, backups,
        ])  # fmt: skip

    def _complete(self, m: int, status: WcStatus, nbytes: int, t: float) -> None:
        posted = self.outstanding.pop(m, None)
        if posted is None:
            return
        if status is not WcStatus.SUCCESS:
            if status is not WcStatus.FLUSHED or not self.failures:
                self.failures.append(f"write {m}: {status.value}")
            return
        self.completed += 1
        self.completed_ok += 1
        if self.warmup_left > 0:
            self.warmup_left -= 1
            self.retired_warmup += 1
            if self.warmup_left == 0:
                self.t_start = t
            return
        self.bytes_ok += nbytes
        self.events.append((t, nbytes))
        self.last_completion = t
        if self.p.test == "lat":
            self.latencies.append(t - posted)

    def _post(self, now: float) -> None:
        p = self.p
        if not self.stopping:
            all_posted = p.iters is not None and self.next_m >= p.iters + p.warmup
            timed_out = (
                p.duration_s is not None
                and self.warmup_left == 0
                and now - self.t_start >= p.duration_s
            )
            self.stopping = all_posted or timed_out
        if self.stopping:
            return
        size, nchunks, qps, outstanding = p.size, self.nchunks, self.qps, self.outstanding
        while len(outstanding) < self.depth:
            m = self.next_m
            if p.iters is not None and m >= p.iters + p.warmup:
                break
            if m >= nchunks and (m - nchunks) in outstanding:
                break  # the previous write into this chunk is not complete yet
            so, ro = bc.message_slice(m, size, nchunks)
            qp = qps[m % len(qps)]
            outstanding[m] = time.monotonic()
            self.next_m = m + 1
            qp.post_write(m, self.src[so : so + size], self.remote, offset=ro)


async def run_client(st: Any, host: int, server: int, port: int, p: WriteParams) -> dict[str, Any]:
    """Run the client side against a server on lab host ``server``; returns the result."""
    plan = st.plan
    seed = p.seed if p.seed is not None else int.from_bytes(os.urandom(4), "big")
    nchunks, depth = bc.plan_region(
        p.size, None if p.iters is None else p.iters + p.warmup, p.depth, p.region_cap
    )
    lh = LabHost.from_state(st, host)
    ch = await control.connect(plan.mgmt_address(server), port)
    try:
        async with lh.nic() as nic:
            return await _client(st, lh, nic, ch, server, p, seed, nchunks, depth)
    finally:
        ch.close()


async def _client(
    st: Any,
    lh: LabHost,
    nic: AioNic,
    ch: control.Channel,
    server: int,
    p: WriteParams,
    seed: int,
    nchunks: int,
    depth: int,
) -> dict[str, Any]:
    plan = st.plan
    qps = [
        lh.device.create_qp(
            lh.transport_qp_config(p.transport, i, seed=seed * 131 + 1000 + i), p.transport
        )
        for i in range(p.qps)
    ]
    await ch.send(
        "hello",
        version=control.PROTOCOL_VERSION,
        test=p.test,
        transport=p.transport,
        size=p.size,
        nchunks=nchunks,
        seed=seed,
        client_host=lh.host,
        qps=[qp.export() for qp in qps],
    )
    ready = await ch.recv("ready", timeout_s=30)
    for qp, attrs in zip(qps, ready["qps"], strict=True):
        qp.connect(attrs)
    remote = RemoteBuffer.from_json(ready["buffer"])
    src = bc.source_pattern(seed, p.size * nchunks)
    capacity = bc.pair_capacity_bps(
        plan, lh.host, server, [pt.up for pt in nic.ports], list(ready["live_ports"])
    )
    run = _Run(qps, remote, src, p, nchunks, depth)
    run.nic = nic
    run.local_up = [pt.up for pt in nic.ports]
    run.peer_up = [bool(x) for x in ready["live_ports"]]
    run.capacity_fn = lambda mine, peer: bc.pair_capacity_bps(plan, lh.host, server, mine, peer)
    meter = SelfCpuMeter(switch_pids(st))
    timeout = p.timeout_s
    if timeout is None:
        expect = (p.duration_s or 0.0) + (
            (p.iters or 0) * p.size * 8 / max(capacity, 1e6) * 4
            if p.test == "write"
            else (p.iters or 0) * 0.05
        )
        timeout = 30.0 + expect
    progress = _Progress(run, p, capacity)
    meter.start()
    t0 = time.monotonic()
    t0_unix = time.time()
    run.t_start = t0
    run.capacity_changes.append((t0, capacity))

    def on_progress(now: float) -> None:
        run.on_progress(now)
        progress.tick(now)

    nic.on_progress = on_progress
    nic.kick()
    ok = await nic.wait_for(lambda: run.finished, timeout)
    t_end = time.monotonic()
    run.t_end = run.last_completion if run.events else t_end
    cpu = meter.stop()
    nic.on_progress = None
    if not ok:
        run.failures.append(
            f"timed out after {timeout:.0f} s with {len(run.outstanding)} writes outstanding"
        )
    await ch.send("done", messages=run.completed_ok)
    res = await ch.recv("result", timeout_s=120)
    await ch.send("bye")
    out = _result(st, lh, nic, run, p, server, capacity, cpu, res, nchunks, depth, seed, qps)
    out["start_monotonic_s"] = run.t_start
    out["start_unix_s"] = t0_unix + (run.t_start - t0)
    # every fault the lab applied during the run, by whoever (lab/fabric/faultlog.py)
    out["lab_faults"] = faultlog.windows(
        st.run_dir, out["start_unix_s"], t0_unix + (max(run.t_end, run.t_start) - t0)
    )
    out["capacity_timeline"] = [
        [round(max(t - run.t_start, 0.0), 6), c] for t, c in run.capacity_changes
    ]
    out["ev_transitions"] = run.ev_transitions
    out.update(loss_log_json(run.loss_log, run.t_start, run.loss_log_truncated))
    if p.ev_log:
        out["ev_log"] = ev_log_json(run, qps)
    return out


def loss_log_json(
    log: list[tuple[float, int, int]], t_start: float, truncated: bool
) -> dict[str, Any]:
    """``first_retransmission_s``, ``first_nack_s`` (from the write's start; None: never)
    and ``loss_log`` (when the client's retransmission and NACK counts grew)."""

    def first(i: int) -> float | None:
        t = next((row[0] for row in log if row[i]), None)
        return None if t is None else round(max(t - t_start, 0.0), 6)

    return {
        "first_retransmission_s": first(1),
        "first_nack_s": first(2),
        "loss_log": {
            "columns": ["t_s", "retransmissions", "nacks"],
            "rows": [[round(max(t - t_start, 0.0), 6), r, n] for t, r, n in log],
            "truncated": truncated,
        },
    }


def ev_log_json(run: _Run, qps: list[QP]) -> dict[str, Any]:
    """``--ev-log``: the EV state changes (``columns`` name the row's fields) and every EV of
    each MRC QP at the end: [QP index, EV, plane, T1, backup (beyond the plane's first
    active_per_plane), state, packets sent on it, timeouts]."""
    pool: list[list[Any]] = []
    for i, qp in enumerate(qps):
        evs = getattr(qp.core, "evs", None)
        if evs is None:
            continue
        for k, st in enumerate(qp.ev_stats()):
            rank = evs.pool[st.plane].index(k) if k in evs.pool[st.plane] else 0
            pool.append([i, st.ev, st.plane, (st.ev // evs.planes) % evs.t1_count,
                         rank >= evs.active_per_plane, st.state.value, st.tx_packets,
                         st.timeouts])  # fmt: skip
    return {
        "columns": [
            "t_s",
            "qp",
            "ev",
            "plane",
            "t1",
            "old",
            "new",
            "cause",
            "active_on_plane",
            "backups_active_on_plane",
        ],  # fmt: skip
        "events": run.ev_log,
        "dropped": run.ev_log_dropped,
        "pool_columns": ["qp", "ev", "plane", "t1", "backup", "state", "tx_packets", "timeouts"],
        "pool": pool,
    }


class _Progress:
    """A line on stderr every ``progress_s`` once a run has lasted 2 s (long runs only)."""

    def __init__(self, run: _Run, p: WriteParams, capacity: float) -> None:
        self.run = run
        self.p = p
        self.capacity = capacity
        self.t0 = time.monotonic()
        self.next = self.t0 + max(2.0, p.progress_s)
        self.last_bytes = 0
        self.last_t = self.t0

    def tick(self, now: float) -> None:
        if self.p.progress_s <= 0 or now < self.next:
            return
        run = self.run
        dt = now - self.last_t
        rate = (run.bytes_ok - self.last_bytes) * 8 / dt if dt > 0 else 0.0
        frac = rate / self.capacity if self.capacity else 0.0
        retx = sum(qp.stats().retransmissions for qp in run.qps)
        _err(
            f"mrc-bench: {now - self.t0:6.1f} s  {run.completed_ok} writes  "
            f"{rate / 1e6:8.1f} Mb/s ({frac:.2f} of capacity)  retransmissions {retx}"
        )
        self.last_bytes = run.bytes_ok
        self.last_t = now
        self.next = now + self.p.progress_s


def _result(
    st: Any,
    lh: LabHost,
    nic: AioNic,
    run: _Run,
    p: WriteParams,
    server: int,
    capacity: float,
    cpu: SelfCpu,
    res: dict,
    nchunks: int,
    depth: int,
    seed: int,
    qps: list[QP],
) -> dict[str, Any]:
    plan = st.plan
    duration = max(run.t_end - run.t_start, 1e-9) if run.events else 0.0
    goodput = run.bytes_ok * 8 / duration if duration > 0 else 0.0
    failures = run.failures
    qp_errors = run.errors + list(res.get("qp_errors", []))
    verified = bool(res.get("verified")) and not failures and not qp_errors
    scpu = res.get("cpu", {})
    stats = [asdict(qp.stats()) for qp in qps]
    out: dict[str, Any] = {
        "test": p.test,
        "lab": st.name,
        "switch_mode": st.params.switch,
        "realtime": st.params.realtime,
        "planes": plan.params.planes,
        "port_rate_bps": plan.params.rate_mbit * 1e6,
        "src": plan.host_name(lh.host),
        "dst": plan.host_name(server),
        "same_t0": plan.shape.host_t0(lh.host) == plan.shape.host_t0(server),
        "transport": p.transport,
        "qps": p.qps,
        "size": p.size,
        "depth": depth,
        "iterations": len(run.events),
        "bytes": run.bytes_ok,
        "duration_s": round(duration, 6),
        "goodput_bps": round(goodput, 1),
        "capacity_bps": capacity,
        "goodput_fraction": round(goodput / capacity, 4) if capacity else 0.0,
        "msg_rate_pps": round(len(run.events) / duration, 3) if duration else 0.0,
        "verified": verified,
        "verify": {
            "method": "server compared its whole region with the seeded pattern",
            "region_bytes": res.get("region_bytes"),
            "digest": res.get("digest"),
            "expected_digest": res.get("expected_digest"),
            "server_placed_bytes": res.get("placed_bytes"),
            "first_mismatch": res.get("first_mismatch"),
        },
        "qp_errors": len(qp_errors),
        "errors": qp_errors + failures,
        "cpu_percent": round((cpu.cpu_percent or 0) + (scpu.get("cpu_percent") or 0), 1),
        "cpu_percent_client": cpu.cpu_percent,
        "cpu_percent_server": scpu.get("cpu_percent"),
        "switch_cpu_percent": cpu.switch_cpu_percent,
        "machine_cpu_percent": cpu.machine_cpu_percent,
        "cpus": cpu.cpus,
        # each process's mean wait for a CPU per wake-up, behind cpu_wait_us_per_wake
        "cpu_wait_us_per_wake_each": {
            "client": cpu.cpu_wait_us_per_wake,
            "server": scpu.get("cpu_wait_us_per_wake"),
            "switches": cpu.switch_wait_us_per_wake,
        },
        "seed": seed,
        "base_rtt_s": lh.base_rtt_s,
        "retransmissions": sum(s["retransmissions"] for s in stats),
        "timeouts": sum(s["timeouts"] for s in stats),
        "spurious_timeouts": sum(s.get("spurious_timeouts", 0) for s in stats),
        "qp_stats": stats,
        "nic": {"client": nic.stats(), "server": res.get("nic")},
        "pps_per_core_client": _pps_per_core(nic.stats(), cpu.cpu_percent, duration),
        "pps_per_core_server": _pps_per_core(res.get("nic"), scpu.get("cpu_percent"), duration),
        **cpu_verdict(
            cpu.machine_cpu_percent,
            [cpu.cpu_percent, scpu.get("cpu_percent")],
            cpu.cpu_pressure_fraction,
            cpu.switch_cpu_percent_max,
            # the client's process and the switch processes, and the server's process
            wait_per_wake(
                [
                    cpu.cpu_wait_us_per_wake,
                    scpu.get("cpu_wait_us_per_wake"),
                    cpu.switch_wait_us_per_wake,
                ]
            ),
            lab_frame_time_s(plan.params),
        ),
    }
    # peak: the best 100 ms bin of completed bytes (the average when the run is shorter)
    peak = bc.peak_bps(run.events, run.t_start, run.t_end, 0.1) if run.events else 0.0
    out["peak_bps"] = round(max(peak, goodput) if duration < 0.1 else peak, 1)
    if p.timeline_ms:
        out["timeline_ms"] = p.timeline_ms
        out["timeline"] = bc.timeline(
            run.events, run.t_start, max(run.t_end, run.t_start), p.timeline_ms / 1000
        )
    if p.test == "lat":
        out["latency_us"] = latency_summary(run.latencies)
    return out


def _pps_per_core(nic: dict | None, cpu_percent: float | None, duration_s: float) -> float | None:
    """Frames sent and received per CPU-second of the side's process over the run."""
    if not nic or not cpu_percent or duration_s <= 0:
        return None
    frames = sum(p["tx_frames"] + p["rx_frames"] for p in nic["ports"])
    return round(frames / (cpu_percent / 100 * duration_s), 1)


def latency_summary(lat_s: list[float]) -> dict[str, float]:
    """ib_write_lat's columns, in microseconds."""
    if not lat_s:
        return {}
    us = sorted(x * 1e6 for x in lat_s)
    n = len(us)

    def pct(q: float) -> float:
        return us[min(n - 1, max(0, math.ceil(q * n) - 1))]

    return {
        "t_min": round(us[0], 2),
        "t_max": round(us[-1], 2),
        "t_typical": round(statistics.median(us), 2),
        "t_avg": round(statistics.fmean(us), 2),
        "t_stdev": round(statistics.pstdev(us), 2) if n > 1 else 0.0,
        "p99": round(pct(0.99), 2),
        "p99_9": round(pct(0.999), 2),
    }
