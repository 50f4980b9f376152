"""`mrc-lab probe` on a real lab (root): with every link up it calls every link up; when a
T0-T1 link is taken down (`mrc-lab link down`) it names exactly that link down within its
detection bound; 30% loss on another link (`mrc-lab loss`) is named lossy."""

from __future__ import annotations

import threading
import time

import lab_helpers as H
import pytest

from lab import probe
from lab.faults import Faults

pytestmark = [pytest.mark.lab, H.needs_root]
SLACK_S = 0.3  # scheduling on a busy two-core machine


@pytest.fixture(scope="module")
def plab():
    with H.running_lab(planes=2, t0=2, t1=2, hosts_per_t0=2, rate_mbit=10) as st:
        yield st


def test_all_up(plab):
    res = probe.run(plab, seconds=1.5)
    assert res["probes_sent"] > 0 and res["probes_received"] == res["probes_sent"]
    assert res["not_up"] == [] and len(res["links"]) == 16


def test_names_a_downed_link_within_its_bound_and_a_lossy_one(plab):
    f = Faults(plab, echo=None)
    applied: dict[str, float] = {}

    def faults() -> None:
        time.sleep(1.0)
        f.link_down("p0-t0-0", "p0-t1-1")
        applied["down"] = time.monotonic()
        f.loss("p1-t0-1", "p1-t1-0", 30)
        applied["loss"] = time.monotonic()

    th = threading.Thread(target=faults)
    try:
        th.start()
        res = probe.run(plab, seconds=5.0)
        th.join()
    finally:
        th.join()
        f.link_up("p0-t0-0", "p0-t1-1")
        f.loss_clear("p1-t0-1", "p1-t1-0")
    states = {r["link"]: r["state"] for r in res["not_up"]}
    assert states == {"p0-t0-0 - p0-t1-1": "down", "p1-t0-1 - p1-t1-0": "lossy"}, res["events"]
    down_at = next(e["t_s"] for e in res["events"]
                   if e["link"] == "p0-t0-0 - p0-t1-1" and e["to"] == "down")  # fmt: skip
    detection = res["started_monotonic_s"] + down_at - applied["down"]
    assert 0 < detection <= res["detection_bound_s"] + SLACK_S, detection
