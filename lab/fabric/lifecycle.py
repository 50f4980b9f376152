"""Bring a lab up and take it down again, driven by its state file.

``up`` writes the state file first (every namespace it is about to create), then creates,
in batches: namespaces -> sysctls -> veth pairs (born directly inside their namespaces, so
nothing ever exists in the root namespace) -> per-namespace addresses/routes/qdiscs ->
switch processes (python mode). A failure half way tears down what was made.

``down`` stops the recorded switch processes (after checking their command line), deletes
the namespaces the state file lists (which takes their veths, routes, qdiscs and nft tables
with them), removes the lab's run directory and finally the state file. Running it twice is
harmless; it never touches a namespace outside the list, and the list only ever holds names
with the lab's prefix.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field

from lab.fabric import pyswitch
from lab.fabric.netns import (
    Batch,
    LabError,
    have_net_admin,
    netns_exists,
    run_batches,
    write_sysctls,
)
from lab.fabric.params import LabParams
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, load, new_state, state_dir, state_path
from lab.fabric.status import end_state, read_lab
from lab.fabric.switchmode import switch_mode
from lab.fabric.topology import KIND_HOST, KIND_MGMT, Plan, mac_bytes, mac_text

HOST_SYSCTLS = {"net.ipv6.conf.default.disable_ipv6": 1}  # NIC ports: no kernel IPv6 at all
# python switches: 0 = one mrc-switch process per switch; N >= 1 = N processes each serving
# a share of the switches (pyswitch.groups: whole planes while N <= planes). One process for
# all: a frame crosses its three switches on one wake-up of one process (docs/switch.md,
# "One process, several switches": 2.2x less switch CPU per frame and hop than one process
# per switch). MRC_LAB_SWITCH_PROCS overrides the default; `mrc-lab up --switch-procs N`
# overrides both.
DEFAULT_SWITCH_PROCS = 1


def switch_procs_default() -> int:
    text = os.environ.get("MRC_LAB_SWITCH_PROCS", "")
    try:
        return max(0, int(text)) if text else DEFAULT_SWITCH_PROCS
    except ValueError:
        raise LabError(f"MRC_LAB_SWITCH_PROCS={text!r}: not a whole number") from None


MGMT_SYSCTLS = {
    "net.ipv6.conf.default.accept_dad": 0,
    "net.ipv6.conf.default.dad_transmits": 0,
    "net.ipv6.conf.default.accept_ra": 0,
    "net.ipv6.conf.default.router_solicitations": 0,
}


def require_root() -> None:
    if not have_net_admin():
        raise LabError("mrc-lab up/down/faults need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")


def veth_lines(plan: Plan) -> list[str]:
    """``link add`` lines for the root-namespace batch: each end born in its namespace."""
    mtu = plan.params.mtu
    lines = []
    for link in plan.links():
        a, b = link.a, link.b
        m = 1500 if link.kind == "mgmt" else mtu
        lines.append(
            f"link add {a.ifname} netns {plan.namespace(a.node)} address {mac_text(a.mac)} "
            f"mtu {m} type veth peer name {b.ifname} netns {plan.namespace(b.node)} "
            f"address {mac_text(b.mac)} mtu {m}"
        )
    return lines


def host_lines(plan: Plan, h: int) -> list[str]:
    lines = ["link set dev lo up"]
    lines += [f"link set dev {port.ifname} up" for port in plan.host_ports(h)]
    m = plan.ifname("m")
    lines += [f"link set dev {m} up", f"addr add {plan.mgmt_address(h)}/64 dev {m} nodad"]
    return lines


def mgmt_lines(plan: Plan) -> list[str]:
    br = plan.ifname("br")
    lines = [
        "link set dev lo up",
        f"link add {br} address {mac_text(_mgmt_bridge_mac())} type bridge",
        f"link set dev {br} up",
        f"addr add {plan.mgmt_bridge_address()}/64 dev {br} nodad",
    ]
    for h in range(plan.host_count):
        port = plan.ifname(f"h{h}")
        lines += [f"link set dev {port} master {br}", f"link set dev {port} up"]
    return lines


def _mgmt_bridge_mac() -> bytes:
    return mac_bytes(KIND_MGMT, 0, 0xFFFFF, 0xFFF)


def up(
    params: LabParams,
    progress: Progress | None = None,
    keep_on_error: bool = False,
    switch_procs: int | None = None,
) -> LabState:
    """Create the lab; LabError (after cleaning up) if anything fails. ``switch_procs``
    (python switches): 0 = one process per switch, N >= 1 = N shared processes; None = the
    default (:func:`switch_procs_default`)."""
    require_root()
    if switch_procs is None:
        switch_procs = switch_procs_default()
    if switch_procs < 0:
        raise LabError(f"switch_procs must be >= 0, got {switch_procs}")
    progress = progress or Progress(quiet=True)
    plan = Plan(params)
    if state_path(params.name).exists():
        old = load(params.name)
        if any(netns_exists(ns) for ns in old.namespaces):
            raise LabError(
                f"lab {params.name} is already up (state file {old.path}); "
                f"take it down first: mrc-lab down --name {params.name}"
            )
        down(params.name)  # a stale state file from a lab whose namespaces are gone
    clash = [ns for ns in plan.namespaces() if netns_exists(ns)]
    if clash:
        raise LabError(
            f"namespace {clash[0]} already exists but lab {params.name} has no state file: "
            f"it was not made by this lab, so it is left alone; pick another --name"
        )
    state = new_state(params)
    state.namespaces = plan.namespaces()
    state.save()  # before anything exists: `down` can always clean up after us
    t0 = time.monotonic()
    try:
        _build(state, plan, progress, switch_procs)
    except BaseException as e:
        state.phase = "failed"
        state.error = str(e)
        state.save()
        if not keep_on_error:
            progress.step("bring-up failed: tearing down what was made")
            down(params.name)
        progress.done()
        raise
    state.phase = "up"
    state.up_s = time.monotonic() - t0
    state.save()
    progress.done()
    return state


def _build(state: LabState, plan: Plan, progress: Progress, switch_procs: int = 0) -> None:
    params = plan.params
    mode = switch_mode(params.switch)
    namespaces = state.namespaces

    progress.step("namespaces", len(namespaces))
    run_batches([Batch("ip", None, tuple(f"netns add {ns}" for ns in namespaces))])
    progress.advance(len(namespaces))

    progress.step("sysctls", len(namespaces))
    for node in plan.nodes():
        ns = plan.namespace(node.name)
        if node.kind == KIND_HOST:
            write_sysctls(ns, HOST_SYSCTLS)
        elif node.kind == KIND_MGMT:
            write_sysctls(ns, MGMT_SYSCTLS)
        else:
            write_sysctls(ns, mode.sysctls)
        progress.advance()

    lines = veth_lines(plan)
    progress.step("veth pairs", len(lines))
    run_batches([Batch("ip", None, tuple(lines))])
    progress.advance(len(lines))

    m = plan.ifname("m")
    for host in plan.hosts():  # the management port is the one IPv6 interface of a host
        write_sysctls(
            plan.namespace(host.name),
            {f"net.ipv6.conf.{m}.disable_ipv6": 0, f"net.ipv6.conf.{m}.accept_dad": 0},
        )

    progress.step("addresses, routes, neighbours", len(namespaces))
    batches = [
        Batch("ip", plan.namespace(h.name), tuple(host_lines(plan, h.index))) for h in plan.hosts()
    ]
    batches.append(Batch("ip", plan.namespace("mgmt"), tuple(mgmt_lines(plan))))
    for node in plan.switches():
        lines = mode.switch_lines(plan, node)
        batches.append(Batch("ip", plan.namespace(node.name), tuple(lines)))
    run_batches(batches)
    progress.advance(len(batches))

    progress.step("waiting for every link to be up (carrier)")
    wait_links_up(state)

    mode.start(state, progress, switch_procs)


def wait_links_up(state: LabState, timeout_s: float = 5.0) -> None:
    """The kernel reports carrier through linkwatch, up to a second late: wait for it, so a
    switch never starts on a port it believes is down, and `up` returns a lab that is up."""
    plan = state.plan
    deadline = time.monotonic() + timeout_s
    while True:
        views = read_lab(state, with_faults=False)
        down = []
        for link in plan.links():
            for end in (link.a, link.b):
                e = end_state(views[plan.namespace(end.node)], end.ifname)
                if not (e.carrier and e.operstate == "UP"):
                    down.append(f"{end.node} {end.ifname}")
        if not down:
            return
        if time.monotonic() > deadline:
            raise LabError(f"links not up after {timeout_s:.0f} s: {', '.join(down[:6])}")
        time.sleep(0.05)


@dataclass
class DownReport:
    name: str
    found: bool
    processes: dict[str, str] = field(default_factory=dict)
    namespaces_deleted: list[str] = field(default_factory=list)
    seconds: float = 0.0


def down(name: str, progress: Progress | None = None) -> DownReport:
    """Remove exactly what lab ``name`` created; harmless when there is nothing left."""
    require_root()
    progress = progress or Progress(quiet=True)
    t0 = time.monotonic()
    path = state_path(name)
    if not path.exists():
        return DownReport(name, found=False)
    state = load(name)
    report = DownReport(name, found=True)
    if state.processes:
        progress.step("stopping switch processes", len(state.processes))
        report.processes = pyswitch.stop_processes(list(state.processes.values()))
        progress.advance(len(state.processes))
    prefix = f"{name}-"
    doomed = [ns for ns in state.namespaces if ns.startswith(prefix) and netns_exists(ns)]
    if doomed:
        progress.step("deleting namespaces (and their veths, qdiscs, nft tables)", len(doomed))
        # -force: keep going past a namespace that vanished meanwhile.
        run_batches([Batch("ip", None, tuple(f"netns del {ns}" for ns in doomed), force=True)])
        leftover = [ns for ns in doomed if netns_exists(ns)]
        if leftover:
            raise LabError(f"could not delete namespaces: {', '.join(leftover)}")
        report.namespaces_deleted = doomed
        progress.advance(len(doomed))
    rd = state.run_dir
    if rd.is_dir() and rd.parent == state_dir() and rd.name == name:
        shutil.rmtree(rd, ignore_errors=True)
    path.unlink(missing_ok=True)
    report.seconds = time.monotonic() - t0
    progress.done()
    return report
