"""Faults on a whole simulated Clos, in virtual time: ``mrc-sim --workload permutation
--fault SPEC`` plays :class:`mrcnic.faultplan.Step` s, the lab's schedule, on a
:class:`mrcnic.sim.clos.ClosFabric`.

What each step does to the fabric (names as the lab's: ``h<n>``, ``p<plane>-t0-<i>``,
``p<plane>-t1-<j>``):

- ``link`` T0-T1: both directions down; what the link held (queued, or on the wire) is lost
  (:meth:`mrcnic.sim.fabric.EventLoop.cut`); up again at ``undo_s``.  A host-T0 link is the
  host's NIC port on that plane (below).
- ``reboot`` of a T1: every link of it down for ``down_ms``; of a T0: its uplinks, the T1s'
  downlinks to it and its last hops into its hosts.  The hosts' NIC ports stay up (as when
  the lab kills a python switch: the host sees no carrier change), so the NICs learn of it
  from their packets alone.
- ``port``: the host's NIC port (its queue is flushed) and the last hop into it; the host's
  QPs are told at once (``port_status``), as the I/O shell tells them.
- ``loss``: that random loss on a T0-T1 link, both directions, until ``undo_s`` (two on
  one link: the worse counts).

Faults may overlap: a link that two faults took down comes up when both are undone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from mrcnic.faultplan import HOST_NAME, SWITCH_NAME, Step
from mrcnic.sim.fabric import HostPort, Link
from mrcnic.wire.usid import ClosShape


class ClosFabric(Protocol):
    """What faults need of :class:`mrcnic.sim.clos.ClosFabric` (which imports this module)."""

    shape: ClosShape
    now: float
    nic: list[list[HostPort]]  # [host][plane]
    up: list[list[list[Link]]]  # [plane][t0][t1]
    down: list[list[list[Link]]]  # [plane][t1][t0]
    last: list[list[Link]]  # [plane][host]

    def at(self, t: float, fn: Callable[[], None]) -> None: ...

    def cut(self, links: Sequence[Link]) -> int: ...


# on_port(host, plane, up, t): tell a host's QPs that its port went down or came back
OnPort = Callable[[int, int, bool, float], None]


@dataclass(frozen=True, slots=True)
class Node:
    kind: str  # "host", "t0", "t1"
    plane: int  # -1 for a host
    index: int


def node(shape: ClosShape, name: str) -> Node:
    """``h3`` / ``p1-t0-0`` / ``p1-t1-2`` in this fabric; ValueError naming what is out of range."""
    if m := HOST_NAME.fullmatch(name):
        h, hosts = int(m[1]), shape.t0 * shape.hosts_per_t0
        if h >= hosts:
            raise ValueError(f"{name}: no such host (h0..h{hosts - 1})")
        return Node("host", -1, h)
    if m := SWITCH_NAME.fullmatch(name):
        plane, tier, i = int(m[1]), f"t{m[2]}", int(m[3])
        count = shape.t0 if tier == "t0" else shape.t1
        if plane >= shape.planes:
            raise ValueError(f"{name}: no plane {plane} (planes 0..{shape.planes - 1})")
        if i >= count:
            raise ValueError(f"{name}: no such switch (p{plane}-{tier}-0..{count - 1})")
        return Node(tier, plane, i)
    raise ValueError(f"{name}: not a node name (h<n>, p<plane>-t0-<i>, p<plane>-t1-<j>)")


@dataclass(frozen=True, slots=True)
class Effect:
    """What a step acts on: links it takes down (a port's: the last hop into it), or makes
    lossy; NIC ports (host, plane)."""

    down: tuple[Link, ...] = ()
    lossy: tuple[Link, ...] = ()
    ports: tuple[tuple[int, int], ...] = ()


def _t0_t1(shape: ClosShape, step: Step) -> tuple[Node, Node] | tuple[Node, int] | None:
    """The T0-T1 link (t0, t1) or the host port (host, plane) that ``step.a``-``step.b``
    names; None if they are not linked."""
    x, y = sorted((node(shape, step.a), node(shape, step.b)), key=lambda n: n.kind)
    if x.kind == "t0" and y.kind == "t1" and x.plane == y.plane:
        return x, y
    if x.kind == "host" and y.kind == "t0" and x.index // shape.hosts_per_t0 == y.index:
        return x, y.plane
    return None


def effect(fabric: ClosFabric, step: Step) -> Effect:
    """What ``step`` does to ``fabric`` (module doc); ValueError if it names no part of it."""
    shape = fabric.shape
    try:
        if step.kind == "port":
            n = node(shape, step.a)
            if n.kind != "host":
                raise ValueError(f"{step.a}: a port fault names a host")
            if not 0 <= step.plane < shape.planes:
                raise ValueError(f"no plane {step.plane} (planes 0..{shape.planes - 1})")
            return Effect(down=(fabric.last[step.plane][n.index],),
                          ports=((n.index, step.plane),))  # fmt: skip
        if step.kind == "reboot":
            n = node(shape, step.a)
            p = n.plane
            if n.kind == "t1":
                links = [fabric.up[p][i][n.index] for i in range(shape.t0)]
                links += [fabric.down[p][n.index][i] for i in range(shape.t0)]
                return Effect(down=tuple(links))
            if n.kind == "t0":
                hpt = shape.hosts_per_t0
                links = list(fabric.up[p][n.index])
                links += [fabric.down[p][j][n.index] for j in range(shape.t1)]
                links += [fabric.last[p][h] for h in range(n.index * hpt, (n.index + 1) * hpt)]
                return Effect(down=tuple(links))
            raise ValueError(f"{step.a}: a reboot names a switch")
        pair = _t0_t1(shape, step)
        if pair is None:
            raise ValueError(
                "no such link (links join p<P>-t0-<i> and p<P>-t1-<j>, or a host and its T0)"
            )
        a, b = pair
        if isinstance(b, int):  # a host's link to its T0: its NIC port on that plane
            if step.kind == "loss":
                raise ValueError("loss on a host's link is not simulated (a NIC port does not "
                                 "lose); put it on a T0-T1 link")  # fmt: skip
            return Effect(down=(fabric.last[b][a.index],), ports=((a.index, b),))
        p, i, j = a.plane, a.index, b.index
        both = (fabric.up[p][i][j], fabric.down[p][j][i])
        return Effect(lossy=both) if step.kind == "loss" else Effect(down=both)
    except ValueError as e:
        raise ValueError(f"fault {step.text}: {e}") from None


class ClosFaults:
    """Plays ``steps`` on ``fabric`` at their virtual times (module doc); ``on_port`` tells a
    host's QPs about its port."""

    def __init__(self, fabric: ClosFabric, steps: Sequence[Step], on_port: OnPort) -> None:
        self.fabric = fabric
        self.steps = sorted(steps, key=lambda s: s.at_s)
        self.on_port = on_port
        self.lost_in_flight = 0  # frames a cut link held
        self.log: list[dict[str, object]] = []  # the faults applied, as they happened
        self._held: dict[Link, int] = {}  # how many faults hold a link down
        self._ports_held: dict[tuple[int, int], int] = {}
        self._losses: dict[Link, list[float]] = {}  # the loss faults on a link, in percent
        for n, s in enumerate(self.steps):
            e = effect(fabric, s)
            fabric.at(s.at_s, partial(self._apply, n, e, True))
            if s.end_s is not None:
                fabric.at(s.end_s, partial(self._apply, n, e, False))

    def _apply(self, n: int, e: Effect, fault: bool) -> None:
        fab = self.fabric
        now = fab.now
        step = self.steps[n]
        if fault:
            self.log.append({"n": n, "fault": step.text, "label": step.label,
                             "start_s": now, "end_s": None})  # fmt: skip
        else:
            next(r for r in self.log if r["n"] == n)["end_s"] = now
        held = self._held
        if fault:
            self.lost_in_flight += fab.cut([x for x in e.down if _count(held, x, 1) == 1])
        else:
            for link in e.down:
                if _count(held, link, -1) == 0:
                    link.up = True
        for link in e.lossy:
            active = self._losses.setdefault(link, [])
            if fault:
                active.append(step.percent)
            else:
                active.remove(step.percent)
            link.loss = max(active) / 100.0 if active else link.spec.loss
        for host, plane in e.ports:
            if _count(self._ports_held, (host, plane), 1 if fault else -1) == (1 if fault else 0):
                fab.nic[host][plane].set_up(not fault)  # down: its queue is flushed
                self.on_port(host, plane, not fault, now)

    def to_json(self) -> dict[str, object]:
        """``faults`` (the schedule's text forms, as ``--fault`` takes them),
        ``fault_schedule`` (each step as the lab's JSON writes it), ``fault_log`` (those
        applied: ``fault``, ``label``, ``start_s``, ``end_s``, null if not undone when the run
        ended), ``lost_in_flight``."""
        return {
            "faults": [s.text for s in self.steps],
            "fault_schedule": [s.to_dict() for s in self.steps],
            "fault_log": [{k: v for k, v in r.items() if k != "n"} for r in self.log],
            "lost_in_flight": self.lost_in_flight,
        }


def _count(held: dict, key: object, d: int) -> int:
    """Add ``d`` to the faults holding ``key``; returns how many hold it now."""
    n = held.get(key, 0) + d
    held[key] = n
    return n
