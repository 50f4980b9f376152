"""AioNic's pump with its ports served in C (mrcnic.io.cpacing) against the same pump with
its Python pacers (the twin): two NICs on a fake event loop write to each other through the
C engines, each port sending on a datagram socket pair that the test's wire reads and
delivers to the other NIC after a fixed delay. Both worlds run in the same virtual time, so
they must put the same frames on the wire at the same times, through a port going down in
the middle, and end with the same counters."""

from __future__ import annotations

import heapq
import socket

import pytest

from mrcnic.io.aio import AioNic
from mrcnic.transport.qp_types import NetConfig, PortAddr, QpConfig
from mrcnic.transport.rx_engine import c_module
from mrcnic.verbs import Device, RemoteBuffer, WcStatus
from mrcnic.wire.usid import ClosShape
from tests.unit.test_aio import FakeLoop

pytestmark = pytest.mark.skipif(c_module() is None, reason="the C module is not built")

RATE = 100e6
DELAY_S = 150e-6


def _world(c_pace: bool, down_at_s: float | None, size: int):
    loop = FakeLoop()
    shape = ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    nics, socks = [], []
    for h in range(2):
        addrs = tuple(
            PortAddr(bytes((2, 0, 0, h, p, 1)), bytes((2, 0, 0, h, p, 2))) for p in range(2)
        )
        dev = Device(NetConfig(shape, h, addrs), RATE, clock=loop.clock, seed=10 + h, engine="c")
        nic = AioNic(dev, [f"x{h}p0", f"x{h}p1"], clock=loop.clock)
        nic._loop = loop  # what open() does, without interfaces
        nic._open = True
        pairs = []
        for p in nic.ports:  # each port's "socket": one end of a datagram pair
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
            p.tx_fd, p.up = a.fileno(), True
            pairs.append((a, b))
        nic._attach_port_queues(c_pace)  # what open() does next
        assert (nic._cpace is not None) is c_pace
        dev.on_work = nic.kick
        nics.append(nic)
        socks.append(pairs)
    cfg = QpConfig(base_rtt_s=1e-3, seed=7, start_psn=12345)  # (alike in both worlds)
    qa, qb = nics[0].device.create_qp(cfg), nics[1].device.create_qp(cfg)
    qa.connect(qb.export())
    qb.connect(qa.export())
    target = bytearray(size)
    rb = RemoteBuffer.of(nics[1].device.register(target))
    data = bytes(range(251)) * (size // 251 + 1)
    qa.post_write(1, data[:size], rb)
    nics[0].kick()

    wire: list[tuple[float, int, int, bytes]] = []
    done: list = []
    downed = False
    while loop._q and not done and loop.now < 2.0:
        t, _, fn, hd = heapq.heappop(loop._q)
        loop.now = max(loop.now, t)
        if not hd.cancelled:
            fn()
        if down_at_s is not None and not downed and loop.now >= down_at_s:
            downed = True  # the writer's port 1 goes down (as ENETDOWN or netlink says)
            nics[0]._set_port(nics[0].ports[1], False, loop.now)
        for h, pairs in enumerate(socks):
            for port, (_a, b) in enumerate(pairs):
                while True:
                    try:
                        f = b.recv(9000, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    wire.append((loop.now, h, port, f))
                    other = nics[1 - h]

                    def deliver(f=f, other=other) -> None:
                        other.device.receive_frame(f, loop.now)
                        other.kick()

                    loop.call_later(DELAY_S, deliver)
        done.extend(qa.poll_cq())
    counters = [
        [(p.tx_frames, p.tx_bytes, p.tx_lost, p.tx_down_drops, p.pacer.tokens) for p in n.ports]
        for n in nics
    ]
    loop.is_closed = lambda: True  # type: ignore[attr-defined]  # (no readers to remove)
    for n in nics:
        n.close()  # (folds the C counters into the port's own and gives the buckets back)
    after_close = [
        [(p.tx_frames, p.tx_bytes, p.tx_lost, p.tx_down_drops) for p in n.ports] for n in nics
    ]
    for pairs in socks:
        for a, b in pairs:
            a.close()
            b.close()
    return {
        "wire": wire,
        "done": [(w.status, w.time_s) for w in done],
        "verified": bytes(target) == data[:size],
        "counters": counters,
        "after_close": after_close,
    }


@pytest.mark.parametrize("down_at_s", [None, 0.004])
def test_the_pump_serves_its_ports_in_c_as_its_python_pacers_do(down_at_s) -> None:
    c = _world(True, down_at_s, 1 << 20)
    py = _world(False, down_at_s, 1 << 20)
    assert c["done"] and c["done"][0][0] is WcStatus.SUCCESS and c["verified"]
    assert len(c["wire"]) > 300  # data both ways' worth: frames and SACKs
    assert c["wire"] == py["wire"]  # the same frames, on the same ports, at the same times
    assert c["done"] == py["done"]
    assert c["counters"] == py["counters"]
    assert c["after_close"] == py["after_close"]
    # closing folds what C counted into the ports' own counters: nothing is lost
    assert [[f[:4] for f in n] for n in c["counters"]] == c["after_close"]
    if down_at_s is not None:  # it dropped what it held, and sent nothing more
        assert c["counters"][0][1][3] > 0
        last = max(t for t, h, port, _f in c["wire"] if h == 0 and port == 1)
        assert last <= down_at_s + 1e-3
