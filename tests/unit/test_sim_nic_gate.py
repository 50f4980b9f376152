"""The simulated NIC takes data from its QPs as the I/O shell does (mrcnic.sim.fabric.NicGate
under mrcnic.sim.pump.Pump): control frames always, data only while every live port of the
host holds fewer than ``data_limit`` data frames; when a port drains, the QPs that waited
are pumped again in turn.  Without it, the QPs of one host (each window sized for the whole
NIC) queued at its ports, and their retransmission timers ran out while their frames waited
there: an all-to-all retransmitted with no loss at all."""

from __future__ import annotations

from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.collectives import Alltoall
from mrcnic.sim.fabric import Fabric, FabricSpec, host_net
from mrcnic.sim.pump import Pump
from mrcnic.sim.scale import PAPER
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.port_queues import PacerConfig, data_limit_frames
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import QpConfig
from mrcnic.wire import layout

SPEC = FabricSpec(planes=2, paths_per_plane=1, port_rate_bps=100e9, seed=1)


def _frames() -> tuple[bytes, bytes]:
    """A real data frame of h0 for h1 on port 0, and its first 120 bytes in the control class
    (a control frame's size: the port routes by the header alone)."""
    mem = [MemoryTable(1), MemoryTable(2)]
    nets = [host_net(SPEC.shape, h) for h in (0, 1)]
    qa = QueuePair(0x100, nets[0], mem[0], 200e9, QpConfig(seed=1))
    qb = QueuePair(0x200, nets[1], mem[1], 200e9, QpConfig(seed=2))
    qa.connect(qb.local_attributes())
    qb.connect(qa.local_attributes())
    mr = mem[1].register(bytearray(1 << 16))
    qa.post_write(1, bytes(1 << 16), mr.base_va, mr.rkey)
    data = next(f for port, f in qa.frames_to_send(0.0) if port == 0)
    ctrl = bytearray(data)
    layout.set_dscp(ctrl, int(layout.Dscp.CONTROL))
    return bytes(data), bytes(ctrl[:120])


class Source:
    """An endpoint that always has data: ``k`` frames on port 0 each time it is asked, then
    again ``period_s`` later (its clock, as ACKs are a QP's), and one control frame waiting
    each time it is pumped."""

    def __init__(self, data: bytes, ctrl: bytes, k: int, period_s: float = 0.0) -> None:
        self.data, self.ctrl, self.k, self.period_s = data, ctrl, k, period_s
        self.pulls = 0
        self.ctrl_sent = 0
        self.next_s: float | None = None

    def control_frames_to_send(self) -> list[tuple[int, bytes]]:
        self.ctrl_sent += 1
        return [(0, self.ctrl)]

    def frames_to_send(self, now_s: float) -> list[tuple[int, bytes]]:
        self.pulls += 1
        if self.period_s:
            self.next_s = now_s + self.period_s
        return [*self.control_frames_to_send(), *[(0, self.data)] * self.k]

    def next_event(self) -> None:
        return None

    def get_timer(self) -> float | None:
        return self.next_s

    def handle_timer(self, now_s: float) -> None:
        self.next_s = None  # pumped now: it sends, or waits at the gate


def test_the_limit_is_the_shells_rule_at_the_labs_rate() -> None:
    """One source for the number: the shell's PacerConfig at the lab's port rate, the same in
    frames at the paper's rate (a 2 ms queue at 100 Gb/s would be ~6000 frames)."""
    fab = Fabric(SPEC, lambda *a: None)
    lab = data_limit_frames(100e6, PacerConfig())
    assert fab.nic[0][0].data_limit == lab == 5
    assert data_limit_frames(PAPER.port_rate_bps) > 1000


def test_a_port_holds_no_more_than_one_pull_past_its_limit_and_sources_take_turns() -> None:
    """Five endpoints with endless data on one port: the port's data queue never holds more
    than ``data_limit - 1`` plus one pull, the port never idles, every source gets its turn,
    and control frames leave even while the data waits.  (They offer five times the line
    rate: without the gate the queue grows all along.)"""
    data, ctrl = _frames()
    fab = Fabric(SPEC, lambda *a: None)
    pump = Pump(fab)
    k = 3
    frame_s = len(data) * 8 / SPEC.port_rate_bps
    srcs = [Source(data, ctrl, k, k * frame_s) for _ in range(5)]
    for s in srcs:
        pump.pump(0, s, 0.0)
    fab.run(400 * frame_s)
    port = fab.nic[0][0]
    limit = data_limit_frames(100e6)  # (the lab's: see above)
    assert port.max_backlog <= (limit - 1 + k) * len(data) + len(srcs) * len(ctrl)
    assert port.max_data_frames <= limit - 1 + k
    sent = sum(s.pulls for s in srcs) * k
    assert sent >= 390  # the port was kept busy all along
    pulls = [s.pulls for s in srcs]
    assert max(pulls) - min(pulls) <= 1  # round robin: none starves
    assert all(s.ctrl_sent > s.pulls for s in srcs)  # control went while data was held


class PacedSource(Source):
    """A Source whose deadline stays due until it sends again, as a paced RoCEv2 QP's does."""

    def __init__(self, *a: object) -> None:
        super().__init__(*a)  # type: ignore[arg-type]
        self.timers = 0

    def handle_timer(self, now_s: float) -> None:
        self.timers += 1  # (the deadline stays: only sending moves it)


def test_a_shut_out_endpoint_whose_deadline_is_due_does_not_spin() -> None:
    """Its timer would fire again at the same instant for ever; the gate pumps it instead."""
    data, ctrl = _frames()
    fab = Fabric(SPEC, lambda *a: None)
    pump = Pump(fab)
    frame_s = len(data) * 8 / SPEC.port_rate_bps
    srcs = [PacedSource(data, ctrl, 3, frame_s) for _ in range(3)]
    for s in srcs:
        pump.pump(0, s, 0.0)
    fab.run(100 * frame_s, stop=lambda: sum(s.timers for s in srcs) > 10_000)
    assert fab.now > 90 * frame_s and sum(s.timers for s in srcs) < 300
    assert sum(s.pulls for s in srcs) * 3 >= 90


def test_a_full_port_going_down_lets_the_waiting_sources_send_on_the_others() -> None:
    """The rule counts live ports: when the full one goes down, the waiting QPs are pumped."""
    data, ctrl = _frames()
    fab = Fabric(SPEC, lambda *a: None)
    pump = Pump(fab)
    src = [Source(data, ctrl, 10) for _ in range(2)]
    pump.pump(0, src[0], 0.0)  # fills port 0 past its limit
    pump.pump(0, src[1], 0.0)  # shut out: waits
    assert src[1].pulls == 0 and fab.gates is not None and fab.gates[0].waiting == 1
    fab.set_port(0, 0, False)
    assert src[1].pulls == 1 and fab.gates[0].waiting == 0


def test_an_alltoall_without_loss_times_nothing_out() -> None:
    """8 hosts, 7 QPs each, at the paper's scale: the QPs' excess waits in them, not at the
    ports, so no timer runs out (before the gate: 832 timeouts and 810 retransmissions)."""
    spec = ClosSpec(
        planes=2,
        t0=8,
        t1=2,
        hosts_per_t0=1,
        port_rate_bps=PAPER.port_rate_bps,
        prop_s=PAPER.prop_s,
        queue_bytes=PAPER.queue_bytes,
        ecn_bytes=PAPER.ecn_bytes,
        size=2 << 20,
    )
    r = Alltoall(spec).run()
    assert r["verified"] and r["drops"] == 0
    assert r["timeouts"] == 0 and r["retransmissions"] == 0
