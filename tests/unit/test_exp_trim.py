"""Claim 10 (trim) without a lab: the first loss signal after the onset from the writes'
loss logs, a tier's summary, the queue's drain time and the verdict's thresholds; and the
write's loss log itself (lab.workloads.bench.write.loss_log_json)."""

from __future__ import annotations

import pytest

from lab.fabric.params import LabParams
from lab.workloads.bench.write import loss_log_json
from lab.workloads.experiments import trim as ex


def _write(start: float, rows: list[list[float]], duration: float = 8.0) -> dict:
    return {
        "start_monotonic_s": start,
        "duration_s": duration,
        "loss_log": {"columns": ["t_s", "retransmissions", "nacks"], "rows": rows},
    }


def test_first_after_skips_what_came_before_the_onset():
    w = _write(100.0, [[0.5, 2, 0], [3.04, 2, 1], [3.05, 3, 1], [3.2, 3, 2]])
    assert ex.first_after(w, 103.0, "nacks") == pytest.approx(103.04)
    # two retransmissions before the onset: the first after it is the growth to 3
    assert ex.first_after(w, 103.0, "retransmissions") == pytest.approx(103.05)
    assert ex.first_after(w, 104.0, "nacks") is None
    assert ex.first_after(None, 0.0, "nacks") is None
    assert ex.first_after({"start_monotonic_s": 1.0}, 0.0, "nacks") is None


def test_onset_delays_take_the_earlier_writer_and_prefer_a_nack():
    steady = _write(100.0, [[3.06, 0, 1], [3.07, 1, 1]])
    joiner = _write(103.0, [[0.05, 1, 0]], duration=2.0)
    d = ex.onset_delays(steady, joiner)
    assert d["valid"] and d["steady_lead_s"] == pytest.approx(3.0)
    assert d["first_nack_s"] == pytest.approx(0.06)
    assert d["first_retx_s"] == pytest.approx(0.05)
    assert d["first_request_s"] == pytest.approx(0.06)  # the NACK, when there is one
    # no NACK at all (MRC on dropping switches): the first retransmission is the request
    d2 = ex.onset_delays(_write(100.0, [[3.2, 1, 0]]), _write(103.0, []))
    assert d2["first_request_s"] == pytest.approx(0.2) and d2["first_nack_s"] is None
    # the steady write had not started (or had ended) at the onset: not valid
    assert not ex.onset_delays(_write(103.2, []), _write(103.0, []))["valid"]
    assert not ex.onset_delays(_write(90.0, [], duration=5.0), _write(103.0, []))["valid"]
    assert ex.onset_delays(None, None) == {"valid": False}


def test_summary_queue_drain_and_verdict():
    runs = [
        {"valid": True, "first_request_s": x, "first_nack_s": x, "first_retx_s": x + 0.001,
         "trims": 10, "drops": 0, "qp_errors": 0, "verified": True, "cpu_bound": False}
        for x in (0.05, 0.06, 0.07)
    ] + [{"valid": False, "first_request_s": 9.0, "verified": True}]  # fmt: skip
    s = ex.summarise_tier(runs, base_rtt_s=0.01)
    assert s["first_request_s"] == pytest.approx(0.06) and s["valid_runs"] == 3
    assert s["first_request_rtts"] == pytest.approx(6.0) and s["verified"]
    p = LabParams(name="mrcu", rate_mbit=10.0, **{**ex.SHAPE, "buffer_kb": 64})
    assert ex.queue_drain_s(p) == pytest.approx(65536 * 8 / 10e6)

    def tiers(t, d, r):
        return {
            "mrc_trim": {"first_request_s": t},
            "mrc_drop": {"first_request_s": d},
            "rocev2": {"first_request_s": r},
        }

    assert ex.judge(tiers(0.05, 0.10, 0.09), 0.05)[0] == "reproduced"
    assert ex.judge(tiers(0.05, 0.055, 0.09), 0.05)[0] == "partly"  # not faster than drop
    assert ex.judge(tiers(0.05, 0.10, 0.04), 0.05)[0] == "partly"  # RoCEv2's NAK first
    assert ex.judge(tiers(0.09, 0.10, 0.05), 0.05)[0] == "not reproduced"
    assert ex.judge(tiers(None, 0.10, 0.05), 0.05)[0] == "not reproduced"


def test_loss_log_json_firsts_relative_to_the_start():
    j = loss_log_json([(10.5, 1, 0), (10.7, 1, 1)], 10.0, False)
    assert j["first_retransmission_s"] == pytest.approx(0.5)
    assert j["first_nack_s"] == pytest.approx(0.7)
    assert j["loss_log"]["rows"] == [[0.5, 1, 0], [0.7, 1, 1]]
    empty = loss_log_json([], 10.0, False)
    assert empty["first_retransmission_s"] is None and empty["first_nack_s"] is None
