"""Transport semantics a production RDMA engineer relies on (issue 11's findings): ordered
immediates, loss found without a timeout, no silent stall, validated connect, acceptance
rules on receive. Each test names the finding it holds."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import replace

import pytest
from conftest import DELAY, MRC_BASE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnic.transport.qp_types import ImmReceived, QpConfig, WcStatus, WriteCompleted
from mrcnic.wire import layout


def _is_data(frame: bytes) -> bool:
    return frame[layout.OFF_BTH] in layout.MRC_DATA_OPS


def _psn(frame: bytes) -> int:
    return int.from_bytes(frame[layout.OFF_BTH + 9 : layout.OFF_BTH + 12], "big")


# -- finding 1: an immediate never overtakes earlier writes --------------------------------


def test_an_immediate_waits_for_every_earlier_write(qp_pair):
    """Hold back one packet of a plain write (and every retransmission of it) for 5 ms while
    a later write-with-immediate gets through: the immediate is raised only once the plain
    write is placed, never before."""
    held: dict[str, float] = {}

    def chaos(t, h, port, f):
        if h == 0 and _is_data(f) and held.get("psn", _psn(f)) == _psn(f):
            held.setdefault("psn", _psn(f))
            held["arrives"] = min(held.get("arrives", 1.0), t + 5e-3)
            return [(5e-3, f)]
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    outer, mr = w.region(8192)
    rng = random.Random(1)
    data = bytes(rng.randrange(256) for _ in range(4096))
    w.qa.post_write(1, data, mr.base_va, mr.rkey)  # 16 packets of 256 B
    w.qa.post_write(2, b"flag", mr.base_va + 4096, mr.rkey, imm=0xF1A6)
    w.run(0.1)
    imms = w.of(1, ImmReceived)
    assert [e.imm for e in imms] == [0xF1A6]
    assert imms[0].time_s >= held["arrives"]  # not before the held packet arrived
    assert bytes(outer[32 : 32 + 4096]) == data


def _reference_imm_order(posts: list[tuple[int, int | None]]) -> list[int]:
    return [imm for _, imm in posts if imm is not None]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 1500), min_size=2, max_size=8),
    imm_mask=st.lists(st.booleans(), min_size=8, max_size=8),
    seed=st.integers(0, 10_000),
)
def test_completions_follow_post_order_under_reorder_and_loss(qp_pair, sizes, imm_mask, seed):
    """Against a reference model: each ImmReceived arrives only when every earlier message
    of the QP is fully placed, and immediates come out in post order."""
    w = qp_pair(loss=0.05, reorder=0.3, dup=0.05, seed=seed)
    outer, mr = w.region(sum(sizes) + 64)
    rng = random.Random(seed)
    posts = []
    off = 0
    placed_at_imm: list[bool] = []
    expected_bytes = bytearray(len(outer))

    for i, n in enumerate(sizes):
        data = bytes(rng.randrange(256) for _ in range(n))
        imm = i if imm_mask[i] else None
        w.qa.post_write(i, data, mr.base_va + off, mr.rkey, imm=imm)
        expected_bytes[off : off + n] = data
        posts.append((off + n, imm))
        off += n

    # check placement at the moment each immediate is raised
    class Watch(deque):
        def append(self, e):
            if isinstance(e, ImmReceived):
                end = next(end for end, imm in posts if imm == e.imm)
                placed = bytes(outer[32 : 32 + end])
                placed_at_imm.append(placed == bytes(expected_bytes[:end]))
            super().append(e)

    w.qb._events = Watch(w.qb._events)
    w.run(2.0)
    assert [e.imm for e in w.of(1, ImmReceived)] == _reference_imm_order(posts)
    assert all(placed_at_imm)
    assert [e.wr_id for e in w.of(0, WriteCompleted)] == list(range(len(sizes)))
    assert all(e.status is WcStatus.SUCCESS for e in w.of(0, WriteCompleted))


# -- finding 8: connect validates before it commits ----------------------------------------


def test_a_failed_connect_leaves_the_qp_unconnected(qp_pair):
    from mrcnic.sim.fabric import host_net
    from mrcnic.transport.memory import MemoryTable
    from mrcnic.transport.qp import QueuePair
    from mrcnic.transport.qp_types import QpAttributes, QpState, QpStateError
    from mrcnic.wire import usid

    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    qp = QueuePair(5, host_net(shape, 0), MemoryTable(seed=1), 200e6, MRC_BASE)
    bad = QpAttributes(
        qpn=9, host=7, start_psn=0, window_psns=1024, max_wimm_inflight=4, mtu_bytes=256
    )  # fmt: skip  (host 7 does not exist in this fabric)
    with pytest.raises(ValueError, match="host"):
        qp.connect(bad)
    assert qp.state is QpState.INIT
    with pytest.raises(QpStateError):
        qp.post_write(1, b"x", 0, 0)
    loop = replace(bad, host=0)
    with pytest.raises(ValueError, match="loopback"):
        qp.connect(loop)
    assert qp.state is QpState.INIT
    good = replace(bad, host=1, mtu_bytes=256)
    qp.connect(good)
    assert qp.state is QpState.READY


def test_connect_refuses_a_peer_mtu_that_differs():
    from mrcnic.sim.fabric import host_net
    from mrcnic.transport.memory import MemoryTable
    from mrcnic.transport.qp import QueuePair
    from mrcnic.transport.qp_types import QpState
    from mrcnic.wire import usid

    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    a = QueuePair(0x31, host_net(shape, 0), MemoryTable(seed=1), 200e6, MRC_BASE)
    b = QueuePair(0x32, host_net(shape, 1), MemoryTable(seed=2), 200e6,
                  replace(MRC_BASE, mtu_bytes=512))  # fmt: skip
    with pytest.raises(ValueError, match="mtu"):
        a.connect(b.local_attributes())
    assert a.state is QpState.INIT


def test_default_start_psns_are_random_not_a_function_of_the_qpn():
    from mrcnic.sim.fabric import host_net
    from mrcnic.transport.memory import MemoryTable
    from mrcnic.transport.qp import QueuePair
    from mrcnic.wire import usid

    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    cfg = QpConfig(mtu_bytes=256)
    starts = {
        QueuePair(7, host_net(shape, 0), MemoryTable(seed=1), 200e6, cfg).start_psn
        for _ in range(8)
    }
    assert len(starts) == 8  # the same QPN and seed: a new start PSN each time
    fixed = QpConfig(mtu_bytes=256, start_psn=1234)
    assert QueuePair(7, host_net(shape, 0), MemoryTable(seed=1), 200e6, fixed).start_psn == 1234
