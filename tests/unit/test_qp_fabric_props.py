"""Property: two real QueuePairs through the simulated fabric (``mrcnic.sim.fabric``), both
writing at once, under generated schedules of random loss, reordering (paths of different
delays and rates), duplication, trimming (real queue overflows and forced trims), ECN marks
(real and forced), and path, plane and port failures with heals, always keeping at least one
path alive each way:

- the destination bytes equal the source, both ways;
- every completion happens exactly once, in posting order, with SUCCESS; immediates arrive
  exactly once, in order;
- nothing is written outside the registered regions (guard bytes, and an untouched decoy);
- neither QP ever errors.

The fabric is driven through its public API: ``Fabric``/``FabricSpec``, its link tables
(one ``Link`` per path, replaced to give each path its own delay and rate), ``at()`` for
failures, heals and duplicates, and the ``deliver`` callback for forced trims, marks and
duplicates.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.sim.fabric import Fabric, FabricSpec, Link, LinkSpec, host_net
from mrcnic.transport.ev import EvConfig
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import (
    ImmReceived,
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
    peek_dest_qp,
)

MASK = 0xFFFFFF
MTU = 256
GUARD = 48


@dataclass
class Failure:
    kind: str  # path | plane | port
    index: int  # path: plane * paths + t1; plane; port: plane (host in ``host``)
    host: int
    down_s: float
    up_s: float


class Harness:
    """Two hosts, one QP each, the fabric, timers; the schedule's chaos on delivery."""

    def __init__(self, s: dict) -> None:
        planes, paths = s["planes"], s["paths"]
        self.s = s
        spec = FabricSpec(
            planes=planes,
            paths_per_plane=paths,
            port_rate_bps=100e6,
            path_rate_bps=100e6,
            prop_s=20e-6,
            queue_bytes=s["queue"],
            ecn_bytes=s["ecn"],
            trim=True,
            loss=s["loss"],
            seed=s["seed"],
        )
        self.fab = Fabric(spec, self._deliver)
        # each path its own delay and rate (both directions): packets of one write reorder
        for d in range(2):
            for p in range(planes):
                for t in range(paths):
                    delay_s, rate_bps = s["path_props"][p * paths + t]
                    old = self.fab.path[d][p][t]
                    self.fab.path[d][p][t] = Link(
                        old.name,
                        LinkSpec(rate_bps, delay_s, s["queue"], s["ecn"], True, False, s["loss"]),
                    )
        self.rng = random.Random(s["seed"] ^ 0x5A5A)
        self.mem = [MemoryTable(seed=s["seed"] * 2 + 1), MemoryTable(seed=s["seed"] * 2 + 2)]
        base_rtt = 2 * (MTU + 150) * 8 / 100e6 + 2 * min(dl for dl, _ in s["path_props"])
        shape = spec.shape
        cfg = QpConfig(
            mtu_bytes=MTU,
            ev=EvConfig(ev_count=4 * planes, backup_per_plane=2, spray=s["spray"]),
            base_rtt_s=base_rtt,
            seed=s["seed"] & 0xFFFF,
            start_psn=s["start_psn"][0],
        )
        from dataclasses import replace

        self.qps = (
            QueuePair(0x11, host_net(shape, 0), self.mem[0], planes * 100e6, cfg),
            QueuePair(
                0x22,
                host_net(shape, 1),
                self.mem[1],
                planes * 100e6,
                replace(cfg, seed=cfg.seed + 1, start_psn=s["start_psn"][1]),
            ),
        )
        self.qps[0].connect(self.qps[1].local_attributes())
        self.qps[1].connect(self.qps[0].local_attributes())
        self.events: list[list] = [[], []]
        self.on_event = lambda host, e: None  # set by the test
        self._timers: list[float | None] = [None, None]
        for f in s["failures"]:
            self.fab.at(f.down_s, self._fault(f, False))
            self.fab.at(f.up_s, self._fault(f, True))

    def _fault(self, f: Failure, up: bool):
        def apply() -> None:
            paths = self.s["paths"]
            if f.kind == "path":
                self.fab.set_path(f.index // paths, f.index % paths, up)
            elif f.kind == "plane":
                self.fab.set_plane(f.index, up)
            else:  # a NIC port: its host sees it at once and tells the peer
                self.fab.set_port(f.host, f.index, up)
                self.qps[f.host].port_status(f.index, up, self.fab.now)
                self.pump(f.host, self.fab.now)

        return apply

    def _deliver(self, host: int, port: int, frame: bytes, t: float) -> None:
        s = self.s
        r = self.rng.random()
        if 0xC6 <= frame[62] <= 0xCB and len(frame) > 106 and r < s["trim"]:
            frame = wire.trim_frame(frame, lasthop=self.rng.random() < 0.3)
        elif r < s["trim"] + s["ce"] and frame[15] & 0x30:
            b = bytearray(frame)
            b[15] |= 0x30
            frame = bytes(b)
        if self.rng.random() < s["dup"]:
            later = t + self.rng.random() * 2e-3
            self.fab.at(later, lambda f=frame, h=host: self._receive(h, f, self.fab.now))
        self._receive(host, frame, t)

    def _receive(self, host: int, frame: bytes, t: float) -> None:
        q = self.qps[host]
        if peek_dest_qp(frame) == q.qpn:
            q.receive_frame(frame, t)
        self.pump(host, t)

    def pump(self, host: int, t: float) -> None:
        q = self.qps[host]
        for port, frame in q.frames_to_send(t):
            self.fab.send(host, port, frame, t)
        while (e := q.next_event()) is not None:
            self.events[host].append(e)
            self.on_event(host, e)
        nt = q.get_timer()
        if nt is not None and nt != self._timers[host]:
            self._timers[host] = nt

            def fire(h: int = host, nt: float = nt) -> None:
                if self._timers[h] != nt:
                    return
                self._timers[h] = None
                self.qps[h].handle_timer(self.fab.now)
                self.pump(h, self.fab.now)

            self.fab.at(max(nt, t), fire)

    def of(self, host: int, kind: type) -> list:
        return [e for e in self.events[host] if isinstance(e, kind)]


@st.composite
def schedules(draw):
    planes = draw(st.integers(1, 3))
    paths = draw(st.integers(1, 2))
    n_paths = planes * paths
    survivor = draw(st.integers(0, n_paths - 1))  # never fails: one path alive each way
    s_plane = survivor // paths
    failures = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["path", "plane", "port"]))
        down = draw(st.floats(0, 10e-3))
        up = down + draw(st.floats(1e-3, 0.3))
        if kind == "path":
            idx = draw(st.integers(0, n_paths - 1))
            if idx == survivor:
                continue
        else:
            idx = draw(st.integers(0, planes - 1))
            if idx == s_plane:
                continue
        failures.append(Failure(kind, idx, draw(st.integers(0, 1)), down, up))
    near_wrap = st.integers(MASK - 120, MASK)
    return {
        "seed": draw(st.integers(0, 2**32 - 1)),
        "planes": planes,
        "paths": paths,
        "path_props": draw(
            st.lists(
                st.tuples(st.floats(5e-6, 2e-3), st.sampled_from([10e6, 30e6, 100e6])),
                min_size=n_paths,
                max_size=n_paths,
            )
        ),
        "queue": draw(st.sampled_from([1500, 3000, 8000, 64 * 1024])),
        "ecn": draw(st.sampled_from([None, 1000, 4000])),
        "loss": draw(st.sampled_from([0.0, 0.01, 0.05])),
        "trim": draw(st.floats(0, 0.1)),
        "ce": draw(st.floats(0, 0.2)),
        "dup": draw(st.floats(0, 0.1)),
        "failures": failures,
        "start_psn": (
            draw(st.one_of(near_wrap, st.integers(0, MASK))),
            draw(st.one_of(near_wrap, st.integers(0, MASK))),
        ),
        "spray": draw(st.sampled_from(["bag", "random"])),
        "sizes": [
            draw(st.lists(st.integers(0, 24000), min_size=1, max_size=5)),
            draw(st.lists(st.integers(0, 6000), min_size=0, max_size=3)),
        ],
        "imm": draw(st.lists(st.booleans(), min_size=5, max_size=5)),
    }


def _guarded(mem: MemoryTable, size: int):
    """A region inside a larger buffer: GUARD bytes either side must never change."""
    outer = bytearray(b"\xa5" * (size + 2 * GUARD))
    mr = mem.register(memoryview(outer)[GUARD : GUARD + size])
    return outer, mr


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=schedules())
def test_two_qps_through_the_fabric_stay_exact_and_alive(s):
    h = Harness(s)
    srcs, outers, decoys, expect_imm = [], [], [], [[], []]
    spans: list[list[tuple[int, int]]] = [[], []]  # per writer: (offset, length) per wr_id
    early: list[tuple[int, int]] = []

    def on_event(host: int, e: object) -> None:
        # a requester completion means every byte of that write is at the destination
        if isinstance(e, WriteCompleted) and e.status is WcStatus.SUCCESS:
            off, n = spans[host][e.wr_id]
            if outers[host][GUARD + off : GUARD + off + n] != srcs[host][off : off + n]:
                early.append((host, e.wr_id))

    h.on_event = on_event
    for a in range(2):
        b = 1 - a
        sizes = s["sizes"][a]
        total = max(sum(sizes), 1)
        outer, mr = _guarded(h.mem[b], total)
        decoy, _ = _guarded(h.mem[b], 512)  # registered too, but nobody writes there
        src = random.Random(s["seed"] + a).randbytes(sum(sizes))
        off = 0
        for k, n in enumerate(sizes):
            imm = (a << 16 | k) if s["imm"][k] else None
            if imm is not None:
                expect_imm[b].append(imm)
            h.qps[a].post_write(k, src[off : off + n], mr.base_va + off, mr.rkey, imm=imm)
            spans[a].append((off, n))
            off += n
        srcs.append(src)
        outers.append(outer)
        decoys.append(decoy)

    def done() -> bool:
        return all(len(h.of(a, WriteCompleted)) >= len(s["sizes"][a]) for a in range(2))

    h.pump(0, 0.0)
    h.pump(1, 0.0)
    h.fab.run(30.0, lambda: done() or bool(h.of(0, QpErrorEvent) or h.of(1, QpErrorEvent)))
    h.fab.run(h.fab.now + 0.05)  # late duplicates, last SACKs and immediates
    assert not early, f"completed before the data was placed: {early}"
    for a in range(2):
        assert not h.of(a, QpErrorEvent), h.of(a, QpErrorEvent)
        comps = h.of(a, WriteCompleted)
        assert [e.wr_id for e in comps] == list(range(len(s["sizes"][a])))  # once, in order
        assert all(e.status is WcStatus.SUCCESS for e in comps)
        n = len(srcs[a])
        outer = outers[a]
        assert outer[GUARD : GUARD + n] == srcs[a]
        assert outer[:GUARD] == b"\xa5" * GUARD and outer[GUARD + max(n, 1) :] == b"\xa5" * GUARD
        assert decoys[a] == b"\xa5" * (512 + 2 * GUARD)
    for b in range(2):
        assert [e.imm for e in h.of(b, ImmReceived)] == expect_imm[b]  # once, in order
