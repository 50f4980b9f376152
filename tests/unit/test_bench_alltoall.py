"""mrc-bench alltoall without a lab: sizes, peer order, rails, the expected buffers, one
exchange over the simulated fabric, the result's arithmetic (nccl-tests' busbw), the CLI's
parser and table, and the loop plan it shares with the all-reduce."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from lab import bench_cli as cli
from lab.workloads.bench import alltoall as aa
from lab.workloads.bench.allreduce import LoopPlan, rank_data
from mrcnic.verbs import RemoteBuffer, SimNetwork

# --- pure helpers ----------------------------------------------------------------------------


def test_sizes_are_rounded_to_equal_uint32_chunks_and_checked() -> None:
    assert aa.check_sizes([1 << 20, 1000], 3) == [(1 << 20) - (1 << 20) % 12, 996]
    with pytest.raises(ValueError, match="at least 16"):
        aa.check_sizes([15], 4)
    with pytest.raises(ValueError, match="at least 2"):
        aa.check_sizes([1 << 20], 1)
    with pytest.raises(ValueError, match="one RDMA Write"):
        aa.check_sizes([2 << 32], 2)


def test_peer_order_staggers_and_covers_every_peer() -> None:
    n = 5
    for r in range(n):
        order = aa.peer_order(r, n)
        assert sorted(order) == [j for j in range(n) if j != r]
        assert order[0] == (r + 1) % n
    # at every position the ranks write to different peers: nobody is everybody's first
    for k in range(n - 1):
        assert len({aa.peer_order(r, n)[k] for r in range(n)}) == n


def test_rails_are_symmetric_and_distinct_per_pair() -> None:
    n = 4
    seen = {aa.rail(i, j, n) for i in range(n) for j in range(i + 1, n)}
    assert seen == set(range(n * (n - 1) // 2))  # 6 pairs, 6 rails: none shared on 8 planes
    assert all(aa.rail(i, j, n) == aa.rail(j, i, n) for i in range(n) for j in range(n) if i != j)
    with pytest.raises(ValueError):
        aa.rail(2, 2, n)


def test_expected_buffer_is_every_peers_chunk_for_me() -> None:
    n, seed, sizes = 3, 7, [48, 96]
    for r in range(n):
        for k, s in enumerate(sizes):
            e = s // n // 4
            got = aa.expected(seed, r, n, sizes)[k]
            assert got.dtype == np.uint32 and len(got) == s // 4
            for j in range(n):
                want = rank_data(seed, j, max(sizes) // 4)[r * e : (r + 1) * e]
                assert np.array_equal(got[j * e : (j + 1) * e], want)


# --- one exchange over the simulated fabric (two ranks) -------------------------------------


def _two_ranks(size: int, seed: int = 3):
    net = SimNetwork(seed=seed)
    devs = net.devices
    q0, q1 = devs[0].create_qp(), devs[1].create_qp()
    q0.connect(q1.export())
    q1.connect(q0.export())
    datas, recvs, remotes = [], [], []
    for r, dev in enumerate(devs):
        d = bytearray(size)
        np.frombuffer(d, dtype=np.uint32)[:] = rank_data(seed, r, size // 4)
        rv = bytearray(size)
        datas.append(d)
        recvs.append(rv)
        remotes.append(RemoteBuffer.of(dev.register(rv)))
    qps = [[None, q0], [q1, None]]
    rem = [[None, remotes[1]], [remotes[0], None]]
    return net, qps, datas, recvs, rem


def test_an_exchange_delivers_every_chunk_and_verifies() -> None:
    size, seed = 64 * 1024, 3
    net, qps, datas, recvs, rem = _two_ranks(size, seed)
    ex = [aa._Exchange(r, 2, 0, size, datas[r], recvs[r], qps[r], rem[r]) for r in range(2)]
    for e in ex:
        e.start(time.monotonic())

    def done() -> bool:
        for e in ex:
            e.on_progress(0.0)
        return all(e.done for e in ex)

    net.run_until(done, 5.0)
    assert all(e.done and not e.errors for e in ex)
    for r in range(2):
        got = np.frombuffer(recvs[r], dtype=np.uint32)
        assert np.array_equal(got, aa.expected(seed, r, 2, [size])[0])
        assert ex[r].arrival[1 - r] is not None and ex[r].arrival[r] is None


def test_a_wrong_immediate_is_an_error() -> None:
    size = 4096
    net, qps, datas, recvs, rem = _two_ranks(size)
    # rank 1 thinks this is iteration 5: its immediate does not match rank 0's iteration 0
    e0 = aa._Exchange(0, 2, 0, size, datas[0], recvs[0], qps[0], rem[0])
    e1 = aa._Exchange(1, 2, 5, size, datas[1], recvs[1], qps[1], rem[1])
    e0.start(time.monotonic())
    e1.start(time.monotonic())

    def done() -> bool:
        e0.on_progress(0.0)
        e1.on_progress(0.0)
        return e0.done and e1.done

    net.run_until(done, 5.0)
    assert any("expected" in x for x in e0.errors + e1.errors)


# --- the result ------------------------------------------------------------------------------


def _rep(it: int, start: float, end: float, n: int, ok: bool = True, rnd: int = 0) -> dict:
    return {"iter": it, "round": rnd, "start": start, "end": end, "ok": ok, "errors": [],
            "arrival": [None if j == 0 else 0.01 * j for j in range(n)]}  # fmt: skip


def _state(n: int):
    params = SimpleNamespace(planes=8, rate_mbit=10.0, t1=2, hosts_per_t0=2)
    plan = SimpleNamespace(params=params, host_name=lambda h: f"h{h}")
    return SimpleNamespace(
        name="mrcx", params=SimpleNamespace(switch="python", realtime=False), plan=plan
    )


def test_result_busbw_is_nccl_tests_all_to_all(monkeypatch) -> None:
    n, size = 4, 1 << 20
    monkeypatch.setattr(aa.bc, "pair_capacity_bps", lambda *a: 80e6)
    its = [[_rep(i, 0.0, 0.5, n) for _ in range(n)] for i in range(1, 3)]
    finals = [{"cpu": {"cpu_percent": 10.0, "machine_cpu_percent": 50.0}, "qp": [
        {"retransmissions": 2, "timeouts": 1, "tx_data_packets": 100}]} for _ in range(n)]  # fmt: skip
    table = [{"host": h, "live_ports": [True] * 8} for h in range(n)]
    p = aa.AlltoallParams(hosts=list(range(n)), sizes=[size], iters=2)
    res = aa.result(_state(n), p, [size], its, finals, table)
    algbw = size * 8 / 0.5
    assert res["algbw_bps"] == pytest.approx(algbw)
    assert res["busbw_bps"] == pytest.approx(algbw * 3 / 4)
    assert res["goodput_fraction"] == pytest.approx(algbw * 3 / 4 / 80e6, abs=1e-4)
    assert res["verified"] and res["iterations"] == 2 and res["qp_errors"] == 0
    assert (res["retransmissions"], res["timeouts"], res["tx_data_packets"]) == (8, 4, 400)
    assert res["arrival_s"][0][0] is None and res["arrival_s"][1][2] == pytest.approx(0.02)
    text = cli.format_alltoall(res)
    assert "All-to-all" in text and str(size) in text and "verified: yes" in text


def test_result_of_a_sweep_has_a_row_per_size_and_fails_a_short_run(monkeypatch) -> None:
    n = 2
    monkeypatch.setattr(aa.bc, "pair_capacity_bps", lambda *a: 80e6)
    sizes = [1024, 4096]
    its = [[_rep(1, 0.0, 0.1, n, rnd=0)] * n]  # the second size never ran (an error stopped it)
    finals = [{"cpu": {}, "qp": []}] * n
    table = [{"host": h, "live_ports": [True] * 8} for h in range(n)]
    p = aa.AlltoallParams(hosts=[0, 1], sizes=sizes, iters=1)
    res = aa.result(_state(n), p, sizes, its, finals, table)
    assert [r["size"] for r in res["rows"]] == sizes
    assert res["rows"][0]["verified"] and not res["rows"][1]["verified"]
    assert res["verified"] is False and res["size"] == 4096 and res["iterations"] == 0


# --- the CLI -----------------------------------------------------------------------------------


def test_parser_reads_sizes_or_one_size() -> None:
    a = cli.build_parser().parse_args(["alltoall", "--sizes", "1M,4M,16M", "--iters", "2"])
    assert a.sizes == [1 << 20, 4 << 20, 16 << 20] and a.size is None and a.iters == 2
    a = cli.build_parser().parse_args(["alltoall", "--size", "64K"])
    assert a.size == 64 << 10 and a.sizes is None
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["alltoall", "--size", "1M", "--sizes", "1M"])


# --- the loop plan shared with the all-reduce ----------------------------------------------------


def test_loop_plan_rounds_and_timed_iterations() -> None:
    lp = LoopPlan(warmup=1, iters=2, timeout_s=10, rounds=3)
    assert [lp.round_of(i) for i in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [lp.timed(i) for i in range(6)] == [False, True, True, False, True, True]
    assert not lp.finished(8, None) and lp.finished(9, None)
    one = LoopPlan(warmup=1, iters=5, timeout_s=10)  # the all-reduce's: one round
    assert one.finished(6, None) and not one.finished(5, None) and one.round_of(5) == 0


def test_loop_plan_with_a_duration_times_every_iteration_after_the_warmup() -> None:
    lp = LoopPlan(warmup=0, iters=1, timeout_s=10, duration_s=5.0)
    assert all(lp.timed(i) and lp.round_of(i) == 0 for i in range(10))
    assert not lp.finished(100, None)  # the deadline is set when the first timed one starts
    assert lp.finished(3, time.monotonic() - 1) and not lp.finished(3, time.monotonic() + 60)
