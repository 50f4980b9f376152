"""Claim 4 (incast) without a lab: the hosts it picks, the victim's worst second from its
timeline, one run's and one tier's summary, and the verdict's thresholds."""

from __future__ import annotations

import pytest

from lab.workloads.experiments import incast as ex


def test_hosts_of_the_7_to_1_incast_and_its_victim():
    h = ex.incast_hosts(2, 5)
    assert h["dst"] == 0 and h["victim"] == (9, 1)
    assert h["senders"] == [2, 3, 4, 5, 6, 7, 8]  # T0 1's other hosts, then h0's neighbours
    assert h["dst"] not in h["senders"] and not set(h["victim"]) & set(h["senders"])
    q = ex.incast_hosts(2, 3, 3)  # the quick form: 3:1 on 6 hosts
    assert q == {"dst": 0, "senders": [2, 3, 4], "victim": (5, 1)}
    with pytest.raises(ValueError):
        ex.incast_hosts(2, 3, 7)
    with pytest.raises(ValueError):
        ex.incast_hosts(1, 5)


def test_worst_interval_finds_the_lowest_second():
    # 100 ms bins from t=0: 10 Mb/s, then one second at 2 Mb/s from 3 s, then 10 again
    tl = [[i / 10, 2e6 if 30 <= i < 40 else 10e6] for i in range(80)]
    start = 1000.0
    w = ex.worst_interval_bps(tl, start, start + 1, start + 7, 0.1)
    assert w == pytest.approx(2e6)
    # a window shorter than the interval has no worst second
    assert ex.worst_interval_bps(tl, start, start + 1, start + 1.5, 0.1) is None
    assert ex.worst_interval_bps(None, start, start, start + 5, 0.1) is None
    # a partly overlapping bin counts in proportion
    assert ex.windowed_rate([[0.0, 10e6]], 0.0, 0.05, 0.15, 0.1) == pytest.approx(5e6)


def _run(ratio: float, alone: float = 20e6, cpu: bool = False) -> dict:
    start = 100.0
    tl = [[i / 10, alone * ratio] for i in range(60)]
    return {
        "victim": {
            "alone_bps": alone,
            "with_incast_bps": alone * ratio,
            "ratio": ratio,
            "timeline_ms": 100,
            "start_unix_s": start,
            "timeline": tl,
        },
        "window_start_unix_s": start + 1.0,
        "window_s": 4.0,
        "incast_fraction": 0.97,
        "flows": [
            {"role": "incast", "goodput_bps": 5e6, "retransmissions": 3, "bytes": 4096 * 100},
            {"role": "incast", "goodput_bps": 5e6, "retransmissions": 1, "bytes": 4096 * 100},
            {"role": "victim", "goodput_bps": alone * ratio, "retransmissions": 0, "bytes": 0},
        ],
        "pause_tx_total": 0,
        "drops_total": 0,
        "trims_total": 12,
        "verified": True,
        "qp_errors_total": 0,
        "cpu_bound": cpu,
    }


def test_summarise_run_and_tier():
    s = ex.summarise_run(_run(0.5))
    assert s["victim_ratio"] == 0.5
    assert s["victim_worst_1s_ratio"] == pytest.approx(0.5)
    assert s["incast_jain"] == pytest.approx(1.0)
    assert s["retransmissions"] == 4 and s["retx_rate"] == pytest.approx(4 / 200)
    t = ex.summarise_tier([s, ex.summarise_run(_run(0.7))])
    assert t["victim_ratio"] == pytest.approx(0.6)
    assert t["victim_worst_1s_ratio"] == pytest.approx(0.5)  # the worst over all reps
    assert t["cv"] is not None and t["verified"] and t["qp_errors"] == 0
    assert ex.summarise_tier([]) == {"runs": []}


def _tiers(mrc: float, roce: float, cpu: bool = False) -> dict:
    return {
        "mrc": ex.summarise_tier([ex.summarise_run(_run(mrc, cpu=cpu))]),
        "rocev2_pfc": ex.summarise_tier([ex.summarise_run(_run(roce))]),
        "rocev2": ex.summarise_tier([]),
    }


def test_verdict_thresholds():
    assert ex.judge(_tiers(0.97, 0.40))[0] == "reproduced"
    assert ex.judge(_tiers(0.97, 0.95))[0] == "partly"  # RoCEv2's victim not harmed
    assert ex.judge(_tiers(0.80, 0.40))[0] == "partly"  # MRC's victim touched, still better
    assert ex.judge(_tiers(0.60, 0.70))[0] == "not reproduced"
    v, why = ex.judge(_tiers(0.50, 0.45, cpu=True))  # both harmed alike
    assert v == "not reproduced" and "CPU-bound runs in: mrc" in why
    assert ex.judge({"mrc": {}, "rocev2_pfc": {}, "rocev2": {}})[0] == "not reproduced"


def test_mrc_qps_that_failed_cap_the_verdict_at_partly():
    """2026-11-29, 0.65 Mb/s: the victim kept 0.95, but 37 of MRC's incast QPs failed."""
    t = _tiers(0.97, 0.40)
    t["mrc"] = {**t["mrc"], "qp_errors": 37, "incast_fraction": 0.07}
    verdict, why = ex.judge(t)
    assert verdict == "partly"
    assert "MRC's own QPs failed (37 QP errors, incast 0.07" in why
