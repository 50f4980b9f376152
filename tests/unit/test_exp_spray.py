"""Claim 2 (spray) without a lab: the uplinks' imbalance, one repetition's aggregate over
the window all pairs wrote, the tier summary and the verdict's thresholds."""

from __future__ import annotations

import pytest

from lab.workloads.experiments import spray as ex


def test_imbalance_and_uplink_deltas():
    assert ex.imbalance([10, 10, 10, 10]) == pytest.approx(1.0)
    assert ex.imbalance([40, 0, 0, 0]) == pytest.approx(4.0)  # one uplink carried it all
    assert ex.imbalance([]) is None and ex.imbalance([0, 0]) is None
    before = {"p0-t0-0": {"u0": 100.0, "u1": 50.0}}
    after = {"p0-t0-0": {"u0": 300.0, "u1": 20.0}, "p1-t0-0": {"u0": 7.0}}
    # u1 went backwards (a restart): counts from 0; a switch unseen before counts whole
    assert sorted(ex.uplink_deltas(before, after)) == [7.0, 20.0, 200.0]


def _write(start: float, bps: float, cap: float = 10e6, secs: float = 6.0, **kw) -> dict:
    return {
        "start_unix_s": start,
        "timeline_ms": 250,
        "timeline": [[i * 0.25, bps] for i in range(int(secs * 4))],
        "capacity_bps": cap,
        "goodput_bps": bps,
        "bytes": int(bps / 8 * secs),
        "duration_s": secs,
        "retransmissions": kw.get("retx", 0),
        "verified": kw.get("verified", True),
        "qp_errors": kw.get("qp_errors", 0),
        "cpu_bound": kw.get("cpu_bound", False),
    }


def test_summarise_rep_reads_the_window_all_pairs_wrote():
    rs = [_write(100.0, 9.5e6), _write(100.2, 9.5e6), _write(100.1, 4.75e6)]
    s = ex.summarise_rep(rs, [10.0, 10.0, 10.0, 30.0], secs=6.0)
    assert s["utilisation"] == pytest.approx((9.5 + 9.5 + 4.75) / 30)
    assert s["pair_fractions"] == pytest.approx([0.95, 0.95, 0.475])
    assert s["jain"] < 1.0 and s["link_imbalance"] == pytest.approx(2.0)
    assert s["start_skew_s"] == pytest.approx(0.2) and s["verified"]
    # a pair that printed nothing carried nothing, and the run is not verified
    s2 = ex.summarise_rep([_write(100.0, 9.5e6), None], [1.0], secs=6.0)
    assert s2["utilisation"] == pytest.approx(9.5 / 20) and not s2["verified"]
    assert s2["missing_pairs"] == 1


def _tier(u: float, cpu: bool = False) -> dict:
    reps = [ex.summarise_rep([_write(0.0, u * 10e6, cpu_bound=cpu)], [1.0, 1.0], secs=6.0)]
    return ex.summarise_tier(reps)


def test_summarise_tier_medians_and_cv():
    reps = [ex.summarise_rep([_write(0.0, x * 10e6)], [1.0], secs=6.0) for x in (0.9, 0.95, 1.0)]
    t = ex.summarise_tier(reps)
    assert t["utilisation"] == pytest.approx(0.95) and t["cv"] is not None
    assert ex.summarise_tier([]) == {"runs": []}


def test_verdict_thresholds():
    assert ex.judge({"mrc": _tier(0.95), "rocev2_hash": _tier(0.55)})[0] == "reproduced"
    assert ex.judge({"mrc": _tier(0.86), "rocev2_hash": _tier(0.55)})[0] == "partly"
    assert ex.judge({"mrc": _tier(0.95), "rocev2_hash": _tier(0.80)})[0] == "partly"
    v, why = ex.judge({"mrc": _tier(0.70, cpu=True), "rocev2_hash": _tier(0.65)})
    assert v == "not reproduced" and "CPU-bound runs in: mrc" in why
    assert ex.judge({"mrc": _tier(0.95), "rocev2_hash": {}})[0] == "not reproduced"


def test_fabrics_keep_the_capacity_equal():
    multi = ex.LabParams(name="mrcu", rate_mbit=10.0, **ex.SHAPE)
    f = ex.fabrics(multi)
    assert f["single"].planes == 1 and f["single"].rate_mbit == pytest.approx(80.0)
    assert f["multi_pfc"].pfc and not f["multi"].pfc
