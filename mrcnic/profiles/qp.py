"""libmrc's per-QP options in their units, mapped onto QpConfig; the limits a device offers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mrcnic.profiles.limits import (
    ACK_TIMEOUT_BASE_S,
    LAB_TIME_SCALE,
    MAX_ACK_TIMEOUT,
    MAX_EXP_RETRIES,
    MAX_LINEAR_RETRIES,
    MAX_WIMM_INFLIGHT,
    MAX_WINDOW_UNITS,
    WINDOW_UNIT_PSNS,
)
from mrcnic.transport.qp_types import QpConfig


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
