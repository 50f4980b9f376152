"""The switch's C event loop (csrc/mrc_swloop.c) without root: ports without a receive ring
(rx_fd -1) whose egress queues send into unix datagram sockets, and a pipe as the "other"
fd. Receiving from PACKET_MMAP rings is covered on real veths by tests/lab (the switch
conformance and pacing tests run the C loop and its Python twin)."""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from types import SimpleNamespace

import pytest

from mrcswitch import cloop
from mrcswitch.config import PortConfig
from mrcswitch.fastpath import Planner
from mrcswitch.fcache import DecisionCache
from mrcswitch.pipeline import DropCounter, DropReason

pytestmark = pytest.mark.skipif(not cloop.available(), reason="C module without mrc_sw_poll")

RATE_BPS = 8_000_000  # 1 byte per us: easy to reason about
FRAME = 1000
MAX_FRAME = 2048


def _port_cfg(**kw) -> PortConfig:
    from mrcswitch.cqueue import CEgressQueue  # noqa: F401  (import error = clear skip reason)

    base = dict(
        name="p", interface="lo", peer="x", mac=None, peer_mac=b"\x02" * 6,
        rate_bps=RATE_BPS, buffer_bytes=64 << 10, high_buffer_bytes=16 << 10,
        burst_bytes=2 * FRAME, ecn=False, ecn_threshold_bytes=32 << 10, trimming=False,
        trim_bytes=0, last_hop=False,
    )  # fmt: skip
    base.update(kw)
    fields = PortConfig.__dataclass_fields__
    return PortConfig(**{k: v for k, v in base.items() if k in fields})


def _frame(i: int, dscp: int = 4) -> bytearray:
    f = bytearray(FRAME)
    f[12:14] = b"\x86\xdd"
    tc = dscp << 2
    f[14] = 0x60 | (tc >> 4)
    f[15] = (tc & 0x0F) << 4
    f[54:58] = i.to_bytes(4, "big")
    return f


@pytest.fixture
def rig():
    from mrcswitch.cqueue import CEgressQueue

    socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    for a, b in socks:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        b.setblocking(False)
    now = time.monotonic_ns()
    ports = [
        SimpleNamespace(
            index=i, ring=None, sock=None, tx_sock=socks[i][0], up=True,
            queue=CEgressQueue(_port_cfg(name=f"p{i}"), 32, now, max_frame_bytes=MAX_FRAME),
            drops=DropCounter(), rx_packets=0, rx_bytes=0, tx_packets=0, tx_bytes=0,
        )
        for i in range(2)
    ]  # fmt: skip
    planner = Planner([bytes(12)] * 2, 4, 8, max(DropReason) + 1)
    ep = select.epoll()
    r, w = os.pipe()
    ep.register(r, select.EPOLLIN)
    loop = cloop.CLoop(
        ep.fileno(), ports, [DecisionCache(64) for _ in ports], planner, slots=8,
        cap=MAX_FRAME, hist_len=max(DropReason) + 1, batches_per_wake=2, timer_slack_ns=0,
        reasons=(DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR),
    )  # fmt: skip
    yield SimpleNamespace(loop=loop, ports=ports, socks=socks, pipe=(r, w), planner=planner)
    ep.close()
    os.close(r)
    os.close(w)
    for a, b in socks:
        a.close()
        b.close()


def _recv_all(s: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(65536))
        except BlockingIOError:
            return out


def test_queued_frames_leave_paced_in_order_and_are_counted(rig):
    p = rig.ports[0]
    n = 12
    for i in range(n):
        assert p.queue.enqueue(_frame(i), time.monotonic_ns()) in (0, 1)
    t0 = time.monotonic_ns()
    # the bucket holds 2 frames: the other 10 need 10 ms at 1 byte/us
    why = rig.loop.poll(t0 + 200_000_000)
    assert why is cloop.Wake.DEADLINE
    ev = rig.loop.event
    assert (ev.why, ev.port, ev.fd, ev.err, ev.frames, ev.n_punt) == (why, -1, -1, 0, 0, 0)
    got = _recv_all(rig.socks[0][1])
    assert [int.from_bytes(f[54:58], "big") for f in got] == list(range(n))
    rig.loop.fold()
    assert p.tx_packets == n and p.tx_bytes == n * FRAME
    assert len(p.queue) == 0
    assert rig.loop.counters()["timer_wakeups"] >= 1


def test_pacing_holds_frames_until_their_tokens(rig):
    p = rig.ports[0]
    for i in range(6):
        p.queue.enqueue(_frame(i), time.monotonic_ns())
    t0 = time.monotonic_ns()
    rig.loop.poll(t0 + 1_000_000)  # 1 ms: the burst (2 frames) and at most one more
    elapsed_ms = (time.monotonic_ns() - t0) // 1_000_000  # more on a busy machine
    first = _recv_all(rig.socks[0][1])
    assert 2 <= len(first) <= 3 + elapsed_ms  # one frame per ms of tokens, no more
    rig.loop.poll(time.monotonic_ns() + 100_000_000)
    assert len(first) + len(_recv_all(rig.socks[0][1])) == 6


def test_a_down_port_flushes_its_queue_as_port_down(rig):
    p = rig.ports[1]
    for i in range(5):
        p.queue.enqueue(_frame(i), time.monotonic_ns())
    p.up = False
    rig.loop.sync(p)
    assert rig.loop.poll(time.monotonic_ns() + 5_000_000) is cloop.Wake.DEADLINE
    rig.loop.fold()
    assert p.drops.by_reason[DropReason.PORT_DOWN] == 5
    assert len(p.queue) == 0 and _recv_all(rig.socks[1][1]) == []


def test_a_send_error_is_counted_as_tx_error(rig):
    p = rig.ports[0]
    rig.socks[0][1].close()  # the peer is gone: ECONNREFUSED
    for i in range(3):
        p.queue.enqueue(_frame(i), time.monotonic_ns())
    rig.loop.poll(time.monotonic_ns() + 5_000_000)
    rig.loop.fold()
    assert p.drops.by_reason[DropReason.TX_ERROR] == 3 and p.tx_packets == 0
    assert len(p.queue) == 0


def test_another_fd_hands_control_back(rig):
    r, w = rig.pipe
    os.write(w, b"x")
    t0 = time.monotonic_ns()
    why = rig.loop.poll(t0 + 5_000_000_000)
    ev = rig.loop.event
    assert why is cloop.Wake.OTHER_FD and ev.why == why and ev.fd == r and ev.port == -1
    assert time.monotonic_ns() - t0 < 4_000_000_000  # it returned, not the deadline


def test_bad_arguments_are_refused():
    from mrcnic import _mrcfast

    ffi, lib = _mrcfast.ffi, _mrcfast.lib
    ev = ffi.new("struct mrc_sw_event *")
    sw = ffi.new("struct mrc_sw *")  # no ports, no arrays
    assert lib.mrc_sw_poll(sw, 0, ev) < 0
    assert lib.mrc_sw_poll(ffi.NULL, 0, ev) < 0


def test_queue_factory_falls_back_to_the_twin_for_bounds_c_does_not_take():
    from mrcswitch.cqueue import CEgressQueue, make_egress_queue
    from mrcswitch.queue import EgressQueue

    assert isinstance(make_egress_queue(_port_cfg(), 32, 0, MAX_FRAME), CEgressQueue)
    huge = _port_cfg(buffer_bytes=1 << 30)  # above the C queue's 512 MiB bound
    assert type(make_egress_queue(huge, 32, 0, MAX_FRAME)) is EgressQueue


def test_downed_lists_ports_the_loop_took_down(rig):
    p = rig.ports[1]
    assert rig.loop.downed() == []
    rig.loop._cports[p.index].up = 0  # as sent() does after ENETDOWN
    assert rig.loop.downed() == [p]
    p.up = False  # Python took it down too
    assert rig.loop.downed() == []


def test_the_loop_refuses_a_planner_that_does_not_match(rig):
    planner = Planner([bytes(12)] * 3, 4, 8, max(DropReason) + 1)  # 3 ports, the loop has 2
    with pytest.raises(ValueError):
        cloop.CLoop(
            -1, rig.ports, [DecisionCache(64) for _ in rig.ports], planner, slots=8,
            cap=MAX_FRAME, hist_len=max(DropReason) + 1, batches_per_wake=1, timer_slack_ns=0,
            reasons=(DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR),
        )  # fmt: skip


def test_a_bad_fwd_batch_is_refused(rig):
    from mrcnic import _mrcfast

    sw, poll, ev = rig.loop._sw, _mrcfast.lib.mrc_sw_poll, rig.loop.event
    sw.fwd.n_ports = 3  # its per-port arrays would not match the loop's ports
    assert poll(sw, 0, ev) < 0
    sw.fwd.n_ports = 2
    sw.fwd.sent = _mrcfast.ffi.NULL
    assert poll(sw, 0, ev) < 0


# --- the receive path on a synthetic TPACKET_V2 ring (an fd made readable by a pipe) --------

R_FSIZE, R_BLOCK, R_NR = 256, 512, 8
_TP = struct.Struct("=IIIH")  # tpacket2_hdr: status, len, snaplen, mac


def _ip_frame(tag: int, hop: int = 64) -> bytes:
    payload = bytes([tag]) * 30
    ip = (6 << 28).to_bytes(4, "big") + len(payload).to_bytes(2, "big") + bytes([17, hop])
    return b"\x02" * 12 + b"\x86\xdd" + ip + bytes(32) + payload


@pytest.fixture
def rx_rig():
    from mrcnic import _mrcfast
    from mrcnic.io import batch as batch_io
    from mrcswitch.cqueue import CEgressQueue

    ffi = _mrcfast.ffi
    ptr = ffi.new("uint8_t[]", R_BLOCK * (R_NR * R_FSIZE // R_BLOCK))
    c_offs, c_lens = ffi.new("uint32_t[]", 4), ffi.new("uint32_t[]", 4)
    ring = SimpleNamespace(
        ptr=ptr, view=memoryview(ffi.buffer(ptr)), buf_len=len(ffi.buffer(ptr)),
        block_size=R_BLOCK, frame_size=R_FSIZE, frame_nr=R_NR, head=0, slots=4, cap=MAX_FRAME,
        c_offs=c_offs, c_lens=c_lens,
    )  # fmt: skip
    mac = batch_io.TP2_MAC_OFFSET

    def put(k: int, f: bytes) -> None:
        at = k * R_FSIZE
        _TP.pack_into(ring.view, at, 1, len(f), len(f), mac)
        ring.view[at + mac : at + mac + len(f)] = f

    r, w = os.pipe()
    os.write(w, b"x")  # the in-port's "socket" stays readable: every wait returns at once
    tx = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    for _, b in tx:
        b.setblocking(False)
    now = time.monotonic_ns()
    ports = [
        SimpleNamespace(
            index=i, ring=ring if i == 0 else None,
            sock=SimpleNamespace(fileno=lambda: r) if i == 0 else None, tx_sock=tx[i][0],
            up=True, queue=CEgressQueue(_port_cfg(name=f"p{i}"), 32, now, max_frame_bytes=MAX_FRAME),
            drops=DropCounter(), rx_packets=0, rx_bytes=0, tx_packets=0, tx_bytes=0,
        )
        for i in range(2)
    ]  # fmt: skip
    caches = [DecisionCache(64) for _ in ports]
    planner = Planner([bytes(range(12))] * 2, 4, 4, max(DropReason) + 1)
    ep = select.epoll()
    ep.register(r, select.EPOLLIN)
    loop = cloop.CLoop(
        ep.fileno(), ports, caches, planner, slots=4, cap=MAX_FRAME,
        hist_len=max(DropReason) + 1, batches_per_wake=1, timer_slack_ns=0,
        reasons=(DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR),
    )  # fmt: skip
    yield SimpleNamespace(loop=loop, ports=ports, ring=ring, put=put, cache=caches[0], tx=tx,
                          planner=planner)  # fmt: skip
    ep.close()
    os.close(r)
    os.close(w)
    for a, b in tx:
        a.close()
        b.close()


def test_rx_miss_then_forward_then_punt_report_through_the_event(rx_rig):
    loop, ring, ev = rx_rig.loop, rx_rig.ring, rx_rig.loop.event
    f0, f1, f2, f3 = _ip_frame(1), _ip_frame(2), _ip_frame(3, hop=1), _ip_frame(4)
    rx_rig.put(0, f0)
    rx_rig.put(1, f1)
    # not decided yet: the batch goes to Python untouched
    assert loop.poll(time.monotonic_ns() + 50_000_000) is cloop.Wake.MISS
    assert (ev.port, ev.frames, ev.n_punt, ev.fd) == (0, 2, 0, -1) and ring.head == 0
    # decided (port 1): sent at once, released, counted; the loop runs on to the deadline
    rx_rig.cache.insert(f0[:54], 1)
    rx_rig.cache.insert(f1[:54], 1)
    assert loop.poll(time.monotonic_ns() + 20_000_000) is cloop.Wake.DEADLINE
    assert ring.head == 2 and ring.view[0] == ring.view[R_FSIZE] == 0  # back to the kernel
    got = _recv_all(rx_rig.tx[1][1])
    assert [g[54] for g in got] == [1, 2] and got[0][:12] == bytes(range(12))
    assert got[0][21] == 63  # hop limit
    # a drop is counted on the in-port; a record that does not fit (port 7) is punted
    rx_rig.put(2, f2)
    rx_rig.put(3, f3)
    rx_rig.cache.insert(f2[:54], -int(DropReason.HOP_LIMIT))
    rx_rig.cache.insert(f3[:54], 7)
    assert loop.poll(time.monotonic_ns() + 50_000_000) is cloop.Wake.PUNT
    assert (ev.port, ev.frames, ev.n_punt) == (0, 2, 1)
    assert rx_rig.planner.defer[0] == 1  # the batch's second frame: Python decides it
    loop.fold()
    p0, p1 = rx_rig.ports
    assert p0.rx_packets == 4 and p0.drops.by_reason[DropReason.HOP_LIMIT] == 1
    assert p1.tx_packets == 2 and p1.tx_bytes == 2 * len(f0)
