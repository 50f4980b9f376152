"""Claim 3 (loss): loss per link and per path, the ring's order, one run's and one
condition's figures, the busbw kept, and the verdict, on synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.fabric.params import LabParams
from lab.fabric.topology import build_plan
from lab.workloads.experiments import loss as ls
from lab.workloads.experiments.base import Context, Result


def test_two_lossy_links_make_the_path_lose_p() -> None:
    for p in (0.0, 0.1, 1.0, 5.0):
        q = ls.per_link_percent(p) / 100
        assert 1 - (1 - q) ** 2 == pytest.approx(p / 100)
    assert ls.per_link_percent(1.0) == pytest.approx(0.5013, abs=1e-4)  # about P/2


@pytest.mark.parametrize(("t0", "hpt"), [(2, 2), (2, 3), (3, 2), (4, 4)])
def test_every_hop_of_the_ring_crosses_t0s(t0: int, hpt: int) -> None:
    ring = ls.ring_across_t0s(t0, hpt)
    hosts = [int(h[1:]) for h in ring]
    assert sorted(hosts) == list(range(t0 * hpt))
    for a, b in zip(hosts, hosts[1:] + hosts[:1], strict=True):
        assert a // hpt != b // hpt
    assert ls.ring_across_t0s(2, 2) == ["h0", "h2", "h1", "h3"]


def test_the_lossy_links_are_every_t0_t1_link() -> None:
    links = ls.fabric_links(build_plan(LabParams()))
    assert len(links) == 8 * 2 * 2
    assert all("-t0-" in a and "-t1-" in b for a, b in links)


def test_timeout_is_a_multiple_of_the_lossless_iteration_with_a_floor() -> None:
    assert ls.timeout_for(None, quick=False) == ls.LOSSLESS_TIMEOUT_S
    assert ls.timeout_for(0.2, quick=False) == ls.MIN_TIMEOUT_S
    assert ls.timeout_for(0.2, quick=True) == ls.QUICK_MIN_TIMEOUT_S
    assert ls.timeout_for(3.0, quick=False) == pytest.approx(3.0 * ls.TIMEOUT_FACTOR)


def _bench(busbw: float, ok: bool = True, times=(1.0, 1.0), errors=(), retx=10, sent=1000):
    return {"verified": ok, "busbw_bps": busbw, "algbw_bps": busbw * 0.75,
            "goodput_fraction": busbw / 80e6, "capacity_bps": 80e6, "time_s": 1.0,
            "iteration_times_s": list(times), "iterations": len(times), "retransmissions": retx,
            "tx_data_packets": sent, "timeouts": 1, "qp_errors": 0, "errors": list(errors),
            "cpu_bound": False, "machine_cpu_percent": 50.0}  # fmt: skip


def test_a_run_that_did_not_complete_counts_zero_busbw() -> None:
    ok = ls.run_figures(_bench(40e6))
    assert ok["completed"] and ok["busbw_bps"] == 40e6 and ok["retx_rate"] == pytest.approx(0.01)
    bad = ls.run_figures(_bench(40e6, ok=False, errors=["rank 1: iteration 2 timed out after 9 s"]))
    assert not bad["completed"] and bad["timed_out"] and bad["busbw_bps"] == 0.0
    assert bad["busbw_measured_bps"] == 40e6 and bad["line_fraction"] == 0.0
    gone = ls.failed_run("RuntimeError: no JSON")
    assert not gone["completed"] and gone["retx_rate"] is None and gone["errors"]


def test_condition_medians_p99_and_completion() -> None:
    runs = [ls.run_figures(_bench(b, times=t)) for b, t in ((40e6, (1, 2)), (60e6, (1, 3)))]
    runs.append(ls.run_figures(_bench(50e6, ok=False)))
    c = ls.condition(runs)
    assert c["busbw_bps"] == 40e6  # median of 40, 60 and 0 (the failed run)
    assert c["p99_step_s"] == pytest.approx(3.0, abs=0.1)
    assert not c["completed"] and c["completed_runs"] == 2 and c["runs"] == 3
    assert c["retx_rate"] == pytest.approx(30 / 3000)


def test_kept_is_relative_to_the_same_transports_lossless_run() -> None:
    conds = {"0": {"busbw_bps": 80.0}, "0.1": {"busbw_bps": 60.0}, "1": {"busbw_bps": 0.0}}
    assert ls.kept(conds) == {"0": 1.0, "0.1": 0.75, "1": 0.0}
    assert ls.kept({"0": {"busbw_bps": 0.0}, "1": {"busbw_bps": 5.0}})["1"] is None


def _k(m01, m1, r01, r1):
    return {"mrc": {"0": 1.0, "0.1": m01, "1": m1}, "rocev2": {"0": 1.0, "0.1": r01, "1": r1}}


def test_the_papers_figures_reproduce() -> None:
    sc = ls.sub_claims(_k(0.95, 0.33, 0.5, 0.02), {"mrc": True, "rocev2": True})
    assert all(sc[f] for f in ls.FIGURES) and sc["mrc_ahead_at_1"]
    assert ls.decide({"allreduce": sc, "alltoall": sc}) == "reproduced"
    # RoCEv2 failing to complete at 1% is "unusable" whatever its partial busbw said
    failed = ls.sub_claims(_k(0.95, 0.33, 0.5, 0.6), {"mrc": True, "rocev2": False})
    assert failed["rocev2_1_unusable"] and failed["mrc_ahead_at_1"]


def test_mrc_holds_but_rocev2_does_not_collapse_is_partly() -> None:
    # the lab's small BDP and short timeouts: RoCEv2 barely notices the loss
    sc = ls.sub_claims(_k(0.9, 0.9, 0.95, 0.85), {"mrc": True, "rocev2": True})
    assert sc["mrc_0.1_near_line"] and sc["mrc_1_third_or_more"]
    assert not sc["rocev2_0.1_half_or_worse"] and not sc["rocev2_1_unusable"]
    assert sc["mrc_ahead_at_1"]
    assert ls.decide({"allreduce": sc, "alltoall": sc}) == "partly"


def test_mrc_figures_alone_are_partly_and_none_is_not_reproduced() -> None:
    behind = ls.sub_claims(_k(0.9, 0.5, 0.95, 0.85), {"mrc": True, "rocev2": True})
    assert not behind["mrc_ahead_at_1"]  # reported, but MRC's own two figures still hold
    assert ls.decide({"allreduce": behind, "alltoall": behind}) == "partly"
    lost = ls.sub_claims(_k(0.5, 0.1, 0.95, 0.9), {"mrc": True, "rocev2": True})
    assert ls.decide({"allreduce": lost, "alltoall": lost}) == "not reproduced"
    one = ls.sub_claims(_k(0.9, 0.1, 0.95, 0.9), {"mrc": True, "rocev2": True})
    assert ls.decide({"allreduce": one, "alltoall": one}) == "not reproduced"


def test_resent_per_loss_tells_go_back_n_from_selective_repeat() -> None:
    assert ls.resent_per_loss(0.041, 1.0) == pytest.approx(4.1)
    assert ls.resent_per_loss(0.0101, 1.0) == pytest.approx(1.01)
    assert ls.resent_per_loss(0.01, 0.0) is None and ls.resent_per_loss(None, 1.0) is None
    # what the transport resent without loss (congestion, spurious timeouts) is not the loss's
    assert ls.resent_per_loss(0.0128, 1.0, 0.0024) == pytest.approx(1.04)
    assert ls.resent_per_loss(0.0068, 0.1, 0.0083) == 0.0


def test_a_figure_must_hold_in_both_collectives() -> None:
    good = ls.sub_claims(_k(0.95, 0.33, 0.5, 0.02), {"mrc": True, "rocev2": True})
    half = ls.sub_claims(_k(0.95, 0.33, 0.9, 0.8), {"mrc": True, "rocev2": True})
    assert ls.decide({"allreduce": good, "alltoall": half}) == "partly"
    missing = ls.sub_claims(_k(None, None, None, None), {"mrc": True, "rocev2": True})
    assert not any(missing[f] for f in ls.FIGURES if f != "rocev2_1_unusable")


def test_explain_states_figures_and_thresholds() -> None:
    k = {"allreduce": _k(0.95, 0.33, 0.5, 0.02), "alltoall": _k(0.9, 0.7, 0.9, None)}
    done = {"allreduce": {"mrc": True, "rocev2": True}, "alltoall": {"mrc": True, "rocev2": False}}
    per = {c: ls.sub_claims(k[c], done[c]) for c in k}
    why = ls.explain(k, done, per)
    assert "all-reduce: MRC kept 0.95" in why and "did not complete" in why
    assert "within 'about a third'" in why and "above 'about a third'" in why
    assert f">= {ls.NEAR_LINE}" in why and "10x" in why and "more than RoCEv2 at 1% in" in why


def test_summary_fills_the_contract_and_draws_the_plot(tmp_path: Path) -> None:
    def runs_of(scale: dict[str, float], ok1: bool = True) -> dict:
        out = {}
        for p, f in scale.items():
            out[p] = [ls.run_figures(_bench(80e6 * f, ok=ok1 or p != "1")) for _ in range(2)]
        return out

    runs = {
        c: {"mrc": runs_of({"0": 0.9, "0.1": 0.88, "1": 0.3}),
            "rocev2": runs_of({"0": 0.12, "0.1": 0.06, "1": 0.01}, ok1=False)}
        for c in ls.COLLECTIVES
    }  # fmt: skip
    res = Result("loss", 3, "claim", {})
    ctx = Context(quick=True, out_dir=tmp_path, echo=lambda _t: None)
    ls._summarise(ctx, res, runs)
    h = res.metrics["headline"]
    assert h["mrc"] == pytest.approx(0.3 / 0.9, abs=1e-3) and h["rocev2"] == 0.0
    assert h["paper_mrc"] == pytest.approx(1 / 3, abs=1e-3) and h["paper_rocev2"] == 0.0
    assert res.metrics["mrc"]["ar_0.1pct_kept"] == pytest.approx(0.88 / 0.9, abs=1e-3)
    assert res.metrics["rocev2"]["a2a_1pct_completed"] is False
    assert res.verdict == "reproduced", res.why
    assert Path(res.plot).exists()
    assert res.rocev2["alltoall"]["1"]["completed_runs"] == 0
    json.dumps(res.to_dict())  # serialisable
