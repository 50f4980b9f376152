"""A NIC port honours PFC for the lossless priority: the RoCEv2 baseline's data (DSCP
LOSSLESS when configured) waits while the link partner pauses it, everything else flows."""

from __future__ import annotations

from mrcnic.io.batch import RecvRing
from mrcnic.io.pacing import PortPacer, is_lossless_frame
from mrcnic.io.pfc import PortPause
from mrcnic.transport.qp_types import QpConfig
from mrcnic.verbs import RemoteBuffer, SimNetwork
from mrcnic.wire import layout
from mrcnic.wire.pfc import encode_pause

MAC = bytes.fromhex("026d72630001")


def _frame(dscp: int, n: int = 1000) -> bytes:
    f = bytearray(n)
    f[12:14] = b"\x86\xdd"
    w0 = 6 << 28 | dscp << layout.DSCP_SHIFT
    f[14:18] = w0.to_bytes(4, "big")
    return bytes(f)


def test_paused_lossless_frames_wait_and_the_rest_flows():
    rate = 100e6
    pacer = PortPacer(rate, pause=PortPause(rate))
    lossless = _frame(int(layout.Dscp.LOSSLESS))
    other = _frame(int(layout.Dscp.TRIMMABLE))
    assert is_lossless_frame(lossless) and not is_lossless_frame(other)
    pacer.pause.receive(encode_pause(MAC, {3: 1000}), 0.0)  # 5.12 ms at 100 Mb/s
    pacer.push(lossless)
    pacer.push(other)
    assert pacer.take(0.001) == [other]  # the paused class waits, the other goes
    assert pacer.data_len() == 1 and pacer.blocking_len(0.001) == 0  # it holds nobody back
    assert len(pacer) == 1 and pacer.next_due(0.001) == pacer.pause.paused_until
    assert pacer.take(0.006) == [lossless]  # the pause ran out
    pacer.pause.receive(encode_pause(MAC, {3: 0xFFFF}), 0.01)
    pacer.push(lossless)
    assert pacer.take(0.02) == []
    pacer.pause.receive(encode_pause(MAC, {3: 0}), 0.021)  # resumed at once
    assert pacer.take(0.021) == [lossless]
    assert pacer.pause.pause_rx == 3


def test_without_pfc_lossless_frames_are_plain_data():
    pacer = PortPacer(100e6)  # no pause: the port does not do PFC
    f = _frame(int(layout.Dscp.LOSSLESS))
    pacer.push(f)
    assert pacer.take(0.0) == [f] and not pacer.lossless


def test_a_pfc_frame_reaches_the_port_it_came_in_on():
    net = SimNetwork(seed=3)
    dev = net.devices[0]
    seen = []
    dev.on_pfc = lambda port, frame, now: seen.append((port, bytes(frame), now))
    ring = RecvRing(9216, 2)
    pfc = encode_pause(MAC, {3: 7})
    ring.view[: len(pfc)] = pfc
    ring.lens[0] = len(pfc)
    dev.receive_batch(ring, 1, 1.5, port=1)
    assert seen == [(1, pfc, 1.5)] and dev.stats.rx_pfc == 1 and dev.stats.rx_not_mrc == 0


def test_the_rocev2_baseline_rides_the_lossless_class_when_asked():
    net = SimNetwork(seed=4)
    a, b = net.devices
    cfg = QpConfig(cc_options=(("lossless", True),))
    qa, qb = a.create_qp(cfg, "rocev2"), b.create_qp(cfg, "rocev2")
    qa.connect(qb.export())
    qb.connect(qa.export())
    qa.post_write(1, b"x" * 10_000, RemoteBuffer.of(b.register(bytearray(10_000))))
    data = [f for _, f in a.frames_to_send(0.0) if f[layout.OFF_BTH] in layout.RC_DATA_OPS]
    assert data and all(is_lossless_frame(f) for f in data)
    plain = a.create_qp(QpConfig(), "rocev2")
    assert plain.core._data_dscp == int(layout.Dscp.NO_TRIM)
