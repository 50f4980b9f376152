"""The crossing links of a split lab on one machine's side: a veth from the node's namespace
to the machine's root namespace (the *stitch* end), a kernel VXLAN device to the other
machine, and tc clsact + mirred between the two, both ways (containerlab's vxlan-stitch).

Also the stand-in for machines when a split is tried on one machine (``mrc-lab up
--machines N``): namespace ``<lab>-m<K>`` is machine K's root namespace, with underlay
interface ``<lab>-ul`` on a bridge in namespace ``<lab>-ul``.
"""

from __future__ import annotations

import json
import subprocess

from lab.fabric.netns import Batch, LabError
from lab.fabric.partition import Partition, Underlay, underlay_mtu_needed
from lab.fabric.topology import Plan, mac_text

#: the simulated underlay's MTU: jumbo frames, as a data-centre underlay has
SIM_UNDERLAY_MTU = 9000


def sim_namespaces(plan: Plan, machines: int) -> list[str]:
    return [plan.namespace("ul")] + [plan.namespace(f"m{k}") for k in range(machines)]


def sim_batches(plan: Plan, underlay: list[Underlay]) -> list[Batch]:
    """The simulated underlay: a bridge in ``<lab>-ul``, each machine namespace on it."""
    ul = plan.namespace("ul")
    br = plan.ifname("br")
    link_lines = []
    bridge = ["link set dev lo up", f"link add name {br} mtu {SIM_UNDERLAY_MTU} type bridge"]
    for k, u in enumerate(underlay):
        m = plan.namespace(f"m{k}")
        port = plan.ifname(f"m{k}")
        link_lines.append(
            f"link add {u.iface} netns {m} mtu {SIM_UNDERLAY_MTU} type veth peer name {port} "
            f"netns {ul} mtu {SIM_UNDERLAY_MTU}"
        )
        bridge += [f"link set dev {port} master {br}", f"link set dev {port} up"]
    bridge.append(f"link set dev {br} up")
    out = [Batch("ip", None, tuple(link_lines)), Batch("ip", ul, tuple(bridge))]
    plen = 64 if underlay[0].version == 6 else 24
    for k, u in enumerate(underlay):
        out.append(
            Batch(
                "ip",
                plan.namespace(f"m{k}"),
                ("link set dev lo up", f"link set dev {u.iface} up",
                 f"addr add {u.address}/{plen} dev {u.iface}" + (" nodad" if plen == 64 else "")),
            )
        )  # fmt: skip
    return out


def check_underlay(
    part: Partition, machine: int, underlay: list[Underlay], netns: str | None
) -> None:
    """The machine's underlay interface exists, holds its address and carries the lab's
    frames in VXLAN; LabError saying what to fix otherwise."""
    u = underlay[machine]
    ns = ["-n", netns] if netns else []
    r = subprocess.run(
        ["ip", *ns, "-j", "addr", "show", "dev", u.iface], capture_output=True, text=True
    )
    if r.returncode != 0:
        raise LabError(f"underlay interface {u.iface} of machine {machine} not found here")
    info = (json.loads(r.stdout) or [{}])[0]
    addrs = {a.get("local") for a in info.get("addr_info", [])}
    if u.address not in addrs:
        raise LabError(
            f"machine {machine}'s underlay address {u.address} is not on {u.iface} here "
            f"(it has {', '.join(sorted(a for a in addrs if a)) or 'none'}): is this machine {machine}?"
        )
    need = underlay_mtu_needed(part.plan.params.mtu, u.version)
    mtu = int(info.get("mtu", 0))
    if mtu < need:
        raise LabError(
            f"underlay {u.iface} has MTU {mtu}; the lab's {part.plan.params.mtu}-byte frames "
            f"need {need} in VXLAN over IPv{u.version}: raise it (ip link set dev {u.iface} mtu "
            f"{need} or more, on every machine and the switches between them)"
        )


def veth_lines(part: Partition, machine: int, netns: str | None) -> list[str]:
    """``link add`` lines (root-namespace batch) for the node ends of the machine's crossing
    links, each paired with its stitch end in ``netns`` (None: this namespace)."""
    plan = part.plan
    mtu = plan.params.mtu
    where = f" netns {netns}" if netns else ""
    lines = []
    for c in part.crossings_on(machine):
        end = c.local_end(machine)
        m = 1500 if c.link.kind == "mgmt" else mtu
        lines.append(
            f"link add {end.ifname} netns {plan.namespace(end.node)} address "
            f"{mac_text(end.mac)} mtu {m} type veth peer name {part.stitch_ifname(c)}{where} "
            f"mtu {m}"
        )
    return lines


def vxlan_lines(part: Partition, machine: int, underlay: list[Underlay]) -> list[str]:
    """``ip`` lines in the stitch namespace: one VXLAN device per crossing link (down)."""
    me = underlay[machine]
    lines = []
    for c in part.crossings_on(machine):
        far = underlay[c.other(machine)]
        m = 1500 if c.link.kind == "mgmt" else part.plan.params.mtu
        lines.append(
            f"link add {part.vxlan_ifname(c)} mtu {m} type vxlan id {c.vni} local {me.address} "
            f"remote {far.address} dev {me.iface} dstport {part.vxlan_port} nolearning"
        )
    return lines


def quiet_sysctls(part: Partition, machine: int) -> dict[str, int]:
    """No IPv6 of their own on the stitch ends and VXLAN devices (set while they are down):
    their router solicitations and MLD reports would reach the fabric's switch ports."""
    return {f"net.ipv6.conf.{n}.disable_ipv6": 1 for n in outside_ifnames(part, machine)}


def up_lines(part: Partition, machine: int) -> list[str]:
    return [f"link set dev {n} up" for n in outside_ifnames(part, machine)]


def mirred_lines(part: Partition, machine: int) -> list[str]:
    """``tc`` lines in the stitch namespace: whatever enters the stitch end leaves by the
    VXLAN device and the other way round (u32 match-all: this kernel has no matchall)."""
    lines = []
    for c in part.crossings_on(machine):
        v, x = part.vxlan_ifname(c), part.stitch_ifname(c)
        for dev, to in ((x, v), (v, x)):
            lines += [
                f"qdisc add dev {dev} clsact",
                f"filter add dev {dev} ingress protocol all prio 1 u32 match u32 0 0 "
                f"action mirred egress redirect dev {to}",
            ]
    return lines


def outside_ifnames(part: Partition, machine: int) -> list[str]:
    """What a part makes in its machine's root namespace (``down`` deletes exactly these)."""
    out = []
    for c in part.crossings_on(machine):
        out += [part.stitch_ifname(c), part.vxlan_ifname(c)]
    return out
