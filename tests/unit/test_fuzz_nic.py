"""make fuzz's NIC target, short: hostile frames into two devices whose QPs are writing,
on both engines. Nothing may raise, every frame must be counted exactly once under a named
fate, and the generators must reach the checks behind the address check."""

from __future__ import annotations

import gc
import weakref

import pytest

from lab import fuzz_nic
from lab.fuzz import RSS_BOUND_BYTES
from mrcnic.transport.rx_engine import _c_module
from mrcnic.verbs import SimNetwork

ENGINES = [
    "py",
    pytest.param(
        "c", marks=pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
    ),
]
# reasons the frames must reach (a generator that stopped reaching one would hide it)
REACHED = (
    "device_rx_not_mrc",
    "device_rx_unknown_qp",
    "rx_malformed",
    "rx_foreign",
    "rx_trimmed",
    "rx_duplicates",
    "rx_psn_out_of_window",
    "rx_msn_out_of_range",
    "rx_bad_rkey",
    "rx_no_permission",
    "rx_out_of_bounds",
    "rx_placed_packets",
    "rx_sacks",
    "rx_nacks",
    "rx_stale_nacks",
    "rx_probes",
    "rx_port_status",
    "rx_port_status_acks",
)


@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_frames_are_all_counted_and_nothing_raises(engine, monkeypatch):
    monkeypatch.setenv("MRC_NIC_ENGINE", engine)
    r = fuzz_nic.run(30_000, seed=5, pair_every=10_000)
    assert r["engine"] == engine
    assert r["crashes"] == 0, r["crash_tracebacks"]
    assert r["frames"] == 30_000 and r["frames_from_fabric"] > 1000
    assert r["every_frame_accounted"], (r["accounted"], r["frames_total"], r["counters"])
    assert r["every_data_frame_accounted"] and r["every_refusal_named"]
    missed = [k for k in REACHED if r["counters"][k] == 0]
    assert not missed, missed
    assert r["qp_pairs"] >= 3 and r["writes_completed"] > 0  # live QPs all along
    assert r["rss_growth_bytes"] < RSS_BOUND_BYTES


@pytest.mark.parametrize("engine", ENGINES)
def test_a_destroyed_qp_frees_its_memory_without_the_cycle_collector(engine, monkeypatch):
    monkeypatch.setenv("MRC_NIC_ENGINE", engine)
    net = SimNetwork(seed=9)
    a, b = net.devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(qa.export())
    core = weakref.ref(qa.core)
    placed_before = qa.stats().rx_closed
    a.destroy_qp(qa)
    b.destroy_qp(qb)
    with pytest.raises(Exception, match="destroyed"):
        qa.post_write(1, b"x", None)  # type: ignore[arg-type]
    assert qa.stats().rx_closed == placed_before  # stats stay readable
    del qa, qb
    gc.disable()
    try:
        assert core() is None  # freed by reference counting, at once
    finally:
        gc.enable()
