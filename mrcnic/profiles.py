"""The controller's model, after OCP libmrc's: EV profiles, CC profiles and per-QP options.

A *profile* is configuration a controller prepares once and QPs are created from: an
:class:`EvProfile` says which entropy values (EVs, paths) a QP sprays over, a
:class:`CcProfile` which congestion control it runs and with what parameters.  Both live
through the same small lifecycle (:data:`PROFILE_TRANSITIONS`, h11 style: an operation not in
the table raises :class:`ProfileStateError`)::

    INIT --configure--> OFFLINE --online--> ONLINE --offline--> OFFLINE --reset--> INIT

A profile is edited only while OFFLINE, and used (``Device.create_qp(ev_profile=...,
cc_profile=...)`` or :meth:`EvProfile.apply`) only while ONLINE; a profile QPs are using
cannot go OFFLINE.  :class:`QpOptions` carries libmrc's per-QP attributes in their units
(PSN tracking window in units of 128 PSNs, the ACK timeout exponent, linear and exponential
retry counts) and maps them onto :class:`~mrcnic.transport.qp_types.QpConfig`.  At run time
a controller reads and sets EV states as :class:`EvStatus` (GOOD, ASSUMED_BAD, DENIED,
UNKNOWN: the transport's SKIP shows as GOOD) and receives :class:`EvEvent` records from an
:class:`EvEventQueue` (``Device.ev_event_queue()``).  docs/api.md, "The OCP libmrc control
model", maps every libmrc call and field to these names and says what is left out and why.

Everything here is pure data and checks: no I/O, no clock.
"""

from __future__ import annotations

import enum
import inspect
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from mrcnic.errors import MrcError
from mrcnic.transport import cc as _cc
from mrcnic.transport.ev import EvState, EvStateChanged
from mrcnic.transport.qp_types import QpConfig

__all__ = [
    "DEFAULT_EVENTS",
    "EV_BITS",
    "LAB_TIME_SCALE",
    "PROFILE_TRANSITIONS",
    "WINDOW_UNIT_PSNS",
    "Capabilities",
    "CcProfile",
    "EvEvent",
    "EvEventQueue",
    "EvField",
    "EvMode",
    "EvProfile",
    "EvStatus",
    "ProfileOp",
    "ProfileState",
    "ProfileStateError",
    "QpLimits",
    "QpOptions",
    "ack_timeout_code",
    "ack_timeout_s",
    "capabilities",
    "cc_option_names",
    "ev_status",
    "generate_evs",
    "mermaid",
    "scale_times",
]

#: bits in one of our EVs (16 in the UDP source port, 16 in the flow label: docs/wire.md)
EV_BITS = 32
#: PSNs per unit of libmrc's tracking-window size (its "MPR")
WINDOW_UNIT_PSNS = 128
#: the lab runs production's rates / 1000, so its times are x1000 (docs/transport.md)
LAB_TIME_SCALE = 1000.0
#: libmrc's ACK timeout is 1.024 us x 2**t
ACK_TIMEOUT_BASE_S = 1.024e-6
MAX_ACK_TIMEOUT = 24  # 2**24 x 1.024 us = 17.18 s
MAX_LINEAR_RETRIES = 7
MAX_EXP_RETRIES = 24  # libmrc's next value, 25, means "retry forever": not supported here
#: the window sizes our responder supports (QpAttributes.problem): powers of two, 64..2**23
MAX_WINDOW_UNITS = (1 << 23) // WINDOW_UNIT_PSNS
MAX_WIMM_INFLIGHT = 0x8000


class ProfileStateError(MrcError, RuntimeError):
    """An operation the profile's lifecycle state does not allow (e.g. edit while ONLINE)."""


# -- the lifecycle ------------------------------------------------------------------------------


class ProfileState(enum.Enum):
    INIT = "INIT"  # created, nothing configured
    OFFLINE = "OFFLINE"  # configured, editable, not usable by QPs
    ONLINE = "ONLINE"  # usable by QPs, not editable


class ProfileOp(enum.Enum):
    CONFIGURE = "CONFIGURE"  # set the mode / algorithm and the main fields
    EDIT = "EDIT"  # change fields of a configured profile (EVs, options, event mask)
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    RESET = "RESET"  # back to INIT, configuration dropped
    USE = "USE"  # a QP takes its configuration from the profile


_I, _F, _N = ProfileState.INIT, ProfileState.OFFLINE, ProfileState.ONLINE
#: (state, operation) -> next state; a pair not listed is refused (ProfileStateError).
PROFILE_TRANSITIONS: dict[tuple[ProfileState, ProfileOp], ProfileState] = {
    (_I, ProfileOp.CONFIGURE): _F,
    (_F, ProfileOp.CONFIGURE): _F,
    (_F, ProfileOp.EDIT): _F,
    (_F, ProfileOp.ONLINE): _N,
    (_F, ProfileOp.RESET): _I,
    (_N, ProfileOp.OFFLINE): _F,
    (_N, ProfileOp.USE): _N,
}
del _I, _F, _N


def mermaid() -> str:
    """The profile lifecycle as a Mermaid state diagram (self-loops omitted)."""
    lines = ["stateDiagram-v2", "    [*] --> INIT"]
    for (src, op), dst in PROFILE_TRANSITIONS.items():
        if src is not dst:
            lines.append(f"    {src.name} --> {dst.name}: {op.name}")
    return "\n".join(lines)


class _Lifecycle:
    """The state a profile is in and the one place it changes."""

    kind = "profile"

    def __init__(self, profile_id: int) -> None:
        if not isinstance(profile_id, int) or profile_id < 0:
            raise ValueError(f"profile_id must be a non-negative integer, not {profile_id!r}")
        self.profile_id = profile_id
        self.state = ProfileState.INIT
        self._users = 0  # QPs created from this profile and not destroyed

    @property
    def users(self) -> int:
        """How many live QPs were created from this profile."""
        return self._users

    def _step(self, op: ProfileOp) -> None:
        self.state = self._check(op)

    def _check(self, op: ProfileOp) -> ProfileState:
        """The state ``op`` leads to (nothing changes), or ProfileStateError."""
        try:
            return PROFILE_TRANSITIONS[(self.state, op)]
        except KeyError:
            allowed = sorted(o.name for (s, o) in PROFILE_TRANSITIONS if s is self.state)
            raise ProfileStateError(
                f"{self.kind} {self.profile_id}: {op.name} is not allowed in {self.state.name} "
                f"(allowed: {', '.join(allowed)})"
            ) from None

    def _check_online(self) -> None: ...  # what a profile must satisfy to go ONLINE

    def online(self) -> None:
        """OFFLINE -> ONLINE, once the configuration is complete."""
        if self.state is ProfileState.OFFLINE:
            self._check_online()
        self._step(ProfileOp.ONLINE)

    def offline(self) -> None:
        """ONLINE -> OFFLINE, to edit it; refused while QPs use the profile."""
        if self.state is ProfileState.ONLINE and self._users:
            raise ProfileStateError(
                f"{self.kind} {self.profile_id} is in use by {self._users} QP(s): destroy them "
                "before taking it offline"
            )
        self._step(ProfileOp.OFFLINE)

    def reset(self) -> None:
        """OFFLINE -> INIT, dropping the configuration."""
        self._step(ProfileOp.RESET)
        self._clear()

    def _clear(self) -> None: ...

    # Device.create_qp / destroy_qp keep the count of QPs using the profile
    def _attach(self) -> None:
        self._step(ProfileOp.USE)
        self._users += 1

    def _detach(self) -> None:
        self._users = max(0, self._users - 1)


# -- EV profiles -------------------------------------------------------------------------------


class EvMode(enum.Enum):
    AUTO = "AUTO"  # the NIC chooses the EVs (ours: a random base per QP, docs/transport.md)
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


_STATUS_OF = {
    EvState.GOOD: EvStatus.GOOD,
    EvState.SKIP: EvStatus.GOOD,
    EvState.ASSUMED_BAD: EvStatus.ASSUMED_BAD,
    EvState.DENIED: EvStatus.DENIED,
}


def ev_status(state: EvState | None) -> EvStatus:
    """The controller's view of a transport EV state (None: the EV is not held)."""
    return EvStatus.UNKNOWN if state is None else _STATUS_OF[state]


#: the states an EV profile reports by default (libmrc reports these two)
DEFAULT_EVENTS = frozenset({EvStatus.GOOD, EvStatus.ASSUMED_BAD})
_EVENT_STATES = frozenset({EvStatus.GOOD, EvStatus.ASSUMED_BAD, EvStatus.DENIED})


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


class EvProfile(_Lifecycle):
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
    bad = wanted - _EVENT_STATES
    if bad:
        raise ValueError(
            f"cannot report {', '.join(sorted(s.name for s in bad))}: events are for "
            f"{', '.join(sorted(s.name for s in _EVENT_STATES))}"
        )
    return wanted


# -- CC profiles -------------------------------------------------------------------------------


def cc_option_names(algorithm: str) -> tuple[str, ...] | None:
    """The options ``algorithm`` accepts, or None when its factory takes any keyword (it then
    checks them itself when a QP creates it).  Raises ValueError for an unknown name."""
    factory = _cc.factory(algorithm)
    if isinstance(factory, type) and issubclass(factory, _cc.UetNscc):
        return tuple(f.name for f in fields(_cc.NsccParams))
    params = list(inspect.signature(factory).parameters.values())[1:]  # after CcParams
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


_NSCC_FLAGS = frozenset(
    f.name for f in fields(_cc.NsccParams) if isinstance(f.default, bool)
)  # the NsccParams fields that are switches; the others are numbers


def _check_cc_options(algorithm: str, options: Mapping[str, object]) -> None:
    names = cc_option_names(algorithm)
    if names is not None:
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise ValueError(
                f"{algorithm}: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(names) or '(none)'}"
            )
    factory = _cc.factory(algorithm)
    if isinstance(factory, type) and issubclass(factory, _cc.UetNscc):
        for k, v in options.items():
            if v is None:
                continue  # "derive from the QP"
            if k in _NSCC_FLAGS:
                if not isinstance(v, bool):
                    raise ValueError(f"{algorithm}: {k} must be True or False, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"{algorithm}: {k} must be a finite number, got {v!r}")


class CcProfile(_Lifecycle):
    """A congestion control algorithm by registered name (``mrcnic.transport.cc``) and its
    options, checked against what the algorithm accepts.  Values that depend on the QP
    (e.g. a window against the derived BDP) are checked when a QP is created from it."""

    kind = "CC profile"

    def __init__(self, profile_id: int = 0) -> None:
        super().__init__(profile_id)
        self._clear()

    def _clear(self) -> None:
        self.algorithm: str | None = None
        self.options: dict[str, object] = {}

    def configure(self, algorithm: str, options: Mapping[str, object] | None = None) -> None:
        """INIT/OFFLINE -> OFFLINE with ``algorithm`` (e.g. ``"uet-1.0-nscc"``)."""
        self._check(ProfileOp.CONFIGURE)
        opts = dict(options or {})
        _check_cc_options(algorithm, opts)
        self._step(ProfileOp.CONFIGURE)
        self.algorithm, self.options = algorithm, opts

    def set_options(self, **options: object) -> None:
        """Change some options (OFFLINE only); ``name=None`` goes back to the default."""
        self._check(ProfileOp.EDIT)
        assert self.algorithm is not None  # OFFLINE: configured
        merged = {**self.options, **options}
        merged = {k: v for k, v in merged.items() if v is not None}
        _check_cc_options(self.algorithm, merged)
        self._step(ProfileOp.EDIT)
        self.options = merged

    def apply(self, config: QpConfig) -> QpConfig:
        """``config`` with this algorithm and options (ONLINE only)."""
        if self.state is not ProfileState.ONLINE:
            raise ProfileStateError(
                f"{self.kind} {self.profile_id} is {self.state.name}: only ONLINE profiles are used"
            )
        assert self.algorithm is not None
        return replace(config, cc=self.algorithm, cc_options=tuple(sorted(self.options.items())))


def scale_times(
    options: Mapping[str, object], time_scale: float = LAB_TIME_SCALE
) -> dict[str, object]:
    """Production CC options (times in seconds) for the lab: every ``*_s`` option times
    ``time_scale``.  Bytes stay as they are: the lab divides rates by the same factor, so a
    BDP in bytes is unchanged."""
    return {
        k: v * time_scale if k.endswith("_s") and isinstance(v, int | float) else v
        for k, v in options.items()
    }


# -- per-QP options (libmrc's QP attributes) ----------------------------------------------------


def ack_timeout_s(code: int, time_scale: float = LAB_TIME_SCALE) -> float:
    """libmrc's ACK timeout ``1.024 us x 2**code`` in seconds, times ``time_scale`` (the lab
    runs 1000 times slower than production; pass 1 for production time)."""
    if not isinstance(code, int) or not 0 <= code <= MAX_ACK_TIMEOUT:
        raise ValueError(f"ACK timeout code must be 0..{MAX_ACK_TIMEOUT}, not {code!r}")
    return ACK_TIMEOUT_BASE_S * (1 << code) * time_scale


def ack_timeout_code(seconds: float, time_scale: float = LAB_TIME_SCALE) -> int:
    """The smallest code whose timeout (:func:`ack_timeout_s`) is at least ``seconds``."""
    if not seconds > 0:
        raise ValueError(f"a timeout must be positive, not {seconds!r}")
    ratio = seconds / (ACK_TIMEOUT_BASE_S * time_scale)
    code = max(0, math.ceil(math.log2(ratio) - 1e-12))
    if code > MAX_ACK_TIMEOUT:
        raise ValueError(f"{seconds} s is beyond the largest ACK timeout ({MAX_ACK_TIMEOUT})")
    return code


@dataclass(frozen=True, slots=True)
class QpOptions:
    """libmrc's per-QP attributes in its units; ``None`` leaves the QpConfig value alone.

    - ``window_units``: the responder's PSN tracking window in units of 128 PSNs (a power
      of two, 1..65536) -> ``window_psns``.  The peer's requester keeps within it.
    - ``max_wimm_inflight``: write-with-immediate messages the responder accepts in flight
      (1..32768); the peer's requester keeps within it.
    - ``ack_timeout``: t in ``1.024 us x 2**t`` (0..24), times ``time_scale`` ->
      ``min_rto_s``, the shortest time a packet waits for its acknowledgment (the RTO adapts
      above it); ``max_rto_s`` is raised to it if lower.
    - ``linear_retries`` (0..7) + ``exp_retries`` (0..24) -> ``retry_limit``: timeout
      retransmissions of one packet before the QP fails; all back off exponentially.
    """

    window_units: int | None = None
    max_wimm_inflight: int | None = None
    ack_timeout: int | None = None
    linear_retries: int | None = None
    exp_retries: int | None = None
    time_scale: float = LAB_TIME_SCALE

    def __post_init__(self) -> None:
        u = self.window_units
        if u is not None and (
            not isinstance(u, int) or not 1 <= u <= MAX_WINDOW_UNITS or u & (u - 1)
        ):
            raise ValueError(
                f"window_units must be a power of two in 1..{MAX_WINDOW_UNITS} "
                f"({WINDOW_UNIT_PSNS} PSNs each; our responder's window is a power of two), "
                f"not {u!r}"
            )
        w = self.max_wimm_inflight
        if w is not None and (not isinstance(w, int) or not 1 <= w <= MAX_WIMM_INFLIGHT):
            raise ValueError(f"max_wimm_inflight must be in 1..{MAX_WIMM_INFLIGHT}, not {w!r}")
        if self.ack_timeout is not None:
            ack_timeout_s(self.ack_timeout, 1.0)  # range check
        lin = self.linear_retries
        if lin is not None and (not isinstance(lin, int) or not 0 <= lin <= MAX_LINEAR_RETRIES):
            raise ValueError(f"linear_retries must be in 0..{MAX_LINEAR_RETRIES}, not {lin!r}")
        exp = self.exp_retries
        if exp is not None and (not isinstance(exp, int) or not 0 <= exp <= MAX_EXP_RETRIES):
            raise ValueError(
                f"exp_retries must be in 0..{MAX_EXP_RETRIES}, not {exp!r} (retrying forever "
                "is not supported: a QP must fail when no path is left)"
            )
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be positive, not {self.time_scale!r}")

    def apply(self, config: QpConfig) -> QpConfig:
        changes: dict[str, Any] = {}  # field name -> value of that field's type
        if self.window_units is not None:
            changes["window_psns"] = self.window_units * WINDOW_UNIT_PSNS
        if self.max_wimm_inflight is not None:
            changes["max_wimm_inflight"] = self.max_wimm_inflight
        if self.ack_timeout is not None:
            rto = ack_timeout_s(self.ack_timeout, self.time_scale)
            changes["min_rto_s"] = rto
            changes["max_rto_s"] = max(config.max_rto_s, rto)
        if self.linear_retries is not None or self.exp_retries is not None:
            changes["retry_limit"] = (self.linear_retries or 0) + (self.exp_retries or 0)
        return replace(config, **changes)

    @classmethod
    def of(cls, config: QpConfig, time_scale: float = LAB_TIME_SCALE) -> QpOptions:
        """The options ``config`` amounts to (for a query): the window in units (None if
        not a whole number of them), the ACK timeout code nearest at or above its min RTO,
        every retry counted as exponential."""
        units = config.window_psns // WINDOW_UNIT_PSNS
        min_rto = config.min_rto_s if config.min_rto_s is not None else 2 * config.base_rtt_s
        try:
            code: int | None = ack_timeout_code(min_rto, time_scale)
        except ValueError:
            code = None
        return cls(
            window_units=units if units * WINDOW_UNIT_PSNS == config.window_psns else None,
            max_wimm_inflight=config.max_wimm_inflight,
            ack_timeout=code,
            linear_retries=0,
            exp_retries=min(config.retry_limit, MAX_EXP_RETRIES),
            time_scale=time_scale,
        )


@dataclass(frozen=True, slots=True)
class QpLimits:
    """A QP's limits in both directions (``QP.limits()``): as responder its own, as
    requester the peer's (None before ``connect``)."""

    window_psns: int  # this QP's responder tracking window
    max_wimm_inflight: int  # write-with-immediate this QP accepts in flight
    peer_window_psns: int | None  # what this QP, as requester, keeps within
    peer_max_wimm_inflight: int | None


# -- EV state-change events ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvEvent:
    """An EV of a QP changed state as a controller sees it (:class:`EvStatus`).

    ``dropped``: events lost (queue full) between the previous event delivered and this one.
    """

    qpn: int
    profile_id: int | None  # the QP's EV profile, if it was created from one
    ev: int
    plane: int
    status: EvStatus
    previous: EvStatus
    time_s: float
    dropped: int = 0


class EvEventQueue:
    """A controller's queue of :class:`EvEvent` (``Device.ev_event_queue()``).  Bounded: an
    event that finds it full is counted, and the count rides on the next event delivered."""

    def __init__(self, capacity: int = 1024, collect: Callable[[], None] | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._q: deque[EvEvent] = deque()
        self._dropped = 0
        self._collect = collect  # moves pending events in (the device's QPs)

    def offer(
        self, qpn: int, profile_id: int | None, mask: frozenset[EvStatus], e: EvStateChanged
    ) -> None:
        """Queue ``e`` if its controller-visible status changed and ``mask`` asks for it."""
        new, old = _STATUS_OF[e.new], _STATUS_OF[e.old]
        if new is old or new not in mask:
            return
        if len(self._q) >= self.capacity:
            self._dropped += 1
            return
        ev = EvEvent(qpn, profile_id, e.ev, e.plane, new, old, e.time_s, self._dropped)
        self._dropped = 0
        self._q.append(ev)

    def poll(self, max_entries: int = 64) -> list[EvEvent]:
        """Up to ``max_entries`` events, oldest first."""
        if self._collect is not None:
            self._collect()
        q = self._q
        return [q.popleft() for _ in range(min(max_entries, len(q)))]

    def __len__(self) -> int:
        return len(self._q)


# -- what this implementation supports (libmrc's device query) ---------------------------------


@dataclass(frozen=True, slots=True)
class Capabilities:
    ev_modes: tuple[EvMode, ...]
    ev_bits: int
    event_states: tuple[EvStatus, ...]
    cc_algorithms: tuple[str, ...]
    window_unit_psns: int
    max_window_units: int
    max_wimm_inflight: int
    max_ack_timeout: int
    max_linear_retries: int
    max_exp_retries: int
    edit_online: bool  # profiles can be edited while ONLINE
    replace_live_ev: bool  # a live QP's EV can be replaced
    precise_drop_count: bool  # EvEvent.dropped is a count, not a flag


def capabilities() -> Capabilities:
    return Capabilities(
        ev_modes=tuple(EvMode),
        ev_bits=EV_BITS,
        event_states=tuple(sorted(_EVENT_STATES, key=lambda s: s.name)),
        cc_algorithms=tuple(_cc.available()),
        window_unit_psns=WINDOW_UNIT_PSNS,
        max_window_units=MAX_WINDOW_UNITS,
        max_wimm_inflight=MAX_WIMM_INFLIGHT,
        max_ack_timeout=MAX_ACK_TIMEOUT,
        max_linear_retries=MAX_LINEAR_RETRIES,
        max_exp_retries=MAX_EXP_RETRIES,
        edit_online=False,
        replace_live_ev=False,
        precise_drop_count=True,
    )


if __name__ == "__main__":  # pragma: no cover
    print(mermaid())
