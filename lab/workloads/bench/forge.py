"""``mrc-bench forge``: forged writes from a third host while a verified write runs.

RDMA has no encryption on the wire: what protects a region is the peer's address, the R_Key
and the PSN window. This scenario checks that those hold against a host that tries. On a
running lab (python switches), in this process:

- the writer (``--writer``, default h0) writes ``--size`` bytes into the first half of a
  region of the target (``--target``, h1); the second half, and a second region nobody
  writes, hold a known pattern that must not change;
- meanwhile the forger (``--forger``, h2), which has stolen the target QP's number, its
  R_Key, the region's address and the PSNs in flight (as a host that sniffed the exchange
  would), sends from its own NIC ports with AF_PACKET: data with the stolen and with
  guessed R_Keys, PSNs inside and outside the window, trimmed headers, the right QP number
  under a wrong source address, a QP number nobody has, and NACKs (fatal ones too) and
  PORT_STATUS "all ports down" aimed at the writer; each kind once from its own address and
  once under the address of the host it impersonates.

Pass: the write completes and verifies, no QP error on either side, 0 bytes changed
outside what the writer wrote, and every forged frame counted under the reason that names
it: ``rx_foreign`` at the QP it aimed at (its own address), ``rx_unknown_qp`` at the target
device (the QP number nobody has), ``spoofed_source`` at the forger's T0 (an address that
is not its own: the T0's source guard).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import struct
import time
import zlib
from dataclasses import dataclass
from typing import Any

from lab.fabric.host import LabHost
from lab.fabric.status import switch_stats
from mrcnic.io.netns import in_netns
from mrcnic.verbs import RemoteBuffer
from mrcnic.wire import layout

OFF_BTH = layout.OFF_BTH
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
ETH_P_ALL = 0x0003
CHUNK = 256 << 10
PACE_FRAMES, PACE_S = 8, 0.002  # the forger's pace: ~4,000 frames/s


@dataclass
class ForgeParams:
    writer: str = "h0"
    target: str = "h1"
    forger: str = "h2"
    size: int = 4 << 20
    per_kind: int = 40  # frames of each kind, from each source address
    seed: int = 1
    timeout_s: float = 120.0


def _fix_icrc(f: bytearray) -> None:
    end = layout.OFF_UDP + _U16.unpack_from(f, layout.OFF_PAYLOAD_LENGTH)[0]
    _U32.pack_into(f, end - 4, zlib.crc32(memoryview(f)[OFF_BTH : end - 4]))


def _data(tmpl: bytes, psn: int, rkey: int, va: int, qpn: int | None = None) -> bytearray:
    """A data frame like ``tmpl`` (the forger's own, valid) with other fields, valid ICRC."""
    f = bytearray(tmpl)
    w2 = _U32.unpack_from(f, OFF_BTH + 8)[0]
    _U32.pack_into(f, OFF_BTH + 8, (w2 & ~layout.PSN_MASK) | psn & layout.PSN_MASK)
    if qpn is not None:
        f[OFF_BTH + 5 : OFF_BTH + 8] = qpn.to_bytes(3, "big")
    _U64.pack_into(f, OFF_BTH + 24, va)
    _U32.pack_into(f, OFF_BTH + 32, rkey)
    f[OFF_BTH + 40 : -4] = bytes([0xEE]) * (len(f) - OFF_BTH - 44)  # the forger's payload
    _fix_icrc(f)
    return f


def _trimmed(f: bytearray) -> bytearray:
    """What a trimming switch leaves of ``f``: the headers, DSCP TRIMMED, no payload."""
    t = bytearray(f[: OFF_BTH + 40])
    w0 = _U32.unpack_from(t, layout.OFF_IPV6)[0] & ~(0x3F << layout.DSCP_SHIFT)
    _U32.pack_into(t, layout.OFF_IPV6, w0 | int(layout.Dscp.TRIMMED) << layout.DSCP_SHIFT)
    n = len(t) - layout.OFF_UDP
    _U16.pack_into(t, layout.OFF_PAYLOAD_LENGTH, n)
    _U16.pack_into(t, layout.OFF_UDP_LENGTH, n)
    return t


class Forger:
    """The third host: sans-I/O QPs that believe they are the target's and the writer's
    peers (so their frames are well formed and routed), and AF_PACKET sockets on its ports."""

    def __init__(self, st: Any, host: LabHost, rng: random.Random) -> None:
        self.st = st
        self.host = host
        self.rng = rng
        self.socks: list[socket.socket] = []
        with in_netns(host.namespace):
            for ifname in host.ifnames:
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                s.bind((ifname, 0))
                self.socks.append(s)
        self.sent: dict[str, int] = {}

    def close(self) -> None:
        for s in self.socks:
            s.close()

    async def send(self, kind: str, frames: list[tuple[int, bytes]], spoof_as: int | None) -> None:
        """Send frames ((plane, frame)); ``spoof_as``: put that host's address as source.
        Paced (a pause every PACE_FRAMES): a burst would overflow the T0's receive ring,
        whose drops cannot say which kind they took."""
        plan = self.st.plan
        n = 0
        for i, (plane, f) in enumerate(frames):
            if i and i % PACE_FRAMES == 0:
                await asyncio.sleep(PACE_S)
            f = bytearray(f)
            if spoof_as is not None:
                f[layout.OFF_SRC : layout.OFF_DST] = plan.host_address(spoof_as, plane)
            with contextlib.suppress(OSError):
                self.socks[plane].send(f)
                n += 1
        key = f"{kind}/{'spoofed' if spoof_as is not None else 'own_address'}"
        self.sent[key] = self.sent.get(key, 0) + n


def _t0s(st: Any, h: int) -> list[str]:
    plan = st.plan
    return [plan.host_port(h, p).peer for p in range(plan.params.planes)]


def _t0_counts(st: Any, nodes: list[str], forger: str) -> tuple[int, int]:
    """(spoofed_source drops, frames the kernel dropped before the switch read them) on the
    forger's T0 ports."""
    spoofed = ring = 0
    for node in nodes:
        s = switch_stats(st, node).get("stats") or {}
        spoofed += s.get("totals", {}).get("drops", {}).get("spoofed_source", 0)
        for port in s.get("ports", {}).values():
            if port.get("peer") == forger:
                ring += port.get("rx_socket_drops", 0)
    return spoofed, ring


async def run_forge(st: Any, p: ForgeParams) -> dict[str, Any]:
    """The scenario on lab state ``st``; the result (``passed``, with every figure)."""
    if st.switch_mode != "python":
        raise ValueError(
            "mrc-bench forge needs python switches: their T0s guard host ports' source "
            "addresses (the kernel's seg6local has no source guard)"
        )
    rng = random.Random(p.seed)
    a = LabHost.from_state(st, p.writer, seed=p.seed)
    b = LabHost.from_state(st, p.target, seed=p.seed + 1)
    x = LabHost.from_state(st, p.forger, seed=p.seed + 2)
    if len({a.host, b.host, x.host}) != 3:
        raise ValueError("writer, target and forger must be three different hosts")
    half = p.size
    region = bytearray(rng.randbytes(2 * half))
    before = bytes(region)
    other = bytearray(rng.randbytes(64 << 10))  # registered, writable, written by nobody
    other_before = bytes(other)
    data = rng.randbytes(half)
    forger = Forger(st, x, rng)
    spoof_nodes = _t0s(st, x.host)
    forger_name = st.plan.host_name(x.host)
    spoof0, ring0 = _t0_counts(st, spoof_nodes, forger_name)
    t0 = time.monotonic()
    try:
        async with a.nic() as na, b.nic():
            qa = a.device.create_qp(a.qp_config(seed=p.seed))
            qb = b.device.create_qp(b.qp_config(seed=p.seed + 7))
            qa.connect(qb.export())
            qb.connect(qa.export())
            mr = b.device.register(region)
            mr_other = b.device.register(other)
            rb = RemoteBuffer.of(mr)
            # the forger's QPs: one that takes itself for the target's peer, one for the writer's
            xb = x.device.create_qp(x.qp_config())
            xb.connect(qb.export())
            xa = x.device.create_qp(x.qp_config())
            xa.connect(qa.export())
            # (stats() is the QP's live record: keep the numbers, not the object)
            stats0 = (qa.stats().rx_foreign, qb.stats().rx_foreign, b.device.stats.rx_unknown_qp)
            view = memoryview(data)
            for k, off in enumerate(range(0, half, CHUNK)):
                qa.post_write(k, view[off : off + CHUNK], rb, offset=off)
            wcs: list[Any] = []

            def done() -> bool:
                wcs.extend(qa.poll_cq(256))
                return len(wcs) == (half + CHUNK - 1) // CHUNK

            attack = asyncio.ensure_future(
                _attack(forger, xa, xb, qa, qb, mr, mr_other, a.host, b.host, p, rng, done)
            )
            ok = await na.wait_for(done, p.timeout_s)
            await attack
            await asyncio.sleep(0.3)  # the last forged frames arrive
            sa, sb = qa.stats(), qb.stats()
            unknown = b.device.stats.rx_unknown_qp - stats0[2]
            result_ok = ok and all(wc.status.name == "SUCCESS" for wc in wcs)
            qp_errors = sum(q.state.name == "ERROR" for q in (qa, qb))
            foreign = {
                "writer": sa.rx_foreign - stats0[0],
                "target": sb.rx_foreign - stats0[1],
            }
    finally:
        forger.close()
    await asyncio.sleep(1.2)  # the switches' stats files refresh every 0.5 s
    spoofed, ring = _t0_counts(st, spoof_nodes, forger_name)
    spoofed, ring = spoofed - spoof0, ring - ring0
    written_ok = bytes(region[:half]) == data
    changed_outside = sum(1 for i, v in enumerate(region[half:]) if v != before[half + i])
    changed_other = sum(1 for i, v in enumerate(other) if v != other_before[i])
    sent = forger.sent
    own = {k.removesuffix("/own_address"): v for k, v in sent.items() if k.endswith("/own_address")}
    own_to = {
        "writer": sum(v for k, v in own.items() if k.startswith("at_writer/")),
        "target": sum(
            v for k, v in own.items() if k.startswith("at_target/") and k != "at_target/unknown_qp"
        ),
    }
    want_unknown = own.get("at_target/unknown_qp", 0)
    want_spoofed = sum(v for k, v in sent.items() if k.endswith("/spoofed"))
    counted = {
        "rx_foreign_at_writer": [foreign["writer"], own_to["writer"]],
        "rx_foreign_at_target": [foreign["target"], own_to["target"]],
        "rx_unknown_qp_at_target": [unknown, want_unknown],
        "spoofed_source_at_forger_t0": [spoofed, want_spoofed],
    }
    # frames the T0's receive ring dropped are counted there, but not by kind
    every_counted = all(got <= want for got, want in counted.values()) and sum(
        got for got, _ in counted.values()
    ) + ring == sum(sent.values())
    res = {
        "test": "forge",
        "writer": p.writer,
        "target": p.target,
        "forger": p.forger,
        "bytes_written": half,
        "write_verified": written_ok and result_ok,
        "qp_errors": qp_errors,
        "bytes_changed_outside_the_write": changed_outside + changed_other,
        "forged_frames": sum(sent.values()),
        "forged_by_kind": dict(sorted(sent.items())),
        "counted": {k: {"counted": g, "sent": w} for k, (g, w) in counted.items()},
        "dropped_before_read_at_forger_t0": ring,
        "every_forged_frame_counted": every_counted,
        "seconds": round(time.monotonic() - t0, 2),
    }
    res["passed"] = bool(
        res["write_verified"]
        and qp_errors == 0
        and res["bytes_changed_outside_the_write"] == 0
        and every_counted
        and res["forged_frames"] > 0
    )
    return res


async def _attack(
    forger: Forger, xa: Any, xb: Any, qa: Any, qb: Any, mr: Any, mr_other: Any,
    writer: int, target: int, p: ForgeParams, rng: random.Random, done: Any,
) -> None:  # fmt: skip
    """Rounds of every forged kind, from both addresses, until the write is done (and at
    least two rounds)."""
    big = bytes(4096 * 16)  # frames on several EVs: templates on every plane
    xb.post_write(0, big, RemoteBuffer(mr.base_va, mr.rkey, mr.length))
    tmpl = [(pl, f) for pl, f in xb.core.frames_to_send(time.monotonic()) if _is_data(f)]
    if not tmpl:
        raise RuntimeError("the forger's QP made no data frame to start from")
    rounds = 0
    per_round = max(1, p.per_kind // 4)
    while rounds < 4 or (not done() and rounds < 400):
        rounds += 1
        for spoof in (None, "victim"):
            frames = _round(xa, xb, qa, qb, mr, mr_other, tmpl, per_round, rng)
            for kind, fr in frames.items():
                as_host = None
                if spoof is not None:
                    as_host = writer if kind.startswith("at_target") else target
                await forger.send(kind, fr, as_host)
        await asyncio.sleep(0.02)


def _is_data(f: bytes) -> bool:
    return len(f) > OFF_BTH and f[OFF_BTH] in layout.MRC_DATA_OPS


def _round(xa, xb, qa, qb, mr, mr_other, tmpl, n, rng):
    """One round of every kind: {kind: [(plane, frame)]}."""
    expected = qb.core.rxwin.win.expected_psn  # the PSNs in flight, as a sniffer knows them
    window = qb.core.rxwin.size
    out: dict[str, list[tuple[int, bytes]]] = {}

    def data(kind: str, psn: int, rkey: int, va: int, qpn: int | None = None) -> None:
        pl, f = rng.choice(tmpl)
        out.setdefault(kind, []).append((pl, bytes(_data(f, psn, rkey, va, qpn))))

    for _ in range(n):
        in_win = (expected + rng.randrange(window)) & layout.PSN_MASK
        data("at_target/stolen_rkey_psn_in_window", in_win, mr.rkey, mr.base_va + mr.length - 4096)
        data("at_target/guessed_rkey", in_win, rng.getrandbits(32), mr.base_va)
        data("at_target/other_region", in_win, mr_other.rkey, mr_other.base_va)
        beyond = (expected + window + rng.randrange(1 << 20)) & layout.PSN_MASK
        data("at_target/psn_beyond_window", beyond, mr.rkey, mr.base_va)
        behind = (expected - 1 - rng.randrange(1000)) & layout.PSN_MASK
        data("at_target/psn_behind_window", behind, mr.rkey, mr.base_va)
        data("at_target/unknown_qp", in_win, mr.rkey, mr.base_va, qpn=qb.qpn ^ 0x800000)
        pl, f = rng.choice(tmpl)
        trimmed = _trimmed(_data(f, in_win, mr.rkey, mr.base_va))
        out.setdefault("at_target/trimmed_header", []).append((pl, bytes(trimmed)))
    # aimed at the writer: NACKs (fatal and not) about PSNs it has in flight, PORT_STATUS
    una = qa.core.tx.snd_una
    for _ in range(n):
        reason = rng.choice(list(layout.NackReason))
        xa.core._send_nack(int(reason), (una + rng.randrange(64)) & layout.PSN_MASK, 0,
                           rng.getrandbits(64), -1)  # fmt: skip
    nacks = xa.core.control_frames_to_send()
    out["at_writer/nack"] = nacks
    for up in (True, False):  # a new update each round: up, then every port down
        for plane in range(xa.core.planes):
            xa.core.port_status(plane, up, time.monotonic())
    out["at_writer/port_status_down"] = xa.core.control_frames_to_send()
    return out


def format_forge(res: dict[str, Any]) -> str:
    lines = [
        f"forge: {res['forger']} forged {res['forged_frames']:,} frames while {res['writer']} "
        f"wrote {res['bytes_written']:,} bytes into {res['target']}",
        f"  write verified: {res['write_verified']}, QP errors: {res['qp_errors']}, "
        f"bytes changed outside the write: {res['bytes_changed_outside_the_write']}",
    ]
    for k, v in res["counted"].items():
        mark = "ok" if v["counted"] == v["sent"] else "MISMATCH"
        lines.append(f"  {k:32s} {v['counted']:>6} counted of {v['sent']:>6} sent  {mark}")
    ring = res["dropped_before_read_at_forger_t0"]
    if ring:
        lines.append(f"  {ring} dropped by the forger's T0's receive ring (rx_socket_drops)")
    lines.append("  PASSED" if res["passed"] else "  FAILED")
    return "\n".join(lines)


def main_json(res: dict[str, Any]) -> str:
    return json.dumps(res, indent=1)
