"""``mrc-lab probe``: SRv6 self-probes that find a failed or lossy fabric link and name it.

In the spirit of the production fabric's self-probes: every host sends, on every plane and
at a set interval, probes that come back to itself by source routing alone, no peer needed:

- ``host -> T0 -> host``: destination ``block:T0:DL::`` (the T0 shifts its own uSID and
  sends the frame back down the host's own downlink): checks the host-T0 link;
- ``host -> T0 -> T1 -> T0 -> host``: ``block:T0:T1:T0:DL::``, once per T1: checks a
  T0-T1 link, both directions.

A probe is lost when it is not back within ``timeout_s``. :class:`HealthTable` (sans-I/O)
turns outcomes into a state per link: a host-T0 link is judged by its direct probes; a
T0-T1 link by the T1 probes of every host under that T0 whose own direct probe came back
(so a dead host link is not blamed on the T1 above it). A link is ``down`` after ``down_after``
probes in a row lost on every path that crosses it, ``lossy`` when the loss over the last
``window`` probes reaches ``lossy_fraction``, else ``up``. Detection bound for a link
going down: ``down_after x interval + timeout``; the CLI prints it.

The probes are UDP to port 4790 (``PROBE_PORT``: not MRC's 4791, so a NIC that sees one
counts it as not MRC and drops it), payload ``MRCPROBE`` + path id + sequence + send time.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.fabric import denials
from lab.fabric.netns import LabError, in_netns
from lab.fabric.state import LabState
from mrcnic.wire import layout, usid
from mrcnic.wire.frame import udp_checksum

PROBE_PORT = 4790
MAGIC = b"MRCPROBE"
_PAYLOAD = struct.Struct("!8sIIQ")  # magic, path id, sequence, tx ns
ETH_P_IPV6 = 0x86DD
STATES = ("up", "lossy", "down")


@dataclass(frozen=True)
class ProbePath:
    """One loop: a host's port on a plane, through its T0 (and a T1 when ``t1`` is set)."""

    pid: int
    host: int
    plane: int
    t0: int
    t1: int | None

    @property
    def host_link(self) -> tuple[str, str]:
        return (f"h{self.host}", f"p{self.plane}-t0-{self.t0}")

    @property
    def fabric_link(self) -> tuple[str, str] | None:
        if self.t1 is None:
            return None
        return (f"p{self.plane}-t0-{self.t0}", f"p{self.plane}-t1-{self.t1}")

    @property
    def label(self) -> str:
        hop = f"T1 {self.t1}" if self.t1 is not None else "T0"
        return f"h{self.host} plane {self.plane} via {hop}"


def paths_of(shape: usid.ClosShape, hosts: Sequence[int]) -> list[ProbePath]:
    out: list[ProbePath] = []
    for h in hosts:
        t0 = shape.host_t0(h)
        for p in range(shape.planes):
            out.append(ProbePath(len(out), h, p, t0, None))
            for j in range(shape.t1):
                out.append(ProbePath(len(out), h, p, t0, j))
    return out


def carrier(shape: usid.ClosShape, path: ProbePath) -> list[int]:
    t0 = usid.t0_usid(path.plane, path.t0)
    dl = usid.downlink_usid(path.plane, shape.host_downlink(path.host))
    if path.t1 is None:
        return [t0, dl]
    return [t0, usid.t1_usid(path.plane, path.t1), t0, dl]


def probe_frame(shape: usid.ClosShape, path: ProbePath, mac: bytes, peer_mac: bytes,
                seq: int, tx_ns: int) -> bytes:  # fmt: skip
    src = usid.host_address(shape, path.host, path.plane)
    dst = usid.encode(carrier(shape, path), shape.fmt)
    final = usid.final_address(shape, path.host, path.plane)
    payload = _PAYLOAD.pack(MAGIC, path.pid, seq & 0xFFFFFFFF, tx_ns)
    udp = struct.pack("!HHHH", PROBE_PORT, PROBE_PORT, 8 + len(payload), 0) + payload
    csum = udp_checksum(src, final, udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    ip = struct.pack("!IHBB", 6 << 28 | (layout.Dscp.CONTROL << 2) << 20 | path.pid & 0xFFFFF,
                     len(udp), layout.IPPROTO_UDP, 64) + src + dst  # fmt: skip
    return peer_mac + mac + struct.pack("!H", ETH_P_IPV6) + ip + udp


def parse_probe(frame: bytes) -> tuple[int, int, int] | None:
    """(path id, sequence, tx ns) of a probe frame, or None."""
    off = layout.OFF_UDP + 8
    if len(frame) < off + _PAYLOAD.size or frame[12:14] != b"\x86\xdd":
        return None
    if frame[layout.OFF_NEXT_HEADER] != layout.IPPROTO_UDP:
        return None
    if struct.unpack_from("!H", frame, layout.OFF_UDP_DST_PORT)[0] != PROBE_PORT:
        return None
    magic, pid, seq, tx = _PAYLOAD.unpack_from(frame, off)
    return (pid, seq, tx) if magic == MAGIC else None


# --- the health table (sans-I/O) ------------------------------------------------------------


@dataclass
class LinkHealth:
    link: tuple[str, str]
    state: str = "up"
    since_s: float = 0.0
    sent: int = 0
    lost: int = 0
    rtt_s: deque[float] = field(default_factory=lambda: deque(maxlen=200))

    def row(self) -> dict[str, Any]:
        rtts = sorted(self.rtt_s)
        return {
            "link": f"{self.link[0]} - {self.link[1]}",
            "state": self.state,
            "since_s": round(self.since_s, 3),
            "probes": self.sent,
            "lost": self.lost,
            "loss": round(self.lost / self.sent, 4) if self.sent else None,
            "rtt_p50_ms": round(rtts[len(rtts) // 2] * 1e3, 3) if rtts else None,
        }


class HealthTable:
    """Probe outcomes -> a state per link, and the events when a state changes."""

    def __init__(self, paths: Sequence[ProbePath], *, down_after: int = 3, window: int = 50,
                 lossy_fraction: float = 0.05) -> None:  # fmt: skip
        self.paths = list(paths)
        self.down_after, self.window, self.lossy_fraction = down_after, window, lossy_fraction
        self.hist: dict[int, deque[bool]] = {p.pid: deque(maxlen=window) for p in self.paths}
        self.links: dict[tuple[str, str], LinkHealth] = {}
        for p in self.paths:
            for lk in (p.host_link, p.fabric_link):
                if lk is not None and lk not in self.links:
                    self.links[lk] = LinkHealth(lk)
        self._direct = {(p.host, p.plane): p.pid for p in self.paths if p.t1 is None}
        self.events: list[dict[str, Any]] = []

    def outcome(self, path: ProbePath, ok: bool, rtt_s: float | None, now_s: float) -> None:
        self.hist[path.pid].append(ok)
        direct_ok = self._last_ok(self._direct[(path.host, path.plane)])
        lk = path.host_link if path.t1 is None else path.fabric_link
        assert lk is not None
        if path.t1 is not None and not direct_ok:
            return  # the host's own link is the suspect: no evidence about the T1 link
        h = self.links[lk]
        h.sent += 1
        h.lost += 0 if ok else 1
        if ok and rtt_s is not None:
            h.rtt_s.append(rtt_s)
        self._judge(lk, now_s)

    def _last_ok(self, pid: int) -> bool:
        hist = self.hist[pid]
        return not hist or hist[-1]

    def _evidence(self, lk: tuple[str, str]) -> list[deque[bool]]:
        out = []
        for p in self.paths:
            if (p.fabric_link if p.t1 is not None else p.host_link) != lk:
                continue
            if p.t1 is not None and not self._last_ok(self._direct[(p.host, p.plane)]):
                continue
            out.append(self.hist[p.pid])
        return out

    def _judge(self, lk: tuple[str, str], now_s: float) -> None:
        ev = [h for h in self._evidence(lk) if h]
        if not ev:
            return
        k = self.down_after
        down = all(len(h) >= k and not any(list(h)[-k:]) for h in ev)
        n = sum(len(h) for h in ev)
        lost = sum(1 for h in ev for x in h if not x)
        if down:
            state = "down"
        elif n >= 20 and lost / n >= self.lossy_fraction:
            state = "lossy"
        else:
            state = "up"
        h = self.links[lk]
        if state != h.state:
            self.events.append({"t_s": round(now_s, 3), "link": f"{lk[0]} - {lk[1]}",
                                "from": h.state, "to": state,
                                "loss": round(lost / n, 4) if n else None})  # fmt: skip
            h.state, h.since_s = state, now_s

    def rows(self) -> list[dict[str, Any]]:
        return [self.links[k].row() for k in sorted(self.links)]


# --- the prober (I/O) -----------------------------------------------------------------------


@dataclass
class _Port:
    host: int
    plane: int
    sock: socket.socket
    mac: bytes
    peer_mac: bytes


def run(
    state: LabState, *, hosts: Sequence[int] | None = None, interval_s: float = 0.1,
    seconds: float = 10.0, timeout_s: float = 0.2, down_after: int = 3,
    lossy_fraction: float = 0.05, window: int = 50,
    on_event: Callable[[dict[str, Any]], None] | None = None, deny: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Probe for ``seconds``; the link table, the events and the probe counts. ``deny``:
    hand the links found down or lossy to the lab's NICs, which set the EVs crossing them
    DENIED until the link is up again or the probe ends (lab/fabric/denials.py)."""
    plan = state.plan
    shape = plan.shape
    if hosts is None:  # a part of a split lab: the hosts on this machine
        hosts = [h for h in range(plan.host_count) if state.is_local(plan.host_name(h))]
    hosts = list(hosts)
    for h in hosts:
        state.require_local(plan.host_name(h))
    paths = paths_of(shape, hosts)
    table = HealthTable(paths, down_after=down_after, window=window,
                        lossy_fraction=lossy_fraction)  # fmt: skip
    ports: dict[tuple[int, int], _Port] = {}
    try:
        for h in hosts:
            with in_netns(plan.namespace(plan.host_name(h))):
                for hp in plan.host_ports(h):
                    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
                    s.bind((hp.ifname, ETH_P_IPV6))
                    s.setblocking(False)
                    ports[(h, hp.plane)] = _Port(h, hp.plane, s, hp.mac, hp.peer_mac)
    except OSError as e:
        for pt in ports.values():
            pt.sock.close()
        raise LabError(f"cannot open the probe sockets: {e}") from None
    by_fd = {pt.sock.fileno(): pt for pt in ports.values()}
    pending: dict[tuple[int, int], float] = {}  # (path id, seq) -> sent at (monotonic)
    t0 = time.monotonic()
    seq = sent = received = 0
    next_round = t0
    seen_events = 0
    denied_max = 0
    if deny:
        denials.clear(state.run_dir)
    try:
        while (now := time.monotonic()) < t0 + seconds:
            if now >= next_round:
                seq += 1
                for p in paths:
                    pt = ports[(p.host, p.plane)]
                    f = probe_frame(shape, p, pt.mac, pt.peer_mac, seq, time.monotonic_ns())
                    with contextlib.suppress(OSError):  # a down port: lost like any other
                        pt.sock.send(f)
                    pending[(p.pid, seq)] = now
                    sent += 1
                next_round += interval_s
            ready, _, _ = select.select(list(by_fd), [], [], max(0.0, min(next_round - now, 0.02)))
            now = time.monotonic()
            for fd in ready:
                pt = by_fd[fd]
                while True:
                    try:
                        frame = pt.sock.recv(2048)
                    except BlockingIOError:
                        break
                    got = parse_probe(frame)
                    if got is None:
                        continue
                    pid, s, tx_ns = got
                    at = pending.pop((pid, s), None)
                    if at is None:
                        continue  # late (already counted lost) or a copy
                    received += 1
                    table.outcome(paths[pid], True, now - at, now - t0)
            for key in [k for k, at in pending.items() if now - at > timeout_s]:
                del pending[key]
                table.outcome(paths[key[0]], False, None, now - t0)
            if len(table.events) > seen_events:
                if on_event is not None:
                    for e in table.events[seen_events:]:
                        on_event(e)
                if deny:
                    bad = [lk for lk, h in table.links.items() if h.state != "up"]
                    denials.write(state.run_dir, bad)
                    denied_max = max(denied_max, len(bad))
            seen_events = len(table.events)
    finally:
        for pt in ports.values():
            pt.sock.close()
        if deny:
            denials.clear(state.run_dir)  # the NICs allow what they denied again
    return {
        "lab": state.name,
        "hosts": [f"h{h}" for h in hosts],
        "interval_s": interval_s,
        "timeout_s": timeout_s,
        "down_after": down_after,
        "lossy_fraction": lossy_fraction,
        "detection_bound_s": round(down_after * interval_s + timeout_s, 3),
        "seconds": round(time.monotonic() - t0, 3),
        "started_monotonic_s": t0,  # events' t_s count from here
        "paths": len(paths),
        "probes_sent": sent,
        "probes_received": received,
        "links": table.rows(),
        "events": table.events,
        "not_up": [r for r in table.rows() if r["state"] != "up"],
        "deny": deny,
        "denied_links_max": denied_max,
    }
