"""Path policies: which of a QP's EVs are sprayed over, and how often each.

A policy sees the QP's EV table (:class:`EvView`: the pool, each slot's state, plane and fabric
path) and returns the *groups* to deal from, one list of slots per plane; the planes take
turns (:func:`turns`), equally (``plane_share="equal"``: every NIC port carries the same
share) or as often as each has entries (``"capacity"``: shares follow each plane's surviving
paths). A slot listed twice is dealt twice per round: repeats are weights. Both engines draw from these groups (the Python twin in
``EvTable.pick``, the C send engine from the copy ``tx_engine.push_groups`` hands it), so a
policy written here in Python steers the C data path too. The table asks again after every
EV state change and whenever :meth:`PathPolicy.on_input` says so.

Built-ins, by name (``--path-policy``): ``mrc`` (MRC's EV state machine with path-aware
active sets, the default), ``oblivious`` (every EV of every live plane, whatever its state),
``reps`` (recycled entropies: UEC's REPS at the granularity our engines allow), ``ecmp``
(per-flow hashing: one path per plane, as a switch's ECMP hash would pick it). Register more
with :func:`register_path_policy`; docs/extending.md has a worked example.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mrcnic.transport.ev_machine import EvInput, EvState

PLANE_SHARES = ("equal", "capacity")

GOOD, SKIP = EvState.GOOD, EvState.SKIP


class EvView(Protocol):
    """What a policy may read of a QP's EV table (:class:`mrcnic.transport.ev.EvTable`)."""

    planes: int
    active_per_plane: int  # EVs sprayed per plane, as configured
    pool: list[list[int]]  # per plane: its slots, in pool order
    plane_paths: list[dict[int, list[int]]]  # per plane: fabric path -> its slots, pool order
    state: list[EvState]  # per slot
    plane_of: list[int]  # per slot
    path_of: list[int]  # per slot: plane * t1 + t1 index
    plane_down: list[bool]  # per plane: the local port, or the peer's, is down
    tiebreak: list[int]  # per path: this QP's order among equally loaded paths
    config: Any  # EvConfig: plane_share, ev_min_active, ...


class PathPolicy(Protocol):
    """Chooses the sprayed slots. ``groups`` must be cheap enough to run at every state
    change (a few per round trip under congestion); it must not draw from the table's RNG
    (the C engine owns that stream while it runs)."""

    name: str

    def groups(self, t: EvView) -> list[list[int]]: ...

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        """An input reached ``slot`` (before its transition); True asks for new groups even
        when the EV's state did not change."""
        ...


PathPolicyFactory = Callable[[int], PathPolicy]  # seed -> policy
_REGISTRY: dict[str, PathPolicyFactory] = {}


def register_path_policy(name: str, factory: PathPolicyFactory) -> None:
    """Make ``factory(seed)`` available as ``EvConfig.path_policy=name`` and
    ``--path-policy name``. A name registered twice keeps the newer factory."""
    if not name or not isinstance(name, str):
        raise ValueError(f"a path policy needs a non-empty name, not {name!r}")
    _REGISTRY[name] = factory


def path_policies() -> list[str]:
    return sorted(_REGISTRY)


def check_path_policy(name: str) -> None:
    """ValueError, naming the known ones, unless ``name`` is registered."""
    if name not in _REGISTRY:
        raise ValueError(
            f"no path policy named {name!r}; known: {', '.join(path_policies())} "
            "(load more with --plugin FILE.py)"
        )


def make_path_policy(name: str, seed: int = 0) -> PathPolicy:
    check_path_policy(name)
    return _REGISTRY[name](seed)


def arrange(t: EvView, per_plane: Sequence[list[int]]) -> list[list[int]]:
    """Per-plane entries as the groups to deal from: one per plane that has entries. How
    often each takes its turn is :func:`turns`' business (``plane_share``)."""
    return [entries for entries in per_plane if entries]


#: the longest rotation of group turns (the C send engine's room)
MAX_TURNS = 256


def turns(groups: Sequence[Sequence[int]], capacity: bool) -> list[int]:
    """The order the groups (planes) take turns in, one packet per turn. ``equal``: round
    robin. ``capacity``: each plane as often as it has entries (a plane's live paths), spread
    smoothly (the smooth weighted round robin of nginx: no plane gets a run of turns, so no
    NIC port gets a burst), at most MAX_TURNS long (weights scaled down when longer)."""
    n = len(groups)
    if not capacity or n < 2:
        return list(range(n))
    weights = [len(g) for g in groups]
    total = sum(weights)
    if total > MAX_TURNS:
        weights = [max(1, w * MAX_TURNS // total) for w in weights]
    g = 0
    for w in weights:
        g = math.gcd(g, w)
    weights = [w // g for w in weights]
    total = sum(weights)
    current = [0] * n
    out: list[int] = []
    for _ in range(total):
        for k in range(n):
            current[k] += weights[k]
        best = max(range(n), key=current.__getitem__)
        current[best] -= total
        out.append(best)
    return out


def spread(t: EvView, plane: int, capacity: bool) -> list[int]:
    """MRC's active set for one plane, path-aware: the plane's entries are spread equally over
    its live paths (a path is live while it has a GOOD or SKIP EV), each path taking its GOOD
    EVs in pool order and dealing them more than once when it has fewer than its share (a
    retired EV's share stays on its path while the path lives: the path-strike rule retires
    a dead path's EVs together, and moving the share of one EV lost to random loss overloads
    paths that are already full). Each SKIP EV of a live path (an ECN echo or a trim: its
    queue is long) takes one entry from it, and that entry goes to the least loaded path with
    no SKIP (this QP's tie order): a congested path sheds load at its first mark.

    ``equal``: the plane's entries are ``active_per_plane`` rounded up to a multiple of its
    live paths. ``capacity``: every live path of the QP carries the same entries, so a plane's
    share is its live paths. With fewer wanted EVs than live paths, one entry each on the
    first live paths in pool order (an explicit EV array's order is the controller's)."""
    state = t.state
    paths = t.plane_paths[plane]
    want = t.active_per_plane
    good: dict[int, list[int]] = {}
    penalty: dict[int, int] = {}
    live: list[int] = []
    for path, slots in paths.items():
        g = [s for s in slots if state[s] is GOOD]
        skipped = sum(1 for s in slots if state[s] is SKIP)
        if g or skipped:
            live.append(path)
            good[path] = g
            penalty[path] = skipped
    if not any(good.values()):
        return _skip_fallback(t, plane, want)
    per_path = math.ceil(want / (len(paths) if capacity else len(live)))
    order = sorted(live, key=t.tiebreak.__getitem__)
    if want < len(live):  # fewer EVs than paths: one each on the first paths in pool order
        first = live[:want]  # (dicts keep insertion order: the pool's)
        entries = dict.fromkeys(live, 0)
        for path in first:
            entries[path] = 1 if good[path] else 0
        freed = sum(1 for p in first if not good[p])
    else:
        entries = {p: max(0, per_path - penalty[p]) if good[p] else 0 for p in live}
        freed = per_path * len(live) - sum(entries.values())
    takers = [p for p in order if good[p] and not penalty[p]]
    while freed > 0 and takers:
        best = min(takers, key=entries.__getitem__)  # min keeps the first: tie order
        entries[best] += 1
        freed -= 1
    out: list[int] = []
    for path in order:
        g = good[path]
        out.extend(g[j % len(g)] for j in range(entries[path]))
    return out


def _skip_fallback(t: EvView, plane: int, want: int) -> list[int]:
    """A plane with no GOOD EV keeps its share on its SKIP EVs (congested, alive): uneven
    planes look like incast to the receivers."""
    return [s for s in t.pool[plane] if t.state[s] is SKIP][:want]


class MrcPaths:
    """MRC's EV state machine decides; the active set follows the fabric (:func:`spread`).
    A plane whose EVs are all ASSUMED_BAD or DENIED is out, as a failed port is; below
    ``ev_min_active`` EVs, SKIP and then ASSUMED_BAD EVs of live planes are added, so a QP
    keeps trying (and its retry limit can end a dead connection) rather than stall."""

    name = "mrc"

    def __init__(self, seed: int = 0) -> None:
        pass

    def groups(self, t: EvView) -> list[list[int]]:
        capacity = t.config.plane_share == "capacity"
        per_plane = [[] if t.plane_down[p] else spread(t, p, capacity) for p in range(t.planes)]
        floor = t.config.ev_min_active
        if len({s for e in per_plane for s in e}) < floor:
            have = {s for e in per_plane for s in e}
            for fallback in (SKIP, EvState.ASSUMED_BAD):
                for s, st in enumerate(t.state):
                    plane = t.plane_of[s]
                    if st is fallback and s not in have and not t.plane_down[plane]:
                        per_plane[plane].append(s)
                        have.add(s)
                if len(have) >= floor:
                    break
        return arrange(t, per_plane)

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        return False


class ObliviousPaths:
    """Oblivious spraying: every EV of every plane whose port is up, once per round, whatever
    the EV state machine says (losses are repaired by retransmission only). The baseline
    that shows what the state machine buys."""

    name = "oblivious"

    def __init__(self, seed: int = 0) -> None:
        pass

    def groups(self, t: EvView) -> list[list[int]]:
        return arrange(t, [[] if t.plane_down[p] else list(t.pool[p]) for p in range(t.planes)])

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        return False


#: inputs that say a packet on the EV met congestion (REPS does not recycle the EV)
_CONGESTED = frozenset({EvInput.ECN_ECHO, EvInput.TRIMMED})
#: inputs that say a packet on the EV was lost (REPS stops using it, without exploring)
_LOST = frozenset({EvInput.LOST, EvInput.TIMEOUT, EvInput.ALWAYS_SKIP, EvInput.PORT_DOWN})


class RepsPaths:
    """REPS (recycled entropies, UEC): keep sending on the entropies that came back clean,
    and trade one that met congestion for a fresh random one. Per packet, REPS recycles the
    EV of each unmarked acknowledgment; our engines deal from a set Python decides, so here
    each plane holds ``active_per_plane`` recycled EVs: an ECN echo or a trim on one swaps it
    for a random EV of the same plane (exploration, blind to paths), a loss drops it without
    a replacement (REPS's freezing: no exploration into a failure) until the plane is down to
    half its EVs, and then the set is refilled at random from EVs not known bad."""

    name = "reps"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed ^ 0x5E9)
        self._sets: list[list[int]] | None = None

    def _init(self, t: EvView) -> list[list[int]]:
        if self._sets is None:
            self._sets = [list(t.pool[p][: t.active_per_plane]) for p in range(t.planes)]
        return self._sets

    def groups(self, t: EvView) -> list[list[int]]:
        sets = self._init(t)
        return arrange(t, [[] if t.plane_down[p] else list(sets[p]) for p in range(t.planes)])

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        sets = self._init(t)
        plane = t.plane_of[slot]
        mine = sets[plane]
        if slot not in mine or not (inp in _CONGESTED or inp in _LOST):
            return False
        mine.remove(slot)
        usable = [
            s for s in t.pool[plane] if s not in mine and s != slot and t.state[s] in (GOOD, SKIP)
        ]
        if inp in _CONGESTED and usable:
            mine.append(self._rng.choice(usable))
        elif inp in _LOST and len(mine) * 2 < t.active_per_plane:
            self._rng.shuffle(usable)
            mine.extend(usable[: t.active_per_plane - len(mine)])
        if not mine:  # never leave a plane with nothing: the table's state machine probes it
            mine.append(slot)
        return True


class EcmpPaths:
    """Per-flow ECMP, with MRC's transport: each plane sends on one path, the one this QP's
    hash picks (the table's per-QP ``tiebreak`` order, seeded per QP as a flow hash is), every
    EV of that path dealt whatever its state, as a switch's hash ignores congestion. Only a
    path with no usable EV left (all ASSUMED_BAD or DENIED: down, as routing would withdraw
    it) is rehashed to the next one. The baseline that isolates what spraying buys (the
    experiment ``spray --sim``)."""

    name = "ecmp"

    def __init__(self, seed: int = 0) -> None:
        pass

    def groups(self, t: EvView) -> list[list[int]]:
        per_plane: list[list[int]] = []
        for plane, paths in enumerate(t.plane_paths):
            pick: list[int] = []
            if not t.plane_down[plane]:
                for path in sorted(paths, key=t.tiebreak.__getitem__):
                    pick = [s for s in paths[path] if t.state[s] in (GOOD, SKIP)]
                    if pick:
                        pick = list(paths[path])  # the hash does not look at EV states
                        break
            per_plane.append(pick)
        return arrange(t, per_plane)

    def on_input(self, t: EvView, slot: int, inp: EvInput) -> bool:
        return False


register_path_policy("mrc", MrcPaths)
register_path_policy("oblivious", ObliviousPaths)
register_path_policy("reps", RepsPaths)
register_path_policy("ecmp", EcmpPaths)
