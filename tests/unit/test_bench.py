"""mrc-bench without a lab: the verified pattern, capacity, timelines, latency statistics, the
control channel's framing (in-memory streams), argument checks and the output formats."""

from __future__ import annotations

import asyncio
import json
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab import bench_cli as bench
from lab.proc import control
from lab.workloads.bench import common as bc
from lab.workloads.bench.write import latency_summary


def simulate_writes(size: int, nchunks: int, messages: int, seed: int, skip: int | None = None):
    src = bc.source_pattern(seed, size * nchunks)
    region = bytearray(size * nchunks)
    for m in range(messages):
        if m == skip:
            continue
        so, ro = bc.message_slice(m, size, nchunks)
        region[ro : ro + size] = src[so : so + size]
    return src, region


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 300),
    nchunks=st.integers(1, 9),
    messages=st.integers(0, 60),
    seed=st.integers(0, 2**32 - 1),
)
def test_expected_region_is_what_the_writes_leave(size, nchunks, messages, seed):
    src, region = simulate_writes(size, nchunks, messages, seed)
    assert bc.expected_region(src, size, nchunks, messages) == region


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(16, 300),
    nchunks=st.integers(1, 9),
    messages=st.integers(1, 60),
    data=st.data(),
)
def test_a_lost_last_write_is_detected(size, nchunks, messages, data):
    """Skipping the last write into any chunk leaves the previous pass's bytes (or zeros):
    the check fails, because consecutive passes write different bytes."""
    last_into = {m % nchunks: m for m in range(messages)}
    skip = data.draw(st.sampled_from(sorted(last_into.values())))
    src, region = simulate_writes(size, nchunks, messages, 7, skip=skip)
    want = bc.expected_region(src, size, nchunks, messages)
    assert region != want
    i = bc.first_difference(region, want)
    assert region[i] != want[i] and region[:i] == want[:i]


def test_first_difference_bisects():
    a = bytes(100_000)
    b = bytearray(a)
    b[77_777] = 1
    assert bc.first_difference(a, b) == 77_777
    assert bc.first_difference(a, a) == len(a)


def test_plan_region():
    assert bc.plan_region(65536, 5000, 16, 32 << 20) == (512, 16)
    assert bc.plan_region(65536, 3, 16, 32 << 20) == (3, 3)  # never more than the run writes
    assert bc.plan_region(64 << 20, None, 16, 32 << 20) == (1, 1)  # one message > the cap
    assert bc.plan_region(64, None, 1, 32 << 20)[1] == 1


class FakePlan:
    def __init__(self, planes=8, t1=2, hosts_per_t0=2, rate_mbit=100.0):
        self.params = types.SimpleNamespace(planes=planes, t1=t1, rate_mbit=rate_mbit)
        self.shape = types.SimpleNamespace(host_t0=lambda h: h // hosts_per_t0)
        self.host_count = 4

    def mgmt_address(self, h):
        return f"fd00::{0x100 + h:x}"


def test_pair_capacity():
    plan = FakePlan()
    up = [True] * 8
    assert bc.pair_capacity_bps(plan, 0, 3, up, up) == 800e6
    one_down = [True] * 7 + [False]
    assert bc.pair_capacity_bps(plan, 0, 3, one_down, up) == 700e6
    assert bc.pair_capacity_bps(plan, 0, 3, up, one_down) == 700e6
    assert bc.pair_capacity_bps(plan, 0, 3, one_down, [False] + [True] * 7) == 600e6
    # a single T1 per plane still carries the port's rate
    assert bc.pair_capacity_bps(FakePlan(t1=1), 0, 3, up, up) == 800e6


def test_timeline_and_peak():
    events = [(0.01, 1000), (0.02, 1000), (0.15, 3000), (0.25, 500)]
    tl = bc.timeline(events, 0.0, 0.25, 0.1)
    assert [r[0] for r in tl] == [0.0, 0.1, 0.2]
    assert tl[0][1] == pytest.approx(2000 * 8 / 0.1)
    assert tl[1][1] == pytest.approx(3000 * 8 / 0.1)
    assert tl[2][1] == pytest.approx(500 * 8 / 0.05)  # the partial last bin, scaled
    assert bc.peak_bps(events, 0.0, 0.25, 0.1) == pytest.approx(3000 * 8 / 0.1)
    assert bc.peak_bps(events, 0.0, 0.05, 0.1) == 0.0
    with pytest.raises(ValueError):
        bc.timeline(events, 0, 1, 0)


def test_latency_summary_columns():
    lat = [i * 1e-6 for i in range(1, 1001)]  # 1 .. 1000 us
    s = latency_summary(lat)
    assert s["t_min"] == 1 and s["t_max"] == 1000
    assert s["t_typical"] == pytest.approx(500.5) and s["t_avg"] == pytest.approx(500.5)
    assert s["p99"] == 990 and s["p99_9"] == 999
    assert latency_summary([]) == {}


def test_parse_size_and_host():
    assert bc.parse_size("65536") == 65536
    assert bc.parse_size("64K") == 65536 and bc.parse_size("4M") == 4 << 20
    assert bc.parse_size("1GiB") == 1 << 30
    for bad in ("x", "1.5", "-3"):
        with pytest.raises(ValueError):
            bc.parse_size(bad)
    plan = FakePlan()
    assert bc.parse_host(plan, "h3") == 3 and bc.parse_host(plan, "2") == 2
    assert bc.parse_host(plan, "fd00::101") == 1
    for bad in ("h9", "nope"):
        with pytest.raises(ValueError):
            bc.parse_host(plan, bad)


# --- control channel framing, over in-memory streams --------------------------------------------


class MemWriter:
    def __init__(self):
        self.data = bytearray()

    def write(self, b):
        self.data += b

    async def drain(self):
        pass

    def get_extra_info(self, _name):
        return ("fd00::1", 18515)

    def close(self):
        pass


def test_channel_messages_and_errors():
    async def go():
        r = asyncio.StreamReader()
        w = MemWriter()
        ch = control.Channel(r, w)
        await ch.send("hello", qps=[1, 2])
        assert json.loads(w.data) == {"type": "hello", "qps": [1, 2]}
        r.feed_data(
            b'{"type": "ready", "x": 1}\n{"type": "other"}\n{"type": "error", "message": "boom"}\n'
        )
        r.feed_data(b"not json\n")
        assert (await ch.recv("ready"))["x"] == 1
        with pytest.raises(control.ControlError, match="expected 'done'"):
            await ch.recv("done")
        with pytest.raises(control.ControlError, match="boom"):
            await ch.recv()
        with pytest.raises(control.ControlError, match="not JSON"):
            await ch.recv()
        with pytest.raises(control.ControlError, match="no ready within"):
            await ch.recv("ready", timeout_s=0.01)
        r.feed_eof()
        with pytest.raises(control.ControlError, match="closed"):
            await ch.recv()

    asyncio.run(go())


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_without_a_lab_is_a_usage_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MRC_LAB_STATE_DIR", str(tmp_path))
    assert bench.main(["write", "--lab", "mrcnolab"]) == bench.EXIT_USAGE
    assert "no lab named 'mrcnolab'" in capsys.readouterr().err


def test_cli_rejects_iters_with_duration():
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["write", "--iters", "3", "--duration", "1"])


def _pair_result(**over):
    res = {
        "test": "write", "lab": "mrc", "switch_mode": "python", "planes": 8,
        "port_rate_bps": 100e6, "transport": "mrc", "src": "h0", "dst": "h3", "same_t0": False,
        "qps": 1, "depth": 16, "capacity_bps": 800e6, "size": 65536, "iterations": 10,
        "peak_bps": 7.8e8, "goodput_bps": 7.6e8, "msg_rate_pps": 1450.0, "goodput_fraction": 0.95,
        "duration_s": 1.0, "retransmissions": 0, "timeouts": 0, "verified": True,
        "verify": {"region_bytes": 655360}, "qp_errors": 0, "errors": [],
        "cpu_percent_client": 50.0, "cpu_percent_server": 40.0, "switch_cpu_percent": 100.0,
        "machine_cpu_percent": 90.0, "cpus": 2,
    }  # fmt: skip
    res.update(over)
    return res


def test_write_table_has_the_perftest_columns():
    text = bench.format_pair(_pair_result())
    # perftest's columns in its own units (bytes: MB/sec; the 8x trap of bits is avoided)
    for col in ("#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]"):
        assert col in text
    res = _pair_result()
    assert f"{res['goodput_bps'] / 8e6:.3f}" in text  # bits/s shown as megabytes/s
    assert "MsgRate[Mpps]" in text or "MsgRate[kpps]" in text
    fast = bench.format_pair(_pair_result(peak_bps=4e11, goodput_bps=3.2e11, msg_rate_pps=2e6))
    assert "BW average[GB/sec]" in fast and "40.000" in fast and "MsgRate[Mpps]" in fast
    assert "verified: yes" in text and "0.950 of capacity" in text and "switches 100" in text
    bad = bench.format_pair(_pair_result(verified=False, errors=["write 3: REMOTE_ACCESS_ERROR"]))
    assert "verified: NO" in bad and "REMOTE_ACCESS_ERROR" in bad
    gbits = bench.format_pair(_pair_result(), report_gbits=True)  # perftest's --report_gbits
    assert "BW average[Gb/sec]" in gbits and f"{res['goodput_bps'] / 1e9:.3f}" in gbits


def test_lat_table_has_the_perftest_columns():
    lu = {"t_min": 1, "t_max": 9, "t_typical": 2, "t_avg": 3, "t_stdev": 1, "p99": 8, "p99_9": 9}
    text = bench.format_pair(_pair_result(test="lat", latency_us=lu))
    for col in ("t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]",
                "99% percentile[usec]", "99.9% percentile[usec]"):  # fmt: skip
        assert col in text


def test_allreduce_table():
    res = _pair_result(
        test="allreduce", ranks=4, hosts=["h0", "h1", "h2", "h3"], elements=1 << 20,
        type="uint32", redop="sum", time_s=0.05, algbw_bps=6.7e8, busbw_bps=1.0e9,
        step_names=["reduce-scatter 0", "all-gather 0"], step_times_s=[0.01, 0.02],
        cpu_percent_ranks=[40, 41, 42, 43], size=4 << 20,
    )  # fmt: skip
    text = bench.format_allreduce(res)
    for col in (
        "size(B)",
        "count",
        "algbw(GB/s)",  # nccl-tests' names and unit, at any rate (not bits, not MB/s)
        "busbw(GB/s)",
        "0.12500",  # busbw 1.0e9 bit/s = 0.125 GB/s
        "#wrong",
        "RS 0 10.00",
        "AG 0 20.00",
    ):
        assert col in text
