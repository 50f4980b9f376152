"""The soak with random faults (lab/workloads/soak/) for real, short: its own lab (mrcsoakt), a ring
all-reduce of 4 hosts for 24 s per transport, MRC then the RoCEv2 baseline, while the seeded
schedule plays 15 faults a minute; then everything it left behind is checked to be gone.

A second run is interrupted (SIGINT, as Ctrl-C) while a link is down: the link must come
back up before the lab is torn down. About 2 minutes in all. The pure parts (schedule,
statistics, verdict) are tests/unit/test_soak.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lab.fabric import lifecycle
from lab.fabric.netns import list_netns
from lab.fabric.state import exists

NAME = "mrcsoakt"
MINUTES = 0.4
RANKS = 4


@pytest.fixture(scope="module")
def soak_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, dict]:
    out = tmp_path_factory.mktemp("soak") / "soak.json"
    argv = [sys.executable, "-m", "lab.soak", "--name", NAME, "--minutes", str(MINUTES)]
    # a forced rate: the test checks the machinery, not this machine's calibrated figures
    argv += ["--seed", "3", "--events-per-min", "15", "--rate-mbit", "20", "--size", "2M"]
    argv += ["--out", str(out), "--progress", "10s"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    finally:
        if exists(NAME):  # the soak tears its lab down; make sure, whatever happened
            lifecycle.down(NAME)
    text = p.stdout + p.stderr
    assert out.exists(), text[-3000:]
    return p.returncode, text, json.loads(out.read_text())


@pytest.mark.slow  # the soak it shares: ~90 s
def test_soak_exits_zero_and_says_so(soak_run: tuple[int, str, dict]) -> None:
    rc, text, doc = soak_run
    assert rc == 0, text[-3000:]
    assert doc["verdict"] == {"ok": True, "reasons": []}
    assert "verdict: OK" in text
    assert "fault 1:" in text and "steps verified" in text  # progress and faults as they happen
    assert Path(doc["outputs"]["plot"]).stat().st_size > 10_000


@pytest.mark.slow  # the soak it shares: ~90 s
def test_both_transports_verified_steps(soak_run: tuple[int, str, dict]) -> None:
    _rc, _text, doc = soak_run
    assert list(doc["transports"]) == ["mrc", "rocev2"]
    for key, r in doc["transports"].items():
        assert r["steps"] > 0, key
        assert r["bytes_verified"] == r["steps"] * doc["size"] * RANKS > 0, key
        assert r["verification_failures"] == 0, key
        assert len(r["step_log"]) == r["steps"] + r["failed_steps"], key
        dist = r["step_time_s"]["all"]
        assert dist["count"] == r["steps"]
        assert 0 < dist["p50_s"] <= dist["p90_s"] <= dist["p99_s"] <= dist["max_s"]
    mrc = doc["transports"]["mrc"]
    assert mrc["qp_errors"] == 0 and mrc["failed_steps"] == 0 and mrc["restarts"] == 0
    assert mrc["steps"] > doc["transports"]["rocev2"]["steps"]  # 8 planes against one each


@pytest.mark.slow  # the soak it shares: ~90 s
def test_faults_applied_undone_and_marked(soak_run: tuple[int, str, dict]) -> None:
    _rc, _text, doc = soak_run
    planned = len(doc["schedule"])
    assert planned >= 4
    for key, r in doc["transports"].items():
        log = r["fault_log"]
        assert len(log) == planned == r["faults_applied"], key
        assert not r["fault_errors"], key
        # a fault held up by a slow one before it is flagged (timing: not asserted to be none)
        assert set(r["faults_late"]) <= {f["n"] for f in log}, key
        assert all(f["end_s"] is not None and f["end_s"] > f["start_s"] for f in log), key
        assert all(f["commands"] for f in log), key
        # the same seeded schedule, replayed from each transport's start
        assert [f["planned"] for f in log] == doc["schedule"]
        cols = r["step_columns"]
        marked = [row for row in r["step_log"] if row[cols.index("faults")]]
        assert marked and r["fault_steps"] > 0, key
        assert r["step_time_s"]["fault"]["count"] + r["step_time_s"]["clean"]["count"] == r["steps"]


@pytest.mark.slow  # the soak it shares: ~90 s
def test_nothing_left_behind(soak_run: tuple[int, str, dict]) -> None:
    assert not exists(NAME)
    assert not [ns for ns in list_netns() if ns.startswith(NAME + "-")]


def test_ctrl_c_undoes_the_fault_and_takes_the_lab_down(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    # seed 1, 4 a minute: the first fault is a T0-T1 link down for 3.4 s from 5.4 s
    argv = [sys.executable, "-m", "lab.soak", "--name", NAME, "--minutes", "1", "--seed", "1"]
    argv += ["--transports", "mrc", "--rate-mbit", "20", "--size", "2M", "--out", str(out)]
    # SIGINT at its default in the child even when the suite itself runs in the background
    # of a shell without job control, where SIGINT is ignored and so inherited ignored
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    guard = threading.Timer(180, p.kill)  # never hang the suite
    guard.start()
    seen: list[str] = []
    try:
        assert p.stdout is not None
        for line in p.stdout:
            seen.append(line)
            if "fault 1:" in line:
                p.send_signal(signal.SIGINT)
                break
        rest, _ = p.communicate(timeout=120)
        seen.append(rest)
    finally:
        guard.cancel()
        if exists(NAME):
            lifecycle.down(NAME)
    text = "".join(seen)
    assert p.returncode == 130, text[-3000:]
    assert "torn down" in text
    doc = json.loads(out.read_text())
    mrc = doc["transports"]["mrc"]
    assert mrc["interrupted"]
    [fault] = mrc["fault_log"]
    assert fault["kind"] == "flap" and fault["end_s"] is not None
    assert any(c.endswith(" up") for c in fault["commands"]), fault["commands"]  # link up again
    assert not exists(NAME)
    assert not [ns for ns in list_netns() if ns.startswith(NAME + "-")]
