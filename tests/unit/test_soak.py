"""The soak's pure parts (lab/workloads/soak/): the seeded schedule, the step-time statistics, which
steps a fault overlaps, the verdict and the screen. The soak itself: tests/lab/test_lab_soak.py."""

from __future__ import annotations

import json

import pytest

from lab.fabric.params import LabParams
from lab.fabric.topology import Plan
from lab.proc.schedule import Step
from lab.workloads import soak

HOSTS = ["h0", "h1", "h2", "h3"]


def _end_s(s: Step) -> float:
    """When a step is over at the latest (a reboot: down time plus the boot allowance)."""
    if s.kind == "reboot":
        return s.at_s + s.down_ms / 1000 + soak.BOOT_S
    assert s.undo_s is not None
    return s.undo_s


@pytest.mark.parametrize("seed", [1, 2, 3, 99])
def test_schedule_is_seeded_and_faults_never_overlap(seed: int) -> None:
    params = LabParams()
    a = soak.make_schedule(seed, 1800.0, 4.0, params, HOSTS)
    assert a == soak.make_schedule(seed, 1800.0, 4.0, params, HOSTS)
    assert a != soak.make_schedule(seed + 1, 1800.0, 4.0, params, HOSTS)
    assert 110 <= len(a) <= 120  # one per 15 s slot from 5 s on
    for prev, nxt in zip(a, a[1:], strict=False):
        assert _end_s(prev) + soak.GAP_S <= nxt.at_s + 1e-6
    assert _end_s(a[-1]) <= 1800.0
    assert {soak.fault_kind(s) for s in a} == set(soak.FAULT_KINDS)


def test_schedule_names_nodes_of_the_lab() -> None:
    params = LabParams()
    plan = Plan(params)
    for s in soak.make_schedule(5, 600.0, 12.0, params, HOSTS):
        if s.kind == "reboot":
            assert plan.parse_node(s.a).kind in ("t0", "t1")
        elif s.kind == "port":
            assert s.a in HOSTS and 0 <= s.plane < params.planes
        else:
            plan.link_between(s.a, s.b)  # raises for a pair that is not a link
            if s.kind == "link":
                assert "-t0-" in s.a and "-t1-" in s.b  # flaps are T0-T1 links
            else:
                assert s.percent in soak.LOSS_PERCENTS


def test_schedule_of_a_short_run_fits_it() -> None:
    steps = soak.make_schedule(3, 36.0, 10.0, LabParams(), HOSTS)
    assert len(steps) >= 3
    assert all(_end_s(s) <= 36.0 for s in steps)
    with pytest.raises(ValueError):
        soak.make_schedule(3, 36.0, 0.0, LabParams(), HOSTS)


def test_percentile_and_distribution() -> None:
    v = [float(x) for x in range(1, 101)]
    assert soak.percentile(v, 50) == 50.0
    assert soak.percentile(v, 99) == 99.0
    assert soak.percentile(v, 100) == 100.0
    assert soak.percentile([7.0], 99) == 7.0
    d = soak.distribution([0.3, 0.1, 0.2])
    assert d["count"] == 3 and d["p50_s"] == 0.2 and d["max_s"] == 0.3 and d["min_s"] == 0.1
    assert soak.distribution([]) == {"count": 0}


def test_overlapping_counts_the_settle_time() -> None:
    spans = [
        soak.FaultSpan(1, Step("link", 10.0, "p0-t0-0", "p0-t1-0", undo_s=13.0), 10.0, 13.0),
        soak.FaultSpan(2, Step("reboot", 20.0, "p1-t1-0"), 20.0, None),  # still rebooting
    ]
    assert soak.overlapping(9.0, 10.5, spans, 1.0, 30.0) == [1]
    assert soak.overlapping(13.5, 13.8, spans, 1.0, 30.0) == [1]  # within the settle time
    assert soak.overlapping(14.2, 14.5, spans, 1.0, 30.0) == []
    assert soak.overlapping(25.0, 25.2, spans, 1.0, 30.0) == [2]


def test_step_line_marks_corruption_and_qp_errors() -> None:
    good = {"start": 1.0, "end": 1.2, "ok": True, "errors": []}
    wrong = {"start": 1.1, "end": 1.3, "ok": False, "errors": []}
    qp = {"start": 1.0, "end": 1.1, "ok": False, "errors": ["timed out", "rank 1: QP 0x5: x"]}
    line = soak.step_line(4, [good, good], 2.0)
    assert line["ok"] and (line["start_mono"], line["end_mono"]) == (1.0, 1.2)
    line = soak.step_line(4, [good, wrong], 2.0)
    assert not line["ok"] and line["corrupt"] and line["qp_errors"] == 0
    line = soak.step_line(4, [good, qp], 2.5)
    assert not line["corrupt"] and line["qp_errors"] == 1 and line["end_mono"] == 2.5
    assert line["errors"][0].startswith("rank 1: QP")  # the cause first


def _run(transport: str, oks: list[bool], corrupt: bool = False) -> soak.TransportRun:
    run = soak.TransportRun(transport, 60.0, wall_s=60.0)
    for i, ok in enumerate(oks):
        run.steps.append(
            soak.StepRec(0, i, i * 1.0, i * 1.0 + 0.5, ok, corrupt and not ok, 0 if ok else 1, [])
        )
    run.jobs.append({"job": 0})
    run.spans.append(soak.FaultSpan(1, Step("port", 2.0, "h1", plane=3, undo_s=3.0), 2.2, 3.1))
    return run


def test_summary_verdict_and_screen() -> None:
    mrc = _run("mrc", [True] * 6).summary(1 << 20, 4, 1.0)
    assert mrc["steps"] == 6 and mrc["bytes_verified"] == 6 * 4 * (1 << 20)
    assert mrc["fault_steps"] == 3  # steps 2, 3 and 4 (start 4.0 < 3.1 + 1 settle)
    assert [r[-1] for r in mrc["step_log"]] == [[], [], [1], [1], [1], []]
    roce = _run("rocev2", [True, False, True]).summary(1 << 20, 4, 1.0)
    assert roce["qp_errors"] == 1 and roce["failed_steps"] == 1
    doc = {
        "transports": {"mrc": mrc, "rocev2": roce},
        "lab": LabParams().to_dict(),
        "schedule": [Step("port", 2.0, "h1", plane=3, undo_s=3.0).to_dict()],
        "minutes": 1.0,
        "seed": 1,
        "events_per_min": 4.0,
        "hosts": HOSTS,
        "size": 1 << 20,
        "started_at": "2026-11-26T00:00:00Z",
        "settle_s": 1.0,
    }
    ok, reasons = soak.verdict(doc)
    assert ok and not reasons  # a RoCEv2 QP error is the baseline's, not a failure
    doc["verdict"] = {"ok": ok, "reasons": reasons}
    text = soak.render_summary(doc)
    assert "verdict: OK" in text and "QP errors" in text
    json.dumps(doc)  # the document is JSON as it is
    bad = _run("mrc", [True, False], corrupt=True).summary(1 << 20, 4, 1.0)
    ok, reasons = soak.verdict({**doc, "transports": {"mrc": bad}})
    assert not ok and any("QP errors" in r for r in reasons)
    assert any("verification" in r for r in reasons)


def test_calibration_name_is_a_lab_name_of_our_own() -> None:
    for name in ("mrcsoak", "mrcsoakt", "mrcabcdef", "mrcabcdec", "mrc"):
        cal = soak.calibration_name(name)
        assert cal != name and cal != "mrccal"
        LabParams(name=cal)  # valid


def test_late_and_cut_short_faults_are_flagged() -> None:
    step = Step("loss", 10.0, "p0-t0-0", "p0-t1-0", undo_s=15.0, percent=1.0)
    assert not soak.FaultSpan(1, step, 10.1, 15.0).late
    assert soak.FaultSpan(1, step, 12.0, 17.0).late  # applied 2 s after its time
    assert soak.FaultSpan(1, step, 10.1, 10.2).late  # held 0.1 s of 5 s
    reboot = Step("reboot", 10.0, "p0-t1-0", down_ms=1500)
    assert soak.FaultSpan(1, reboot, 10.0, 11.7).planned_s == 1.5
    assert not soak.FaultSpan(1, reboot, 10.0, 11.7).late
