"""Congestion control: a small plug-in interface, NSCC as UET 1.0 defines it, the project's
previous NSCC, a fixed window, and a registry so a user can plug an algorithm in by name.

An algorithm owns ``cwnd_bytes``; the QP sends while ``inflight < cwnd_bytes`` and feeds the
algorithm one :class:`AckSample` per acknowledgment (with the EV it is about and the bytes in
flight), plus trims (NACK TRIMMED / TRIMMED_LASTHOP), timeouts and the receiver's window
penalty; and, if the algorithm defines ``on_loss``, one :class:`LossSample` per packet declared
lost, whatever found it (SACKs, trims, timeouts).  docs/design/transport.md, "Writing a congestion
control", has the rules; examples/ecn_loss_aimd.py is a user algorithm in one file.

Registered names: ``"uet-1.0-nscc"`` (:class:`UetNscc`; ``"nscc"``, the default of
``QpConfig.cc``, is the same algorithm), ``"nscc-2026.11"`` (:class:`LegacyNscc`, the
algorithm this module had before) and ``"fixed"``.

UET NSCC (docs/design/transport.md, "Congestion control", has every constant and its source), with
``delay = rtt - base_rtt`` per ACK:

=====  ===================  ==========================================================
ECN    delay vs target       action
=====  ===================  ==========================================================
no     below                 proportional increase ``inc += alpha * acked * (target - delay)``
                             (or, after a whole window of near-zero delay, the fast increase
                             ``cwnd += fi_scale * acked``)
no     above                 fair increase ``inc += fi * acked``
yes    above                 multiplicative decrease ``cwnd *= max(1 - gamma * (avg - target)
                             / avg, 1 - max_md_jump)`` on the filtered delay, once per base RTT
yes    below                 no change (the EV layer steers away from the marked path)
=====  ===================  ==========================================================

Increases are collected in ``inc`` and applied as ``cwnd += inc / cwnd`` when more than
``adjust_bytes_threshold`` bytes were acknowledged or ``adjust_period_threshold`` passed, when
also ``cwnd += eta``.  Quick adapt: once per window of ``base_rtt + target``, after a trim or
with a delay above ``qa_threshold``, a QP that delivered less than ``max_cwnd / 2**qa_gate`` in
the window sets its window to what it delivered.  A trim takes one MTU off, as does a timeout
(UET's model takes a timed-out packet's bytes off); a loss found from SACKs changes nothing
(UET's model retransmits it and leaves the window alone), so NSCC has no ``on_loss``.  Our
additions for MRC, whose last-hop ports do not mark ECN: a delay-based decrease when *every* delay sample of a window was above
target (a standing queue, common to all paths), which also holds the fair increase back; a
base RTT that is a windowed minimum and can rise again; the receiver's ``rcv_cwnd_pen``
capping the window at ``(1 - pen/128)`` of ``max_cwnd``; with equal plane shares, a
plane-aware mode that, while one plane is persistently slower than the others, runs NSCC on
that plane's pace (the QP can go no faster than the planes' count times it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from mrcnic.wire import fast_constructor

#: wire bytes of a data packet besides its payload: Ethernet 14 + IPv6 40 + UDP 8 +
#: BTH/METH/timestamp/RETH 40 + ICRC 4
HEADER_BYTES = 106

#: UET's reference network for scaling NSCC's gains: 100 Gb/s x 12 us = 150 kB (htsim
#: ``initNsccParams``: scaling factor a = BDP / this)
REFERENCE_BDP_BYTES = 100e9 / 8 * 12e-6


@dataclass(frozen=True, slots=True)
class CcParams:
    """What every algorithm is told about its QP at creation."""

    mtu_bytes: int  # payload bytes per packet
    line_rate_bps: float  # sum of the QP's port rates
    base_rtt_s: float  # unloaded fabric RTT (configured estimate; refined by measurement)
    port_rate_bps: float | None = None  # one NIC port's rate (default: line_rate_bps)
    planes: int = 1  # planes the QP sprays over (AckSample.plane is below it)
    equal_shares: bool = False  # every plane carries the same share (EvConfig.plane_share)


@dataclass(frozen=True, slots=True)
class AckSample:
    """One acknowledgment (a SACK or ACK that acknowledged new data or echoes ECN).

    ``ev``, ``plane`` and ``path`` name the EV of the packet that triggered it (the one whose
    timestamp ``rtt_s`` measures and whose CE mark ``ecn`` echoes): its wire value, its plane
    and its path index in the EV table (``plane * t1_count + t1``); -1 when the SACK names no
    EV of this QP.  ``inflight_bytes``: the sender's bytes in flight once this SACK and the
    losses it revealed are accounted.  (The last four have defaults, -1 meaning "not given",
    so an algorithm's own tests can still build a sample from the first four; the engines
    always give them.)"""

    acked_bytes: int  # newly acknowledged payload bytes
    rtt_s: float | None  # RTT of the packet that triggered the ACK (None if unknown)
    ecn: bool  # the ACK echoes a CE mark
    now_s: float
    ev: int = -1
    plane: int = -1
    path: int = -1
    inflight_bytes: int = -1


#: ``new_ack_sample(acked_bytes, rtt_s, ecn, now_s, ev, plane, path, inflight_bytes)``: an
#: AckSample, built fast (the engines call this once per SACK; every field, in order)
new_ack_sample = fast_constructor(AckSample)

#: LossSample.cause: found from SACKs (the scoreboard's reordering-window or per-EV order rule)
LOSS_SACK = "sack"
#: LossSample.cause: trimmed by a fabric switch (NACK TRIMMED)
LOSS_TRIM = "trim"
#: LossSample.cause: trimmed at the last hop, the receiver's port (NACK TRIMMED_LASTHOP)
LOSS_TRIM_LAST_HOP = "trim_last_hop"
#: LossSample.cause: its retransmission timer fired
LOSS_TIMEOUT = "timeout"


@dataclass(frozen=True, slots=True)
class LossSample:
    """One packet the sender has just declared lost and queued for retransmission.

    ``cause`` is one of LOSS_SACK, LOSS_TRIM, LOSS_TRIM_LAST_HOP, LOSS_TIMEOUT; ``lost_bytes``
    its payload; ``ev``, ``plane``, ``path`` where it was sent (as in :class:`AckSample`);
    ``inflight_bytes`` the bytes in flight once it left the count."""

    cause: str
    lost_bytes: int
    ev: int
    plane: int
    path: int
    inflight_bytes: int
    now_s: float


#: ``new_loss_sample(cause, lost_bytes, ev, plane, path, inflight_bytes, now_s)``
new_loss_sample = fast_constructor(LossSample)


class CongestionControl(Protocol):
    """What the engines call (docs/design/transport.md, "Writing a congestion control"): ``on_ack``
    per acknowledgment, ``on_trim`` per trimmed packet, ``on_timeout`` per timed-out packet,
    ``on_rcv_penalty`` per receiver penalty.

    Optional: an algorithm that defines ``on_loss(s: LossSample)`` is also told of every
    packet declared lost, whatever found it (SACKs, trims, timeouts), with its EV and the
    bytes in flight; for a trim or a timeout right after ``on_trim`` / ``on_timeout``, for a
    loss a SACK revealed before that SACK's ``on_ack``.  One that does not define it is never
    asked (algorithms written before it keep working unchanged)."""

    name: str
    cwnd_bytes: float

    def on_ack(self, s: AckSample) -> None: ...
    def on_trim(self, last_hop: bool, now_s: float) -> None: ...
    def on_timeout(self, now_s: float) -> None: ...
    def on_rcv_penalty(self, penalty: int, now_s: float) -> None: ...


class CcBase:
    """A convenient base for a user's algorithm: every required input ignored.  Override what
    the algorithm reacts to, set ``name`` and ``cwnd_bytes``, and add ``on_loss`` to hear of
    losses (it is deliberately not defined here: the engines ask only algorithms that have
    it)."""

    name = "base"
    cwnd_bytes: float

    def on_ack(self, s: AckSample) -> None:
        pass

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        pass

    def on_timeout(self, now_s: float) -> None:
        pass

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        pass


class FixedWindow:
    """A constant window (default: 1.5 x BDP).  The baseline and a debugging aid."""

    name = "fixed"

    def __init__(self, p: CcParams, window_bytes: float | None = None) -> None:
        bdp = p.line_rate_bps / 8 * p.base_rtt_s
        self.cwnd_bytes = float(
            window_bytes if window_bytes is not None else max(1.5 * bdp, p.mtu_bytes)
        )

    def on_ack(self, s: AckSample) -> None:
        pass

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        pass

    def on_timeout(self, now_s: float) -> None:
        pass

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        pass


# -- UET 1.0 NSCC ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NsccParams:
    """The parameters of ``"uet-1.0-nscc"``: the ones an OCP libmrc CC profile names
    (``mrc_ctl_cc_nscc_cfg``: base RTT, target delay, eta, fi, fi_scale, gamma, max MD jump,
    max cwnd, quick adapt disable / gate / threshold, adjust-bytes and adjust-period
    thresholds), in our units (seconds and bytes), then our own extensions.

    ``None`` means "derive from the QP" (:meth:`resolve`, the rules of UET's htsim model, with
    the reference network kept at the lab's scale).  Set any of them through
    ``QpConfig.cc_options``, e.g. ``(("target_delay_s", 1e-3), ("disable_qa", True))``.
    """

    # -- the libmrc CC profile's parameters
    base_rtt_s: float | None = None  # configured base RTT (default: CcParams.base_rtt_s)
    target_delay_s: float | None = None  # target queueing delay (default 0.75 base RTT)
    eta: float | None = None  # bytes added once per adjust period (default 0.15 MTU x a)
    fi: float | None = None  # fair increase, bytes per RTT (default 5 MTU x a)
    fi_scale: float | None = None  # fast increase, fraction of acked bytes (default 0.25 a)
    gamma: float = 0.8  # multiplicative decrease gain
    max_md_jump: float = 0.5  # largest fraction one decrease takes off the window
    max_cwnd: float | None = None  # bytes (default 1.5 BDP, following the base RTT)
    disable_qa: bool = False  # no quick adapt
    qa_gate: int = 3  # quick adapt only below max_cwnd / 2**qa_gate delivered per window
    qa_threshold_s: float | None = None  # delay that triggers quick adapt (default 4 targets)
    adjust_bytes_threshold: float | None = None  # bytes between adjustments (default 8 MTU)
    adjust_period_threshold_s: float | None = None  # time between adjustments (default base RTT)
    # -- ours (UET's model has them as constants or derives them)
    alpha: float | None = None  # proportional increase gain, bytes per acked byte per second
    min_cwnd: float | None = None  # bytes (default 1 MTU)
    init_cwnd: float | None = None  # bytes (default max_cwnd)
    delay_alpha: float = 0.0125  # EWMA gain of the filtered delay the ECN decrease uses
    fast_increase_delay_s: float | None = None  # "near zero" delay (default reference RTT / 12)
    reference_rtt_s: float | None = None  # default: REFERENCE_BDP_BYTES at one port's rate
    delay_md: bool = True  # decrease on a standing queue without ECN (MRC's unmarked last hop)
    base_rtt_window_s: float | None = None  # windowed minimum's span (default 1000 base RTTs)
    plane_aware: bool = True  # equal plane shares: follow a plane that is persistently slower

    def resolve(self, p: CcParams) -> NsccParams:
        """Every ``None`` derived from the QP, every value checked (ValueError naming it)."""
        _check_positive("CcParams.mtu_bytes", p.mtu_bytes)
        _check_positive("CcParams.line_rate_bps", p.line_rate_bps)
        _check_positive("CcParams.base_rtt_s", p.base_rtt_s)
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name in _FLAGS:
                if not isinstance(v, bool):
                    raise ValueError(f"uet-1.0-nscc: {f.name} must be True or False, got {v!r}")
            elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise ValueError(f"uet-1.0-nscc: {f.name} must be a finite number, got {v!r}")
        mtu = p.mtu_bytes
        base = self.base_rtt_s if self.base_rtt_s is not None else p.base_rtt_s
        _check_positive("base_rtt_s", base)
        port = p.port_rate_bps or p.line_rate_bps
        ref_rtt = (
            self.reference_rtt_s
            if self.reference_rtt_s is not None
            else REFERENCE_BDP_BYTES * 8 / port
        )
        _check_positive("reference_rtt_s", ref_rtt)
        bdp = p.line_rate_bps / 8 * base
        a = bdp / REFERENCE_BDP_BYTES  # UET's scaling factor a
        target = self.target_delay_s if self.target_delay_s is not None else 0.75 * base
        _check_positive("target_delay_s", target)
        b = target / ref_rtt  # UET's scaling factor b
        max_cwnd = self.max_cwnd if self.max_cwnd is not None else 1.5 * bdp
        min_cwnd = self.min_cwnd if self.min_cwnd is not None else float(mtu)
        r = replace(
            self,
            base_rtt_s=base,
            target_delay_s=target,
            eta=self.eta if self.eta is not None else 0.15 * mtu * a,
            fi=self.fi if self.fi is not None else 5.0 * mtu * a,
            fi_scale=self.fi_scale if self.fi_scale is not None else 0.25 * a,
            max_cwnd=max_cwnd,
            qa_threshold_s=self.qa_threshold_s if self.qa_threshold_s is not None else 4 * target,
            adjust_bytes_threshold=(
                self.adjust_bytes_threshold if self.adjust_bytes_threshold is not None else 8 * mtu
            ),
            adjust_period_threshold_s=(
                self.adjust_period_threshold_s
                if self.adjust_period_threshold_s is not None
                else base
            ),
            alpha=self.alpha if self.alpha is not None else 4.0 * mtu * a * b / target,
            min_cwnd=min_cwnd,
            init_cwnd=self.init_cwnd if self.init_cwnd is not None else max_cwnd,
            fast_increase_delay_s=(
                self.fast_increase_delay_s
                if self.fast_increase_delay_s is not None
                else ref_rtt / 12
            ),
            reference_rtt_s=ref_rtt,
            base_rtt_window_s=(
                self.base_rtt_window_s if self.base_rtt_window_s is not None else 1000 * base
            ),
        )
        r._validate()
        return r

    def _validate(self) -> None:
        for name in ("qa_threshold_s", "adjust_period_threshold_s", "base_rtt_window_s"):
            _check_positive(name, getattr(self, name))
        for name in ("eta", "fi", "fi_scale", "alpha", "fast_increase_delay_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"uet-1.0-nscc: {name} must be >= 0, got {getattr(self, name)!r}")
        _check_positive("adjust_bytes_threshold", self.adjust_bytes_threshold)
        if not 0 < self.gamma <= 1:
            raise ValueError(f"uet-1.0-nscc: gamma must be in (0, 1], got {self.gamma!r}")
        if not 0 < self.max_md_jump < 1:
            raise ValueError(
                f"uet-1.0-nscc: max_md_jump must be in (0, 1) (the largest fraction one decrease "
                f"takes off the window), got {self.max_md_jump!r}"
            )
        if not 0 < self.delay_alpha <= 1:
            raise ValueError(
                f"uet-1.0-nscc: delay_alpha must be in (0, 1], got {self.delay_alpha!r}"
            )
        if self.qa_gate != int(self.qa_gate) or not 0 <= self.qa_gate <= 31:
            raise ValueError(
                f"uet-1.0-nscc: qa_gate must be an integer in [0, 31] (quick adapt when less "
                f"than max_cwnd / 2**qa_gate was delivered), got {self.qa_gate!r}"
            )
        _check_positive("min_cwnd", self.min_cwnd)
        min_cwnd, max_cwnd, init_cwnd = (
            _set(self.min_cwnd),
            _set(self.max_cwnd),
            _set(self.init_cwnd),
        )
        if max_cwnd < min_cwnd:
            raise ValueError(
                f"uet-1.0-nscc: max_cwnd ({self.max_cwnd!r}) is below min_cwnd ({self.min_cwnd!r})"
            )
        if not min_cwnd <= init_cwnd <= max_cwnd:
            raise ValueError(
                f"uet-1.0-nscc: init_cwnd ({self.init_cwnd!r}) must lie in [min_cwnd, max_cwnd] "
                f"= [{self.min_cwnd!r}, {self.max_cwnd!r}]"
            )


_FLAGS = frozenset({"disable_qa", "delay_md", "plane_aware"})
_NSCC_FIELDS = tuple(f.name for f in fields(NsccParams))


def _set(v: float | None) -> float:
    """A field :meth:`NsccParams.resolve` has filled in."""
    assert v is not None
    return v


def _check_positive(name: str, v: object) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (v > 0 and math.isfinite(v)):
        raise ValueError(f"uet-1.0-nscc: {name} must be a positive number, got {v!r}")


#: UetNscc's plane-aware mode (QPs whose planes carry equal shares; docs/design/transport.md,
#: "Equal plane shares"): gain of each plane's slow queueing-delay average, per sample of it
PLANE_SLOW_GAIN = 1 / 16
#: the mode engages when the slowest plane's slow average exceeds the median plane's by more
#: than this many targets, and lets go when the gap is back under the second
PLANE_ENGAGE_TARGETS = 1.0
PLANE_RELEASE_TARGETS = 0.5
#: while engaged, NSCC's target (the slowest plane's queueing delay), in plain targets: a
#: plane's queue spreads over its paths, and one target kept too little on each to keep them
#: busy (mrc-sim 8 x 4 at 25 Mb/s, plane 0 on two T1s, seeds 1-3: 355 Mb/s at 1 target, 380
#: at 2, 322 at 3)
PLANE_TARGET_SCALE = 2.0
#: the planes are compared (engage, release, the slowest, the QP's share) at most this often,
#: in base RTTs: per ACK the comparison costs more than the rest of NSCC together
PLANE_REVIEW_RTTS = 0.125


class _PlaneDelays:
    """What the plane-aware mode keeps per plane: the latest queueing delay, a slow average
    and when it was last heard from; whether the mode is engaged, the window NSCC runs on
    (the slowest plane's share times the plane count) and the QP's share of it."""

    __slots__ = ("n", "last_s", "slow_s", "seen_s", "engaged", "window", "ratio", "slowest",
                 "review_s")  # fmt: skip

    def __init__(self, n: int) -> None:
        self.n = n
        self.last_s = [0.0] * n
        self.slow_s = [0.0] * n
        self.seen_s = [-math.inf] * n
        self.engaged = False
        self.window = 0.0
        self.ratio = 1.0
        self.slowest = 0  # the plane the mode follows while engaged
        self.review_s = -math.inf  # when the planes are next compared


class UetNscc:
    """NSCC as UET 1.0 defines it (UET specification, NSCC; UEC's htsim model ``uec.cpp``),
    with MRC's additions (module docstring).  ``UetNscc(params, nscc_params=None, **options)``:
    options are :class:`NsccParams` fields."""

    name = "uet-1.0-nscc"

    def __init__(self, p: CcParams, nscc_params: NsccParams | None = None, **options: Any):
        unknown = sorted(set(options) - set(_NSCC_FIELDS))
        if unknown:
            raise ValueError(
                f"uet-1.0-nscc: unknown option(s) {', '.join(map(repr, unknown))}; "
                f"valid: {', '.join(_NSCC_FIELDS)}"
            )
        q = replace(nscc_params or NsccParams(), **options).resolve(p)
        self.params = q
        self.mtu = p.mtu_bytes
        self._line_Bps = p.line_rate_bps / 8
        self._max_cwnd_fixed = bool(nscc_params and nscc_params.max_cwnd is not None) or (
            "max_cwnd" in options
        )
        self.configured_base_rtt_s: float = _set(q.base_rtt_s)
        self.base_rtt_s: float = _set(q.base_rtt_s)
        self.target_delay_s: float = _set(q.target_delay_s)
        self.max_cwnd: float = _set(q.max_cwnd)
        self.min_cwnd: float = _set(q.min_cwnd)
        self.cwnd_bytes: float = _set(q.init_cwnd)
        # hot copies of the parameters
        self._alpha = _set(q.alpha)
        self._fi = _set(q.fi)
        self._fi_scale = _set(q.fi_scale)
        self._eta = _set(q.eta)
        self._gamma = q.gamma
        self._keep_min = 1.0 - q.max_md_jump
        self._qa = not q.disable_qa
        self._qa_gate_div = float(1 << int(q.qa_gate))
        self._qa_threshold = _set(q.qa_threshold_s)
        self._adj_bytes = _set(q.adjust_bytes_threshold)
        self._adj_period = _set(q.adjust_period_threshold_s)
        self._delay_alpha = q.delay_alpha
        self._fast_delay = _set(q.fast_increase_delay_s)
        self._delay_md = q.delay_md
        self._half_window = _set(q.base_rtt_window_s) / 2
        # state
        self.avg_delay_s = 0.0  # filtered queueing delay (the ECN decrease's magnitude)
        self.delay_s = 0.0  # last per-ACK queueing delay
        self._inc = 0.0  # increase collected since the last adjustment (bytes^2)
        self._received = 0  # bytes acknowledged since the last adjustment
        self._last_adjust_s = -math.inf
        self._last_dec_s = -math.inf
        self._fi_count = 0  # bytes acknowledged in a row with near-zero delay
        self._fast = False  # in fast increase
        # quick adapt window (base RTT + target): delivered bytes, lowest delay, triggers
        self._win_end_s: float | None = None
        self._achieved = 0
        self._win_min_delay = math.inf
        self._trigger_qa = False
        self._to_ignore = 0.0  # after quick adapt: ECN-marked feedback for this many bytes
        self._ignored = 0.0  # is about packets sent before it, and is ignored
        self.standing_queue = False  # the last window's every delay sample was above target
        # windowed minimum RTT: two half-window buckets, the older seeded with the configured
        self._rtt_min_cur = math.inf
        self._rtt_min_prev = _set(q.base_rtt_s)
        self._rtt_epoch_end_s: float | None = None
        # counters (benchmarks, tests)
        self.fast_increases = 0
        self.ecn_decreases = 0
        self.delay_decreases = 0
        self.quick_adapts = 0
        self.trims = 0
        self.timeouts = 0
        self.penalty_cuts = 0
        # plane-aware mode (equal plane shares): per-plane delays, None when off
        self._dec_extra_s = 0.0  # decreases spaced by base RTT + this (the slowest plane's queue)
        self._plain_target_s = self.target_delay_s
        self._planes: _PlaneDelays | None = (
            _PlaneDelays(p.planes) if q.plane_aware and p.equal_shares and p.planes > 1 else None
        )
        self.plane_engagements = 0

    # -- compatibility with the QP's and the tests' view --------------------------------------

    @property
    def min_rtt_s(self) -> float:
        """The base RTT in use (the windowed minimum)."""
        return self.base_rtt_s

    @property
    def decreases(self) -> int:
        return self.ecn_decreases + self.delay_decreases + self.quick_adapts

    # -- inputs ------------------------------------------------------------------------------

    def on_ack(self, s: AckSample) -> None:
        if self._planes is not None:
            self._on_ack_planes(self._planes, s)
            return
        rtt = s.rtt_s
        if rtt is None:
            self._react(s, None)
            return
        self._sample_rtt(rtt, s.now_s)
        delay = rtt - self.base_rtt_s
        self._react(s, delay if delay > 0.0 else 0.0)

    def _react(self, s: AckSample, delay: float | None) -> None:
        """NSCC's answer to one acknowledgment whose queueing delay is ``delay`` (None: the
        ACK carried no RTT sample)."""
        now = s.now_s
        acked = s.acked_bytes
        self._received += acked
        self._achieved += acked
        self._ignored += acked
        if delay is not None:
            self._filter(delay, s.ecn)
            if delay < self._win_min_delay:
                self._win_min_delay = delay
        else:
            delay = self.avg_delay_s
        self.delay_s = delay
        if self._window(False, s.ecn, delay, now):
            return
        target = self.target_delay_s
        if not s.ecn:
            if delay >= target:
                self._fast = False
                self._fi_count = 0
                if not self.standing_queue:  # fair increase (held back by a standing queue)
                    self._inc += self._fi * acked
            elif not self._fast_increase(acked, delay):  # proportional increase
                self._inc += self._alpha * acked * (target - delay)
        elif delay >= target:
            self._md(self.avg_delay_s, now, ecn=True)
        # ECN below target: no change, the EV layer moves off the marked path
        self._clamp()
        if self._received > self._adj_bytes or now - self._last_adjust_s > self._adj_period:
            self._fulfill(now)
            self._clamp()

    # -- equal plane shares: the slowest plane sets the pace ----------------------------------

    def _on_ack_planes(self, pl: _PlaneDelays, s: AckSample) -> None:
        """on_ack with per-plane delays: engaged, NSCC runs on the slowest plane's window
        scaled to the whole QP (``pl.window``) and hears that plane's delay on every ACK; the
        QP's window is its share ``pl.ratio`` of it."""
        if pl.engaged:
            self.cwnd_bytes = pl.window
        rtt = s.rtt_s
        if rtt is None:
            self._react(s, None)
        else:
            now = s.now_s
            self._sample_rtt(rtt, now)
            delay = rtt - self.base_rtt_s
            if delay < 0.0:
                delay = 0.0
            if 0 <= s.plane < pl.n:
                delay = self._plane_delay(pl, s.plane, delay, now)
            self._react(s, delay)
        if pl.engaged:
            self._share_out(pl)

    def _plane_delay(self, pl: _PlaneDelays, plane: int, delay: float, now: float) -> float:
        """Record ``delay`` for ``plane``; (dis)engage; the delay NSCC acts on.  Which planes
        are live, the gap, the slowest plane and the QP's share are looked at again at most
        every PLANE_REVIEW_RTTS base RTTs (compared on every ACK, they made an ACK cost 4.5x
        plain NSCC's: 13-15 against 3 us; reviewed, 3.7-4.4 against 2.9 us; 200,000 on_ack
        calls of 8 planes, the 2-core machine, 2026-11-27); the slowest plane's latest delay
        is read per ACK."""
        last = pl.last_s
        last[plane] = delay
        pl.slow_s[plane] += PLANE_SLOW_GAIN * (delay - pl.slow_s[plane])
        pl.seen_s[plane] = now
        if now >= pl.review_s:
            self._review_planes(pl, now)
        if not pl.engaged:
            return delay
        q = last[pl.slowest]
        self._dec_extra_s = q  # the slowest plane's window is cut at most once per its RTT
        return delay if delay > q else q

    def _review_planes(self, pl: _PlaneDelays, now: float) -> None:
        base = self.base_rtt_s
        pl.review_s = now + PLANE_REVIEW_RTTS * base
        last, seen = pl.last_s, pl.seen_s
        # planes heard from lately (a plane out of the rotation keeps no say)
        live = [i for i in range(pl.n) if now - seen[i] <= max(4 * base, 2 * (base + last[i]))]
        target = self._plain_target_s
        if len(live) < 2:
            gap = 0.0
        else:
            slow = sorted(pl.slow_s[i] for i in live)
            gap = slow[-1] - slow[len(slow) // 2]
        if not pl.engaged:
            if gap <= PLANE_ENGAGE_TARGETS * target:
                return
            pl.engaged = True  # the window in use becomes the slowest plane's, scaled
            self.plane_engagements += 1
            self.target_delay_s = PLANE_TARGET_SCALE * target
        elif gap < PLANE_RELEASE_TARGETS * target or len(live) < 2:
            pl.engaged = False  # NSCC goes on from the scaled window, as plain NSCC
            pl.ratio = 1.0
            self.target_delay_s = target
            self._dec_extra_s = 0.0
            return
        pl.slowest = max(live, key=pl.slow_s.__getitem__)
        q = last[pl.slowest]
        # at one rate per plane, each plane holds rate x its RTT: the QP's share of
        # planes x the slowest plane's is the mean RTT over the slowest's
        total = 0.0  # a plain running sum (sum() of floats compensates from Python 3.12; the
        for i in live:  # C twin, csrc/mrc_nscc.c, adds in this order and must match it)
            total += last[i]
        mean = total / len(live)
        pl.ratio = min(1.0, (base + mean) / (base + q))

    def _share_out(self, pl: _PlaneDelays) -> None:
        pl.window = self.cwnd_bytes
        c = pl.window * pl.ratio
        self.cwnd_bytes = c if c > self.min_cwnd else self.min_cwnd

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        """A trimmed packet: a full queue on its path.  UET: one packet off the window, the
        filtered delay pushed towards a queue of one base RTT, quick adapt armed."""
        pl = self._planes
        if pl is not None and pl.engaged:
            self.cwnd_bytes = pl.window
        self.trims += 1
        mtu = self.mtu
        self._ignored += mtu
        self._filter(self.configured_base_rtt_s, True)
        self._trigger_qa = True
        if not self._window(True, True, 0.0, now_s):
            self.cwnd_bytes -= mtu
            self._clamp()
        if pl is not None and pl.engaged:
            self._share_out(pl)

    def on_timeout(self, now_s: float) -> None:
        """A timed-out packet leaves the window's count (UET's model takes its bytes off the
        window); a dead path is the EV layer's business, so nothing more."""
        pl = self._planes
        if pl is not None and pl.engaged:
            self.cwnd_bytes = pl.window
        self.timeouts += 1
        self.cwnd_bytes -= self.mtu
        self._clamp()
        if pl is not None and pl.engaged:
            self._share_out(pl)

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        """rcv_cwnd_pen (0-127; 0: none) from the receiver, whose tracking window is filling
        or whose own last hop trims (an incast): the window is capped at ``(1 - pen/128)`` of
        ``max_cwnd``.  (UET's model instead takes ``acked * (1 - rcv_wnd_pen/255)`` off per
        ACK, 255 meaning none; on our incasts that cost goodput and shortened no queue, as the
        senders already answer the same trims one by one: docs/design/transport.md.)"""
        if penalty <= 0:
            return
        pl = self._planes
        if pl is not None and pl.engaged:
            self.cwnd_bytes = pl.window
        cap = self.max_cwnd * (1.0 - min(penalty, 127) / 128.0)
        if self.cwnd_bytes > cap:
            self.cwnd_bytes = cap
            self.penalty_cuts += 1
            self._clamp()
        if pl is not None and pl.engaged:
            self._share_out(pl)

    # -- the pieces ----------------------------------------------------------------------------

    def _sample_rtt(self, rtt: float, now: float) -> None:
        """The base RTT is the minimum of the last half to whole ``base_rtt_window_s``: it
        falls at once and can rise again when a longer path stays (two half-window buckets)."""
        end = self._rtt_epoch_end_s
        if end is None or now >= end:
            if end is not None:
                self._rtt_min_prev = self._rtt_min_cur
                self._rtt_min_cur = math.inf
            self._rtt_epoch_end_s = now + self._half_window
        if rtt < self._rtt_min_cur:
            self._rtt_min_cur = rtt
        prev = self._rtt_min_prev
        cur = self._rtt_min_cur
        base = cur if cur < prev else prev
        if base != self.base_rtt_s:
            self.base_rtt_s = base
            if not self._max_cwnd_fixed:
                # follows a longer path up, but never below the configured base RTT's: a
                # lucky sample under the declared unloaded RTT (a software NIC's RTT varies
                # with its CPU) must not cap the window below the path's real BDP
                ref = base if base > self.configured_base_rtt_s else self.configured_base_rtt_s
                self.max_cwnd = max(1.5 * self._line_Bps * ref, self.min_cwnd)

    def _filter(self, delay: float, ecn: bool) -> None:
        """UET's filtered delay: an EWMA; an unmarked sample above target (a queue that is
        draining, or on another path) pulls it towards a quarter base RTT instead."""
        a = self._delay_alpha
        if not ecn and delay > self.target_delay_s:
            delay = 0.25 * self.base_rtt_s
        self.avg_delay_s += a * (delay - self.avg_delay_s)

    def _fast_increase(self, acked: int, delay: float) -> bool:
        """After a whole window of acknowledgments with near-zero delay: ``cwnd += fi_scale *
        acked`` straight away, until the delay rises."""
        if delay < self._fast_delay:
            self._fi_count += acked
            if self._fast or self._fi_count > self.cwnd_bytes:
                self.cwnd_bytes += acked * self._fi_scale
                self._fast = True
                self.fast_increases += 1
                return True
        else:
            self._fi_count = 0
        self._fast = False
        return False

    def _md(self, delay: float, now: float, ecn: bool) -> None:
        """Multiplicative decrease on ``delay`` (the filtered delay for ECN, the window's
        lowest for the delay-based decrease), at most once per base RTT."""
        self._fast = False
        self._fi_count = 0
        target = self.target_delay_s
        if delay <= target or now - self._last_dec_s <= self.base_rtt_s + self._dec_extra_s:
            return
        keep = 1.0 - self._gamma * (delay - target) / delay
        self.cwnd_bytes *= keep if keep > self._keep_min else self._keep_min
        self._last_dec_s = now
        if ecn:
            self.ecn_decreases += 1
        else:
            self.delay_decreases += 1
        self._clamp()

    def _window(self, loss: bool, ecn: bool, delay: float, now: float) -> bool:
        """The quick-adapt window (``base_rtt + target``).  Returns True when this feedback is
        consumed here (quick adapt ran, or ECN about packets sent before it)."""
        done = False
        if self._qa and ecn and self._ignored < self._to_ignore:
            done = True
        elif self._win_end_s is None or now > self._win_end_s:
            if self._win_end_s is not None:
                lowest = self._win_min_delay
                if lowest != math.inf:
                    self.standing_queue = lowest > self.target_delay_s
                if (
                    self._qa
                    and (self._trigger_qa or loss or delay > self._qa_threshold)
                    and self._achieved < self.max_cwnd / self._qa_gate_div
                ):
                    self._to_ignore = self.cwnd_bytes  # about what is in flight
                    self._ignored = 0.0
                    self.cwnd_bytes = max(float(self._achieved), self.min_cwnd)
                    self._trigger_qa = False
                    self.quick_adapts += 1
                    self._last_dec_s = now
                    done = True
                elif self._delay_md and self.standing_queue:
                    self._md(lowest, now, ecn=False)
            self._achieved = 0
            self._win_min_delay = math.inf
            self._win_end_s = now + self.base_rtt_s + self.target_delay_s
        if done:
            self._inc = 0.0
            self._received = 0
        return done

    def _fulfill(self, now: float) -> None:
        self.cwnd_bytes += self._inc / self.cwnd_bytes
        if now - self._last_adjust_s >= self._adj_period:
            self.cwnd_bytes += self._eta
            self._last_adjust_s = now
        self._inc = 0.0
        self._received = 0

    def _clamp(self) -> None:
        c = self.cwnd_bytes
        if c > self.max_cwnd:
            self.cwnd_bytes = self.max_cwnd
        elif c < self.min_cwnd:
            self.cwnd_bytes = self.min_cwnd


# -- the previous NSCC -------------------------------------------------------------------------


class LegacyNscc:
    """The project's first NSCC (until 2026-11), kept as ``"nscc-2026.11"`` so benchmarks can run
    it beside :class:`UetNscc`: four quadrants on the raw per-ACK delay, a target with a floor of
    a few bottleneck packet times, decreases spaced by the smoothed RTT, timeouts ignored and a
    base RTT that only falls (docs/design/transport.md, "The previous NSCC")."""

    name = "nscc-2026.11"

    def __init__(
        self,
        p: CcParams,
        *,
        target_qdelay_s: float | None = None,
        target_rtt_frac: float = 0.5,
        target_pkts: float = 4.0,
        bottleneck_bps: float | None = None,
        pi_gain: float = 0.5,
        fi_mtus: float = 1.0,
        md_gain: float = 1.0,
        md_max: float = 0.5,
        trim_md: float = 0.2,
        init_bdp: float = 1.0,
        max_bdp: float = 2.0,
        min_mtus: float = 1.0,
    ) -> None:
        self.mtu = p.mtu_bytes
        self.base_rtt_s = p.base_rtt_s
        self.line_rate_bps = p.line_rate_bps
        bdp = p.line_rate_bps / 8 * p.base_rtt_s
        port = p.port_rate_bps if p.port_rate_bps else p.line_rate_bps
        self.pkt_bits = (p.mtu_bytes + HEADER_BYTES) * 8
        self.port_pkt_s = self.pkt_bits / port  # one packet's serialisation on a NIC port
        self.bottleneck_bps = bottleneck_bps
        self.target_rtt_frac = target_rtt_frac
        self.target_pkts = target_pkts
        self._fixed_target = target_qdelay_s  # None: derived, and refreshed as min_rtt falls
        self.target_qdelay_s = 0.0
        self.pi_gain = pi_gain
        self.fi_mtus = fi_mtus
        self.md_gain = md_gain
        self.md_max = md_max
        self.trim_md = trim_md
        self.max_cwnd = max(max_bdp * bdp, 2 * p.mtu_bytes)
        self.min_cwnd = min_mtus * p.mtu_bytes
        self.cwnd_bytes = min(max(init_bdp * bdp, self.min_cwnd), self.max_cwnd)
        self._last_md_s = -1e30
        self.min_rtt_s = p.base_rtt_s
        # smoothed RTT (RFC 6298 gain): a decrease shows in the feedback one *current* RTT
        # later, so decreases are spaced by it, not by the unloaded min RTT
        self.srtt_s = p.base_rtt_s
        self.decreases = 0
        self._retarget()

    def bottleneck_pkt_s(self) -> float:
        """One packet's serialisation time at the path's bottleneck: from ``bottleneck_bps``
        when configured, else bounded from the base RTT (a store-and-forward path serialises a
        data packet on the sending port, at the bottleneck and on the receiving port, so
        ``min_rtt - 2 * port_pkt_s`` is an upper bound of the bottleneck's share)."""
        if self.bottleneck_bps:
            return max(self.pkt_bits / self.bottleneck_bps, self.port_pkt_s)
        return max(self.port_pkt_s, self.min_rtt_s - 2 * self.port_pkt_s)

    def _retarget(self) -> None:
        if self._fixed_target is not None:
            self.target_qdelay_s = self._fixed_target
        else:
            self.target_qdelay_s = max(
                self.target_rtt_frac * self.min_rtt_s, self.target_pkts * self.bottleneck_pkt_s()
            )

    def _clamp(self) -> None:
        c = self.cwnd_bytes
        if c > self.max_cwnd:
            self.cwnd_bytes = self.max_cwnd
        elif c < self.min_cwnd:
            self.cwnd_bytes = self.min_cwnd

    def on_ack(self, s: AckSample) -> None:
        rtt = s.rtt_s
        if rtt is None:
            return
        if rtt < self.min_rtt_s:
            self.min_rtt_s = rtt
            self._retarget()
        self.srtt_s += 0.125 * (rtt - self.srtt_s)
        qdelay = rtt - self.min_rtt_s
        target = self.target_qdelay_s
        if not s.ecn:
            if qdelay < target:  # proportional increase: faster the emptier the queue
                self.cwnd_bytes += self.pi_gain * (1.0 - qdelay / target) * s.acked_bytes
            else:  # fair increase: about fi_mtus MTU per RTT
                self.cwnd_bytes += self.fi_mtus * self.mtu * s.acked_bytes / self.cwnd_bytes
        elif qdelay >= target and s.now_s - self._last_md_s >= self.srtt_s:
            # multiplicative decrease, at most once per RTT: with spraying some packet sees
            # a queue in nearly every RTT, and decreases spaced by the unloaded RTT (before
            # the first one can show) stacked up to a collapse (measured on the lab's
            # permutation: ~one per min RTT, goodput 0.86 of capacity; 0.88-0.89 spaced
            # by the current RTT)
            cut = min(self.md_max, self.md_gain * (qdelay - target) / max(qdelay, 1e-12))
            self.cwnd_bytes *= 1.0 - cut
            self._last_md_s = s.now_s
            self.decreases += 1
        # ECN with a short queue: transient, no change
        self._clamp()

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        # A trim is a queue overflow: a firmer signal than ECN; decrease once per min RTT
        # (faster than ECN's once per RTT: an incast's last hop marks nothing and trims)
        if now_s - self._last_md_s >= self.min_rtt_s:
            self.cwnd_bytes *= 1.0 - self.trim_md
            self._last_md_s = now_s
            self.decreases += 1
            self._clamp()

    def on_timeout(self, now_s: float) -> None:
        # In MRC a timeout means a dead path (congestion trims, it does not drop): the EV
        # state machine handles it; the window is left alone.
        pass

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        # rcv_cwnd_pen (0-127) from the receiver: cap the window at (1 - pen/128) of its max.
        if penalty > 0:
            cap = self.max_cwnd * (1.0 - penalty / 128.0)
            if self.cwnd_bytes > cap:
                self.cwnd_bytes = cap
                self._clamp()


CcFactory = Callable[..., CongestionControl]
_REGISTRY: dict[str, CcFactory] = {}


def register_cc(name: str, factory: CcFactory) -> None:
    """Make an algorithm available by name: ``factory(params, **options) -> CongestionControl``.
    Names are letters, digits, ``-``, ``_`` and ``.`` (``"uet-1.0-nscc"``)."""
    if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
        raise ValueError(f"bad congestion control name {name!r}")
    _REGISTRY[name] = factory


def factory(name: str) -> CcFactory:
    """The factory registered as ``name``; ValueError naming the available ones if none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown congestion control {name!r}; available: {', '.join(sorted(_REGISTRY))}"
        ) from None


def make_cc(name: str, params: CcParams, **options: object) -> CongestionControl:
    return factory(name)(params, **options)


def available() -> list[str]:
    return sorted(_REGISTRY)


#: kept for code that named the class; ``"nscc"`` is UET's NSCC
Nscc = UetNscc

register_cc("uet-1.0-nscc", UetNscc)
register_cc("nscc", UetNscc)  # the default of QpConfig.cc (a contract): UET's NSCC
register_cc("nscc-2026.11", LegacyNscc)
register_cc("fixed", FixedWindow)
