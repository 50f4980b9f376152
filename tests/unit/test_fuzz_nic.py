"""make fuzz's NIC target, short: hostile frames into two devices whose QPs are writing,
on both engines. Nothing may raise, every frame must be counted exactly once under a named
fate, and the generators must reach the checks behind the address check."""

from __future__ import annotations

import gc
import weakref

import pytest

from lab.workloads.fuzz import nic as fuzz_nic
from lab.workloads.fuzz.run import RSS_BOUND_BYTES
from mrcnic.transport.qp_types import QpStateError
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.verbs import RemoteBuffer, SimNetwork

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


def _connected(engine: str, monkeypatch, seed: int):
    """Two devices of ``engine`` and a connected QP pair, nothing sent yet."""
    monkeypatch.setenv("MRC_NIC_ENGINE", engine)
    a, b = SimNetwork(seed=seed).devices
    qa, qb = a.create_qp(), b.create_qp()
    qa.connect(qb.export())
    qb.connect(qa.export())
    return a, b, qa, qb


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
    a, b, qa, qb = _connected(engine, monkeypatch, seed=9)
    core = weakref.ref(qa.core)
    mr = b.register(bytearray(4096))
    qa.post_write(1, b"x" * 100, RemoteBuffer.of(mr))
    sent = qa.stats().tx_data_packets
    data = [f for _, f in a.frames_to_send(0.0)]
    assert qa.stats().tx_data_packets == sent + 1
    b.destroy_qp(qb)
    b.receive_frame(data[0], 0.0)  # to a QP the device no longer has
    assert b.stats.rx_unknown_qp == 1 and qb.state.name == "ERROR"
    a.destroy_qp(qa)
    with pytest.raises(QpStateError, match="destroyed"):
        qa.post_write(2, b"x", RemoteBuffer.of(mr))
    assert qa.stats().tx_data_packets == sent + 1  # stats stay readable
    del qa, qb
    gc.disable()
    try:
        assert core() is None  # freed by reference counting, at once
    finally:
        gc.enable()


@pytest.mark.parametrize("engine", ENGINES)
def test_only_mrc_frames_reach_a_qp_on_the_batch_path(engine, monkeypatch):
    """A real data frame with another UDP port (or ethertype) is not MRC: no engine takes it."""
    from mrcnic.io.batch import RecvRing
    from mrcnic.wire import layout

    a, b, qa, qb = _connected(engine, monkeypatch, seed=4)
    region = bytearray(4096)
    qa.post_write(1, b"\x77" * 1000, RemoteBuffer.of(b.register(region)))
    frame = next(f for _, f in a.frames_to_send(0.0) if f[layout.OFF_BTH] in layout.MRC_DATA_OPS)
    other_port = bytearray(frame)
    other_port[layout.OFF_UDP_DST_PORT + 1] ^= 1  # 4790
    other_type = bytearray(frame)
    other_type[layout.OFF_ETHERTYPE] = 0x08
    ring = RecvRing(fuzz_nic.SLOT_BYTES, 4)
    fuzz_nic._fill(ring, [bytes(other_port), bytes(other_type)])
    b.receive_batch(ring, 2, 0.0)
    assert b.stats.rx_not_mrc == 2 and qb.stats().rx_placed_packets == 0
    assert bytes(region) == bytes(4096)
    fuzz_nic._fill(ring, [frame])
    b.receive_batch(ring, 1, 0.0)
    assert qb.stats().rx_placed_packets == 1 and region[:1000] == b"\x77" * 1000


@pytest.mark.parametrize("engine", ENGINES)
def test_a_fatal_nack_must_echo_the_transmission(engine, monkeypatch):
    """A REMOTE_ACCESS_ERROR NACK about an outstanding PSN under the peer's address but with
    another timestamp (a forger's) is counted and ignored; the one echoing it is fatal."""
    from mrcnic.wire import layout

    a, b, qa, qb = _connected(engine, monkeypatch, seed=6)
    qa.post_write(1, b"x" * 100, RemoteBuffer.of(b.register(bytearray(4096))))
    f = next(f for _, f in a.frames_to_send(0.0) if f[layout.OFF_BTH] in layout.MRC_DATA_OPS)
    psn = int.from_bytes(f[layout.OFF_BTH + 9 : layout.OFF_BTH + 12], "big")
    ts = int.from_bytes(f[layout.OFF_BTH + 16 : layout.OFF_BTH + 24], "big")
    fatal = int(layout.NackReason.REMOTE_ACCESS_ERROR)

    def nack(ts_ns: int) -> bytes:
        qb.core._send_nack(fatal, psn, 0, ts_ns, 0)
        return qb.core.control_frames_to_send()[-1][1]

    a.receive_frame(nack(ts + 1), 0.001)
    assert qa.stats().rx_unmatched_nacks == 1 and qa.state.name == "READY"
    a.receive_frame(nack(ts), 0.002)
    assert qa.state.name == "ERROR"
