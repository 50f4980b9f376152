"""``make fuzz``'s switch target: hostile frames into a running mrc-switch process.

The switch runs as its own process on the three-namespace chain of
:mod:`lab.workloads.bench.switch_chain` (AF_PACKET, its C loop, paced egress queues that mark and
trim). Frames leave the sender's veth from an AF_PACKET socket in batches: the
:class:`lab.workloads.fuzz.gen.Forge` kinds built from MRC frames to every kind of destination the
switch must tell apart (its own uSID then a neighbour's, a carrier that ends at it, a 0 in
the carrier, unknown uSIDs, outside the block), plus what only a switch looks at: other MACs,
other ethertypes, sources it must never forward, hop limits 0-2.

Accounting, from the switch's own stats and the veth's counters: every frame that left the
sender was read by the switch or dropped by the kernel before it could read it
(``rx_socket_drops``); every frame read was sent on or dropped under a named reason.
"""

from __future__ import annotations

import contextlib
import random
import struct
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from lab.workloads.bench import switch_chain as chain
from lab.workloads.fuzz.gen import Forge
from mrcnic.io.batch import Sender
from mrcnic.wire import layout

BATCH = 32  # frames per send: bursts of 256 large frames overflowed the switch's ring
# between sends: ~64k frames/s; doubled (up to 8 ms) whenever the kernel dropped frames
# before the switch read them (a busy machine)
PACE_S = 0.0005
# after the fuzz, whole batches of well-formed data frames back to back: 32 x 4-8 KB arrive
# in well under a millisecond, five times the 64 KB buffer the 50 Mb/s port drains in 10 ms,
# so the queue trims whatever pace a busy machine forced on the fuzz (CI saw 0 trims once)
BURST_BATCHES = 2
SOURCE_PREFIX = "2001:db8::/64"  # chain.SRC_ADDR's
_U32 = struct.Struct("!I")


def _mrc(op: int, body_bytes: int) -> bytes:
    bth = bytes([op, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1])
    body = bytes(body_bytes)
    return bth + body + _U32.pack(zlib.crc32(bth + body))


def templates() -> list[bytes]:
    """Well-formed frames to each kind of destination, data (trimmable) and control."""
    o, b, c, t1 = chain.OWN, chain.USID_B, chain.USID_C, chain.USID_T1
    dsts = [
        chain.usid_addr(o, b),
        chain.usid_addr(o, c),
        chain.usid_addr(o, t1, b),
        chain.usid_addr(o, o, b),
        chain.usid_addr(o),
        chain.usid_addr(o, 0, b),
        chain.usid_addr(0x4444, b),
        chain.usid_addr(b),
        bytes.fromhex("20010db8000000000000000000000002"),
    ]
    out = []
    for dst in dsts:
        for op, body, dscp in (
            (int(layout.Opcode.WRITE_ONLY), 40 + 4000, int(layout.Dscp.TRIMMABLE)),
            (int(layout.Opcode.WRITE_MIDDLE), 40 + 8000, int(layout.Dscp.TRIMMABLE_RETX)),
            (int(layout.Opcode.SACK), layout.SACK_SIZE, int(layout.Dscp.CONTROL)),
        ):
            out.append(chain.ipv6_frame(dst, payload=_mrc(op, body), dscp=dscp, ecn=2))
    return out


def switch_only(f: bytearray, rng: random.Random) -> bytearray:
    """What only a switch looks at: Ethernet destination and type, source, hop limit."""
    if len(f) < layout.OFF_UDP:
        return f  # cut short already
    r = rng.random()
    if r < 0.2:
        f[0:6] = rng.choice((rng.randbytes(6), b"\xff" * 6, chain.MAC_WB))
    elif r < 0.35:
        f[12:14] = rng.choice((b"\x08\x00", b"\x88\x08", rng.randbytes(2)))
    elif r < 0.55:
        bad = (bytes(16), bytes(15) + b"\x01", b"\xff\x02" + bytes(14), b"\xfe\x80" + bytes(14))
        f[layout.OFF_SRC : layout.OFF_DST] = rng.choice(bad)
    else:
        f[layout.OFF_HOP_LIMIT] = rng.choice((0, 1, 2, 255))
    return f


def _tx_packets(c: chain.Chain) -> int:
    path = f"/sys/class/net/{c.ifname('hA')}/statistics/tx_packets"
    return int(chain.nsrun(c.ns_s, "cat", path).stdout)


def _settle(c: chain.Chain, timeout_s: float = 10.0) -> dict:
    """The stats once two refreshes agree and the queues are empty (all input handled)."""
    last = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.45)
        st = chain.read_stats(c)
        t = st["totals"]
        queued = sum(p["queue_packets"] for p in st["ports"].values())
        key = (t["rx_packets"], t["rx_socket_drops"], t["tx_packets"], t["drops_total"])
        if key == last and queued == 0:
            return st
        last = key
    return chain.read_stats(c)


def run(frames: int, seed: int, workdir: Path | None = None) -> dict[str, Any]:
    """Send ``frames`` hostile frames through a running switch; the report (``crashes``: 1
    if the switch process died or its loop caught a bug)."""
    rng = random.Random(seed)
    forge = Forge(templates(), seed=seed)
    with tempfile.TemporaryDirectory(prefix="mrcfuzz") as tmp:
        # slow ports with small buffers (the egress queues mark, trim and overflow too), and
        # the source guard of a T0's host port (the sender's /64; forged sources hit it)
        port = {"rate_mbit": 50, "buffer_bytes": 64 << 10, "source_prefix": SOURCE_PREFIX}
        c = chain.build_chain("switch", workdir or Path(tmp), switch_args={"port": port})
        try:
            return _run(c, forge, rng, frames)
        finally:
            chain.teardown(c)


def _run(c: chain.Chain, forge: Forge, rng: random.Random, frames: int) -> dict[str, Any]:
    sock = chain.packet_socket(c.ns_s, c.ifname("hA"))
    sender = Sender()
    wire0 = _tx_packets(c)
    st0 = chain.read_stats(c)
    rss0 = None
    made = 0
    t0 = time.monotonic()
    pace_s = PACE_S
    drops_seen = 0
    batches = 0
    burst_frames = 0  # well-formed, after the fuzz: not in ``frames``
    try:
        while made < frames:
            batches += 1
            if batches % 128 == 0:  # the kernel dropped frames before the switch read them:
                with contextlib.suppress(OSError, ValueError):  # slow down (busy machine)
                    drops = chain.read_stats(c)["totals"]["rx_socket_drops"]
                    if drops > drops_seen:
                        pace_s = min(0.008, pace_s * 2)
                    drops_seen = drops
            n = min(BATCH, frames - made)
            batch = forge.frames(n)
            batch = [
                bytes(switch_only(bytearray(f), rng)) if rng.random() < 0.3 else f for f in batch
            ]
            sender.send(sock, batch)
            made += n
            time.sleep(pace_s)
            if rss0 is None and made >= frames // 10:
                rss0 = _settle(c)["rss_bytes"]
            if c.proc is not None and c.proc.poll() is not None:
                break
        burst = [f for f in templates()[:2] for _ in range(BATCH // 2)]  # to B: forwarded
        for _ in range(BURST_BATCHES):
            if c.proc is None or c.proc.poll() is not None:
                break
            _settle(c)  # empty queues, so each burst starts from nothing
            sender.send(sock, burst)
            burst_frames += len(burst)
    finally:
        sock.close()
    alive = c.proc is not None and c.proc.poll() is None
    st = _settle(c) if alive else chain.read_stats(c)
    wall_s = time.monotonic() - t0
    sent = _tx_packets(c) - wire0
    t, t0s = st["totals"], st0["totals"]
    d = {k: v - t0s["drops"].get(k, 0) for k, v in t["drops"].items()}
    rx = t["rx_packets"] - t0s["rx_packets"]
    socket_drops = t["rx_socket_drops"] - t0s["rx_socket_drops"]
    tx = t["tx_packets"] - t0s["tx_packets"]
    dropped = sum(d.values())
    return {
        "frames": made,
        "burst_frames": burst_frames,
        "frames_on_wire": sent,  # longer than the veth's MTU never leave the socket
        "crashes": 0 if alive and d.get("internal", 0) == 0 else 1,
        "switch_alive": alive,
        "accounted": tx + dropped + socket_drops,
        "every_frame_accounted": rx + socket_drops == sent and rx == tx + dropped,
        "rx_packets": rx,
        "rx_socket_drops": socket_drops,
        "forwarded": tx,
        "trims": t["trims"] - t0s["trims"],
        "ecn_marks": t["ecn_marks"] - t0s["ecn_marks"],
        "drops": d,
        "kinds": forge.counts,
        "rss_growth_bytes": st["rss_bytes"] - (rss0 or st["rss_bytes"]),
        "rss_bytes": st["rss_bytes"],
        "wall_s": round(wall_s, 2),
        "pace_s": pace_s,
        "log_tail": "" if alive else chain.switch_log(c),
    }
