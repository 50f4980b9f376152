"""make bench-nic's machinery on a short run (root): both namespaces come and go, the C
engine's QP moves frames at the base RTT it was given, and the contract keys are written.
No figure is asserted beyond "frames moved": ratios are for the full run on a quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_nic_writes_its_contract_keys(tmp_path) -> None:
    out = tmp_path / "bench-nic.json"
    r = subprocess.run(
        [sys.executable, "bench/bench_nic.py", "--reps", "1", "--seconds", "0.5",
         "--configs", "raw,c,c_rtt200,c_paced", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(out.read_text())
    for key in ("send_ratio_vs_raw", "recv_ratio_vs_raw", "c_rtt200_send_ratio_vs_raw",
                "c_rtt200_recv_ratio_vs_raw"):  # fmt: skip
        assert d[key] > 0, key
    for key in ("c_paced_send_us_per_frame", "c_paced_recv_us_per_frame",
                "c_paced_send_cost_vs_c", "c_paced_recv_frames_per_wakeup"):  # fmt: skip
        assert d[key] > 0, key
    paced = d["runs"]["c_paced"][0]
    assert paced["send"]["rate_bps"] == 400e6 and paced["recv"]["frames"] > 0
    # the raw baseline brackets each engine run: raw, c, raw, c_rtt200, raw, c_paced, raw
    assert len(d["runs"]["raw"]) == 4 and len(d["send_ratio_vs_raw_runs"]) == 1
    assert d["send_ratio_vs_raw_spread"] == 0 and "recv_ratio_vs_raw_spread" in d
    c, slow = d["runs"]["c"][0], d["runs"]["c_rtt200"][0]
    assert c["recv"]["frames"] > 0 and c["recv"]["base_rtt_s"] == pytest.approx(1e-3)
    assert slow["send"]["base_rtt_s"] == pytest.approx(200e-6)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "mrcnb-" not in names  # torn down
