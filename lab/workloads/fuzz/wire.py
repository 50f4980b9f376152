"""``make fuzz``'s NIC-on-the-wire target: hostile frames over a real veth into two running
NICs (``mrcnic.io.aio.AioNic``: AF_PACKET sockets, the shell's receive path, the engine
``MRC_NIC_ENGINE`` asks for) whose QPs are writing to each other.

Two namespaces joined by one veth, no switches (as ``make bench-nic``). In one process, on one
loop: NIC h0 in the first namespace, NIC h1 in the second, a QP pair writing both ways (replaced
every ``pair_every`` frames or when one fails), sniffers that keep recent real frames for the
:class:`lab.workloads.fuzz.gen.Forge` s, and a raw AF_PACKET socket in each namespace that sends the
forged frames, paced, towards the other NIC.

Accounting per NIC, from the kernel's and the NIC's own counters: every frame the veth
delivered was read by the NIC or dropped by the kernel before the read (the receive socket's
PACKET_STATISTICS drops); every frame the NIC read is counted under one fate
(:func:`lab.workloads.fuzz.nic.fates`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import socket
import struct
import subprocess
import time
from typing import Any

from lab.workloads.fuzz.gen import Forge
from lab.workloads.fuzz.nic import LivePair, fates, outcome_report, rss_bytes
from mrcnic.io.aio import AioNic
from mrcnic.io.aio import run as aio_run
from mrcnic.io.netns import in_netns
from mrcnic.transport.qp_types import NetConfig, PortAddr
from mrcnic.verbs import Device
from mrcnic.wire import layout, usid

SHAPE = usid.ClosShape(planes=1, t0=2, t1=1, hosts_per_t0=1)
MACS = (bytes.fromhex("026d72637a00"), bytes.fromhex("026d72637a01"))
RATE_BPS = 1e9
REGION_BYTES = 256 << 10
BURST = 32  # forged frames per side per pause
PACE_S = 0.002  # ~16k forged frames/s per side: the NICs read them all on a busy machine
SOL_PACKET, PACKET_STATISTICS = 263, 6
_STATS = struct.Struct("=II")  # tpacket_stats: packets, drops (read and reset)


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _ns_sh(ns: str, *argv: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *argv], check=True, capture_output=True, text=True
    ).stdout


class Wire:
    """The two namespaces and the veth between them; ``close`` deletes exactly these."""

    def __init__(self) -> None:
        p = "mrcfz" + secrets.token_hex(2)
        self.ns = (p + "a", p + "b")
        self.ifs = (p + "a0", p + "b0")
        self.made: list[str] = []
        try:
            for ns in self.ns:
                _sh("ip", "netns", "add", ns)
                self.made.append(ns)
            _sh("ip", "link", "add", self.ifs[0], "netns", self.ns[0], "type", "veth",
                "peer", "name", self.ifs[1], "netns", self.ns[1])  # fmt: skip
            for ns, ifname, mac in zip(self.ns, self.ifs, MACS, strict=True):
                _ns_sh(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1")
                mac_text = ":".join(f"{b:02x}" for b in mac)
                _ns_sh(ns, "ip", "link", "set", ifname, "address", mac_text, "mtu", "9000", "up")
            self._wait_carrier()
        except BaseException:
            self.close()
            raise

    def _wait_carrier(self, timeout_s: float = 3.0) -> None:
        """Until both ends have carrier: a NIC opened before that takes its port for down
        until its next link check, a second later, and drops what it sends meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = [
                _ns_sh(ns, "cat", f"/sys/class/net/{ifname}/operstate").strip()
                for ns, ifname in zip(self.ns, self.ifs, strict=True)
            ]
            if all(st == "up" for st in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"veth {self.ifs} has no carrier: {states}")
            time.sleep(0.02)

    def rx_packets(self, side: int) -> int:
        path = f"/sys/class/net/{self.ifs[side]}/statistics/rx_packets"
        return int(_ns_sh(self.ns[side], "cat", path))

    def raw_socket(self, side: int) -> socket.socket:
        with in_netns(self.ns[side]):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            s.bind((self.ifs[side], 0))
        s.setblocking(False)
        return s

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made.clear()


def _device(side: int) -> Device:
    net = NetConfig(SHAPE, side, (PortAddr(MACS[side], MACS[1 - side]),))
    return Device(net, RATE_BPS)


def _socket_drops(nic: AioNic) -> int:
    """Frames the kernel dropped before the NIC read them (since the last call)."""
    rx = nic.ports[0].rx
    if rx is None:
        return 0
    return _STATS.unpack(rx.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size))[1]


def run(frames: int, seed: int, pair_every: int = 20_000) -> dict[str, Any]:
    """Send ``frames`` forged frames (half to each NIC) while the QPs write; the report."""
    wire = Wire()
    try:
        return aio_run(_run(wire, frames, seed, pair_every))
    finally:
        wire.close()


async def _run(wire: Wire, frames: int, seed: int, pair_every: int) -> dict[str, Any]:
    rng = random.Random(seed)
    devs = [_device(0), _device(1)]
    regions = [d.register(bytearray(REGION_BYTES)) for d in devs]
    sniff = [wire.raw_socket(0), wire.raw_socket(1)]  # what arrives at each NIC
    inject = [wire.raw_socket(1), wire.raw_socket(0)]  # sends towards NIC 0, NIC 1
    veth0 = [wire.rx_packets(0), wire.rx_packets(1)]
    crashes: list[str] = []
    sent = [0, 0]
    socket_drops = [0, 0]
    async with (
        AioNic(devs[0], [wire.ifs[0]], netns=wire.ns[0]) as n0,
        AioNic(devs[1], [wire.ifs[1]], netns=wire.ns[1]) as n1,
    ):
        nics = [n0, n1]
        for n in nics:
            _socket_drops(n)  # reset
        loop = asyncio.get_running_loop()
        # an exception in the NICs' socket callbacks goes to the loop's handler: a crash
        loop.set_exception_handler(lambda _loop, ctx: crashes.append(repr(ctx)[:2000]))
        pair = LivePair(devs, regions, rng, (4096, 65536))
        captured = await _capture(sniff, pair, nics)
        forges = [
            Forge(
                captured[h],
                seed=seed * 2 + h,
                rkeys=[regions[h].rkey, rng.getrandbits(32)],
                regions=[(regions[h].base_va, REGION_BYTES)],
            )  # fmt: skip
            for h in (0, 1)
        ]
        for h in (0, 1):
            for f in captured[1 - h]:
                forges[h].hint(f)
        next_pair_at = pair_every
        rss0 = None
        t0 = time.monotonic()
        while sum(sent) < frames:
            if rss0 is None and sum(sent) >= frames // 10:
                rss0 = rss_bytes()
            if sum(sent) >= next_pair_at or pair.failed():
                next_pair_at = sum(sent) + pair_every
                pair.replace()
                # the new QPs' real frames: the forges start from those (the sniffers see
                # forged frames too, so they listen only while nothing is forged)
                await asyncio.sleep(0.05)
                captured = await _capture(sniff, pair, nics)
                for h in (0, 1):
                    forges[h].renew(captured[h], captured[1 - h])
            pair.keep_writing()
            for n in nics:
                n.kick()
            for h in (0, 1):
                n = min(BURST, frames - sum(sent))
                if n <= 0:
                    break
                for f in forges[h].frames(n):
                    with contextlib.suppress(OSError):  # longer than the MTU: never sent
                        inject[h].send(f)
                        sent[h] += 1
            await asyncio.sleep(PACE_S)
        await asyncio.sleep(0.5)  # the last frames are read
        wall_s = time.monotonic() - t0
        for h in (0, 1):
            socket_drops[h] = _socket_drops(nics[h])
        read = [nics[h].ports[0].rx_frames for h in (0, 1)]
    for s in (*sniff, *inject):
        s.close()
    veth = [wire.rx_packets(h) - veth0[h] for h in (0, 1)]
    acct = fates(devs, pair.retired)
    return {
        "engine": devs[0].engine_name,
        "frames": sum(sent),
        "frames_on_wire_total": sum(veth),
        "frames_read": sum(read),
        "rx_socket_drops": sum(socket_drops),
        "crashes": len(crashes),
        "crash_tracebacks": crashes,
        "accounted": acct["accounted"],
        # every frame the veths delivered was read or dropped by the kernel, and every
        # frame read is counted under one fate
        "every_frame_accounted": sum(veth) == sum(read) + sum(socket_drops)
        and acct["accounted"] == sum(read),
        **outcome_report(acct, forges, pair.pairs, pair.completed, rss0),
        "wall_s": round(wall_s, 2),
    }


async def _capture(
    socks: list[socket.socket], pair: LivePair, nics: list[AioNic], want: int = 16
) -> list[list[bytes]]:
    """Real frames that arrived at each NIC while nothing was forged (at most 2 s)."""
    for s in socks:  # what queued before: forged frames among them
        _drain(s, 1 << 20)
    captured: list[list[bytes]] = [[], []]
    deadline = time.monotonic() + 2
    while min(len(c) for c in captured) < want and time.monotonic() < deadline:
        pair.keep_writing()
        for n in nics:
            n.kick()
        await asyncio.sleep(0.005)
        for h, s in enumerate(socks):
            for f in _drain(s, want - len(captured[h])):
                if len(f) > layout.OFF_BTH + 12:
                    captured[h].append(f)
    return captured


def _drain(s: socket.socket, limit: int) -> list[bytes]:
    out = []
    while len(out) < limit:
        try:
            out.append(s.recv(65536))
        except BlockingIOError:
            break
    return out
