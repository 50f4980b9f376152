"""A fabric that loses one T1 path per plane, then the last path of a plane, during an MRC
write: goodput follows what survives, with no stall (the NIC's C send engine, real links).

Lab: 2 planes x (2 T0 + 2 T1) at 10 Mb/s, one host per T0: h0 -> h1 has four paths
(plane, T1). Down go p0's T0-0/T1-0 link, p1's T1-1/T0-1 link (a path per plane left: 20
Mb/s), then p0's T0-0/T1-1 link (plane 0 dead: 10 Mb/s). Before a dead path retired all its
EVs together (docs/design/transport.md, "A dead path retires all its EVs at once"), this test failed:
after the third link, goodput fell to 0 for seconds (a 16 s write with the same faults sat at
0 Mb/s for about 6 s), the window spent on dead EVs, one timeout each.
"""

from __future__ import annotations

import json
import threading
import time

import commands as C
import lab_helpers as H
import pytest

from lab.fabric.faults import Faults

RATE_MBIT = 10
DURATION_S = 11
BIN_MS = 500
FAULTS_S = (3.0, 4.5, 6.0)  # after the write starts
LINKS = (("p0-t0-0", "p0-t1-0"), ("p1-t0-1", "p1-t1-1"), ("p0-t0-0", "p0-t1-1"))


@pytest.mark.slow  # ~20 s
def test_mrc_follows_the_surviving_paths_without_a_stall() -> None:
    with H.running_lab(rate_mbit=RATE_MBIT) as st:
        faults = Faults(st, echo=None)
        bench = C.bench_background("write", "--lab", st.name, "--src", "h0", "--dst", "h1",
                                   "--duration", str(DURATION_S), "--timeline-ms", str(BIN_MS),
                                   "--json", "-q")  # fmt: skip
        t0 = time.monotonic()
        done: list[float] = []

        def inject() -> None:
            for at_s, (a, b) in zip(FAULTS_S, LINKS, strict=True):
                time.sleep(max(0.0, t0 + at_s - time.monotonic()))  # schedule: time itself
                faults.link_down(a, b)
                done.append(time.monotonic() - t0)

        th = threading.Thread(target=inject, daemon=True)
        th.start()
        out, err = bench.communicate(timeout=DURATION_S + 60)
        th.join(timeout=10)
    assert bench.returncode == 0, err
    assert len(done) == 3, done
    r = json.loads(out)
    assert r["verified"] is True and r["qp_errors"] == 0, r
    # The write starts after its NIC processes do (about a second after launch): the bins
    # from 2 s after the last fault (launch time) to the end's partial bin all lie after it.
    bins = [bps for t_s, bps in r["timeline"][:-1] if t_s >= done[-1] + 2.0]
    assert len(bins) >= 4, r["timeline"]
    # one path left: 10 Mb/s. A stall shows as bins at 0; 0.5 leaves room for a slow machine
    assert min(bins) > 0.5 * RATE_MBIT * 1e6, r["timeline"]
