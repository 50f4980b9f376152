"""lab/fabric/probe.py without a lab: the loop carriers, the probe frame, and the health table's
verdicts (a T0-T1 link down only when every path over it lost its last probes while the
hosts' own links answer; a dead host link is not blamed on the T1 above it; lossy)."""

from __future__ import annotations

from lab.fabric import probe
from mrcnic.wire import usid

SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)


def test_carriers_loop_back_to_the_host():
    paths = probe.paths_of(SHAPE, [3])
    assert len(paths) == 2 * (1 + 2)
    direct, via_t1 = paths[0], paths[2]
    assert probe.carrier(SHAPE, direct) == [usid.t0_usid(0, 1), usid.downlink_usid(0, 1)]
    assert probe.carrier(SHAPE, via_t1) == [usid.t0_usid(0, 1), usid.t1_usid(0, 1),
                                            usid.t0_usid(0, 1), usid.downlink_usid(0, 1)]  # fmt: skip
    assert via_t1.fabric_link == ("p0-t0-1", "p0-t1-1") and via_t1.host_link == ("h3", "p0-t0-1")


def test_probe_frame_parses_back():
    p = probe.paths_of(SHAPE, [0])[1]
    f = probe.probe_frame(SHAPE, p, b"\x02" * 6, b"\x04" * 6, 7, 123)
    assert probe.parse_probe(f) == (p.pid, 7, 123)
    assert probe.parse_probe(f[:60]) is None and probe.parse_probe(b"x" * 100) is None


def feed(table, paths, ok_of, rounds, t=0.0):
    for _ in range(rounds):
        t += 0.1
        for p in paths:
            table.outcome(p, ok_of(p), 0.001, t)
    return t


def test_fabric_link_down_is_named_and_host_link_failure_is_not_blamed_on_t1():
    paths = probe.paths_of(SHAPE, [0, 1])
    table = probe.HealthTable(paths, down_after=3)
    t = feed(table, paths, lambda p: True, 5)
    dead = ("p0-t0-0", "p0-t1-1")
    t = feed(table, paths, lambda p: p.fabric_link != dead, 3, t)
    states = {r["link"]: r["state"] for r in table.rows()}
    assert states["p0-t0-0 - p0-t1-1"] == "down"
    assert [s for link, s in states.items() if link != "p0-t0-0 - p0-t1-1"] == ["up"] * 7
    assert table.events[-1]["to"] == "down" and table.events[-1]["t_s"] <= t + 1e-9
    # h1's own plane-1 port dies: its host link goes down, its T1 links stay up
    table2 = probe.HealthTable(paths, down_after=3)
    feed(table2, paths, lambda p: not (p.host == 1 and p.plane == 1), 8)
    s2 = {r["link"]: r["state"] for r in table2.rows()}
    assert s2["h1 - p1-t0-0"] == "down"
    assert s2["p1-t0-0 - p1-t1-0"] == s2["p1-t0-0 - p1-t1-1"] == "up"  # h0 vouches for them


def test_lossy_link():
    paths = probe.paths_of(SHAPE, [2, 3])
    table = probe.HealthTable(paths, down_after=3, window=50, lossy_fraction=0.05)
    n = {"i": 0}

    def ok(p):
        if p.fabric_link == ("p1-t0-1", "p1-t1-0"):
            n["i"] += 1
            return n["i"] % 5 != 0  # 20% loss, never 3 in a row
        return True

    feed(table, paths, ok, 30)
    states = {r["link"]: r["state"] for r in table.rows()}
    assert states["p1-t0-1 - p1-t1-0"] == "lossy"
    assert sum(1 for s in states.values() if s != "up") == 1
