"""The fault step both the lab and mrc-sim play (mrcnic.faultplan): its text form reads back
to the same step, bad specs say which part is bad, and the lab's Step is this one."""

from __future__ import annotations

import pytest

from lab.proc import schedule
from mrcnic.faultplan import FaultSpecError, Step, flap_steps, parse_step, parse_steps

STEPS = [
    Step("link", 1.0, "p0-t0-1", "p0-t1-2", undo_s=2.0),
    Step("link", 0.1 + 0.2, "p0-t0-1", "p0-t1-2"),  # never undone, an awkward float
    Step("reboot", 1.0, "p3-t1-0", down_ms=500.0),
    Step("reboot", 0.000_02, "p3-t0-7", down_ms=333.3),
    Step("port", 1.0, "h0", plane=3, undo_s=2.5),
    Step("loss", 0.5, "p0-t0-0", "p0-t1-1", undo_s=0.75, percent=1.0),
    Step("loss", 0.5, "p0-t0-0", "p0-t1-1", percent=0.25),
    Step("link", 12.345678901, "h3", "p1-t0-1", undo_s=99.0),
]


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.text)
def test_the_text_form_reads_back_to_the_same_step(step: Step) -> None:
    assert parse_step(step.text) == step
    assert Step.from_dict(step.to_dict()) == step


def test_the_documented_examples_mean_what_the_doc_says() -> None:
    assert parse_step("link:p0-t0-1,p0-t1-2@1s-2s") == STEPS[0]
    assert parse_step("link:p0-t0-1,p0-t1-2@1s+1000ms") == STEPS[0]
    assert parse_step("reboot:p3-t1-0@1s+500ms") == STEPS[2]
    assert parse_step("reboot:p3-t1-0@1s-1.5s") == STEPS[2]
    assert parse_step("reboot:p3-t1-0@1") == Step("reboot", 1.0, "p3-t1-0")  # down 1 s
    assert parse_step("port:h0,3@1s-2.5s") == STEPS[4]
    assert parse_step(" loss:p0-t0-0,p0-t1-1=1%@500ms-750ms ") == STEPS[5]
    assert parse_step("reboot:p3-t1-0@1s+0.5").down_ms == 500.0  # a plain number: seconds


def test_a_flap_is_link_steps_down_for_half_of_each_period() -> None:
    steps = parse_steps("flap:p0-t0-0,p0-t1-1,3x100ms@1s")
    assert steps == flap_steps("p0-t0-0", "p0-t1-1", 1.0, 3, 0.1)
    assert [(s.kind, s.at_s, s.undo_s) for s in steps] == [
        ("link", 1.0, 1.05),
        ("link", 1.1, 1.15),
        ("link", 1.2, pytest.approx(1.25)),
    ]
    with pytest.raises(FaultSpecError, match="flap is several steps"):
        parse_step("flap:p0-t0-0,p0-t1-1,3x100ms@1s")


@pytest.mark.parametrize(
    ("spec", "part"),
    [
        ("link p0-t0-1 p0-t1-2", "KIND:ARGS@TIME"),
        ("lnk:p0-t0-1,p0-t1-2@1s", "'lnk': unknown kind"),
        ("link:p0-t0-1@1s", "p0-t0-1: link takes 2"),
        ("link:p0-t0-1,p0-t1-2,x@1s", "link takes 2"),
        ("link:p0-t0-1,sw9@1s", "'sw9': not a node"),
        ("link:p0-t0-1,p0-t0-1@1s", "two different nodes"),
        ("link:p0-t0-1,p0-t1-2@1zz", "'1zz': bad time"),
        ("link:p0-t0-1,p0-t1-2@2s-1s", "@2s-1s: the undo must come after"),
        ("link:p0-t0-1,p0-t1-2=1%@1s", "=1%: only loss takes a percentage"),
        ("reboot:h0@1s", "'h0': not a switch"),
        ("reboot:p0-t1-0,p0-t1-1@1s", "reboot takes one switch"),
        ("reboot:p0-t1-0@2s-1s", "must come back after"),
        ("port:p0-t0-0,1@1s", "'p0-t0-0': not a host"),
        ("port:h0,x@1s", "'x': the plane is a number"),
        ("loss:p0-t0-0,p0-t1-1@1s", "loss needs =PERCENT%"),
        ("loss:p0-t0-0,p0-t1-1=lots@1s", "=lots: PERCENT%"),
        ("loss:p0-t0-0,p0-t1-1=0%@1s", "=0%: the percentage must be in (0, 100]"),
        ("flap:p0-t0-0,p0-t1-1,3@1s", "'3': COUNTxPERIOD"),
        ("flap:p0-t0-0,p0-t1-1,3x100ms@1s-2s", "a flap starts at one TIME"),
    ],
)
def test_a_bad_spec_names_its_bad_part(spec: str, part: str) -> None:
    with pytest.raises(FaultSpecError) as e:
        parse_steps(spec)
    assert part in str(e.value) and repr(spec) in str(e.value)


def test_a_step_refuses_what_no_fault_can_be() -> None:
    with pytest.raises(ValueError, match="unknown fault kind"):
        Step("flood", 1.0, "h0")
    with pytest.raises(ValueError, match="at_s must be >= 0"):
        Step("link", -1.0, "p0-t0-0", "p0-t1-0")
    with pytest.raises(ValueError, match="down_ms must be > 0"):
        Step("reboot", 1.0, "p0-t1-0", down_ms=0)
    with pytest.raises(ValueError, match="percent"):
        Step("loss", 1.0, "p0-t0-0", "p0-t1-0", percent=150)


def test_the_lab_plays_this_step_and_adds_what_it_takes_away() -> None:
    lab_step = schedule.Step.from_dict(STEPS[0].to_dict())
    assert isinstance(lab_step, Step) and isinstance(lab_step, schedule.Step)
    assert lab_step.text == STEPS[0].text and lab_step.label == STEPS[0].label
    assert lab_step.outage().kind.name == "LINK"
