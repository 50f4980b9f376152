"""mrc-sim with the RoCEv2 baseline: the same fabric, the same JSON contract, and the
comparison the project's claims rest on (MRC ahead under loss; MRC survives a plane failure
that kills the baseline's path)."""

from __future__ import annotations

import commands as C
import pytest

from mrcnic.sim import transfer as sim

SMALL = ["--planes", "4", "--paths-per-plane", "2", "--size", "2M", "--msg-size", "256K"]


def test_rocev2_runs_in_the_same_fabric_one_qp_per_rail(capsys):
    code, r = C.run_main_json(capsys, sim.main, *SMALL, "--transport", "rocev2")
    assert code == 0 and r["transport"] == "rocev2" and r["verified"] and r["qp_errors"] == 0
    assert r["qps"] == 4 and r["retransmissions"] == 0 and r["timeouts"] == 0
    rv = r["rocev2"]
    assert sorted(p for p, _ in rv["paths"]) == [0, 1, 2, 3]  # QP i on rail i
    assert rv["gbn_rewinds"] == 0 and rv["cnps"] == 0
    assert 0.5 < r["goodput_fraction"] <= 1.0
    assert r["ev_states"] == {"GOOD": 4, "SKIP": 0, "ASSUMED_BAD": 0, "DENIED": 0}


def test_rocev2_pinned_paths_cannot_use_a_slow_fabric_fully(capsys):
    # paths at a quarter of the port rate: MRC sprays over all 2 paths of a plane, a RoCEv2
    # QP is pinned to one of them (ECMP); DCQCN reacts to the marks of its one queue
    _, m = C.run_main_json(capsys, sim.main, *SMALL, "--path-rate", "25Mbit")
    _, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--path-rate", "25Mbit", "--transport", "rocev2"
    )
    assert m["verified"] and r["verified"] and r["qp_errors"] == 0
    assert r["goodput_fraction"] < 0.6 < m["goodput_fraction"]
    assert r["rocev2"]["cnps"] > 0 and r["rocev2"]["rate_cuts"] > 0


def test_mrc_beats_rocev2_under_one_percent_loss(capsys):
    args = ["--planes", "4", "--paths-per-plane", "2", "--size", "8M", "--loss", "0.01"]
    _, m = C.run_main_json(capsys, sim.main, *args)
    _, r = C.run_main_json(capsys, sim.main, *args, "--transport", "rocev2")
    assert m["verified"] and r["verified"] and m["qp_errors"] == r["qp_errors"] == 0
    assert m["goodput_fraction"] > r["goodput_fraction"]
    rv = r["rocev2"]
    assert rv["gbn_rewinds"] > 0 and rv["out_of_order_drops"] > 0
    assert r["retransmissions"] > r["random_losses"] / 2  # go-back-N resends what it did not lose


def test_mrc_survives_the_plane_failure_that_kills_rocev2(capsys):
    args = [*SMALL, "--fail", "plane:1@5ms"]
    code_m, m = C.run_main_json(capsys, sim.main, *args)
    code_r, r = C.run_main_json(capsys, sim.main, *args, "--transport", "rocev2")
    assert code_m == 0 and m["verified"] and m["qp_errors"] == 0
    assert code_r == 1 and r["qp_errors"] == 1 and not r["verified"]
    assert r["goodput_fraction"] == 0 and r["completion_s"] is None
    (reason,) = r["qp_error_reasons"]
    assert "RETRY_EXCEEDED" in reason and "0x101" in reason  # the QP on rail 1
    assert r["timeouts"] == 7


def test_rocev2_survives_an_outage_shorter_than_its_retries(capsys):
    _, r = C.run_main_json(
        capsys,
        sim.main,
        *SMALL,
        "--fail",
        "plane:1@5ms",
        "--heal",
        "plane:1@40ms",
        "--transport",
        "rocev2",
    )
    assert r["verified"] and r["qp_errors"] == 0 and 0 < r["timeouts"] < 7


def test_rocev2_options_and_the_retired_gbn(capsys):
    _, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--transport", "rocev2", "--qps", "8", "--rocev2-ports", "hash"
    )
    assert r["verified"] and r["qps"] == 8 and r["rocev2"]["ports"] == "hash"
    _, r = C.run_main_json(
        capsys, sim.main, *SMALL, "--transport", "rocev2", "--rocev2-timeout", "3"
    )
    assert r["rocev2"]["ack_timeout_s"] == pytest.approx(4.096e-6 * 8 * 1000)
    # auto: the smallest IB timeout above the worst-case RTT (every buffer on the path full)
    spec = sim.FabricSpec(planes=4, paths_per_plane=2)
    n = sim.rocev2_auto_timeout(spec, 4096)
    scaled = 4.096e-6 * 1000
    assert scaled * 2**n > sim.worst_rtt_s(spec, 4096) >= scaled * 2 ** (n - 1)
    _, r = C.run_main_json(capsys, sim.main, *SMALL, "--transport", "rocev2")
    assert r["rocev2"]["local_ack_timeout"] == n
    bad_args = (["--transport", "gbn"], ["--transport", "tcp"], ["--rocev2-timeout", "0"])
    for bad in (*bad_args, ["--rocev2-timeout", "soon"]):
        with pytest.raises(SystemExit):
            sim.main([*SMALL, *bad])
    assert "retired" in capsys.readouterr().err


def test_rocev2_option_sets_roceconfig_fields_by_name(capsys):
    _, r = C.run_main_json(capsys, sim.main, *SMALL, "--transport", "rocev2")
    assert r["rocev2"]["window_psns"] == 2**23 - 1 and r["rocev2"]["dcqcn_profile"] == "connectx"
    old = ("bdp_window=true", "nak_retries=false", "dcqcn_profile=paper")
    args = [x for o in old for x in ("--rocev2-option", o)]
    _, r = C.run_main_json(capsys, sim.main, *SMALL, "--transport", "rocev2", *args)
    assert r["rocev2"]["window_psns"] == 16 and r["rocev2"]["dcqcn_profile"] == "paper"
    assert r["rocev2"]["options"] == {
        "bdp_window": True,
        "nak_retries": False,
        "dcqcn_profile": "paper",
    }
    assert sim.parse_rocev2_option("cnp_interval_s=0.004") == ("cnp_interval_s", 0.004)
    assert sim.parse_rocev2_option("retry_cnt=3") == ("retry_cnt", 3)
    for bad in ("no_such_field=1", "novalue"):
        with pytest.raises(SystemExit):
            sim.main([*SMALL, "--transport", "rocev2", "--rocev2-option", bad])
    err = capsys.readouterr().err
    assert "unknown RoCEv2 option" in err and "NAME=VALUE" in err
    with pytest.raises(ValueError, match="unknown DCQCN profile"):
        sim.run(
            sim.SimConfig(transport="rocev2", size=4096, rocev2_options=(("dcqcn_profile", "x"),))
        )


def test_rocev2_summary_line(capsys):
    assert sim.main([*SMALL, "--transport", "rocev2"]) == 0
    out = capsys.readouterr().out
    assert "rocev2" in out and "go-back-N rewinds" in out and "verified         yes" in out
