"""DCQCN's reaction point: the cut on a CNP, alpha, and the three increase stages (with the
paper's constants, whose stages are long enough to see one by one), and what the ConnectX
profile changes."""

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
    PROFILES,
    Dcqcn,
    DcqcnParams,
    profile,
)

LINE = 100e6
SCALE = 1000.0


def rp(profile_name: str = "paper", **overrides) -> Dcqcn:
    return Dcqcn(DcqcnParams.scaled(LINE, SCALE, profile_name, **overrides))


def test_times_scale_with_the_lab_and_bytes_do_not():
    p = DcqcnParams.scaled(LINE, SCALE, "paper")
    assert p.increase_timer_s == pytest.approx(INCREASE_TIMER_S * SCALE)
    assert p.alpha_timer_s == pytest.approx(ALPHA_TIMER_S * SCALE)
    assert p.byte_counter_bytes == DcqcnParams.scaled(LINE, 1.0, "paper").byte_counter_bytes
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


def test_connectx_profile_is_the_default_with_its_shipped_constants():
    p = DcqcnParams.scaled(LINE, SCALE)  # the default profile
    cx = profile("connectx")
    assert p == DcqcnParams.scaled(LINE, SCALE, "connectx")
    assert p.increase_timer_s == pytest.approx(300e-6 * SCALE)  # rpg_time_reset
    assert p.alpha_timer_s == pytest.approx(1e-6 * SCALE)  # dce_tcp_rtt
    assert p.byte_counter_bytes == 32767 and p.fast_recovery_steps == 1
    assert p.g == pytest.approx(5 / 1024)  # dce_tcp_g 1019
    assert p.r_ai == pytest.approx(5e-5 * LINE) and p.r_hai == pytest.approx(5e-4 * LINE)
    assert cx.cnp_interval_s == pytest.approx(4e-6)  # min_time_between_cnps
    assert PROFILES["paper"].cnp_interval_s / cx.cnp_interval_s == pytest.approx(12.5)
    with pytest.raises(ValueError, match="unknown DCQCN profile"):
        profile("cx7")


def test_connectx_keeps_the_target_on_a_cut_unless_the_rate_was_raised_since():
    d = rp("connectx")
    period = d.p.rate_reduce_period_s
    d.on_cnp(0.0)
    d.on_cnp(period)  # a second cut before any increase: Rt stays at line rate
    assert d.target_bps == LINE and d.rate_bps < LINE / 2
    d.on_sent(d.p.byte_counter_bytes, period)  # a byte-counter increase ...
    rc = d.rate_bps
    d.on_cnp(2 * period)  # ... so this cut clamps Rt to Rc
    assert d.target_bps == pytest.approx(rc)
    d.advance(2 * period + d.p.increase_timer_s)  # a timer increase does too
    rc = d.rate_bps
    d.on_cnp(2 * period + d.p.increase_timer_s)
    assert d.target_bps == pytest.approx(rc)
    paper = rp("paper")
    paper.on_cnp(0.0)
    paper.on_cnp(paper.p.rate_reduce_period_s)
    assert paper.target_bps == pytest.approx(LINE / 2)  # the paper clamps on every cut


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(PROFILES)),
    st.lists(
        st.tuples(st.sampled_from(["cnp", "sent", "advance"]), st.floats(0, 0.2)), max_size=40
    ),
)
def test_rate_stays_within_bounds(name, ops):
    d = rp(name)
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
