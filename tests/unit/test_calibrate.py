"""The lab's calibration and mrc-bench's cpu_bound flag: pure parts, no root, no lab."""

from __future__ import annotations

import argparse
import json
import math
import time

import pytest

from lab.bench_cli import format_pair
from lab.fabric.netns import LabError
from lab.fabric.params import LabParams
from lab.proc import cpu
from lab.workloads import calibrate as cal


def meas(rate=100.0, fps=20_000.0, busy=0.94, idle=0.04, nic=0.40, flows=1, **kw):
    dur = 2.0
    return cal.Measurement(
        rate_mbit=rate,
        planes=kw.pop("planes", 8),
        flows=flows,
        duration_s=dur,
        frames=round(fps * dur),
        frame_bytes=kw.pop("frame_bytes", 4202.0),
        cpus=kw.pop("cpus", 2),
        machine_busy=busy,
        idle_busy=idle,
        nic_core_max=nic,
        **kw,
    )


# --- cpu_bound ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "nic", "pressure", "switch", "bound"),
    [
        (0.84, 0.89, 0.13, 0.89, False),
        (0.85, 0.10, None, None, True),  # machine at the threshold
        (0.10, 0.90, None, None, True),  # one NIC process at the threshold
        (0.10, 0.10, 0.14, None, True),  # a task waited for a CPU 14% of the time
        (0.10, 0.10, None, 0.90, True),  # the (shared) switch process at a core
        (0.81, 0.88, 0.20, None, True),  # busy, not saturated: the wait for a CPU shows it
        (0.76, 0.48, 0.25, 0.53, True),  # 2 planes at 1 Gb/s: 0.29 of capacity (docs/bench.md)
        (None, 0.95, None, None, True),
        (0.99, None, None, None, True),
        (None, None, None, None, False),  # nothing measured says nothing
    ],
)
def test_cpu_bound_rule(machine, nic, pressure, switch, bound) -> None:
    assert cpu.cpu_bound(machine, nic, pressure, switch) is bound


def test_cpu_verdict_from_bench_percentages_and_the_warning_line() -> None:
    v = cpu.cpu_verdict(92.1, [38.5, None, 33.7])
    assert v["cpu_bound"] is True
    assert v["machine_busy_fraction"] == 0.921 and v["nic_core_fraction_max"] == 0.385
    assert v["cpu_bound_thresholds"] == {
        "machine_busy_fraction": 0.85,
        "nic_core_fraction": 0.9,
        "cpu_pressure_fraction": 0.14,
        "switch_core_fraction": 0.9,
        "cpu_wait_per_frame_time": 0.025,
    }
    warn = cpu.cpu_warning(v)
    assert warn and "WARNING: CPU-bound" in warn and "92% busy" in warn
    ok = cpu.cpu_verdict(60.0, [95.0])
    assert ok["cpu_bound"] is True and "95% of a core" in cpu.cpu_warning(ok)
    assert cpu.cpu_warning(cpu.cpu_verdict(50.0, [40.0, 30.0])) is None
    assert cpu.cpu_verdict(None, [])["cpu_bound"] is False
    waited = cpu.cpu_verdict(40.0, [40.0], 0.25, 60.0)
    assert waited["cpu_bound"] and waited["switch_core_fraction_max"] == 0.6
    assert "waited for a CPU 25% of the time" in cpu.cpu_warning(waited)
    assert "busiest switch process 60%" in cpu.cpu_warning(waited)


@pytest.mark.parametrize(
    ("pressure", "wait_us", "rate_mbit", "bound"),
    [
        # mrc-bench's own figures, 2026-11-29 (lab/proc/cpu.py): one QP on the default lab
        (0.095, 77.8, 5, False),  # 0.97 of capacity, no spurious timeout
        (0.120, 60.8, 10, False),
        (0.148, 62.9, 15, True),  # 31 spurious timeouts: processes late for their frames
        (0.230, 91.5, 20, True),
        (0.264, 94.3, 25, True),  # 224, 0.91 of capacity
        (0.361, 165.4, 50, True),  # 217, 0.76
        # four writers on the 8-plane lab: 0.97 of capacity and no spurious timeout at 1.2
        # and 2.4 Mb/s, where the pressure alone calls them CPU-bound; 0.93-0.96 at 4.8
        (0.432, 137.9, 1.2, False),
        (0.457, 227.9, 2.4, False),
        (0.662, 332.8, 4.8, True),
        (0.20, None, 1.2, True),  # waits not measured: the pressure decides, as before
        (0.10, None, 1.2, False),
    ],
)
def test_the_wait_for_a_cpu_counts_in_frame_times(pressure, wait_us, rate_mbit, bound) -> None:
    frame_s = (4096 + 106) * 8 / (rate_mbit * 1e6)
    wait_s = None if wait_us is None else wait_us / 1e6
    v = cpu.cpu_verdict(40.0, [30.0, 20.0], pressure, 35.0, wait_s, frame_s)
    assert v["cpu_bound"] is bound, v
    if wait_us is not None:
        assert v["cpu_wait_us_per_wake"] == pytest.approx(wait_us)
        assert v["cpu_wait_per_frame_time"] == pytest.approx(wait_s / frame_s, abs=1e-4)
        if bound:
            assert "of a frame time" in cpu.cpu_warning(v)
            assert "of the time (limit" not in cpu.cpu_warning(v)  # the pressure did not decide


def test_the_wait_per_wake_up_averages_the_processes_and_skips_the_unmeasured() -> None:
    # a frame meets each process on its path once: each process's mean counts once, however
    # often it woke (the shared switch process wakes ten times as often as a NIC)
    assert cpu.wait_per_wake([300.0, 60.0, None]) == pytest.approx(180e-6)
    assert cpu.wait_per_wake([None, None]) is None
    before = {
        1: cpu.SchedWait(1.0, 0.5, 10),
        2: cpu.SchedWait(2.0, 1.0, 20),
        4: cpu.SchedWait(1, 1, 5),
    }
    after = {1: cpu.SchedWait(1.5, 0.6, 30), 3: cpu.SchedWait(9, 9, 90), 4: cpu.SchedWait(1, 1, 5)}
    got = cpu.sched_wait_between(before, after)  # 2 ended and 3 began meanwhile: left out
    assert got == {1: pytest.approx(0.1 / 20), 4: None}  # 4 never ran: no figure, not 0


def _pair_result(**kw) -> dict:
    r = {
        "test": "write",
        "lab": "mrc",
        "switch_mode": "python",
        "planes": 8,
        "port_rate_bps": 1e8,
        "transport": "mrc",
        "src": "h0",
        "dst": "h3",
        "same_t0": False,
        "qps": 1,
        "depth": 8,
        "capacity_bps": 8e8,
        "size": 1 << 20,
        "iterations": 10,
        "peak_bps": 6e8,
        "goodput_bps": 6e8,
        "msg_rate_pps": 70.0,
        "goodput_fraction": 0.75,
        "duration_s": 2.0,
        "retransmissions": 0,
        "timeouts": 0,
        "verified": True,
        "qp_errors": 0,
        "cpu_percent_client": 40.0,
        "cpu_percent_server": 35.0,
        "machine_cpu_percent": 92.0,
        "cpus": 2,
    }
    r.update(kw)
    return r


def test_the_screen_warns_only_when_cpu_bound() -> None:
    bound = _pair_result(**cpu.cpu_verdict(92.0, [40.0, 35.0]))
    assert "WARNING: CPU-bound" in format_pair(bound)
    free = _pair_result(machine_cpu_percent=50.0, **cpu.cpu_verdict(50.0, [40.0, 35.0]))
    assert "WARNING" not in format_pair(free)


# --- the rate from a measured cost ----------------------------------------------------------


def test_costs_per_frame_come_from_the_measurement() -> None:
    m = meas(fps=20_000, busy=0.94, idle=0.04, nic=0.40)
    assert m.machine_core_s_per_frame == pytest.approx(0.90 * 2 / 20_000)
    assert m.nic_core_s_per_frame == pytest.approx(0.40 / 20_000)
    two = meas(fps=20_000, nic=0.40, flows=2)  # each process carries half the frames
    assert two.nic_core_s_per_frame == pytest.approx(0.40 / 10_000)
    assert m.cpu_bound and not meas(busy=0.6).cpu_bound


def test_rate_choice_keeps_the_machine_at_the_headroom_target() -> None:
    m = meas(fps=20_000, busy=0.94, idle=0.04, nic=0.40)
    # target machine 0.85 x 0.75 = 0.6375: (0.6375 - 0.04) x 2 / (0.9 x 2 / 20000) fps
    target = cpu.CPU_BOUND_MACHINE * cal.HEADROOM
    assert target == pytest.approx(0.6375)
    fps = (target - 0.04) / 0.90 * 20_000
    assert cal.target_fps(m) == pytest.approx(fps)
    assert cal.carried_fps(m) == pytest.approx((0.85 - 0.04) / 0.90 * 20_000)
    per_mbit = cal.fps_per_mbit(8, 4202.0)
    assert per_mbit == pytest.approx(8e6 / (4202 * 8))
    r = cal.choose_rate(m)
    assert r == cal.floor2(fps / per_mbit) and 40 < r < 60
    # the result keeps the predicted load at or under the target
    assert m.idle_busy + m.machine_core_s_per_frame * r * per_mbit / m.cpus <= target


def test_rate_choice_caps_floors_and_respects_the_nic_limit() -> None:
    cheap = meas(fps=20_000, busy=0.20, idle=0.02, nic=0.10)
    assert cal.choose_rate(cheap, cap_mbit=100) == 100  # the machine could do more: the cap
    busy_elsewhere = meas(busy=0.95, idle=0.70)
    assert cal.choose_rate(busy_elsewhere) == cal.MIN_RATE_MBIT  # nothing left: the floor
    nic_bound = meas(fps=20_000, busy=0.30, idle=0.02, nic=0.95)
    # the NIC process limits: 0.675 of a core at 0.95/20000 core-s per frame
    want = cal.floor2(0.675 / (0.95 / 20_000) / cal.fps_per_mbit(8, 4202.0))
    assert cal.choose_rate(nic_bound) == want
    unmeasured = meas(busy=0.04, idle=0.04, nic=0.0)
    assert math.isinf(cal.target_fps(unmeasured)) and cal.choose_rate(unmeasured) == 100


def test_floor2() -> None:
    assert cal.floor2(54.7) == 54
    assert cal.floor2(5.47) == 5.4
    assert cal.floor2(137.0) == 130
    assert cal.floor2(100.0) == 100
    assert cal.floor2(0.123) == 0.12


def test_within_targets_and_next_rate() -> None:
    assert cal.within_targets(meas(busy=0.70, nic=0.5))  # <= 0.6375 x 1.15
    assert not cal.within_targets(meas(busy=0.75, nic=0.5))
    assert not cal.within_targets(meas(busy=0.5, nic=0.80))  # > 0.675 x 1.15
    # one step: the constant-cost choice, and never above 0.9 x the last rate
    first = meas(rate=100, fps=19_845, busy=0.94, idle=0.04)
    assert cal.next_rate([first]) == cal.choose_rate(first)
    barely = meas(rate=50, fps=11_000, busy=0.76, idle=0.04)
    assert cal.next_rate([barely]) <= 45
    # two steps that were not CPU-bound, cost rising as the rate falls: a lower rate than
    # the constant-cost model gives
    a = meas(rate=55, fps=12_870, busy=0.84, idle=0.04)
    b = meas(rate=40, fps=9_400, busy=0.78, idle=0.04)
    alpha = cal.fitted_exponent(a, b)
    assert alpha is not None and alpha < 1
    assert cal.next_rate([a, b]) < cal.choose_rate(b)
    # a saturated step says nothing about the exponent
    assert cal.fitted_exponent(first, b) is None


def test_measurement_from_bench_results() -> None:
    port = {"rx_frames": 5000, "rx_bytes": 5000 * 4200}
    res = {
        "nic": {"server": {"ports": [port] * 8}},
        "cpu_percent_client": 38.5,
        "cpu_percent_server": 33.7,
        "machine_cpu_percent": 92.1,
        "switch_cpu_percent": 106.7,
        "goodput_fraction": 0.76,
        "duration_s": 2.0,
        "cpus": 2,
        "verified": True,
    }
    m = cal.measurement_from_results(100.0, 8, [res], idle_busy=0.04)
    assert m.frames == 40_000 and m.fps == 20_000 and m.frame_bytes == 4200
    assert m.machine_busy == 0.921 and m.nic_core_max == 0.385 and m.flows == 1
    assert m.verified and m.goodput_fraction == 0.76
    assert m.lab_cores == pytest.approx((38.5 + 33.7 + 106.7) / 100)
    # an idle sample spoiled by other work just before or after the write is bounded by
    # what the machine did beyond the lab's processes during it: the frames never look free
    quiet = {**res, "machine_cpu_percent": 39.3}
    q = cal.measurement_from_results(100.0, 8, [quiet], idle_busy=0.67)
    assert q.idle_busy == 0.0 and q.machine_core_s_per_frame > 0
    with pytest.raises(ValueError):
        cal.measurement_from_results(100.0, 8, [], 0.0)


# --- the cache, per boot --------------------------------------------------------------------


def _cal(key="k", rate=45.0, boot="boot-a", code="code-1") -> cal.Calibration:
    return cal.Calibration(
        key=key,
        rate_mbit=rate,
        verified=True,
        capped=False,
        cap_mbit=100.0,
        headroom=cal.HEADROOM,
        steps=[meas(rate=100), meas(rate=rate, fps=10_000, busy=0.62)],
        switch="python",
        planes=8,
        flows=1,
        measured_at="2026-11-23T22:00:00+0000",
        boot_id=boot,
        code_hash=code,
        wall_s=14.0,
    )


def test_cache_is_keyed_per_boot_and_per_code(tmp_path) -> None:
    path = tmp_path / "calibration.json"
    assert cal.store(_cal(), path) == path
    hit = cal.load_cached("k", boot="boot-a", code="code-1", path=path)
    assert hit is not None and hit.from_cache and hit.rate_mbit == 45.0
    assert hit.steps[1].machine_busy == 0.62 and hit.to_dict()["rule"]["headroom"] == 0.75
    assert cal.load_cached("k", boot="boot-b", code="code-1", path=path) is None  # rebooted
    assert cal.load_cached("k", boot="boot-a", code="code-2", path=path) is None  # new code
    assert cal.load_cached("other", boot="boot-a", code="code-1", path=path) is None
    # another shape joins the same boot's file; a new boot's entry drops the old ones
    cal.store(_cal(key="k2", rate=20.0), path)
    assert cal.load_cached("k", boot="boot-a", code="code-1", path=path) is not None
    cal.store(_cal(key="k2", rate=30.0, boot="boot-b"), path)
    data = json.loads(path.read_text())
    assert data["boot_id"] == "boot-b" and list(data["entries"]) == ["k2"]
    assert cal.load_cached("k", boot="boot-b", code="code-1", path=path) is None
    path.write_text("not json")
    assert cal.load_cached("k2", boot="boot-b", code="code-1", path=path) is None


def test_cache_key_holds_the_shape_not_the_name_or_rate() -> None:
    a = LabParams(name="mrc", rate_mbit=100)
    b = LabParams(name="mrcdemo", rate_mbit=20)
    pairs = [(0, 3)]
    assert cal.cache_key(a, pairs, env={}) == cal.cache_key(b, pairs, env={})
    assert cal.cache_key(a, pairs, env={}) != cal.cache_key(
        LabParams(switch="kernel"), pairs, env={}
    )
    assert cal.cache_key(a, pairs, env={}) != cal.cache_key(LabParams(planes=2), pairs, env={})
    assert cal.cache_key(a, pairs, env={}) != cal.cache_key(a, [(0, 3), (1, 2)], env={})
    knob = cal.cache_key(a, pairs, env={"MRC_SWITCH_C_LOOP": "0"})
    assert knob != cal.cache_key(a, pairs, env={}) and "MRC_SWITCH_C_LOOP=0" in knob


def test_code_hash_follows_the_code(tmp_path) -> None:
    (tmp_path / "mrcnic").mkdir()
    f = tmp_path / "mrcnic" / "x.py"
    f.write_text("a = 1\n")
    h1 = cal.code_hash(tmp_path, ("mrcnic/**/*.py",))
    assert h1 == cal.code_hash(tmp_path, ("mrcnic/**/*.py",))
    f.write_text("a = 2\n")
    assert cal.code_hash(tmp_path, ("mrcnic/**/*.py",)) != h1
    assert len(cal.code_hash()) == 24


def test_get_uses_the_cache_and_never_measures_when_told_not_to(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MRC_CALIBRATION_DIR", str(tmp_path))
    params = LabParams()
    with pytest.raises(LabError, match="mrc-lab calibrate"):
        cal.get(params, measure=False)
    key = cal.cache_key(params, cal.default_pairs(params))
    cal.store(_cal(key=key, boot=cal.boot_id(), code=cal.code_hash()))
    got = cal.get(params, measure=False)
    assert got.rate_mbit == 45.0 and got.from_cache
    assert "cached for this boot" in got.source()


def test_the_line_says_the_rate_and_why() -> None:
    c = _cal()
    line = c.line()
    assert line.startswith("this machine carries ~")
    assert "links at 45 Mb/s" in line and "so the fabric, not the CPU, limits" in line
    busy = cal.Calibration.from_dict({**c.to_dict(), "verified": False})
    busy.steps[-1] = meas(rate=45, fps=10_000, busy=0.62, idle=0.3)
    assert "not verified" in busy.line() and "30% busy with other work" in busy.line()


def test_rate_arg_takes_auto_or_a_rate() -> None:
    assert cal.rate_arg("auto") == "auto" and cal.rate_arg("AUTO") == "auto"
    assert cal.rate_arg("50M") == 50.0 and cal.rate_arg("1G") == 1000.0
    with pytest.raises(argparse.ArgumentTypeError):
        cal.rate_arg("fast")


def test_decide_searches_down_then_up_and_keeps_the_highest_verified_rate() -> None:
    over = meas(rate=100, fps=17_000, busy=0.94, idle=0.05)
    best, nxt = cal.decide([over])
    assert best is None and nxt is not None and nxt < 100
    # a step spoiled by other work sent the search too low: it goes up again, below 0.9 x
    # the rate that failed
    low = meas(rate=12, fps=2_870, busy=0.40, idle=0.07)
    best, nxt = cal.decide([over, low])
    assert best == 12 and nxt is not None and 12 * cal.UP_MIN <= nxt <= 90
    # the higher step verifies too: it is the result; nothing much higher is left to try
    near = meas(rate=nxt, fps=nxt * 237, busy=0.66, idle=0.07)
    best, again = cal.decide([over, low, near])
    assert best == nxt and again is None
    # the higher step fails: back down, but never to or below the verified 12
    hot = meas(rate=nxt, fps=nxt * 237, busy=0.80, idle=0.07)
    best, down = cal.decide([over, low, hot])
    assert best == 12 and (down is None or 12 < down < nxt)
    # verified at the cap: stop
    fast = meas(rate=100, fps=23_000, busy=0.40, idle=0.02)
    assert cal.decide([fast]) == (100, None)


def test_the_line_takes_its_figures_from_the_step_at_the_chosen_rate() -> None:
    c = _cal(rate=45.0)
    c.steps = [meas(rate=45, fps=10_000, busy=0.62), meas(rate=70, fps=15_000, busy=0.9)]
    assert c.basis.rate_mbit == 45


def test_a_shared_switch_process_counts_once() -> None:
    class Rec:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def is_alive(self) -> bool:
            return True

    class State:
        processes = {f"p{p}-t0-0": Rec(4242) for p in range(8)} | {"p0-t1-0": Rec(17)}

    assert cpu.switch_pids(State()) == [17, 4242]


def test_after_the_first_step_a_failed_step_at_most_halves_the_rate() -> None:
    first = meas(rate=100, fps=22_000, busy=0.80, idle=0.05, nic=0.93)
    spoiled = meas(rate=44, fps=10_400, busy=0.94, idle=0.05, nic=0.45)  # others ran meanwhile
    assert cal.next_rate([first, spoiled]) >= 22
    assert cal.next_rate([first]) < 100  # the first step may drop further than half


def test_self_meter_reads_cpu_pressure_and_the_busiest_switch_process() -> None:
    import os

    m = cpu.SelfCpuMeter([os.getpid()])  # this process stands in for a switch process
    c0, t0 = time.process_time(), time.monotonic()
    m.start()
    t = time.monotonic()
    while time.monotonic() - t < 0.3:  # busy: this process is its own "switch"
        pass
    got = m.stop()
    # what it read is this process's share of a core over the window, as the process itself
    # counts it (other work on the machine, other test workers included, lowers both alike);
    # the tolerance is /proc's clock-tick granularity over 0.3 s
    own = 100 * (time.process_time() - c0) / (time.monotonic() - t0)
    assert got.switch_cpu_percent_max is not None and got.switch_cpu_percent_max > 20
    assert abs(got.switch_cpu_percent_max - own) < 15, (got.switch_cpu_percent_max, own)
    if cpu.cpu_pressure_us() is None:
        assert got.cpu_pressure_fraction is None  # no PSI: not measured, never guessed
    else:
        assert got.cpu_pressure_fraction is not None and 0 <= got.cpu_pressure_fraction <= 1
    assert set(got.to_json()) >= {"switch_cpu_percent_max", "cpu_pressure_fraction"}
    if cpu.sched_wait([os.getpid()]) is None:  # no schedstat: not measured, never guessed
        assert got.cpu_wait_us_per_wake is None and got.switch_wait_us_per_wake is None
    else:  # a busy loop on an idle CPU may not be switched out at all (then no figure)
        w = got.cpu_wait_us_per_wake
        assert w is None or 0 <= w < 600_000
        assert got.switch_wait_us_per_wake is None  # its stand-in switch is this process


# --- the wait for a CPU, in frame times -------------------------------------------------------


def test_the_processes_wait_bounds_the_rate_where_the_cpu_share_would_not() -> None:
    # the default lab on 2026-11-29: the machine 43% busy at 15 Mb/s, its processes waiting
    # ~63 us per wake-up: the busy share would allow more, the wait does not
    m = meas(rate=15, fps=15 * 8 * 1e6 / (4202 * 8), busy=0.43, idle=0.05, nic=0.28, wait_us=63.0)
    assert m.wait_per_frame_time == pytest.approx(63e-6 / (4202 * 8 / 15e6))
    assert m.cpu_bound  # 0.028 of a frame time: over 0.025
    assert not cal.within_targets(m)
    by_wait = cal.wait_rate_mbit(m)  # 3/4 of the threshold: 0.01875 x 33.6 ms / 63 us
    assert by_wait == pytest.approx(0.75 * 0.025 * 4202 * 8 / 63.0, rel=1e-9)  # ~10 Mb/s
    assert cal.choose_rate(m) == cal.floor2(by_wait) < 15
    without = meas(rate=15, fps=15 * 8 * 1e6 / (4202 * 8), busy=0.43, idle=0.05, nic=0.28)
    assert cal.choose_rate(without) > 15  # the CPU share alone would have gone up
    assert cal.wait_rate_mbit(without) == math.inf and not without.cpu_bound
    ok = meas(rate=10, fps=10 * 8 * 1e6 / (4202 * 8), busy=0.38, idle=0.05, nic=0.2, wait_us=55.0)
    assert cal.within_targets(ok) and not ok.cpu_bound  # 0.016 of a frame time
    d = ok.to_dict()
    assert d["wait_us"] == 55.0 and d["wait_per_frame_time"] == pytest.approx(0.0164, abs=1e-4)
    assert cal.Measurement.from_dict(d) == ok


def test_a_calibration_step_takes_the_longest_wait_of_its_flows() -> None:
    def res(wait):
        return {"machine_cpu_percent": 40.0, "cpu_percent_client": 20.0, "cpus": 2,
                "duration_s": 2.0, "goodput_fraction": 0.97, "verified": True,
                "cpu_wait_us_per_wake": wait,
                "nic": {"server": {"ports": [{"rx_frames": 1000, "rx_bytes": 4_202_000}]}}}  # fmt: skip

    m = cal.measurement_from_results(10.0, 8, [res(50.0), res(80.0), res(None)], 0.05)
    assert m.wait_us == 80.0
    assert cal.measurement_from_results(10.0, 8, [res(None)], 0.05).wait_us is None
