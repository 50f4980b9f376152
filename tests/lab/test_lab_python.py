"""Python-switch mode: mrc-switch processes carry frames; reboot and link faults on them."""

from __future__ import annotations

import contextlib
import threading

import lab_helpers as H
import pytest
import waiting as W

from lab.fabric.faults import Faults
from lab.fabric.state import load
from lab.fabric.status import status, switch_stats

pytest.importorskip("mrcswitch.switch", reason="mrc-switch (issue 4) is not in the tree")


@pytest.fixture(scope="module")
def plab():
    # one mrc-switch process per switch (a reboot kills and restarts one process);
    # test_switch_host.py runs the same on processes serving several switches
    with H.running_lab(switch="python", switch_procs=0) as st:
        yield st


def node_up(st, name: str) -> bool:
    return next(n for n in status(load(st.name))["nodes"] if n["name"] == name)["up"]


def test_frame_crosses_python_switches_to_the_last_host(plab) -> None:
    last = plab.plan.host_count - 1
    assert plab.plan.shape.host_t0(0) != plab.plan.shape.host_t0(last)
    for ev in range(4):  # both planes, both T1s
        assert H.crosses(plab, 0, last, ev), ev
        assert H.crosses(plab, last, 0, ev), ev
    # The T1 of EV 0's path counted what it forwarded.
    stats = None

    def counted() -> bool:
        nonlocal stats
        stats = switch_stats(plab, "p0-t1-0")["stats"]
        return bool(stats and stats["totals"]["tx_packets"] > 0)

    with contextlib.suppress(AssertionError):  # the assert below says what failed
        W.wait_for(counted, 3, 0.1, what="p0-t1-0 counting what it forwarded")
    assert stats["totals"]["tx_packets"] > 0


def test_python_switch_reboot(plab) -> None:
    printed: list[str] = []
    f = Faults(plab, echo=printed.append)
    old_pid = plab.processes["p0-t1-0"].pid
    assert H.crosses(plab, 0, 1, ev=0)
    t = threading.Thread(target=f.reboot, args=("p0-t1-0", 1500))
    t.start()
    try:
        W.wait_for(lambda: node_up(plab, "p0-t1-0") is False, 5, what="p0-t1-0 stopped")
        assert not H.crosses(plab, 0, 1, ev=0)
        assert H.crosses(plab, 0, 1, ev=2)  # the other T1 carries on
        node = next(n for n in status(load(plab.name))["nodes"] if n["name"] == "p0-t1-0")
        assert node["up"] is False
    finally:
        t.join()
    assert printed[0].startswith(f"kill -TERM {old_pid}")
    fresh = load(plab.name)
    new = fresh.processes["p0-t1-0"]
    assert new.pid != old_pid and new.is_alive()
    node = next(n for n in status(fresh)["nodes"] if n["name"] == "p0-t1-0")
    assert node["up"] is True and node["pid"] == new.pid
    assert H.crosses(plab, 0, 1, ev=0)


def test_python_link_down_up(plab) -> None:
    f = Faults(plab, echo=None)
    f.link_down("p1-t0-1", "p1-t1-1")
    try:
        assert not H.crosses(plab, 0, 1, ev=1 + 2)  # plane 1, T1 1
        assert H.crosses(plab, 0, 1, ev=1)  # plane 1, T1 0
    finally:
        f.link_up("p1-t0-1", "p1-t1-1")
    # The switch picks the port up again by itself (no restart): allow it a moment.
    with contextlib.suppress(AssertionError):  # the assert below says what failed
        W.wait_for(lambda: H.crosses(plab, 0, 1, ev=3), 3, 0.1, what="frames crossing on EV 3")
    assert H.crosses(plab, 0, 1, ev=3)


def test_python_loss(plab) -> None:
    f = Faults(plab, echo=None)
    f.loss("h0", "p0-t0-0", 100)
    try:
        assert not H.crosses(plab, 0, 1, ev=0)
        assert not H.crosses(plab, 1, 0, ev=0)
    finally:
        f.loss_clear("h0", "p0-t0-0")
    assert H.crosses(plab, 0, 1, ev=0)
