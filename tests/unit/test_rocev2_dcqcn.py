"""DCQCN's reaction point: the cut on a CNP, alpha, and the three increase stages."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.rocev2.dcqcn import (
    AI_FRACTION,
    ALPHA_TIMER_S,
    CNP_INTERVAL_S,
    FAST_RECOVERY_STEPS,
    HAI_FRACTION,
    INCREASE_TIMER_S,
    Dcqcn,
    DcqcnParams,
)

LINE = 100e6
SCALE = 1000.0


def rp(**overrides) -> Dcqcn:
    return Dcqcn(DcqcnParams.scaled(LINE, SCALE, **overrides))


def test_times_scale_with_the_lab_and_bytes_do_not():
    p = DcqcnParams.scaled(LINE, SCALE)
    assert p.increase_timer_s == pytest.approx(INCREASE_TIMER_S * SCALE)
    assert p.alpha_timer_s == pytest.approx(ALPHA_TIMER_S * SCALE)
    assert p.byte_counter_bytes == DcqcnParams.scaled(LINE, 1.0).byte_counter_bytes
    assert p.r_ai == pytest.approx(AI_FRACTION * LINE) and p.r_hai == pytest.approx(
        HAI_FRACTION * LINE
    )
    assert pytest.approx(0.05) == CNP_INTERVAL_S * SCALE  # 50 us of hardware = 50 ms here


def test_first_cnp_halves_the_rate_and_raises_alpha_stays_one():
    d = rp()
    assert d.rate_bps == LINE and not d.active
    assert d.on_cnp(1.0)
    assert d.rate_bps == pytest.approx(LINE / 2)  # alpha starts at 1: cut by alpha/2
    assert d.target_bps == LINE and d.active
    assert d.alpha == pytest.approx(1.0)  # (1-g)*1 + g


def test_cuts_are_rate_limited_by_the_monitor_period():
    d = rp()
    period = d.p.rate_reduce_period_s
    assert d.on_cnp(1.0)
    assert not d.on_cnp(1.0 + period / 2)
    assert d.ignored_cnps == 1 and d.cuts == 1
    assert d.on_cnp(1.0 + period)
    assert d.cuts == 2 and d.rate_bps < LINE / 2


def test_alpha_decays_without_cnps_and_smaller_alpha_cuts_less():
    d = rp()
    d.on_cnp(0.0)
    a0 = d.alpha
    later = 10 * d.p.alpha_timer_s
    decayed = a0 * (1 - d.p.g) ** 10
    assert d.alpha_at(later) == pytest.approx(decayed)
    d.advance(later)
    before = d.rate_bps
    d.on_cnp(later)
    assert d.rate_bps == pytest.approx(before * (1 - decayed / 2))
    assert d.alpha == pytest.approx((1 - d.p.g) * decayed + d.p.g)


def test_fast_recovery_halves_the_gap_per_timer_event():
    d = rp()
    d.on_cnp(0.0)
    rc, rt = d.rate_bps, d.target_bps
    t = d.p.increase_timer_s
    for k in range(1, FAST_RECOVERY_STEPS):
        d.advance(k * t)
        rc = (rt + rc) / 2
        assert d.rate_bps == pytest.approx(rc) and d.target_bps == rt  # target unchanged
    assert d.t_count == FAST_RECOVERY_STEPS - 1


def test_additive_then_hyper_increase_move_the_target():
    d = rp()
    d.on_cnp(0.0)
    d.on_cnp(d.p.rate_reduce_period_s)  # two cuts: target well below line rate
    d.on_cnp(2 * d.p.rate_reduce_period_s)
    t0 = 2 * d.p.rate_reduce_period_s
    t = d.p.increase_timer_s
    d.advance(t0 + FAST_RECOVERY_STEPS * t)  # T reaches F with BC = 0: additive
    rt = d.target_bps
    d.advance(t0 + (FAST_RECOVERY_STEPS + 1) * t)
    assert d.target_bps == pytest.approx(rt + d.p.r_ai)
    # the byte counter reaching F too: hyper increase, i * R_HAI
    rt = d.target_bps
    d.on_sent(FAST_RECOVERY_STEPS * d.p.byte_counter_bytes, t0 + (FAST_RECOVERY_STEPS + 1) * t)
    assert d.bc_count == FAST_RECOVERY_STEPS
    assert d.target_bps >= rt + d.p.r_hai or d.target_bps == LINE


def test_recovers_to_line_rate_and_goes_idle():
    d = rp()
    d.on_cnp(0.0)
    d.advance(100.0)  # long after: every increase event has run
    assert d.rate_bps == LINE and not d.active
    n = d.increases
    d.advance(200.0)
    d.on_sent(10**9, 200.0)
    assert d.increases == n  # idle: nothing more happens


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["cnp", "sent", "advance"]), st.floats(0, 0.2)), max_size=40)
)
def test_rate_stays_within_bounds(ops):
    d = rp()
    now = 0.0
    for kind, x in ops:
        now += x
        if kind == "cnp":
            d.on_cnp(now)
        elif kind == "sent":
            d.on_sent(int(x * 1e8), now)
        else:
            d.advance(now)
        assert d.p.r_min <= d.rate_bps <= LINE
        assert d.rate_bps <= d.target_bps + 1e-6 <= LINE + 1e-6
        assert 0 < d.alpha <= 1
