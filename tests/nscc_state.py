"""UetNscc's whole state as a dict, every float by its bits (NaN == NaN, -0.0 != 0.0) and
every other value with its type (True != 1): what
the C NSCC (csrc/mrc_nscc.c) is held to, alone (tests/unit/test_nscc_c.py) and in the
engines (tests/unit/test_tx_engine.py)."""

from __future__ import annotations

from typing import Any

PLAIN = ("cwnd_bytes", "base_rtt_s", "target_delay_s", "max_cwnd", "avg_delay_s", "delay_s",
         "_inc", "_received", "_last_adjust_s", "_last_dec_s", "_fi_count", "_fast",
         "_win_end_s", "_achieved", "_win_min_delay", "_trigger_qa", "_to_ignore", "_ignored",
         "standing_queue", "_rtt_min_cur", "_rtt_min_prev", "_rtt_epoch_end_s",
         "_dec_extra_s", "fast_increases", "ecn_decreases", "delay_decreases",
         "quick_adapts", "trims", "timeouts", "penalty_cuts", "plane_engagements")  # fmt: skip
PLANES = ("engaged", "window", "ratio", "slowest", "review_s", "last_s", "slow_s", "seen_s")


def _bits(v: Any) -> Any:
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, list):
        return [_bits(x) for x in v]
    return (type(v).__name__, v)  # (a bool copied out of C as an int is a difference)


def nscc_state(a: Any) -> dict[str, Any]:
    s = {k: getattr(a, k) for k in PLAIN}
    pl = a._planes
    if pl is not None:
        s.update({f"planes.{k}": getattr(pl, k) for k in PLANES})
    return {k: _bits(v) for k, v in s.items()}
