"""N-to-1 incast of real QueuePairs (``mrcnic.sim.incast``): exact bytes, no error, the
receiver's last hop really congests (trims to TRIMMED_LASTHOP), the run is deterministic."""

from __future__ import annotations

import pytest

from mrcnic.sim import incast as sim_incast
from mrcnic.sim.incast import IncastConfig

SMALL = IncastConfig(
    senders=3, planes=2, paths_per_plane=2, size=256 << 10, msg_size=64 << 10, queue_bytes=16 << 10
)


def test_incast_delivers_exactly_and_congests_the_last_hop():
    inc = sim_incast.Incast(SMALL)
    r = inc.run()
    assert r["verified"] and r["qp_errors"] == 0
    assert all(c is not None for c in r["sender_completion_s"])
    assert r["lasthop_trims"] > 0  # 3:1 at the receiver (the shared downlinks may trim too)
    assert 0 < r["goodput_fraction"] <= 1 and 0 < r["jain_fairness"] <= 1
    assert r["spurious_timeouts"] <= r["timeouts"]
    assert inc.fabric.misrouted == 0
    assert r["capacity_bps"] == 2 * 100e6  # the receiver's two ports


def test_incast_is_deterministic_and_seeded():
    keep = ("goodput_fraction", "retransmissions", "trims", "sender_completion_s")
    a, b = sim_incast.run(SMALL), sim_incast.run(SMALL)
    c = sim_incast.run(IncastConfig(**{**_fields(SMALL), "seed": 2}))
    assert {k: a[k] for k in keep} == {k: b[k] for k in keep}
    assert {k: a[k] for k in keep} != {k: c[k] for k in keep}


def test_incast_rejects_nonsense():
    with pytest.raises(ValueError):
        sim_incast.Incast(IncastConfig(senders=0))


def _fields(cfg: IncastConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__dataclass_fields__}
