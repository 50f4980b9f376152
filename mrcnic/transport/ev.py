"""Entropy values (EVs): the per-QP path set and what drives it.

Each EV names one end-to-end path (docs/design/architecture.md: ``plane = ev % planes``,
``t1 = (ev // planes) % t1``).  A QP owns a pool of EVs per plane; its path policy
(:mod:`mrcnic.transport.path_policy`, MRC's by default) says which are sprayed over and how
often, and the rest are the plane's backups.  The EV state machine (states, inputs, the
transition table) is :mod:`mrcnic.transport.ev_machine`; its names are re-exported here.
``python -m mrcnic.transport.ev`` prints the table as a Mermaid diagram.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from mrcnic.transport.ev_machine import (
    _LOSS_INPUTS,
    TRANSITIONS,
    EvInput,
    EvState,
    EvStateChanged,
    EvTransitionError,
    mermaid,
    next_state,
)
from mrcnic.transport.path_policy import (
    PLANE_SHARES,
    PathPolicy,
    check_path_policy,
    make_path_policy,
    turns,
)

__all__ = [
    "TRANSITIONS",
    "EvConfig",
    "EvInput",
    "EvState",
    "EvStateChanged",
    "EvStats",
    "EvTable",
    "EvTransitionError",
    "mermaid",
    "next_state",
]

#: unanswered probes double the probe interval, up to 2**PROBE_BACKOFF_MAX times
PROBE_BACKOFF_MAX = 3
#: an EV that fails again soon after probes restored it needs twice the answered probes next
#: time, up to 2**FLAP_DOUBLINGS_MAX times probe_successes (EvConfig.flap_memory_s)
FLAP_DOUBLINGS_MAX = 5
#: ... but only while at most this share of the QP's paths relapse: loss everywhere (random
#: loss on every link) is no path's fault, and holding every EV out leaves nothing to send on
FLAP_PATH_SHARE_MAX = 0.25
SPRAY_MODES = ("bag", "random")
#: sprayed groups at most (the C send engine's room: one per plane, 16 planes)
MAX_GROUPS = 16


@dataclass(frozen=True, slots=True)
class EvConfig:
    """How many EVs a QP uses.  ``ev_count`` is split equally across the planes."""

    ev_count: int = 128
    backup_per_plane: int = 8
    reverse_per_plane: int = 2
    probe_successes: int = 2  # consecutive answered probes that restore an ASSUMED_BAD EV
    # flap damping: an EV condemned again (LOST, TIMEOUT, ALWAYS_SKIP) within this long of
    # its probes restoring it needs twice the answered probes to come back, doubling per
    # relapse up to 2**FLAP_DOUBLINGS_MAX x probe_successes; one that stays up this long
    # starts over at probe_successes. 0: no damping (every restore needs probe_successes).
    flap_memory_s: float = 1.0
    # the floor of EVs sprayed over (libmrc's ev_min_active): below it, SKIP and then
    # ASSUMED_BAD EVs of live planes are sent on too, so a QP never stalls with paths left
    ev_min_active: int = 1
    # "bag": each plane's active EVs are dealt in a fresh random order, each once per round
    # (sampling without replacement); "random": an independent random EV per packet
    spray: str = "bag"
    # an explicit EV array (mrcnic.profiles.EvProfile): when given, these values are the pool
    # instead of generated ones (EvTable._use_values), and ev_count is not used to size it
    values: tuple[int, ...] = ()
    # which EVs are sprayed and how often (mrcnic.transport.path_policy): "mrc" (the EV state
    # machine, path-aware), "oblivious", "reps", or a registered one
    path_policy: str = "mrc"
    # "equal": every plane (NIC port) carries the same share, MRC's published rule; "capacity":
    # shares follow each plane's surviving paths
    plane_share: str = "equal"


@dataclass(slots=True)
class EvStats:
    ev: int
    plane: int
    state: EvState
    tx_packets: int
    acked_packets: int
    timeouts: int
    trims: int
    ecn_echoes: int
    probes_sent: int
    probes_answered: int


class EvTable:
    """The EV pool of one QP: states, spraying choice, backups, SKIP rotation, probing.

    Slots index the pool (``0 .. pool_size-1``); the hot path (:meth:`pick`) works on slots.
    """

    def __init__(
        self,
        planes: int,
        t1_count: int,
        config: EvConfig,
        seed: int,
        policy: PathPolicy | None = None,
    ) -> None:
        if planes < 1 or t1_count < 1:
            raise ValueError("planes and t1_count must be >= 1")
        if config.ev_count < planes:
            raise ValueError(f"ev_count {config.ev_count} < planes {planes}: need one per plane")
        if config.reverse_per_plane < 1:
            raise ValueError("reverse_per_plane must be >= 1 (one reverse EV per plane at least)")
        if not 0 <= config.ev_min_active <= config.ev_count:
            raise ValueError(
                f"ev_min_active must be in 0..ev_count ({config.ev_count}), "
                f"not {config.ev_min_active}"
            )
        if config.flap_memory_s < 0:
            raise ValueError(f"flap_memory_s must be >= 0, not {config.flap_memory_s}")
        if config.spray not in SPRAY_MODES:
            raise ValueError(f"spray must be one of {', '.join(SPRAY_MODES)}, not {config.spray!r}")
        if config.plane_share not in PLANE_SHARES:
            raise ValueError(
                f"plane_share must be one of {', '.join(PLANE_SHARES)}, not {config.plane_share!r}"
            )
        if policy is None:
            check_path_policy(config.path_policy)
        self.planes = planes
        self.t1_count = t1_count
        self.config = config
        self._bag_mode = config.spray == "bag"
        self.active_per_plane = config.ev_count // planes
        per_plane = self.active_per_plane + config.backup_per_plane
        self._rng = random.Random(seed)
        self._random = self._rng.random
        self._getrandbits = self._rng.getrandbits
        # EV = (base + k) * planes + plane: plane from ev % planes, and consecutive k walk over
        # every T1 (t1 = (base + k) % t1_count), so each plane's EVs cover its paths evenly.
        # A random base per QP keeps QPs from sharing EVs (and fills the UDP source port).
        span = per_plane + config.reverse_per_plane
        base = self._rng.randrange(0, ((1 << 32) // planes) - span - 1)
        base -= base % t1_count
        self.ev_values: list[int] = []
        self.plane_of: list[int] = []
        self.pool: list[list[int]] = [[] for _ in range(planes)]
        for plane in range(planes):
            for k in range(per_plane):
                slot = len(self.ev_values)
                self.ev_values.append((base + k) * planes + plane)
                self.plane_of.append(plane)
                self.pool[plane].append(slot)
        self.reverse: list[int] = []  # reverse EV values, interleaved over planes
        for k in range(config.reverse_per_plane):
            for plane in range(planes):
                self.reverse.append((base + per_plane + k) * planes + plane)
        if config.values:
            self._use_values(config.values)
        self.slot_of = {ev: s for s, ev in enumerate(self.ev_values)}
        n = len(self.ev_values)
        # the fabric path of each slot (plane, T1): EVs that share it share its fate
        self.path_of = [
            self.plane_of[s] * t1_count + (ev // planes) % t1_count
            for s, ev in enumerate(self.ev_values)
        ]
        npaths = planes * t1_count
        self.path_evidence_s = [-1.0] * npaths  # send time of the newest packet delivered
        self.path_ack_s = [-1.0] * npaths  # arrival time of the last acknowledgment
        # the slots of each path, and its last strike: when a loss retired one of its EVs,
        # and which (two strikes from different EVs with no acknowledgment between: the path)
        self.path_slots: list[list[int]] = [[] for _ in range(npaths)]
        for s, path in enumerate(self.path_of):
            self.path_slots[path].append(s)
        # per plane, its paths' slots in pool order (what path policies spread over), and
        # this QP's order among equally loaded paths (its own, so QPs do not all pick the
        # same path for the share a congested or failed one sheds)
        self.plane_paths: list[dict[int, list[int]]] = [{} for _ in range(planes)]
        for plane in range(planes):
            for s in self.pool[plane]:
                self.plane_paths[plane].setdefault(self.path_of[s], []).append(s)
        self.tiebreak = list(range(npaths))
        random.Random(seed ^ 0x7AB1E).shuffle(self.tiebreak)
        self.policy: PathPolicy = policy or make_path_policy(config.path_policy, seed)
        self.path_strike_s = [-1.0] * npaths
        # a path acknowledged within this long is queued, not dead (half the RTO: the QP
        # keeps it current, as on_timeout's quiet_s)
        self.path_quiet_s = 0.0
        self.path_strike_slot = [-1] * npaths
        self.paths_retired = 0  # times a whole path's EVs were retired together
        self.state: list[EvState] = [EvState.GOOD] * n
        self.evidence_s: list[float] = [-1.0] * n  # send time of the newest packet known delivered
        self.tx_packets = [0] * n
        self.acked_packets = [0] * n
        self.timeouts = [0] * n
        self.trims = [0] * n
        self.ecn_echoes = [0] * n
        self.probes_sent = [0] * n
        self.probes_answered = [0] * n
        self.probe_ok = [0] * n  # consecutive answered probes
        self.probe_misses = [0] * n  # consecutive unanswered probes (interval backoff)
        self.restored_s = [-1.0] * n  # when probes last restored the EV
        self.flaps = [0] * n  # relapses in a row soon after a restore (flap damping)
        self.flaps_damped = 0  # relapses that raised an EV's bar for coming back
        self.path_relapse_s = [-math.inf] * npaths  # the last relapse of an EV of the path
        self.probe_due: dict[int, float] = {}  # ASSUMED_BAD slot -> next probe time
        self.probe_pending: dict[int, int] = {}  # slot -> tx_ts_ns of the outstanding probe
        self.plane_down = [False] * planes  # local port down or peer reported its port down
        self.skip_until = [0] * n
        self.tx_count = 0
        self.now_s = 0.0  # updated by the owner before feeding inputs (event timestamps)
        self._skip_release: deque[tuple[int, int]] = deque()  # (tx_count to release at, slot)
        self._reverse_next = 0
        self._reverse_k = [0] * planes
        self.reverse_bad: set[int] = set()  # reverse EVs whose EV probes went unanswered
        self.events: deque[EvStateChanged] = deque()
        self.active: list[int] = []
        #: the C send engine dealing the EVs (mrcnic.transport.tx_engine), or None: it owns
        #: the bags, the round robin and tx_count while set
        self.picker: Any = None
        self._groups: list[list[int]] = []
        self._sched: list[int] = []  # the groups' turns (path_policy.turns); _rr walks it
        self._bags: list[list[int]] = []  # per group: slots still to deal this round
        self._rr = 0
        self._rebuild()

    def _use_values(self, values: tuple[int, ...]) -> None:
        """Make an explicit EV array the pool: each EV in its plane (``ev % planes``) in the
        order given; every plane sprays over as many EVs as the plane with the fewest has,
        less ``backup_per_plane`` (at least one), and keeps the rest as backups; each plane's
        first ``reverse_per_plane`` EVs also carry the QP's control traffic."""
        planes = self.planes
        bad = [v for v in values if not (isinstance(v, int) and 0 <= v < 1 << 32)]
        if bad:
            raise ValueError(f"explicit EVs must be 32-bit unsigned values, not {bad[:4]}")
        if len(set(values)) != len(values):
            raise ValueError("explicit EVs must be distinct (per-EV state is kept by value)")
        by_plane = [[v for v in values if v % planes == p] for p in range(planes)]
        empty = [p for p, vs in enumerate(by_plane) if not vs]
        if empty:
            raise ValueError(
                f"explicit EVs leave plane(s) {empty} without an EV (an EV's plane is "
                f"ev % {planes}): every plane needs one"
            )
        self.ev_values, self.plane_of = [], []
        self.pool = [[] for _ in range(planes)]
        for plane, vs in enumerate(by_plane):
            for v in vs:
                self.pool[plane].append(len(self.ev_values))
                self.ev_values.append(v)
                self.plane_of.append(plane)
        self.active_per_plane = max(1, min(map(len, by_plane)) - self.config.backup_per_plane)
        rev = self.config.reverse_per_plane
        self.reverse = [
            by_plane[p][k % len(by_plane[p])] for k in range(rev) for p in range(planes)
        ]

    # -- the hot path ------------------------------------------------------------------------

    def pick(self, avoid: int = -1) -> int:
        """Choose the slot for the next packet.

        Planes take turns (a rotation over the planes that have active EVs), so every NIC port
        carries the same share; within the plane the EV is pseudo-random over its active EVs:
        dealt from a shuffled bag (each active EV once per round, so the paths behind the EVs
        get equal shares over every round, with no random-walk drift), or, with
        ``spray="random"``, drawn independently.  ``avoid`` is the slot that lost the packet
        being retransmitted: the retransmission goes to another plane when there is one, and
        never to that slot when another is usable.  Returns -1 when no EV at all can be sent on.
        """
        self.tx_count += 1
        rel = self._skip_release
        if rel and rel[0][0] <= self.tx_count:
            self._release_skips()
        groups = self._groups
        n = len(groups)
        sched = self._sched
        ns = len(sched)
        if n == 0 or ns == 0:
            return -1
        at = self._rr
        if at >= ns:
            at = 0
        i = sched[at]
        if avoid >= 0 and n > 1 and self.plane_of[groups[i][0]] == self.plane_of[avoid]:
            at = at + 1 if at + 1 < ns else 0  # a retransmission leaves the plane that lost it
            i = sched[at]
        self._rr = at + 1
        group = groups[i]
        if self._bag_mode:
            bag = self._bags[i]
            if not bag:
                bag.extend(group)
                self._shuffle(bag)
            slot = bag.pop()
            if slot == avoid and len(group) > 1:
                if not bag:
                    bag.extend(group)
                    self._shuffle(bag)
                    bag.remove(avoid)
                slot = bag.pop()
                bag.append(avoid)  # the avoided EV keeps its turn for a later packet
            return slot
        slot = group[int(self._random() * len(group))]
        if slot == avoid and len(group) > 1:
            j = group.index(slot)
            slot = group[(j + 1 + int(self._random() * (len(group) - 1))) % len(group)]
        return slot

    def _shuffle(self, x: list[int]) -> None:
        """``self._rng.shuffle(x)``, the same draws and the same result, without a Python
        call per element (random.shuffle calls _randbelow for each): Fisher-Yates with
        rejection sampling on getrandbits, as random.Random does it."""
        getrandbits = self._getrandbits
        for i in range(len(x) - 1, 0, -1):
            n = i + 1
            k = n.bit_length()
            j = getrandbits(k)
            while j >= n:
                j = getrandbits(k)
            x[i], x[j] = x[j], x[i]

    # -- state machine -----------------------------------------------------------------------

    def apply(self, slot: int, inp: EvInput, now_s: float) -> bool:
        """Feed one input to one EV; returns True when the state changed. A loss (LOST,
        TIMEOUT) also strikes the EV's fabric path: see :meth:`_path_strike`."""
        asks = self.policy.on_input(self, slot, inp)
        changed = self._transition(slot, inp, now_s)
        if inp is EvInput.LOST or inp is EvInput.TIMEOUT:
            changed = self._path_strike(slot, inp, now_s) or changed
        if changed or asks:
            self._rebuild()
        return changed

    def _path_strike(self, slot: int, inp: EvInput, now_s: float) -> bool:
        """A loss retired ``slot``. If an earlier loss retired another EV of the same fabric
        path (plane, T1), nothing sent on that path has been acknowledged since, and nothing
        for ``path_quiet_s`` (half the RTO: a path whose queue delays every packet on it
        looks lost to the reordering rule while it drains, but keeps being acknowledged),
        while another path *was* acknowledged since the first strike (silence everywhere is
        the QP's own start or a stall of its process, not this path), the path is dead, not
        the EV: every EV that shares it, backups included, goes ASSUMED_BAD.
        One EV at a time would cost a loss each, and once the window is down to a packet or
        two each of those is a timeout (seconds of near-zero goodput on a fabric that lost one
        T1 per plane). Random loss on a live path rarely strikes twice without an
        acknowledgment on the path in between, and probes restore each EV on their own."""
        path = self.path_of[slot]
        last = self.path_strike_s[path]
        picker = self.picker
        ack = picker.path_ack if picker is not None else self.path_ack_s.__getitem__
        acked = ack(path)
        if (
            last < 0
            or acked >= last
            or now_s - acked < self.path_quiet_s
            or self.path_strike_slot[path] == slot
            or not any(ack(p) >= last for p in range(len(self.path_slots)) if p != path)
        ):
            self.path_strike_s[path] = now_s
            self.path_strike_slot[path] = slot
            return False
        self.path_strike_s[path] = -1.0
        self.path_strike_slot[path] = -1
        changed = False
        state = self.state
        for s in self.path_slots[path]:
            if state[s] is EvState.GOOD or state[s] is EvState.SKIP:
                changed = self._transition(s, inp, now_s) or changed
        if changed:  # (late losses of EVs the path already took out retire nothing)
            self.paths_retired += 1
        return changed

    def _transition(self, slot: int, inp: EvInput, now_s: float) -> bool:
        """One EV's transition and its event, without rebuilding the sprayed set."""
        old = self.state[slot]
        new = next_state(old, inp)
        if new is EvState.SKIP and inp in (EvInput.ECN_ECHO, EvInput.TRIMMED, EvInput.PROBE_OK_ECN):
            until = self.tx_count + max(1, len(self.active))  # (re)start the rotation
            self.skip_until[slot] = until
            self._skip_release.append((until, slot))
        if new is old:
            return False
        self.state[slot] = new
        if new is EvState.ASSUMED_BAD and inp in _LOSS_INPUTS:
            memory = self.config.flap_memory_s
            restored = self.restored_s[slot]
            if restored >= 0 and now_s - restored < memory:
                if self.flaps[slot] < FLAP_DOUBLINGS_MAX:
                    self.flaps[slot] += 1
                self.flaps_damped += 1
                self.path_relapse_s[self.path_of[slot]] = now_s
            else:
                self.flaps[slot] = 0
        if old is EvState.ASSUMED_BAD and (inp is EvInput.PROBE_OK or inp is EvInput.PROBE_OK_ECN):
            self.restored_s[slot] = now_s
        if new is EvState.ASSUMED_BAD:
            self.probe_ok[slot] = 0
            self.probe_misses[slot] = 0
            self.probe_pending.pop(slot, None)
            self.probe_due[slot] = now_s  # first probe at the next timer, then every interval
        elif old is EvState.ASSUMED_BAD:
            self.probe_due.pop(slot, None)
            self.probe_pending.pop(slot, None)
        self.events.append(
            EvStateChanged(self.ev_values[slot], self.plane_of[slot], old, new, inp, now_s)
        )
        return True

    def _release_skips(self) -> None:
        rel = self._skip_release
        while rel and rel[0][0] <= self.tx_count:
            _, slot = rel.popleft()
            if self.state[slot] is EvState.SKIP and self.skip_until[slot] <= self.tx_count:
                self.apply(slot, EvInput.ROTATION, self.now_s)

    def _rebuild(self) -> None:
        """Ask the path policy for the sprayed groups (MRC's by default: per live plane, its
        entries spread over the plane's live paths; see path_policy.spread), keep each
        group's current round minus the EVs that left, and hand them to the C engine when
        one deals. A group holds at most one entry per pool slot (the C engine's room)."""
        picker = self.picker
        if picker is not None:
            picker.pull_bags()
        n = len(self.ev_values)
        groups = [g[:n] for g in self.policy.groups(self) if g][:MAX_GROUPS]
        self.active = list(dict.fromkeys(s for g in groups for s in g))
        old_bags = {self.plane_of[g[0]]: b for g, b in zip(self._groups, self._bags, strict=True)}
        self._groups = groups
        self._sched = turns(groups, self.config.plane_share == "capacity")
        # keep each group's current round, minus the EVs that left it
        self._bags = []
        for g in groups:
            left: dict[int, int] = {}
            for x in g:
                left[x] = left.get(x, 0) + 1
            bag = []
            for x in old_bags.get(self.plane_of[g[0]], ()):
                if left.get(x, 0) > 0:
                    left[x] -= 1
                    bag.append(x)
            self._bags.append(bag)
        if picker is not None:
            picker.push_groups()

    # -- feedback helpers used by the QP ------------------------------------------------------

    def note_delivered(self, slot: int, sent_s: float, now_s: float | None = None) -> None:
        """A packet sent on ``slot`` at ``sent_s`` was acknowledged (or trimmed) at ``now_s``
        (default: :attr:`now_s`): the path is alive."""
        self.acked_packets[slot] += 1
        if sent_s > self.evidence_s[slot]:
            self.evidence_s[slot] = sent_s
        path = self.path_of[slot]
        if sent_s > self.path_evidence_s[path]:
            self.path_evidence_s[path] = sent_s
        self.path_ack_s[path] = self.now_s if now_s is None else now_s

    def on_timeout(self, slot: int, sent_s: float, now_s: float, quiet_s: float = 0.0) -> bool:
        """RTO of a packet sent on ``slot`` at ``sent_s``: ASSUMED_BAD unless its path showed
        life since: a packet sent on the same fabric path (this EV or another EV of the same
        plane and T1) at or after ``sent_s`` was acknowledged or trimmed (the packet met
        random loss on a live path), or (``quiet_s`` > 0) anything on that path was
        acknowledged within the last ``quiet_s`` (the path is still draining a queue: its FIFO
        holds our packet behind the ones being acknowledged).  Returns True if downgraded."""
        self.timeouts[slot] += 1
        path = self.path_of[slot]
        if self.evidence_s[slot] >= sent_s or self.path_evidence_s[path] >= sent_s:
            return False  # random loss on a live path: retransmit only
        if quiet_s > 0 and now_s - self.path_ack_s[path] < quiet_s:
            return False  # healthy but queued: retransmit only
        return self.apply(slot, EvInput.TIMEOUT, now_s)

    def set_plane_down(self, plane: int, down: bool, now_s: float) -> None:
        if self.plane_down[plane] == down:
            return
        self.plane_down[plane] = down
        if down:
            for slot in self.pool[plane]:
                self.apply(slot, EvInput.PORT_DOWN, now_s)
        else:
            for slot in self.pool[plane]:
                if self.state[slot] is EvState.ASSUMED_BAD:
                    self.probe_due[slot] = now_s
        self._rebuild()

    def next_reverse_ev(self) -> int:
        """EV for a control packet (ACK/SACK/NACK): round robin over the reverse set, skipping
        planes that are down, so acknowledgments are sprayed too and one dead path only loses
        the (cumulative, hence redundant) SACKs that happened to take it."""
        rev = self.reverse
        bad = self.reverse_bad
        for skip_bad in (True, False):  # a bad reverse EV only when no other is left
            for _ in range(len(rev)):
                ev = rev[self._reverse_next]
                self._reverse_next = (self._reverse_next + 1) % len(rev)
                if not self.plane_down[ev % self.planes] and not (skip_bad and ev in bad):
                    return ev
        return rev[0]

    def reverse_ev_on(self, plane: int) -> int:
        """EV for a control packet answering something that arrived on ``plane``: the answer
        takes the same plane back (a plane that just delivered is very likely alive both ways),
        alternating over that plane's reverse EVs.  Falls back to the round robin when the
        plane is down."""
        if self.plane_down[plane]:
            return self.next_reverse_ev()
        per = self.config.reverse_per_plane
        bad = self.reverse_bad
        for _ in range(per):
            k = self._reverse_k[plane]
            self._reverse_k[plane] = (k + 1) % per
            ev = self.reverse[k * self.planes + plane]
            if ev not in bad:
                return ev
        return self.next_reverse_ev()  # every reverse EV of the plane failed its probes

    # -- probing ---------------------------------------------------------------------------

    def next_probe_s(self) -> float | None:
        due = self.probe_due
        if not due:
            return None
        if True not in self.plane_down:
            return min(due.values())  # the common case, asked at every turn of the I/O loop
        best = None
        for slot, t in due.items():
            if not self.plane_down[self.plane_of[slot]] and (best is None or t < best):
                best = t
        return best

    def due_probes(self, now_s: float, interval_s: float, ts_ns: int) -> list[int]:
        """Slots to probe now; schedules the next probe of each and counts unanswered ones."""
        out = []
        for slot, t in list(self.probe_due.items()):
            if t <= now_s and not self.plane_down[self.plane_of[slot]]:
                misses = self.probe_misses
                if slot in self.probe_pending:
                    self.probe_ok[slot] = 0  # previous probe unanswered: start counting again
                    misses[slot] = min(misses[slot] + 1, PROBE_BACKOFF_MAX)
                self.probe_pending[slot] = ts_ns
                self.probe_due[slot] = now_s + interval_s * (1 << misses[slot])
                self.probes_sent[slot] += 1
                out.append(slot)
        return out

    def on_probe_answer(self, slot: int, ts_ns: int, ecn: bool, now_s: float) -> None:
        if self.probe_pending.get(slot) != ts_ns:
            return  # stale answer
        del self.probe_pending[slot]
        self.probes_answered[slot] += 1
        self.probe_misses[slot] = 0
        if not self.flaps[slot]:  # next one right away; a damped EV keeps the interval
            self.probe_due[slot] = min(self.probe_due.get(slot, now_s), now_s)
        # A CE mark counts as an answer like any other: one answer could be a flapping
        # link's last gasp whatever its mark; once enough have come, the mark decides SKIP
        self.probe_ok[slot] += 1
        if self.probe_ok[slot] >= self.probe_successes_needed(slot, now_s):
            self.apply(slot, EvInput.PROBE_OK_ECN if ecn else EvInput.PROBE_OK, now_s)

    def probe_successes_needed(self, slot: int, now_s: float) -> int:
        """Answered probes in a row that bring ``slot`` back: ``probe_successes``, doubled for
        each time it failed again within ``flap_memory_s`` of coming back (flap damping),
        while no more than FLAP_PATH_SHARE_MAX of the paths have such relapses and its plane
        has another EV in use (damping never keeps a plane out: a plane's share is fixed, so
        its last path carries the whole share, and its queue can look like loss). A path that
        loses a share of its packets answers a couple of probes often enough to come back
        within milliseconds, and leaves again; it answers 8, 16 or 64 in a row rarely, so it
        stays out while the plane's other EVs carry its share."""
        base = self.config.probe_successes
        flaps = self.flaps[slot]
        if not flaps:
            return base
        state = self.state
        good, skip = EvState.GOOD, EvState.SKIP
        if not any(state[s] is good or state[s] is skip for s in self.pool[self.plane_of[slot]]):
            return base
        memory = self.config.flap_memory_s
        relapsing = sum(1 for t in self.path_relapse_s if now_s - t < memory)
        if relapsing > FLAP_PATH_SHARE_MAX * len(self.path_relapse_s):
            return base
        return base << flaps

    # -- introspection ----------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in EvState}
        for st in self.state:
            out[st.name] += 1
        return out

    def stats(self) -> list[EvStats]:
        if self.picker is not None:
            self.picker.pull_stats()
        return [
            EvStats(
                ev=self.ev_values[s],
                plane=self.plane_of[s],
                state=self.state[s],
                tx_packets=self.tx_packets[s],
                acked_packets=self.acked_packets[s],
                timeouts=self.timeouts[s],
                trims=self.trims[s],
                ecn_echoes=self.ecn_echoes[s],
                probes_sent=self.probes_sent[s],
                probes_answered=self.probes_answered[s],
            )
            for s in range(len(self.ev_values))
        ]


if __name__ == "__main__":  # pragma: no cover
    print(mermaid())
