"""EV profiles: which entropy values a QP sprays over, and EV states as a controller sees them."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from mrcnic.profiles.lifecycle import Lifecycle, ProfileOp, ProfileState, ProfileStateError
from mrcnic.profiles.limits import EV_BITS
from mrcnic.transport.ev import EvState
from mrcnic.transport.qp_types import QpConfig


class EvMode(enum.Enum):
    AUTO = "AUTO"  # the NIC chooses the EVs (ours: a random base per QP, docs/design/transport.md)
    EXPLICIT = "EXPLICIT"  # the controller lists them
    GENERATED = "GENERATED"  # the NIC generates them from a field layout


class EvStatus(enum.Enum):
    """An EV's state as a controller sees it.  The transport's SKIP (congested for one
    rotation, path alive) is internal and shows as GOOD; UNKNOWN is an EV the QP does not
    hold."""

    GOOD = "GOOD"
    ASSUMED_BAD = "ASSUMED_BAD"
    DENIED = "DENIED"
    UNKNOWN = "UNKNOWN"


STATUS_OF = {
    EvState.GOOD: EvStatus.GOOD,
    EvState.SKIP: EvStatus.GOOD,
    EvState.ASSUMED_BAD: EvStatus.ASSUMED_BAD,
    EvState.DENIED: EvStatus.DENIED,
}


def ev_status(state: EvState | None) -> EvStatus:
    """The controller's view of a transport EV state (None: the EV is not held)."""
    return EvStatus.UNKNOWN if state is None else STATUS_OF[state]


#: the states an EV profile reports by default (libmrc reports these two)
DEFAULT_EVENTS = frozenset({EvStatus.GOOD, EvStatus.ASSUMED_BAD})
EVENT_STATES = frozenset({EvStatus.GOOD, EvStatus.ASSUMED_BAD, EvStatus.DENIED})


@dataclass(frozen=True, slots=True)
class EvField:
    """One field of a generated EV, most significant field first.

    The field is ``width`` bits holding ``value``, except the bits set in ``mask``: those
    carry a generated number from ``lo`` to ``hi`` (its bits spread over the mask's bits,
    most significant first).  ``mask`` defaults to the whole field and ``hi`` to the largest
    number the mask holds; ``mask=0`` makes a fixed field.
    """

    width: int
    value: int = 0
    lo: int = 0
    hi: int | None = None
    mask: int | None = None

    def __post_init__(self) -> None:
        w = self.width
        if not isinstance(w, int) or not 1 <= w <= EV_BITS:
            raise ValueError(f"EvField width must be 1..{EV_BITS} bits, not {w!r}")
        if not 0 <= self.value < 1 << w:
            raise ValueError(f"EvField value {self.value:#x} does not fit its {w} bits")
        if self.mask is not None and not 0 <= self.mask < 1 << w:
            raise ValueError(f"EvField mask {self.mask:#x} has bits outside its {w} bits")
        bits = self.mask_bits()
        if self.hi is not None and not 0 <= self.hi < 1 << bits:
            raise ValueError(
                f"EvField hi {self.hi} must be in 0..{(1 << bits) - 1} (the mask has {bits} bits)"
            )
        if not 0 <= self.lo <= self.max_value():
            raise ValueError(
                f"EvField lo {self.lo} must be in 0..{self.max_value()} (hi, or the largest "
                f"number the mask's {bits} bits hold)"
            )

    def full_mask(self) -> int:
        return (1 << self.width) - 1 if self.mask is None else self.mask

    def mask_bits(self) -> int:
        return self.full_mask().bit_count()

    def max_value(self) -> int:
        return self.hi if self.hi is not None else (1 << self.mask_bits()) - 1

    def choices(self) -> int:
        """How many distinct values the field takes."""
        return self.max_value() - self.lo + 1

    def expand(self, n: int) -> int:
        """The field's bits for generated number ``lo + n``."""
        mask = self.full_mask()
        num = self.lo + n
        out = self.value & ~mask
        left = mask.bit_count()
        for bit in range(self.width - 1, -1, -1):  # mask bits, most significant first
            if mask >> bit & 1:
                left -= 1
                out |= (num >> left & 1) << bit
        return out


def generate_evs(layout: Sequence[EvField], count: int) -> tuple[int, ...]:
    """``count`` distinct EVs from a field layout: the fields are concatenated (the first is
    the most significant) and counted like the digits of a number, the last field fastest."""
    total = sum(f.width for f in layout)
    if not layout or total > EV_BITS:
        raise ValueError(f"an EV layout needs 1 to {EV_BITS} bits of fields, not {total}")
    distinct = math.prod(f.choices() for f in layout)
    if count > distinct:
        raise ValueError(
            f"the layout generates {distinct} distinct EVs, fewer than ev_count {count}"
        )
    out = []
    for i in range(count):
        ev = 0
        digits = []
        for f in reversed(layout):
            i, d = divmod(i, f.choices())
            digits.append(d)
        for f, d in zip(layout, reversed(digits), strict=True):
            ev = ev << f.width | f.expand(d)
        out.append(ev)
    return tuple(out)


class EvProfile(Lifecycle):
    """Which EVs the QPs created from it spray over, how many must stay usable, and which
    state changes a controller is told about.

    ``configure(mode, ...)`` moves INIT -> OFFLINE (and reconfigures an OFFLINE profile).
    An EXPLICIT profile's array starts with ``ev_count`` empty entries (``None``) unless
    ``evs`` are given; fill them with :meth:`set_evs` or :meth:`replace_ev` before
    :meth:`online`.  A GENERATED profile expands ``layout`` into ``ev_count`` EVs.  An AUTO
    profile leaves the EVs to the QP (our generator) and only sets their number.
    """

    kind = "EV profile"

    def __init__(self, profile_id: int = 0) -> None:
        super().__init__(profile_id)
        self._clear()

    def _clear(self) -> None:
        self.mode: EvMode | None = None
        self.ev_count = 0
        self.ev_min_active = 1
        self.backup_per_plane: int | None = None
        self.layout: tuple[EvField, ...] = ()
        self.events: frozenset[EvStatus] = DEFAULT_EVENTS
        self._array: list[int | None] = []

    def configure(
        self,
        mode: EvMode | str,
        ev_count: int | None = None,
        *,
        evs: Iterable[int] | None = None,
        layout: Sequence[EvField] = (),
        ev_min_active: int = 1,
        events: Iterable[EvStatus | str] = DEFAULT_EVENTS,
        backup_per_plane: int | None = None,
    ) -> None:
        """Set the mode and its fields (all checked before anything changes).

        ``ev_count``: EVs in the array (EXPLICIT: default ``len(evs)``; GENERATED: required;
        AUTO: the QP's sprayed EVs, default the QP's own, 128).  ``ev_min_active``: the floor
        of EVs a QP keeps sending on (0..ev_count).  ``events``: the states reported to
        :class:`EvEventQueue` (GOOD, ASSUMED_BAD, and ours, DENIED).  ``backup_per_plane``:
        EVs per plane held back to replace a failed one (AUTO: extra EVs, default 8; EXPLICIT
        and GENERATED: taken from the array, default 0).
        """
        self._check(ProfileOp.CONFIGURE)
        mode = EvMode(mode)
        arr: list[int | None]
        lay = tuple(layout)
        if mode is EvMode.EXPLICIT:
            given = None if evs is None else list(evs)
            count = ev_count if ev_count is not None else len(given or ())
            _check_count(count)
            if given is not None:
                if len(given) != count:
                    raise ValueError(f"{len(given)} EVs given for ev_count {count}")
                _check_evs(given)
            arr = list(given) if given is not None else [None] * count
            if lay:
                raise ValueError("layout is for GENERATED profiles")
        elif mode is EvMode.GENERATED:
            if ev_count is None:
                raise ValueError("a GENERATED profile needs ev_count")
            _check_count(ev_count)
            if evs is not None:
                raise ValueError("evs are for EXPLICIT profiles; GENERATED ones use layout")
            arr = list(generate_evs(lay, ev_count))
            count = ev_count
        else:
            if evs is not None or lay:
                raise ValueError("an AUTO profile takes no evs and no layout: the QP picks them")
            count = ev_count if ev_count is not None else 0  # 0: the QP's default
            if count:
                _check_count(count)
            arr = []
        if not 0 <= ev_min_active <= (count or _DEFAULT_EV_COUNT):
            raise ValueError(f"ev_min_active must be in 0..ev_count, not {ev_min_active}")
        wanted = _check_events(events)
        if backup_per_plane is not None and backup_per_plane < 0:
            raise ValueError(f"backup_per_plane must be >= 0, not {backup_per_plane}")
        self._step(ProfileOp.CONFIGURE)
        self.mode, self.ev_count, self.layout, self._array = mode, count, lay, arr
        self.ev_min_active = ev_min_active
        self.events = wanted
        self.backup_per_plane = backup_per_plane

    def evs(self) -> tuple[int | None, ...]:
        """The EV array (None marks an entry not filled yet; AUTO: empty)."""
        return tuple(self._array)

    def set_events(self, events: Iterable[EvStatus | str]) -> None:
        """Which EV state changes are reported (OFFLINE only)."""
        self._check(ProfileOp.EDIT)
        wanted = _check_events(events)
        self._step(ProfileOp.EDIT)
        self.events = wanted

    def set_evs(self, evs: Iterable[int]) -> None:
        """Fill an EXPLICIT profile's whole array (OFFLINE only; ``ev_count`` values)."""
        self._check(ProfileOp.EDIT)
        vals = list(evs)
        self._require_explicit()
        if len(vals) != self.ev_count:
            raise ValueError(f"{len(vals)} EVs given for ev_count {self.ev_count}")
        _check_evs(vals)
        self._step(ProfileOp.EDIT)
        self._array = list[int | None](vals)

    def replace_ev(self, old: int | None, new: int) -> None:
        """Put ``new`` where ``old`` is in an EXPLICIT array (``old=None``: the first empty
        entry).  OFFLINE only: a live QP's EVs are not replaced (docs/api.md says why); deny
        one instead and its plane's backup takes over."""
        self._check(ProfileOp.EDIT)
        self._require_explicit()
        try:
            i = self._array.index(old)
        except ValueError:
            what = "no empty entry left" if old is None else f"EV {old:#x} is not in the array"
            raise ValueError(f"{self.kind} {self.profile_id}: {what}") from None
        arr = list(self._array)
        arr[i] = new
        _check_evs([v for v in arr if v is not None])
        self._step(ProfileOp.EDIT)
        self._array = arr

    def _require_explicit(self) -> None:
        if self.mode is not EvMode.EXPLICIT:
            mode = self.mode.name if self.mode else "unconfigured"
            raise ValueError(
                f"{self.kind} {self.profile_id} is {mode}: only EXPLICIT arrays are set"
            )

    def _check_online(self) -> None:
        if self.mode is EvMode.EXPLICIT:
            empty = sum(v is None for v in self._array)
            if empty:
                raise ProfileStateError(
                    f"{self.kind} {self.profile_id}: {empty} of {self.ev_count} EVs not set "
                    "(set_evs or replace_ev first)"
                )

    def apply(self, config: QpConfig) -> QpConfig:
        """``config`` with this profile's EVs (ONLINE only)."""
        if self.state is not ProfileState.ONLINE:
            raise ProfileStateError(
                f"{self.kind} {self.profile_id} is {self.state.name}: only ONLINE profiles are used"
            )
        ev = replace(config.ev, ev_min_active=self.ev_min_active)
        if self.mode is EvMode.AUTO:
            ev = replace(ev, values=())
            if self.ev_count:
                ev = replace(ev, ev_count=self.ev_count)
            if self.backup_per_plane is not None:
                ev = replace(ev, backup_per_plane=self.backup_per_plane)
        else:
            values = tuple(v for v in self._array if v is not None)
            ev = replace(
                ev,
                values=values,
                ev_count=len(values),
                backup_per_plane=self.backup_per_plane or 0,
            )
        return replace(config, ev=ev)


_DEFAULT_EV_COUNT = 128  # EvConfig's default, the bound of ev_min_active for AUTO


def _check_count(count: int) -> None:
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"ev_count must be a positive integer, not {count!r}")


def _check_evs(vals: Sequence[int]) -> None:
    bad = [v for v in vals if not isinstance(v, int) or not 0 <= v < 1 << EV_BITS]
    if bad:
        raise ValueError(f"EVs are {EV_BITS}-bit unsigned integers, not {bad[:4]}")
    if len(set(vals)) != len(vals):
        dup = sorted({v for v in vals if vals.count(v) > 1})
        raise ValueError(
            f"EV(s) {', '.join(f'{v:#x}' for v in dup[:4])} listed twice: each EV once (a QP "
            "keeps its state per EV value)"
        )


def _check_events(events: Iterable[EvStatus | str]) -> frozenset[EvStatus]:
    wanted = frozenset(EvStatus(e) for e in events)
    bad = wanted - EVENT_STATES
    if bad:
        raise ValueError(
            f"cannot report {', '.join(sorted(s.name for s in bad))}: events are for "
            f"{', '.join(sorted(s.name for s in EVENT_STATES))}"
        )
    return wanted


# -- CC profiles -------------------------------------------------------------------------------
