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

The constants are the paper's, in hardware time; :meth:`DcqcnParams.scaled` multiplies every
time by the lab's slowdown (a 100 Mb/s lab port standing for a 100 Gb/s port runs 1000x
slower: 50 us becomes 50 ms) and keeps bytes as they are (rate x time is invariant).
docs/rocev2.md has the table and the mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# Hardware values (DCQCN paper; R_AI/R_HAI as fractions of the line rate, see docs/rocev2.md)
CNP_INTERVAL_S = 50e-6  # NP: at most one CNP per flow per 50 us
INCREASE_TIMER_S = 55e-6  # RP: rate-increase timer
ALPHA_TIMER_S = 55e-6  # RP: alpha decay period without CNP
RATE_REDUCE_PERIOD_S = 4e-6  # RP: at most one cut per 4 us (ConnectX rate_reduce_monitor_period)
BYTE_COUNTER_BYTES = 10_000_000  # RP: byte counter (10 MB)
FAST_RECOVERY_STEPS = 5  # F
G = 1 / 256  # alpha gain
AI_FRACTION = 1e-3  # R_AI = 40 Mb/s on the paper's 40 Gb/s links
HAI_FRACTION = 1e-2  # R_HAI = 10 x R_AI (ConnectX defaults 5 / 50 Mb/s keep the same ratio)
MIN_RATE_FRACTION = 1e-3  # floor of Rc
REFERENCE_PORT_BPS = 100e9  # what one lab port stands for (a 100 Gb/s plane port)


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

    @classmethod
    def scaled(cls, line_rate_bps: float, lab_scale: float, **overrides: Any) -> DcqcnParams:
        """The paper's constants with every time multiplied by ``lab_scale``."""
        p = cls(
            line_rate_bps=line_rate_bps,
            increase_timer_s=INCREASE_TIMER_S * lab_scale,
            alpha_timer_s=ALPHA_TIMER_S * lab_scale,
            rate_reduce_period_s=RATE_REDUCE_PERIOD_S * lab_scale,
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
        self.target_bps = self.rate_bps
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
    "Dcqcn",
    "DcqcnParams",
    "FAST_RECOVERY_STEPS",
    "G",
    "HAI_FRACTION",
    "INCREASE_TIMER_S",
    "MIN_RATE_FRACTION",
    "RATE_REDUCE_PERIOD_S",
    "REFERENCE_PORT_BPS",
]
