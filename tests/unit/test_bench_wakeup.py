"""bench/bench_wakeup.py's machinery on a short run: both ping-pongs and the timer arms are
measured and written with their keys. No figure is asserted beyond "measured": the figures
are the machine's (results/bench-wakeup.json)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bench_wakeup


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_writes_both_wakeups_and_the_timer_arms(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench_wakeup, "ROUND_TRIPS", 300)
    monkeypatch.setattr(bench_wakeup, "TIMER_ARMS", 50)
    monkeypatch.setattr(bench_wakeup, "IDLE_ROUND_TRIPS", 30)
    out = tmp_path / "w.json"
    assert bench_wakeup.main(["--reps", "2", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for cfg in ("cross_cpu", "same_cpu", "cross_cpu_idle"):
        assert d[cfg]["cpu_us_per_wakeup"] > 0 and d[cfg]["round_trip_us"] > 0
        assert len(d["runs"][cfg]) == 2
    assert (
        d["runs"]["cross_cpu"][0]["round_trip_us"] < d["runs"]["cross_cpu_idle"][0]["round_trip_us"]
    )  # (the idle spell is in the idle config's round trip)
    if os.path.exists("/proc/self/schedstat"):  # the wait, and the rate it allows
        wf = d["wait_floor"]
        assert wf["wait_us"] == d["cross_cpu_idle"]["wait_us_per_wakeup"] >= 0
        if wf["rate_mbit_at_rule"] is not None:  # the rule's wait at that rate is the floor
            ft_s = bench_wakeup.frame_time_s(wf["rate_mbit_at_rule"])
            at_us = ft_s * wf["cpu_bound_wait_per_frame_time"] * 1e6
            assert at_us == pytest.approx(wf["wait_us"], rel=0.01)
    assert d["wakeup_cpu_ratio_cross_vs_same"] > 0
    assert set(d["timer_arm_cpu_us"]) == {"0.1ms", "0.5ms", "1ms", "2ms", "5ms", "10ms", "100ms"}


def test_refuses_no_repetitions() -> None:
    with pytest.raises(SystemExit) as e:
        bench_wakeup.main(["--reps", "0"])
    assert e.value.code == 2
