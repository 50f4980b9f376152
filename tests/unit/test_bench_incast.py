"""mrc-bench incast and pause-storm without a lab: the victim's and the storm flows' choice,
the switches' counters and their deltas (with and without a pfc block), goodput over a
window, progress parsing, argument checks and the tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lab import bench_cli as bench
from lab.fabric.params import LabParams
from lab.fabric.topology import build_plan
from lab.workloads.bench import incast as ic
from lab.workloads.bench import storm


def plan(**kw: Any):
    base = {"name": "mrcu", "planes": 2, "t0": 2, "t1": 3, "hosts_per_t0": 3}
    return build_plan(LabParams(**{**base, **kw}))


# --- hosts and the victim -------------------------------------------------------------------


def test_auto_victim_shares_only_the_upstream_links() -> None:
    p = plan()  # T0 0: h0 h1 h2, T0 1: h3 h4 h5
    assert ic.auto_victim(p, [3, 4], 0) == (5, 1)
    assert ic.auto_victim(p, [3], 0) == (4, 1)
    # the victim's destination: under dst's T0, not dst, a host that is no sender first
    assert ic.auto_victim(p, [3, 4, 1], 0) == (5, 2)
    src, dst = ic.auto_victim(p, [4, 5], 1)
    assert p.shape.host_t0(src) == 1 and p.shape.host_t0(dst) == 0 and dst != 1


def test_auto_victim_none_when_nothing_fits() -> None:
    p = plan()
    assert ic.auto_victim(p, [1, 2], 0) is None  # senders under dst's T0: no shared uplink
    assert ic.auto_victim(p, [3, 4, 5], 0) is None  # no free host under the senders' T0
    assert ic.auto_victim(plan(hosts_per_t0=1), [1], 0) is None  # nobody else under dst's T0
    assert ic.auto_victim(p, [], 0) is None


def test_auto_victim_takes_the_t0_of_most_senders() -> None:
    p = plan(t0=3, hosts_per_t0=2)  # T0 0: h0 h1, T0 1: h2 h3, T0 2: h4 h5
    assert ic.auto_victim(p, [2, 4, 5], 0) is None  # T0 2 has most senders, and no free host
    assert ic.auto_victim(p, [2, 3, 4], 0) is None  # T0 1 has most, and no free host either
    assert ic.auto_victim(p, [4, 5, 2], 0) is None
    assert ic.auto_victim(p, [4, 2], 0) == (3, 1)  # a tie: the lower T0 index
    assert ic.auto_victim(p, [4], 0) == (5, 1)


def test_parse_hosts_and_pairs() -> None:
    p = plan()
    assert ic.parse_hosts(p, "h3,h4, 5") == [3, 4, 5]
    assert ic.parse_pair(p, "h5:h2") == (5, 2)
    for bad in ("h3,h3", "h9", ""):
        with pytest.raises(ValueError):
            ic.parse_hosts(p, bad)
    for bad in ("h5", "h5:h5", "h5:h9"):
        with pytest.raises(ValueError):
            ic.parse_pair(p, bad)


def test_storm_default_flows_cross_the_stuck_t0() -> None:
    p = plan()
    flows = storm.default_flows(p, 3)
    assert flows == [ic.Flow(0, 3, "to-stuck"), ic.Flow(1, 4, "victim")]
    for f in flows:
        assert p.shape.host_t0(f.src) != p.shape.host_t0(3)
    small = plan(hosts_per_t0=1, t1=2)  # h0 | h1: nobody else under the stuck host's T0
    assert storm.default_flows(small, 1) == [ic.Flow(0, 1, "to-stuck")]
    four = plan(hosts_per_t0=2, t1=2)
    assert storm.default_flows(four, 3) == [ic.Flow(0, 3, "to-stuck"), ic.Flow(1, 2, "victim")]
    assert storm.stuck_t0s(p, 3) == ["p0-t0-1", "p1-t0-1"]
    assert storm.flows_from_pairs([(0, 3), (1, 2)], 3) == [
        ic.Flow(0, 3, "to-stuck"),
        ic.Flow(1, 2, "victim"),
    ]


# --- switch counters ------------------------------------------------------------------------


def pfc_block(**kw: float) -> dict[str, float]:
    return {k: kw.get(k, 0) for k in ic.PFC_KEYS}


def python_stats(pfc_totals=None, port_pfc=None, drops=None, trims=0, ecn=0, started=100.0):
    ports = {"d0": {"drops": {}}, "u0": {"drops": {}}}
    if port_pfc is not None:
        for name, block in zip(ports, port_pfc, strict=False):
            ports[name]["pfc"] = block
    totals: dict[str, Any] = {
        "trims": trims,
        "ecn_marks": ecn,
        "drops": {"queue_full": 0, "not_my_mac": 0, **(drops or {})},
    }
    if pfc_totals is not None:
        totals["pfc"] = pfc_totals
    return {
        "node": "p0-t0-0",
        "source": "mrc-switch",
        "stats": {"totals": totals, "ports": ports, "updated_unix": 5.0, "started_unix": started},
    }


def test_switch_counters_without_pfc_block() -> None:
    c = ic.switch_counters(python_stats(drops={"queue_full": 3}, trims=7, ecn=2))
    assert c is not None and c["pfc"] is None
    assert c["drops"]["queue_full"] == 3 and c["trims"] == 7 and c["ecn_marks"] == 2
    assert ic.switch_counters({"source": "mrc-switch", "stats": None}) is None
    assert ic.switch_counters(None) is None


def test_switch_counters_pfc_from_totals_or_ports() -> None:
    t = ic.switch_counters(python_stats(pfc_totals=pfc_block(pause_tx=4, paused_s=0.5)))
    assert t["pfc"]["pause_tx"] == 4 and t["pfc"]["paused_s"] == 0.5
    ports = [pfc_block(pause_rx=2, watchdog_trips=1), pfc_block(pause_rx=3, lossless_drops=1)]
    p = ic.switch_counters(python_stats(port_pfc=ports))
    assert p["pfc"] == pfc_block(pause_rx=5, watchdog_trips=1, lossless_drops=1)


def test_switch_counters_kernel_mode() -> None:
    data = {
        "node": "p0-t0-0",
        "source": "kernel",
        "ports": {"d0": {"qdisc_drops": 4}, "u0": {"qdisc_drops": None}},
    }
    c = ic.switch_counters(data)
    assert c["pfc"] is None and c["drops"] == {"qdisc": 4} and c["trims"] is None


def test_counter_deltas_with_pfc() -> None:
    a = ic.switch_counters(
        python_stats(pfc_totals=pfc_block(pause_tx=4, paused_s=0.25), drops={"queue_full": 2})
    )
    b = ic.switch_counters(
        python_stats(
            pfc_totals=pfc_block(pause_tx=10, pause_rx=3, paused_s=1.0, watchdog_trips=2),
            drops={"queue_full": 2, "not_my_mac": 5},
            trims=4,
            ecn=1,
        )
    )
    row = ic.counter_deltas(a, b)
    assert row["pause_tx"] == 6 and row["pause_rx"] == 3 and row["watchdog_trips"] == 2
    assert row["paused_s"] == pytest.approx(0.75) and row["lossless_drops"] == 0
    assert row["drops"] == {"not_my_mac": 5} and row["drops_total"] == 5
    assert row["trims"] == 4 and row["ecn_marks"] == 1
    assert row["pfc"] is True and row["restarted"] is False


def test_counter_deltas_without_pfc_are_null_and_totals_zero() -> None:
    a = ic.switch_counters(python_stats(trims=1))
    b = ic.switch_counters(python_stats(trims=5, drops={"queue_full": 2}))
    row = ic.counter_deltas(a, b)
    assert all(row[k] is None for k in ic.PFC_KEYS)
    assert row["trims"] == 4 and row["pfc"] is False
    tot = ic.switch_totals({"s1": row, "s2": ic.counter_deltas(a, a)})
    assert tot["pause_tx_total"] == 0 and tot["lossless_drops_total"] == 0
    assert tot["pfc_reported"] is False and tot["drops_total"] == 2 and tot["trims_total"] == 4
    json.dumps(tot)


def test_counter_deltas_restart_counts_from_zero() -> None:
    a = ic.switch_counters(python_stats(pfc_totals=pfc_block(pause_rx=50), trims=9))
    b = ic.switch_counters(python_stats(pfc_totals=pfc_block(pause_rx=7), trims=2, started=200.0))
    row = ic.counter_deltas(a, b)
    assert row["restarted"] is True and row["pause_rx"] == 7 and row["trims"] == 2
    # a counter that went backwards without a known restart is read as one too
    c = ic.switch_counters(python_stats(pfc_totals=pfc_block(pause_rx=3)))
    assert ic.counter_deltas(a, c)["pause_rx"] == 3


def test_counter_deltas_missing_sides() -> None:
    b = ic.switch_counters(python_stats(pfc_totals=pfc_block(pause_tx=2)))
    assert ic.counter_deltas(None, b)["pause_tx"] == 2  # no stats before: all of it
    gone = ic.counter_deltas(b, None)
    assert gone["missing"] is True and gone["pause_tx"] is None and gone["drops_total"] == 0


def test_switch_totals_sum_switches() -> None:
    rows = {
        "a": {**pfc_block(pause_tx=2, paused_s=0.1), "drops_total": 1, "trims": 1, "pfc": True},
        "b": {**pfc_block(pause_tx=3, watchdog_trips=1), "drops_total": 0, "trims": None},
    }
    tot = ic.switch_totals(rows)
    assert tot["pause_tx_total"] == 5 and tot["watchdog_trips_total"] == 1
    assert tot["paused_s_total"] == pytest.approx(0.1) and tot["pfc_reported"] is True


# --- goodput over a window ----------------------------------------------------------------------


def write_result(start: float, rates: list[float], bin_ms: int = 100) -> dict[str, Any]:
    return {
        "start_unix_s": start,
        "timeline_ms": bin_ms,
        "timeline": [[round(i * bin_ms / 1000, 6), r] for i, r in enumerate(rates)],
    }


def test_window_goodput_counts_partial_bins() -> None:
    r = write_result(100.0, [10.0, 20.0, 30.0, 40.0])
    assert ic.window_goodput_bps(r, 100.0, 100.4) == pytest.approx(25.0)
    assert ic.window_goodput_bps(r, 100.05, 100.15) == pytest.approx(15.0)
    assert ic.window_goodput_bps(r, 100.3, 101.3) == pytest.approx(4.0)  # ends at 100.4
    assert ic.window_goodput_bps(r, 101.0, 100.0) is None
    assert ic.window_goodput_bps(None, 0, 1) is None
    assert ic.window_goodput_bps({"timeline": []}, 0, 1) is None


def test_common_window_and_run_window() -> None:
    a = write_result(100.0, [1.0] * 50)  # 100.0 .. 105.0
    b = write_result(101.0, [1.0] * 50)  # 101.0 .. 106.0
    w = ic.common_window([a, b], skip_s=0.5, max_len_s=5.0)
    assert w["window_start_unix_s"] == pytest.approx(101.5)
    assert w["window_s"] == pytest.approx(3.5) and w["start_skew_s"] == pytest.approx(1.0)
    assert ic.common_window([a, None], 0.5, 5.0) is None
    assert ic.common_window([a, write_result(200.0, [1.0])], 0.0, 5.0) is None
    assert ic.run_window(a, 1.0, 3.0) == (101.0, 103.0)
    assert ic.skip_for(10) == 1.0 and ic.skip_for(2) == 0.5


def test_last_progress() -> None:
    text = (
        "mrc-bench:   2.0 s  12 writes      8.4 Mb/s (0.21 of capacity)  retransmissions 0\n"
        "mrc-bench:   3.0 s  30 writes     37.7 Mb/s (0.94 of capacity)  retransmissions 2\n"
    )
    assert ic.last_progress(text) == (3.0, 37.7)
    assert ic.last_progress("mrc-bench write server listening on [::1]:1") is None


# --- the command line and the tables -------------------------------------------------------------


def test_parser_defaults() -> None:
    a = bench.build_parser().parse_args(["incast", "--senders", "h3,h4", "--dst", "h0"])
    assert a.qps == 8 and a.victim is None and a.duration == 10.0 and a.transport == "mrc"
    s = bench.build_parser().parse_args(
        ["pause-storm", "--stuck", "h3", "--flow", "h0:h3", "--flow", "h1:h4", "--seconds", "2"]
    )
    assert s.flow == ["h0:h3", "h1:h4"] and s.seconds == 2.0 and s.interval_ms == 10.0


def incast_result(pfc: bool) -> dict[str, Any]:
    before = {"p0-t0-0": ic.switch_counters(python_stats(pfc_totals=pfc_block() if pfc else None))}
    after = {
        "p0-t0-0": ic.switch_counters(
            python_stats(
                pfc_totals=pfc_block(pause_tx=3, paused_s=0.2) if pfc else None,
                drops={"queue_full": 4},
                trims=2,
            )
        )
    }
    rows = ic.switch_rows(before, after)
    flow = {
        "src": "h3",
        "dst": "h0",
        "role": "incast",
        "goodput_bps": 1e7,
        "verified": True,
        "qp_errors": 0,
    }
    return {
        "scenario": "incast",
        "transport": "mrc",
        "lab": "mrcu",
        "pfc": pfc,
        "switch_mode": "python",
        "planes": 2,
        "port_rate_bps": 2e7,
        "senders": ["h3"],
        "dst": "h0",
        "qps": 8,
        "size": 262144,
        "duration_s": 5.0,
        "flows": [flow, {**flow, "src": "h5", "dst": "h1", "role": "victim"}],
        "victim": {
            "src": "h5",
            "dst": "h1",
            "alone_bps": 2e7,
            "with_incast_bps": 1e7,
            "ratio": 0.5,
        },
        "incast_goodput_bps": 1e7,
        "dst_capacity_bps": 4e7,
        "incast_fraction": 0.25,
        "window_s": 3.5,
        "start_skew_s": 0.4,
        "skip_s": 1.0,
        "switches": rows,
        **ic.switch_totals(rows),
        "qp_errors_total": 0,
        "verified": True,
        "machine_cpu_percent": 50.0,
        "cpu_bound": False,
    }


@pytest.mark.parametrize("pfc", [False, True])
def test_format_incast(pfc: bool) -> None:
    text = ic.format_incast(incast_result(pfc))
    assert "h5 -> h1: alone 20.0 Mb/s, with the incast 10.0 Mb/s: ratio 0.500" in text
    assert "queue_full 4" in text and "verified: yes" in text
    assert ("no switch reported PFC counters" in text) is not pfc


def test_format_storm() -> None:
    res = incast_result(True)
    res.update(
        {
            "scenario": "pause-storm",
            "stuck": "h3",
            "priority": 3,
            "quanta": 65535,
            "pause_frame_s": 1.6777,
            "pauses_sent": 400,
            "pauses_per_port": [200, 200],
            "resumes_sent": 2,
            "send_errors": 0,
            "interval_ms": 10.0,
            "storm_s": 2.0,
            "stuck_t0s": ["p0-t0-1", "p1-t0-1"],
            "stuck_t0_pause_rx": 0,
            "stuck_t0_watchdog_trips": 0,
        }
    )
    res["flows"][0].update({"pre_storm_bps": 2e7, "storm_goodput_bps": 1e7, "storm_ratio": 0.5})
    text = storm.format_storm(res)
    assert "400 PAUSE frames" in text and "(ratio 0.500)" in text
