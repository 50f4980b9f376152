"""The plan of a lab: a multi-plane two-tier Clos derived from :class:`LabParams` alone.

Everything is arithmetic on indices, so the plan needs no root and builds the production
shape (8 planes x 512 T0 x 256 T1, 131,072 hosts) in well under a second: nodes, ports and
tables are computed on demand, never stored per host.

Names (contract): hosts ``h0..``, switches ``p<plane>-t0-<i>`` and ``p<plane>-t1-<j>``, plus
``mgmt`` (the management bridge). Namespace of a node: ``<lab>-<node>``. Interfaces
(inside the node's namespace, <= 15 characters), with ``P = "<lab>-"``:

=========  =================================  ======================================
node       interface                          peer
=========  =================================  ======================================
host h     ``P p<plane>``                     T0 ``h // hosts_per_t0`` of that plane
host h     ``P m``                            mgmt bridge port ``P h<h>``
T0 i       ``P d<k>`` (downlink k)            host ``i * hosts_per_t0 + k``
T0 i       ``P u<j>`` (uplink j)              T1 j, its port ``P d<i>``
T1 j       ``P d<i>``                         T0 i, its port ``P u<j>``
mgmt       ``P br`` bridge, ``P h<h>``        host h's ``P m``
switch     ``P sid`` / ``P sidx`` (kernel)    a veth pair the End SID route hangs on
=========  =================================  ======================================

MAC addresses are locally administered and say where they are:
``02:KP:NN:NN:NC:CC`` with K = kind (1 host port, 2 T0, 3 T1, 4 management, 5 SID anchor),
P = plane, N = node index (20 bits), C = port code (12 bits: downlink k = k, uplink j =
0x800 + j, management bridge side = 1).
"""

from __future__ import annotations

import hashlib
import ipaddress
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lab.fabric.params import LabParams, ParamError
from mrcnic.wire import usid
from mrcnic.wire.usid import ClosShape, DestTemplate, UsidFormat

IFNAME_MAX = 15

KIND_HOST = "host"
KIND_T0 = "t0"
KIND_T1 = "t1"
KIND_MGMT = "mgmt"

_MAC_KIND = {KIND_HOST: 1, KIND_T0: 2, KIND_T1: 3, KIND_MGMT: 4, "sid": 5}
_UPLINK_CODE = 0x800
_MGMT_NODE = 0xFFFFF  # node field of the management bridge itself


def mac_bytes(kind: str, plane: int, node: int, code: int) -> bytes:
    """``02:KP:NN:NN:NC:CC``: deterministic, unique in a lab, readable in a capture."""
    value = (
        0x02 << 40 | _MAC_KIND[kind] << 36 | plane << 32 | (node & 0xFFFFF) << 12 | (code & 0xFFF)
    )
    return value.to_bytes(6, "big")


def mgmt_bridge_mac() -> bytes:
    """The management bridge's own MAC."""
    return mac_bytes(KIND_MGMT, 0, _MGMT_NODE, 0xFFF)


def mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def link_local(mac: bytes) -> str:
    """The link-local next-hop address a kernel switch uses for the node owning ``mac``."""
    return str(ipaddress.IPv6Address((0xFE80 << 112) | int.from_bytes(mac, "big")))


@dataclass(frozen=True, slots=True)
class Port:
    """One end of a link, seen from the node that owns it."""

    node: str
    ifname: str
    mac: bytes
    peer: str
    peer_ifname: str
    peer_mac: bytes
    plane: int | None  # None for management ports
    role: str  # "host" (NIC port), "down" (towards hosts/T0s), "up" (T0 -> T1), "mgmt"
    index: int  # k for a downlink, j for an uplink, plane for a NIC port

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "ifname": self.ifname,
            "mac": mac_text(self.mac),
            "peer": self.peer,
            "peer_ifname": self.peer_ifname,
            "peer_mac": mac_text(self.peer_mac),
            "plane": self.plane,
            "role": self.role,
            "index": self.index,
        }


@dataclass(frozen=True, slots=True)
class Link:
    """A veth pair; ``a`` is the lower tier end (host, then T0), ``b`` the upper one."""

    a: Port
    b: Port
    kind: str  # "host-t0", "t0-t1", "mgmt"

    @property
    def switch_end(self) -> Port:
        """The end a ``link down`` acts on: the upper tier, never a host."""
        return self.b

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "a": self.a.node,
            "a_ifname": self.a.ifname,
            "b": self.b.node,
            "b_ifname": self.b.ifname,
        }


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    kind: str  # host, t0, t1, mgmt
    plane: int | None
    index: int


@dataclass(frozen=True, slots=True)
class Route:
    """One static table entry: uSID -> port (the kernel mode's /48 route)."""

    usid: int
    ifname: str
    peer: str
    gateway: str  # link-local next hop (kernel mode)
    peer_mac: bytes


class Plan:
    """Every name, address and table of one lab, computed from its parameters."""

    def __init__(self, params: LabParams) -> None:
        self.params = params
        self.fmt = UsidFormat.from_prefix(params.block)
        self.shape = ClosShape(
            planes=params.planes,
            t0=params.t0,
            t1=params.t1,
            hosts_per_t0=params.hosts_per_t0,
            fmt=self.fmt,
        )
        self.prefix = f"{params.name}-"
        longest = self.prefix + self._longest_suffix()
        if len(longest) > IFNAME_MAX:
            raise ParamError(
                f"interface name {longest!r} would be {len(longest)} characters (Linux allows "
                f"{IFNAME_MAX}): use a shorter lab name (--lab) for a lab this large"
            )
        digest = hashlib.sha256(params.name.encode()).digest()
        # RFC 4193 style ULA /64 for the management network, stable per lab name.
        self.mgmt_prefix = ipaddress.IPv6Network((b"\xfd" + digest[:7] + b"\x00" * 8, 64))

    # --- sizes (arithmetic: no per-node objects) -----------------------------------------
    @property
    def host_count(self) -> int:
        return self.shape.host_count

    @property
    def switch_count(self) -> int:
        return self.params.planes * (self.params.t0 + self.params.t1)

    @property
    def namespace_count(self) -> int:
        return self.host_count + self.switch_count + 1

    def t0_ports(self) -> int:
        return self.params.hosts_per_t0 + self.params.t1

    def t1_ports(self) -> int:
        return self.params.t0

    def _longest_suffix(self) -> str:
        p = self.params
        candidates = [
            f"p{p.planes - 1}",
            "m",
            "br",
            "sidx",
            f"d{max(p.hosts_per_t0, p.t0) - 1}",
            f"u{p.t1 - 1}",
            f"h{self.host_count - 1}",
        ]
        return max(candidates, key=len)

    # --- names ---------------------------------------------------------------------------
    def namespace(self, node: str) -> str:
        return f"{self.params.name}-{node}"

    def ifname(self, suffix: str) -> str:
        return self.prefix + suffix

    @staticmethod
    def host_name(h: int) -> str:
        return f"h{h}"

    @staticmethod
    def t0_name(plane: int, i: int) -> str:
        return f"p{plane}-t0-{i}"

    @staticmethod
    def t1_name(plane: int, j: int) -> str:
        return f"p{plane}-t1-{j}"

    def parse_node(self, name: str) -> Node:
        """``"h3"`` / ``"p1-t0-0"`` / ``"mgmt"`` -> :class:`Node`; ParamError if not in the plan."""
        p = self.params
        try:
            if name == "mgmt":
                return Node(name, KIND_MGMT, None, 0)
            if name.startswith("h") and name[1:].isdigit():
                h = int(name[1:])
                if h < self.host_count and name == self.host_name(h):
                    return Node(name, KIND_HOST, None, h)
            parts = name.split("-")
            if len(parts) == 3 and parts[0].startswith("p") and parts[1] in ("t0", "t1"):
                plane, idx = int(parts[0][1:]), int(parts[2])
                count = p.t0 if parts[1] == "t0" else p.t1
                canonical = (self.t0_name if parts[1] == "t0" else self.t1_name)(plane, idx)
                if plane < p.planes and idx < count and name == canonical:
                    return Node(name, parts[1], plane, idx)
        except ValueError:
            pass
        raise ParamError(
            f"no node {name!r} in lab {p.name} (hosts h0..h{self.host_count - 1}, switches "
            f"p0-t0-0..p{p.planes - 1}-t0-{p.t0 - 1}, p0-t1-0..p{p.planes - 1}-t1-{p.t1 - 1}, mgmt)"
        )

    # --- nodes ---------------------------------------------------------------------------
    def hosts(self) -> Iterator[Node]:
        for h in range(self.host_count):
            yield Node(self.host_name(h), KIND_HOST, None, h)

    def switches(self) -> Iterator[Node]:
        p = self.params
        for plane in range(p.planes):
            for i in range(p.t0):
                yield Node(self.t0_name(plane, i), KIND_T0, plane, i)
            for j in range(p.t1):
                yield Node(self.t1_name(plane, j), KIND_T1, plane, j)

    def nodes(self) -> Iterator[Node]:
        yield from self.hosts()
        yield from self.switches()
        yield Node("mgmt", KIND_MGMT, None, 0)

    def namespaces(self) -> list[str]:
        return [self.namespace(n.name) for n in self.nodes()]

    # --- ports and links -----------------------------------------------------------------
    def host_port(self, h: int, plane: int) -> Port:
        """Host h's NIC port on a plane and the T0 port it faces."""
        t0, k = self.shape.host_t0(h), self.shape.host_downlink(h)
        return Port(
            node=self.host_name(h),
            ifname=self.ifname(f"p{plane}"),
            mac=mac_bytes(KIND_HOST, plane, h, 0),
            peer=self.t0_name(plane, t0),
            peer_ifname=self.ifname(f"d{k}"),
            peer_mac=mac_bytes(KIND_T0, plane, t0, k),
            plane=plane,
            role="host",
            index=plane,
        )

    def host_ports(self, h: int) -> list[Port]:
        return [self.host_port(h, plane) for plane in range(self.params.planes)]

    def t0_downlink(self, plane: int, i: int, k: int) -> Port:
        h = i * self.params.hosts_per_t0 + k
        return Port(
            node=self.t0_name(plane, i),
            ifname=self.ifname(f"d{k}"),
            mac=mac_bytes(KIND_T0, plane, i, k),
            peer=self.host_name(h),
            peer_ifname=self.ifname(f"p{plane}"),
            peer_mac=mac_bytes(KIND_HOST, plane, h, 0),
            plane=plane,
            role="down",
            index=k,
        )

    def t0_uplink(self, plane: int, i: int, j: int) -> Port:
        return Port(
            node=self.t0_name(plane, i),
            ifname=self.ifname(f"u{j}"),
            mac=mac_bytes(KIND_T0, plane, i, _UPLINK_CODE + j),
            peer=self.t1_name(plane, j),
            peer_ifname=self.ifname(f"d{i}"),
            peer_mac=mac_bytes(KIND_T1, plane, j, i),
            plane=plane,
            role="up",
            index=j,
        )

    def t1_downlink(self, plane: int, j: int, i: int) -> Port:
        return Port(
            node=self.t1_name(plane, j),
            ifname=self.ifname(f"d{i}"),
            mac=mac_bytes(KIND_T1, plane, j, i),
            peer=self.t0_name(plane, i),
            peer_ifname=self.ifname(f"u{j}"),
            peer_mac=mac_bytes(KIND_T0, plane, i, _UPLINK_CODE + j),
            plane=plane,
            role="down",
            index=i,
        )

    def mgmt_host_port(self, h: int) -> Port:
        return Port(
            node=self.host_name(h),
            ifname=self.ifname("m"),
            mac=mac_bytes(KIND_MGMT, 0, h, 0),
            peer="mgmt",
            peer_ifname=self.ifname(f"h{h}"),
            peer_mac=mac_bytes(KIND_MGMT, 0, h, 1),
            plane=None,
            role="mgmt",
            index=h,
        )

    def switch_ports(self, node: Node) -> list[Port]:
        p = self.params
        plane, idx = node.plane, node.index
        assert plane is not None
        if node.kind == KIND_T0:
            return [self.t0_downlink(plane, idx, k) for k in range(p.hosts_per_t0)] + [
                self.t0_uplink(plane, idx, j) for j in range(p.t1)
            ]
        if node.kind == KIND_T1:
            return [self.t1_downlink(plane, idx, i) for i in range(p.t0)]
        raise ParamError(f"{node.name} is not a switch")

    def ports(self, node: Node) -> list[Port]:
        if node.kind == KIND_HOST:
            return [*self.host_ports(node.index), self.mgmt_host_port(node.index)]
        if node.kind == KIND_MGMT:
            return [_reverse(self.mgmt_host_port(h)) for h in range(self.host_count)]
        return self.switch_ports(node)

    def sid_anchor_macs(self, node: Node) -> tuple[bytes, bytes]:
        """MACs of the kernel-mode SID anchor veth pair of a switch."""
        tier = 0 if node.kind == KIND_T0 else 1
        plane = node.plane or 0
        return (
            mac_bytes("sid", plane, node.index, tier << 1),
            mac_bytes("sid", plane, node.index, tier << 1 | 1),
        )

    def links(self) -> Iterator[Link]:
        """Every veth pair: host-T0 links, T0-T1 links, then management links."""
        p = self.params
        for h in range(self.host_count):
            for plane in range(p.planes):
                a = self.host_port(h, plane)
                yield Link(a, _reverse(a), "host-t0")
        for plane in range(p.planes):
            for i in range(p.t0):
                for j in range(p.t1):
                    a = self.t0_uplink(plane, i, j)
                    yield Link(a, _reverse(a), "t0-t1")
        for h in range(self.host_count):
            a = self.mgmt_host_port(h)
            yield Link(a, _reverse(a), "mgmt")

    def link_between(self, a: str, b: str) -> Link:
        """The link joining two nodes, given in either order."""
        na, nb = self.parse_node(a), self.parse_node(b)
        order = {KIND_HOST: 0, KIND_T0: 1, KIND_T1: 2, KIND_MGMT: 3}
        if order[na.kind] > order[nb.kind]:
            na, nb = nb, na
        shape = self.shape
        if na.kind == KIND_HOST and nb.kind == KIND_T0:
            assert nb.plane is not None
            if shape.host_t0(na.index) == nb.index:
                port = self.host_port(na.index, nb.plane)
                return Link(port, _reverse(port), "host-t0")
        elif na.kind == KIND_T0 and nb.kind == KIND_T1 and na.plane == nb.plane:
            assert na.plane is not None
            port = self.t0_uplink(na.plane, na.index, nb.index)
            return Link(port, _reverse(port), "t0-t1")
        elif na.kind == KIND_HOST and nb.kind == KIND_MGMT:
            port = self.mgmt_host_port(na.index)
            return Link(port, _reverse(port), "mgmt")
        raise ParamError(f"no link between {a} and {b}")

    # --- tables --------------------------------------------------------------------------
    def own_usid(self, node: Node) -> int:
        assert node.plane is not None
        if node.kind == KIND_T0:
            return usid.t0_usid(node.plane, node.index)
        if node.kind == KIND_T1:
            return usid.t1_usid(node.plane, node.index)
        raise ParamError(f"{node.name} owns no uSID")

    def table(self, node: Node) -> list[Route]:
        """A switch's static table: one entry per port, whatever the cluster size.

        T0: downlink uSID k -> port d<k> (a plain /48 route: the last uSID), T1 j -> u<j>.
        T1: T0 i -> d<i>.
        """
        routes: list[Route] = []
        assert node.plane is not None
        for port in self.switch_ports(node):
            if node.kind == KIND_T0 and port.role == "down":
                u = usid.downlink_usid(node.plane, port.index)
            elif node.kind == KIND_T0:
                u = usid.t1_usid(node.plane, port.index)
            else:
                u = usid.t0_usid(node.plane, port.index)
            routes.append(
                Route(u, port.ifname, port.peer, link_local(port.peer_mac), port.peer_mac)
            )
        return routes

    def usid_prefix(self, u: int) -> str:
        """``block:uSID::/48`` (with the default block) as route text."""
        value = self.fmt.block_int | u << (128 - self.fmt.lblen - self.fmt.nflen)
        return f"{ipaddress.IPv6Address(value)}/{self.fmt.lblen + self.fmt.nflen}"

    # --- hosts: addresses and templates --------------------------------------------------
    def host_address(self, h: int, plane: int) -> bytes:
        return usid.host_address(self.shape, h, plane)

    def final_address(self, h: int, plane: int) -> bytes:
        return usid.final_address(self.shape, h, plane)

    def dest_template(self, src: int, dst: int) -> DestTemplate:
        return DestTemplate(self.shape, src, dst)

    def mgmt_address(self, h: int) -> str:
        """Host h's management address (a ULA inside the lab only): ``<ula>::100 + h``."""
        return str(self.mgmt_prefix.network_address + 0x100 + h)

    def mgmt_bridge_address(self) -> str:
        return str(self.mgmt_prefix.network_address + 1)

    def host_info(self, h: int) -> dict[str, Any]:
        """What a NIC on host h needs: its ports, MACs, peer MACs and addresses."""
        ports = []
        for port in self.host_ports(h):
            assert port.plane is not None
            d = port.to_dict()
            d["address"] = usid.to_text(self.host_address(h, port.plane))
            d["final_address"] = usid.to_text(self.final_address(h, port.plane))
            ports.append(d)
        return {
            "name": self.host_name(h),
            "namespace": self.namespace(self.host_name(h)),
            "t0": self.shape.host_t0(h),
            "downlink": self.shape.host_downlink(h),
            "ports": ports,
            "mgmt_ifname": self.ifname("m"),
            "mgmt_address": self.mgmt_address(h),
        }

    def template_info(self, src: int, dst: int) -> dict[str, Any]:
        """A per-destination template as data: uSIDs per plane with the T1 slot left open."""
        shape = self.shape
        planes = []
        for plane in range(self.params.planes):
            u = usid.path_usids(shape, src, dst, plane)
            spine = len(u) == 4
            planes.append(
                {
                    "plane": plane,
                    "usids": [f"{x:#06x}" for x in u[:1]]
                    + (["T1"] if spine else [])
                    + [f"{x:#06x}" for x in u[-2 if spine else -1 :]],
                    "t1_usids": [f"{usid.t1_usid(plane, j):#06x}" for j in range(shape.t1)]
                    if spine
                    else [],
                    "final_address": usid.to_text(self.final_address(dst, plane)),
                }
            )
        return {"src": self.host_name(src), "dst": self.host_name(dst), "planes": planes}

    # --- summary and JSON ----------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Counts by arithmetic; tables of the corner switches built to cross-check them."""
        t0 = time.perf_counter()
        p = self.params
        t0_entries, t1_entries = self.t0_ports(), self.t1_ports()
        # Cross-check the arithmetic against real tables of the first and last switch of
        # each tier (cheap even at production scale: a few hundred entries each).
        for plane in {0, p.planes - 1}:
            for i in {0, p.t0 - 1}:
                node = Node(self.t0_name(plane, i), KIND_T0, plane, i)
                assert len(self.table(node)) == t0_entries == len(self.switch_ports(node))
            for j in {0, p.t1 - 1}:
                node = Node(self.t1_name(plane, j), KIND_T1, plane, j)
                assert len(self.table(node)) == t1_entries == len(self.switch_ports(node))
        max_entries = max(t0_entries, t1_entries)
        return {
            "name": p.name,
            "planes": p.planes,
            "t0_per_plane": p.t0,
            "t1_per_plane": p.t1,
            "hosts_per_t0": p.hosts_per_t0,
            "host_count": self.host_count,
            "switch_count": self.switch_count,
            "namespace_count": self.namespace_count,
            "link_count": self.host_count * p.planes + p.planes * p.t0 * p.t1 + self.host_count,
            "t0_ports": self.t0_ports(),
            "t1_ports": self.t1_ports(),
            "t0_table_entries": t0_entries,
            "t1_table_entries": t1_entries,
            "max_table_entries": max_entries,
            "max_switch_ports": max(self.t0_ports(), self.t1_ports()),
            "tables_within_port_count": t0_entries <= self.t0_ports()
            and t1_entries <= self.t1_ports(),
            "total_table_entries": p.planes * (p.t0 * t0_entries + p.t1 * t1_entries),
            "paths_between_t0s": p.planes * p.t1,
            "paths_same_t0": p.planes,
            "nic_ports_per_host": p.planes,
            "rate_mbit": p.rate_mbit,
            "nic_rate_mbit": p.rate_mbit * p.planes,
            "block": self.fmt.prefix_text(),
            "max_ifname_len": len(self.prefix + self._longest_suffix()),
            "build_s": time.perf_counter() - t0,
        }

    def to_dict(self, templates: bool = True) -> dict[str, Any]:
        """The whole plan as JSON-ready data (linear in the lab's size; templates are per
        ordered host pair, so they are left out of large plans)."""
        switches = []
        for node in self.switches():
            switches.append(
                {
                    "name": node.name,
                    "kind": node.kind,
                    "plane": node.plane,
                    "index": node.index,
                    "namespace": self.namespace(node.name),
                    "own_usid": f"{self.own_usid(node):#06x}",
                    "sid": self.usid_prefix(self.own_usid(node)),
                    "ports": [port.to_dict() for port in self.switch_ports(node)],
                    "table": [
                        {
                            "usid": f"{r.usid:#06x}",
                            "prefix": self.usid_prefix(r.usid),
                            "ifname": r.ifname,
                            "peer": r.peer,
                        }
                        for r in self.table(node)
                    ],
                }
            )
        out: dict[str, Any] = {
            "params": self.params.to_dict(),
            "summary": self.summary(),
            "mgmt": {
                "namespace": self.namespace("mgmt"),
                "bridge": self.ifname("br"),
                "prefix": str(self.mgmt_prefix),
                "bridge_address": self.mgmt_bridge_address(),
            },
            "hosts": [self.host_info(h) for h in range(self.host_count)],
            "switches": switches,
            "links": [link.to_dict() for link in self.links()],
        }
        if templates:
            n = self.host_count
            out["templates"] = [
                self.template_info(s, d) for s in range(n) for d in range(n) if s != d
            ]
        return out


def _reverse(port: Port) -> Port:
    """The same link seen from the other end."""
    return Port(
        node=port.peer,
        ifname=port.peer_ifname,
        mac=port.peer_mac,
        peer=port.node,
        peer_ifname=port.ifname,
        peer_mac=port.mac,
        plane=port.plane,
        role=_reverse_role(port),
        index=_reverse_index(port),
    )


def _reverse_role(port: Port) -> str:
    if port.role == "down":
        return "host" if port.peer.startswith("h") else "up"
    return {"host": "down", "up": "down", "mgmt": "mgmt"}[port.role]


def _reverse_index(port: Port) -> int:
    # A host port's peer is T0 downlink k; an uplink's peer is T1 downlink i (the T0 index).
    node = port.node
    if port.role == "host":
        return int(port.peer_ifname.rsplit("-", 1)[1][1:])
    if port.role in ("up", "down") and node.startswith("p"):
        return int(node.rsplit("-", 1)[1])
    return port.index


def build_plan(params: LabParams) -> Plan:
    return Plan(params)
