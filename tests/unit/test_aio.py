"""mrcnic.io.aio without sockets: the pacer (token bucket + two-class queue) with a fake clock,
link events reaching the core, and two AioNics pumped by a fake event loop whose "wire" hands
each sent frame to the other NIC's device (no root, no sockets, virtual time). The netlink
parser itself is tests/unit/test_linkstate.py."""

from __future__ import annotations

import asyncio
import heapq
import socket
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.io import pacing
from mrcnic.io.aio import PULL_ROUNDS, AioNic, run
from mrcnic.io.linkstate import IFF_RUNNING, IFF_UP, LinkEvent
from mrcnic.io.pacing import PacerConfig, PortPacer
from mrcnic.io.timer import FdTimer
from mrcnic.transport.qp_types import NetConfig, PortAddr, QpConfig
from mrcnic.verbs import Device, RemoteBuffer, WcStatus
from mrcnic.wire.usid import ClosShape

RATE = 100e6
FAST = 100e9  # a port whose bucket lets PULL_ROUNDS full queues go at once
FRAME = 4202


def data_frame(n: int = FRAME) -> bytes:
    f = bytearray(n)
    f[14] = 0x61  # version 6, DSCP 4 (TRIMMABLE) << 2 | ECT0 -> traffic class 0x12
    f[15] = 0x20
    return bytes(f)


def ctrl_frame(n: int = 120) -> bytes:
    f = bytearray(n)
    f[14] = 0x6B  # DSCP 46 (CONTROL): traffic class 0xB8 -> 0x6B, 0x8.
    f[15] = 0x80
    return bytes(f)


def test_frame_classes():
    assert not pacing.is_control_frame(data_frame())
    assert pacing.is_control_frame(ctrl_frame())


def test_sizes_follow_the_rate():
    p = PortPacer(RATE, PacerConfig(burst_s=0.002, queue_s=0.002))
    assert p.burst_bytes == pytest.approx(25_000)
    assert p.data_limit == max(4, int(0.002 * RATE / 8 / FRAME))
    slow = PortPacer(1e6, PacerConfig())
    assert slow.burst_bytes == 2 * FRAME and slow.data_limit == 4  # floors


def test_control_frames_leave_first():
    p = PortPacer(RATE, now_s=0.0)
    for _ in range(3):
        p.push(data_frame())
    p.push(ctrl_frame())
    out = p.take(0.0)
    assert pacing.is_control_frame(out[0]) and len(out) >= 2


def test_next_due_is_when_a_frame_may_leave():
    p = PortPacer(RATE, PacerConfig(burst_s=0.0), now_s=0.0)  # burst floor: 2 frames
    assert p.next_due(0.0) is None
    for _ in range(10):
        p.push(data_frame())
    first = p.take(0.0)
    assert len(first) == 2  # the initial burst
    due = p.next_due(0.0)
    assert due is not None and due > 0.0
    assert p.take(due - 1e-6) == []
    assert len(p.take(due)) >= 1
    left = len(p)
    assert left > 0 and p.flush() == left
    assert len(p) == 0 and p.next_due(due) is None


@settings(max_examples=60, deadline=None)
@given(
    wakes=st.lists(st.floats(min_value=1e-5, max_value=0.01), min_size=20, max_size=300),
    burst_ms=st.sampled_from([0.0, 1.0, 2.0, 5.0]),
)
def test_token_bucket_conformance(wakes, burst_ms):
    """Whatever the wake-up times, bytes sent by time t never exceed rate * t + burst + one
    frame, and a backlogged port keeps up with its rate up to one burst."""
    p = PortPacer(RATE, PacerConfig(burst_s=burst_ms / 1000), now_s=0.0)
    rate_Bps = RATE / 8
    t = 0.0
    sent = 0
    for dt in wakes:
        while len(p.data) * FRAME < p.burst_bytes + 2 * FRAME:  # backlogged beyond one burst
            p.push(data_frame())
        sent += sum(map(len, p.take(t)))
        assert sent <= rate_Bps * t + p.burst_bytes + FRAME
        t += dt
    sent += sum(map(len, p.take(t)))
    # Backlogged all along: each wake-up sends what the interval earned (capped by the bucket
    # depth), less at most one frame of debt carried from the previous wake-up.
    earned = sum(max(0.0, min(p.burst_bytes, dt * rate_Bps) - FRAME) for dt in wakes)
    assert sent >= earned


# --- two NICs on a fake event loop --------------------------------------------------------------


class FakeHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """call_soon / call_later in virtual time, plus a wire with a fixed one-way delay."""

    def __init__(self) -> None:
        self.now = 0.0
        self._q: list[tuple[float, int, object, FakeHandle]] = []
        self._seq = 0

    def clock(self) -> float:
        return self.now

    def _at(self, t: float, fn) -> FakeHandle:
        h = FakeHandle()
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, h))
        return h

    def call_soon(self, fn, *args) -> FakeHandle:
        return self._at(self.now, lambda: fn(*args))

    def call_later(self, delay: float, fn, *args) -> FakeHandle:
        return self._at(self.now + delay, lambda: fn(*args))

    def run(self, until: float, done=lambda: False) -> None:
        while self._q and not done():
            t, _, fn, h = heapq.heappop(self._q)
            if t > until:
                break
            self.now = max(self.now, t)
            if not h.cancelled:
                fn()


def _nic_pair(loop: FakeLoop, delay_s: float = 200e-6, drop=lambda port, frame: False):
    shape = ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    devs, nics, sent = [], [], []
    for h in range(2):
        ports = tuple(
            PortAddr(bytes((2, 0, 0, h, p, 1)), bytes((2, 0, 0, h, p, 2))) for p in range(2)
        )
        dev = Device(NetConfig(shape, h, ports), RATE, clock=loop.clock, seed=10 + h)
        nic = AioNic(dev, [f"x{h}p0", f"x{h}p1"], clock=loop.clock)
        nic._loop = loop  # what open() does, without sockets
        nic._open = True
        for p in nic.ports:
            p.up = True
        dev.on_work = nic.kick
        devs.append(dev)
        nics.append(nic)
        sent.append([])

    def make_send(h: int):
        def _send(p, frames, now):
            other = nics[1 - h]
            for f in frames:
                sent[h].append((now, p.index, len(f)))
                p.py_tx_frames += 1
                p.py_tx_bytes += len(f)
                if drop(p.index, f):
                    continue

                def deliver(f=f) -> None:
                    other.device.receive_frame(f, loop.now)
                    other.kick()

                loop.call_later(delay_s, deliver)

        return _send

    for h in range(2):
        nics[h]._send = make_send(h)
    return devs, nics, sent


def _connected(devs):
    cfg = QpConfig(base_rtt_s=1e-3)
    qa, qb = devs[0].create_qp(cfg), devs[1].create_qp(cfg)
    qa.connect(qb.export())
    qb.connect(qa.export())
    return qa, qb


def test_two_nics_write_paced_and_bounded():
    loop = FakeLoop()
    devs, nics, sent = _nic_pair(loop)
    qa, qb = _connected(devs)
    target = bytearray(2 << 20)
    rb = RemoteBuffer.of(devs[1].register(target))
    data = bytes(range(256)) * (len(target) // 256)
    max_queue = [0]

    def watch(_now: float) -> None:
        q = max(len(p.pacer.data) for p in nics[0].ports)
        max_queue[0] = max(max_queue[0], q)

    nics[0].on_progress = watch
    qa.post_write(1, data, rb)
    done = []
    loop.run(5.0, lambda: bool(done.extend(qa.poll_cq()) or done))
    assert done and done[0].status is WcStatus.SUCCESS
    assert bytes(target) == data
    # Pacing: per port, bytes sent by time t never exceed rate * t + burst (+ a frame).
    for port in range(2):
        pacer = nics[0].ports[port].pacer
        total = 0
        for t, p, n in sent[0]:
            if p == port:
                total += n
                assert total <= RATE / 8 * t + pacer.burst_bytes + FRAME
    # Both ports carried about half of the data.
    per_port = [sum(n for _, p, n in sent[0] if p == q) for q in range(2)]
    assert min(per_port) > 0.4 * sum(per_port)
    # The local queue stays small: one pull is at most one congestion window.
    cwnd_frames = qa.core.cc.cwnd_bytes / 4096
    assert max_queue[0] <= nics[0].ports[0].pacer.data_limit + cwnd_frames / 2 + 2
    # Goodput near the line rate of both ports (payload share of the frames).
    assert len(data) * 8 / done[0].time_s > 0.8 * 2 * RATE * 4096 / FRAME


def test_port_down_moves_traffic_and_tells_the_core():
    loop = FakeLoop()
    down = {"p1": False}
    devs, nics, sent = _nic_pair(loop, drop=lambda port, f: port == 1 and down["p1"])
    qa, qb = _connected(devs)
    target = bytearray(1 << 20)
    rb = RemoteBuffer.of(devs[1].register(target))
    data = bytes(reversed(range(256))) * (len(target) // 256)
    qa.post_write(1, data, rb)
    loop.run(0.005)
    down["p1"] = True
    nics[0]._set_port(nics[0].ports[1], False, loop.now)
    t_down = loop.now
    assert nics[0].ports[1].up is False and len(nics[0].ports[1].pacer) == 0
    done = []
    loop.run(10.0, lambda: bool(done.extend(qa.poll_cq()) or done))
    assert done and done[0].status is WcStatus.SUCCESS and bytes(target) == data
    assert not any(p == 1 and t > t_down for t, p, _ in sent[0])  # nothing sent on the dead port


class FakeWatcher:
    """A LinkWatcher whose read() hands out the given batches of (events, lost)."""

    def __init__(self, batches: list[tuple[list[LinkEvent], bool]]) -> None:
        self.batches = list(batches)

    def read(self) -> tuple[list[LinkEvent], bool]:
        return self.batches.pop(0) if self.batches else ([], False)

    def fileno(self) -> int:
        return -1


def test_link_events_reach_the_core():
    loop = FakeLoop()
    devs, nics, _sent = _nic_pair(loop)
    nic = nics[0]
    for i, p in enumerate(nic.ports):
        p.ifindex = 20 + i
        nic._by_ifindex[p.ifindex] = p
    told: list[tuple[int, bool]] = []
    real = devs[0].port_status
    devs[0].port_status = lambda port, up, now: (told.append((port, up)), real(port, up, now))
    nic._reopen_rx = lambda p: True  # no sockets here
    polled = []
    nic._poll_links = lambda now: polled.append(now)
    up, no_carrier = IFF_UP | IFF_RUNNING, IFF_UP
    nic._links = FakeWatcher(
        [
            # port 1 loses carrier; an unknown interface is ignored; port 0 says up (no change)
            ([LinkEvent(21, no_carrier, "x0p1"), LinkEvent(99, None), LinkEvent(20, up)], False),
            ([LinkEvent(21, up, "x0p1")], True),  # back; and some were lost: check them all
            ([LinkEvent(20, None, "x0p0")], False),  # port 0 deleted
        ]
    )
    nic._on_netlink()
    assert told == [(1, False)] and not nic.ports[1].up and nic.ports[0].up
    assert nic.ports[1].link_changes == 1 and not polled
    nic._on_netlink()
    assert told == [(1, False), (1, True)] and nic.ports[1].up and len(polled) == 1
    nic._on_netlink()
    assert told[-1] == (0, False) and not nic.ports[0].up


# --- control never waits behind data (issue 11) --------------------------------------------------


class RecordingDevice:
    """A fake device: the real Device's frames, with the calls the shell makes counted."""

    def __init__(self, dev: Device) -> None:
        self.dev = dev
        self.port_rates_bps = dev.port_rates_bps
        self.qps = dev.qps
        self.on_work = None
        self.data_pulls = 0
        self.control_pulls = 0

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        self.data_pulls += 1
        return self.dev.frames_to_send(now)

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        self.control_pulls += 1
        return self.dev.control_frames_to_send()

    def __getattr__(self, name: str):  # get_timer, handle_timer, dispatch, ...
        return getattr(self.dev, name)


def test_sack_leaves_on_the_next_pump_when_every_data_queue_is_full():
    """The old shell pulled from the transport only when every live port's data queue had
    room, and that pull was the only way control frames left the QP: a SACK waited behind a
    full data queue.  Now control frames are taken on every pump, into the high class."""
    loop = FakeLoop()
    devs, nics, _ = _nic_pair(loop)
    qa, qb = _connected(devs)
    # h1 has data of its own for h0 (so its transport wants to send), and every port's data
    # queue is full, with the token bucket allowing one frame per port right now
    back = bytearray(1 << 20)
    qb.post_write(9, bytes(len(back)), RemoteBuffer.of(devs[0].register(back)))
    fake = RecordingDevice(devs[1])
    nic = AioNic(fake, ["x1p0", "x1p1"], clock=loop.clock)  # type: ignore[arg-type]
    nic._loop = loop
    nic._open = True
    sent: list[tuple[int, bytes]] = []
    nic._send = lambda p, frames, now: sent.extend((p.index, f) for f in frames)
    for p in nic.ports:
        p.up = True
        while p.pacer.room() > 0:
            p.pacer.push(data_frame())
        p.pacer.tokens = 1.0
    # a one-packet write from h0 (its last packet asks for an ACK) reaches h1: a SACK is due
    target = bytearray(4096)
    qa.post_write(1, b"x" * 4096, RemoteBuffer.of(devs[1].register(target)))
    (frame,) = [f for _, f in devs[0].frames_to_send(loop.now)]
    devs[1].receive_frame(frame, loop.now)
    assert qb.core.stats.tx_sacks == 1

    nic._pump()

    sacks = [(port, f) for port, f in sent if pacing.is_control_frame(f)]
    assert len(sacks) == 1, "the SACK left on the first pump"
    port, sack = sacks[0]
    assert [f for q, f in sent if q == port] == [sack]  # it took the token: no data before it
    assert nic.ports[port].pacer.room() == 0  # the data queue it passed is still full
    assert fake.control_pulls == 1 and fake.data_pulls == 0  # no data pulled: queues were full


def test_control_frames_take_the_high_class_even_when_a_port_is_full():
    """Only one port full is enough to stop data pulls; control still goes, on its port."""
    loop = FakeLoop()

    class Fake:
        port_rates_bps = [RATE, RATE]
        qps: dict = {}
        on_work = None

        def __init__(self) -> None:
            self.ctrl = [(1, ctrl_frame()), (0, ctrl_frame(90))]
            self.data_pulls = 0

        def get_timer(self) -> None:
            return None

        def control_frames_to_send(self) -> list[tuple[int, bytes]]:
            out, self.ctrl = self.ctrl, []
            return out

        def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
            self.data_pulls += 1
            return self.control_frames_to_send() + [(0, data_frame()), (1, data_frame())]

    fake = Fake()
    nic = AioNic(fake, ["a", "b"], clock=loop.clock)  # type: ignore[arg-type]
    nic._loop = loop
    nic._open = True
    for p in nic.ports:
        p.up = True
        p.pacer.tokens = 0.0  # nothing may leave: see where the frames wait
    while nic.ports[0].pacer.room() > 0:
        nic.ports[0].pacer.push(data_frame())
    nic._send = lambda p, frames, now: None
    nic._pump()
    assert fake.data_pulls == 0
    assert [len(p.pacer.high) for p in nic.ports] == [1, 1]
    assert len(nic.ports[1].pacer.data) == 0
    # the high class is served first: the control frame is the next to leave either port
    t = nic.ports[0].pacer.next_due(loop.now)
    assert t is not None and pacing.is_control_frame(nic.ports[0].pacer.take(t)[0])


# --- a pump pulls again while what it pulled leaves at once ----------------------------------


class Pulls:
    """A fake device with ``backlog`` data frames for port 0, a queue's worth per pull, and
    the calls the shell makes, in their order, with the clock each was given."""

    qps: dict = {}
    on_work = None

    def __init__(
        self, rate_bps: float, backlog: int, due: float | None = None, ports: int = 1
    ) -> None:
        self.port_rates_bps = [rate_bps] * ports
        self.backlog = backlog
        self.due = due
        self.limit = 0
        self.calls: list[tuple[str, float]] = []

    def get_timer(self) -> float | None:
        return self.due

    def handle_timer(self, now: float) -> None:
        self.calls.append(("timer", now))
        self.due = None

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        return []

    def frames_to_send(self, now: float) -> list[tuple[int, bytes]]:
        """Round-robin over the ports, stopping when one is full, as the C engine does (one
        port a frame ahead of the others)."""
        self.calls.append(("pull", now))
        nports = len(self.port_rates_bps)
        n = min(self.backlog, (self.limit - 1) * nports + 1)
        self.backlog -= n
        return [(i % nports, data_frame()) for i in range(n)]

    def receive_batch(self, ring, n: int, now: float, port: int) -> int:
        self.calls.append(("rx", now))
        return 0


def _pump_nic(dev: Pulls) -> tuple[AioNic, list[int]]:
    ticks = [0]

    def clock() -> float:  # every read a microsecond later: the rounds' stamps differ
        ticks[0] += 1
        return ticks[0] * 1e-6

    names = [f"p{i}" for i in range(len(dev.port_rates_bps))]
    nic = AioNic(dev, names, clock=clock)  # type: ignore[arg-type]
    nic._loop = FakeLoop()  # type: ignore[assignment]
    nic._open = True
    nic._link_poll_at = 1e9  # no link poll (no sockets to poll)
    for p in nic.ports:
        p.up = True
    dev.limit = nic.ports[0].pacer.data_limit
    sent: list[int] = []

    def send(p, batch, now) -> None:
        sent.append(len(batch))

    nic._send = send  # type: ignore[method-assign]
    return nic, sent


def test_a_pump_pulls_again_while_a_full_queue_leaves_at_once():
    """At 100 Gb/s a port's queue would hold 2 ms (5,949 frames); it holds MAX_DATA_FRAMES,
    and the pump pulls again, with the clock read again, as long as the whole queue left:
    frames are built just before they leave, and stamped with about that time."""
    dev = Pulls(FAST, backlog=100_000)
    nic, sent = _pump_nic(dev)
    assert nic.ports[0].pacer.data_limit == pacing.MAX_DATA_FRAMES
    nic._pump()
    pulls = [t for what, t in dev.calls if what == "pull"]
    assert len(pulls) == PULL_ROUNDS  # the bound: then the loop serves receive and timers
    assert pulls == sorted(set(pulls))  # a fresh clock each round
    assert sent == [pacing.MAX_DATA_FRAMES] * PULL_ROUNDS


def test_a_pump_pulls_again_when_one_of_several_ports_filled():
    """The C engine stops at the first full port, the others a frame short: that is a full
    queue too, and the pump pulls again; a pump that used up its rounds pumps again after
    the next poll. With no live port it pulls once, as it always did."""
    dev = Pulls(FAST, backlog=100_000, ports=4)
    nic, sent = _pump_nic(dev)
    nic._pump()
    assert [w for w, _ in dev.calls].count("pull") == PULL_ROUNDS
    assert nic._pump_scheduled  # the rounds ran out, the transport did not: another pump
    idle = Pulls(FAST, backlog=100_000, ports=2)
    nic, sent = _pump_nic(idle)
    for p in nic.ports:
        p.up = False
    nic._pump()
    assert [w for w, _ in idle.calls].count("pull") == 1 and not nic._pump_scheduled


def test_a_pump_stops_pulling_when_the_transport_or_the_pacer_stops():
    dev = Pulls(FAST, backlog=2 * pacing.MAX_DATA_FRAMES + 5)  # the transport runs out
    nic, sent = _pump_nic(dev)
    nic._pump()
    assert sent == [pacing.MAX_DATA_FRAMES, pacing.MAX_DATA_FRAMES, 5]
    lab = Pulls(RATE, backlog=10_000)  # a lab port: the bucket holds the second pull back
    nic, sent = _pump_nic(lab)
    nic._pump()
    limit = nic.ports[0].pacer.data_limit
    assert [w for w, _ in lab.calls].count("pull") == 2
    assert sum(sent) + len(nic.ports[0].pacer) == 2 * limit and len(nic.ports[0].pacer) > 0


def test_a_late_process_reads_its_sockets_before_its_timers_run():
    """A process that was late finds its timer and its sockets ready in the same poll. The
    acknowledgments waiting in its sockets reach the transport before the retransmission
    timers run (the process, not the network, was late: nothing may be timed out for it).
    A real loop, a real timerfd and a real socket; the deadline and the frame are both
    waiting before the loop polls."""
    dev = Pulls(RATE, backlog=0)
    clock = time.monotonic
    nic = AioNic(dev, ["a"], clock=clock)  # type: ignore[arg-type]
    nic._open = True
    nic._link_poll_at = 1e18
    nic.ports[0].up = True
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        nic._loop = loop
        timer = FdTimer.open(loop, nic._on_timer, clock)
        if timer is None:
            pytest.skip("no timerfd on this kernel")  # (Linux has one: the lab needs it)
        nic._timer = timer
        on_timer = nic._on_timer
        timer.fire = lambda: (dev.calls.append(("fire", clock())), on_timer())
        a.setblocking(False)
        nic.ports[0].rx_fd = a.fileno()
        loop.add_reader(a.fileno(), nic._on_readable, nic.ports[0])
        now = clock()
        dev.due = nic._dev_due = now  # a retransmission timer is due...
        timer.arm(now, now)
        time.sleep(0.005)
        b.send(ctrl_frame())  # ...and an acknowledgment waits: both ready at the next poll
        await asyncio.sleep(0.02)
        loop.remove_reader(a.fileno())
        timer.close()

    with a, b:
        run(main())
    # the timer's callback ran first (the order the bug needs), yet the frame reached the
    # device before the timers were handled
    assert [w for w, _ in dev.calls if w != "pull"] == ["fire", "rx", "timer"]
    assert nic.timer_fires == 1 and nic.rx_wakeups == 1 and nic.pumps == 1
