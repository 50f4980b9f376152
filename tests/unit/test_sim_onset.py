"""A congestion onset in virtual time (mrcnic.sim.onset) and what times it: the pump's
``on_pumped`` hook and the LossClock that reads the QPs' loss counters through it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.fabric import EventLoop
from mrcnic.sim.loss_clock import LossClock
from mrcnic.sim.onset import Onset, OnsetParams, run_onset
from mrcnic.sim.pump import Pump

# the lab's scale and its 4-frame buffer: the 8 QPs that join overflow it at once
SMALL = ClosSpec(planes=2, t0=3, t1=1, hosts_per_t0=1, queue_bytes=16 << 10, ecn_bytes=8 << 10,
                 msg_size=64 << 10, seed=1)  # fmt: skip
PARAMS = OnsetParams(join_s=10e-3, steady_bytes=1 << 20, joiner_bytes=512 << 10)
VOLATILE = ("wall_s", "cpu_s", "sim_pps")


@dataclass
class _Stats:
    rx_nacks: int = 0
    retransmissions: int = 0
    sack_losses: int = 0
    timeouts: int = 0


@dataclass
class _Ep:
    stats: _Stats = field(default_factory=_Stats)


def test_the_loss_clock_keeps_each_counters_first_growth_from_its_moment_on() -> None:
    clock = LossClock(since_s=1.0)
    a, b = _Ep(), _Ep()
    a.stats.retransmissions = 3
    clock(0, a, 0.5)  # before the moment: remembered, not a first
    clock(0, a, 1.2)  # no growth since
    assert clock.earliest([a], "retransmissions") is None
    a.stats.retransmissions = 4
    clock(0, a, 1.5)
    a.stats.retransmissions = 9
    a.stats.rx_nacks = 1
    clock(0, a, 2.0)
    b.stats.rx_nacks = 2
    clock(1, b, 1.7)
    assert clock.earliest([a], "retransmissions") == 1.5  # the first, not the last
    assert clock.earliest([a], "rx_nacks") == 2.0
    assert clock.earliest([a, b], "rx_nacks") == 1.7
    assert clock.earliest([a, b], "timeouts") is None


class _Timed:
    """An endpoint with one timer that counts a retransmission when it fires."""

    def __init__(self) -> None:
        self.stats = _Stats()
        self.deadline: float | None = 2.0

    def frames_to_send(self, _t: float) -> list[Any]:
        return []

    def next_event(self) -> None:
        return None

    def get_timer(self) -> float | None:
        return self.deadline

    def handle_timer(self, _t: float) -> None:
        self.deadline = None
        self.stats.retransmissions += 1


def test_the_pump_reports_every_pump_with_its_time_timers_included() -> None:
    loop = EventLoop(lambda *_: None, seed=1)
    seen: list[tuple[int, float, int]] = []
    ep = _Timed()
    pump = Pump(loop, on_pumped=lambda h, e, t: seen.append((h, t, e.stats.retransmissions)))
    pump.pump(3, ep, 0.5)
    loop.run(10.0, lambda: False)
    assert seen == [(3, 0.5, 0), (3, 2.0, 1)]  # the timer's retransmission, at its time


def test_a_join_is_timed_exactly_and_trimming_asks_first() -> None:
    trim = run_onset(SMALL, PARAMS)
    drop = run_onset(replace(SMALL, trim=False), PARAMS)
    for r in (trim, drop):
        assert r["valid"] and r["verified"] and r["qp_errors"] == 0, r
    assert trim["trims"] > 0 and trim["drops"] == 0 and trim["first_nack_s"] is not None
    assert drop["drops"] > 0 and drop["trims"] == 0 and drop["first_nack_s"] is None
    assert trim["first_request_s"] == trim["first_nack_s"]
    assert drop["first_request_s"] == drop["first_retx_s"]
    assert 0 < trim["first_request_s"] < drop["first_request_s"]
    # the onset's first NACK is a trimmed packet's: no sooner than the joiner's first packet
    # can reach dst's links and the NACK come back (one base RTT)
    assert trim["first_nack_s"] >= SMALL.base_rtt_s
    assert [f["role"] for f in trim["flows"]] == ["steady", "joiner"]
    assert trim["flows"][1]["qps"] == PARAMS.joiner_qps


def test_the_clock_only_watches() -> None:
    """The same run with the clock detached: every counter and time of the run the same."""
    watched = Onset(SMALL, PARAMS)
    bare = Onset(SMALL, PARAMS)
    for eps in bare.hosts.endpoints:
        for _ep, pump in eps.values():
            pump.on_pumped = None
    a, b = watched.run(), bare.run()
    for r in (a, b):
        for k in VOLATILE:
            r.pop(k)
    assert a["first_request_s"] is not None and b["first_request_s"] is None
    for r in (a, b):
        for k in [k for k in r if k.startswith("first_")]:
            r.pop(k)
        for f in r["flows"]:
            for k in [k for k in f if k.startswith("first_")]:
                f.pop(k)
        r.pop("valid")
    assert a == b


def test_onset_params_are_checked() -> None:
    with pytest.raises(ValueError, match="three different hosts"):
        Onset(SMALL, OnsetParams(dst=0, steady=0, joiner=2))
    with pytest.raises(ValueError, match="three different hosts"):
        Onset(SMALL, OnsetParams(joiner=3))
