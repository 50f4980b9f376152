"""Congestion control: UET NSCC (four quadrants, quick adapt, the delay-based decrease,
timeouts, rcv_cwnd_pen, the windowed base RTT, parameters), the previous NSCC, the fixed
window, the registry."""

from __future__ import annotations

import pytest

from mrcnic.transport.cc import (
    HEADER_BYTES,
    REFERENCE_BDP_BYTES,
    AckSample,
    CcParams,
    FixedWindow,
    LegacyNscc,
    NsccParams,
    UetNscc,
    available,
    make_cc,
    register_cc,
)

P = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3)  # BDP 100 kB


# == the previous NSCC ("nscc-2026.11") ==========================================================


def fresh(**kw) -> LegacyNscc:
    cc = LegacyNscc(P, **{"target_qdelay_s": 0.5e-3, **kw})  # the quadrants against a known target
    cc.cwnd_bytes = 50_000.0
    return cc


def test_legacy_quadrant_no_ecn_below_target_is_proportional_increase():
    a, b = fresh(), fresh()
    a.on_ack(AckSample(4096, 1e-3, False, 1.0))  # empty queue
    b.on_ack(AckSample(4096, 1e-3 + 0.4e-3, False, 1.0))  # queue at 80% of target
    assert a.cwnd_bytes - 50_000 > b.cwnd_bytes - 50_000 > 0


def test_legacy_quadrant_no_ecn_above_target_is_fair_increase():
    cc = fresh()
    cc.on_ack(AckSample(4096, 3e-3, False, 1.0))
    assert cc.cwnd_bytes == pytest.approx(50_000 + 4096 * 4096 / 50_000)


def test_legacy_quadrant_ecn_above_target_is_multiplicative_decrease_once_per_rtt():
    cc = fresh()
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0))
    after = cc.cwnd_bytes
    assert after < 50_000 * 0.9
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0 + 0.1e-3))  # same RTT: no second cut
    assert cc.cwnd_bytes == after
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0 + 2e-3))
    assert cc.cwnd_bytes < after


def test_legacy_quadrant_ecn_below_target_is_no_change():
    cc = fresh()
    cc.on_ack(AckSample(4096, 1.1e-3, True, 1.0))
    assert cc.cwnd_bytes == 50_000


def test_window_is_clamped_and_penalty_caps_it():
    cc = fresh()
    for i in range(1000):
        cc.on_ack(AckSample(4096, 1e-3, False, float(i)))
    assert cc.cwnd_bytes == cc.max_cwnd == pytest.approx(2.0 * 100_000)
    cc.on_rcv_penalty(64, 5.0)
    assert cc.cwnd_bytes == pytest.approx(cc.max_cwnd / 2)
    for i in range(200):
        cc.on_trim(False, 10.0 + i)
    assert cc.cwnd_bytes == cc.min_cwnd == 4096


def test_fixed_window_never_moves():
    cc = FixedWindow(P, window_bytes=12345)
    cc.on_ack(AckSample(4096, 9.0, True, 1.0))
    cc.on_trim(True, 1.0)
    cc.on_rcv_penalty(127, 1.0)
    assert cc.cwnd_bytes == 12345


def test_registry_by_name():
    assert {"nscc", "uet-1.0-nscc", "nscc-2026.11", "fixed"} <= set(available())
    assert type(make_cc("nscc", P)) is UetNscc  # the default name is UET's NSCC
    assert type(make_cc("uet-1.0-nscc", P)) is UetNscc
    assert type(make_cc("nscc-2026.11", P)) is LegacyNscc
    assert isinstance(make_cc("fixed", P), FixedWindow)
    with pytest.raises(ValueError, match="unknown congestion control"):
        make_cc("cubic", P)

    class Half(FixedWindow):
        name = "half"

    register_cc("half-test", Half)
    assert make_cc("half-test", P, window_bytes=7).cwnd_bytes == 7


# -- the target queueing delay: a floor of a few packet times at the bottleneck ---------------

SLOW = CcParams(mtu_bytes=4096, line_rate_bps=640e6, base_rtt_s=2.46e-3, port_rate_bps=80e6)


def test_target_is_half_the_base_rtt_when_serialisation_is_short():
    fast = CcParams(mtu_bytes=4096, line_rate_bps=800e9, base_rtt_s=1e-3, port_rate_bps=100e9)
    assert LegacyNscc(fast, bottleneck_bps=100e9).target_qdelay_s == pytest.approx(0.5e-3)
    # not told, the bottleneck estimate is only an upper bound: all the base RTT but the
    # port hops is attributed to serialisation (docs/design/transport.md: set bottleneck_bps when the
    # base RTT is mostly propagation)
    assert LegacyNscc(fast).bottleneck_pkt_s() == pytest.approx(1e-3 - 2 * fast_pkt_s(100e9))


def fast_pkt_s(rate_bps: float) -> float:
    return (4096 + HEADER_BYTES) * 8 / rate_bps


def test_target_has_a_floor_of_a_few_bottleneck_packet_times():
    pkt_bits = (4096 + HEADER_BYTES) * 8
    cc = LegacyNscc(SLOW, bottleneck_bps=20e6)  # told: paths of 20 Mb/s
    assert cc.bottleneck_pkt_s() == pytest.approx(pkt_bits / 20e6)
    assert cc.target_qdelay_s == pytest.approx(4 * pkt_bits / 20e6)
    est = LegacyNscc(SLOW)  # not told: bounded from the base RTT minus the two port hops
    assert est.bottleneck_pkt_s() == pytest.approx(2.46e-3 - 2 * pkt_bits / 80e6)
    assert est.target_qdelay_s > 2.46e-3 / 2


def test_one_queued_packet_at_a_slow_bottleneck_is_not_a_reason_to_cut():
    """The oversubscribed case: an ECN mark seen with one 4 KiB packet queued on a 20 Mb/s
    path is below the target: no multiplicative decrease (the old base RTT / 2 target cut)."""
    one_pkt = (4096 + HEADER_BYTES) * 8 / 20e6
    cc = LegacyNscc(SLOW, bottleneck_bps=20e6)
    cc.cwnd_bytes = 100_000.0
    cc.on_ack(AckSample(4096, 2.46e-3 + one_pkt, True, 1.0))
    assert cc.cwnd_bytes == 100_000.0 and cc.decreases == 0
    old = LegacyNscc(SLOW, target_qdelay_s=2.46e-3 / 2)
    old.cwnd_bytes = 100_000.0
    old.on_ack(AckSample(4096, 2.46e-3 + one_pkt, True, 1.0))
    assert old.cwnd_bytes < 100_000.0


def test_target_follows_the_measured_base_rtt_down_never_up():
    cc = LegacyNscc(SLOW)
    t0 = cc.target_qdelay_s
    cc.on_ack(AckSample(4096, 5e-3, False, 1.0))  # a queued sample does not raise the base
    assert cc.min_rtt_s == 2.46e-3 and cc.target_qdelay_s == t0
    cc.on_ack(AckSample(4096, 1.5e-3, False, 2.0))  # the configured base was pessimistic
    assert cc.min_rtt_s == 1.5e-3 and cc.target_qdelay_s < t0


def test_port_rate_defaults_to_the_line_rate():
    p = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3)
    assert LegacyNscc(p).port_pkt_s == pytest.approx((4096 + HEADER_BYTES) * 8 / 800e6)


# == UET 1.0 NSCC ("uet-1.0-nscc", also "nscc") ==================================================

# the lab's scale: 8 ports of 100 Mb/s, 1 ms base RTT -> BDP 100 kB, reference RTT 12 ms
Q = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3, port_rate_bps=100e6)
T = 0.75e-3  # default target delay: 0.75 base RTT


def uet(**kw) -> UetNscc:
    """A UET NSCC at 50 kB whose quick adapt window and adjustment period have just begun (so
    a test sees one rule at a time), eta 0 unless asked for."""
    cc = UetNscc(Q, **{"eta": 0.0, **kw})
    cc.cwnd_bytes = 50_000.0
    cc._win_end_s = 100.0
    cc._last_adjust_s = 0.0
    return cc


def ack(cc: UetNscc, delay: float, ecn: bool = False, now: float = 1.0, n: int = 4096) -> None:
    cc.on_ack(AckSample(n, cc.base_rtt_s + delay, ecn, now))


def test_defaults_are_derived_from_the_qp_as_uet_scales_them():
    q = UetNscc(Q).params
    a = 100_000 / REFERENCE_BDP_BYTES  # BDP / (100 Gb/s x 12 us)
    assert q.base_rtt_s == 1e-3 and q.target_delay_s == pytest.approx(T)
    assert q.reference_rtt_s == pytest.approx(12e-3)  # 12 us at 100 Gb/s ports, x1000 here
    b = T / 12e-3
    assert q.eta == pytest.approx(0.15 * 4096 * a)
    assert q.fi == pytest.approx(5 * 4096 * a)
    assert q.fi_scale == pytest.approx(0.25 * a)
    assert q.alpha == pytest.approx(4 * 4096 * a * b / T)
    assert (q.gamma, q.max_md_jump, q.qa_gate, q.disable_qa) == (0.8, 0.5, 3, False)
    assert q.max_cwnd == pytest.approx(150_000) and q.init_cwnd == q.max_cwnd
    assert q.min_cwnd == 4096 and q.qa_threshold_s == pytest.approx(4 * T)
    assert q.adjust_bytes_threshold == 8 * 4096 and q.adjust_period_threshold_s == 1e-3
    assert q.fast_increase_delay_s == pytest.approx(1e-3)  # 1 us at the reference, x1000
    # production: 100 Gb/s ports, 12 us: a and b are the reference's (a = 8 for 8 ports)
    prod = UetNscc(CcParams(4096, 800e9, 12e-6, 100e9)).params
    assert prod.reference_rtt_s == pytest.approx(12e-6)
    assert prod.fi == pytest.approx(5 * 4096 * 8) and prod.fast_increase_delay_s == pytest.approx(
        1e-6
    )


def test_quadrant_no_ecn_below_target_is_proportional_increase():
    a, b = uet(fast_increase_delay_s=0.0), uet(fast_increase_delay_s=0.0)
    ack(a, 0.0, now=0.002)  # empty queue; the adjustment period has passed: applied
    ack(b, 0.6 * T, now=0.002)
    alpha = a.params.alpha
    assert a.cwnd_bytes == pytest.approx(50_000 + alpha * 4096 * T / 50_000)
    assert b.cwnd_bytes == pytest.approx(50_000 + alpha * 4096 * 0.4 * T / 50_000)
    assert a.cwnd_bytes > b.cwnd_bytes > 50_000


def test_increases_are_collected_until_the_adjust_bytes_or_period_threshold():
    cc = uet(fast_increase_delay_s=0.0, adjust_bytes_threshold=10_000)
    ack(cc, 0.0, now=1e-4)
    ack(cc, 0.0, now=2e-4)
    assert cc.cwnd_bytes == 50_000  # 8192 bytes acknowledged, 0.2 ms: not yet
    ack(cc, 0.0, now=3e-4)  # 12288 > 10000: the three are applied at once
    assert cc.cwnd_bytes == pytest.approx(50_000 + cc.params.alpha * 3 * 4096 * T / 50_000)


def test_eta_is_added_once_per_adjust_period():
    cc = uet(eta=500.0, fast_increase_delay_s=0.0, alpha=0.0)
    ack(cc, 0.0, now=0.5e-3, n=40_000)  # bytes threshold crossed, period not over: no eta
    assert cc.cwnd_bytes == 50_000
    ack(cc, 0.0, now=1.1e-3, n=40_000)
    assert cc.cwnd_bytes == 50_500
    ack(cc, 0.0, now=1.2e-3, n=40_000)
    assert cc.cwnd_bytes == 50_500


def test_fast_increase_after_a_whole_window_of_near_zero_delay():
    cc = uet(alpha=0.0)
    fs = cc.params.fi_scale
    now = 1e-4
    for _ in range(13):  # 13 x 4096 > cwnd: the next near-zero ACKs add fi_scale x acked
        ack(cc, 0.0, now=now)
        now += 1e-5
    assert cc.fast_increases == 1 and cc.cwnd_bytes == pytest.approx(50_000 + fs * 4096)
    ack(cc, 0.0, now=now)
    assert cc.cwnd_bytes == pytest.approx(50_000 + 2 * fs * 4096)
    ack(cc, 2 * T, now=now)  # the delay rose: the fast increase is over
    assert cc.fast_increases == 2 and not cc._fast


def test_quadrant_no_ecn_above_target_is_fair_increase():
    cc = uet()
    ack(cc, 2 * T, now=0.002)
    assert cc.cwnd_bytes == pytest.approx(50_000 + cc.params.fi * 4096 / 50_000)


def test_quadrant_ecn_above_target_is_multiplicative_decrease_on_the_filtered_delay():
    cc = uet()
    cc.avg_delay_s = 2 * T  # gamma (avg - target) / avg = 0.8 x 1/2
    ack(cc, 2 * T, ecn=True, now=1.0)
    avg = cc.avg_delay_s  # the sample joined the filter first
    assert cc.cwnd_bytes == pytest.approx(50_000 * (1 - 0.8 * (avg - T) / avg))
    after = cc.cwnd_bytes
    ack(cc, 2 * T, ecn=True, now=1.0 + 0.5e-3)  # within one base RTT: no second cut
    assert cc.cwnd_bytes == after and cc.ecn_decreases == 1
    cc.avg_delay_s = 100 * T  # a huge delay: the cut stops at max_md_jump
    ack(cc, 100 * T, ecn=True, now=1.0 + 2e-3)
    assert cc.cwnd_bytes == pytest.approx(after * 0.5)


def test_quadrant_ecn_below_target_is_no_change_and_ecn_with_a_low_average_too():
    cc = uet()
    ack(cc, 0.5 * T, ecn=True, now=0.002)
    assert cc.cwnd_bytes == 50_000
    ack(cc, 2 * T, ecn=True, now=0.002)  # above target, but the filtered delay is not
    assert cc.cwnd_bytes == 50_000 and cc.ecn_decreases == 0


def test_quick_adapt_after_a_trim_sets_the_window_to_what_was_delivered():
    cc = uet()
    cc._win_end_s = 1.0
    ack(cc, 0.5 * T, now=0.9, n=8192)  # delivered in this window: 8 kB < 150 kB / 2**3
    before = cc.cwnd_bytes
    cc.on_trim(True, 0.95)  # arms quick adapt, one MTU off meanwhile
    assert cc.cwnd_bytes == before - 4096 and cc.quick_adapts == 0
    ack(cc, 0.5 * T, now=1.01, n=4096)  # the window is over
    assert cc.quick_adapts == 1 and cc.cwnd_bytes == 8192 + 4096
    # ECN about packets sent before it is ignored (about the window in flight then)
    before = cc.cwnd_bytes
    cc.avg_delay_s = 3 * T
    ack(cc, 3 * T, ecn=True, now=1.5)
    assert cc.cwnd_bytes == before and cc.ecn_decreases == 0


def test_quick_adapt_on_a_delay_above_its_threshold_and_its_gate_and_disable_flag():
    def run(**kw) -> UetNscc:
        cc = uet(**kw)
        cc._win_end_s = 1.0
        ack(cc, 0.5 * T, now=0.9, n=8192)
        ack(cc, 5 * T, now=1.01)  # above qa_threshold (4 targets)
        return cc

    assert run().quick_adapts == 1
    assert run(disable_qa=True).quick_adapts == 0
    # gate 0: only a QP that delivered less than max_cwnd in the window; 8 kB is less
    assert run(qa_gate=0).quick_adapts == 1
    assert run(qa_gate=5).quick_adapts == 0  # 150 kB / 32 = 4.7 kB < 8 kB delivered
    assert run(qa_threshold_s=6 * T).quick_adapts == 0


def test_delay_based_decrease_on_a_standing_queue_without_ecn():
    """MRC's last hop marks nothing: when every sample of a quick adapt window is above the
    target, the window is cut as by ECN (on that lowest delay), and the fair increase waits."""
    cc = uet(disable_qa=True, adjust_bytes_threshold=1)  # increases applied at every ACK
    cc._win_end_s = 1.0
    for i, d in enumerate((2.2 * T, 2 * T, 3 * T)):
        ack(cc, d, now=0.99 + i * 1e-4)  # fair increases; lowest delay 2 T
    grown = cc.cwnd_bytes
    assert grown > 50_000
    ack(cc, 2.5 * T, now=1.01)  # the window ends: a standing queue of at least 2 targets
    assert cc.standing_queue and cc.delay_decreases == 1
    assert cc.cwnd_bytes == pytest.approx(grown * (1 - 0.8 * (2 * T - T) / (2 * T)))
    held = cc.cwnd_bytes
    ack(cc, 2.5 * T, now=1.011)  # no fair increase on a standing queue
    assert cc.cwnd_bytes == held
    # one sample at or below target in a window: not standing, nothing cut
    cc2 = uet(disable_qa=True)
    cc2._win_end_s = 1.0
    ack(cc2, 3 * T, now=0.99)
    ack(cc2, 0.5 * T, now=0.995)
    ack(cc2, 3 * T, now=1.01)
    assert not cc2.standing_queue and cc2.delay_decreases == 0
    # delay_md=False: UET as specified, the fair increase goes on
    cc3 = uet(disable_qa=True, delay_md=False)
    cc3._win_end_s = 1.0
    ack(cc3, 3 * T, now=0.99)
    ack(cc3, 3 * T, now=1.01)
    assert cc3.delay_decreases == 0 and cc3.cwnd_bytes > 50_000


def test_timeout_takes_one_packet_off_the_window():
    cc = uet()
    cc.on_timeout(1.0)
    assert cc.cwnd_bytes == 50_000 - 4096 and cc.timeouts == 1
    for _ in range(100):
        cc.on_timeout(1.0)
    assert cc.cwnd_bytes == cc.min_cwnd == 4096


def test_rcv_cwnd_pen_caps_the_window_below_its_maximum():
    cc = uet()
    cc.on_rcv_penalty(0, 1.0)
    assert cc.cwnd_bytes == 50_000 and cc.penalty_cuts == 0
    cc.on_rcv_penalty(64, 1.0)  # cap: half of 150 kB, above 50 kB: nothing to do
    assert cc.cwnd_bytes == 50_000 and cc.penalty_cuts == 0
    cc.on_rcv_penalty(96, 1.0)  # cap: a quarter of 150 kB
    assert cc.cwnd_bytes == pytest.approx(150_000 * 32 / 128) and cc.penalty_cuts == 1
    cc.on_rcv_penalty(127, 1.0)  # 1/128 of 150 kB is below one MTU: the floor holds
    assert cc.cwnd_bytes == cc.min_cwnd == 4096
    ack(cc, 0.0, now=2.0)  # the window grows back once the penalty is gone
    assert cc.cwnd_bytes > 4096


def test_base_rtt_falls_at_once_and_rises_again_after_its_window():
    cc = UetNscc(Q, base_rtt_window_s=0.1)
    assert cc.base_rtt_s == cc.min_rtt_s == 1e-3
    cc.on_ack(AckSample(4096, 0.8e-3, False, 0.0))
    # the base RTT falls, but the window cap never drops below the configured base RTT's
    assert cc.base_rtt_s == 0.8e-3 and cc.max_cwnd == pytest.approx(1.5 * 100e6 * 1e-3)
    cc.on_ack(AckSample(4096, 2e-3, False, 0.04))  # a longer path from now on
    assert cc.base_rtt_s == 0.8e-3
    cc.on_ack(AckSample(4096, 2e-3, False, 0.06))  # new half-window: 0.8 ms still remembered
    assert cc.base_rtt_s == 0.8e-3
    cc.on_ack(AckSample(4096, 2.1e-3, False, 0.12))  # a whole window without it
    assert cc.base_rtt_s == 2e-3 and cc.max_cwnd == pytest.approx(1.5 * 100e6 * 2e-3)
    fixed = UetNscc(Q, max_cwnd=123_456.0, base_rtt_window_s=0.1)
    fixed.on_ack(AckSample(4096, 0.5e-3, False, 0.0))
    assert fixed.base_rtt_s == 0.5e-3 and fixed.max_cwnd == 123_456.0  # set: stays


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gama": 0.5}, "unknown option.*'gama'.*valid: base_rtt_s"),
        ({"gamma": 1.5}, r"gamma must be in \(0, 1\]"),
        ({"gamma": "0.5"}, "gamma must be a finite number"),
        ({"max_md_jump": 1.0}, r"max_md_jump must be in \(0, 1\)"),
        ({"qa_gate": 2.5}, "qa_gate must be an integer"),
        ({"qa_gate": 40}, "qa_gate must be an integer"),
        ({"target_delay_s": 0}, "target_delay_s must be a positive number"),
        ({"base_rtt_s": -1e-3}, "base_rtt_s must be a positive number"),
        ({"eta": -1.0}, "eta must be >= 0"),
        ({"max_cwnd": 1000.0}, r"max_cwnd \(1000.0\) is below min_cwnd"),
        ({"init_cwnd": 1e9}, "init_cwnd .* must lie in"),
        ({"disable_qa": 1}, "disable_qa must be True or False"),
        ({"adjust_period_threshold_s": float("inf")}, "must be a finite number"),
    ],
)
def test_parameters_are_checked_with_clear_errors(options, message):
    with pytest.raises(ValueError, match=message):
        make_cc("uet-1.0-nscc", Q, **options)


def test_parameters_by_name_and_as_a_dataclass():
    cc = make_cc("nscc", Q, target_delay_s=2e-3, disable_qa=True, gamma=0.5)
    assert cc.params.target_delay_s == 2e-3 and cc.params.qa_threshold_s == pytest.approx(8e-3)
    assert cc.params.disable_qa and cc.params.gamma == 0.5
    p = NsccParams(max_cwnd=80_000.0, init_cwnd=40_000.0)
    cc2 = UetNscc(Q, p, fi=1.0)
    assert (cc2.max_cwnd, cc2.cwnd_bytes, cc2.params.fi) == (80_000.0, 40_000.0, 1.0)
    with pytest.raises(AttributeError):
        p.gamma = 0.1  # frozen
