"""The simulator held to the lab (issue 26): the same runs in both, the figures within bounds.

One small lab of python switches (2 planes x (2 T0 + 2 T1), 2 hosts per T0, 64 KiB buffers,
ECN at half of them: the lab's defaults) at a fixed RATE_MBIT, and the simulator on the same
shape, rate, buffer and ECN threshold (``lab.proc.simtwin`` builds its command line from the
lab's ``LabParams``):

- a write h0 -> h3 (across the T1 tier) of WRITE_MSGS x 16 KiB, and ``mrc-sim --workload
  p2p`` of the same bytes in the same writes;
- the same write with one T0-T1 link (plane 0, T0 0 - T1 1) taken down FAULT_AT_S after the
  data started and left down, and ``--fail path:1@T`` at the time the lab's fault happened
  (plane 0's path through T1 1, both ways: the link carries data one way, SACKs the other);
- a full permutation (every host writes to the host under the other T0, h -> h + 2), all at
  once, and ``mrc-sim --workload permutation`` with the seed whose derangement is that
  permutation (the test checks that the simulator's flows are the lab's).

Why 5 Mb/s: at 10 Mb/s, with the shared machine at load 8-14 (other work), the lab's
permutation read 0.51-0.89 against the simulator's 0.876 and its write 0.92-0.96 against
0.971: the switch process, waiting for a CPU about a millisecond per wake-up, was late for
3.4 ms frames. At 5 Mb/s (6.7 ms frames) the same load left every figure within the bounds.

Bounds, each measured first (docs/sim.md, "The simulator against the lab", has the figures)
and set so that a real divergence breaks them (the comparisons were seen to fail against a
simulator at twice the rate, spraying obliviously onto the dead path, or marking ECN at
4 KiB):

- GOODPUT_REL: both writes' goodput fraction within 4% of the simulator's, of the same
  capacity. Measured within 0.5% (plain) and 1.5% (link failure) over seven runs at 5 Mb/s;
  the margin is for a loaded machine (10 Mb/s runs came 1-5% low). Spraying onto the dead
  path (0.73) or a NIC that stalls for a few RTTs a second breaks it.
- PERM_ABS: the permutation's utilisation while every flow ran within 0.10 (absolute) of the
  simulator's steady utilisation. The lab read 0.82-0.91 over five runs, the simulator 0.860
  (0.86-0.88 over five seeds with the same pairs): spraying collisions in a 4-host fabric
  with few packets per path, and the lab's flows start up to 2.5 s apart (process start-up
  on a loaded machine), read over the window all of them ran. ECN at 4 KiB (0.71) breaks
  it; a 16 KiB threshold (0.80) would not reliably. On 2026-11-28, a slow day of the 2-core
  machine, one run of five missed 0.08, so the bound is 0.10.
- Retransmissions: without a fault the lab may have a few more than the simulator (a
  process not scheduled for some ms makes a spurious timeout) but at most RETX_SLACK + 1% of
  the packets (measured 0-2 against 0); through the link failure both must retransmit (the
  fault was real) and each count within RETX_FACTOR x the other + RETX_SLACK (measured 4-9
  against 4-6; oblivious spraying: 130); the permutation's rate at most RETX_RATE_ABS above
  the simulator's (measured 0.03-0.5% against 0.05-0.1%; on 2026-11-28, a slow day of the
  2-core machine, one run of five read 1.16% against 0.1%: the lab's spurious timeouts follow
  its scheduling, the simulator's count does not move, so the bound is 2 points).
- RECOVERY_ABS_S: recovery, from each side's fault to the start of the first BIN_S bin back
  to 90% of the level before it (``simtwin.recovery_s``), on what reaches the destination:
  the lab's wire counters, the simulator's placed bytes. Within 0.15 s (three bins) of each
  other: measured 0.02-0.18 s in the lab against 0.08-0.13 s (it depends on where the fault
  falls in a bin); a lab that found the dead link only by timeouts or probes would take
  several hundred ms. The lab's completions recover later (in-order completion waits for
  the holes' repair): reported, not compared.

A run whose NIC processes came near a core (mrc-bench's per-process rule, 90%), or whose
switch process waited for a CPU more than SWITCH_WAIT_LIMIT of the run, is no valid
comparison: the test skips and says so. The machine-wide busy share counts other users' work
(the shared 2-core machine was 100% busy on every run): reported, not a reason to skip.

Each comparison of a write gets ATTEMPTS runs: it fails only when every run misses (data not
verified, a QP error or a fault not applied fail at once; a CPU-bound run after a miss fails
too), and the failure gives every run's figures (the lab's retransmissions, timeouts, its
longest gap between completions, its CPU verdict and the machine's steal time). Why: on 2026-11-29 a CI
run of the unchanged lab read 0.921 against 0.967 with nothing in the guest's CPU figures to
show for it, while both cores kept busy on purpose left the lab at 0.976 (the scheduler
favours the lab's sleeping processes over busy loops); a stall of the virtual machine itself
is invisible to those figures. A real divergence (oblivious spraying: 0.73) misses every run.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lab.fabric import lifecycle
from lab.fabric.params import LabParams
from lab.proc import simtwin
from lab.proc.analysis import Shape, permutation_pairs
from lab.proc.benchrun import WriteSpec, run_parallel, run_write
from lab.proc.cpu import machine_steal_ticks, sched_wait, switch_pids
from lab.proc.schedule import Step
from lab.workloads.bench.incast import common_window, window_goodput_bps

RATE_MBIT = 5.0
SHAPE = {"planes": 2, "t0": 2, "t1": 2, "hosts_per_t0": 2}
MSG = 16 << 10  # small writes: many complete per timeline bin
WRITE_MSGS = 128  # 2 MiB: 1.7 s at 2 x 5 Mb/s
FAULT_MSGS = 192  # 3 MiB: 1 s before the fault, 1.6 s after
FAULT_AT_S = 1.0
FAULT_LINK = ("p0-t0-0", "p0-t1-1")
PERM_S = 4.0  # each lab flow's duration (their starts were 0.3-2.5 s apart)
PERM_MIN_WINDOW_S = 1.0  # the lab's flows ran all at once at least this long
PERM_SKIP_S = 0.25  # ramp-up of the last flow to start, left out of the lab's window
PERM_SIM_BYTES = 2 << 20  # per flow in the simulator: about 2 s
BIN_S = 0.05
WARMUP_S = 0.3

GOODPUT_REL = 0.04
PERM_ABS = 0.10
RETX_SLACK = 6
RETX_FACTOR = 2.5
RETX_RATE_ABS = 0.02
RECOVERY_ABS_S = 0.15
NIC_CORE_LIMIT = 0.9  # mrc-bench's per-process cpu_bound rule
SWITCH_WAIT_LIMIT = 0.5  # the switch process waited for a CPU over half the run
ATTEMPTS = 2  # runs of a write comparison before it fails (see the docstring)

# MRC_SIMLAB_OUT=FILE.json: every figure of the run (docs/sim.md's come from it)
FIGURES: dict[str, Any] = {}


def _note(name: str, **figures: Any) -> None:
    FIGURES[name] = figures
    out = os.environ.get("MRC_SIMLAB_OUT")
    if out:
        Path(out).write_text(json.dumps(FIGURES, indent=1))


@pytest.fixture(scope="module")
def slab():
    params = LabParams(name="mrcv" + secrets.token_hex(2), rate_mbit=RATE_MBIT, **SHAPE)
    try:
        yield lifecycle.up(params)
    finally:
        lifecycle.down(params.name)


class _Waits:
    """How long the lab's switch processes waited for a CPU over a block, as a share of it
    (``lab.proc.cpu.sched_wait``): the machine's other users show there, not in the lab's
    own CPU figures."""

    def __init__(self, state) -> None:
        self.pids = switch_pids(state)
        self.figures: dict[str, Any] = {}

    def __enter__(self) -> _Waits:
        self.before = sched_wait(self.pids)
        self.steal = machine_steal_ticks()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *_exc: object) -> None:
        after = sched_wait(self.pids)
        steal, total = (a - b for a, b in zip(machine_steal_ticks(), self.steal, strict=True))
        # the hypervisor ran something else while this machine's CPUs wanted to run
        self.figures["machine_steal_fraction"] = round(steal / total, 4) if total else None
        if after is None or self.before is None:
            return
        d = after - self.before
        wall = time.monotonic() - self.t0
        self.figures |= {
            "switch_wait_fraction": round(d.wait_s / wall, 3),
            "switch_wait_per_slice_ms": round((d.wait_per_slice_s or 0.0) * 1e3, 3),
        }


def _valid(results: list[dict[str, Any]], waits: _Waits) -> dict[str, Any]:
    """Skip unless the lab ran fabric-bound: every NIC process clear of a core, the switch
    process not kept waiting for a CPU most of the run. The CPU figures, for the record."""
    wait = waits.figures.get("switch_wait_fraction")
    for r in results:
        nic = r.get("nic_core_fraction_max")
        if nic is None or nic >= NIC_CORE_LIMIT or (wait is not None and wait > SWITCH_WAIT_LIMIT):
            pytest.skip(
                f"the lab run was CPU-bound (a NIC process at {nic} of a core, limit "
                f"{NIC_CORE_LIMIT}; the switch waited for a CPU {wait} of the run, limit "
                f"{SWITCH_WAIT_LIMIT}; machine {r.get('machine_busy_fraction')} busy): no "
                "valid comparison with the simulator"
            )
    keys = (
        "cpu_bound",
        "machine_busy_fraction",
        "nic_core_fraction_max",
        "switch_cpu_percent",
        "cpu_wait_us_per_wake",
        "cpu_wait_per_frame_time",
        "spurious_timeouts",
        "timeouts",
    )
    return {"cpu": [{k: r.get(k) for k in keys} for r in results], **waits.figures}


def _write(state, msgs: int, steps=()) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    spec = WriteSpec("h0", "h3", MSG, None, msgs, None, "mrc", round(BIN_S * 1e3), ("--quiet",))
    with _Waits(state) as waits:
        run = run_write(state, spec, steps, echo=lambda _line: None)
    _require(run.ok and run.result is not None, run.error or run.stderr_tail)
    r = run.result
    _require(r["verified"] and r["qp_errors"] == 0, r.get("errors"))
    return run, r, _valid([r], waits)


def _sim(argv: list[str]) -> dict[str, Any]:
    s = simtwin.run(argv)
    _require(s["verified"] and s["qp_errors"] == 0, s.get("qp_error_reasons"))
    return s


def _same_goodput(lab: dict[str, Any], sim: dict[str, Any]) -> None:
    """Both carried the same fraction of the same capacity (the same link rate: a fraction
    alone would not tell a simulator at another rate apart)."""
    assert lab["capacity_bps"] == sim["capacity_bps"], (lab["capacity_bps"], sim["capacity_bps"])
    lf, sf = lab["goodput_fraction"], sim["goodput_fraction"]
    assert abs(lf - sf) <= GOODPUT_REL * sf, f"lab {lf} against the simulator's {sf}"


def _require(ok: bool, why: object) -> None:
    """What must hold in every run (the data verified, the fault applied): a failure here
    fails the test at once, never retried as a missed comparison is (``_attempts``)."""
    if not ok:
        pytest.fail(f"not a comparison that missed, a failure: {why}")


def _longest_gap_s(timeline: list[list[float]]) -> float:
    """The longest run of BIN_S bins in which no write completed (a stall shows here)."""
    longest = run = 0
    for _t, g in timeline:
        run = run + 1 if g <= 0 else 0
        longest = max(longest, run)
    return round(longest * BIN_S, 3)


def _attempts(name: str, once: Callable[[], None]) -> None:
    """Run a comparison up to ATTEMPTS times (the module's docstring says why): it passes at
    the first run that holds, fails with every run's figures when none does."""
    misses = []
    for k in range(ATTEMPTS):
        FIGURES.pop(name, None)  # a run that failed before its note leaves none
        try:
            once()
        except AssertionError as e:
            misses.append(f"run {k + 1}: {e}; figures {FIGURES.get(name)}")
            continue
        except pytest.skip.Exception as e:
            if misses:  # a valid run missed: a later CPU-bound one must not hide that
                pytest.fail(f"{name}: run {k + 1} was no valid comparison ({e}), after:\n"
                            + "\n".join(misses))  # fmt: skip
            raise
        if misses:
            _note(name, **FIGURES[name], earlier_misses=misses)
        return
    pytest.fail(f"{name}: every one of {ATTEMPTS} runs missed:\n" + "\n".join(misses))


def _write_once(slab) -> None:
    _run, lab, cpu = _write(slab, WRITE_MSGS)
    cmd = simtwin.p2p_command(slab.params, "h0", "h3", WRITE_MSGS * MSG, MSG)
    sim = _sim(cmd)
    packets = WRITE_MSGS * MSG // simtwin.PAYLOAD_BYTES
    _note(
        "write",
        sim_command=cmd[1:],
        lab_goodput_fraction=lab["goodput_fraction"],
        sim_goodput_fraction=sim["goodput_fraction"],
        lab_retransmissions=lab["retransmissions"],
        lab_spurious_timeouts=lab["spurious_timeouts"],
        lab_longest_gap_s=_longest_gap_s(lab["timeline"]),
        sim_retransmissions=sim["retransmissions"],
        lab_duration_s=lab["duration_s"],
        sim_completion_s=sim["completion_s"],
        **cpu,
    )
    _same_goodput(lab, sim)
    assert lab["retransmissions"] <= sim["retransmissions"] + RETX_SLACK + packets // 100, (
        lab["retransmissions"],
        sim["retransmissions"],
    )


def test_write_goodput_and_retransmissions(slab) -> None:
    _attempts("write", lambda: _write_once(slab))


def _link_failure_once(slab) -> None:
    step = Step("link", FAULT_AT_S, *FAULT_LINK)
    run, lab, cpu = _write(slab, FAULT_MSGS, [step])
    _require(bool(run.faults) and not run.applied[0].error, run.to_dict()["fault_errors"])
    lab_fault_s = run.faults[0].start_s  # on the write's timeline clock
    # the simulator's fault where the lab's happened (a few ms after FAULT_AT_S: the schedule
    # counts from the first data its watch saw, and the command takes time)
    sim_step = replace(step, at_s=round(lab_fault_s, 3))
    cmd = simtwin.p2p_command(
        slab.params, "h0", "h3", FAULT_MSGS * MSG, MSG, [sim_step], timeline_s=BIN_S
    )
    assert f"path:1@{sim_step.at_s * 1e3:g}ms" in cmd  # plane 0's path through T1 1
    sim = _sim(cmd)
    # what arrives at the destination on each side: the lab's wire counters, the simulator's
    # placed bytes (the lab's completions wait in order for the holes' repair: reported)
    lab_rec = simtwin.recovery_s(run.wire, BIN_S, lab_fault_s, WARMUP_S)
    lab_done_rec = simtwin.recovery_s(lab["timeline"], BIN_S, lab_fault_s, WARMUP_S)
    sim_rec = simtwin.recovery_s(sim["timeline"], BIN_S, sim_step.at_s, WARMUP_S)
    _note(
        "link_failure",
        sim_command=cmd[1:],
        lab_fault_s=round(lab_fault_s, 4),
        lab_goodput_fraction=lab["goodput_fraction"],
        sim_goodput_fraction=sim["goodput_fraction"],
        lab_retransmissions=lab["retransmissions"],
        lab_timeouts=lab["timeouts"],
        lab_spurious_timeouts=lab["spurious_timeouts"],
        lab_longest_gap_s=_longest_gap_s(lab["timeline"]),
        sim_retransmissions=sim["retransmissions"],
        sim_timeouts=sim["timeouts"],
        lab_recovery_s=lab_rec,
        lab_completion_recovery_s=lab_done_rec,
        sim_recovery_s=sim_rec,
        sim_own_recovery_s=sim["recovery_s"],
        **cpu,
    )
    _same_goodput(lab, sim)
    assert sim["retransmissions"] > 0 and lab["retransmissions"] > 0  # the fault was real
    assert lab["retransmissions"] <= RETX_FACTOR * sim["retransmissions"] + RETX_SLACK
    assert sim["retransmissions"] <= RETX_FACTOR * lab["retransmissions"] + RETX_SLACK
    assert lab_rec is not None and sim_rec is not None
    assert abs(lab_rec - sim_rec) <= RECOVERY_ABS_S, (lab_rec, sim_rec)


def test_write_through_a_link_failure(slab) -> None:
    _attempts("link_failure", lambda: _link_failure_once(slab))


def test_permutation_utilisation(slab) -> None:
    pairs = permutation_pairs(Shape.from_params(slab.params))
    specs = [
        WriteSpec(f"h{a}", f"h{b}", MSG, PERM_S, None, None, "mrc", round(BIN_S * 1e3),
                  ("--quiet",))
        for a, b in pairs
    ]  # fmt: skip
    with _Waits(slab) as waits:
        got = [r for _s, r, _err in run_parallel(slab, specs)]
    assert all(r and r["verified"] and r["qp_errors"] == 0 for r in got), got
    labs = [r for r in got if r]
    cpu = _valid(labs, waits)
    window = common_window(labs, PERM_SKIP_S, PERM_S)
    if window is None or window["window_s"] < PERM_MIN_WINDOW_S:
        pytest.skip(
            f"the lab's flows ran all at once for less than {PERM_MIN_WINDOW_S} s (their "
            "processes started too far apart on a loaded machine): no permutation to compare"
        )
    lo = window["window_start_unix_s"]
    bps = [window_goodput_bps(r, lo, lo + window["window_s"]) or 0.0 for r in labs]
    lab_util = sum(bps) / sum(r["capacity_bps"] for r in labs)
    packets = sum(r["bytes"] for r in labs) / simtwin.PAYLOAD_BYTES
    lab_retx_rate = sum(r["retransmissions"] for r in labs) / packets
    cmd = simtwin.permutation_command(slab.params, pairs, PERM_SIM_BYTES, MSG)
    sim = _sim(cmd)
    assert [(f["src"], f["dst"]) for f in sim["flows"]] == list(pairs)  # the lab's flows
    _note(
        "permutation",
        sim_command=cmd[1:],
        lab_utilisation=round(lab_util, 4),
        lab_window_s=window["window_s"],
        lab_start_skew_s=window["start_skew_s"],
        lab_goodput_fractions=[r["goodput_fraction"] for r in labs],
        sim_steady_utilisation=sim["steady_utilisation"],
        sim_utilisation=sim["utilisation"],
        lab_retransmission_rate=round(lab_retx_rate, 5),
        sim_retransmission_rate=round(sim["retransmissions"] / sim["data_packets"], 5),
        **cpu,
    )
    said = f"lab {lab_util:.3f} against the simulator's {sim['steady_utilisation']}"
    assert abs(lab_util - sim["steady_utilisation"]) <= PERM_ABS, said
    assert lab_retx_rate <= sim["retransmissions"] / sim["data_packets"] + RETX_RATE_ABS
