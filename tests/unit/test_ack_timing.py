"""The simulator and the NIC shell send a SACK by the same rule (issue 11).

The same QP pair in both: h1 has a congestion window of data queued at its own ports when a
data packet from h0 reaches it at ``t_p``.  The SACK (at once for a packet that asks for an
ACK; at the delayed-ACK deadline for one that does not) must leave h1's port after the data
frame being serialised, ahead of every queued data frame: in the simulator
(``mrcnic.sim.fabric.HostPort`` under ``mrcnic.sim.pump.Pump``) and through the shell's
pacer (``mrcnic.io.aio.AioNic`` on a fake loop and clock, its timer the fine one in virtual
time) at the same instant.  The shell's timer in real time is in
tests/timing/test_nic_timer_wallclock.py.
"""

from __future__ import annotations

import heapq

import pytest

from mrcnic.io import aio, pacing
from mrcnic.io.aio import AioNic
from mrcnic.io.pacing import PacerConfig
from mrcnic.io.timer import FINE_MIN_S, MIN_TIMER_S, LoopTimer
from mrcnic.sim.fabric import Fabric, FabricSpec, host_net
from mrcnic.sim.pump import Pump
from mrcnic.transport.qp_types import QpConfig
from mrcnic.verbs import Device, RemoteBuffer
from mrcnic.wire import layout

RATE = 100e6
SPEC = FabricSpec(planes=2, paths_per_plane=2, port_rate_bps=RATE, seed=3)
ACK_DELAY = 150e-6  # the lab's delayed ACK: base RTT / 8 of ~1.2 ms


def _pair() -> tuple[list[Device], bytes, bytes]:
    """Two connected devices (same seeds every call: the same frames in both models), h1
    with 1 MiB to write to h0; and two data frames of h0 for h1: one asking for an ACK (the
    last of a message), one not (the first of a longer one)."""
    devs = [Device(host_net(SPEC.shape, h), RATE, clock=lambda: 0.0, seed=5 + h) for h in (0, 1)]
    cfg = QpConfig(base_rtt_s=10e-3, ack_delay_s=ACK_DELAY, seed=7, start_psn=1000)
    qa, qb = devs[0].create_qp(cfg), devs[1].create_qp(cfg)
    qa.connect(qb.export())
    qb.connect(qa.export())
    back = bytearray(1 << 20)
    qb.post_write(9, bytes(range(256)) * 4096, RemoteBuffer.of(devs[0].register(back)))
    rb = RemoteBuffer.of(devs[1].register(bytearray(1 << 16)))
    qa.post_write(1, b"a" * 4096, rb)  # one packet: the last of its message, ACKREQ
    qa.post_write(2, b"b" * 8192, rb, offset=8192)  # its first packet does not ask
    frames = [f for _, f in devs[0].frames_to_send(0.0)]
    assert len(frames) == 3
    return devs, frames[0], frames[1]


def _is_sack(frame: bytes) -> bool:
    return pacing.is_control_frame(frame) and frame[layout.OFF_BTH] == layout.Opcode.SACK


def sim_departure(t_p: float, frame: bytes) -> tuple[float, int, int]:
    """(when h1's SACK starts to leave its port, the port, data frames queued at that port
    when the SACK was produced), in the simulator."""
    devs, *_ = _pair()
    dev = devs[1]
    fabric = Fabric(SPEC, lambda host, port, f, t: None)  # h0's side is not simulated
    pump = Pump(fabric)
    departures: list[tuple[float, int, bytes]] = []
    for port, hp in enumerate(fabric.nic[1]):
        hp.on_depart = lambda t, f, port=port: departures.append((t, port, f))
    pump.pump(1, dev, 0.0)
    backlog: list[int] = []

    def arrive() -> None:
        backlog.extend(len(hp.data) for hp in fabric.nic[1])
        dev.receive_frame(frame, t_p)
        pump.pump(1, dev, t_p)

    fabric.at(t_p, arrive)
    fabric.run(t_p + 0.01)
    (t, port, _) = next(d for d in departures if _is_sack(d[2]))
    return t, port, backlog[port]


class FakeLoop:
    """call_soon / call_later in virtual time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._q: list = []
        self._seq = 0

    def clock(self) -> float:
        return self.now

    def _at(self, t: float, fn):
        class H:
            cancelled = False

            def cancel(self) -> None:
                self.cancelled = True

        h = H()
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn, h))
        return h

    def call_soon(self, fn, *args):
        return self._at(self.now, lambda: fn(*args))

    def call_later(self, delay: float, fn, *args):
        return self._at(self.now + delay, lambda: fn(*args))

    def run(self, until: float) -> None:
        while self._q and self._q[0][0] <= until:
            t, _, fn, h = heapq.heappop(self._q)
            self.now = max(self.now, t)
            if not h.cancelled:
                fn()


def shell_departure(
    t_p: float, frame: bytes, *, timer_floor_s: float = FINE_MIN_S, pace_tick_s: float = 0.0
) -> tuple[float, int, int]:
    """The same through the shell: AioNic on h1's device, pacer burst at its floor (two
    frames, so the token bucket runs on the same frame grid as the simulated port), the fine
    timer in virtual time (a LoopTimer floored at FdTimer's spin guard) unless told."""
    devs, *_ = _pair()
    dev = devs[1]
    loop = FakeLoop()
    dev.clock = loop.clock
    nic = AioNic(dev, ["x1p0", "x1p1"], pacer=PacerConfig(burst_s=0.0), clock=loop.clock)
    nic._loop = loop  # what open() does, without sockets
    nic._open = True
    nic._timer = LoopTimer(loop, nic._on_timer, floor_s=timer_floor_s)
    nic.pace_tick_s = pace_tick_s
    for p in nic.ports:
        p.up = True
    departures: list[tuple[float, int, bytes]] = []
    nic._send = lambda p, frames, now: departures.extend((now, p.index, f) for f in frames)
    dev.on_work = nic.kick
    nic.kick()
    backlog: list[int] = []

    def arrive() -> None:
        backlog.extend(len(p.pacer.data) for p in nic.ports)
        dev.receive_frame(frame, loop.now)
        nic.kick()

    loop._at(t_p, arrive)
    loop.run(t_p + 0.05)
    (t, port, _) = next(d for d in departures if _is_sack(d[2]))
    return t, port, backlog[port]


def _frame_time(devs: list[Device]) -> float:
    """The serialisation time of h1's data frames (full ones: 4096 payload bytes)."""
    (port, frame), *_ = devs[1].frames_to_send(0.0)
    assert len(frame) == 4202
    return len(frame) * 8 / RATE


@pytest.mark.parametrize("m", [3, 6, 11])
def test_sack_leaves_after_the_frame_in_service_in_both(m):
    """A packet asking for an ACK arrives half-way through h1's m-th data frame on a busy
    port: the SACK leaves when that frame is done, in the simulator and in the shell."""
    devs, ackreq, _ = _pair()
    T = _frame_time(devs)
    t_p = (m + 0.5) * T
    t_sim, port_sim, queued_sim = sim_departure(t_p, ackreq)
    t_nic, port_nic, queued_nic = shell_departure(t_p, ackreq)
    assert port_sim == port_nic
    assert queued_sim >= 5 and queued_nic >= 5  # a real data backlog was waiting on that port
    assert t_sim == pytest.approx((m + 1) * T, abs=1e-9)
    assert t_nic == pytest.approx(t_sim, abs=2e-6)
    assert 0 < t_sim - t_p <= T


def test_delayed_ack_fires_at_its_deadline_in_both():
    """A packet that does not ask for an ACK: the SACK is produced at the delayed-ACK deadline
    (t_p + ACK_DELAY, exact in the simulator; the shell's fine timer is no coarser than its
    spin guard) and leaves after the frame then in service."""
    devs, _, plain = _pair()
    T = _frame_time(devs)
    t_p = 4.25 * T
    due = t_p + ACK_DELAY
    t_sim, _, _ = sim_departure(t_p, plain)
    t_nic, _, _ = shell_departure(t_p, plain)
    assert due <= t_sim <= due + T
    assert t_nic == pytest.approx(t_sim, abs=2e-6)
    # the old timer, floored at 1 ms, sent it a millisecond late: the delayed ACK became 1 ms
    t_old, _, _ = shell_departure(t_p, plain, timer_floor_s=MIN_TIMER_S, pace_tick_s=MIN_TIMER_S)
    assert t_old >= t_p + MIN_TIMER_S > t_sim + 0.5 * MIN_TIMER_S


def test_shell_with_its_pacing_tick_keeps_the_rule():
    """With the default data pacing tick (data wakes at most every PACE_TICK_S, in bursts), the
    frame grid differs from the simulator's, but the rule holds: the SACK waits at most one
    data frame (the token debt of the frame before it), never for the queued data."""
    devs, ackreq, _ = _pair()
    T = _frame_time(devs)
    for m in (3, 8, 17):
        t_p = (m + 0.3) * T
        t_nic, _, queued = shell_departure(t_p, ackreq, pace_tick_s=aio.PACE_TICK_S)
        assert queued >= 5
        assert t_p <= t_nic <= t_p + T + FINE_MIN_S
