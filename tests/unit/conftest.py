"""Shared fixtures of the unit tests.

``sim_quick_all``: the directory where ``mrc-lab experiment all --sim --quick`` wrote every
claim's simulated form once per session (``sim/NAME.json``, ``REPORT.md``), for the tests of
the simulated forms to read.

``qp_pair``: a factory for two connected queue pairs (h0 writes as ``qa``, h1 as ``qb``) of
either transport over a *chaos wire*: an event queue in virtual time where a ``chaos``
function decides the fate of every frame sent (delivered after a delay, several times,
altered, or dropped).  The QPs are driven by the simulator's own loop,
:class:`mrcnic.sim.pump.Pump`, so the tests exercise the loop that mrc-sim, the incast
simulator and ``verbs.SimNetwork`` run.

    def test_something(qp_pair):
        w = qp_pair("rocev2", loss=0.01, reorder=0.1, seed=3)
        outer, mr = w.region(1000)
        w.qa.post_write(1, data, mr.base_va, mr.rkey)
        w.run(1.0)
        assert w.of(0, WriteCompleted) ...

The factory holds no state of its own, so ``@given`` tests may use it (with
``HealthCheck.function_scoped_fixture`` suppressed).
"""

from __future__ import annotations

import heapq
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from mrcnic import wire
from mrcnic.rocev2.qp import RoceConfig, RoceQueuePair
from mrcnic.sim.fabric import host_net
from mrcnic.sim.pump import Pump
from mrcnic.transport.ev import EvConfig
from mrcnic.transport.evprobe import EvProbeDesk
from mrcnic.transport.memory import MemoryRegion, MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import QpAttributes, QpConfig, peek_dest_qp
from mrcnic.wire import usid

# chaos(t, src_host, port, frame) -> list of (delay_s, frame) to deliver (empty = dropped)
Chaos = Callable[[float, int, int, bytes], list[tuple[float, bytes]]]

DELAY = 50e-6  # one-way delay of the well-behaved wire
PORT_RATE = 100e6
MRC_BASE = QpConfig(mtu_bytes=256, ev=EvConfig(ev_count=8, backup_per_plane=2), base_rtt_s=2e-4)
ROCE_BASE = RoceConfig(mtu_bytes=256, base_rtt_s=2e-4, ack_timeout_s=2e-3)
TRANSPORTS = ("mrc", "rocev2")


def random_chaos(seed: int, loss: float = 0.0, reorder: float = 0.0, dup: float = 0.0) -> Chaos:
    """Each frame, from one seeded generator: lost with probability ``loss``, else delayed
    1..4 x DELAY with probability ``reorder`` (overtaken by later frames), and delivered a
    second time 2 x DELAY after sending with probability ``dup``."""
    rng = random.Random(seed)

    def chaos(t: float, h: int, port: int, f: bytes) -> list[tuple[float, bytes]]:
        if rng.random() < loss:
            return []
        out = [(DELAY * (1 + 3 * rng.random()) if rng.random() < reorder else DELAY, f)]
        if rng.random() < dup:
            out.append((DELAY * 2, f))
        return out

    return chaos


def _sport_flow(frame: bytes) -> tuple[int, int]:
    return int.from_bytes(frame[54:56], "big"), int.from_bytes(frame[15:18], "big") & 0xFFFF


class ChaosWire:
    """The network of a QP pair: ``send`` passes each frame through ``chaos`` and queues what
    survives for the other host; ``at`` queues callbacks (the Pump's timers)."""

    def __init__(self, chaos: Chaos, deliver: Callable[[int, bytes, float], None]) -> None:
        self.chaos = chaos
        self.deliver = deliver
        self.now = 0.0
        self.sent: list[list[tuple[float, int, bytes]]] = [[], []]
        self.on_send: Callable[[int, int, bytes], None] | None = None
        self._heap: list = []
        self._seq = 0

    def _push(self, t: float, item: tuple) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, item))

    def send(self, host: int, port: int, frame: bytes, t: float) -> None:
        if self.on_send is not None:
            self.on_send(host, port, frame)
        self.sent[host].append((t, port, frame))
        for delay, f in self.chaos(t, host, port, frame):
            self._push(t + delay, (1 - host, f))

    def at(self, t: float, fn: Callable[[], None]) -> None:
        self._push(t, (None, fn))

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        while self._heap and self._heap[0][0] <= until:
            t, _, (host, x) = heapq.heappop(self._heap)
            self.now = t
            if host is None:
                x()
            else:
                self.deliver(host, x, t)
            if stop is not None and stop():
                break


class QpPair:
    """Two connected QPs (``qa`` on h0, ``qb`` on h1) over a :class:`ChaosWire`.

    ``events[h]`` and ``sent[h]`` record what each side reported and sent; ``of(h, kind)``
    filters the events.  Every frame sent is checked to leave on the plane of its EV, and
    every frame delivered to name the QP it reaches."""

    def __init__(
        self,
        transport: str = "mrc",
        chaos: Chaos | None = None,
        *,
        loss: float = 0.0,
        reorder: float = 0.0,
        dup: float = 0.0,
        seed: int = 0,
        planes: int = 2,
        t1: int = 2,
        cfg_a: QpConfig | None = None,
        cfg_b: QpConfig | None = None,
        attrs_b_for_a: Callable[[QpAttributes], QpAttributes] | None = None,
        qpns: tuple[int, int] = (0x11, 0x22),
    ) -> None:
        if transport not in TRANSPORTS:
            raise ValueError(f"transport {transport!r}: one of {TRANSPORTS}")
        if chaos is None:
            chaos = (
                random_chaos(seed, loss, reorder, dup)
                if loss or reorder or dup
                else (lambda t, h, p, f: [(DELAY, f)])
            )
        elif loss or reorder or dup:
            raise ValueError("give chaos or loss/reorder/dup, not both")
        self.transport = transport
        self.shape = usid.ClosShape(planes=planes, t0=2, t1=t1, hosts_per_t0=1)
        self.mem = [MemoryTable(seed=11), MemoryTable(seed=12)]
        if transport == "mrc":
            # the responder keeps the default configuration unless told otherwise
            cls, rate = QueuePair, planes * PORT_RATE  # an MRC QP sprays over every port
            cfg_a = cfg_a or MRC_BASE
            cfg_b = cfg_b or replace(MRC_BASE, seed=2)
        else:
            # the responder mirrors the requester's configuration unless told otherwise
            cls, rate = RoceQueuePair, PORT_RATE  # a RoCEv2 QP uses one port
            cfg_a = cfg_a or ROCE_BASE
            cfg_b = cfg_b or replace(cfg_a, seed=2)
        self.qa = cls(qpns[0], host_net(self.shape, 0), self.mem[0], rate, cfg_a)
        self.qb = cls(qpns[1], host_net(self.shape, 1), self.mem[1], rate, cfg_b)
        attrs_b = self.qb.local_attributes()
        self.qa.connect(attrs_b_for_a(attrs_b) if attrs_b_for_a else attrs_b)
        self.qb.connect(self.qa.local_attributes())
        self.qps = (self.qa, self.qb)
        self.desks = tuple(
            EvProbeDesk(q.net, lambda n, q=q: q if n == q.qpn else None) for q in self.qps
        )
        self.events: list[list] = [[], []]
        self.net = ChaosWire(chaos, self._deliver)
        self.net.on_send = self._check_send
        self.sent = self.net.sent
        self._pump = Pump(self.net, lambda h, e, t: self.events[h].append(e))

    @property
    def chaos(self) -> Chaos:
        return self.net.chaos

    @property
    def now(self) -> float:
        return self.net.now

    def _check_send(self, host: int, port: int, frame: bytes) -> None:
        if self.transport == "mrc":
            assert port == wire.udp_flow_to_ev(*_sport_flow(frame)) % self.shape.planes
        else:
            assert port == self.qps[host].plane

    def _deliver(self, host: int, frame: bytes, t: float) -> None:
        if peek_dest_qp(frame) == wire.EV_PROBE_QPN:  # the host's QP 0x2 (EV probes)
            desk = self.desks[host]
            desk.receive_frame(frame, t)
            self._pump.pump(host, desk, t)
            return
        assert peek_dest_qp(frame) == self.qps[host].qpn
        self.qps[host].receive_frame(frame, t)
        self.pump(host)

    def pump(self, h: int) -> None:
        """Let side ``h`` send, report and arm its timer now (after a post or a port change
        made outside the loop)."""
        self._pump.pump(h, self.qps[h], self.net.now)

    def run(self, until: float, stop: Callable[[], bool] | None = None) -> None:
        """Advance virtual time to ``until`` (absolute), or until ``stop()`` holds."""
        self.pump(0)
        self.pump(1)
        self.net.run(until, stop)

    def of(self, h: int, kind: type) -> list:
        return [e for e in self.events[h] if isinstance(e, kind)]

    def region(self, size: int) -> tuple[bytearray, MemoryRegion]:
        """A ``size``-byte region registered on h1 inside 32 guard bytes of 0xA5 each side."""
        outer = bytearray(b"\xa5" * (size + 64))
        mr = self.mem[1].register(memoryview(outer)[32 : 32 + size])
        return outer, mr

    def is_data(self, frame: bytes) -> bool:
        lo = 0xC6 if self.transport == "mrc" else 0x06
        return lo <= frame[62] <= lo + 5

    def data_psns(self) -> list[int]:
        """PSNs of the data frames h0 sent, in sending order."""
        return [int.from_bytes(f[71:74], "big") for _, _, f in self.sent[0] if self.is_data(f)]


@pytest.fixture
def qp_pair() -> Callable[..., QpPair]:
    """``qp_pair(transport="mrc"|"rocev2", chaos=None, *, loss=, reorder=, dup=, seed=,
    planes=2, t1=2, cfg_a=, cfg_b=, attrs_b_for_a=, qpns=)`` -> a new :class:`QpPair`."""
    return QpPair


@pytest.fixture(scope="session")
def sim_quick_all(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every claim's simulated form, quick, run once for the whole session."""
    out = tmp_path_factory.mktemp("simexp")
    p = subprocess.run(
        [sys.executable, "-m", "lab.cli", "experiment", "all", "--sim", "--quick", "--out",
         str(out)],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return out
