"""The lab plan (lab/fabric/topology.py, lab/fabric/params.py): names, uSIDs, tables, MACs, summary."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.fabric import kernel_switch, pyswitch
from lab.fabric.params import LabParams, ParamError, load_topology_file, resolve
from lab.fabric.topology import IFNAME_MAX, KIND_T0, KIND_T1, Plan, link_local, mac_text
from mrcnic.wire import usid

shapes = st.builds(
    LabParams,
    planes=st.integers(1, 4),
    t0=st.integers(1, 4),
    t1=st.integers(1, 3),
    hosts_per_t0=st.integers(1, 3),
)


def all_ports(plan: Plan):
    for node in plan.nodes():
        yield from plan.ports(node)


def test_default_plan_matches_the_issue() -> None:
    plan = Plan(LabParams())
    assert plan.host_count == 4
    assert plan.switch_count == 32
    assert plan.namespace_count == 37
    hosts = [n.name for n in plan.hosts()]
    assert hosts == ["h0", "h1", "h2", "h3"]
    names = {n.name for n in plan.switches()}
    assert {"p0-t0-0", "p0-t0-1", "p0-t1-0", "p7-t1-1"} <= names
    # h0 and the last host sit under different T0s.
    assert plan.shape.host_t0(0) != plan.shape.host_t0(plan.host_count - 1)
    assert plan.namespace("h0") == "mrc-h0"
    assert plan.namespace("p3-t1-1") == "mrc-p3-t1-1"


def test_switch_tables_use_the_usid_plan() -> None:
    plan = Plan(LabParams(planes=2, t0=3, t1=2, hosts_per_t0=2))
    t0 = plan.parse_node("p1-t0-2")
    assert plan.own_usid(t0) == usid.t0_usid(1, 2)
    table = {r.usid: r for r in plan.table(t0)}
    assert set(table) == {usid.downlink_usid(1, 0), usid.downlink_usid(1, 1)} | {
        usid.t1_usid(1, 0),
        usid.t1_usid(1, 1),
    }
    assert table[usid.downlink_usid(1, 1)].peer == "h5"
    assert table[usid.t1_usid(1, 1)].ifname == "mrc-u1"
    t1 = plan.parse_node("p1-t1-1")
    assert plan.own_usid(t1) == usid.t1_usid(1, 1)
    assert {r.usid: r.peer for r in plan.table(t1)} == {
        usid.t0_usid(1, i): f"p1-t0-{i}" for i in range(3)
    }
    assert plan.usid_prefix(usid.t0_usid(1, 2)) == "fcbb:bb00:1402::/48"


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_tables_never_exceed_port_count_and_match_summary(params: LabParams) -> None:
    plan = Plan(params)
    total = 0
    for node in plan.switches():
        table = plan.table(node)
        ports = plan.switch_ports(node)
        assert len(table) <= len(ports)
        assert len({r.usid for r in table}) == len(table)
        assert plan.own_usid(node) not in {r.usid for r in table}
        total += len(table)
    s = plan.summary()
    assert s["total_table_entries"] == total
    assert s["tables_within_port_count"] is True
    assert s["switch_count"] == sum(1 for _ in plan.switches())
    assert s["link_count"] == sum(1 for _ in plan.links())
    assert s["paths_between_t0s"] == params.planes * params.t1


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_macs_deterministic_unique_and_ifnames_short(params: LabParams) -> None:
    plan = Plan(params)
    macs = [p.mac for p in all_ports(plan)]
    assert len(macs) == len(set(macs))
    for mac in macs:
        assert mac[0] & 0x03 == 0x02  # locally administered, unicast
    again = [p.mac for p in all_ports(Plan(params))]
    assert macs == again
    for port in all_ports(plan):
        assert len(port.ifname) <= IFNAME_MAX
        assert port.ifname.startswith(plan.prefix)
    # Each link's two ends agree about each other.
    for link in plan.links():
        assert link.a.peer == link.b.node and link.b.peer == link.a.node
        assert link.a.peer_mac == link.b.mac and link.b.peer_mac == link.a.mac
        assert link.a.peer_ifname == link.b.ifname


def _walk(plan: Plan, src: int, dst: int, ev: int) -> tuple[str, list[str], bytes]:
    """Forward a packet hop by hop through the plan's tables, as the kernel would."""
    tmpl = plan.dest_template(src, dst)
    addr = tmpl.address(ev)
    plane = tmpl.plane(ev)
    port = plan.host_port(src, plane)
    node_name, hops = port.peer, []
    for _ in range(8):
        node = plan.parse_node(node_name)
        if node.kind not in (KIND_T0, KIND_T1):
            return node_name, hops, addr
        hops.append(node_name)
        if usid.active_usid(addr, plan.fmt) == plan.own_usid(node):
            addr = usid.shift(addr, plan.fmt)
        table = {r.usid: r for r in plan.table(node)}
        route = table[usid.active_usid(addr, plan.fmt)]
        node_name = route.peer
    raise AssertionError("loop")


@settings(max_examples=20, deadline=None)
@given(shapes, st.data())
def test_every_ev_path_reaches_its_destination(params: LabParams, data) -> None:
    plan = Plan(params)
    src = data.draw(st.integers(0, plan.host_count - 1))
    dst = data.draw(st.integers(0, plan.host_count - 1).filter(lambda d: d != src))
    ev = data.draw(st.integers(0, 2**32 - 1))
    end, hops, final = _walk(plan, src, dst, ev)
    assert end == plan.host_name(dst)
    plane = ev % params.planes
    assert final == plan.final_address(dst, plane)
    spine = plan.shape.host_t0(src) != plan.shape.host_t0(dst)
    assert len(hops) == (3 if spine else 1)
    if spine:
        assert hops[1] == plan.t1_name(plane, (ev // params.planes) % params.t1)


def test_production_shape_summary() -> None:
    plan = Plan(LabParams(planes=8, t0=512, t1=256, hosts_per_t0=256))
    s = plan.summary()
    assert s["host_count"] == 131_072
    assert s["switch_count"] == 8 * (512 + 256)
    assert s["max_table_entries"] == 512
    assert s["max_switch_ports"] == 512
    assert s["tables_within_port_count"] is True
    assert s["total_table_entries"] == 8 * (512 * 512 + 256 * 512)
    assert s["paths_between_t0s"] == 8 * 256
    assert s["max_ifname_len"] <= IFNAME_MAX
    assert "build_s" in s
    json.dumps(s)


def test_name_rules() -> None:
    for bad in ("", "lab", "mrc-x", "MRC", "mrc_1", "mrcabcdefg"):
        with pytest.raises(ParamError):
            LabParams(name=bad)
    LabParams(name="mrct1a2b")
    # A long name that would make an interface name longer than 15 characters is refused.
    with pytest.raises(ParamError, match="15"):
        Plan(LabParams(name="mrcabcdef", t0=1024, hosts_per_t0=128))


def test_parse_node_and_link_between() -> None:
    plan = Plan(LabParams())
    for bad in ("h4", "h01", "p8-t0-0", "p0-t0-2", "p0-t2-0", "x", "p0-t0-01"):
        with pytest.raises(ParamError):
            plan.parse_node(bad)
    link = plan.link_between("p2-t0-1", "h3")
    assert (link.a.node, link.b.node, link.kind) == ("h3", "p2-t0-1", "host-t0")
    assert link.a.ifname == "mrc-p2" and link.b.ifname == "mrc-d1"
    assert link.switch_end.node == "p2-t0-1"
    link = plan.link_between("p0-t1-1", "p0-t0-0")
    assert (link.a.node, link.a.ifname, link.b.node, link.b.ifname) == (
        "p0-t0-0",
        "mrc-u1",
        "p0-t1-1",
        "mrc-d0",
    )
    assert link.switch_end.node == "p0-t1-1"
    for a, b in (("h0", "p0-t0-1"), ("p0-t0-0", "p1-t1-0"), ("h0", "h1")):
        with pytest.raises(ParamError):
            plan.link_between(a, b)


def test_params_from_files_and_flags(tmp_path) -> None:
    y = tmp_path / "t.yaml"
    y.write_text("planes: 2\nhosts-per-t0: 1\nrate_mbit: 50\n")
    t = tmp_path / "t.toml"
    t.write_text("[topology]\nplanes = 4\nt1 = 3\n")
    assert load_topology_file(y) == {"planes": 2, "hosts_per_t0": 1, "rate_mbit": 50}
    p = resolve(str(y), planes=None, t0=3)
    assert (p.planes, p.t0, p.hosts_per_t0, p.rate_mbit) == (2, 3, 1, 50)
    p = resolve(str(t), planes=1)
    assert (p.planes, p.t1) == (1, 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("plane: 2\n")
    with pytest.raises(ParamError, match="unknown key"):
        resolve(str(bad))
    with pytest.raises(ParamError, match="mtu"):
        LabParams(mtu=1500)
    with pytest.raises(ParamError, match="block"):
        LabParams(block="fcbb:bb00::/33")


def test_examples_load() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "topologies"
    files = sorted(root.glob("*.yaml")) + sorted(root.glob("*.toml"))
    assert files, "examples/topologies holds example files"
    for f in files:
        Plan(resolve(str(f)))


def test_custom_block_moves_every_address() -> None:
    plan = Plan(LabParams(block="fd00:1234::/32", planes=1, t0=2, t1=1, hosts_per_t0=1))
    assert usid.to_text(plan.host_address(0, 0)).startswith("fd00:1234:")
    assert plan.usid_prefix(usid.t0_usid(0, 0)) == "fd00:1234:400::/48"


def test_kernel_switch_lines() -> None:
    plan = Plan(LabParams(planes=1, t0=2, t1=1, hosts_per_t0=1))
    node = plan.parse_node("p0-t0-0")
    lines = kernel_switch.switch_lines(plan, node)
    assert (
        "route replace fcbb:bb00:400::/48 encap seg6local action End flavors next-csid "
        "lblen 32 nflen 16 dev mrc-sid"
    ) in lines
    host = plan.host_port(0, 0)
    gw = link_local(host.mac)
    assert f"neigh replace {gw} lladdr {mac_text(host.mac)} dev mrc-d0 nud permanent" in lines
    assert f"route replace fcbb:bb00:c00::/48 via {gw} dev mrc-d0" in lines
    tc = kernel_switch.tc_lines(plan, node)
    assert tc[0].startswith("qdisc replace dev mrc-d0 root tbf rate 100000000bit")


def test_python_switch_configs_validate() -> None:
    config = pytest.importorskip("mrcswitch.config")
    plan = Plan(LabParams(planes=2, t0=2, t1=2, hosts_per_t0=2))
    for node in plan.switches():
        cfg = config.config_from_dict(pyswitch.switch_config(plan, node, "/tmp/x.json"))
        assert cfg.own_usids == (plan.own_usid(node),)
        assert len(cfg.table) == len(plan.table(node))
        lasthop = {p.name for p in cfg.ports if p.last_hop}
        if node.kind == KIND_T0:
            assert lasthop == {f"d{k}" for k in range(2)}
        else:
            assert lasthop == set()


def test_ecn_threshold_of_python_switch_ports() -> None:
    config = pytest.importorskip("mrcswitch.config")
    for params, want in (
        (LabParams(), 32 * 1024),  # half the buffer by default
        (LabParams(buffer_kb=128), 64 * 1024),
        (LabParams(ecn_kb=16), 16 * 1024),
    ):
        plan = Plan(params)
        node = next(iter(plan.switches()))
        cfg = config.config_from_dict(pyswitch.switch_config(plan, node, "/tmp/x.json"))
        assert {p.ecn_threshold_bytes for p in cfg.ports} == {want}
    for bad in (0, 65, -1, True, 1.5):
        with pytest.raises(ParamError, match="ecn_kb"):
            LabParams(ecn_kb=bad)
    assert resolve(None, ecn_kb=8).ecn_threshold_bytes == 8192


def test_host_info_for_the_nic() -> None:
    plan = Plan(LabParams(planes=2))
    info = plan.host_info(3)
    assert info["namespace"] == "mrc-h3"
    assert [p["ifname"] for p in info["ports"]] == ["mrc-p0", "mrc-p1"]
    p1 = info["ports"][1]
    assert p1["peer"] == "p1-t0-1" and p1["peer_ifname"] == "mrc-d1"
    assert p1["address"] == usid.to_text(usid.host_address(plan.shape, 3, 1))
    assert info["mgmt_address"] != plan.host_info(2)["mgmt_address"]
    assert info["mgmt_address"].startswith("fd")
    d = plan.to_dict()
    assert len(d["templates"]) == 4 * 3
    json.dumps(d)


def test_delay_reaches_the_switch_to_switch_ports_only() -> None:
    config = pytest.importorskip("mrcswitch.config")
    plan = Plan(LabParams(planes=2, t0=2, t1=2, hosts_per_t0=2, delay_us=1500))
    for node in plan.switches():
        cfg = config.config_from_dict(pyswitch.switch_config(plan, node, "/tmp/x.json"))
        for p in cfg.ports:
            assert p.delay_ns == (0 if p.last_hop else 1_500_000), (node.name, p.name)
    plain = Plan(LabParams(planes=2))
    node = next(iter(plain.switches()))
    assert all("delay_ns" not in p for p in pyswitch.switch_config(plain, node, "/x")["ports"])


def test_delay_params_units_bounds_and_modes() -> None:
    from lab.fabric.host import lab_base_rtt_s

    assert resolve(None, delay_us="2ms").delay_us == 2000
    assert LabParams(delay_us=2.5).delay_ns == 2500
    for bad in (-1, 1_000_001, True, "x"):
        with pytest.raises(ParamError, match="delay_us"):
            LabParams(delay_us=bad)
    with pytest.raises(ParamError, match="python switches"):
        LabParams(switch="kernel", delay_us=100)
    # the NICs' base RTT and PFC's headroom count the frames in flight on the delayed links
    assert lab_base_rtt_s(LabParams(delay_us=1000)) == pytest.approx(
        lab_base_rtt_s(LabParams()) + 4e-3
    )
    slow = pyswitch.pfc_config(LabParams(pfc=True, delay_us=5000))["headroom_bytes"]
    assert slow - pyswitch.pfc_config(LabParams(pfc=True))["headroom_bytes"] == 125_000
