"""mrc-sim --workload allreduce|alltoall|incast: the lab's workloads on the whole-fabric
simulator (mrcnic.sim.collectives), and the one definition both sides use (mrcnic.workloads)."""

from __future__ import annotations

import io
import json
import statistics
import time
from contextlib import redirect_stdout

import numpy as np
import pytest

from lab.workloads.bench import allreduce as lab_ar
from mrcnic import workloads as wl
from mrcnic.faultplan import Step
from mrcnic.sim import collectives as co
from mrcnic.sim import transfer
from mrcnic.sim.clos import ClosSpec
from mrcnic.verbs import RemoteBuffer, SimNetwork

TRANSPORTS = ("mrc", "rocev2")
VOLATILE = ("wall_s", "cpu_s", "sim_pps")  # the simulator's own speed: not the run's


def _spec(transport: str = "mrc", size: int = 64 << 10, **kw) -> ClosSpec:
    """8 hosts: 4 T0 x 2, 2 T1, 2 planes."""
    base = dict(planes=2, t0=4, t1=2, hosts_per_t0=2, size=size, transport=transport, seed=3)
    return ClosSpec(**{**base, **kw})


# --- the definitions ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_the_ring_schedule_reduces_every_chunk_on_every_rank(n: int) -> None:
    """Play the schedule on sets of contributions: every rank ends with every chunk holding
    every rank's part, and a rank only forwards what it received the step before."""
    data = [[{r} for _ in range(n)] for r in range(n)]  # data[r][chunk] = ranks summed in
    for phase, s in wl.ring_steps(n):
        sent = [wl.ring_write(phase, s, r, n) for r in range(n)]
        payload = [set(data[r][w.chunk]) for r, w in enumerate(sent)]
        for r, w in enumerate(sent):
            dst = (r + 1) % n
            if w.to_recv:
                assert w.slot == s
                k = wl.ring_reduce_chunk(s, dst, n)
                assert k == wl.ring_write(phase, s, r, n).chunk  # the chunk the sender sent
                data[dst][k] |= payload[r]
            else:
                data[dst][w.slot] = payload[r]
        nxt = wl.ring_next(phase, s, n)
        assert nxt == (None if (phase, s) == wl.ring_steps(n)[-1] else wl.ring_steps(n)[
            wl.ring_steps(n).index((phase, s)) + 1])  # fmt: skip
    assert all(chunk == set(range(n)) for rank in data for chunk in rank)


def test_bus_bandwidth_is_nccl_tests() -> None:
    # nccl-tests (doc/PERFORMANCE.md): all-reduce 2(n-1)/n, all-to-all (n-1)/n
    for n in (2, 4, 8, 128):
        assert wl.allreduce_busbw_bps(1e9, n) == pytest.approx(1e9 * 2 * (n - 1) / n)
        assert wl.alltoall_busbw_factor(n) == pytest.approx((n - 1) / n)
    assert wl.allreduce_busbw_bps(8e8, 8) == pytest.approx(1.4e9)
    assert wl.alltoall_busbw_factor(8) * 8e8 == pytest.approx(7e8)


def test_incast_senders_spread_over_the_other_t0s_and_leave_a_victim() -> None:
    shape = _spec().shape  # 4 T0 x 2 hosts
    assert wl.incast_senders(shape, 3, 7) == [0, 2, 4]
    assert wl.incast_senders(shape, 5, 7) == [0, 2, 4, 1, 3]
    assert wl.incast_senders(shape, 7, 7) == [0, 2, 4, 1, 3, 5, 6]
    assert wl.incast_victim(shape, [0, 2, 4], 7) == (1, 6)
    assert wl.incast_victim(shape, [0, 1], 7) is None  # T0 0 has no free host
    with pytest.raises(ValueError):
        wl.incast_senders(shape, 8, 7)


# --- the lab's ring all-reduce on the shared schedule ------------------------------------------


def test_the_labs_allreduce_iteration_reduces_over_the_verbs_api() -> None:
    size, seed, n = 64 << 10, 5, 2
    net = SimNetwork(seed=seed)
    devs = net.devices
    nxt = [d.create_qp() for d in devs]
    prv = [d.create_qp() for d in devs]
    for r in range(n):
        nxt[r].connect(prv[(r + 1) % n].export())
        prv[r].connect(nxt[(r - 1) % n].export())
    datas = [bytearray(size) for _ in range(n)]
    recvs = [bytearray((n - 1) * (size // n)) for _ in range(n)]
    rem = []
    for r, d in enumerate(devs):
        np.frombuffer(datas[r], dtype=np.uint32)[:] = wl.rank_data(seed, r, size // 4)
        rem.append((RemoteBuffer.of(d.register(datas[r])), RemoteBuffer.of(d.register(recvs[r]))))
    its = [
        lab_ar._Iteration(r, n, 0, datas[r], recvs[r], nxt[r], prv[r], *rem[(r + 1) % n])
        for r in range(n)
    ]
    for it in its:
        it.start(time.monotonic())

    def done() -> bool:
        for it in its:
            it.on_progress(0.0)
        return all(it.done for it in its)

    net.run_until(done, 5.0)
    want = wl.allreduce_expected(seed, n, size // 4)
    for it in its:
        assert it.done and not it.errors
        assert np.array_equal(it.d32, want)


# --- the simulator's workloads --------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_allreduce_completes_verified(transport: str) -> None:
    r = co.Allreduce(_spec(transport)).run()
    assert r["verified"] and r["qp_errors"] == 0 and not r["errors"], r["errors"]
    assert r["ranks"] == 8 and r["size"] == 64 << 10 and r["iterations"] == 1
    assert r["busbw_bps"] == pytest.approx(r["algbw_bps"] * 2 * 7 / 8, abs=0.2)
    assert r["algbw_bps"] == pytest.approx(r["size"] * 8 / r["time_s"], rel=1e-4)
    assert len(r["step_times_s"]) == len(r["step_names"]) == 14
    assert len(r["flows"]) == 8 and all(f["fct_s"] for f in r["flows"])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_alltoall_completes_verified(transport: str) -> None:
    r = co.Alltoall(_spec(transport)).run()
    assert r["verified"] and r["qp_errors"] == 0 and not r["errors"], r["errors"]
    assert r["qps_per_rank"] == 7 and len(r["flows"]) == 8 * 7
    assert r["busbw_bps"] == pytest.approx(r["algbw_bps"] * 7 / 8, abs=0.1)
    arrivals = r["arrival_s"]
    assert all((arrivals[d][s] is None) == (d == s) for d in range(8) for s in range(8))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_incast_with_a_victim_completes_verified(transport: str) -> None:
    spec = _spec(transport, size=32 << 10)
    qps = 1 if transport == "mrc" else 2
    p = co.IncastParams(senders=(0, 2, 4), dst=7, victim=(1, 6), qps=qps, duration_s=0.02)
    r = co.Incast(spec, p).run()
    assert r["verified"] and r["qp_errors_total"] == 0, r["qp_error_reasons"]
    roles = [f["role"] for f in r["flows"]]
    assert roles == ["incast"] * 3 + ["victim"]
    assert all(f["bytes"] > 0 and f["goodput_bps"] > 0 for f in r["flows"])
    v = r["victim"]
    assert v["alone_verified"] and v["alone_bps"] > 0
    assert v["ratio"] == pytest.approx(v["with_incast_bps"] / v["alone_bps"], abs=1e-4)
    assert r["incast_goodput_bps"] <= r["dst_capacity_bps"]


def test_a_rank_sends_a_step_only_after_the_previous_one_arrived() -> None:
    ar = co.Allreduce(_spec())
    sends: list[tuple[int, float]] = []
    arrivals: list[tuple[int, float]] = []
    send, on_prev = ar._send, ar._on_prev

    def spy_send(r: int, phase: int, s: int) -> None:
        sends.append((r, ar.hosts.fabric.now))
        send(r, phase, s)

    def spy_prev(r, e, t):  # type: ignore[no-untyped-def]
        if isinstance(e, co.ImmReceived):
            arrivals.append((r, t))
        on_prev(r, e, t)

    ar._send = spy_send  # type: ignore[method-assign]
    for h in range(8):
        ep, pump = ar.hosts.endpoints[h][co._QPN_PREV]
        pump.on_event = ar.hosts._guard(spy_prev)
    assert ar.run()["verified"]
    for r in range(8):
        mine = [t for q, t in sends if q == r]
        got = [t for q, t in arrivals if q == r]
        assert len(mine) == 13 and len(got) == 14  # step 0 was posted before the run
        assert all(mine[k] >= got[k] for k in range(13))


def test_a_wrong_reduction_fails_verification(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(co.wl, "ring_reduce_chunk", lambda s, r, n: (r - s) % n)
    r = co.Allreduce(_spec()).run()
    assert not r["verified"]


def _stable(r: dict) -> str:
    return json.dumps({k: v for k, v in r.items() if k not in VOLATILE})


def test_same_seed_same_result() -> None:
    p = co.IncastParams(senders=(0, 2), dst=7, victim=(1, 6), qps=1, duration_s=0.01)
    runs = [
        (lambda: co.Allreduce(_spec()).run()),
        (lambda: co.Alltoall(_spec("rocev2")).run()),
        (lambda: co.Incast(_spec(size=16 << 10), p).run()),
    ]
    for run in runs:
        assert _stable(run()) == _stable(run())
    assert _stable(co.Allreduce(_spec(seed=4)).run()) != _stable(co.Allreduce(_spec()).run())


# --- the command line -----------------------------------------------------------------------------

LAB_ALLREDUCE_KEYS = [
    "test",
    "planes",
    "port_rate_bps",
    "hosts",
    "ranks",
    "transport",
    "size",
    "elements",
    "type",
    "redop",
    "iterations",
    "warmup",
    "time_s",
    "iteration_times_s",
    "algbw_bps",
    "busbw_bps",
    "goodput_bps",
    "capacity_bps",
    "goodput_fraction",
    "step_names",
    "step_times_s",
    "verified",
    "qp_errors",
    "errors",
    "bytes",
    "duration_s",
    "retransmissions",
    "timeouts",
    "spurious_timeouts",
    "tx_data_packets",
]
LAB_ALLTOALL_KEYS = LAB_ALLREDUCE_KEYS[:] + [
    "qps_per_rank",
    "sizes",
    "avg_busbw_bps",
    "rows",
    "arrival_s",
]
LAB_ALLTOALL_KEYS.remove("step_names")
LAB_ALLTOALL_KEYS.remove("step_times_s")
LAB_INCAST_KEYS = [
    "scenario",
    "transport",
    "planes",
    "port_rate_bps",
    "senders",
    "dst",
    "qps",
    "size",
    "duration_s",
    "flows",
    "victim",
    "incast_goodput_bps",
    "dst_capacity_bps",
    "incast_fraction",
    "window_s",
    "start_skew_s",
    "skip_s",
    "trims_total",
    "ecn_marks_total",
    "drops_total",
    "qp_errors_total",
    "verified",
]
SIM_KEYS = ["workload", "hosts", "utilisation", "flows", "jain"]


def _cli(*argv: str) -> tuple[int, dict]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = transfer.main([*argv, "--planes", "2", "--t1", "2", "--scale", "lab", "--json"])
    return rc, json.loads(out.getvalue())


@pytest.mark.parametrize(
    ("argv", "keys"),
    [
        (("--workload", "allreduce", "--size", "32K"), LAB_ALLREDUCE_KEYS),
        (("--workload", "alltoall", "--size", "32K", "--transport", "rocev2"), LAB_ALLTOALL_KEYS),
        (
            ("--workload", "incast", "--senders", "h0,h2", "--victim", "auto", "--size", "16K",
             "--duration", "10ms"),
            LAB_INCAST_KEYS,
        ),
    ],
)  # fmt: skip
def test_the_cli_writes_mrc_benchs_keys(argv: tuple[str, ...], keys: list[str]) -> None:
    rc, r = _cli(*argv)
    assert rc == 0 and r["verified"]
    missing = [k for k in [*keys, *SIM_KEYS] if k not in r]
    assert not missing
    if r["workload"] == "incast":
        assert r["senders"] == ["h0", "h2"] and r["dst"] == "h7"
        assert r["victim"]["src"] == "h1" and r["victim"]["dst"] == "h6"


def test_the_cli_sizes_are_mrc_benchs() -> None:
    def size(*argv: str) -> int:
        a = transfer.build_parser().parse_args(list(argv))
        return transfer.config_from_args(a).size

    assert size("--workload", "allreduce") == 4 << 20
    assert size("--workload", "alltoall") == 4 << 20
    assert size("--workload", "incast") == 256 << 10
    assert size("--workload", "p2p") == 16 << 20
    assert size("--workload", "incast", "--size", "1M") == 1 << 20


@pytest.mark.parametrize(
    "argv",
    [
        ("--workload", "allreduce", "--fail", "0@1ms"),
        ("--workload", "alltoall", "--qps", "2"),
        ("--workload", "alltoall", "--timeline", "1ms"),
        ("--workload", "incast", "--fault", "reboot:p0-t1-0@1ms+1ms"),
        ("--workload", "alltoall", "--iters", "2"),
        ("--workload", "permutation", "--iters", "2"),
        ("--workload", "allreduce", "--iters", "0"),
        ("--workload", "incast", "--senders", "h7"),  # the destination
        ("--workload", "incast", "--senders", "h0,h1", "--victim", "auto"),  # no free host
    ],
)
def test_the_cli_refuses_what_it_cannot_honour(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as e, redirect_stdout(io.StringIO()):
        transfer.main([*argv, "--size", "16K"])
    assert e.value.code == 2


# --- a training job: iterations and faults --------------------------------------------------------


def test_allreduce_iterations_run_back_to_back_each_verified() -> None:
    ar = co.Allreduce(_spec(), iters=3)
    r = ar.run()
    assert r["verified"] and r["errors"] == [] and r["iterations"] == r["iters"] == 3
    times, starts = r["iteration_times_s"], r["iteration_starts_s"]
    assert len(times) == len(starts) == len(r["iteration_step_times_s"]) == 3
    # the next iteration starts when the previous one ended, on every rank
    assert starts[0] == 0.0
    assert all(starts[k + 1] == pytest.approx(starts[k] + times[k], abs=2e-6) for k in range(2))
    assert r["time_s"] == pytest.approx(sum(times) / 3, abs=2e-6)
    assert r["bytes"] == 3 * r["size"] and r["failed_iterations"] == 0
    assert all(len(row) == 14 for row in r["iteration_step_times_s"])
    # the immediates carry the iteration: the last one posted was tagged 2
    assert all(k.got == 14 for k in ar.ranks)
    assert r["faults"] == [] and r["fault_log"] == []


def test_a_wrong_reduction_in_a_later_iteration_stops_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ar = co.Allreduce(_spec(), iters=3)
    start = ar._start

    def corrupt(t: float) -> None:
        start(t)
        ar.inputs[0] = bytes(len(ar.inputs[0]))  # rank 0's data differs from the next on

    monkeypatch.setattr(ar, "_start", corrupt)
    r = ar.run()
    assert not r["verified"] and r["iterations"] == 2 and r["failed_iterations"] == 1
    assert any("iteration 2: wrong result" in e for e in r["errors"])


def _reboot_run(transport: str, down_ms: float, iters: int) -> dict:
    """16 hosts at 100 Gb/s; the T1 of plane 0 the ring crosses most rebooted at iteration 3."""
    kw = dict(planes=4, t0=8, t1=2, hosts_per_t0=2, port_rate_bps=100e9, prop_s=4e-6,
              queue_bytes=1 << 20, ecn_bytes=200 << 10, size=256 << 10, msg_size=256 << 10)  # fmt: skip
    probe = co.Allreduce(_spec(transport, **kw), iters=1)
    it = probe.run()["time_s"]
    load = probe.hosts.t1_packets()
    busy = max(sorted(load), key=load.__getitem__)
    step = Step("reboot", 3 * it, busy, down_ms=down_ms)
    return co.Allreduce(_spec(transport, faults=(step,), timeline_s=it / 2, **kw), iters).run()


def test_mrc_runs_through_a_t1_reboot_with_a_slower_iteration() -> None:
    r = _reboot_run("mrc", 0.5, 12)
    assert r["verified"] and r["qp_errors"] == 0 and r["iterations"] == 12, r["errors"]
    log = r["fault_log"]
    assert len(log) == 1 and log[0]["label"].startswith("reboot p") and log[0]["end_s"]
    assert r["lost_in_flight"] > 0 and r["retransmissions"] > 0
    times = r["iteration_times_s"]
    steady = statistics.median(times)
    at = log[0]["start_s"]
    hit = [t for s, t in zip(r["iteration_starts_s"], times, strict=True) if s <= at < s + t]
    assert len(hit) == 1 and hit[0] > 1.2 * steady, (hit, steady)
    assert r["timeline"] and r["recovery_s"] is not None


def test_rocev2_fails_the_job_when_its_t1_stays_down() -> None:
    r = _reboot_run("rocev2", 50.0, 200)  # far beyond its retries (~255 ACK timeouts)
    assert not r["verified"] and r["qp_errors"] >= 1 and r["failed_iterations"] == 1
    assert "RETRY_EXCEEDED" in " ".join(r["qp_error_reasons"])
    assert r["failed_at_s"] <= r["fault_log"][0]["start_s"] < r["failed_at_s"] + r["failed_after_s"]
    assert r["iterations"] < 200


def test_a_job_with_faults_is_the_same_run_twice() -> None:
    step = Step("reboot", 2e-4, "p0-t1-0", down_ms=0.3)
    spec = _spec(size=32 << 10, faults=(step,), timeline_s=1e-4)
    a, b = co.Allreduce(spec, iters=4).run(), co.Allreduce(spec, iters=4).run()
    assert _stable(a) == _stable(b) and a["fault_log"] and a["verified"]


def test_the_cli_runs_a_job_with_a_fault() -> None:
    rc, r = _cli("--workload", "allreduce", "--size", "32K", "--iters", "3",
                 "--fault", "reboot:p0-t1-0@1ms+2ms", "--timeline", "1ms")  # fmt: skip
    assert rc == 0 and r["iterations"] == 3 and len(r["iteration_times_s"]) == 3
    assert r["faults"] == ["reboot:p0-t1-0@1ms+2ms"] and r["fault_log"]
    assert r["timeline_bin_s"] == 1e-3 and "recovery_s" in r
