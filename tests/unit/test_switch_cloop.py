"""The switch's C event loop (csrc/mrc_swloop.c) without root: ports without a receive ring
(rx_fd -1) whose egress queues send into unix datagram sockets, and a pipe as the "other"
fd. Receiving from PACKET_MMAP rings is covered on real veths by tests/lab (the switch
conformance and pacing tests run the C loop and its Python twin)."""

from __future__ import annotations

import os
import select
import socket
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
    first = _recv_all(rig.socks[0][1])
    assert 2 <= len(first) <= 3
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
    assert why is cloop.Wake.OTHER_FD and rig.loop.out[1] == r
    assert time.monotonic_ns() - t0 < 4_000_000_000  # it returned, not the deadline


def test_bad_arguments_are_refused():
    from mrcnic import _mrcfast

    ffi, lib = _mrcfast.ffi, _mrcfast.lib
    out = ffi.new("int64_t[4]")
    sw = ffi.new("struct mrc_sw *")  # no ports, no arrays
    assert lib.mrc_sw_poll(sw, 0, out) < 0
    assert lib.mrc_sw_poll(ffi.NULL, 0, out) < 0


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
