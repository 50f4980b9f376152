"""Congestion control: NSCC's four quadrants, penalties, trims, the fixed window, the registry."""

from __future__ import annotations

import pytest

from mrcnic.cc import AckSample, CcParams, FixedWindow, Nscc, available, make_cc, register_cc

P = CcParams(mtu_bytes=4096, line_rate_bps=800e6, base_rtt_s=1e-3)  # BDP 100 kB


def fresh(**kw) -> Nscc:
    cc = Nscc(P, **kw)
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
    assert cc.cwnd_bytes == cc.max_cwnd == pytest.approx(1.5 * 100_000)
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
