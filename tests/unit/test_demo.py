"""The demo's schedule and screen, and the pure parts of lab/proc/watch.py and benchrun.py (no root, no lab)."""

from __future__ import annotations

import json

import pytest

from lab.fabric.params import LabParams
from lab.proc import analysis as an
from lab.proc import benchrun, watch
from lab.proc.benchrun import WriteSpec
from lab.proc.schedule import Step
from lab.workloads import demo

NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
mrc-p0: 1234567     300    0    0    0     0          0         0  7654321     900    0    0    0     0       0          0
 mrc-m:    2518      25    0    0    0     0          0         0      510       5    0    0    0     0       0          0
"""


def test_parse_net_dev() -> None:
    d = watch.parse_net_dev(NET_DEV)
    assert d == {"lo": (0, 0), "mrc-p0": (1234567, 7654321), "mrc-m": (2518, 510)}


def test_parse_json_output_takes_the_object_even_after_other_lines() -> None:
    obj = {"goodput_bps": 1, "timeline": [[0, 1]]}
    assert benchrun.parse_json_output(json.dumps(obj)) == obj
    assert benchrun.parse_json_output("table line\n" + json.dumps(obj, indent=1)) == obj
    assert benchrun.parse_json_output("") is None
    assert benchrun.parse_json_output("no json here") is None
    assert benchrun.parse_json_output("[1, 2]") is None


def test_write_spec_argv_follows_the_documented_cli(monkeypatch) -> None:
    monkeypatch.setenv("MRC_BENCH", "mrc-bench")
    s = WriteSpec("h0", "h3", 65536, 30.0, None, 8, "rocev2", 250)
    assert " ".join(s.argv("mrcdemo")) == (
        "mrc-bench write --lab mrcdemo --src h0 --dst h3 --size 65536 --duration 30 --qps 8 "
        "--transport rocev2 --timeline 250ms --json"
    )
    it = WriteSpec("h1", "h2", 4096, None, 100, None, "mrc", None)
    assert " ".join(it.argv("mrc")) == (
        "mrc-bench write --lab mrc --src h1 --dst h2 --size 4096 --iters 100 --transport mrc --json"
    )


def test_steps_labels_outages_and_validation() -> None:
    r = Step("reboot", 8.0, "p3-t1-0", down_ms=2000)
    assert r.label == "reboot p3-t1-0" and r.mark == "R"
    assert r.outage() == an.Outage.switch("p3-t1-0")
    link = Step("link", 16.0, "p5-t0-0", "p5-t1-1", undo_s=22.0)
    assert link.outage() == an.Outage.link("p5-t0-0", "p5-t1-1")
    assert link.to_dict()["undo_s"] == 22.0
    port = Step("port", 1.0, "h0", plane=2, undo_s=2.0)
    assert port.outage() == an.Outage.port("h0", 2)
    loss = Step("loss", 1.0, "p1-t0-0", "p1-t1-0", undo_s=2.0, percent=1.0)
    assert loss.outage().kind is an.OutageKind.LOSS and "1% loss" in loss.label
    with pytest.raises(ValueError):
        Step("flood", 1.0, "h0")
    with pytest.raises(ValueError):
        Step("link", 5.0, "p0-t0-0", "p0-t1-0", undo_s=4.0)


def test_demo_schedule_fits_the_run_and_the_lab() -> None:
    for duration in (10.0, 30.0, 60.0):
        steps = demo.demo_schedule(duration, planes=8, t1=2)
        kinds = [s.kind for s in steps]
        assert kinds == ["reboot", "link"]
        reboot, link = steps
        assert 0 < reboot.at_s < link.at_s < link.undo_s < duration
        assert reboot.at_s + reboot.down_ms / 1000 < link.at_s
        # The faulted elements exist in the lab and lie on h0 -> h3's paths.
        shape = an.Shape.from_params(LabParams())
        assert an.flow_capacity_bps(shape, 0, 3, [s.outage() for s in steps]) == 800e6
    small = demo.demo_schedule(30.0, planes=2, t1=1)
    assert small[0].a == "p1-t1-0" and small[1].b == "p1-t1-0"


def _doc(with_rocev2: bool = True, failed: bool = False) -> dict:
    """A demo document as lab.workloads.demo writes it, from synthetic runs."""
    steps = demo.demo_schedule(30.0, 8, 2)
    bin_s = 0.25
    full = 800e6

    def run(low: float, until: float) -> dict:
        tl = [[i * bin_s, 0.95 * full] for i in range(120)]
        tl = [[t, low * full if 8.0 <= t < until else g] for t, g in tl]
        faults = [
            an.FaultWindow("reboot p3-t1-0", 8.0, 10.5, steps[0].outage(), "p3-t1-0 back"),
            an.FaultWindow("link", 17.1, 23.1, steps[1].outage(), "link up"),
        ]
        timeline = an.Timeline.from_json(tl, bin_s)
        cap = an.capacity_fn(an.Shape.from_params(LabParams()), 0, 3, faults, full)
        a = an.analyse(timeline, cap, faults)
        return {
            "result": {
                "goodput_bps": 0.93 * full,
                "capacity_bps": full,
                "goodput_fraction": 0.93,
                "verified": True,
                "qp_errors": 0,
                "bytes": 2_800_000_000,
                "cpu_percent": 88.0,
                "timeline": tl,
            },
            "timeline": tl,
            "faults": [f.to_dict() for f in faults],
            "analysis": a.to_dict(),
            "capacity_per_bin_bps": list(a.capacities_bps),
            "lab_cpu": {"switch_cores": 0.3},
            "error": None,
            "qps_label": "(1 QP, sprayed)",
        }

    runs = {"mrc": run(0.5, 8.25)}
    if with_rocev2:
        runs["rocev2"] = run(0.0, 11.0)
        runs["rocev2"]["qps_label"] = "(8 QPs, one path each)"
    if failed:
        runs["rocev2"] = {"error": "mrc-bench printed no JSON", "stderr_tail": "Traceback\nboom"}
    return {
        "lab": LabParams(name="mrcdemo").to_dict(),
        "src": "h0",
        "dst": "h3",
        "size": 1 << 20,
        "duration_s": 30.0,
        "timeline_ms": 250,
        "schedule": [s.to_dict() for s in steps],
        "runs": runs,
        "outputs": {"json": "results/demo.json", "plot": "results/demo-timeline.png"},
    }


def test_screen_shows_timelines_faults_dips_and_totals() -> None:
    screen = demo.render_screen(_doc())
    lines = screen.splitlines()
    assert len(lines) <= 40  # one screen
    assert max(len(line) for line in lines) <= 100
    assert "MRC (1 QP, sprayed)" in screen and "RoCEv2 (8 QPs, one path each)" in screen
    assert "R reboot p3-t1-0" in screen and "L link p5-t0-0-p5-t1-1" in screen
    # MRC's short dip and RoCEv2's long one, as the analysis found them.
    reboot_row = next(line for line in lines if line.startswith("R reboot"))
    assert "to 50% for 250 ms" in reboot_row
    assert "to 0% for 3.0 s" in reboot_row
    assert "2.80 GB, verified" in screen
    assert "results/demo-timeline.png" in screen
    # The marker line carries every fault and its repair.
    marker = next(line for line in lines if line.startswith("     +"))
    assert all(m in marker for m in "RrLl")


def test_screen_marks_a_write_that_ended_early() -> None:
    doc = _doc()
    r = doc["runs"]["rocev2"]
    r["timeline"] = r["timeline"][:40]  # ended at 10 s of 30 (a QP error)
    r["capacity_per_bin_bps"] = r["capacity_per_bin_bps"][:40]
    screen = demo.render_screen(doc)
    assert "E: the write ended here" in screen
    rows = [line for line in screen.splitlines() if line.startswith("     +")]
    assert "E" not in rows[0] and "E" in rows[1]
    assert len(rows[0]) == len(rows[1])  # one time axis for both runs
    # Nothing is drawn after the end: the last two thirds of RoCEv2's bars are blank.
    bars = [line for line in screen.splitlines() if line.startswith("     |")]
    assert bars[1][6:][-30:].strip() == ""
    assert bars[0][6:][-30:].strip() != ""


def test_screen_in_ascii_and_without_the_baseline() -> None:
    screen = demo.render_screen(_doc(with_rocev2=False), unicode=False)
    assert screen.isascii()
    assert "RoCEv2" not in screen
    assert "█" not in screen


def test_screen_says_when_a_run_failed() -> None:
    screen = demo.render_screen(_doc(failed=True))
    assert "RoCEv2: FAILED: mrc-bench printed no JSON" in screen
    assert "boom" in screen


def test_demo_refuses_without_root(monkeypatch, capsys) -> None:
    monkeypatch.setattr(demo, "have_net_admin", lambda: False)
    assert demo.main([]) == 2
    assert "needs root" in capsys.readouterr().err


def test_screen_says_the_rate_chosen_and_whether_each_run_was_cpu_bound() -> None:
    doc = _doc()
    doc["rate_choice"] = {
        "mode": "calibrated",
        "rate_mbit": 40.0,
        "line": "this machine carries ~11,352 frames/s through the lab (python switches, 143 us "
        "of CPU per frame): links at 40 Mb/s (9,500 frames/s) so the fabric, not the CPU, limits",
    }
    doc["runs"]["mrc"]["result"].update(
        cpu_bound=False, machine_busy_fraction=0.71, nic_core_fraction_max=0.34
    )
    # a result without the flag (older mrc-bench): computed from its CPU figures
    doc["runs"]["rocev2"]["result"].update(
        machine_cpu_percent=93.0, cpu_percent_client=40.0, cpu_percent_server=30.0
    )
    screen = demo.render_screen(doc)
    lines = screen.splitlines()
    assert len(lines) <= 42 and max(len(line) for line in lines) <= 100
    assert "rate: this machine carries ~11,352 frames/s" in screen
    assert "so the fabric, not the CPU, limits" in " ".join(screen.split())
    row = next(line for line in lines if line.startswith("CPU-bound"))
    assert "no (71% busy, NIC 34%)" in row and "YES (93% busy, NIC 40%)" in row


def test_message_size_keeps_bins_smooth() -> None:
    """A bin counts completed writes: the demo's size puts 16 or more in each bin."""
    from lab.workloads.demo import MSGS_PER_BIN, message_size

    for links_mbit in (1, 4, 8.3, 33, 100):
        cap = 8 * links_mbit * 1e6
        size = message_size(cap, 250)
        per_bin = cap * 0.25 / 8 / size
        assert size & (size - 1) == 0 and (1 << 14) <= size <= (1 << 18)
        assert per_bin >= MSGS_PER_BIN or size == 1 << 14, (links_mbit, size, per_bin)
    assert message_size(8 * 100e6, 250) == 1 << 18  # the old default at 100 Mb/s
