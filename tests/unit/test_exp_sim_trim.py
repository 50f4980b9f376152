"""Claim 10's simulated form (``mrc-lab experiment trim --sim``): a congestion onset at the
paper's proportions, trimming against dropping and RoCEv2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.workloads.experiments import base, registry
from lab.workloads.experiments.sim import trim

ROOT = Path(__file__).resolve().parents[2]
RTT, DRAIN = 9.4e-6, 10.5e-6


@pytest.mark.slow
def test_trim_sim_quick_writes_the_contract_keys_and_trimming_asks_first(
    sim_quick_all: Path,
) -> None:
    d = json.loads((sim_quick_all / "sim" / "trim.json").read_text())
    assert not (sim_quick_all / "trim.json").exists()  # the lab form's place stays untouched
    for k in base.RESULT_KEYS:
        assert k in d, k
    assert d["verdict"] in base.VERDICTS and d["quick"] is True
    t, dr, ro = d["mrc"]["trimming"], d["mrc"]["dropping"], d["rocev2"]
    for s in (t, dr, ro):
        assert s["verified"] and s["qp_errors"] == 0 and s["valid_runs"] == s["runs"] == 1, s
    assert t["trims"] > 0 and dr["trims"] == 0 and dr["drops"] > 0 and ro["trims"] == 0
    assert t["first_request_s"] == t["first_nack_s"]  # a trimmed packet's NACK
    assert 0 < t["first_request_s"] < dr["first_request_s"]
    h = d["metrics"]["headline"]
    assert h["mrc"] == t["first_request_s"] and h["rocev2"] == ro["first_request_s"]
    s = d["setup"]
    assert s["link_rate_mbit"] == 100e3 and s["planes"] == 8 and s["queue_drain_s"] > 0
    assert len(d["commands"]) == 3 and all("run_onset" in c for c in d["commands"])


def test_trim_has_a_simulated_form() -> None:
    assert registry.find("trim").sim is trim.SIM


def test_the_trim_verdict_follows_its_thresholds() -> None:
    # a queue drain or more before dropping, and no later than RoCEv2
    assert trim.judge(19e-6, 53e-6, 40e-6, DRAIN, RTT)[0] == "reproduced"
    assert trim.judge(19e-6, 53e-6, None, DRAIN, RTT)[0] == "reproduced"
    # earlier than dropping but by less than a drain; or later than RoCEv2
    assert trim.judge(19e-6, 25e-6, 40e-6, DRAIN, RTT)[0] == "partly"
    assert trim.judge(45e-6, 60e-6, 40e-6, DRAIN, RTT)[0] == "partly"
    assert trim.judge(60e-6, 50e-6, 40e-6, DRAIN, RTT)[0] == "not reproduced"
    assert trim.judge(None, 50e-6, 40e-6, DRAIN, RTT)[0] == "not reproduced"
    assert trim.judge(19e-6, None, 40e-6, DRAIN, RTT)[0] == "not reproduced"
    why = trim.judge(19e-6, 53e-6, 40e-6, DRAIN, RTT)[1]
    assert "19.0 us" in why and "34.0 us earlier" in why and "3.2 queue drains" in why


def test_the_tiers_differ_only_in_what_they_compare() -> None:
    jobs = trim.jobs(quick=True)
    assert set(jobs) == {"mrc_trim/1", "mrc_drop/1", "rocev2/1"}
    (a, pa), (b, pb), (c, pc) = jobs["mrc_trim/1"], jobs["mrc_drop/1"], jobs["rocev2/1"]
    assert a.trim and not b.trim and c.transport == "rocev2" and c.trim
    assert pa == pb == pc and a.queue_bytes == trim.BUFFER_BYTES
    full = trim.jobs(quick=False)
    assert full["paper_buffer/1"][0].queue_bytes == 1 << 20
    # each seed's onset at its own phase of the steady write
    assert len({p.join_s for n, (_s, p) in full.items() if n.startswith("mrc_trim/")}) == 5
