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

from mrcnic import wire
from mrcnic.transport.ev import EvInput, EvState, EvStateChanged
from mrcnic.transport.qp_types import (
    ImmReceived,
    PeerPortStatus,
    QpConfig,
    QpErrorEvent,
    WcStatus,
    WriteCompleted,
)
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


# -- finding 3: no silent stall ----------------------------------------------------------------


def _ports_down_chaos(down: set[int]):
    """A wire on which the ports of h0 listed in ``down`` carry nothing (either way)."""

    def chaos(t, h, port, f):
        if port in down:
            return []
        return [(DELAY, f)]

    return chaos


def test_every_port_down_for_good_ends_the_qp_with_a_reason(qp_pair):
    down: set[int] = set()
    w = qp_pair(chaos=_ports_down_chaos(down))
    outer, mr = w.region(256 * 4000)
    w.qa.post_write(1, bytes(256 * 4000), mr.base_va, mr.rkey)
    w.run(0.002, stop=lambda: w.qa.stats.tx_data_packets > 500)
    assert not w.of(0, WriteCompleted)  # still under way
    t_down = w.now
    for p in range(2):
        down.add(p)
        w.qa.port_status(p, False, w.now)
    w.pump(0)
    w.run(10.0)
    errors = w.of(0, QpErrorEvent)
    assert len(errors) == 1 and errors[0].status is WcStatus.RETRY_EXCEEDED
    assert "no usable path" in errors[0].reason and "local ports down [0, 1]" in errors[0].reason
    budget = sum(min(w.qa._rto * (1 << k), w.qa.config.max_rto_s) for k in range(8)) + 0.01
    assert errors[0].time_s - t_down <= budget
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.RETRY_EXCEEDED]


def test_every_port_down_and_back_within_the_budget_completes(qp_pair):
    down: set[int] = set()
    w = qp_pair(chaos=_ports_down_chaos(down))
    outer, mr = w.region(256 * 4000)
    rng = random.Random(5)
    data = bytes(rng.randrange(256) for _ in range(256 * 4000))
    w.qa.post_write(1, data, mr.base_va, mr.rkey)
    w.run(0.005, stop=lambda: w.qa.stats.tx_data_packets > 500)
    assert not w.of(0, WriteCompleted)  # still under way
    t_down = w.now
    for p in range(2):
        down.add(p)
        w.qa.port_status(p, False, w.now)
    w.pump(0)
    w.run(t_down + 0.025)
    for p in range(2):
        down.discard(p)
        w.qa.port_status(p, True, w.now)
    w.pump(0)
    w.run(5.0)
    assert not w.of(0, QpErrorEvent)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    assert bytes(outer[32 : 32 + len(data)]) == data


def test_a_peer_that_reports_every_port_down_does_not_silence_the_qp(qp_pair):
    """Mask 0 from the peer: the QP keeps a timer running and ends with a reason if the
    peer never comes back (it used to wait forever, with no event and no traffic)."""
    w = qp_pair()
    outer, mr = w.region(256 * 100)
    w.run(0.001)
    for p in range(2):
        w.qb.port_status(p, False, w.now)
    w.pump(1)
    w.run(0.002)
    assert w.qa.evs.active == []
    w.qa.post_write(1, bytes(256 * 100), mr.base_va, mr.rkey)
    w.pump(0)
    w.run(10.0)
    errors = w.of(0, QpErrorEvent)
    assert len(errors) == 1 and "peer ports down [0, 1]" in errors[0].reason


def test_a_stale_port_down_after_an_up_is_ignored(qp_pair):
    """The update that says "down" overtaken by the later "up": the plane stays up."""
    held: list[tuple[float, bytes]] = []

    def chaos(t, h, port, f):
        op = f[layout.OFF_BTH]
        if h == 0 and op == layout.Opcode.EP_REQUEST and not held:
            held.append((t, f))
            return [(3e-3, f)]  # the first update (down) arrives late
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    w.run(0.001)
    w.qa.port_status(1, False, w.now)
    w.pump(0)
    w.run(0.0012)
    w.qa.port_status(1, True, w.now)
    w.pump(0)
    w.run(0.1)
    masks = [e.port_mask for e in w.of(1, PeerPortStatus)]
    assert masks[-1] == 0b11
    assert not w.qb._peer_down[1]
    assert w.qb.stats.rx_stale_port_status >= 1


def test_port_status_is_retried_until_acknowledged(qp_pair):
    lost = {"n": 0}

    def chaos(t, h, port, f):
        if h == 0 and f[layout.OFF_BTH] == layout.Opcode.EP_REQUEST and lost["n"] < 4:
            lost["n"] += 1  # the first two sends (two copies each) are lost
            return []
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    w.run(0.001)
    w.qa.port_status(1, False, w.now)
    w.pump(0)
    w.run(0.2)
    assert [e.port_mask for e in w.of(1, PeerPortStatus)] == [0b01]
    assert w.qa._ps_pending is None and w.qa.stats.port_status_sent >= 3


# -- finding 2: loss is found from SACKs, not by timeout ---------------------------------------


def test_a_lost_packet_is_resent_within_a_few_rtts_and_its_ev_retired(qp_pair):
    dropped: dict[str, object] = {}

    def chaos(t, h, port, f):
        if h == 0 and _is_data(f) and "psn" not in dropped and t > 0.0005:
            dropped.update(psn=_psn(f), t=t, ev=int.from_bytes(f[54:56], "big") << 16
                           | int.from_bytes(f[16:18], "big"))  # fmt: skip
            return []
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    outer, mr = w.region(256 * 2000)
    w.qa.post_write(1, bytes(256 * 2000), mr.base_va, mr.rkey)
    w.run(1.0)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    st = w.qa.stats
    assert st.timeouts == 0 and st.retransmissions == 1 and st.sack_losses == 1
    rtx = [t for t, _, f in w.sent[0] if _is_data(f) and _psn(f) == dropped["psn"]]
    rtt = 2 * DELAY
    assert len(rtx) == 2 and rtx[1] - rtx[0] <= 3 * rtt + w.qa._reo_window_s()
    retired = [e for e in w.of(0, EvStateChanged) if e.cause is EvInput.LOST]
    assert [(e.ev, e.new) for e in retired] == [(dropped["ev"], EvState.ASSUMED_BAD)]


def test_mrc_sim_at_one_percent_loss_recovers_in_about_an_rtt():
    from mrcnic.sim import transfer

    r = transfer.run(transfer.config_from_args(
        transfer.build_parser().parse_args(["--size", "16M", "--loss", "0.01", "--seed", "3"])
    ))  # fmt: skip
    assert r["verified"] and r["qp_errors"] == 0
    assert r["loss_recovery_rtts"] is not None and r["loss_recovery_rtts"] <= 3
    assert r["timeouts"] * 5 < r["retransmissions"]  # the RTO is the last resort only


def test_spraying_on_a_lossless_fabric_retransmits_nothing():
    from mrcnic.sim import transfer

    r = transfer.run(transfer.config_from_args(
        transfer.build_parser().parse_args(["--size", "16M", "--seed", "4"])
    ))  # fmt: skip
    assert r["retransmissions"] == 0 and r["spurious_retransmissions"] == 0


def test_reordering_makes_few_spurious_retransmissions(qp_pair):
    w = qp_pair(reorder=0.3, seed=8)
    outer, mr = w.region(256 * 2000)
    w.qa.post_write(1, bytes(256 * 2000), mr.base_va, mr.rkey)
    w.run(2.0)
    st = w.qa.stats
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    assert st.retransmissions <= 0.05 * st.tx_data_packets


# -- acceptance rules on receive ----------------------------------------------------------------


def _nack_frame(w, reason: int, psn: int, ts_ns: int = 0) -> bytes:
    """A well-formed NACK from h1's QP to h0's (built by h1's own code, valid ICRC)."""
    w.qb._send_nack(reason, psn, 0, ts_ns, 0)
    return w.qb.control_frames_to_send()[-1][1]


def _foreign(frame: bytes) -> bytes:
    """The same frame from an address that is not the peer's (a third host)."""
    f = bytearray(frame)
    f[layout.OFF_SRC + 4] ^= 0x40  # another T0 uSID: a host the QP is not connected to
    return bytes(f)


def test_data_from_a_third_host_is_dropped_and_counted(qp_pair):
    w = qp_pair()
    outer, mr = w.region(1024)
    w.qa.post_write(1, b"\x11" * 256, mr.base_va, mr.rkey)
    frames = [f for _, f in w.qa.frames_to_send(0.0) if _is_data(f)]
    before = bytes(outer)
    w.qb.receive_frame(_foreign(frames[0]), 0.0)
    assert w.qb.stats.rx_foreign == 1 and w.qb.stats.rx_data_packets == 0
    assert bytes(outer) == before  # nothing placed
    w.qb.receive_frame(frames[0], 0.0)  # the genuine one is accepted
    assert w.qb.stats.rx_data_packets == 1 and bytes(outer[32 : 32 + 256]) == b"\x11" * 256


def test_a_forged_nack_is_never_fatal(qp_pair):
    w = qp_pair()
    outer, mr = w.region(4096)
    w.qa.post_write(1, bytes(4096), mr.base_va, mr.rkey)
    w.qa.frames_to_send(0.0)
    out = next(iter(w.qa.sb.records))  # a PSN h0 is waiting on
    unexp = int(layout.NackReason.UNEXP_EVENT)
    w.qa.receive_frame(_foreign(_nack_frame(w, unexp, out)), 0.0)  # right PSN, wrong host
    stale = (out + 1000) & layout.PSN_MASK
    w.qa.receive_frame(_nack_frame(w, unexp, stale), 0.0)  # the peer's address, no such PSN
    assert w.qa.state.name == "READY" and not w.of(0, QpErrorEvent)
    assert w.qa.stats.rx_foreign == 1 and w.qa.stats.rx_stale_nacks == 1
    # the peer's address (spoofed) and an outstanding PSN, but not the transmission's
    # timestamp: whoever made it never saw the packet
    sent_ns = w.qa.sb.records[out].tx_ts_ns
    w.qa.receive_frame(_nack_frame(w, unexp, out, sent_ns + 1), 0.0)
    assert w.qa.state.name == "READY" and w.qa.stats.rx_unmatched_nacks == 1
    w.qa.receive_frame(_nack_frame(w, unexp, out, sent_ns), 0.0)  # genuine: fatal
    assert w.qa.state.name == "ERROR"


def test_port_status_from_a_third_host_is_ignored(qp_pair):
    w = qp_pair()
    w.run(0.001)
    w.qb.port_status(0, False, w.now)
    frames = [f for _, f in w.qb.control_frames_to_send()]
    for f in frames:
        w.qa.receive_frame(_foreign(f), w.now)
    assert not w.of(0, PeerPortStatus) and w.qa.stats.rx_foreign == len(frames)
    assert not w.qa._peer_down[0]


# -- finding 6: EV probes to QP 0x2, and the reverse EV set refreshed by them ------------------


def _frame_ev(f: bytes) -> int:
    return int.from_bytes(f[54:56], "big") << 16 | int.from_bytes(f[16:18], "big")


def test_ev_probes_to_qp_2_are_sent_and_answered(qp_pair):
    w = qp_pair()
    outer, mr = w.region(256 * 3000)
    w.qa.post_write(1, bytes(256 * 3000), mr.base_va, mr.rkey)
    w.run(0.5)
    st = w.qb.stats  # the responder acknowledges, so it guards its reverse EVs
    assert st.ev_probes_sent > 0 and st.ev_probes_answered == st.ev_probes_sent
    assert w.desks[0].answered == st.ev_probes_sent  # h0's QP 0x2 answered every one
    probes = [f for _, _, f in w.sent[1] if f[layout.OFF_BTH + 5 : layout.OFF_BTH + 8] == b"\0\0\2"]
    assert probes and all(_frame_ev(f) in w.qb.evs.reverse for f in probes)


def test_a_dead_reverse_path_is_taken_out_by_its_probes_and_back_when_healed(qp_pair):
    dead: set[int] = set()

    def chaos(t, h, port, f):
        if h == 1 and _frame_ev(f) in dead:
            return []  # the path of that reverse EV, h1 -> h0, delivers nothing
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    victim = w.qb.evs.reverse[0]
    dead.add(victim)
    outer, mr = w.region(256 * 20000)
    w.qa.post_write(1, bytes(256 * 20000), mr.base_va, mr.rkey)
    w.run(0.5)
    assert victim in w.qb.evs.reverse_bad and w.qb.stats.reverse_evs_retired == 1
    t_retired = w.now
    w.qa.post_write(2, bytes(256 * 2000), mr.base_va, mr.rkey)
    w.run(1.0)
    sacks_after = [
        f for t, _, f in w.sent[1] if t > t_retired and f[layout.OFF_BTH] == layout.Opcode.SACK
    ]
    assert sacks_after and victim not in {_frame_ev(f) for f in sacks_after}
    dead.clear()
    w.qa.post_write(3, bytes(256 * 20000), mr.base_va, mr.rkey)
    w.run(2.0)
    assert victim not in w.qb.evs.reverse_bad and w.qb.stats.reverse_evs_restored == 1
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS] * 3


def test_a_completed_write_leaves_no_reference_to_the_users_buffer(qp_pair):
    """Loss bookkeeping keeps numbers, not records: once a write completes, the caller's
    bytearray is free again (it can be resized), even after losses and retransmissions."""
    w = qp_pair(loss=0.02, seed=4)
    outer, mr = w.region(256 * 400)
    bufs = [bytearray(256 * 100) for _ in range(4)]
    for i, b in enumerate(bufs):
        w.qa.post_write(i, b, mr.base_va + i * 256 * 100, mr.rkey)
    w.run(5.0)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS] * 4
    assert w.qa.stats.retransmissions > 0 and w.qa.loss_recovery_s()
    for b in bufs:
        b.extend(b"x")  # BufferError if anything still exports it


def test_an_unacknowledged_port_status_is_given_up_after_the_retry_limit(qp_pair):
    def chaos(t, h, port, f):
        return [] if h == 1 else [(DELAY, f)]  # the peer's answers never arrive

    w = qp_pair(chaos=chaos)
    w.run(0.001)
    w.qa.port_status(1, False, w.now)
    w.pump(0)
    w.run(60.0)
    st = w.qa.stats
    assert st.port_status_unacked == 1 and w.qa._ps_pending is None
    assert st.port_status_sent == w.qa.config.retry_limit + 1


# -- issue 25: completion semantics ---------------------------------------------------------


def test_the_first_error_completion_carries_the_real_status(qp_pair):
    """Issue 25: a later write is refused while an earlier one is still being repaired (its
    first packet is lost). The first error completion is the refused write's
    REMOTE_ACCESS_ERROR (the earlier write was reported FLUSHED before it), and the responder
    places nothing after its refusal (it stayed READY and took the repair)."""
    held: list[bytes] = []

    def chaos(t, h, port, f):
        if h == 0 and _is_data(f) and (not held or _psn(f) == _psn(held[0])):
            held.append(f)  # write 1's first packet, and every retransmission of it
            return []
        return [(DELAY, f)]

    w = qp_pair(chaos=chaos)
    outer, mr = w.region(70_000)
    w.qa.post_write(1, bytes([1]) * 65_536, mr.base_va, mr.rkey)
    w.qa.post_write(2, bytes([2]) * 100, mr.base_va, mr.rkey ^ 1)
    w.run(1.0)
    comps = [(e.wr_id, e.status) for e in w.of(0, WriteCompleted)]
    assert comps == [(2, WcStatus.REMOTE_ACCESS_ERROR), (1, WcStatus.FLUSHED)]
    assert [e.status for e in w.of(0, QpErrorEvent)] == [WcStatus.REMOTE_ACCESS_ERROR]
    assert [e.status for e in w.of(1, QpErrorEvent)] == [WcStatus.REMOTE_ACCESS_ERROR]
    assert w.qb.state.name == "ERROR"
    before = bytes(outer)
    closed = w.qb.stats.rx_closed
    w.qb.receive_frame(held[0], w.now)  # the repair arrives after all: not placed
    assert bytes(outer) == before and w.qb.stats.rx_closed == closed + 1


def test_a_qp_that_makes_no_progress_fails_whatever_frames_keep_arriving(qp_pair):
    """Issue 25: every transmission of one packet is lost, and each is answered by a trim
    NACK that echoes its timestamp (what a host that sniffs the writer and spoofs the
    responder's address can send on a fabric without a source guard). Trims prove a path
    alive, so no retransmission ever times out and the retry limit never counts: the QP
    retransmitted forever with no progress and no error. Now it fails with RETRY_EXCEEDED
    once nothing was acknowledged for its retry budget."""
    from mrcnic.transport.frames import NACK, OP_NACK

    stuck: dict[str, int] = {}

    def chaos(t, h, port, f):
        if h == 0 and _is_data(f):
            psn = _psn(f)
            if stuck.setdefault("psn", psn) == psn:
                ts = int.from_bytes(f[layout.OFF_BTH + 16 : layout.OFF_BTH + 24], "big")
                ev = wire.udp_flow_to_ev(
                    int.from_bytes(f[54:56], "big"), int.from_bytes(f[15:18], "big") & 0xFFFF
                )
                body = NACK.pack(int(wire.NackReason.TRIMMED) << 24 | psn, ev, 0, ts)
                _plane, nack = w.qb._ctrl_frame(OP_NACK, psn, body, w.qb.evs.reverse[0])
                w.net.at(t + 2 * DELAY, lambda: w._deliver(0, nack, w.net.now))
                return []
        return [(DELAY, f)]

    cfg = replace(MRC_BASE, max_rto_s=0.02)  # a budget of (7 + 2) x 20 ms
    w = qp_pair(chaos=chaos, cfg_a=cfg)
    outer, mr = w.region(4096)
    w.qa.post_write(1, bytes(2048), mr.base_va, mr.rkey)
    w.run(0.5)
    assert w.qa.stats.retransmissions > 100 and w.qa.stats.timeouts == 0  # all repairs
    (err,) = w.of(0, QpErrorEvent)
    assert err.status is WcStatus.RETRY_EXCEEDED and "no progress" in err.reason
    assert err.time_s == pytest.approx(9 * 0.02, rel=0.05)
    assert [(e.wr_id, e.status) for e in w.of(0, WriteCompleted)] == [(1, WcStatus.RETRY_EXCEEDED)]


def test_port_status_flapping_does_not_keep_a_dead_qp_alive(qp_pair):
    """Issue 25: the peer acknowledges nothing any more, and updates under its address say
    "every port down", then "all up", every 4 ms (the forge bench sends such updates each
    round). Each "down" repairs what is in flight at once and each "up" ends the no-path
    stall, so neither the retry limit nor the stall rule ever completed its count: the QP
    retransmitted with no progress and no error. The no-progress rule ends it."""
    from mrcnic.transport.frames import ENDPOINT, OP_EP_REQ

    def chaos(t, h, port, f):
        return [] if h == 0 and _is_data(f) else [(DELAY, f)]

    w = qp_pair(chaos=chaos, cfg_a=replace(MRC_BASE, max_rto_s=0.02))
    outer, mr = w.region(1 << 16)
    w.qa.post_write(1, bytes(60_000), mr.base_va, mr.rkey)
    t, seq = 0.0, 100
    while t < 1.0 and w.qa.state.name == "READY":
        t += 0.004
        w.run(t)
        seq += 1
        body = ENDPOINT.pack(int(wire.EndpointKind.PORT_STATUS), seq, 0, 0b11 * (seq % 2), 1)
        w._deliver(0, w.qb._ctrl_frame(OP_EP_REQ, 0, body, w.qb.evs.reverse[0])[1], t)
    (err,) = w.of(0, QpErrorEvent)
    assert err.status is WcStatus.RETRY_EXCEEDED and "no progress" in err.reason
    assert err.time_s <= 9 * 0.02 + 0.004
    assert [(e.wr_id, e.status) for e in w.of(0, WriteCompleted)] == [(1, WcStatus.RETRY_EXCEEDED)]
