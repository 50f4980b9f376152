"""A split lab in containerlab's format (``mrc-lab export --format containerlab``): one
topology file per machine, every node a ``linux`` container of the image ``docker/Dockerfile``
builds, links inside a machine as veth pairs with the plan's MACs, and links between machines
as ``vxlan-stitch`` links (containerlab makes the veth, the VXLAN device and the tc rules,
as ``mrc-lab up --machine K`` does).

Written next to the files: each switch's mrc-switch config (``config/switches/<node>.json``,
bound into its container) and a state file that lets ``mrc-bench`` inside a host container
read the plan (``config/<lab>.json`` -> ``/run/mrc-lab/<lab>.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lab.fabric.partition import Partition, Underlay
from lab.fabric.pyswitch import switch_config
from lab.fabric.topology import KIND_HOST, KIND_MGMT, Link, Plan, mac_text, mgmt_bridge_mac

IMAGE = "mrc-lab:latest"  # what `docker build -t mrc-lab -f docker/Dockerfile .` makes
#: addresses from RFC 5737's documentation block when the user names no underlay: the files
#: then say to replace them
PLACEHOLDER_UNDERLAY = "192.0.2.{}"
SWITCH_CONFIG_IN_NODE = "/etc/mrc/switch.json"
SWITCH_STATS_IN_NODE = "/tmp/mrc-switch-stats.json"  # a directory every container has


def file_name(lab: str, machine: int) -> str:
    return f"{lab}-m{machine}.clab.yml"


def placeholder_underlay(machines: int) -> list[Underlay]:
    return [Underlay(PLACEHOLDER_UNDERLAY.format(k + 1), "eth0") for k in range(machines)]


def _quiet_ipv6(ifnames: list[str]) -> str:
    """No kernel IPv6 on the fabric ports (the NIC and mrc-switch own them)."""
    names = " ".join(ifnames)
    return f"sh -c 'for i in {names}; do echo 1 > /proc/sys/net/ipv6/conf/$i/disable_ipv6; done'"


def _stitched_macs(part: Partition, name: str) -> list[str]:
    """``ip link set ... address`` for the node's ends of crossing links: containerlab gives
    a vxlan-stitch's node end a MAC of its own, and the switches check the plan's."""
    out = []
    machine = part.machine_of(name)
    for c in part.crossings_on(machine):
        end = c.local_end(machine)
        if end.node == name:
            out.append(f"ip link set dev {end.ifname} address {mac_text(end.mac)}")
    return out


def _node(part: Partition, name: str, lab_file: str) -> dict[str, Any]:
    plan = part.plan
    node = plan.parse_node(name)
    out: dict[str, Any] = {"kind": "linux", "image": IMAGE}
    macs = _stitched_macs(part, name)
    if node.kind == KIND_HOST:
        ports = [p.ifname for p in plan.host_ports(node.index)]
        m = plan.ifname("m")
        out["binds"] = [f"config/{lab_file}:/run/mrc-lab/{lab_file}:ro"]
        out["exec"] = [
            *macs,
            _quiet_ipv6(ports),
            f"ip addr add {plan.mgmt_address(node.index)}/64 dev {m} nodad",
        ]
    elif node.kind == KIND_MGMT:
        br = plan.ifname("br")
        out["exec"] = [
            *macs,
            f"ip link add name {br} address {mac_text(mgmt_bridge_mac())} type bridge",
            *(
                f"ip link set dev {plan.ifname(f'h{h}')} master {br}"
                for h in range(plan.host_count)
            ),
            f"ip link set dev {br} up",
            f"ip addr add {plan.mgmt_bridge_address()}/64 dev {br} nodad",
        ]
    else:
        ports = [p.ifname for p in plan.switch_ports(node)]
        out["binds"] = [f"config/switches/{name}.json:{SWITCH_CONFIG_IN_NODE}:ro"]
        out["exec"] = [
            *macs,
            _quiet_ipv6(ports),
            # in the background (exec waits for its command): the switch is the node's job
            f"sh -c 'setsid mrc-switch --config {SWITCH_CONFIG_IN_NODE} "
            "> /var/log/mrc-switch.log 2>&1 &'",
        ]
    return out


def _mtu(part: Partition, link: Link) -> int:
    return 1500 if link.kind == "mgmt" else part.plan.params.mtu


def _veth(part: Partition, link: Link) -> dict[str, Any]:
    return {
        "type": "veth",
        "endpoints": [
            {"node": end.node, "interface": end.ifname, "mac": mac_text(end.mac)}
            for end in (link.a, link.b)
        ],
        "mtu": _mtu(part, link),
    }


def topology(part: Partition, machine: int, underlay: list[Underlay]) -> dict[str, Any]:
    """Machine ``machine``'s containerlab topology."""
    plan = part.plan
    lab = plan.params.name
    lab_file = f"{lab}.json"
    nodes = {n: _node(part, n, lab_file) for n in part.nodes_on(machine)}
    links: list[dict[str, Any]] = [_veth(part, lk) for lk in part.local_links(machine)]
    for c in part.crossings_on(machine):
        end = c.local_end(machine)
        links.append(
            {
                "type": "vxlan-stitch",
                "endpoint": {"node": end.node, "interface": end.ifname, "mac": mac_text(end.mac)},
                "remote": underlay[c.other(machine)].address,
                "vni": c.vni,
                "dst-port": part.vxlan_port,
                "mtu": _mtu(part, c.link),
            }
        )
    return {"name": f"{lab}-m{machine}", "topology": {"nodes": nodes, "links": links}}


def state_for_nodes(part: Partition, underlay: list[Underlay]) -> dict[str, Any]:
    """The state file mrc-bench reads inside a host container: the plan's parameters, up,
    nothing for ``down`` to remove (containerlab owns the nodes)."""
    params = part.plan.params
    return {
        "version": 1,
        "name": params.name,
        "params": params.to_dict(),
        "phase": "up",
        "namespaces": [],
        "processes": {},
        "split": {
            "machines": part.machines, "here": list(range(part.machines)),
            "underlay": [u.to_dict() for u in underlay], "vxlan_port": part.vxlan_port,
            "vni_base": part.vni_base, "stitch_netns": {}, "simulated": False,
            "containerlab": True,
        },
    }  # fmt: skip


def export(part: Partition, out_dir: Path, underlay: list[Underlay] | None = None) -> list[Path]:
    """Write the files; returns the topology files, machine 0 first."""
    plan: Plan = part.plan
    underlay = underlay or placeholder_underlay(part.machines)
    conf = out_dir / "config"
    (conf / "switches").mkdir(parents=True, exist_ok=True)
    for node in plan.switches():
        cfg = switch_config(plan, node, SWITCH_STATS_IN_NODE)
        (conf / "switches" / f"{node.name}.json").write_text(json.dumps(cfg, indent=1) + "\n")
    lab_file = conf / f"{plan.params.name}.json"
    lab_file.write_text(json.dumps(state_for_nodes(part, underlay), indent=1) + "\n")
    placeholder = underlay[0].address == PLACEHOLDER_UNDERLAY.format(1)
    files = []
    for k in range(part.machines):
        head = (
            f"# {plan.params.name}, machine {k} of {part.machines}: written by mrc-lab export "
            "(docs/multihost.md)\n# deploy on machine "
            f"{k}: containerlab deploy -t {file_name(plan.params.name, k)}\n"
        )
        if placeholder:
            head += (
                "# remote: addresses are placeholders (192.0.2.x): export again with "
                "--underlay ADDR=IFACE,... naming your machines\n"
            )
        path = out_dir / file_name(plan.params.name, k)
        text = yaml.safe_dump(topology(part, k, underlay), sort_keys=False, width=100)
        path.write_text(head + text)
        files.append(path)
    return files
