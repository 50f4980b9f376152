"""Python switches served by shared processes (mrc-lab up --switch-procs N): frames cross,
and a reboot stops exactly one switch and brings it back from its static config while the
other switches of its process keep running. Once with the C loop (mrc_sw_group_poll), once
with its Python twin (MRC_SWITCH_C_LOOP=0)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import lab_helpers as H
import pytest
import waiting as W

from lab.fabric.faults import Faults
from lab.fabric.state import load
from lab.fabric.status import status
from lab.proc.env import env_added
from mrcswitch.host import control


@pytest.fixture(scope="module", params=["c", "python"])
def slab(request):
    env = {"MRC_SWITCH_C_LOOP": "0"} if request.param == "python" else {}
    with env_added(env), H.running_lab(switch="python", switch_procs=1) as st:
        yield st, request.param


def _stats(rec) -> dict:
    return json.loads(Path(rec.stats).read_text())


def test_one_process_serves_every_switch(slab) -> None:
    st, loop = slab
    pids = {rec.pid for rec in st.processes.values()}
    assert len(pids) == 1 and len(st.processes) == st.plan.switch_count
    last = st.plan.host_count - 1
    for ev in range(4):  # both planes, both T1s
        assert H.crosses(st, 0, last, ev), ev
        assert H.crosses(st, last, 0, ev), ev
    doc = _stats(st.processes["p0-t1-0"])
    assert doc["fwd_path"] == ("c_loop" if loop == "c" else "one_call")
    if loop == "c":
        assert doc["c_loop"]["switches_in_process"] == st.plan.switch_count


def test_reboot_stops_exactly_one_switch_and_brings_it_back(slab) -> None:
    st, _ = slab
    printed: list[str] = []
    f = Faults(st, echo=printed.append)
    rec = st.processes["p0-t1-0"]
    others = [r for n, r in st.processes.items() if n != "p0-t1-0"]
    started = {r.node: _stats(r)["started_unix"] for r in others}
    assert H.crosses(st, 0, 1, ev=0)
    t = threading.Thread(target=f.reboot, args=("p0-t1-0", 1500))
    t.start()
    try:
        W.wait_for_json(rec.stats, lambda d: d["ready"] is False, 5, what="p0-t1-0 stopped")
        assert _stats(rec)["ready"] is False
        assert not H.crosses(st, 0, 1, ev=0)  # through p0-t1-0
        assert H.crosses(st, 0, 1, ev=2)  # the other T1 of plane 0 carries on
        nodes = {n["name"]: n for n in status(load(st.name))["nodes"]}
        assert nodes["p0-t1-0"]["up"] is False
        assert all(nodes[r.node]["up"] for r in others)
    finally:
        t.join()
    assert "stop" in printed[0] and rec.control in printed[0]
    fresh = load(st.name)
    assert fresh.processes["p0-t1-0"].pid == rec.pid and rec.is_alive()  # the same process
    doc = _stats(rec)
    assert doc["ready"] is True and doc["pid"] == rec.pid
    # the others were never restarted
    assert all(_stats(r)["started_unix"] == started[r.node] for r in others)
    assert all(n["up"] for n in status(fresh)["nodes"])
    assert H.crosses(st, 0, 1, ev=0)


def test_a_link_down_up_on_a_hosted_switch(slab) -> None:
    st, _ = slab
    f = Faults(st, echo=None)
    f.link_down("p1-t0-1", "p1-t1-1")
    try:
        assert not H.crosses(st, 0, 1, ev=1 + 2)  # plane 1, T1 1
        assert H.crosses(st, 0, 1, ev=1)  # plane 1, T1 0
    finally:
        f.link_up("p1-t0-1", "p1-t1-1")
    with contextlib.suppress(AssertionError):  # the assert below says what failed
        W.wait_for(lambda: H.crosses(st, 0, 1, ev=3), 3, 0.1, what="frames crossing on EV 3")
    assert H.crosses(st, 0, 1, ev=3)


def test_control_answers_while_ports_open_and_close_in_helper_threads(slab) -> None:
    """A stop answers once the switch is out of the loop (its ports close in the
    background); two starts asked while its ports open are both answered when it runs;
    the switch forwards again, and a stop/start cycle leaves no extra fds behind."""
    st, _ = slab
    rec = st.processes["p1-t1-0"]
    fds_before = len(list(Path(f"/proc/{rec.pid}/fd").iterdir()))
    for _ in range(2):
        assert control(rec.control, {"op": "stop", "switch": "p1-t1-0"})["result"] == "stopped"
        assert not H.crosses(st, 0, 1, ev=1)  # plane 1, T1 0
        replies: list[dict] = []

        def start(out: list[dict] = replies) -> None:
            out.append(control(rec.control, {"op": "start", "switch": "p1-t1-0"}))

        ts = [threading.Thread(target=start) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(replies) == 2 and all(r["ok"] for r in replies), replies
        assert {r["result"] for r in replies} <= {"started", "running"}
        assert "started" in {r["result"] for r in replies}
        assert control(rec.control, {"op": "list"})["switches"]["p1-t1-0"] is True
        assert H.eventually_crosses(st, 0, 1, ev=1)
        assert H.eventually_crosses(st, 0, 1, ev=3)  # the other T1 of plane 1 never stopped
    fds = 0

    def closed() -> bool:
        nonlocal fds
        fds = len(list(Path(f"/proc/{rec.pid}/fd").iterdir()))
        return fds <= fds_before

    with contextlib.suppress(AssertionError):  # the closing threads finish in the background
        W.wait_for(closed, 10, 0.1, what="the port sockets closed")
    assert fds <= fds_before


def test_every_start_is_answered_promptly_over_many_reboots(slab) -> None:
    """The port-opening thread's wake can be read while the thread is still alive: every
    start must still be answered (it used to wait for the next start, or 30 s)."""
    st, _ = slab
    rec = st.processes["p1-t1-1"]
    slowest = 0.0
    for _ in range(15):
        assert control(rec.control, {"op": "stop", "switch": "p1-t1-1"})["result"] == "stopped"
        t0 = time.monotonic()
        reply = control(rec.control, {"op": "start", "switch": "p1-t1-1"}, timeout_s=10.0)
        slowest = max(slowest, time.monotonic() - t0)
        assert reply["ok"] and reply["result"] == "started", reply
    assert slowest < 10.0
    assert H.eventually_crosses(st, 0, 1, ev=3)
