"""Python-switch mode: one ``mrc-switch --config FILE`` process per switch namespace, or
(``switch_procs`` N >= 1) N processes each serving a share of the switches.

The lab writes each switch's static config (the format of ``mrcswitch/config.py``, see
docs/switch.md) to ``/run/mrc-lab/<lab>/switches/<node>.json``, starts the process inside
the switch's namespace with ``ip netns exec``, records its PID and command line in the state
file at once, and waits until the switch says it is ready. Stopping signals only a recorded
PID whose ``/proc/PID/cmdline`` still is that command line.

Shared processes (``mrc-switch --control SOCK --config A --config B ...``, started in the
root namespace; each config names its switch's namespace, where its ports are opened): the
switches of a plane stay in one process as long as there are no more processes than planes,
so a frame crosses its plane's switches on one wake-up. Each switch keeps its record (the
process's PID and command line, its own config and stats file, and the control socket);
``reboot`` stops and starts exactly that switch through the control socket.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.fabric.netns import LabError, argv_text, sleep_until
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, ProcessRecord
from lab.fabric.topology import KIND_T0, Node, Plan, Port, mac_text
from mrcnic.wire.pfc import headroom_bytes, xoff_xon_bytes

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 3.0
# PFC in a lab: what a software neighbour needs to react to a PAUSE (its loop wakes, reads
# the frame, stops its pacer). Not measured directly: 20 ms lost frames in the first 3:1
# incast (docs/design/pfc.md, "Headroom"), 50 ms has held in the 3:1 runs since
PFC_REACTION_S = 0.05


def pfc_config(params: Any) -> dict[str, int]:
    """The lab's ``pfc`` block for every switch: XOFF at half the port buffer (at least four
    full frames), XON at half of XOFF, headroom for what the upstream still sends after XOFF
    (mrcnic.wire.pfc.headroom_bytes over PFC_REACTION_S) plus the burst its token bucket may
    release at once. docs/design/pfc.md explains the sizing."""
    frame = params.mtu + 14
    xoff, xon = xoff_xon_bytes(params.buffer_bytes, frame)
    burst = max(2 * max(frame, 1518), params.rate_bps // 16000)  # config.py's default burst
    one_way_s = getattr(params, "delay_us", 0.0) * 1e-6  # frames in flight on a delayed link
    headroom = headroom_bytes(params.rate_bps, PFC_REACTION_S, one_way_s, frame) + burst
    return {"xoff_bytes": xoff, "xon_bytes": xon, "headroom_bytes": headroom}


def port_delay_ns(params: Any, last_hop: bool) -> int:
    """The lab's one-way delay on the link out of a switch port: every switch-to-switch link
    carries ``--delay``; a T0's port to its host none (the NIC's own direction cannot, it
    sends straight into its veth, so neither does this one)."""
    return 0 if last_hop else params.delay_ns


def host_source_prefix(plan: Plan, port: Port) -> str:
    """The prefix a T0's downlink accepts as source: its host's address on the port's plane
    (``block:T0:DL::``, the block and two uSIDs long)."""
    h = int(port.peer.removeprefix("h"))
    assert port.plane is not None
    addr = ipaddress.IPv6Address(plan.host_address(h, port.plane))
    return f"{addr}/{plan.fmt.lblen + 2 * plan.fmt.nflen}"


def switch_config(
    plan: Plan, node: Node, stats_path: str, netns: str | None = None
) -> dict[str, Any]:
    """The mrc-switch config of one switch: ports, static table, stats file (and its
    namespace, for a process serving several switches)."""
    p = plan.params
    ports = []
    for port in plan.switch_ports(node):
        last_hop = node.kind == KIND_T0 and port.role == "down"
        # a T0's host port takes only the host's own source address (anti-spoofing)
        guard = {"source_prefix": host_source_prefix(plan, port)} if last_hop else {}
        delay_ns = port_delay_ns(p, last_hop)
        delay = {"delay_ns": delay_ns} if delay_ns else {}
        ports.append(
            {
                **guard,
                **delay,
                "name": port.ifname.removeprefix(plan.prefix),
                "interface": port.ifname,
                "peer": port.peer,
                "peer_mac": mac_text(port.peer_mac),
                "mac": mac_text(port.mac),
                "rate_bps": p.rate_bps,
                "buffer_bytes": p.buffer_bytes,
                "ecn_threshold_bytes": p.ecn_threshold_bytes,
                "last_hop": last_hop,
            }
        )
    table = {
        f"{route.usid:04x}": route.ifname.removeprefix(plan.prefix) for route in plan.table(node)
    }
    extra: dict[str, Any] = {"netns": netns} if netns else {}
    if getattr(p, "pfc", False):
        extra["pfc"] = pfc_config(p)
    return {
        **extra,
        "name": node.name,
        "block": plan.fmt.prefix_text(),
        "own_usids": [f"{plan.own_usid(node):04x}"],
        "ports": ports,
        "table": table,
        "stats_path": stats_path,
        "stats_interval_s": 0.5,
        "max_frame_bytes": max(p.mtu + 14, 1518),
    }


def switch_command() -> list[str]:
    """How to run mrc-switch: the installed entry point next to this Python, else -m."""
    exe = Path(sys.executable).with_name("mrc-switch")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mrc-switch")
    if found:
        return [found]
    return [sys.executable, "-m", "mrcswitch.main"]


def write_configs(state: LabState, shared: bool = False) -> dict[str, tuple[Path, Path, Path]]:
    """Write every switch's config (``shared``: each names its namespace); -> node ->
    (config, stats, log) paths."""
    plan = state.plan
    conf_dir = state.run_dir / "switches"
    stats_dir = state.run_dir / "stats"
    log_dir = state.run_dir / "logs"
    for d in (conf_dir, stats_dir, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    out = {}
    for node in state.switches():  # a part of a split lab: its machine's switches
        conf = conf_dir / f"{node.name}.json"
        stats = stats_dir / f"{node.name}.json"
        log = log_dir / f"{node.name}.log"
        ns = plan.namespace(node.name) if shared else None
        conf.write_text(json.dumps(switch_config(plan, node, str(stats), ns), indent=1))
        out[node.name] = (conf, stats, log)
    return out


def start_switch(state: LabState, node: str, conf: Path, stats: Path, log: Path) -> ProcessRecord:
    """Start one switch in its namespace; the record is saved by the caller at once."""
    ns = state.plan.namespace(node)
    with contextlib.suppress(FileNotFoundError):
        stats.unlink()
    argv = [*switch_command(), "--config", str(conf)]
    if state.params.realtime:
        argv.append("--realtime")
    full = ["ip", "netns", "exec", ns, *argv]
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C at the terminal must not kill the fabric
        )
    # `ip netns exec` execs the command in the same process: the PID is the switch's.
    return ProcessRecord(
        node=node,
        pid=proc.pid,
        argv=argv,
        config=str(conf),
        stats=str(stats),
        log=str(log),
        started_at=time.time(),
    )


def groups(plan: Plan, procs: int, names: list[str] | None = None) -> list[list[str]]:
    """The switches of each of ``procs`` shared processes: contiguous runs of the switches in
    plane order, so that with ``procs`` <= planes no plane is split when planes divide
    evenly (and as few as can be otherwise). ``names``: these switches only (default all)."""
    if names is None:
        names = [n.name for n in plan.switches()]
    procs = max(1, min(procs, len(names)))
    out = []
    for k in range(procs):
        lo, hi = k * len(names) // procs, (k + 1) * len(names) // procs
        out.append(names[lo:hi])
    return out


def machine_groups(state: LabState, procs: int) -> list[list[str]]:
    """:func:`groups` of each machine of the lab held here (``procs`` per machine: a split
    tried on one machine starts what each machine would)."""
    part = state.partition
    if part is None:
        return groups(state.plan, procs)
    out = []
    for k in state.here:
        names = [n for n in part.nodes_on(k) if state.plan.parse_node(n).kind in ("t0", "t1")]
        out += groups(state.plan, procs, names)
    return out


def start_group(
    state: LabState, index: int, nodes: list[str], paths: dict[str, tuple[Path, Path, Path]]
) -> list[ProcessRecord]:
    """Start one process serving ``nodes`` (their configs name their namespaces); one
    record per switch, all with its PID, saved by the caller at once."""
    ctl = state.run_dir / f"switchproc{index}.sock"
    log = state.run_dir / "logs" / f"switchproc{index}.log"
    argv = [*switch_command(), "--control", str(ctl)]
    if state.params.realtime:
        argv.append("--realtime")
    for node in nodes:
        argv += ["--config", str(paths[node][0])]
        with contextlib.suppress(FileNotFoundError):
            paths[node][1].unlink()
    with open(log, "ab") as logf:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    now = time.time()
    return [
        ProcessRecord(
            node=node, pid=proc.pid, argv=argv, config=str(paths[node][0]),
            stats=str(paths[node][1]), log=str(log), started_at=now, control=str(ctl),
        )
        for node in nodes
    ]  # fmt: skip


def control_request(rec: ProcessRecord, op: str, **fields: Any) -> dict[str, Any]:
    """The control request ``op`` with ``fields`` for the switch of ``rec`` (what
    :func:`hosted_request` sends)."""
    return {"op": op, "switch": rec.node, **fields}


def control_command(rec: ProcessRecord, op: str, **fields: Any) -> list[str]:
    """The mrc-switch command line that sends that request (what a fault prints)."""
    assert rec.control is not None
    msg = json.dumps(control_request(rec, op, **fields))
    return [*switch_command(), "--control", rec.control, "--request", msg]


def hosted_request(rec: ProcessRecord, op: str, **fields: Any) -> dict:
    """``op`` ("stop", "start", "delay") for the switch of ``rec`` through its process's
    control socket; LabError if the process is gone or refuses."""
    # here, not at the top: mrcswitch.host loads the whole switch (0.10 s to import,
    # python -X importtime, 2026-11-27), and every mrc-lab command imports this module
    from mrcswitch.host import control

    if rec.control is None or not rec.is_alive():
        raise LabError(f"the process serving {rec.node} (pid {rec.pid}) is not running")
    try:
        reply = control(rec.control, control_request(rec, op, **fields))
    except (OSError, ValueError) as e:
        raise LabError(f"{rec.node}: control socket {rec.control}: {e}") from None
    if not reply.get("ok"):
        raise LabError(f"{rec.node}: {op} refused: {reply.get('error')}")
    return reply


def is_ready(rec: ProcessRecord) -> bool:
    """Ready = this process's stats file says ``"ready": true`` (docs/switch.md): written
    once every port is open. The file is replaced atomically, so it is never half-read."""
    if rec.stats is None:
        return False
    try:
        with open(rec.stats) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    return bool(data.get("ready")) and data.get("pid") == rec.pid


def exited(rec: ProcessRecord) -> int | None:
    """The exit status if the process has ended (reaps it when it is our child)."""
    try:
        pid, status = os.waitpid(rec.pid, os.WNOHANG)
    except ChildProcessError:
        return None if rec.is_alive() else -1
    if pid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def wait_ready(
    recs: list[ProcessRecord], timeout_s: float = READY_TIMEOUT_S, on_ready=None
) -> None:
    """Wait until every switch is ready; LabError naming the ones that died or hung."""
    deadline = time.monotonic() + timeout_s
    waiting = list(recs)
    while waiting:
        still = []
        for rec in waiting:
            if is_ready(rec):
                if on_ready:
                    on_ready(rec)
                continue
            code = exited(rec)
            if code is not None:
                raise LabError(
                    f"switch {rec.node} exited ({code}) before it was ready:\n{_tail(rec.log)}"
                )
            still.append(rec)
        waiting = still
        if waiting and time.monotonic() > deadline:
            names = ", ".join(r.node for r in waiting[:8])
            raise LabError(
                f"switches not ready after {timeout_s:.0f} s: {names} (logs in {waiting[0].log})"
            )
        if waiting:
            time.sleep(0.05)


def _tail(path: str | None, lines: int = 15) -> str:
    if not path:
        return ""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def stop_processes(recs: list[ProcessRecord], timeout_s: float = STOP_TIMEOUT_S) -> dict[str, str]:
    """SIGTERM every recorded switch whose cmdline still matches, wait for all of them at
    once, SIGKILL the ones that hang. -> node -> "stopped" | "killed" | "not running"."""
    result: dict[str, str] = {}
    signalled: list[ProcessRecord] = []
    by_pid: dict[int, list[ProcessRecord]] = {}  # a shared process: signalled once
    for rec in recs:
        by_pid.setdefault(rec.pid, []).append(rec)
    others: dict[str, list[str]] = {}
    for same in by_pid.values():
        others[same[0].node] = [r.node for r in same[1:]]
    recs = [same[0] for same in by_pid.values()]
    for rec in recs:
        if not rec.is_alive():
            exited(rec)
            result[rec.node] = "not running"
            continue
        try:
            os.kill(rec.pid, signal.SIGTERM)
            signalled.append(rec)
        except ProcessLookupError:
            result[rec.node] = "not running"
    deadline = time.monotonic() + timeout_s
    while signalled and time.monotonic() < deadline:
        still = []
        for rec in signalled:
            exited(rec)
            if rec.is_alive():
                still.append(rec)
            else:
                result[rec.node] = "stopped"
        signalled = still
        if signalled:
            time.sleep(0.02)
    for rec in signalled:
        if rec.is_alive():  # checked again right before the signal: never a reused PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(rec.pid, signal.SIGKILL)
            result[rec.node] = "killed"
        exited(rec)
    for node, rest in others.items():
        for other in rest:
            result[other] = result[node]
    return result


def stop_process(rec: ProcessRecord, timeout_s: float = STOP_TIMEOUT_S) -> str:
    return stop_processes([rec], timeout_s)[rec.node]


#: python switches' namespaces: no kernel IPv6 on their ports (mrc-switch owns them)
SYSCTLS = {"net.ipv6.conf.default.disable_ipv6": 1}


def switch_lines(plan: Plan, node: Node) -> list[str]:
    """A python switch's namespace: its ports up, nothing else (mrc-switch does the rest)."""
    return ["link set dev lo up"] + [
        f"link set dev {port.ifname} up" for port in plan.switch_ports(node)
    ]


class PythonSwitch:
    """Python-switch mode behind :class:`lab.fabric.switchmode.SwitchMode`."""

    name = "python"
    sysctls = SYSCTLS

    def switch_lines(self, plan: Plan, node: Node) -> list[str]:
        return switch_lines(plan, node)

    def start(self, state: LabState, progress: Progress, switch_procs: int) -> None:
        plan = state.plan
        progress.step("switch processes", plan.switch_count)
        paths = write_configs(state, shared=switch_procs > 0)
        recs = []
        if switch_procs > 0:
            for k, nodes in enumerate(machine_groups(state, switch_procs)):
                group = start_group(state, k, nodes, paths)
                for rec in group:
                    state.processes[rec.node] = rec
                state.save()  # the PID is on disk before we do anything else
                recs += group
                progress.advance(len(group))
            paths = {}
        for node, (conf, stats, log) in paths.items():
            rec = start_switch(state, node, conf, stats, log)
            state.processes[node] = rec
            state.save()  # the PID is on disk before we do anything else
            recs.append(rec)
            progress.advance()
        progress.step("waiting for switches to be ready", len(recs))
        wait_ready(recs, on_ready=lambda _rec: progress.advance())

    def port_up_lines(self, plan: Plan, port: Port) -> list[str]:
        return []  # mrc-switch keeps its table; the port just carries frames again

    def rate_line(self, plan: Plan, ifname: str) -> str | None:
        return None

    def reboot(
        self,
        state: LabState,
        node: Node,
        down_ms: float,
        echo: Callable[[str], None],
        ip_lines: Callable[[str, list[str]], None],
    ) -> None:
        """SIGTERM the recorded PID, wait, start it again with the same config (a switch of
        a shared process: through the process's control socket)."""
        rec = state.processes.get(node.name)
        if rec is None:
            raise LabError(f"no switch process recorded for {node.name}")
        if rec.control is not None:
            _reboot_hosted(rec, down_ms, echo)
            return
        t = time.monotonic()
        if rec.is_alive():
            echo(f"kill -TERM {rec.pid}   # {node.name}: {argv_text(rec.argv)}")
            stop_process(rec)
        else:
            echo(f"# {node.name} was not running")
        sleep_until(t + down_ms / 1000.0)
        ns = state.plan.namespace(node.name)
        echo(argv_text(["ip", "netns", "exec", ns, *rec.argv]))
        new = start_switch(
            state, node.name, Path(rec.config), Path(rec.stats or ""), Path(rec.log or "")
        )
        state.processes[node.name] = new
        state.save()
        wait_ready([new])
        echo(f"# {node.name} is back (pid {new.pid}) after {time.monotonic() - t:.2f} s")


def _reboot_hosted(rec: ProcessRecord, down_ms: float, echo: Callable[[str], None]) -> None:
    """A switch served by a shared process: stopped and started again from its config file
    through the process's control socket; the other switches keep running."""
    t = time.monotonic()
    # the commands a user can replay (the request is what hosted_request sends)
    echo(argv_text(control_command(rec, "stop")))
    hosted_request(rec, "stop")
    sleep_until(t + down_ms / 1000.0)
    echo(argv_text(control_command(rec, "start")) + f"   # from its unchanged config {rec.config}")
    if rec.stats:
        Path(rec.stats).unlink(missing_ok=True)
    hosted_request(rec, "start")
    wait_ready([rec])
    echo(f"# {rec.node} is back (pid {rec.pid}) after {time.monotonic() - t:.2f} s")
