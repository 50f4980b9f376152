"""The ports' queues of C-built data frames (csrc/mrc_txq.c) and the pacer serving them."""

from __future__ import annotations

import socket

import pytest

from mrcnic.io.pacing import PacerConfig, PortPacer
from mrcnic.transport.port_queues import PortQueues
from mrcnic.transport.rx_engine import c_module as _c_module
from tests.batches import put_frame

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")


def _put(pq: PortQueues, port: int, frame: bytes) -> None:
    """What the send engine does: a frame into the port's next free slot."""
    put_frame(pq.array[port], frame)


@needs_c
def test_frames_leave_in_order_with_sendmmsg_and_are_dropped_from_the_queue() -> None:
    pq = PortQueues([4, 4])
    frames = [bytes([i]) * (100 + i) for i in range(6)]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        cq = pq.queues[1]
        for f in frames[:4]:
            _put(pq, 1, f)
        assert len(cq) == 4 and len(pq.queues[0]) == 0
        assert cq.send(a.fileno(), 3) == (3, 0, 0, sum(map(len, frames[:3])))
        assert [b.recv(9000) for _ in range(3)] == frames[:3]
        for f in frames[4:]:  # the ring wraps
            _put(pq, 1, f)
        assert cq.send(a.fileno(), 3) == (3, 0, 0, sum(map(len, frames[3:])))
        assert [b.recv(9000) for _ in range(3)] == frames[3:]
        assert len(cq) == 0 and pq.array[1].bytes == 0
        with pytest.raises(ValueError):
            cq.send(a.fileno(), 1)  # more than it holds


@needs_c
def test_a_refused_frame_is_counted_and_skipped() -> None:
    pq = PortQueues([4])
    cq = pq.queues[0]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        _put(pq, 0, b"x" * 10)
        b.close()  # the peer is gone: every send is refused
        sent, failed, err, nbytes = cq.send(a.fileno(), 1)
    assert (sent, failed, nbytes) == (0, 1, 0) and err != 0 and len(cq) == 0


@needs_c
def test_the_pacer_serves_control_then_python_data_then_the_c_queue_by_its_tokens() -> None:
    pq = PortQueues([8])
    cfg = PacerConfig(burst_s=0.0, frame_bytes=1000)  # a bucket of two frames
    p = PortPacer(8e6, cfg, now_s=0.0)  # 1 MB/s: 1000 bytes a millisecond
    p.cq = pq.queues[0]
    ctrl = bytearray(120)
    ctrl[14] = 0x6B  # IPv6, DSCP CONTROL's high bits
    p.push(bytes(ctrl))
    p.push(b"\x00" * 900)  # a Python data frame
    for _ in range(3):
        _put(pq, 0, b"\x00" * 1000)
    assert len(p) == 5 and p.data_len() == 4 and p.room() == p.data_limit - 4
    out = p.take(0.0)  # 2000 tokens: control, Python data, then C frames while tokens > 0
    assert [len(f) for f in out] == [120, 900] and p.c_take == 1
    assert p.tokens == pytest.approx(2000 - 120 - 900 - 1000)
    p.cq.send(-1, p.c_take)  # (a bad fd: counted as refused, dropped all the same)
    assert p.take(0.0) == [] and p.c_take == 0  # in debt: nothing until refilled
    assert p.next_due(0.0) == pytest.approx((1e-9 + 20) / 1e6)
    assert p.flush() == 2 and len(p) == 0


@needs_c
def test_control_frames_from_an_output_array_go_to_their_ports_control_queues() -> None:
    ffi = _c_module().ffi
    pq = PortQueues([4, 4], high_cap=2)
    slot = 128
    frames = [bytes([i + 1]) * (90 + i) for i in range(4)]
    buf = ffi.new("uint8_t[]", slot * 4)
    for i, f in enumerate(frames):
        ffi.memmove(buf + i * slot, f, len(f))
    lens = ffi.new("uint32_t[]", [len(f) for f in frames])
    planes = ffi.new("uint8_t[]", [1, 1, 1, 0])  # port 1's queue holds two: one dropped
    pq.push_high(buf, slot, lens, planes, 4)
    assert [len(q) for q in pq.high_queues] == [1, 2]
    assert pq.high[1].drops == 1 and pq.high[0].drops == 0
    cfg = PacerConfig(burst_s=0.0, frame_bytes=1000)
    p = PortPacer(8e6, cfg, now_s=0.0)
    p.cq, p.chq = pq.queues[1], pq.high_queues[1]
    p.push(b"\x00" * 500)  # Python data
    _put(pq, 1, b"\x00" * 1000)  # C data
    assert p.has_control() and len(p) == 4
    assert [len(f) for f in p.take(0.0)] == [500]
    assert (p.c_high_take, p.c_take) == (2, 1)  # control first, then data, by the tokens
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        assert p.chq.send(a.fileno(), 2)[0] == 2
        assert [b.recv(9000) for _ in range(2)] == frames[:2]
