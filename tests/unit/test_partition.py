"""A lab split over machines (lab/fabric/partition.py): who holds which node, which links
cross and their VXLANs, the underlay flags, and the state file's split (docs/multihost.md)."""

from __future__ import annotations

import json

import pytest

from lab.cli import main
from lab.fabric.params import LabParams, ParamError
from lab.fabric.partition import (
    Partition,
    parse_underlay,
    simulated_underlay,
    split_spec,
    underlay_mtu_needed,
)
from lab.fabric.state import LabState
from lab.fabric.topology import Plan


def _plan(**kw) -> Plan:
    return Plan(LabParams(name="mrc", **kw))


@pytest.mark.parametrize("machines", [2, 4, 8])
def test_every_link_is_local_to_one_machine_or_crosses_once(machines: int) -> None:
    plan = _plan()
    part = Partition(plan, machines)
    local = [lk for k in range(machines) for lk in part.local_links(k)]
    crossing = [c.link for c in part.crossings]
    assert sorted(map(str, local + crossing)) == sorted(map(str, plan.links()))
    assert len(set(map(str, local))) == len(local)
    # every node on exactly one machine, the management bridge on machine 0
    nodes = [n for k in range(machines) for n in part.nodes_on(k)]
    assert sorted(nodes) == sorted(n.name for n in plan.nodes())
    assert part.machine_of("mgmt") == 0


def test_only_host_links_cross_by_plane() -> None:
    """By plane: a plane's T0-T1 links never cross; a host's links to remote planes do."""
    plan = _plan()
    part = Partition(plan, 2)
    assert part.planes_on(0) == [0, 1, 2, 3] and part.planes_on(1) == [4, 5, 6, 7]
    assert part.hosts_on(0) == [0, 1] and part.hosts_on(1) == [2, 3]
    kinds = [c.link.kind for c in part.crossings]
    assert "t0-t1" not in kinds
    # each host has 4 of its 8 planes on the other machine; h2 and h3 reach mgmt remotely
    assert kinds.count("host-t0") == 4 * 4 and kinds.count("mgmt") == 2
    for c in part.crossings:
        if c.link.kind == "host-t0":
            h = plan.parse_node(c.link.a.node).index
            plane = c.link.b.plane
            assert part.machine_of_host(h) != part.machine_of_plane(plane)
    vnis = [c.vni for c in part.crossings]
    assert len(set(vnis)) == len(vnis) and min(vnis) == part.vni_base


def test_machine_count_is_checked() -> None:
    plan = _plan(planes=2)
    with pytest.raises(ParamError, match=r"2\.\.2"):
        Partition(plan, 3)
    with pytest.raises(ParamError, match="at least one plane"):
        Partition(plan, 1)
    with pytest.raises(ParamError, match="UDP port"):
        Partition(plan, 2, vxlan_port=70000)


def test_underlay_mtu_for_the_lab_frames() -> None:
    # the figure: 4,200-byte frames need 4,270 over IPv6 (4,250 over IPv4)
    assert underlay_mtu_needed(4200, 6) == 4270
    assert underlay_mtu_needed(4200, 4) == 4250


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("10.0.0.1=eth1", "at least two"),
        ("10.0.0.1,10.0.0.2", "ADDRESS=INTERFACE"),
        ("10.0.0.1=eth1,10.0.0.1=eth1", "same address"),
        ("10.0.0.1=eth1,fd00::2=eth1", "one family"),
        ("10.0.0.300=eth1,10.0.0.2=eth1", "not an IPv4 or IPv6"),
        ("224.0.0.1=eth1,10.0.0.2=eth1", "unicast"),
        ("10.0.0.1=a-name-far-too-long,10.0.0.2=eth1", "interface name"),
    ],
)
def test_bad_underlay_is_refused_with_the_reason(text: str, match: str) -> None:
    with pytest.raises(ParamError, match=match):
        parse_underlay(text)


def test_underlay_parses_in_machine_order() -> None:
    us = parse_underlay("fd00::1=eth1, [fd00::2]=ens3")
    assert [(u.address, u.iface) for u in us] == [("fd00::1", "eth1"), ("fd00::2", "ens3")]


def test_split_spec_forms() -> None:
    plan = _plan()
    assert split_spec(plan, None, None, None) is None
    sim = split_spec(plan, 2, None, None)
    assert sim is not None and sim["simulated"] and sim["here"] == [0, 1]
    assert sim["stitch_netns"] == {"0": "mrc-m0", "1": "mrc-m1"}
    assert [u["address"] for u in sim["underlay"]] == [
        u.address for u in simulated_underlay(plan, 2)
    ]
    us = parse_underlay("10.0.0.1=eth1,10.0.0.2=eth1")
    real = split_spec(plan, None, 1, us)
    assert real is not None and real["here"] == [1] and not real["simulated"]
    assert real["stitch_netns"] == {"1": None}
    with pytest.raises(ParamError, match="go together"):
        split_spec(plan, None, 1, None)
    with pytest.raises(ParamError, match="names 2 machines"):
        split_spec(plan, 3, 0, us)
    with pytest.raises(ParamError, match=r"0\.\.1"):
        split_spec(plan, None, 2, us)


def test_state_of_a_part_knows_what_is_local() -> None:
    params = LabParams(name="mrc")
    plan = Plan(params)
    st = LabState(name="mrc", params=params)
    st.split = split_spec(plan, None, 1, parse_underlay("10.0.0.1=eth1,10.0.0.2=eth1"))
    assert st.is_local("h3") and st.is_local("p4-t0-0")
    assert not st.is_local("h0") and not st.is_local("mgmt")
    with pytest.raises(Exception, match="on machine 0 .* run the command on machine 0"):
        st.namespace("p0-t1-0")
    assert {n.name for n in st.switches()} == {
        n.name for n in plan.switches() if n.plane is not None and n.plane >= 4
    }
    # a round trip through the state file keeps the split
    again = LabState.from_dict(json.loads(json.dumps(st.to_dict())))
    assert again.split == st.split and again.here == [1]


def test_plan_machines_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--machines", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["planes"] for m in data["machines"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert data["vxlan_port"] == 14789 and len(data["crossings"]) == 18
    assert data["underlay_mtu_needed"] == {"ipv4": 4250, "ipv6": 4270}
    first = data["crossings"][0]
    assert {"vni", "a", "b", "a_machine", "b_machine"} <= set(first)


def test_plan_machines_refuses_too_many(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--machines", "9"]) == 2
    assert "2..8" in capsys.readouterr().err
