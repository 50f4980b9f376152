"""lab.proc.simtwin: mrc-sim's command line for a lab run, and the recovery rule both sides
are read with (the lab side is tests/lab/test_sim_vs_lab.py)."""

from __future__ import annotations

import json
import random
import subprocess
import time

import pytest

from lab.fabric.params import LabParams
from lab.proc import simtwin as S
from lab.proc.analysis import Shape, permutation_pairs
from lab.proc.schedule import Step
from mrcnic.sim.clos import derangement

LAB = LabParams(name="mrcx", planes=2, t0=2, t1=2, hosts_per_t0=2, rate_mbit=5)


def _flag(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def test_fabric_follows_the_lab() -> None:
    a = S.fabric_args(LAB)
    assert _flag(a, "--rate") == ["5000000bit"] and _flag(a, "--planes") == ["2"]
    assert _flag(a, "--buffer") == ["65536"] and _flag(a, "--ecn") == ["32768"]  # half the buffer
    assert _flag(S.fabric_args(LAB.with_overrides(ecn_kb=8)), "--ecn") == ["8192"]
    assert "--no-ecn" in S.fabric_args(LAB.with_overrides(switch="kernel"))
    with pytest.raises(S.TwinError, match="PFC"):
        S.fabric_args(LAB.with_overrides(pfc=True))


def test_faults_map_to_paths_at_their_offsets() -> None:
    steps = [
        Step("link", 1.0, "p0-t0-0", "p0-t1-1"),
        Step("link", 1.5, "p1-t1-0", "p1-t0-1", undo_s=2.0),
        Step("reboot", 0.25, "p1-t1-1", down_ms=300),
        Step("port", 0.5, "h0", plane=1, undo_s=0.75),
    ]
    assert S.p2p_fault_args(LAB, 0, 3, steps) == [
        "--fail", "path:1@1000ms",
        "--fail", "path:2@1500ms", "--heal", "path:2@2000ms",
        "--fail", "path:3@250ms", "--heal", "path:3@550ms",
        "--fail", "port:1@500ms", "--heal", "port:1@750ms",
    ]  # fmt: skip
    for bad in (Step("loss", 1.0, "p0-t0-0", "p0-t1-0", percent=1), Step("port", 1, "h3", plane=0)):
        with pytest.raises(S.TwinError):
            S.p2p_fault_args(LAB, 0, 3, [bad])


def test_p2p_needs_a_pair_across_the_t1_tier() -> None:
    with pytest.raises(S.TwinError, match="share a T0"):
        S.p2p_command(LAB, "h0", "h1", 1 << 20, 16 << 10)
    argv = S.p2p_command(LAB, "h0", "h3", 1 << 20, 16 << 10, timeline_s=0.05)
    assert _flag(argv, "--t1") == ["2"] and _flag(argv, "--timeline") == ["50ms"]


def test_the_permutation_seed_gives_the_labs_pairs() -> None:
    pairs = permutation_pairs(Shape.from_params(LAB))
    argv = S.permutation_command(LAB, pairs, 1 << 20, 16 << 10)
    seed = int(_flag(argv, "--seed")[0])
    assert derangement(4, random.Random(seed)) == [d for _s, d in pairs]
    with pytest.raises(S.TwinError, match="every host"):
        S.permutation_seed(4, [(0, 2), (1, 3)])  # one way: not a permutation of all hosts


def test_the_simulator_runs_the_labs_flows() -> None:
    """The seed's derangement is the run's: mrc-sim's flows are the lab's pairs."""
    pairs = permutation_pairs(Shape.from_params(LAB))
    argv = S.permutation_command(LAB.with_overrides(rate_mbit=100), pairs, 64 << 10, 16 << 10)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    d = json.loads(out.stdout)
    assert [(f["src"], f["dst"]) for f in d["flows"]] == pairs and d["verified"]


def test_recovery_is_the_first_bin_back_after_the_fault() -> None:
    tl = [[k * 0.1, 100.0] for k in range(10)]
    for k in (5, 6):
        tl[k][1] = 40.0
    assert S.recovery_s(tl, 0.1, 0.45, 0.1) == pytest.approx(0.25)  # bin 0.7 is back
    assert S.recovery_s(tl, 0.1, 0.5, 0.1) == pytest.approx(0.2)
    assert S.recovery_s(tl, 0.1, 0.05, 0.1) is None  # no whole bin before the fault
    tl[7][1] = tl[8][1] = 10.0
    assert S.recovery_s(tl, 0.1, 0.5, 0.1) == pytest.approx(0.5)  # never: to the end
    assert S.rebin(tl, 0.1, 2)[2] == [pytest.approx(0.4), 70.0]


def test_sched_wait_reads_this_process() -> None:
    """lab.proc.cpu.sched_wait, which the lab side uses to tell other users' load apart."""
    import os

    from lab.proc.cpu import SchedWait, sched_wait

    a = sched_wait([os.getpid()])
    if a is None:
        pytest.skip("this kernel keeps no /proc/PID/schedstat (CONFIG_SCHED_INFO)")
    # some CPU time: the kernel adds a task's run time to schedstat at a tick or a switch, so
    # burn until one came (a few ms of CPU were not always enough under a parallel suite)
    end = time.monotonic() + 2.0
    while True:
        sum(range(200_000))
        d = sched_wait([os.getpid()]) - a
        if d.run_s > 0 or time.monotonic() > end:
            break
    assert d.run_s > 0 and d.slices >= 0 and d.wait_s >= 0
    assert SchedWait(0.0, 0.2, 4).wait_per_slice_s == 0.05
    assert SchedWait(0.0, 0.0, 0).wait_per_slice_s is None
    assert sched_wait([2**22 + 12345]) is None  # no such process
