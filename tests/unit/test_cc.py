"""Congestion control: NSCC's four quadrants, penalties, trims, the fixed window, the registry."""

from __future__ import annotations

import pytest

from mrcnic.transport.cc import (
    HEADER_BYTES,
    AckSample,
    CcParams,
    FixedWindow,
    Nscc,
    available,
    make_cc,
    register_cc,
)

P = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3)  # BDP 100 kB


def fresh(**kw) -> Nscc:
    cc = Nscc(P, **{"target_qdelay_s": 0.5e-3, **kw})  # the quadrants against a known target
    cc.cwnd_bytes = 50_000.0
    return cc


def test_quadrant_no_ecn_below_target_is_proportional_increase():
    a, b = fresh(), fresh()
    a.on_ack(AckSample(4096, 1e-3, False, 1.0))  # empty queue
    b.on_ack(AckSample(4096, 1e-3 + 0.4e-3, False, 1.0))  # queue at 80% of target
    assert a.cwnd_bytes - 50_000 > b.cwnd_bytes - 50_000 > 0


def test_quadrant_no_ecn_above_target_is_fair_increase():
    cc = fresh()
    cc.on_ack(AckSample(4096, 3e-3, False, 1.0))
    assert cc.cwnd_bytes == pytest.approx(50_000 + 4096 * 4096 / 50_000)


def test_quadrant_ecn_above_target_is_multiplicative_decrease_once_per_rtt():
    cc = fresh()
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0))
    after = cc.cwnd_bytes
    assert after < 50_000 * 0.9
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0 + 0.1e-3))  # same RTT: no second cut
    assert cc.cwnd_bytes == after
    cc.on_ack(AckSample(4096, 3e-3, True, 1.0 + 2e-3))
    assert cc.cwnd_bytes < after


def test_quadrant_ecn_below_target_is_no_change():
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
    assert {"nscc", "fixed"} <= set(available())
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
    assert Nscc(fast, bottleneck_bps=100e9).target_qdelay_s == pytest.approx(0.5e-3)
    # not told, the bottleneck estimate is only an upper bound: all the base RTT but the
    # port hops is attributed to serialisation (docs/transport.md: set bottleneck_bps when the
    # base RTT is mostly propagation)
    assert Nscc(fast).bottleneck_pkt_s() == pytest.approx(1e-3 - 2 * fast_pkt_s(100e9))


def fast_pkt_s(rate_bps: float) -> float:
    return (4096 + HEADER_BYTES) * 8 / rate_bps


def test_target_has_a_floor_of_a_few_bottleneck_packet_times():
    pkt_bits = (4096 + HEADER_BYTES) * 8
    cc = Nscc(SLOW, bottleneck_bps=20e6)  # told: paths of 20 Mb/s
    assert cc.bottleneck_pkt_s() == pytest.approx(pkt_bits / 20e6)
    assert cc.target_qdelay_s == pytest.approx(4 * pkt_bits / 20e6)
    est = Nscc(SLOW)  # not told: bounded from the base RTT minus the two port hops
    assert est.bottleneck_pkt_s() == pytest.approx(2.46e-3 - 2 * pkt_bits / 80e6)
    assert est.target_qdelay_s > 2.46e-3 / 2


def test_one_queued_packet_at_a_slow_bottleneck_is_not_a_reason_to_cut():
    """The oversubscribed case: an ECN mark seen with one 4 KiB packet queued on a 20 Mb/s
    path is below the target: no multiplicative decrease (the old base RTT / 2 target cut)."""
    one_pkt = (4096 + HEADER_BYTES) * 8 / 20e6
    cc = Nscc(SLOW, bottleneck_bps=20e6)
    cc.cwnd_bytes = 100_000.0
    cc.on_ack(AckSample(4096, 2.46e-3 + one_pkt, True, 1.0))
    assert cc.cwnd_bytes == 100_000.0 and cc.decreases == 0
    old = Nscc(SLOW, target_qdelay_s=2.46e-3 / 2)
    old.cwnd_bytes = 100_000.0
    old.on_ack(AckSample(4096, 2.46e-3 + one_pkt, True, 1.0))
    assert old.cwnd_bytes < 100_000.0


def test_target_follows_the_measured_base_rtt_down_never_up():
    cc = Nscc(SLOW)
    t0 = cc.target_qdelay_s
    cc.on_ack(AckSample(4096, 5e-3, False, 1.0))  # a queued sample does not raise the base
    assert cc.min_rtt_s == 2.46e-3 and cc.target_qdelay_s == t0
    cc.on_ack(AckSample(4096, 1.5e-3, False, 2.0))  # the configured base was pessimistic
    assert cc.min_rtt_s == 1.5e-3 and cc.target_qdelay_s < t0


def test_port_rate_defaults_to_the_line_rate():
    p = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3)
    assert Nscc(p).port_pkt_s == pytest.approx((4096 + HEADER_BYTES) * 8 / 800e6)
