"""Kernel-switch mode: the Linux kernel configured as a uSID switch (no process to run).

Per switch namespace (``ip -n NS -batch -`` lines, ``tc -n NS -batch -`` lines):

- the own SID ``block:uSID::/48`` as ``encap seg6local action End flavors next-csid lblen 32
  nflen 16`` on a veth pair ``<lab>-sid``/``<lab>-sidx`` that lives inside the switch (the
  route needs an up device that is not a fabric port, so that a port going down does not
  take the SID with it; ``lo`` does not work for seg6local, ``dummy`` may be missing);
- one plain ``/48`` route per table entry via the peer's link-local address, with a
  permanent neighbour entry for it (T0: downlink uSIDs -> hosts, T1 uSIDs -> uplinks; T1:
  T0 uSIDs -> downlinks). The last uSID is thus a plain route at the last T0, which
  forwards ``block:DL::`` to the host unchanged;
- tbf at the link rate on every switch port (egress), its limit the lab's buffer.

Taking a port down administratively makes the kernel flush its routes and neighbour entries
(permanent ones too), so bringing it up again re-applies :func:`port_lines`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lab.fabric.netns import Batch, run_batches, sleep_until
from lab.fabric.progress import Progress
from lab.fabric.state import LabState
from lab.fabric.topology import Node, Plan, Port, link_local, mac_text


def tbf_burst_bytes(plan: Plan) -> int:
    """Token bucket depth: two full frames, or 0.5 ms of line rate if that is more."""
    frame = plan.params.mtu + 14
    return max(2 * frame, plan.params.rate_bps // 16000)


def tbf_line(plan: Plan, ifname: str, rate_bps: int | None = None) -> str:
    rate = rate_bps if rate_bps is not None else plan.params.rate_bps
    burst = max(tbf_burst_bytes(plan), plan.params.mtu + 14)
    return f"qdisc replace dev {ifname} root tbf rate {rate}bit burst {burst} limit {plan.params.buffer_bytes}"


def sid_lines(plan: Plan, node: Node) -> list[str]:
    a, b = plan.sid_anchor_macs(node)
    sid, sidx = plan.ifname("sid"), plan.ifname("sidx")
    fmt = plan.fmt
    return [
        f"link add {sid} address {mac_text(a)} type veth peer name {sidx} address {mac_text(b)}",
        f"link set dev {sid} up",
        f"link set dev {sidx} up",
        f"route replace {plan.usid_prefix(plan.own_usid(node))} encap seg6local action End"
        f" flavors next-csid lblen {fmt.lblen} nflen {fmt.nflen} dev {sid}",
    ]


def sid_restore_lines(plan: Plan, node: Node) -> list[str]:
    """After a reboot (all ports down): the anchor stayed up, the End route may be gone."""
    fmt = plan.fmt
    return [
        f"link set dev {plan.ifname('sid')} up",
        f"link set dev {plan.ifname('sidx')} up",
        f"route replace {plan.usid_prefix(plan.own_usid(node))} encap seg6local action End"
        f" flavors next-csid lblen {fmt.lblen} nflen {fmt.nflen} dev {plan.ifname('sid')}",
    ]


def port_lines(plan: Plan, node: Node, port: Port) -> list[str]:
    """Bring one switch port up with its neighbour entry and its table routes."""
    lines = [f"link set dev {port.ifname} up"]
    gw = link_local(port.peer_mac)
    lines.append(
        f"neigh replace {gw} lladdr {mac_text(port.peer_mac)} dev {port.ifname} nud permanent"
    )
    for route in plan.table(node):
        if route.ifname == port.ifname:
            lines.append(f"route replace {plan.usid_prefix(route.usid)} via {gw} dev {port.ifname}")
    return lines


def switch_lines(plan: Plan, node: Node) -> list[str]:
    lines = ["link set dev lo up", *sid_lines(plan, node)]
    for port in plan.switch_ports(node):
        lines += port_lines(plan, node, port)
    return lines


def restore_lines(plan: Plan, node: Node) -> list[str]:
    """The whole static config again (after a reboot), idempotent."""
    lines = sid_restore_lines(plan, node)
    for port in plan.switch_ports(node):
        lines += port_lines(plan, node, port)
    return lines


def tc_lines(plan: Plan, node: Node) -> list[str]:
    return [tbf_line(plan, port.ifname) for port in plan.switch_ports(node)]


SYSCTLS = {
    "net.ipv6.conf.all.forwarding": 1,
    "net.ipv6.conf.default.forwarding": 1,
    "net.ipv6.conf.default.accept_ra": 0,
    "net.ipv6.conf.default.accept_dad": 0,
    "net.ipv6.conf.default.dad_transmits": 0,
    "net.ipv6.conf.default.router_solicitations": 0,
    # No link-local address on switch ports: no DAD, no solicited-node MLD chatter towards the
    # hosts' NICs. Routing needs none (next hops are static neighbour entries).
    "net.ipv6.conf.default.addr_gen_mode": 1,
}


class KernelSwitch:
    """Kernel-switch mode behind :class:`lab.fabric.switchmode.SwitchMode`."""

    name = "kernel"
    sysctls = SYSCTLS

    def switch_lines(self, plan: Plan, node: Node) -> list[str]:
        return switch_lines(plan, node)

    def start(self, state: LabState, progress: Progress, switch_procs: int) -> None:
        plan = state.plan
        progress.step("tbf qdiscs at link rate", plan.switch_count)
        run_batches(
            Batch("tc", plan.namespace(n.name), tuple(tc_lines(plan, n))) for n in state.switches()
        )
        progress.advance(plan.switch_count)

    def port_up_lines(self, plan: Plan, port: Port) -> list[str]:
        # the kernel flushed the port's neighbour entry and routes when it went down
        node = plan.parse_node(port.node)
        return port_lines(plan, node, port)[1:]  # after "link set up"

    def rate_line(self, plan: Plan, ifname: str) -> str | None:
        return tbf_line(plan, ifname)

    def reboot(
        self,
        state: LabState,
        node: Node,
        down_ms: float,
        echo: Callable[[str], None],
        ip_lines: Callable[[str, list[str]], None],
    ) -> None:
        plan = state.plan
        t = time.monotonic()
        echo(f"# {node.name}: kernel switch 'power off': every port and the SID anchor down")
        down = [f"link set dev {port.ifname} down" for port in plan.switch_ports(node)]
        ip_lines(node.name, [*down, f"link set dev {plan.ifname('sid')} down"])
        sleep_until(t + down_ms / 1000.0)
        echo(f"# {node.name}: boot with the unchanged static config")
        ip_lines(node.name, restore_lines(plan, node))
