"""lab/proc/analysis/ on synthetic timelines: capacity after faults, dips, rendering, plot.

These check the arithmetic only; the proof that the NIC keeps going is the lab run
(``make demo``, bench/bench_e2e.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lab.proc import analysis as an
from lab.proc.analysis import FaultWindow, Outage, Shape, Timeline

DEFAULT = Shape(planes=8, t0=2, t1=2, hosts_per_t0=2, rate_bps=100e6)
FULL = 800e6


def steady(seconds: float, bin_s: float, bps: float) -> list[list[float]]:
    n = round(seconds / bin_s)
    return [[i * bin_s, bps] for i in range(n)]


def with_bins(data: list[list[float]], bin_s: float, t0: float, t1: float, bps: float):
    """Set every bin starting in [t0, t1) to bps."""
    return [[t, bps if t0 - 1e-9 <= t < t1 - 1e-9 else g] for t, g in data]


# --- capacity -------------------------------------------------------------------------------


def test_undisturbed_capacity_is_every_plane_at_link_rate() -> None:
    assert an.flow_capacity_bps(DEFAULT, 0, 3) == FULL
    assert an.flow_capacity_bps(DEFAULT, 0, 1) == FULL  # same T0


@pytest.mark.parametrize(
    ("outages", "expected"),
    [
        ([Outage.switch("p3-t1-0")], FULL),  # the other T1 of plane 3 still carries 100
        ([Outage.switch("p3-t1-0"), Outage.switch("p3-t1-1")], 700e6),  # plane 3 is cut
        ([Outage.link("p5-t0-0", "p5-t1-1")], FULL),
        ([Outage.link("p5-t1-1", "p5-t0-0"), Outage.link("p5-t0-1", "p5-t1-0")], 700e6),
        ([Outage.port("h0", 3)], 700e6),  # a NIC port costs its 1/8 share
        ([Outage.port("h3", 3)], 700e6),  # ... at either end
        ([Outage.link("h0", "p2-t0-0")], 700e6),  # host link = NIC port
        ([Outage.switch("p1-t0-1")], 700e6),  # the destination's T0 in plane 1
        ([Outage.loss("p0-t0-0", "p0-t1-0")], FULL),  # loss does not remove capacity
        ([Outage.port("h0", 0), Outage.port("h0", 1), Outage.switch("p2-t1-0")], 600e6),
    ],
)
def test_capacity_after_faults(outages: list[Outage], expected: float) -> None:
    assert an.flow_capacity_bps(DEFAULT, 0, 3, outages) == pytest.approx(expected)


def test_one_t1_per_plane_makes_a_t1_reboot_cost_a_plane() -> None:
    shape = Shape(planes=4, t0=2, t1=1, hosts_per_t0=1, rate_bps=100e6)
    assert an.flow_capacity_bps(shape, 0, 1, [Outage.switch("p2-t1-0")]) == 300e6
    # A T1 is not on the path of a flow under one T0.
    shape2 = Shape(planes=4, t0=1, t1=1, hosts_per_t0=2, rate_bps=100e6)
    assert an.flow_capacity_bps(shape2, 0, 1, [Outage.switch("p2-t1-0")]) == 400e6


def test_bad_names_are_refused() -> None:
    with pytest.raises(ValueError):
        an.flow_capacity_bps(DEFAULT, 0, 3, [Outage.switch("spine1")])
    with pytest.raises(ValueError):
        an.flow_capacity_bps(DEFAULT, 0, 3, [Outage.link("p0-t0-0", "p1-t1-0")])
    with pytest.raises(ValueError):
        an.flow_capacity_bps(DEFAULT, 0, 3, [Outage.link("p0-t0-0", "p0-t0-1")])


def test_capacity_fn_follows_the_schedule_and_scales_to_the_bench_figure() -> None:
    faults = [FaultWindow("port down h0 3", 5.0, 10.0, Outage.port("h0", 3))]
    cap = an.capacity_fn(DEFAULT, 0, 3, faults, full_bps=780e6)
    assert cap(4.99) == pytest.approx(780e6)
    assert cap(5.0) == pytest.approx(780e6 * 7 / 8)
    assert cap(10.0) == pytest.approx(780e6)


@settings(max_examples=40, deadline=None)
@given(
    planes=st.integers(1, 8),
    t0=st.integers(2, 4),
    hpt=st.integers(1, 4),
    t1=st.integers(1, 4),
)
def test_permutation_crosses_t0s_and_is_a_permutation(planes, t0, hpt, t1) -> None:
    shape = Shape(planes, t0, t1, hpt, 10e6)
    pairs = an.permutation_pairs(shape)
    srcs = [s for s, _ in pairs]
    dsts = [d for _, d in pairs]
    assert sorted(srcs) == sorted(dsts) == list(range(shape.host_count))
    assert all(shape.host_t0(s) != shape.host_t0(d) for s, d in pairs)
    cap = an.permutation_capacity_bps(shape, pairs)
    ideal = shape.host_count * shape.full_bps
    assert cap <= ideal + 1e-6
    # Non-blocking (as many T1s as hosts per T0) means every host at its full NIC rate.
    assert math.isclose(cap, ideal) == (t1 >= hpt)


@settings(max_examples=30, deadline=None)
@given(planes=st.integers(1, 4), t0=st.integers(2, 5), hpt=st.integers(1, 4))
def test_one_way_pairs_never_make_a_host_send_and_receive(planes, t0, hpt) -> None:
    shape = Shape(planes, t0, hpt, hpt, 10e6)
    pairs = an.permutation_pairs(shape, one_way=True)
    srcs = {s for s, _ in pairs}
    dsts = {d for _, d in pairs}
    assert not srcs & dsts
    assert len(srcs) == len(pairs) == len(dsts) == (t0 // 2) * hpt
    assert all(shape.host_t0(d) == shape.host_t0(s) + 1 for s, d in pairs)
    assert an.permutation_capacity_bps(shape, pairs) == pytest.approx(len(pairs) * shape.full_bps)


def test_permutation_needs_two_t0s() -> None:
    with pytest.raises(ValueError):
        an.permutation_pairs(Shape(8, 1, 2, 4, 1e6))


# --- dips -----------------------------------------------------------------------------------


def run(data, faults, full=FULL, **kw):
    tl = Timeline.from_json(data)
    cap = an.capacity_fn(DEFAULT, 0, 3, faults, full_bps=full)
    return tl, an.analyse(tl, cap, faults, **kw)


def test_dip_depth_and_duration() -> None:
    data = steady(20, 0.25, 0.95 * FULL)
    data = with_bins(data, 0.25, 8.0, 8.5, 0.375 * FULL)
    faults = [FaultWindow("reboot p3-t1-0", 8.0, 10.0, Outage.switch("p3-t1-0"))]
    tl, a = run(data, faults)
    assert tl.bin_s == pytest.approx(0.25)
    assert a.baseline_fraction == pytest.approx(0.95)
    assert a.threshold == pytest.approx(0.9)
    d = a.dips[0]
    assert d.label == "reboot p3-t1-0" and d.kind == "fault"
    assert d.lowest_fraction == pytest.approx(0.375)
    assert d.duration_s == pytest.approx(0.5)
    assert d.recovered
    assert d.window_s == pytest.approx(12.0)  # no further fault: to the end of the run
    repair = a.dips[1]
    assert repair.kind == "repair" and repair.duration_s == 0


def test_fault_mid_bin_counts_from_the_fault() -> None:
    data = with_bins(steady(10, 0.25, 0.95 * FULL), 0.25, 4.0, 4.5, 0.2 * FULL)
    faults = [FaultWindow("link down", 4.1, None, Outage.link("p0-t0-0", "p0-t1-0"))]
    _, a = run(data, faults)
    assert a.dips[0].duration_s == pytest.approx(0.4)  # back at 4.5


def test_no_dip_is_zero_duration_and_reports_the_lowest_bin() -> None:
    data = with_bins(steady(10, 0.25, 0.95 * FULL), 0.25, 5.0, 5.25, 0.92 * FULL)
    faults = [FaultWindow("link down", 5.0, 7.0, Outage.link("p0-t0-0", "p0-t1-0"))]
    _, a = run(data, faults)
    d = a.dips[0]
    assert d.duration_s == 0 and d.recovered
    assert d.lowest_fraction == pytest.approx(0.92)
    assert "no dip" in an.describe_dip(d)


def test_never_recovering_is_reported_with_the_time_looked() -> None:
    data = with_bins(steady(10, 0.25, 0.95 * FULL), 0.25, 6.0, 99, 0.0)
    faults = [FaultWindow("reboot", 6.0, 7.0, Outage.switch("p0-t1-0"))]
    _, a = run(data, faults)
    d = a.dips[0]
    assert not d.recovered
    assert d.lowest_fraction == 0
    assert d.duration_s == pytest.approx(4.0) == d.window_s
    assert "NOT back" in an.describe_dip(d)


def test_an_event_after_the_run_is_not_observed() -> None:
    data = steady(5, 0.25, 0.95 * FULL)
    faults = [FaultWindow("late", 7.0, None, Outage.switch("p0-t1-0"))]
    _, a = run(data, faults)
    assert not a.dips[0].observed and not a.dips[0].recovered
    assert "not observed" in an.describe_dip(a.dips[0])


def test_a_port_loss_is_measured_against_the_surviving_seven_eighths() -> None:
    # 0.95 of 7/8 after the port goes: 0.83 of the full fabric, but no dip.
    data = steady(10, 0.25, 0.95 * FULL)
    data = [[t, g * 7 / 8 if t >= 5.0 else g] for t, g in data]
    faults = [FaultWindow("port down h0 3", 5.0, None, Outage.port("h0", 3))]
    _, a = run(data, faults)
    d = a.dips[0]
    assert d.capacity_bps == pytest.approx(700e6)
    assert d.duration_s == 0
    assert d.lowest_fraction == pytest.approx(0.95)


def test_a_run_below_ninety_percent_is_judged_against_its_own_level() -> None:
    data = steady(10, 0.25, 0.7 * FULL)
    data = with_bins(data, 0.25, 5.0, 5.75, 0.3 * FULL)
    faults = [FaultWindow("reboot", 5.0, None, Outage.switch("p0-t1-0"))]
    _, a = run(data, faults)
    assert a.threshold == pytest.approx(0.9 * 0.7)
    assert a.dips[0].duration_s == pytest.approx(0.75)
    assert a.dips[0].recovered


def test_a_late_single_bad_bin_is_noise_not_the_faults_dip() -> None:
    data = with_bins(steady(20, 0.25, 0.95 * FULL), 0.25, 12.0, 12.25, 0.1 * FULL)
    faults = [FaultWindow("link down", 5.0, None, Outage.link("p0-t0-0", "p0-t1-0"))]
    _, a = run(data, faults)
    assert a.dips[0].duration_s == 0


def test_recovery_must_hold() -> None:
    data = steady(20, 0.25, 0.95 * FULL)
    for t0, t1, g in ((5.0, 5.5, 0.1), (5.75, 6.5, 0.1)):  # one good bin at 5.5, then bad again
        data = with_bins(data, 0.25, t0, t1, g * FULL)
    faults = [FaultWindow("reboot", 5.0, None, Outage.switch("p0-t1-0"))]
    _, a = run(data, faults, hold_bins=2)
    assert a.dips[0].duration_s == pytest.approx(1.5)
    _, a1 = run(data, faults, hold_bins=1)
    assert a1.dips[0].duration_s == pytest.approx(0.5)


def test_a_faults_window_ends_at_the_next_fault_and_repairs_are_separate() -> None:
    data = steady(30, 0.25, 0.95 * FULL)
    data = with_bins(data, 0.25, 8.0, 10.5, 0.4 * FULL)  # slow: past its own repair at 10.0
    data = with_bins(data, 0.25, 22.0, 22.25, 0.5 * FULL)  # a dip when the link comes back
    faults = [
        FaultWindow("reboot p3-t1-0", 8.0, 10.0, Outage.switch("p3-t1-0"), "p3-t1-0 back"),
        FaultWindow("link down", 16.0, 22.0, Outage.link("p5-t0-0", "p5-t1-1"), "link up"),
    ]
    _, a = run(data, faults)
    labels = [(d.label, d.kind) for d in a.dips]
    # The reboot's dip lasts past its repair, so that repair has no dip of its own.
    assert labels == [("reboot p3-t1-0", "fault"), ("link down", "fault"), ("link up", "repair")]
    assert a.dips[0].duration_s == pytest.approx(2.5)
    assert a.dips[0].window_s == pytest.approx(8.0)
    assert a.dips[1].duration_s == 0
    assert a.dips[2].duration_s == pytest.approx(0.25)
    assert a.dips[2].lowest_fraction == pytest.approx(0.5)


def test_a_repair_after_recovery_has_its_own_dip() -> None:
    data = steady(20, 0.25, 0.95 * FULL)
    data = with_bins(data, 0.25, 5.0, 5.5, 0.4 * FULL)
    data = with_bins(data, 0.25, 9.0, 9.75, 0.6 * FULL)
    faults = [FaultWindow("down", 5.0, 9.0, Outage.switch("p0-t1-0"), "back")]
    _, a = run(data, faults)
    assert [(d.label, d.kind, d.duration_s) for d in a.dips] == [
        ("down", "fault", 0.5),
        ("back", "repair", 0.75),
    ]


def test_baseline_skips_the_warm_up() -> None:
    data = steady(10, 0.5, 0.95 * FULL)
    data[0][1] = 0.0
    data[1][1] = 0.1 * FULL
    data[2][1] = 0.5 * FULL
    faults = [FaultWindow("x", 8.0, None, Outage.switch("p0-t1-0"))]
    _, a = run(data, faults, warmup_s=1.0)
    assert a.baseline_fraction == pytest.approx(0.95)


@settings(max_examples=60, deadline=None)
@given(
    vals=st.lists(st.floats(0, 1.1), min_size=8, max_size=60),
    t_fault=st.floats(0, 10),
    scale=st.floats(0.1, 10),
)
# a bin exactly at the threshold, which rounding once put below it at another scale
@example(vals=[0.0] * 7 + [0.9], t_fault=0.0, scale=6.679548666372627)
def test_dip_invariants(vals: list[float], t_fault: float, scale: float) -> None:
    bin_s = 0.25
    data = [[i * bin_s, v * FULL] for i, v in enumerate(vals)]
    faults = [FaultWindow("f", t_fault, None, Outage.switch("p0-t1-0"))]
    tl, a = run(data, faults)
    for d in a.dips:
        assert 0 <= d.duration_s <= d.window_s + 1e-9
        if d.duration_s > 0:
            assert d.lowest_fraction < d.threshold
        if not d.recovered:
            assert d.duration_s == pytest.approx(d.window_s)
    # The same shape at another scale (goodput and capacity alike) gives the same dips.
    scaled = [[t, g * scale] for t, g in data]
    _, b = run(scaled, faults, full=FULL * scale)
    assert [d.duration_s for d in a.dips] == [d.duration_s for d in b.dips]
    assert [d.lowest_fraction for d in a.dips] == pytest.approx([d.lowest_fraction for d in b.dips])


def test_all_good_bins_mean_no_dip() -> None:
    data = steady(12, 0.25, 0.97 * FULL)
    faults = [FaultWindow("f", t, None, Outage.switch("p0-t1-0")) for t in (3.0, 6.0, 9.0)]
    _, a = run(data, faults)
    assert all(d.duration_s == 0 and d.recovered for d in a.dips)
    assert a.mean_fraction == pytest.approx(0.97)


# --- timelines ------------------------------------------------------------------------------


def test_timeline_from_json_infers_the_bin_and_shifts() -> None:
    tl = Timeline.from_json([[0.0, 1], [0.1, 2], [0.2, 3]])
    assert tl.bin_s == pytest.approx(0.1)
    assert tl.end_s == pytest.approx(0.3)
    assert tl.shifted(0.05).points[0][0] == pytest.approx(-0.05)
    assert tl.to_json() == [[0.0, 1], [0.1, 2], [0.2, 3]]
    with pytest.raises(ValueError):
        Timeline.from_json([[0, 1]], bin_s=0)


def test_sum_timelines_adds_bins_and_refuses_mixed_widths() -> None:
    a = Timeline(0.5, ((0.0, 1.0), (0.5, 2.0)))
    b = Timeline(0.5, ((0.5, 10.0), (1.0, 20.0)))
    s = an.sum_timelines([a, b])
    assert s.points == ((0.0, 1.0), (0.5, 12.0), (1.0, 20.0))
    with pytest.raises(ValueError):
        an.sum_timelines([a, Timeline(0.25, ())])


def test_aggregate_of_parallel_runs() -> None:
    runs = [
        {
            "goodput_bps": 90,
            "capacity_bps": 100,
            "goodput_fraction": 0.9,
            "verified": True,
            "qp_errors": 0,
            "bytes": 10,
            "duration_s": 1.0,
            "cpu_percent": 50,
        },
        {
            "goodput_bps": 50,
            "capacity_bps": 100,
            "goodput_fraction": 0.5,
            "verified": False,
            "qp_errors": 1,
            "bytes": 5,
            "duration_s": 2.0,
            "cpu_percent": 30,
        },
    ]
    agg = an.aggregate(runs)
    assert agg["goodput_fraction"] == pytest.approx(0.7)
    assert agg["min_pair_fraction"] == pytest.approx(0.5)
    assert agg["verified"] is False
    assert agg["qp_errors"] == 1
    assert agg["bytes"] == 15
    assert agg["cpu_percent"] == pytest.approx(80)
    with pytest.raises(ValueError):
        an.aggregate([])


# --- text rendering -------------------------------------------------------------------------


def test_resample_keeps_means() -> None:
    assert an.resample([1, 3, 5, 7], 2) == [2, 6]
    assert an.resample([1, 2], 4) == [1, 1, 2, 2]
    assert an.resample([], 4) == []


def test_bars_are_width_wide_and_monotone_in_height() -> None:
    lines = an.bars([0.0, 0.5, 1.0, 2.0], 4, rows=2)
    assert len(lines) == 2
    assert len(lines[1]) == 4
    top, bottom = lines
    assert bottom[0] == " " and bottom[2] == "█" and bottom[3] == "█"
    assert top[2] == "█" and top[3] == "█"  # 2.0 is clipped to full
    assert an.bars([0.5], 1, rows=1, unicode=False)[0] in an.ASCII_BLOCKS


def test_marker_and_axis_lines() -> None:
    m = an.marker_line([(0.0, "R"), (15.0, "D"), (30.0, "U")], 30.0, 60)
    assert len(m) == 60 and m[0] == "R" and m[30] == "D" and m[59] == "U"
    ax = an.axis_line(30.0, 60)
    assert ax.startswith("0s") and "10s" in ax and len(ax) <= 68


def test_can_encode() -> None:
    assert an.can_encode("█", "utf-8")
    assert not an.can_encode("█", "ascii")
    assert not an.can_encode("█", "no-such-codec")


def test_plot_writes_a_png(tmp_path) -> None:
    data = with_bins(steady(6, 0.25, 0.95 * FULL), 0.25, 3.0, 3.5, 0.2 * FULL)
    faults = [FaultWindow("reboot p3-t1-0", 3.0, 4.0, Outage.switch("p3-t1-0"))]
    tl, a = run(data, faults)
    out = tmp_path / "t.png"
    an.plot_timelines(
        [an.PlotSeries("MRC", tl, a.capacities_bps, a.threshold)] * 2, faults, str(out), "demo"
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_overlap_aggregate_counts_only_the_common_window() -> None:
    # Two writes of 4 s, 1 s apart, 10 and 20 b/s, capacity 100 each: overlap [1, 4) s.
    a = (100.0, 0.5, [[i * 0.5, 10.0] for i in range(8)], 100.0)
    b = (101.0, 0.5, [[i * 0.5, 20.0] for i in range(8)], 100.0)
    agg = an.overlap_aggregate([a, b])
    assert agg["window_s"] == pytest.approx(3.0)
    assert agg["window_start_unix_s"] == pytest.approx(101.0)
    assert agg["start_skew_s"] == pytest.approx(1.0)
    assert agg["goodput_bps"] == pytest.approx(30.0)
    assert agg["goodput_fraction"] == pytest.approx(0.15)
    # A bin half inside the window counts half.
    c = (100.25, 0.5, [[i * 0.5, 40.0] for i in range(8)], 100.0)
    agg2 = an.overlap_aggregate([a, c], skip_s=0.0)
    assert agg2["window_s"] == pytest.approx(3.75)
    assert agg2["goodput_bps"] == pytest.approx(50.0)
    assert an.overlap_aggregate([a, (200.0, 0.5, [[0, 1.0]], 1.0)]) is None
    # Cut at 3 s of each run: the window is [101, 103).
    agg3 = an.overlap_aggregate([a, b], max_len_s=3.0)
    assert agg3["window_s"] == pytest.approx(2.0)
    assert an.overlap_aggregate([]) is None


def test_cpu_meter_busy_between_uses_the_samples_inside_the_window() -> None:
    from lab.proc.cpu import ChildrenCpuMeter as CpuMeter

    m = CpuMeter(None)  # type: ignore[arg-type]  # busy_between needs only the samples
    # (unix time, busy jiffies, total jiffies, CPU pressure us): idle until t=2, then fully
    # busy, with a task waiting for a CPU a quarter of the time from t=3
    m.samples = [(0.0, 0, 0, 0), (1.0, 0, 100, 0), (2.0, 0, 200, 0), (3.0, 100, 300, 0),
                 (4.0, 200, 400, 250_000)]  # fmt: skip
    assert m.busy_between(2.0, 4.0) == pytest.approx(1.0)
    assert m.busy_between(0.5, 2.5) == pytest.approx(0.0)  # from t=1 to t=2
    assert m.busy_between(1.0, 3.0) == pytest.approx(0.5)
    assert m.busy_between(3.5, 3.9) is None  # no two samples inside
    assert m.pressure_between(3.0, 4.0) == pytest.approx(0.25)
    assert m.pressure_between(2.0, 4.0) == pytest.approx(0.125)
    assert m.pressure_between(3.5, 3.9) is None
    m.samples = [(0.0, 0, 0, None), (1.0, 0, 100, None)]  # a kernel without PSI
    assert m.pressure_between(0.0, 1.0) is None
