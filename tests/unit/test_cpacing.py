"""The ports' pacers in C (csrc/mrc_pace.c, mrcnic.io.cpacing) against their twin, the
Python PortPacer serving C queues as the I/O shell's pump does (pacing.pull_room and
pacing.earliest_due are the shell's own loops): two identical sets of queues, filled alike,
send the same frames in the same order on their sockets, with the same tokens bit for
bit."""

from __future__ import annotations

import random
import socket

import pytest

from mrcnic.io.aio import PACE_TICK_S
from mrcnic.io.cpacing import CPacers
from mrcnic.io.pacing import Bucket, PacerConfig, PortPacer, earliest_due, pull_room
from mrcnic.transport.port_queues import PortQueues
from mrcnic.transport.rx_engine import c_module as _c_module
from tests.batches import put_frame

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")

CFG = PacerConfig(burst_s=0.0005, queue_s=0.002, frame_bytes=4202)


class Side:
    """A NIC's ports: pacers over C queues, each port sending on a datagram socket pair."""

    def __init__(self, rates_bps: list[float]) -> None:
        self.pq = PortQueues([40] * len(rates_bps))
        self.pacers = []
        for i, r in enumerate(rates_bps):
            p = PortPacer(r, CFG, now_s=0.0)
            p.cq, p.chq = self.pq.queues[i], self.pq.high_queues[i]
            self.pacers.append(p)
        self.socks = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in rates_bps]
        for a, b in self.socks:
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.up = [True] * len(rates_bps)
        self.sent = [0] * len(rates_bps)

    def push(self, port: int, control: bool, frame: bytes) -> None:
        put_frame(self.pq.high[port] if control else self.pq.array[port], frame)

    def received(self) -> list[list[bytes]]:
        out = []
        for _a, b in self.socks:
            got = []
            while True:
                try:
                    got.append(b.recv(9000, socket.MSG_DONTWAIT))
                except BlockingIOError:
                    break
            out.append(got)
        return out

    def close(self) -> None:
        for a, b in self.socks:
            a.close()
            b.close()

    # the twin: AioNic's loops over the ports in Python (pacing.pull_room, _serve_py's loop,
    # pacing.earliest_due)
    def py_room(self) -> int:
        return pull_room(zip(self.pacers, self.up, strict=True), 0.0)

    def py_serve(self, now: float) -> int:
        for i, p in enumerate(self.pacers):
            if len(p):
                for batch in p.due(now):
                    sent, _failed, _err, _nbytes = batch.send(_Sender(), self.socks[i][0].fileno())
                    self.sent[i] += sent
        return sum(1 for p in self.pacers if p.blocking_len(now))

    def py_next(self, now: float) -> float | None:
        return earliest_due(self.pacers, now, PACE_TICK_S)


class _Sender:  # a QueueBatch sends from its queue; the Sender is for Python frames
    def send(self, fd, frames):  # pragma: no cover - no Python frames here
        raise AssertionError("no Python frames in this test")


def _bucket(p: PortPacer) -> tuple:
    return tuple(getattr(p.b, n) for n in Bucket.__slots__)


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_pacers_match_the_python_twin(seed: int) -> None:
    rng = random.Random(seed)
    nports = rng.choice([1, 2, 4, 8])
    rates = [rng.choice([0.5e6, 10e6, 100e6, 1e9]) for _ in range(nports)]
    py, c = Side(rates), Side(rates)
    cp = CPacers.make(c.pacers)
    assert cp is not None
    for i, (a, _b) in enumerate(c.socks):
        cp.port(i).fd, cp.port(i).up = a.fileno(), 1
    try:
        now = 0.0
        for _step in range(120):
            now += rng.choice([0.0, 1e-6, 3.3e-5, 1e-4, 7e-4, 2e-3, 0.05])
            for _ in range(rng.randrange(0, 12)):
                port, ctrl = rng.randrange(nports), rng.random() < 0.3
                n = rng.randrange(60, 128) if ctrl else rng.randrange(60, 4300)
                frame = bytes([rng.randrange(256)]) * n
                py.push(port, ctrl, frame)
                c.push(port, ctrl, frame)
            if rng.random() < 0.1:  # a link goes down or comes back (the pull's view)
                i = rng.randrange(nports)
                py.up[i] = c.up[i] = not py.up[i]
                cp.port(i).up = int(c.up[i])
            assert cp.room() == py.py_room()
            assert cp.serve(now) == py.py_serve(now)
            assert cp.errors() == 0
            assert [_bucket(p) for p in c.pacers] == [_bucket(p) for p in py.pacers]
            assert c.received() == py.received()
            assert cp.next_due(now, PACE_TICK_S) == py.py_next(now)
        assert [cp.port(i).tx_frames for i in range(nports)] == py.sent
        assert sum(py.sent) > 0
    finally:
        cp.detach()
        py.close()
        c.close()


@needs_c
def test_a_port_without_a_socket_drops_its_frames_and_says_so() -> None:
    side = Side([10e6, 10e6])
    cp = CPacers.make(side.pacers)
    assert cp is not None
    try:
        cp.port(0).fd = side.socks[0][0].fileno()  # port 1 keeps fd -1: it cannot send
        for port in (0, 1):
            side.push(port, False, b"d" * 1000)
            side.push(port, True, b"c" * 100)
        assert cp.serve(0.0) == 0
        assert cp.errors() == 2 and cp.errors() == 0  # its two queues, each dropped whole
        p0, p1 = cp.port(0), cp.port(1)
        assert (p0.tx_frames, p0.tx_bytes, p0.tx_down_drops) == (2, 1100, 0)
        assert (p1.tx_frames, p1.tx_down_drops, p1.netdown) == (0, 2, 0)
        assert side.received() == [[b"c" * 100, b"d" * 1000], []]  # control first
    finally:
        cp.detach()
        side.close()


@needs_c
def test_a_refused_send_is_a_loss_not_a_down_port() -> None:
    side = Side([10e6])
    cp = CPacers.make(side.pacers)
    assert cp is not None
    try:
        a, b = side.socks[0]
        cp.port(0).fd = a.fileno()
        b.close()  # the peer is gone: every send is refused (ECONNREFUSED: a loss)
        side.push(0, False, b"d" * 1000)
        cp.serve(0.0)
        p0 = cp.port(0)
        assert cp.errors() == 1 and p0.tx_lost == 1 and p0.last_errno != 0
        assert p0.netdown == 0 and len(side.pacers[0].cq) == 0
    finally:
        cp.detach()
        side.close()


@needs_c
def test_detach_gives_the_bucket_back_to_python() -> None:
    side = Side([10e6])
    cp = CPacers.make(side.pacers)
    assert cp is not None
    p = side.pacers[0]
    p.tokens = 123.5
    assert cp.port(0).tokens == 123.5  # one bucket, in C
    cp.detach()
    assert isinstance(p.b, Bucket) and p.tokens == 123.5 and p._b_owner is None
    side.close()
