"""Faults on the lab's schedule in the whole-fabric simulator (mrcnic.sim.closfaults): a T1
reboot or a cut T0-T1 link under a 16-host permutation, what a cut link loses, overlapping
faults, the JSON and the command line."""

from __future__ import annotations

import heapq
import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mrcnic.faultplan import Step, parse_steps
from mrcnic.sim.clos import ClosFabric, ClosSpec, Permutation, run_permutation
from mrcnic.sim.closfaults import ClosFaults

ROOT = Path(__file__).resolve().parents[2]
# 16 hosts, 2 planes of 2 T1s: one T1 carries a quarter of the hosts' cross-T0 capacity
SIXTEEN = ClosSpec(planes=2, t0=8, t1=2, hosts_per_t0=2, size=1 << 20, timeline_s=0.005)


def _stable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in ("wall_s", "cpu_s", "sim_pps")}


def test_a_t1_reboot_dips_the_timeline_and_every_mrc_flow_still_lands() -> None:
    steps = tuple(parse_steps("reboot:p0-t1-0@20ms+20ms"))
    r = run_permutation(replace(SIXTEEN, faults=steps))
    assert r["verified"] and not r["qp_errors"] and r["completion_s"] is not None
    assert r["faults"] == ["reboot:p0-t1-0@20ms+20ms"]
    assert r["fault_schedule"] == [steps[0].to_dict()]
    bps = dict((round(t, 3), g) for t, g in r["timeline"])
    before = statistics.median(bps[t] for t in (0.005, 0.01, 0.015))
    during = statistics.mean(bps[t] for t in (0.025, 0.03, 0.035))
    assert during < 0.85 * before  # a quarter of the cross-T0 capacity is gone
    assert r["recovery_s"] is not None and r["recovery_s"] > 0
    assert r["lost_in_flight"] > 0  # the T1's queues and wires held frames


def test_a_cut_t0_t1_link_carries_nothing_until_it_is_back() -> None:
    p = Permutation(replace(SIXTEEN, faults=(Step("link", 0.02, "p0-t1-1", "p0-t0-3",
                                                   undo_s=0.04),)))  # fmt: skip
    up, down = p.fabric.up[0][3][1], p.fabric.down[0][1][3]
    seen: dict[str, tuple[int, int, bool]] = {}

    def probe(name: str) -> None:
        seen[name] = (up.tx_packets, down.tx_packets, up.up or down.up)

    p.fabric.at(0.02, lambda: probe("cut"))  # after the fault, scheduled first at 0.02
    p.fabric.at(0.0399, lambda: probe("before undo"))
    r = p.run()
    assert r["verified"] and not r["qp_errors"]
    assert seen["cut"][2] is False and seen["cut"][:2] == seen["before undo"][:2]
    assert up.up and down.up and up.tx_packets > seen["cut"][0]  # used again once back


def test_a_cut_loses_the_frames_a_link_holds_and_only_those() -> None:
    fab = ClosFabric(ClosSpec(planes=1, t0=2, t1=2, hosts_per_t0=1), lambda *a: None)
    cut, other = fab.up[0][0][0], fab.up[0][0][1]
    route_a = (cut, fab.down[0][0][1], fab.last[0][1])
    route_b = (other, fab.down[0][1][1], fab.last[0][1])
    for t, stages, i in ((1e-3, route_a, 1), (2e-3, route_a, 0), (1e-3, route_b, 1)):
        fab._seq += 1
        heapq.heappush(fab._heap, (t, fab._seq, stages, i, (1, 0, b"frame")))
    fab.at(5e-4, lambda: None)
    assert fab.cut([cut]) == 1  # past the cut link: lost; not yet on it, or elsewhere: kept
    assert cut.drops == 1 and not cut.up and fab.pending == 3


def test_overlapping_faults_hold_a_link_down_until_both_are_undone() -> None:
    fab = ClosFabric(ClosSpec(planes=1, t0=2, t1=2, hosts_per_t0=1), lambda *a: None)
    ports: list[tuple[int, int, bool, float]] = []
    steps = [
        Step("reboot", 0.01, "p0-t1-0", down_ms=20),  # 10..30 ms
        Step("link", 0.02, "p0-t0-1", "p0-t1-0", undo_s=0.04),  # 20..40 ms
        Step("link", 0.01, "h1", "p0-t0-1", undo_s=0.02),  # h1's port, 10..20 ms
        Step("reboot", 0.015, "p0-t0-1", down_ms=10),  # h1's last hop too, 15..25 ms
        Step("loss", 0.01, "p0-t0-0", "p0-t1-1", undo_s=0.03, percent=50),
        Step("loss", 0.015, "p0-t1-1", "p0-t0-0", undo_s=0.02, percent=80),
    ]
    faults = ClosFaults(fab, steps, lambda *a: ports.append(a))
    link, other, lasthop, lossy = fab.up[0][1][0], fab.up[0][0][0], fab.last[0][1], fab.up[0][0][1]
    states = []
    for t in (0.0125, 0.0175, 0.0225, 0.0275, 0.035, 0.045):
        fab.at(t, lambda: states.append((other.up, link.up, lasthop.up, lossy.loss)))
    fab.run(1.0)
    assert states == [
        (False, False, False, 0.5),
        (False, False, False, 0.8),  # the worse of two losses
        (False, False, False, 0.5),  # the port is back, the T0 still rebooting; 80% gone
        (False, False, True, 0.5),
        (True, False, True, 0.0),
        (True, True, True, 0.0),
    ]
    assert ports == [(1, 0, False, 0.01), (1, 0, True, 0.02)]
    assert fab.nic[1][0].up and fab.last[0][1].up
    assert [(r["fault"], r["start_s"], r["end_s"]) for r in faults.to_json()["fault_log"]][:2] == [
        ("reboot:p0-t1-0@10ms+20ms", 0.01, 0.03),
        ("link:h1,p0-t0-1@10ms-20ms", 0.01, 0.02),
    ]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (Step("reboot", 0.0, "p9-t1-0"), "no plane 9"),
        (Step("reboot", 0.0, "p0-t1-2"), "no such switch (p0-t1-0..1)"),
        (Step("link", 0.0, "p0-t0-0", "p1-t1-0"), "no such link"),
        (Step("link", 0.0, "h3", "p0-t0-0"), "no such link"),  # h3 sits under T0 1
        (Step("port", 0.0, "h9", plane=0), "no such host (h0..h3)"),
        (Step("port", 0.0, "h0", plane=2), "no plane 2"),
        (Step("loss", 0.0, "h0", "p0-t0-0", percent=1), "loss on a host's link"),
    ],
)
def test_a_fault_naming_no_part_of_the_fabric_is_refused(step: Step, message: str) -> None:
    spec = ClosSpec(planes=2, t0=2, t1=2, hosts_per_t0=2, faults=(step,))
    with pytest.raises(ValueError, match="fault ") as e:
        Permutation(spec)
    assert message in str(e.value) and step.text in str(e.value)


def test_the_same_seed_gives_the_same_faulted_run() -> None:
    steps = tuple(
        s
        for text in ("reboot:p1-t0-2@5ms+10ms", "port:h5,0@8ms-20ms",
                     "loss:p0-t0-1,p0-t1-0=5%@2ms-30ms", "flap:p1-t0-4,p1-t1-1,2x6ms@10ms")
        for s in parse_steps(text)
    )  # fmt: skip
    spec = replace(SIXTEEN, size=256 << 10, faults=steps)
    a, b = run_permutation(spec), run_permutation(spec)
    assert a["verified"] and not a["qp_errors"]
    assert json.dumps(_stable(a), sort_keys=True) == json.dumps(_stable(b), sort_keys=True)
    clean = run_permutation(replace(spec, faults=()))
    assert clean["faults"] == [] and _stable(clean)["timeline"] != _stable(a)["timeline"]


def test_mrc_sim_takes_faults_and_a_timeline_for_a_permutation_only() -> None:
    cmd = [sys.executable, "-m", "mrcnic.sim.transfer", "--workload", "permutation",
           "--planes", "2", "--t0", "2", "--hosts-per-t0", "2", "--t1", "2", "--size", "128K",
           "--scale", "lab"]  # fmt: skip
    out = subprocess.run([*cmd, "--fault", "link:p0-t0-0,p0-t1-1@1ms-3ms", "--fault",
                          "port:h1,1@2ms+1ms", "--timeline", "1ms", "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT)  # fmt: skip
    d = json.loads(out.stdout)
    assert d["verified"] and d["faults"] == ["link:p0-t0-0,p0-t1-1@1ms-3ms", "port:h1,1@2ms-3ms"]
    assert d["timeline"][0][0] == 0.0 and d["timeline"][1][0] == 0.001
    assert d["timeline_bin_s"] == 0.001
    bad = subprocess.run([*cmd, "--fault", "link:p0-t0-0@1ms"], capture_output=True,
                         text=True, cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2 and "'link:p0-t0-0@1ms'" in bad.stderr
    p2p = subprocess.run([*cmd[:3], "--size", "64K", "--fault", "port:h0,1@1ms"],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert p2p.returncode == 2 and "p2p takes --fail/--heal" in p2p.stderr
