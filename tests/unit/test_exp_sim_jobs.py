"""The simulated forms of the job claims (7 t1_reboot, 9 flaps): the all-reduce job's result
read as the soak's step log, the schedules, the verdicts on synthetic input, and the quick
forms end to end through ``mrc-lab experiment NAME --sim --quick``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.workloads.experiments import base
from lab.workloads.experiments.flaps import compare
from lab.workloads.experiments.flaps import judge as flaps_judge
from lab.workloads.experiments.jobs import step_figures
from lab.workloads.experiments.sim import common, flaps, t1_reboot
from lab.workloads.experiments.t1_reboot import figures
from lab.workloads.experiments.t1_reboot import judge as reboot_judge

ROOT = Path(__file__).resolve().parents[2]


def _result(times: list[float], failed: tuple[float, float] | None = None, **kw) -> dict:
    """An all-reduce job's result (the keys job_summary reads): iterations back to back."""
    starts, t = [], 0.0
    for x in times:
        starts.append(t)
        t += x
    return {
        "iteration_starts_s": starts,
        "iteration_times_s": times,
        "failed_at_s": None if failed is None else t,
        "failed_after_s": None if failed is None else failed[1],
        "failed_iterations": 0 if failed is None else 1,
        "ranks": 4,
        "size": 1 << 20,
        "qp_errors": 0 if failed is None else 1,
        "retransmissions": 0,
        "timeouts": 0,
        "wall_s": 1.0,
        "fault_log": kw.get("fault_log", []),
    }


def test_a_job_result_reads_as_the_soaks_step_log() -> None:
    log = [{"fault": "x", "label": "x", "start_s": 3.5, "end_s": 4.5}]
    s = common.job_summary(_result([1.0, 1.0, 2.0, 1.0, 1.0], fault_log=log))
    assert [r[1] for r in s["step_log"]] == [0, 1, 2, 3, 4]
    assert [r[5] for r in s["step_log"]] == [0, 0, 1, 1, 0]  # iterations overlapping the fault
    assert all(r[4] for r in s["step_log"]) and s["restarts"] == s["failed_steps"] == 0
    failed = common.job_summary(_result([1.0, 1.0], failed=(2.0, 0.5)))
    assert failed["step_log"][-1][2:5] == [2.0, 2.5, False]
    assert failed["restarts"] == failed["failed_steps"] == 1


def test_the_reboot_verdict_on_synthetic_jobs() -> None:
    # 20 steady iterations of 1.0, the fault at 10.5 for 2: the failure iteration 1.05
    times = [1.0] * 10 + [1.05] + [1.0] * 10
    log = [{"fault": "x", "label": "x", "start_s": 10.5, "end_s": 12.5}]
    m = figures(common.job_summary(_result(times, fault_log=log)), 10.5, 2.0)
    assert m["failure_over_p99"] == pytest.approx(1.05)
    assert reboot_judge(m)[0] == "reproduced"
    slow = [1.0] * 10 + [1.5] + [1.0] * 10
    m = figures(common.job_summary(_result(slow, fault_log=log)), 10.5, 2.0)
    assert reboot_judge(m)[0] == "partly"
    txt = t1_reboot.why_text({**m, "failure_extra_rtts": 50.0, "iteration_rtts": 100.0},
                             {"restarts": 1}, {"qp_errors": 1, "failed_after_s": 0.01,
                                               "qp_error_reasons": ["RETRY_EXCEEDED"]}, 0.01)  # fmt: skip
    assert "1.50x" in txt and "RETRY_EXCEEDED" in txt and "50.0 base RTTs" in txt
    dead = figures(common.job_summary(_result([1.0] * 10, failed=(10.0, 5.0))), 10.5, 2.0)
    assert reboot_judge(dead)[0] == "not reproduced"


def test_the_flaps_verdict_on_synthetic_jobs() -> None:
    clean = step_figures(common.job_summary(_result([1.0] * 40)))
    mild = step_figures(common.job_summary(_result([1.0] * 38 + [1.1, 1.2])))
    hard = step_figures(common.job_summary(_result([1.0] * 30 + [3.0] * 10)))
    assert flaps_judge(compare(clean, mild), mild)[0] == "reproduced"
    assert flaps_judge(compare(clean, hard), hard)[0] == "partly"
    dead = step_figures(common.job_summary(_result([1.0] * 5, failed=(5.0, 1.0))))
    assert flaps_judge(compare(clean, dead), dead)[0] == "not reproduced"


def test_the_schedules() -> None:
    # the reboot: mid-iteration after the steady ones, the job outlasting the outage
    at, iters = t1_reboot.plan(False, 1e-4, 1e-2)
    assert at == pytest.approx(10.5e-4) and iters == 10 + 100 + 15
    # the flaps: every PERIOD_ITERS from FIRST_ITERS, each DOWN_ITERS, all over in time
    links = [f"p{p}-t0-0,p{p}-t1-0" for p in range(8)]
    steps = flaps.flap_steps(False, 1e-4, links)
    assert len(steps) == flaps.flaps_possible(False) == 4
    assert [s.a for s in steps] == [f"p{p}-t0-0" for p in range(4)]
    assert steps[1].at_s - steps[0].at_s == pytest.approx(flaps.PERIOD_ITERS * 1e-4)
    assert all(s.end_s - s.at_s == pytest.approx(flaps.DOWN_ITERS * 1e-4) for s in steps)
    assert steps[-1].end_s < flaps.ITERS * 1e-4
    ranked = ["p7-t0-3,p7-t1-1", "p7-t0-1,p7-t1-0", "p1-t0-0,p1-t1-0", "p2-t0-0,p2-t1-0"]
    assert flaps.over_planes(ranked, 3) == [ranked[0], ranked[2], ranked[3]]
    # RoCEv2's retries: the local ACK timeout (4 base RTTs here), doubling, 8 times
    spec = common.paper_spec()
    assert common.rocev2_retry_budget_s(spec) == pytest.approx(255 * 4 * spec.base_rtt_s)


def _lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t1_reboot", "flaps"])
def test_the_quick_form_writes_the_contract_keys(name: str, sim_quick_all: Path) -> None:
    d = json.loads((sim_quick_all / "sim" / f"{name}.json").read_text())
    for k in base.RESULT_KEYS:
        assert k in d, k
    assert d["verdict"] in base.VERDICTS and d["quick"] is True and d["why"]
    assert d["setup"]["link_rate_mbit"] == 100e3 and d["setup"]["planes"] == 8
    assert all("mrc-sim --workload allreduce" in c and "--fault" in c for c in d["commands"])
    h = d["metrics"]["headline"]
    assert h["mrc"] is not None and h["rocev2"] is not None
    if name == "t1_reboot":
        m = d["mrc"]
        assert m["run"]["verified"] and m["run"]["qp_errors"] == 0
        assert m["figures"]["restarts"] == 0 and m["run"]["fault_log"]
        # the outage made the failure iteration slower than the steady ones
        assert h["mrc"] > 1.0
    else:
        for t in ("mrc", "rocev2"):
            assert d[t]["control"]["verified"] and d[t]["flaps"]["verified"]
            assert len(d[t]["flaps"]["faults"]) == d["setup"]["flaps"] >= 2
