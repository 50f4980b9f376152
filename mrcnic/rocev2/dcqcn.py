"""DCQCN, the congestion control deployed with RoCEv2 (Zhu et al., SIGCOMM 2015), as the
reaction point (RP) of one QP: a rate, cut on each CNP and recovered in stages.

On a CNP (at most one cut per ``rate_reduce_period_s``)::

    Rt = Rc;  Rc = max(Rmin, Rc * (1 - alpha / 2));  alpha = (1 - g) * alpha + g
    T = BC = 0 (both counters restart; so do the increase timer and the byte counter)

``alpha`` decays by ``(1 - g)`` every ``alpha_timer_s`` without a CNP.  A rate-increase
*event* happens every ``increase_timer_s`` (T += 1) and every ``byte_counter_bytes`` sent
(BC += 1); each event then does::

    max(T, BC) <  F        fast recovery     Rc = (Rt + Rc) / 2
    min(T, BC) >= F        hyper increase    Rt += (min(T, BC) - F + 1) * R_HAI;  Rc = (Rt + Rc) / 2
    otherwise              additive increase Rt += R_AI;  Rc = (Rt + Rc) / 2

with Rt capped at the line rate.  Once Rt is the line rate and Rc is within one R_AI of it,
Rc snaps to the line rate and the algorithm goes idle (a real RP's timers keep ticking with
no effect).  Everything is computed lazily from the time passed in, so the QP needs no timer
of its own for DCQCN: the pacing deadline is enough.

Two sets of constants, in hardware time (``PROFILES``): ``connectx``, the defaults ConnectX
NICs ship (the default: the baseline is RoCEv2 as deployed), and ``paper``, the DCQCN paper's.
Besides the numbers they differ in one rule: on a cut the paper always sets ``Rt = Rc``;
ConnectX (``clamp_tgt_rate`` 0, ``clamp_tgt_rate_after_time_inc`` 1) does so only if the rate
was increased (by the timer or the byte counter) since the previous cut, so back-to-back cuts
keep the target (``clamp_target_always``).
:meth:`DcqcnParams.scaled` multiplies every time by the lab's slowdown (a 100 Mb/s lab port
standing for a 100 Gb/s port runs 1000x slower: 50 us becomes 50 ms) and keeps bytes as they
are (rate x time is invariant).  docs/design/rocev2.md has the table and the mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# Hardware values of the DCQCN paper (R_AI/R_HAI as fractions of the line rate, docs/design/rocev2.md)
CNP_INTERVAL_S = 50e-6  # NP: at most one CNP per flow per 50 us
INCREASE_TIMER_S = 55e-6  # RP: rate-increase timer
ALPHA_TIMER_S = 55e-6  # RP: alpha decay period without CNP
RATE_REDUCE_PERIOD_S = 4e-6  # RP: at most one cut per 4 us (ConnectX rate_reduce_monitor_period)
BYTE_COUNTER_BYTES = 10_000_000  # RP: byte counter (10 MB)
FAST_RECOVERY_STEPS = 5  # F
G = 1 / 256  # alpha gain
AI_FRACTION = 1e-3  # R_AI = 40 Mb/s on the paper's 40 Gb/s links
HAI_FRACTION = 1e-2  # R_HAI = 10 x R_AI (ConnectX defaults 5 / 50 Mb/s keep the same ratio)
MIN_RATE_FRACTION = 1e-3  # floor of Rc (both profiles: keeps a throttled QP's ACK clock alive)
REFERENCE_PORT_BPS = 100e9  # what one lab port stands for (a 100 Gb/s plane port)

# ConnectX defaults (mlx5 sysfs ecn params, firmware defaults), at the 100 Gb/s reference port
CX_CNP_INTERVAL_S = 4e-6  # NP min_time_between_cnps
CX_INCREASE_TIMER_S = 300e-6  # rpg_time_reset
CX_ALPHA_TIMER_S = 1e-6  # dce_tcp_rtt: alpha is updated every 1 us
CX_BYTE_COUNTER_BYTES = 32767  # rpg_byte_reset, "given in bytes" (mlxconfig's description)
CX_FAST_RECOVERY_STEPS = 1  # rpg_threshold
CX_G = 5 / 1024  # dce_tcp_g 1019: alpha <- alpha * 1019/1024 (+ 5/1024 with a CNP)
CX_AI_FRACTION = 5e6 / REFERENCE_PORT_BPS  # rpg_ai_rate 5 Mb/s
CX_HAI_FRACTION = 50e6 / REFERENCE_PORT_BPS  # rpg_hai_rate 50 Mb/s


@dataclass(frozen=True, slots=True)
class DcqcnProfile:
    """One named set of DCQCN constants in hardware time (see ``PROFILES``)."""

    cnp_interval_s: float  # NP: at most one CNP per QP per this
    increase_timer_s: float
    alpha_timer_s: float
    rate_reduce_period_s: float
    byte_counter_bytes: int
    fast_recovery_steps: int
    g: float
    ai_fraction: float
    hai_fraction: float
    clamp_target_always: bool  # Rt = Rc on every cut (paper), or only after an increase


PROFILES: dict[str, DcqcnProfile] = {
    "connectx": DcqcnProfile(
        cnp_interval_s=CX_CNP_INTERVAL_S,
        increase_timer_s=CX_INCREASE_TIMER_S,
        alpha_timer_s=CX_ALPHA_TIMER_S,
        rate_reduce_period_s=RATE_REDUCE_PERIOD_S,
        byte_counter_bytes=CX_BYTE_COUNTER_BYTES,
        fast_recovery_steps=CX_FAST_RECOVERY_STEPS,
        g=CX_G,
        ai_fraction=CX_AI_FRACTION,
        hai_fraction=CX_HAI_FRACTION,
        clamp_target_always=False,
    ),
    "paper": DcqcnProfile(
        cnp_interval_s=CNP_INTERVAL_S,
        increase_timer_s=INCREASE_TIMER_S,
        alpha_timer_s=ALPHA_TIMER_S,
        rate_reduce_period_s=RATE_REDUCE_PERIOD_S,
        byte_counter_bytes=BYTE_COUNTER_BYTES,
        fast_recovery_steps=FAST_RECOVERY_STEPS,
        g=G,
        ai_fraction=AI_FRACTION,
        hai_fraction=HAI_FRACTION,
        clamp_target_always=True,
    ),
}
DEFAULT_PROFILE = "connectx"


def profile(name: str) -> DcqcnProfile:
    """The named constants; ValueError names the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown DCQCN profile {name!r} (one of {', '.join(sorted(PROFILES))})"
        ) from None


@dataclass(frozen=True, slots=True)
class DcqcnParams:
    """The RP's constants, already in lab time (see :meth:`scaled`)."""

    line_rate_bps: float
    increase_timer_s: float
    alpha_timer_s: float
    rate_reduce_period_s: float
    byte_counter_bytes: int = BYTE_COUNTER_BYTES
    fast_recovery_steps: int = FAST_RECOVERY_STEPS
    g: float = G
    ai_rate_bps: float = 0.0  # 0: AI_FRACTION of the line rate
    hai_rate_bps: float = 0.0  # 0: HAI_FRACTION of the line rate
    min_rate_bps: float = 0.0  # 0: MIN_RATE_FRACTION of the line rate
    clamp_target_always: bool = True  # False: Rt = Rc on a cut only after an increase

    @classmethod
    def scaled(
        cls,
        line_rate_bps: float,
        lab_scale: float,
        profile_name: str = DEFAULT_PROFILE,
        **overrides: Any,
    ) -> DcqcnParams:
        """The named profile's constants with every time multiplied by ``lab_scale``."""
        pr = profile(profile_name)
        p = cls(
            line_rate_bps=line_rate_bps,
            increase_timer_s=pr.increase_timer_s * lab_scale,
            alpha_timer_s=pr.alpha_timer_s * lab_scale,
            rate_reduce_period_s=pr.rate_reduce_period_s * lab_scale,
            byte_counter_bytes=pr.byte_counter_bytes,
            fast_recovery_steps=pr.fast_recovery_steps,
            g=pr.g,
            ai_rate_bps=pr.ai_fraction * line_rate_bps,
            hai_rate_bps=pr.hai_fraction * line_rate_bps,
            clamp_target_always=pr.clamp_target_always,
        )
        return replace(p, **overrides) if overrides else p

    @property
    def r_ai(self) -> float:
        return self.ai_rate_bps or AI_FRACTION * self.line_rate_bps

    @property
    def r_hai(self) -> float:
        return self.hai_rate_bps or HAI_FRACTION * self.line_rate_bps

    @property
    def r_min(self) -> float:
        return self.min_rate_bps or MIN_RATE_FRACTION * self.line_rate_bps


class Dcqcn:
    """The reaction point of one QP.  ``rate_bps`` is the current rate Rc."""

    __slots__ = (
        "p",
        "rate_bps",
        "target_bps",
        "alpha",
        "active",
        "t_count",
        "bc_count",
        "_bytes",
        "_next_inc_s",
        "_alpha_ts",
        "_last_cut_s",
        "_raised",
        "cuts",
        "ignored_cnps",
        "increases",
        "min_seen_bps",
    )

    def __init__(self, params: DcqcnParams) -> None:
        self.p = params
        self.rate_bps = params.line_rate_bps  # DCQCN starts at line rate
        self.target_bps = params.line_rate_bps
        self.alpha = 1.0
        self.active = False  # below line rate: increase events pending
        self.t_count = 0
        self.bc_count = 0
        self._bytes = 0
        self._next_inc_s = 0.0
        self._alpha_ts: float | None = None  # alpha is exact as of this CNP (None: initial)
        self._last_cut_s = float("-inf")
        self._raised = False  # an increase event since the last cut
        self.cuts = 0
        self.ignored_cnps = 0
        self.increases = 0
        self.min_seen_bps = params.line_rate_bps

    def on_cnp(self, now_s: float) -> bool:
        """A CNP arrived; returns True if the rate was cut."""
        p = self.p
        self.advance(now_s)
        if now_s - self._last_cut_s < p.rate_reduce_period_s:
            self.ignored_cnps += 1
            return False
        self.alpha = self.alpha_at(now_s)
        if p.clamp_target_always or self._raised:
            self.target_bps = self.rate_bps
        self._raised = False
        self.rate_bps = max(p.r_min, self.rate_bps * (1 - self.alpha / 2))
        self.alpha = (1 - p.g) * self.alpha + p.g
        self._alpha_ts = now_s
        self._last_cut_s = now_s
        self.t_count = self.bc_count = 0
        self._bytes = 0
        self._next_inc_s = now_s + p.increase_timer_s
        self.active = True
        self.cuts += 1
        if self.rate_bps < self.min_seen_bps:
            self.min_seen_bps = self.rate_bps
        return True

    def alpha_at(self, now_s: float) -> float:
        """alpha with the decays of every whole alpha period since the last CNP applied."""
        if self._alpha_ts is None:
            return self.alpha  # the initial alpha holds until the first CNP
        periods = int((now_s - self._alpha_ts) / self.p.alpha_timer_s)
        return self.alpha * (1 - self.p.g) ** periods if periods > 0 else self.alpha

    def on_sent(self, nbytes: int, now_s: float) -> None:
        """Bytes left at the current rate: the byte counter's events."""
        if not self.active:
            return
        self.advance(now_s)
        self._bytes += nbytes
        bc = self.p.byte_counter_bytes
        while self.active and self._bytes >= bc:
            self._bytes -= bc
            self.bc_count += 1
            self._increase()

    def advance(self, now_s: float) -> None:
        """Run every increase-timer event due by ``now_s``."""
        period = self.p.increase_timer_s
        while self.active and self._next_inc_s <= now_s:
            self._next_inc_s += period
            self.t_count += 1
            self._increase()

    def _increase(self) -> None:
        p = self.p
        self._raised = True
        line = p.line_rate_bps
        t, bc, f = self.t_count, self.bc_count, p.fast_recovery_steps
        if max(t, bc) < f:
            pass  # fast recovery: towards the rate before the cut
        elif min(t, bc) >= f:
            self.target_bps += (min(t, bc) - f + 1) * p.r_hai
        else:
            self.target_bps += p.r_ai
        if self.target_bps > line:
            self.target_bps = line
        self.rate_bps = (self.target_bps + self.rate_bps) / 2
        self.increases += 1
        if self.target_bps >= line and line - self.rate_bps <= p.r_ai:
            self.rate_bps = line
            self.active = False


__all__ = [
    "ALPHA_TIMER_S",
    "AI_FRACTION",
    "BYTE_COUNTER_BYTES",
    "CNP_INTERVAL_S",
    "DEFAULT_PROFILE",
    "Dcqcn",
    "DcqcnParams",
    "DcqcnProfile",
    "FAST_RECOVERY_STEPS",
    "G",
    "HAI_FRACTION",
    "INCREASE_TIMER_S",
    "MIN_RATE_FRACTION",
    "PROFILES",
    "RATE_REDUCE_PERIOD_S",
    "REFERENCE_PORT_BPS",
    "profile",
]
