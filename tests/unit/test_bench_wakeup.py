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
    out = tmp_path / "w.json"
    assert bench_wakeup.main(["--reps", "2", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    for cfg in ("cross_cpu", "same_cpu"):
        assert d[cfg]["cpu_us_per_wakeup"] > 0 and d[cfg]["round_trip_us"] > 0
        assert len(d["runs"][cfg]) == 2
    assert d["wakeup_cpu_ratio_cross_vs_same"] > 0
    assert set(d["timer_arm_cpu_us"]) == {"0.1ms", "0.5ms", "1ms", "2ms", "5ms", "10ms", "100ms"}


def test_refuses_no_repetitions() -> None:
    with pytest.raises(SystemExit) as e:
        bench_wakeup.main(["--reps", "0"])
    assert e.value.code == 2
