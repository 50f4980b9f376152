"""A lab split over machines: which machine holds which node, and the VXLAN of every link
that crosses between two machines (``mrc-lab plan --machines N``, ``mrc-lab up --machine K``).

The rule (docs/multihost.md):

- **Planes** go to machines in contiguous blocks (plane ``p`` on machine ``p * N // planes``):
  a plane's T0s, T1s and every link between them stay on one machine, so the fabric's own
  links (and its queues, ECN, trimming, PFC) never cross.
- **Hosts** go in contiguous blocks too (host ``h`` on machine ``h * N // hosts``), so hosts
  under one T0 stay together as far as the count allows.
- **The management bridge** lives on machine 0.

So the only links that cross are a host's links to the T0s of planes held by another
machine, and a remote host's management link. Each crossing link is a veth on each side
(the node's own end, as in a one-machine lab, and a stitch end in the machine's root
namespace) joined to a kernel VXLAN device by tc clsact + mirred, as containerlab's
``vxlan-stitch`` links are. One UDP port for all; the VNI names the link.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from lab.fabric.params import ParamError
from lab.fabric.topology import IFNAME_MAX, KIND_HOST, KIND_MGMT, Link, Plan

#: containerlab's default UDP port for its vxlan links (a port of its own, not 4789: the
#: kernel's VXLAN devices of other tools keep theirs)
VXLAN_PORT = 14789
VNI_BASE = 10_000
#: each lab's VNIs start at VNI_BASE + a multiple of this, chosen by its name, so that two
#: split labs on the same machines do not claim the same VNI on the same UDP port
VNI_BLOCK = 1000
#: what VXLAN adds to a lab frame (inner Ethernet + VXLAN + UDP), before the outer IP header
VXLAN_OVERHEAD_BYTES = 14 + 8 + 8
IP_HEADER_BYTES = {4: 20, 6: 40}
_IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def lab_vni_base(name: str) -> int:
    """The first VNI of lab ``name``: 10,000 plus a block of 1,000 chosen by the name's hash
    (16,000 blocks: the VNIs stay below 2^24)."""
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return VNI_BASE + (h % 16_000) * VNI_BLOCK


def underlay_mtu_needed(lab_mtu: int, version: int) -> int:
    """The smallest underlay MTU that carries the lab's largest frame in VXLAN without
    fragments (4,200-byte lab MTU: 4,270 over IPv6, 4,250 over IPv4)."""
    return lab_mtu + VXLAN_OVERHEAD_BYTES + IP_HEADER_BYTES[version]


@dataclass(frozen=True, slots=True)
class Underlay:
    """One machine's underlay: the address the others reach it at, and its interface."""

    address: str
    iface: str

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.address).version

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "iface": self.iface}


def parse_underlay(text: str) -> list[Underlay]:
    """``ADDR=IFACE,ADDR=IFACE,...``: machine 0's first. ParamError naming the bad part."""
    out: list[Underlay] = []
    for i, item in enumerate(t.strip() for t in text.split(",")):
        addr, sep, iface = item.partition("=")
        if not sep or not addr or not iface:
            raise ParamError(
                f"--underlay item {i} {item!r}: expected ADDRESS=INTERFACE, e.g. "
                "10.0.0.1=eth1 (one per machine, machine 0 first, comma-separated)"
            )
        try:
            ip = ipaddress.ip_address(addr.strip("[]"))
        except ValueError:
            raise ParamError(
                f"--underlay item {i}: {addr!r} is not an IPv4 or IPv6 address"
            ) from None
        if ip.is_multicast or ip.is_unspecified or ip.is_loopback:
            raise ParamError(f"--underlay item {i}: {addr} cannot be a machine's unicast address")
        if not _IFNAME_RE.match(iface):
            raise ParamError(f"--underlay item {i}: {iface!r} is not an interface name")
        out.append(Underlay(str(ip), iface))
    if len(out) < 2:
        raise ParamError("--underlay needs one ADDRESS=INTERFACE per machine, at least two")
    if len({u.address for u in out}) != len(out):
        raise ParamError("--underlay: two machines have the same address")
    if len({u.version for u in out}) != 1:
        raise ParamError("--underlay: mix of IPv4 and IPv6 addresses; use one family")
    return out


@dataclass(frozen=True, slots=True)
class Crossing:
    """A link whose ends sit on two machines, and its VXLAN."""

    index: int
    vni: int
    link: Link
    a_machine: int
    b_machine: int

    def machine_of_end(self, end: str) -> int:
        return self.a_machine if end == "a" else self.b_machine

    def other(self, machine: int) -> int:
        return self.b_machine if machine == self.a_machine else self.a_machine

    def local_end(self, machine: int):  # -> topology.Port
        return self.link.a if machine == self.a_machine else self.link.b


class Partition:
    """Which machine holds each node of ``plan`` when split over ``machines``."""

    def __init__(
        self, plan: Plan, machines: int, vxlan_port: int = VXLAN_PORT, vni_base: int | None = None
    ) -> None:
        p = plan.params
        if not 2 <= machines <= p.planes:
            raise ParamError(
                f"--machines {machines}: a split gives every machine at least one plane, so "
                f"2..{p.planes} for this lab ({p.planes} planes)"
            )
        if not 1 <= vxlan_port <= 65535:
            raise ParamError(f"--vxlan-port {vxlan_port}: a UDP port is 1..65535")
        self.plan = plan
        self.machines = machines
        self.vxlan_port = vxlan_port
        self.vni_base = lab_vni_base(p.name) if vni_base is None else vni_base
        self.crossings = self._crossings()
        if self.crossings and self.vni_base + len(self.crossings) > 1 << 24:
            raise ParamError(f"VNIs {self.vni_base}.. run past 2^24 - 1")
        longest = plan.ifname(f"x{len(self.crossings)}")
        if len(longest) > IFNAME_MAX:
            raise ParamError(
                f"stitch interface {longest!r} would be {len(longest)} characters (Linux "
                f"allows {IFNAME_MAX}): use a shorter lab name"
            )

    # --- where nodes live ---------------------------------------------------------------
    def machine_of_plane(self, plane: int) -> int:
        return plane * self.machines // self.plan.params.planes

    def machine_of_host(self, h: int) -> int:
        return h * self.machines // self.plan.host_count

    def machine_of(self, node: str) -> int:
        n = self.plan.parse_node(node)
        if n.kind == KIND_MGMT:
            return 0
        if n.kind == KIND_HOST:
            return self.machine_of_host(n.index)
        assert n.plane is not None
        return self.machine_of_plane(n.plane)

    def nodes_on(self, machine: int) -> list[str]:
        return [n.name for n in self.plan.nodes() if self.machine_of(n.name) == machine]

    def namespaces_on(self, machine: int) -> list[str]:
        return [self.plan.namespace(n) for n in self.nodes_on(machine)]

    def planes_on(self, machine: int) -> list[int]:
        return [q for q in range(self.plan.params.planes) if self.machine_of_plane(q) == machine]

    def hosts_on(self, machine: int) -> list[int]:
        return [h for h in range(self.plan.host_count) if self.machine_of_host(h) == machine]

    # --- links --------------------------------------------------------------------------
    def _crossings(self) -> list[Crossing]:
        out = []
        for link in self.plan.links():
            ma, mb = self.machine_of(link.a.node), self.machine_of(link.b.node)
            if ma != mb:
                i = len(out)
                out.append(Crossing(i, self.vni_base + i, link, ma, mb))
        return out

    def local_links(self, machine: int) -> list[Link]:
        """Links with both ends on ``machine``: plain veth pairs, as in a one-machine lab."""
        return [
            lk
            for lk in self.plan.links()
            if self.machine_of(lk.a.node) == machine == self.machine_of(lk.b.node)
        ]

    def crossings_on(self, machine: int) -> list[Crossing]:
        return [c for c in self.crossings if machine in (c.a_machine, c.b_machine)]

    def crossing_of(self, link: Link) -> Crossing | None:
        for c in self.crossings:
            if c.link == link:
                return c
        return None

    def stitch_ifname(self, c: Crossing) -> str:
        """The stitch end of the crossing's veth, in the machine's root namespace."""
        return self.plan.ifname(f"x{c.index}")

    def vxlan_ifname(self, c: Crossing) -> str:
        return self.plan.ifname(f"v{c.index}")

    def to_dict(self, underlay: list[Underlay] | None = None) -> dict[str, Any]:
        """``mrc-lab plan --machines N --json`` (contract keys: machines, vxlan_port,
        crossings[].vni/a/b/a_machine/b_machine)."""
        machines = []
        for k in range(self.machines):
            m: dict[str, Any] = {
                "machine": k,
                "planes": self.planes_on(k),
                "hosts": [self.plan.host_name(h) for h in self.hosts_on(k)],
                "nodes": len(self.nodes_on(k)),
                "crossings": len(self.crossings_on(k)),
            }
            if underlay:
                m["underlay"] = underlay[k].to_dict()
            machines.append(m)
        crossings = []
        for c in self.crossings:
            d: dict[str, Any] = {
                "vni": c.vni,
                "kind": c.link.kind,
                "a": c.link.a.node,
                "a_ifname": c.link.a.ifname,
                "a_machine": c.a_machine,
                "b": c.link.b.node,
                "b_ifname": c.link.b.ifname,
                "b_machine": c.b_machine,
                "stitch_ifname": self.stitch_ifname(c),
                "vxlan_ifname": self.vxlan_ifname(c),
            }
            if underlay:
                d["a_underlay"] = underlay[c.a_machine].address
                d["b_underlay"] = underlay[c.b_machine].address
            crossings.append(d)
        return {
            "machines": machines,
            "vxlan_port": self.vxlan_port,
            "vni_base": self.vni_base,
            "lab_mtu": self.plan.params.mtu,
            "underlay_mtu_needed": {
                "ipv4": underlay_mtu_needed(self.plan.params.mtu, 4),
                "ipv6": underlay_mtu_needed(self.plan.params.mtu, 6),
            },
            "crossings": crossings,
        }


def simulated_underlay(plan: Plan, machines: int) -> list[Underlay]:
    """Underlay addresses for machines simulated by namespaces on this one (``mrc-lab up
    --machines N``): a ULA /64 next to the lab's management prefix, interface ``<lab>-ul``."""
    net = plan.mgmt_prefix.network_address + (1 << 64)
    return [Underlay(str(net + k + 1), plan.ifname("ul")) for k in range(machines)]


def split_spec(
    plan: Plan,
    machines: int | None,
    machine: int | None,
    underlay: list[Underlay] | None,
    vxlan_port: int = VXLAN_PORT,
    stitch_netns: str | None = None,
) -> dict[str, Any] | None:
    """The ``split`` of a state file from ``mrc-lab up``'s flags; None for a lab on one
    machine. ``--machines N`` alone: every part here, machines stood in for by namespaces.
    ``--machine K --underlay ...``: machine K's part, stitched in this machine's namespace
    (``stitch_netns``: another one, for tests)."""
    if machine is None and underlay is None:
        if stitch_netns is not None:
            raise ParamError("--stitch-netns goes with --machine K --underlay ...")
        if machines is None or machines == 1:
            return None
        part = Partition(plan, machines, vxlan_port)
        return {
            "machines": machines, "here": list(range(machines)),
            "underlay": [u.to_dict() for u in simulated_underlay(plan, machines)],
            "vxlan_port": vxlan_port, "vni_base": part.vni_base,
            "stitch_netns": {str(k): plan.namespace(f"m{k}") for k in range(machines)},
            "simulated": True,
        }  # fmt: skip
    if machine is None or underlay is None:
        raise ParamError("--machine K and --underlay ADDR=IFACE,... go together")
    if machines is not None and machines != len(underlay):
        raise ParamError(f"--machines {machines} but --underlay names {len(underlay)} machines")
    if not 0 <= machine < len(underlay):
        raise ParamError(f"--machine {machine}: machines are 0..{len(underlay) - 1}")
    part = Partition(plan, len(underlay), vxlan_port)
    return {
        "machines": len(underlay), "here": [machine],
        "underlay": [u.to_dict() for u in underlay],
        "vxlan_port": vxlan_port, "vni_base": part.vni_base,
        "stitch_netns": {str(machine): stitch_netns}, "simulated": False,
    }  # fmt: skip
