"""The experiments' framework without a lab: the result's contract keys, verdict checking,
the registry, the report, the statistics, and the job experiments' (claims 7, 9) figures
and verdicts on synthetic step logs."""

from __future__ import annotations

import json

import pytest

from lab.fabric.params import LabParams
from lab.proc.slower import cpu_bound_runs
from lab.workloads.experiments import base, flaps, jobs, registry, report, t1_reboot
from lab.workloads.experiments.base import Context, Result


def test_result_has_the_contract_keys_and_refuses_unknown_verdicts(tmp_path):
    r = Result("x", 3, "a claim", {"text": "paper"})
    with pytest.raises(ValueError):
        r.judge("maybe", "")
    r.judge("partly", "because")
    r.metrics = {"headline": {"name": "h", "mrc": float("nan"), "rocev2": 1.0}}
    d = json.loads(r.write(tmp_path).read_text())
    for k in base.RESULT_KEYS:
        assert k in d, k
    assert d["verdict"] == "partly" and d["metrics"]["headline"]["mrc"] is None  # no NaN


def test_registry_finds_by_name_and_number_and_lists_in_claim_order():
    names = [s.name for s in registry.specs()]
    assert names[0] == "p2p" and "t1_reboot" in names and "flaps" in names
    nums = [s.number for s in registry.specs()]
    assert nums == sorted(nums)
    assert registry.find("7").name == "t1_reboot" and registry.find("flaps").number == 9
    with pytest.raises(KeyError, match="no experiment"):
        registry.find("nope")


def test_a_failing_experiment_is_recorded_not_hidden(tmp_path):
    def boom(ctx, res):
        raise RuntimeError("lab exploded")

    spec = registry.Spec("boom", 99, "c", {"text": "p"}, boom)
    res = registry.run(spec, Context(out_dir=tmp_path, echo=lambda _t: None))
    d = json.loads((tmp_path / "boom.json").read_text())
    assert res.verdict == d["verdict"] == "not reproduced"
    assert "lab exploded" in d["extra"]["error"] and "lab exploded" in d["why"]


def _cpu_limited_above(limit_mbit: float, rates: list):
    """An experiment whose runs are CPU-bound above ``limit_mbit`` (one of MRC's two runs
    only above twice that), each flagged as a real one would be (``cpu_bound_runs``)."""

    def run(ctx, res):
        rate = ctx.rate_mbit if ctx.rate_mbit is not None else 40.0  # (its "calibrated" rate)
        rates.append(rate)
        res.setup = {"link_rate_mbit": rate}
        res.mrc = {"tiers": {"a": {"cpu_bound_runs": [rate > limit_mbit, rate > 2 * limit_mbit]}}}
        res.rocev2 = {"cpu_bound_runs": 1 if rate > limit_mbit else 0}
        res.judge("reproduced" if rate <= limit_mbit else "partly", f"at {rate:g}")

    return run


def test_cpu_bound_runs_are_counted_wherever_a_result_records_them():
    assert cpu_bound_runs({"cpu_bound_runs": [True, False, True]}) == 2
    assert cpu_bound_runs({"x": [{"cpu_bound_runs": 3}, {"y": {"cpu_bound_runs": []}}]}) == 3
    assert cpu_bound_runs({"cpu_bound": True, "runs": [1, 2]}) == 0


def test_an_experiment_with_cpu_bound_runs_runs_again_at_half_the_rate(tmp_path):
    rates: list = []
    spec = registry.Spec("cpu", 98, "c", {"text": "p"}, _cpu_limited_above(12.0, rates))
    res = registry.run(spec, Context(out_dir=tmp_path, echo=lambda _t: None))
    assert rates == [40.0, 20.0, 10.0]  # two repeats, the second one fabric-bound
    d = json.loads((tmp_path / "cpu.json").read_text())
    assert d["verdict"] == res.verdict == "reproduced" and d["setup"]["link_rate_mbit"] == 10.0
    assert [t["cpu_bound_runs"] for t in d["extra"]["cpu_bound_repeats"]] == [3, 2, 0]
    assert "run 3 times for CPU-bound runs (3 at 40 Mb/s, 2 at 20 Mb/s, 0 at 10 Mb/s)" in d["why"]
    assert "still CPU-bound" not in d["why"]
    text = report.render(report.load_all(tmp_path), tmp_path)
    assert (
        "run 3 times for CPU-bound runs" in text and "20 Mb/s: 2 CPU-bound run(s), partly" in text
    )


def test_cpu_bound_repeats_stop_when_a_lower_rate_does_not_help(tmp_path):
    rates: list = []
    spec = registry.Spec("cpu", 98, "c", {"text": "p"}, _cpu_limited_above(1.0, rates))
    res = registry.run(spec, Context(out_dir=tmp_path, echo=lambda _t: None, cpu_bound_repeats=5))
    assert rates == [40.0, 20.0]  # 20 was as CPU-bound as 40: no third try
    assert [t["chosen"] for t in res.extra["cpu_bound_repeats"]] == [True, False]


def test_cpu_bound_repeats_stop_at_their_limit_and_say_so(tmp_path):
    rates: list = []
    spec = registry.Spec("cpu", 98, "c", {"text": "p"}, _cpu_limited_above(1.0, rates))
    res = registry.run(spec, Context(out_dir=tmp_path, echo=lambda _t: None, cpu_bound_repeats=1))
    assert rates == [40.0, 20.0]
    assert "still CPU-bound" in res.why and "a lower rate did not make fewer" in res.why
    assert res.setup["link_rate_mbit"] == 40.0  # (as CPU-bound at 20: the faster run is kept)
    rates.clear()
    registry.run(spec, Context(out_dir=tmp_path, echo=lambda _t: None, quick=True))
    assert rates == [40.0]  # quick (the suite's): no repeats unless asked
    assert "cpu_bound_repeats" not in json.loads((tmp_path / "cpu.json").read_text()).get(
        "extra", {}
    )


def test_report_renders_every_result_with_its_verdict(tmp_path):
    for n, v in ((2, "reproduced"), (1, "not reproduced")):
        r = Result(f"e{n}", n, f"claim {n}", {"text": f"paper {n}"})
        r.judge(v, f"why {n}")
        r.metrics = {"headline": {"name": "g", "unit": "x", "mrc": 0.9, "rocev2": 0.5,
                                  "paper_mrc": 0.95},
                     "mrc": {"jain": 0.99}, "rocev2": {"jain": 0.7}}  # fmt: skip
        r.setup = base.setup_of(LabParams(), base_rtt_s=0.001)
        r.write(tmp_path)
    text = report.render(report.load_all(tmp_path), tmp_path)
    assert text.index("## 1. e1") < text.index("## 2. e2")  # claim order
    assert "**not reproduced**" in text and "why 2" in text and "| jain | 0.99 | 0.7 |" in text


def test_statistics():
    assert base.percentile([1, 2, 3, 4], 50) == 2.5 and base.percentile([], 99) is None
    assert base.jain([1, 1, 1]) == 1.0 and abs(base.jain([1, 0, 0]) - 1 / 3) < 1e-9
    assert base.cv([1.0]) is None and base.cv([1.0, 1.0]) == 0.0
    s = base.setup_of(LabParams(rate_mbit=100), base_rtt_s=0.001)
    assert s["paths_between_t0s"] == 16 and 2.9 < s["bdp_packets_per_path"] < 3.0


def summary(rows):
    return {"step_columns": ["job", "iter", "start_s", "end_s", "ok", "faults"],
            "step_log": rows, "restarts": 0, "failed_steps": 0, "busbw_bps_p50": 1e8}  # fmt: skip


def steady_rows(n, start=0.0, dur=0.5, faults=()):
    rows, t = [], start
    for i in range(n):
        rows.append([0, i, t, t + dur, True, list(faults)])
        t += dur
    return rows


def test_t1_reboot_failure_step_against_steady_p99():
    rows = steady_rows(20)  # 0..10 s of 0.5 s steps
    rows.append([0, 20, 10.0, 10.5, True, [1]])  # during the reboot at 10 s: no slower
    rows += [[0, 21 + i, 10.5 + 0.5 * i, 11.0 + 0.5 * i, True, []] for i in range(10)]
    f = t1_reboot.figures(summary(rows), 10.0, 3.0)
    assert f["failure_over_p99"] == 1.0 and f["recovery_s"] == 0.0
    assert t1_reboot.judge(f)[0] == "reproduced"
    rows[20] = [0, 20, 10.0, 14.0, True, [1]]  # a 4 s step: 8x
    f = t1_reboot.figures(summary(rows), 10.0, 3.0)
    assert f["failure_over_p99"] == 8.0 and f["recovery_s"] == 4.0
    assert t1_reboot.judge(f)[0] == "partly"
    bad = {**summary(rows), "restarts": 1}
    assert t1_reboot.judge(t1_reboot.figures(bad, 10.0, 3.0))[0] == "not reproduced"


def test_t1_reboot_picks_the_busiest_t1_by_delta():
    assert t1_reboot.busiest_t1({"a": 100, "b": 0}, {"a": 110, "b": 50}) == "b"


def test_flaps_schedule_and_verdict():
    steps = flaps.flap_steps(LabParams(), 40.0)
    assert len(steps) == 4 and len({(s.a, s.b) for s in steps}) == 4  # different links
    assert all(s.undo_s - s.at_s == flaps.DOWN_S for s in steps)
    ctl = jobs.step_figures(summary(steady_rows(20)))
    same = jobs.step_figures(summary(steady_rows(20, faults=[1])))
    c = flaps.compare(ctl, same)
    assert c["p50_change"] == 0.0 and flaps.judge(c, same)[0] == "reproduced"
    slow = jobs.step_figures(summary(steady_rows(20, dur=0.6)))
    assert flaps.judge(flaps.compare(ctl, slow), slow)[0] == "partly"


def test_paper_bdp_delay_gives_a_lab_path_the_simulated_forms_bdp() -> None:
    """The loss experiment's lab delay: a path then holds what the claims' simulated forms
    state for the paper's scale (mrcnic.sim.scale.PAPER), at any calibrated rate."""
    from lab.fabric.paths import RESULTS

    b = base
    paper = b.paper_bdp_packets_per_path()
    sim = RESULTS / "experiments" / "sim" / "loss.json"
    if sim.exists():  # the same figure as the committed simulated form's setup
        assert round(paper, 2) == json.loads(sim.read_text())["setup"]["bdp_packets_per_path"]
    for rate in (3.3, 14, 45, 100):
        p = LabParams(rate_mbit=rate)
        assert b.bdp_packets_per_path(p) < 7  # the undelayed lab: a few packets
        d = b.paper_delay_us(p)
        q = p.with_overrides(delay_us=d)
        assert paper <= b.bdp_packets_per_path(q) < paper + 0.05
        setup = b.setup_of(q)
        assert setup["delay_us_per_t0_t1_link"] == d and setup["paper_bdp_packets_per_path"]
    assert "delay_us_per_t0_t1_link" not in b.setup_of(LabParams())
