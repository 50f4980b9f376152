"""Every fault does what it says, its inverse restores the lab, and status tells the truth.

Pattern: a frame crosses before, does not cross during, crosses again after. The lab is the
small one (2 planes, 2 T0 x 1 host, 2 T1): h0 -> h1 crosses T0-T1-T0; EV 0 = plane 0, T1 0.
"""

from __future__ import annotations

import threading
import time

import lab_helpers as H
import pytest
import waiting as W

from lab.fabric.faults import Faults, parse_rate
from lab.fabric.netns import LabError
from lab.fabric.status import status


@pytest.fixture(scope="module")
def klab():
    with H.running_lab(switch="kernel") as st:
        yield st


def link_of(st, a: str, b: str) -> dict:
    for x in status(st)["links"]:
        if {x["a"], x["b"]} == {a, b}:
            return x
    raise AssertionError(f"no link {a} {b}")


def node_of(st, name: str) -> dict:
    return next(n for n in status(st)["nodes"] if n["name"] == name)


@pytest.mark.parametrize(("a", "b"), [("p0-t0-0", "p0-t1-0"), ("h1", "p0-t0-1")])
def test_link_down_up(klab, a, b) -> None:
    printed: list[str] = []
    f = Faults(klab, echo=printed.append)
    assert H.crosses(klab, 0, 1, ev=0)
    f.link_down(a, b)
    try:
        assert printed[0].startswith(f"ip -n {klab.name}-") and printed[0].endswith("down")
        assert not H.crosses(klab, 0, 1, ev=0)
        x = link_of(klab, a, b)
        assert x["state"] == "down" and x["b_end"]["admin"] == "down"
        assert x["a_end"]["admin"] == "up"  # the lower end (host / T0) is never touched
        # Other paths still work: the other T1 of the plane, and the other plane.
        assert H.crosses(klab, 0, 1, ev=1) if a.startswith("p0-t0") else True
        assert H.crosses(klab, 0, 1, ev=2 + 1)
    finally:
        f.link_up(a, b)
    assert H.crosses(klab, 0, 1, ev=0)
    assert link_of(klab, a, b)["state"] == "up"


def test_port_down_up(klab) -> None:
    f = Faults(klab, echo=None)
    f.port("h0", 0, up=False)
    try:
        assert not H.crosses(klab, 0, 1, ev=0)
        assert H.crosses(klab, 0, 1, ev=1 + 2)  # plane 1 is fine
        x = link_of(klab, "h0", "p0-t0-0")
        assert x["state"] == "down" and x["a_end"]["admin"] == "down"
    finally:
        f.port("h0", 0, up=True)
    assert H.crosses(klab, 0, 1, ev=0)
    assert link_of(klab, "h0", "p0-t0-0")["state"] == "up"
    with pytest.raises(LabError):
        f.port("p0-t0-0", 0, up=False)


def test_loss_total_partial_and_clear(klab) -> None:
    printed: list[str] = []
    f = Faults(klab, echo=printed.append)
    f.loss("p0-t0-0", "p0-t1-0", 100)
    try:
        assert "nft" in printed[0] and "egress" in printed[0]
        assert not H.crosses(klab, 0, 1, ev=0)
        assert not H.crosses(klab, 1, 0, ev=0)  # both directions
        assert "loss" in link_of(klab, "p0-t0-0", "p0-t1-0")["faults"]
        assert link_of(klab, "p0-t0-0", "p0-t1-0")["state"] == "up"  # lossy, not down
        f.loss("p0-t0-0", "p0-t1-0", 50)  # replaces the rule
        assert "mod 100 < 50" in printed[-1]
        got = H.send_count(klab, 0, 1, ev=0, count=200)
        assert 40 <= got <= 160, got
    finally:
        f.loss_clear("p0-t0-0", "p0-t1-0")
    assert H.send_count(klab, 0, 1, ev=0, count=20) == 20
    assert link_of(klab, "p0-t0-0", "p0-t1-0")["faults"] == []
    f.loss_clear("p0-t0-0", "p0-t1-0")  # twice is harmless


def test_shape_and_clear(klab) -> None:
    f = Faults(klab, echo=None)
    f.shape("h0", "p1-t0-0", "10mbit")
    try:
        x = link_of(klab, "h0", "p1-t0-0")
        assert "shaped 10mbit" in x["faults"]
        assert H.crosses(klab, 0, 1, ev=1)  # shaped, not cut
    finally:
        f.shape_clear("h0", "p1-t0-0")
    assert link_of(klab, "h0", "p1-t0-0")["faults"] == []
    assert parse_rate("2.5mbit") == 2_500_000
    with pytest.raises(LabError):
        parse_rate("fast")


def test_kernel_reboot(klab) -> None:
    f = Faults(klab, echo=None)
    t = threading.Thread(target=f.reboot, args=("p0-t1-0", 1200))
    t.start()
    try:
        W.wait_for(lambda: node_of(klab, "p0-t1-0")["up"] is False, 5, what="p0-t1-0 down")
        assert not H.crosses(klab, 0, 1, ev=0)
        assert node_of(klab, "p0-t1-0")["up"] is False
        assert H.crosses(klab, 0, 1, ev=2)  # T1 1 of plane 0 carries on
    finally:
        t.join()
    assert node_of(klab, "p0-t1-0")["up"] is True
    assert H.crosses(klab, 0, 1, ev=0)
    # the fault journal a run's plot reads (lab/fabric/faultlog.py): the reboot, 1.2 s long
    from lab.fabric import faultlog

    [w] = [w for w in faultlog.windows(klab.run_dir, 0, 2e9) if w["label"] == "reboot p0-t1-0"]
    assert 1.1 < w["end_s"] - w["start_s"] < 3.0


def test_flap(klab) -> None:
    printed: list[str] = []
    f = Faults(klab, echo=printed.append)
    t0 = time.monotonic()
    f.flap("p0-t0-1", "p0-t1-0", period_ms=200, count=2)
    assert time.monotonic() - t0 >= 0.39
    assert sum(1 for p in printed if p.endswith(" down")) == 2
    assert sum(1 for p in printed if p.endswith(" up")) == 2
    assert link_of(klab, "p0-t0-1", "p0-t1-0")["state"] == "up"
    assert H.crosses(klab, 0, 1, ev=0)


def test_faults_refuse_what_is_not_a_fabric_link(klab) -> None:
    f = Faults(klab, echo=None)
    with pytest.raises(Exception, match="no link"):
        f.link_down("h0", "p0-t0-1")
    with pytest.raises(LabError, match="management"):
        f.link_down("h0", "mgmt")
