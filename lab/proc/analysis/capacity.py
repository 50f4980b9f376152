"""What the surviving fabric can carry (pure): the lab's shape, outages (switch, link, NIC port,
loss), a flow's and a permutation's capacity, faults on a clock and capacity over time."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

_SWITCH_RE = re.compile(r"^p(\d+)-t([01])-(\d+)$")
_HOST_RE = re.compile(r"^h(\d+)$")


@dataclass(frozen=True, slots=True)
class Shape:
    """The lab's Clos: the part of ``lab.fabric.params.LabParams`` capacity depends on."""

    planes: int
    t0: int
    t1: int
    hosts_per_t0: int
    rate_bps: float

    @classmethod
    def from_params(cls, params: Any) -> Shape:
        """From a ``LabParams`` (or anything with its attribute names)."""
        return cls(params.planes, params.t0, params.t1, params.hosts_per_t0, params.rate_mbit * 1e6)

    @property
    def host_count(self) -> int:
        return self.t0 * self.hosts_per_t0

    def host_t0(self, host: int) -> int:
        return host // self.hosts_per_t0

    @property
    def full_bps(self) -> float:
        """One host's NIC: every plane's port at the link rate."""
        return self.planes * self.rate_bps


class OutageKind(Enum):
    SWITCH = "switch"  # a switch is down (reboot): every link it has is gone
    LINK = "link"  # one link is down (either end)
    PORT = "port"  # a host's NIC port on one plane is down
    LOSS = "loss"  # random loss on a link: capacity unchanged, recorded for the report


@dataclass(frozen=True, slots=True)
class Outage:
    """What a fault removes. ``a``/``b`` are lab node names (``p3-t1-0``, ``h0``); ``plane``
    is the plane of a PORT outage."""

    kind: OutageKind
    a: str
    b: str = ""
    plane: int = -1

    @classmethod
    def switch(cls, node: str) -> Outage:
        return cls(OutageKind.SWITCH, node)

    @classmethod
    def link(cls, a: str, b: str) -> Outage:
        return cls(OutageKind.LINK, a, b)

    @classmethod
    def port(cls, host: str, plane: int) -> Outage:
        return cls(OutageKind.PORT, host, plane=plane)

    @classmethod
    def loss(cls, a: str, b: str) -> Outage:
        return cls(OutageKind.LOSS, a, b)


def _parse_switch(name: str) -> tuple[int, int, int]:
    """``p3-t1-0`` -> (plane 3, tier 1, index 0)."""
    m = _SWITCH_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a switch name (p<plane>-t0-<i> or p<plane>-t1-<j>)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _parse_host(name: str) -> int:
    m = _HOST_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a host name (h<N>)")
    return int(m.group(1))


class _Dead:
    """The elements the active outages remove, in the form the capacity sum asks for."""

    def __init__(self, outages: Iterable[Outage]) -> None:
        self.switches: set[tuple[int, int, int]] = set()
        self.fabric_links: set[tuple[int, int, int]] = set()  # (plane, t0, t1)
        self.host_ports: set[tuple[int, int]] = set()  # (host, plane)
        for o in outages:
            if o.kind is OutageKind.SWITCH:
                self.switches.add(_parse_switch(o.a))
            elif o.kind is OutageKind.PORT:
                self.host_ports.add((_parse_host(o.a), o.plane))
            elif o.kind is OutageKind.LINK:
                self._add_link(o.a, o.b)

    def _add_link(self, a: str, b: str) -> None:
        ha, hb = _HOST_RE.match(a), _HOST_RE.match(b)
        if ha or hb:  # a host link: the same as that host's NIC port on the T0's plane
            host, sw = (a, b) if ha else (b, a)
            plane, _tier, _i = _parse_switch(sw)
            self.host_ports.add((_parse_host(host), plane))
            return
        pa, ta, ia = _parse_switch(a)
        pb, tb, ib = _parse_switch(b)
        if pa != pb or ta == tb:
            raise ValueError(f"{a} - {b} is not a T0-T1 link")
        t0, t1 = (ia, ib) if ta == 0 else (ib, ia)
        self.fabric_links.add((pa, t0, t1))

    def path_up(self, plane: int, t0a: int, t1: int, t0b: int) -> bool:
        return (
            (plane, 1, t1) not in self.switches
            and (plane, t0a, t1) not in self.fabric_links
            and (plane, t0b, t1) not in self.fabric_links
        )


def flow_capacity_bps(shape: Shape, src: int, dst: int, outages: Iterable[Outage] = ()) -> float:
    """What the fabric without ``outages`` can carry for one flow from host src to dst."""
    dead = _Dead(outages)
    ta, tb = shape.host_t0(src), shape.host_t0(dst)
    total = 0.0
    for p in range(shape.planes):
        if (src, p) in dead.host_ports or (dst, p) in dead.host_ports:
            continue
        if (p, 0, ta) in dead.switches or (p, 0, tb) in dead.switches:
            continue
        if ta == tb:
            total += shape.rate_bps
            continue
        live = sum(1 for j in range(shape.t1) if dead.path_up(p, ta, j, tb))
        total += min(shape.rate_bps, live * shape.rate_bps)
    return total


def permutation_pairs(shape: Shape, one_way: bool = False) -> list[tuple[int, int]]:
    """Every host writes to a distinct host under the next T0 (h -> h + hosts_per_t0, wrapping):
    a permutation in which every flow crosses the T1 tier. Needs at least 2 T0s.

    ``one_way``: only the hosts under even T0s write, each to its counterpart under the next
    T0 (T0 0 -> T0 1, T0 2 -> T0 3, ...): no host both sends and receives, and every flow
    still crosses the T1 tier in the same direction, so the uplinks of the sending T0s and
    the downlinks of the receiving ones see every collision a hash makes."""
    if shape.t0 < 2:
        raise ValueError("a permutation across T0s needs at least 2 T0s")
    n = shape.host_count
    if one_way:
        return [
            (h, h + shape.hosts_per_t0)
            for h in range(n)
            if shape.host_t0(h) % 2 == 0 and shape.host_t0(h) + 1 < shape.t0
        ]
    return [(h, (h + shape.hosts_per_t0) % n) for h in range(n)]


def permutation_capacity_bps(shape: Shape, pairs: Sequence[tuple[int, int]]) -> float:
    """What a non-blocking share of the fabric can carry for all ``pairs`` at once: each flow's
    NIC rate, reduced per plane where a T0's uplinks (t1 x rate) carry less than the flows
    leaving it (or its downlinks receive) ask for."""
    per_flow = shape.rate_bps
    total = 0.0
    out_load: dict[int, int] = {}
    in_load: dict[int, int] = {}
    for s, d in pairs:
        if shape.host_t0(s) != shape.host_t0(d):
            out_load[shape.host_t0(s)] = out_load.get(shape.host_t0(s), 0) + 1
            in_load[shape.host_t0(d)] = in_load.get(shape.host_t0(d), 0) + 1
    up = shape.t1 * shape.rate_bps
    for s, d in pairs:
        ta, tb = shape.host_t0(s), shape.host_t0(d)
        if ta == tb:
            total += shape.planes * per_flow
            continue
        share = min(per_flow, up / out_load[ta], up / in_load[tb])
        total += shape.planes * share
    return total


# --- fault schedule -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A fault as it happened: ``start_s`` when it was applied and ``end_s`` when it was undone
    (None: lasted to the end), both on the timeline's clock (seconds from the write's start)."""

    label: str
    start_s: float
    end_s: float | None = None
    outage: Outage | None = None
    heal_label: str = ""

    def active(self, t: float) -> bool:
        return self.start_s <= t and (self.end_s is None or t < self.end_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "start_s": round(self.start_s, 4),
            "end_s": None if self.end_s is None else round(self.end_s, 4),
            "heal_label": self.heal_label,
        }


def capacity_fn(
    shape: Shape, src: int, dst: int, faults: Sequence[FaultWindow], full_bps: float | None = None
) -> Callable[[float], float]:
    """Capacity at time t, scaled so that the undisturbed fabric gives ``full_bps`` (default:
    the arithmetic figure)."""
    base = flow_capacity_bps(shape, src, dst)
    scale = 1.0 if full_bps is None or base == 0 else full_bps / base

    def at(t: float) -> float:
        active = [f.outage for f in faults if f.outage is not None and f.active(t)]
        return flow_capacity_bps(shape, src, dst, active) * scale

    return at


def scaled_capacity(
    shape: Shape, src: int, dst: int, faults: Sequence[FaultWindow], bench_capacity_bps: float
) -> Callable[[float], float]:
    """:func:`capacity_fn` anchored on mrc-bench's ``capacity_bps``."""
    return capacity_fn(shape, src, dst, faults, bench_capacity_bps)
