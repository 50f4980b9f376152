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
import subprocess
import time
from dataclasses import dataclass, field

from lab.fabric import pyswitch, stitch
from lab.fabric.netns import (
    Batch,
    LabError,
    have_net_admin,
    netns_exists,
    run_batches,
    write_sysctls,
)
from lab.fabric.params import LabParams, ParamError
from lab.fabric.partition import Partition, Underlay
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, load, new_state, state_dir, state_path
from lab.fabric.status import end_state, read_lab
from lab.fabric.switchmode import switch_mode
from lab.fabric.topology import KIND_HOST, KIND_MGMT, Link, Plan, mac_text, mgmt_bridge_mac

HOST_SYSCTLS = {"net.ipv6.conf.default.disable_ipv6": 1}  # NIC ports: no kernel IPv6 at all
# python switches: 0 = one mrc-switch process per switch; N >= 1 = N processes each serving
# a share of the switches (pyswitch.groups: whole planes while N <= planes). One process for
# all: a frame crosses its three switches on one wake-up of one process (docs/switch.md,
# "One process, several switches": 2.2x less switch CPU per frame and hop than one process
# per switch). The default follows the cores (switch_procs_for); MRC_LAB_SWITCH_PROCS
# overrides it; `mrc-lab up --switch-procs N` overrides both.
DEFAULT_SWITCH_PROCS = 1  # on a machine of up to 5 cores (the project's has 2)
#: the switches' share of a busy lab's CPU (2026-11-29, default lab at 50 Mb/s, one write:
#: the shared switch process 0.53 of a core beside two NIC processes at 0.49 each)
SWITCH_CPU_SHARE = 1 / 3


def cores_here() -> int:
    """The cores this process may run on (its affinity: a container or taskset may give
    fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def switch_procs_for(cores: int, planes: int) -> int:
    """Shared switch processes for ``cores``: the switches' share of the cores, rounded down
    to a divisor of ``planes`` so that every process serves whole planes (a frame crosses
    its three switches on one wake-up), at least one. 2 cores: 1; 16: 4; 64: 8 (8 planes)."""
    budget = max(1, int(cores * SWITCH_CPU_SHARE))
    return max(d for d in range(1, max(planes, 1) + 1) if planes % d == 0 and d <= budget)


def switch_procs_default(planes: int = 8) -> int:
    text = os.environ.get("MRC_LAB_SWITCH_PROCS", "")
    try:
        return max(0, int(text)) if text else switch_procs_for(cores_here(), planes)
    except ValueError:
        raise LabError(f"MRC_LAB_SWITCH_PROCS={text!r}: not a whole number") from None


#: the most namespaces `up` builds (the 64-host lab of issue 27's plan is ~100; a plan of a
#: million is a typo): MRC_LAB_MAX_NAMESPACES overrides it
MAX_NAMESPACES = 2048


def max_namespaces() -> int:
    text = os.environ.get("MRC_LAB_MAX_NAMESPACES", "")
    try:
        return int(text) if text else MAX_NAMESPACES
    except ValueError:
        raise LabError(f"MRC_LAB_MAX_NAMESPACES={text!r}: not a whole number") from None


MGMT_SYSCTLS = {
    "net.ipv6.conf.default.accept_dad": 0,
    "net.ipv6.conf.default.dad_transmits": 0,
    "net.ipv6.conf.default.accept_ra": 0,
    "net.ipv6.conf.default.router_solicitations": 0,
}


def require_root() -> None:
    if not have_net_admin():
        raise LabError("mrc-lab up/down/faults need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")


def veth_lines(plan: Plan, links: list[Link] | None = None) -> list[str]:
    """``link add`` lines for the root-namespace batch: each end born in its namespace
    (``links``: these only; default every link of the plan)."""
    mtu = plan.params.mtu
    lines = []
    for link in plan.links() if links is None else links:
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
        f"link add {br} address {mac_text(mgmt_bridge_mac())} type bridge",
        f"link set dev {br} up",
        f"addr add {plan.mgmt_bridge_address()}/64 dev {br} nodad",
    ]
    for h in range(plan.host_count):
        port = plan.ifname(f"h{h}")
        lines += [f"link set dev {port} master {br}", f"link set dev {port} up"]
    return lines


def up(
    params: LabParams,
    progress: Progress | None = None,
    keep_on_error: bool = False,
    switch_procs: int | None = None,
    split: dict | None = None,
) -> LabState:
    """Create the lab; LabError (after cleaning up) if anything fails. ``switch_procs``
    (python switches): 0 = one process per switch, N >= 1 = N shared processes; None = the
    default (:func:`switch_procs_default`). ``split``: build the parts of a lab split over
    machines that this machine holds (:func:`lab.fabric.partition.split_spec`)."""
    require_root()
    progress = progress or Progress(quiet=True)
    plan = Plan(params)
    state = new_state(params)
    state.split = split
    part = state.partition
    if switch_procs is None:  # a split lab: sized by the planes each machine holds
        planes = len(part.planes_on(state.here[0])) if part is not None else params.planes
        switch_procs = switch_procs_default(planes)
    if switch_procs < 0:
        raise LabError(f"switch_procs must be >= 0, got {switch_procs}")
    planned = planned_namespaces(state)
    limit = max_namespaces()
    if len(planned) > limit:
        raise ParamError(
            f"lab {params.name} would be {len(planned):,} namespaces here ({plan.host_count:,} "
            f"hosts, {plan.switch_count:,} switches in all); mrc-lab up builds at most {limit:,} "
            "(MRC_LAB_MAX_NAMESPACES), each one kernel state, veths and a share of a CPU: "
            "use mrc-sim for a fabric this size (docs/sim.md), or split the lab over machines "
            "(docs/multihost.md)"
        )
    if part is not None and split is not None and not split.get("simulated"):
        underlay = [Underlay(u["address"], u["iface"]) for u in split["underlay"]]
        for k in state.here:  # before anything is made: a wrong underlay leaves nothing behind
            ns = split["stitch_netns"].get(str(k))
            if ns is not None and not netns_exists(ns):
                raise ParamError(f"--stitch-netns {ns}: no such network namespace")
            stitch.check_underlay(part, k, underlay, ns)
    if state_path(params.name).exists():
        old = load(params.name)
        if any(netns_exists(ns) for ns in old.namespaces):
            raise LabError(
                f"lab {params.name} is already up (state file {old.path}); "
                f"take it down first: mrc-lab down --lab {params.name}"
            )
        down(params.name)  # a stale state file from a lab whose namespaces are gone
    state.namespaces = planned
    clash = [ns for ns in state.namespaces if netns_exists(ns)]
    if clash:
        raise LabError(
            f"namespace {clash[0]} already exists but lab {params.name} has no state file: "
            f"it was not made by this lab, so it is left alone; pick another --lab"
        )
    state.outside = _outside(state)
    taken = [name for ns, name in state.outside if _link_exists(ns, name)]
    if taken:
        raise LabError(
            f"interface {taken[0]} already exists in this machine's namespace but lab "
            f"{params.name} has no state file: it is left alone; pick another --lab"
        )
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


def planned_namespaces(state: LabState) -> list[str]:
    """Every namespace ``up`` makes, in creation order: the lab's (a split lab: its parts'
    here) and, for a split tried on one machine, the namespaces standing in for machines."""
    plan = state.plan
    part = state.partition
    if part is None:
        return plan.namespaces()
    out = []
    if state.split and state.split.get("simulated"):
        out += stitch.sim_namespaces(plan, part.machines)
    for k in state.here:
        out += part.namespaces_on(k)
    return out


def _stitch_netns(state: LabState, machine: int) -> str | None:
    assert state.split is not None
    return state.split["stitch_netns"].get(str(machine))


def _outside(state: LabState) -> list[list]:
    """Interfaces a part makes outside the lab's namespaces (in the machine's own namespace,
    or ``--stitch-netns``): recorded for ``down``. A split tried on one machine makes them in
    its own machine namespaces, which ``down`` deletes whole."""
    part = state.partition
    if part is None or (state.split and state.split.get("simulated")):
        return []
    return [
        [_stitch_netns(state, k), name]
        for k in state.here
        for name in stitch.outside_ifnames(part, k)
    ]


def _link_exists(netns: str | None, ifname: str) -> bool:
    argv = ["ip", *(["-n", netns] if netns else []), "link", "show", "dev", ifname]
    return subprocess.run(argv, capture_output=True).returncode == 0


def _build(state: LabState, plan: Plan, progress: Progress, switch_procs: int = 0) -> None:
    params = plan.params
    mode = switch_mode(params.switch)
    namespaces = state.namespaces
    part = state.partition
    local = state.nodes()

    progress.step("namespaces", len(namespaces))
    run_batches([Batch("ip", None, tuple(f"netns add {ns}" for ns in namespaces))])
    progress.advance(len(namespaces))

    progress.step("sysctls", len(local))
    for node in local:
        ns = plan.namespace(node.name)
        if node.kind == KIND_HOST:
            write_sysctls(ns, HOST_SYSCTLS)
        elif node.kind == KIND_MGMT:
            write_sysctls(ns, MGMT_SYSCTLS)
        else:
            write_sysctls(ns, mode.sysctls)
        progress.advance()

    lines = veth_lines(plan) if part is None else _split_links(state, part, progress)
    progress.step("veth pairs", len(lines))
    run_batches([Batch("ip", None, tuple(lines))])
    progress.advance(len(lines))
    if part is not None:
        _stitch(state, part, progress)

    m = plan.ifname("m")
    hosts = [n for n in local if n.kind == KIND_HOST]
    for host in hosts:  # the management port is the one IPv6 interface of a host
        write_sysctls(
            plan.namespace(host.name),
            {f"net.ipv6.conf.{m}.disable_ipv6": 0, f"net.ipv6.conf.{m}.accept_dad": 0},
        )

    progress.step("addresses, routes, neighbours", len(local))
    batches = [Batch("ip", plan.namespace(h.name), tuple(host_lines(plan, h.index))) for h in hosts]
    if state.is_local("mgmt"):
        batches.append(Batch("ip", plan.namespace("mgmt"), tuple(mgmt_lines(plan))))
    for node in state.switches():
        lines = mode.switch_lines(plan, node)
        batches.append(Batch("ip", plan.namespace(node.name), tuple(lines)))
    run_batches(batches)
    progress.advance(len(batches))

    progress.step("waiting for every link to be up (carrier)")
    wait_links_up(state)

    mode.start(state, progress, switch_procs)


def _split_links(state: LabState, part: Partition, progress: Progress) -> list[str]:
    """The underlay stand-in (a split tried on one machine), the underlay checks, and the
    ``link add`` lines of this machine's parts: local veth pairs and crossing links' ends."""
    split = state.split
    assert split is not None
    underlay = [Underlay(u["address"], u["iface"]) for u in split["underlay"]]
    if split.get("simulated"):
        progress.step("underlay (namespaces standing in for machines)")
        for batch in stitch.sim_batches(state.plan, underlay):
            run_batches([batch])  # in order: the veths, the bridge, the addresses
    if split.get("simulated"):  # (a real underlay was checked before anything was made)
        for k in state.here:
            stitch.check_underlay(part, k, underlay, _stitch_netns(state, k))
    lines = []
    for k in state.here:
        lines += veth_lines(state.plan, part.local_links(k))
        lines += stitch.veth_lines(part, k, _stitch_netns(state, k))
    return lines


def _stitch(state: LabState, part: Partition, progress: Progress) -> None:
    """Each crossing link's VXLAN device and tc mirred, in its machine's namespace."""
    split = state.split
    assert split is not None
    underlay = [Underlay(u["address"], u["iface"]) for u in split["underlay"]]
    progress.step("VXLAN stitches of crossing links", len(part.crossings))
    for k in state.here:
        ns = _stitch_netns(state, k)
        run_batches([Batch("ip", ns, tuple(stitch.vxlan_lines(part, k, underlay)))])
        write_sysctls(ns, stitch.quiet_sysctls(part, k))
        run_batches([Batch("ip", ns, tuple(stitch.up_lines(part, k)))])
        run_batches([Batch("tc", ns, tuple(stitch.mirred_lines(part, k)))])
    progress.advance(len(part.crossings))


def wait_links_up(state: LabState, timeout_s: float = 5.0) -> None:
    """The kernel reports carrier through linkwatch, up to a second late: wait for it, so a
    switch never starts on a port it believes is down, and `up` returns a lab that is up.
    (A split lab: the ends on this machine.)"""
    plan = state.plan
    deadline = time.monotonic() + timeout_s
    while True:
        views = read_lab(state, with_faults=False)
        down = []
        for link in state.links():
            for end in (link.a, link.b):
                if not state.is_local(end.node):
                    continue
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


def down(name: str, progress: Progress | None = None, machine: int | None = None) -> DownReport:
    """Remove exactly what lab ``name`` created; harmless when there is nothing left.
    ``machine``: of a split lab, only that machine's part (the others stay up)."""
    require_root()
    progress = progress or Progress(quiet=True)
    t0 = time.monotonic()
    path = state_path(name)
    if not path.exists():
        return DownReport(name, found=False)
    state = load(name)
    part = state.partition
    if machine is not None:
        if part is None:
            raise LabError(f"lab {name} is not split over machines: mrc-lab down --lab {name}")
        if machine not in state.here:
            raise LabError(
                f"machine {machine}'s part of lab {name} is not here (parts here: "
                f"{', '.join(map(str, state.here)) or 'none'})"
            )
    report = DownReport(name, found=True)
    leaving = state.here if machine is None else [machine]
    last = set(leaving) >= set(state.here)
    procs = [
        (node, rec) for node, rec in state.processes.items()
        if part is None or last or part.machine_of(node) in leaving
    ]  # fmt: skip
    if procs:
        progress.step("stopping switch processes", len(procs))
        report.processes = pyswitch.stop_processes([rec for _n, rec in procs])
        progress.advance(len(procs))
    prefix = f"{name}-"
    mine = set(state.namespaces)
    if part is not None and not last:
        mine = {ns for k in leaving for ns in part.namespaces_on(k)}
        if state.split and state.split.get("simulated"):
            mine |= {state.plan.namespace(f"m{k}") for k in leaving}
    doomed = [
        ns for ns in state.namespaces if ns in mine and ns.startswith(prefix) and netns_exists(ns)
    ]
    outside = [x for x in state.outside if last or _outside_of(state, x[1]) in leaving]
    by_ns: dict[str | None, list[str]] = {}
    for ns, n in outside:  # the stitch ends and VXLAN devices in the machine's namespace
        if n.startswith(prefix) and _link_exists(ns, n):
            by_ns.setdefault(ns, []).append(f"link del {n}")
    run_batches([Batch("ip", ns, tuple(lines), force=True) for ns, lines in by_ns.items()])
    if doomed:
        progress.step("deleting namespaces (and their veths, qdiscs, nft tables)", len(doomed))
        # -force: keep going past a namespace that vanished meanwhile.
        run_batches([Batch("ip", None, tuple(f"netns del {ns}" for ns in doomed), force=True)])
        leftover = [ns for ns in doomed if netns_exists(ns)]
        if leftover:
            raise LabError(f"could not delete namespaces: {', '.join(leftover)}")
        report.namespaces_deleted = doomed
        progress.advance(len(doomed))
    if not last:  # other parts stay: the state file keeps them
        assert state.split is not None
        state.split["here"] = [k for k in state.here if k not in leaving]
        state.namespaces = [ns for ns in state.namespaces if ns not in mine]
        state.processes = {n: r for n, r in state.processes.items() if (n, r) not in procs}
        state.outside = [x for x in state.outside if x not in outside]
        state.save()
        report.seconds = time.monotonic() - t0
        progress.done()
        return report
    rd = state.run_dir
    if rd.is_dir() and rd.parent == state_dir() and rd.name == name:
        shutil.rmtree(rd, ignore_errors=True)
    path.unlink(missing_ok=True)
    report.seconds = time.monotonic() - t0
    progress.done()
    return report


def _outside_of(state: LabState, ifname: str) -> int | None:
    """The machine whose part made root-namespace interface ``ifname``."""
    part = state.partition
    if part is None:
        return None
    for k in state.here:
        if ifname in stitch.outside_ifnames(part, k):
            return k
    return None
