"""Link propagation delay on a real lab (root): ``mrc-lab up --delay`` puts it on every
switch-to-switch link (the probe's round trip over a T0-T1 link grows by two delays), the
``mrc-lab delay`` fault changes one link's through mrc-switch's control socket (printing
that call) and ``--clear`` puts the lab's back, and MRC carries a verified write over the
delayed fabric. The queue's wire itself is held to its twin in
tests/unit/test_switch_cqueue.py."""

from __future__ import annotations

import json
import subprocess

import commands as C
import lab_helpers as H
import pytest

from lab.fabric import probe
from lab.fabric.faults import Faults
from lab.fabric.netns import LabError
from lab.fabric.params import ParamError

DELAY_US = 3000
# the probe's unloaded round trip over a T0-T1 link without delay is ~0.5 ms here (a frame
# and its answer through two software switches); scheduling on 2 busy cores adds more
SLACK_MS = 4.0


@pytest.fixture(scope="module")
def dlab():
    with H.running_lab(delay_us=DELAY_US, rate_mbit=100) as st:
        yield st


def rtts_ms(st) -> dict[str, float]:
    res = probe.run(st, seconds=1.2)
    assert res["probes_received"] == res["probes_sent"] > 0
    return {r["link"]: r["rtt_p50_ms"] for r in res["links"]}


def test_up_delays_every_switch_to_switch_link_both_ways(dlab):
    rtt = rtts_ms(dlab)
    two_ways_ms = 2 * DELAY_US / 1000
    for link, ms in rtt.items():
        if link.startswith("h"):  # host links carry none
            assert ms < SLACK_MS, (link, ms)
        else:
            assert two_ways_ms <= ms < two_ways_ms + SLACK_MS, (link, ms)


def test_delay_fault_prints_the_control_call_and_clear_restores(dlab):
    printed: list[str] = []
    f = Faults(dlab, echo=printed.append)
    link = "p0-t0-0 - p0-t1-1"
    try:
        f.delay("p0-t0-0", "p0-t1-1", 0.010)
        assert len(printed) == 2 and all("--request" in p and '"op": "delay"' in p for p in printed)
        for line in printed:  # the printed command is the one that was run: run it again
            argv = line.split(" --request ")[0].split() + ["--request", _request_of(line)]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and json.loads(out.stdout)["ok"], out.stderr
        rtt = rtts_ms(dlab)
        assert 20.0 <= rtt[link] < 20.0 + SLACK_MS, rtt
        assert rtt["p0-t0-0 - p0-t1-0"] < 2 * DELAY_US / 1000 + SLACK_MS  # the others keep theirs
    finally:
        f.delay_clear("p0-t0-0", "p0-t1-1")
    rtt = rtts_ms(dlab)
    assert 2 * DELAY_US / 1000 <= rtt[link] < 2 * DELAY_US / 1000 + SLACK_MS, rtt


def _request_of(line: str) -> str:
    return line.split(" --request ", 1)[1].strip("'")


def test_delay_refuses_bad_input_with_the_way_out(dlab):
    f = Faults(dlab, echo=None)
    with pytest.raises(LabError, match=r"\[0, 1 s\]"):
        f.delay("p0-t0-0", "p0-t1-1", 2.0)
    with pytest.raises(ParamError, match="no node"):
        f.delay("p0-t0-0", "p9-t1-1", 0.001)
    p = C.lab_cli("delay", "--name", dlab.name, "p0-t0-0", "p0-t1-1")
    assert p.returncode != 0 and "TIME" in p.stderr


def test_mrc_writes_verified_over_the_delayed_fabric(dlab):
    d = C.bench_json("write", "--lab", dlab.name, "--src", "h0", "--dst", "h1", "--size", "4M",
                     "--iters", "4", "-q", timeout=120)  # fmt: skip
    assert d["verified"] and d["qp_errors"] == 0
    # the NIC's base RTT holds the fabric's delay (4 delayed links per round trip)
    assert d["base_rtt_s"] >= 4 * DELAY_US * 1e-6
