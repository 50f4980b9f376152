"""Issue 14's done-when on a real lab with PFC (root): an 8-QP-per-sender RoCEv2 incast, three
senders to one host, is lossless (``lossless_drops`` 0 on every switch) while pauses flow,
every byte verifies and no QP fails; MRC on the same lab is trimmed, never paused; a pause
storm from a stuck host trips the watchdog of its T0s; the kernel mode refuses --pfc.

Lab: 2 planes x (2 T0 + 2 T1), 2 hosts per T0, 10 Mb/s, so the four NIC processes of a run
stay within two cores (docs/results/performance.md has the default lab's figures)."""

from __future__ import annotations

import commands as C
import lab_helpers as H
import pytest

from lab.fabric.params import LabParams, ParamError


@pytest.fixture(scope="module")
def plab():
    with H.running_lab(planes=2, t0=2, t1=2, hosts_per_t0=2, rate_mbit=10, pfc=True) as st:
        yield st


def test_kernel_mode_refuses_pfc():
    with pytest.raises(ParamError, match="veth has no priority flow control"):
        LabParams(switch="kernel", pfc=True)


@pytest.mark.slow  # ~30 s
def test_rocev2_incast_is_lossless_with_pauses(plab):
    res = C.bench_json("incast", "--lab", plab.name, "--senders", "h1,h2,h3", "--dst", "h0",
                "--qps", "8", "--duration", "4", "--size", "64K", "--transport", "rocev2")  # fmt: skip
    assert res["pfc"] is True
    assert res["verified"] is True and res["qp_errors_total"] == 0, res["flows"]
    assert res["lossless_drops_total"] == 0, res["switches"]
    assert res["pause_tx_total"] > 0 and res["pause_rx_total"] > 0
    for name, row in res["switches"].items():
        assert row["lossless_drops"] == 0, name
        assert row["pause_tx"] is not None, name  # every switch has PFC
    # the incast's destination's T0s paused their uplinks' far ends
    t0s = [n for n in res["switches"] if "-t0-0" in n]
    assert sum(res["switches"][n]["pause_tx"] for n in t0s) > 0


def test_mrc_on_a_pfc_lab_is_trimmed_never_paused(plab):
    res = C.bench_json("incast", "--lab", plab.name, "--senders", "h1,h2,h3", "--dst", "h0",
                "--qps", "8", "--duration", "3", "--size", "64K", "--transport", "mrc")  # fmt: skip
    assert res["verified"] is True and res["qp_errors_total"] == 0
    assert res["pause_tx_total"] == 0 and res["lossless_drops_total"] == 0
    assert sum(row["trims"] or 0 for row in res["switches"].values()) > 0


@pytest.mark.slow  # ~30 s
def test_pause_storm_trips_the_watchdog(plab):
    res = C.bench_json("pause-storm", "--lab", plab.name, "--stuck", "h3", "--seconds", "3",
                "--transport", "rocev2")  # fmt: skip
    assert res["pauses_sent"] > 0 and res["pause_rx_total"] > 0
    assert res["watchdog_trips_total"] > 0, res["switches"]
