"""Helpers for the lab tests: random lab names, guaranteed teardown, frames that cross a lab.

Frames are real MRC data packets built by mrcnic (wire.build_frame over a usid template),
sent from a host's NIC port with an AF_PACKET socket and caught with another one, exactly
as the NIC will do it. Each frame carries a random marker so a test only counts its own.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import select
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager

import waiting as W

from lab.fabric import lifecycle
from lab.fabric.netns import in_netns, list_netns
from lab.fabric.params import LabParams
from lab.fabric.state import LabState
from mrcnic import wire

ETH_P_ALL = 0x0003

SMALL = {"planes": 2, "t0": 2, "t1": 2, "hosts_per_t0": 1}


def lab_name() -> str:
    return "mrct" + secrets.token_hex(2)


@contextmanager
def running_lab(switch_procs: int | None = None, **kw) -> Iterator[LabState]:
    """Bring a lab up; ALWAYS take it down, whatever the test did. ``switch_procs``: as
    lifecycle.up's (python switches: 0 = a process per switch; None = the default)."""
    params = LabParams(**{"name": lab_name(), **SMALL, **kw})
    try:
        state = lifecycle.up(params, switch_procs=switch_procs)
        yield state
    finally:
        lifecycle.down(params.name)


def packet_socket(state: LabState, node: str, ifname: str, timeout_s: float = 0.3) -> socket.socket:
    with in_netns(state.plan.namespace(node)):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((ifname, 0))
    s.settimeout(timeout_s)
    return s


SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_VERSION = 10
TPACKET_V2 = 1
TP_STATUS_USER = 1
_T2_HDR = struct.Struct("=IIIHHII")  # tp_status, tp_len, tp_snaplen, tp_mac, tp_net, sec, nsec


class RingTap:
    """A capture that copies each frame *when it is seen* (a TPACKET_V2 ring, like tcpdump).

    A plain AF_PACKET recv() copies at read time, and the kernel's seg6local End (next-csid)
    shifts the destination in place in data it shares with the tap's clone: a plain socket
    on an intermediate link of a kernel switch therefore shows the address as the *next*
    switch left it. The ring has the bytes as they were on the wire.
    """

    FRAME = 16384
    FRAMES = 64

    def __init__(self, state: LabState, node: str, ifname: str) -> None:
        with in_netns(state.plan.namespace(node)):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        block = self.FRAME * 4
        req = struct.pack("IIII", block, self.FRAMES // 4, self.FRAME, self.FRAMES)
        self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
        self.ring = mmap.mmap(self.sock.fileno(), block * (self.FRAMES // 4))
        with in_netns(state.plan.namespace(node)):
            self.sock.bind((ifname, 0))
        self.slot = 0

    def frames(self, until: float) -> Iterator[bytes]:
        while True:
            off = self.slot * self.FRAME
            status, _len, snaplen, mac, _net, _s, _ns = _T2_HDR.unpack_from(self.ring, off)
            if status & TP_STATUS_USER:
                data = bytes(self.ring[off + mac : off + mac + snaplen])
                struct.pack_into("=I", self.ring, off, 0)  # hand the slot back
                self.slot = (self.slot + 1) % self.FRAMES
                yield data
                continue
            left = until - time.monotonic()
            if left <= 0:
                return
            select.select([self.sock], [], [], left)

    def marked(self, marker: bytes, until: float, want: int = 1) -> list[bytes]:
        got = []
        for f in self.frames(until):
            if marker in f:
                got.append(f)
                if len(got) >= want:
                    break
        return got

    def close(self) -> None:
        self.ring.close()
        self.sock.close()


def mrc_frame(state: LabState, src: int, dst: int, ev: int, marker: bytes) -> tuple[bytes, int]:
    """An MRC WRITE_ONLY frame h<src> -> h<dst> on the path EV names; -> (frame, plane)."""
    plan = state.plan
    tmpl = plan.dest_template(src, dst)
    plane = tmpl.plane(ev)
    port = plan.host_port(src, plane)
    mrc = wire.encode_mrc(
        wire.MrcPacket(
            bth=wire.BTH(opcode=wire.Opcode.WRITE_ONLY, dest_qp=0x10, psn=1),
            meth=wire.METH(msn=1, rqmsn=0),
            reth=wire.RETH(va=0, rkey=1, length=len(marker)),
            payload=marker,
        )
    )
    frame = wire.build_frame(
        eth_src=port.mac,
        eth_dst=port.peer_mac,
        ip_src=plan.host_address(src, plane),
        ip_dst=tmpl.address(ev),
        final_dst=tmpl.final(ev),
        ev=ev,
        mrc=mrc,
        dscp=wire.Dscp.TRIMMABLE,
    )
    return frame, plane


def receive_marked(
    s: socket.socket, marker: bytes, until: float, want: int | None = None
) -> list[bytes]:
    """Frames carrying ``marker`` until the deadline (or until ``want`` of them arrived)."""
    got: list[bytes] = []
    while (left := until - time.monotonic()) > 0 and (want is None or len(got) < want):
        s.settimeout(left)
        try:
            data = s.recv(65535)
        except (TimeoutError, BlockingIOError):
            break
        if marker in data:
            got.append(data)
    return got


def send_count(
    state: LabState, src: int, dst: int, ev: int = 0, count: int = 1, wait_s: float = 0.4
) -> int:
    """Send ``count`` frames h<src> -> h<dst> on EV's path; how many arrive at h<dst>."""
    marker = secrets.token_bytes(12)
    frame, plane = mrc_frame(state, src, dst, ev, marker)
    dport = state.plan.host_port(dst, plane)
    rx = packet_socket(state, state.plan.host_name(dst), dport.ifname)
    tx = packet_socket(state, state.plan.host_name(src), state.plan.host_port(src, plane).ifname)
    try:
        for _ in range(count):
            # ENOBUFS (egress drop by nft/tbf) or ENETDOWN (port down) is a loss, as on a NIC.
            with contextlib.suppress(OSError):
                tx.send(frame)
            if count > 20:
                time.sleep(
                    0.0005
                )  # pacing under the link rate (time itself): we test loss, not queues
        return len(receive_marked(rx, marker, time.monotonic() + wait_s, want=count))
    finally:
        rx.close()
        tx.close()


def crosses(state: LabState, src: int, dst: int, ev: int = 0) -> bool:
    # Two tries: one frame can be lost to a transient (e.g. a switch port being reopened).
    return send_count(state, src, dst, ev, count=2, wait_s=0.3) > 0


def eventually_crosses(
    state: LabState, src: int, dst: int, ev: int = 0, timeout_s: float = 5.0
) -> bool:
    """``crosses`` retried until ``timeout_s``: on a loaded machine one try's 0.3 s wait can
    end before a frame has crossed three switches of a busy process."""
    deadline = time.monotonic() + timeout_s
    while not crosses(state, src, dst, ev):
        if time.monotonic() > deadline:
            return False
    return True


def lab_leftovers(name: str) -> dict[str, list[str]]:
    """Everything carrying the lab's prefix that still exists on the machine."""
    prefix = f"{name}-"
    namespaces = [ns for ns in list_netns() if ns.startswith(prefix)]
    links = [ifname for _, ifname in socket.if_nameindex() if ifname.startswith(prefix)]
    return {"namespaces": namespaces, "root_links": links}


def pid_running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout_s: float = 3.0) -> list[int]:
    """The pids still running once they are all gone or ``timeout_s`` has passed."""

    def alive() -> list[int]:
        return [p for p in pids if pid_running(p)]

    with contextlib.suppress(AssertionError):
        W.wait_for(lambda: not alive(), timeout_s, what=f"pids {pids} to exit")
    return alive()


def nic_docs(state: LabState, host: str) -> list[dict]:
    """What the NIC processes on ``host`` publish (lab.fabric.nicstats), read whole or not
    at all."""
    out = []
    for p in (state.run_dir / "nics").glob(f"{host}-*.json"):
        doc = W.read_json(p)
        if doc is not None:
            out.append(doc)
    return out


def wait_writing(state: LabState, src: str, dst: str, timeout_s: float = 30.0) -> None:
    """Until a write ``src`` -> ``dst`` is moving data: a NIC on ``src`` publishes a QP to
    ``dst`` that has sent data (the processes start in about a second on an idle machine)."""
    W.wait_for(
        lambda: any(
            q["peer_host"] == dst and q["tx_data_bytes"] > 0
            for d in nic_docs(state, src)
            for q in d["qps"]
        ),
        timeout_s,
        0.1,
        what=f"a write {src} -> {dst} to send data",
    )


def state_dir_files(name: str) -> list[str]:
    from lab.fabric.state import run_dir, state_path

    return [str(p) for p in (state_path(name), run_dir(name)) if os.path.exists(p)]
