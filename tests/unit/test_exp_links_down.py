"""Claim 5 (links_down): the link schedule, the run's figures and the verdict, synthetic."""

from __future__ import annotations

import pytest

from lab.proc import analysis as an
from lab.workloads.experiments import links_down as ld

BIN = 0.25


def test_default_lab_takes_30_of_32_links_and_keeps_the_t0s_connected() -> None:
    links, n_abs = ld.link_order(8, 2, 2)
    assert len(links) == 30 and n_abs == 16
    assert len(set(links)) == 30
    shape = an.Shape(8, 2, 2, 2, 1.0)
    outages = []
    caps = []
    for p, i, j in links:
        outages.append(an.Outage.link(f"p{p}-t0-{i}", f"p{p}-t1-{j}"))
        caps.append(an.flow_capacity_bps(shape, 0, 3, outages))
    assert caps[:n_abs] == [8.0] * n_abs  # the fabric absorbs the first 16
    assert caps[-1] == 1.0  # one plane left: every T0 still connected
    assert all(b <= a for a, b in zip(caps, caps[1:], strict=False))
    # consecutive faults hit different planes
    assert all(a[0] != b[0] for a, b in zip(links[:n_abs], links[1:n_abs], strict=False))


def test_small_lab_order() -> None:
    links, n_abs = ld.link_order(2, 2, 2)
    assert n_abs == 4 and len(links) == 6
    assert (1, 0, 0) not in links and (1, 1, 0) not in links  # plane 1 keeps T1 0


def test_schedule_times() -> None:
    links, _ = ld.link_order(2, 2, 2)
    steps, all_up = ld.schedule(links, 2.0, 1.0, 1.0, 0.25)
    assert [s.at_s for s in steps] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert [s.undo_s for s in steps] == [8.0, 8.25, 8.5, 8.75, 9.0, 9.25]
    assert all_up == 9.25
    assert steps[0].a == "p0-t0-0" and steps[0].b == "p0-t1-0"


def test_timing_fits_the_quick_budget() -> None:
    links, _ = ld.link_order(**{k: v for k, v in ld.shape(True).items() if k != "hosts_per_t0"})
    tm = ld.timing(True, len(links))
    assert len(links) == 14 and tm["last_down"] == 8.5 and tm["duration"] <= 16
    full = ld.timing(False, 30)
    assert full["duration"] <= 50


def test_padded_and_stall() -> None:
    tl = [[0.0, 5.0], [0.25, 5.0]]
    p = ld.padded(tl, BIN, 1.0)
    assert [x[0] for x in p] == [0.0, 0.25, 0.5, 0.75] and p[-1][1] == 0.0
    full = [[k * BIN, 1.0] for k in range(6)]
    assert ld.padded(full, BIN, 1.0) == full[:4]  # the tail after the planned end dropped
    series = [[k * BIN, 0.0 if 8 <= k < 14 else 1.0] for k in range(20)]
    assert ld.longest_stall(series, BIN, 0, 5) == pytest.approx(1.5)
    assert ld.longest_stall(series, BIN, 0, 2.5) == pytest.approx(0.5)


def test_rolling_min_and_phase_fraction() -> None:
    tl = [[k * BIN, 10.0] for k in range(8)]
    tl[5][1] = 0.0
    caps = [10.0] * 8
    assert ld.rolling_min(tl, caps, 0, 2, 4) == pytest.approx(0.75)
    assert ld.phase_fraction(tl, caps, 0, 1) == pytest.approx(1.0)
    assert ld.rolling_min(tl, caps, 0, 0.5, 4) is None  # too short for one window


def test_summarise_tracks_surviving_capacity() -> None:
    # capacity halves at 4 s; goodput follows it: every phase at 1.0 of before
    def cap(t: float) -> float:
        return 100.0 if t < 4 else 50.0

    tl = [[k * BIN, (0.9 * cap(k * BIN))] for k in range(40)]
    s = ld.summarise(tl, BIN, cap, [4.0], 2.0, 4.0, 7.0, 8.0, 10.0)
    assert s["fraction_before"] == pytest.approx(0.9)
    for k in ("rel_absorbed", "rel_shrinking", "rel_down", "rel_lowest_1s",
              "rel_lowest_1s_repair"):  # fmt: skip
        assert s[k] == pytest.approx(1.0)
    assert s["longest_stall_s"] == 0 and s["stall_after_first_fault_s"] is None


def test_summarise_job_that_died() -> None:
    tl = [[k * BIN, 100.0] for k in range(16)]  # ended at 4 s (a QP error)
    s = ld.summarise(tl, BIN, lambda t: 100.0, [], 2.0, 3.0, 6.0, 8.0, 10.0)
    assert s["stall_after_first_fault_s"] == pytest.approx(2.0)
    assert s["rel_lowest_1s"] == 0.0
    assert s["rel_down"] == pytest.approx(2 / 6)


def _m(rel: float, low: float, **kw: object) -> dict:
    return {"rel_down": rel, "rel_lowest_1s": low, "verified": True, "qp_errors": 0,
            "fraction_before": 0.95, **kw}  # fmt: skip


def test_judge() -> None:
    ro = {"rel_down": 0.2, "qp_errors": 1, "stall_after_first_fault_s": 4.0}
    assert ld.judge(_m(0.97, 0.9), ro, 30, 32)[0] == "reproduced"
    assert ld.judge(_m(0.97, 0.5), ro, 30, 32)[0] == "partly"  # a deep dip
    assert ld.judge(_m(0.97, 0.9, qp_errors=1), ro, 30, 32)[0] == "partly"
    assert ld.judge(_m(0.3, 0.0, longest_stall_s=5.0), ro, 30, 32)[0] == "not reproduced"
    assert ld.judge({"rel_down": None}, ro, 30, 32)[0] == "not reproduced"
    why = ld.judge(_m(0.3, 0.0, longest_stall_s=5.0), ro, 30, 32)[1]
    assert "30 of 32" in why and "5.000 s" in why and "stopped moving 4.0 s" in why
    assert "one per second" in why
    assert "one every 0.5 s" in ld.judge(_m(0.97, 0.9), ro, 14, 16, 0.5)[1]


def test_a_dip_while_links_come_back_is_reported_apart() -> None:
    tl = [[k * BIN, 0.0 if 30 <= k < 34 else 90.0] for k in range(48)]  # 7.5-8.5 s: nothing
    s = ld.summarise(tl, BIN, lambda t: 100.0, [], 2.0, 4.0, 7.0, 9.0, 12.0)
    assert s["rel_lowest_1s"] == pytest.approx(1.0)  # links going down: no dip
    assert s["rel_lowest_1s_repair"] == 0.0
