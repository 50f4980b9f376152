"""``mrc-lab capture NODE[:PORT...] --duration S -w FILE.pcapng``: record frames on a lab's ports.

One AF_PACKET socket per port, opened inside the node's namespace (ETH_P_ALL: both
directions; the kernel's receive timestamp in nanoseconds, SO_TIMESTAMPNS; the packet type
says outbound or inbound), read for S seconds (or N frames) and written as pcapng, one
interface per port named ``node:port`` (lab/fabric/pcapng.py). No tcpdump. The file opens in
scapy, and in Wireshark/tshark with the MRC dissector (``contrib/wireshark/mrc.lua``).

What a capture sees on a port: everything that crosses its veth, both ways, including the
frames a NIC or switch sends with AF_PACKET (they pass the kernel's taps). Frames the
socket could not keep up with are counted (``kernel_drops``), never silently lost.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.fabric.netns import LabError, in_netns
from lab.fabric.params import ParamError
from lab.fabric.pcapng import PcapngWriter
from lab.fabric.state import LabState
from mrcnic.io import afpacket

ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
PACKET_OUTGOING = 4
RCVBUF_BYTES = 16 << 20
MAX_FRAME = 65536
_TIMESPEC = struct.Struct("@qq")


@dataclass(frozen=True)
class Target:
    node: str
    port: str  # the short name: p3 (host), d0 / u1 (switch)
    ifname: str
    namespace: str

    @property
    def label(self) -> str:
        return f"{self.node}:{self.port}"


def node_ports(state: LabState, node: str) -> dict[str, str]:
    """A node's fabric ports: short name -> interface name."""
    plan = state.plan
    n = plan.parse_node(node)
    if n.kind == "host":
        ports = plan.host_ports(n.index)
    elif n.kind == "mgmt":
        raise ParamError(
            "mgmt is the management bridge, not a fabric node: capture a host or switch"
        )
    else:
        ports = plan.switch_ports(n)
    return {p.ifname.removeprefix(plan.prefix): p.ifname for p in ports}


def resolve(state: LabState, specs: Sequence[str]) -> list[Target]:
    """``NODE`` (all its ports) or ``NODE:PORT[,PORT...]`` / ``NODE:PORT:PORT``; a port is
    its short name (``p3``, ``d0``, ``u1``), its interface name, or a host's plane number."""
    out: list[Target] = []
    for spec in specs:
        node, _, rest = spec.partition(":")
        try:
            ports = node_ports(state, node)
        except (ValueError, KeyError) as e:
            raise ParamError(f"{spec}: no node {node!r} in lab {state.name} ({e})") from None
        want = [p for p in rest.replace(",", ":").split(":") if p] or list(ports)
        ns = state.namespace(node)
        for p in want:
            short = f"p{p}" if p.isdigit() and f"p{p}" in ports else p
            short = short.removeprefix(state.plan.prefix)
            if short not in ports:
                raise ParamError(f"{spec}: {node} has no port {p!r} (ports: {', '.join(ports)})")
            t = Target(node, short, ports[short], ns)
            if t not in out:
                out.append(t)
    if not out:
        raise ParamError("nothing to capture: name a node, e.g. h0 or p0-t0-0:u1")
    return out


def _open(t: Target) -> socket.socket:
    with in_netns(t.namespace):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:
            afpacket.set_buffer(s, "rcv", RCVBUF_BYTES)
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.bind((t.ifname, ETH_P_ALL))
        except BaseException:
            s.close()
            raise
    s.setblocking(False)
    return s


def capture(
    state: LabState, targets: Sequence[Target], path: Path, seconds: float,
    count: int | None = None, echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Capture for ``seconds`` (or until ``count`` frames) into ``path``; a summary."""
    socks: list[socket.socket] = []
    try:
        for t in targets:
            socks.append(_open(t))
    except OSError as e:
        for s in socks:
            s.close()
        raise LabError(f"cannot open a capture socket: {e}") from None
    per = [0] * len(targets)
    per_bytes = [0] * len(targets)
    drops = [0] * len(targets)
    cmsg_len = socket.CMSG_SPACE(_TIMESPEC.size)
    index = {s.fileno(): i for i, s in enumerate(socks)}
    path.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    deadline = t_start + seconds
    next_note = t_start + 1.0
    total = 0
    try:
        out = open(path, "wb")  # noqa: SIM115 (closed by the with below)
    except OSError as e:
        for s in socks:
            s.close()
        raise LabError(f"cannot write {path}: {e.strerror}") from None
    try:
        with out as fh:
            w = PcapngWriter(fh)
            for t in targets:
                w.add_interface(t.label, f"{state.name} {t.ifname} in {t.namespace}")
            for s in socks:  # frames queued before the file existed are still wanted
                drops[index[s.fileno()]] += afpacket.socket_drops(s)
            while (now := time.monotonic()) < deadline and (count is None or total < count):
                ready, _, _ = select.select(socks, [], [], min(0.2, deadline - now))
                for s in ready:
                    i = index[s.fileno()]
                    while count is None or total < count:
                        try:
                            data, anc, _flags, addr = s.recvmsg(MAX_FRAME, cmsg_len)
                        except BlockingIOError:
                            break
                        ts_ns = time.time_ns()
                        for level, kind, val in anc:
                            if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS:
                                sec, nsec = _TIMESPEC.unpack_from(val)
                                ts_ns = sec * 1_000_000_000 + nsec
                        w.write(i, ts_ns, data, outbound=addr[2] == PACKET_OUTGOING)
                        per[i] += 1
                        per_bytes[i] += len(data)
                        total += 1
                if echo is not None and now >= next_note:
                    echo(f"  {now - t_start:5.1f} s: {total} frames")
                    next_note = now + 1.0
            for s in socks:
                drops[index[s.fileno()]] += afpacket.socket_drops(s)
    finally:
        for s in socks:
            s.close()
    return {
        "file": str(path),
        "seconds": round(time.monotonic() - t_start, 3),
        "frames": total,
        "kernel_drops": sum(drops),
        "interfaces": [
            {"name": t.label, "ifname": t.ifname, "frames": per[i], "bytes": per_bytes[i],
             "kernel_drops": drops[i]}
            for i, t in enumerate(targets)
        ],
    }  # fmt: skip
