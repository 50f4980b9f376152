"""Two RoceQueuePairs over a programmable wire (the ``qp_pair`` fixture of conftest.py):
byte-identical delivery, in-order acceptance, one NAK per gap, go-back-N, the local ACK
timeout and retry exhaustion, DCQCN on ECN marks, memory protection, the ECMP-hashed single
path, and property-based schedules of loss, reordering and duplication."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.rocev2.qp import RoceConfig, RoceQueuePair, RoceUnsupportedError
from mrcnic.sim.fabric import host_net
from mrcnic.transport.ev import EvState
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp_types import (
    ImmReceived,
    QpAttributes,
    QpConfig,
    QpErrorEvent,
    QpState,
    QpStateError,
    WcStatus,
    WriteCompleted,
)
from mrcnic.wire import usid
from mrcnic.wire.rocev2 import (
    OP_CNP,
    SYN_NAK_PSN_SEQ,
    SYN_NAK_REMOTE_ACCESS,
    rdma_flow_label,
    rdma_udp_sport,
)

MASK = 0xFFFFFF
DELAY = 50e-6  # the wire's delay (conftest.DELAY)
RATE = 100e6  # one port
Chaos = Callable[[float, int, int, bytes], list[tuple[float, bytes]]]
BASE = RoceConfig(mtu_bytes=256, base_rtt_s=2e-4, ack_timeout_s=2e-3)  # conftest.ROCE_BASE


def op(frame: bytes) -> int:
    return frame[62]


def psn(frame: bytes) -> int:
    return int.from_bytes(frame[71:74], "big")


def is_data(frame: bytes) -> bool:
    return 0x06 <= frame[62] <= 0x0B


def syndrome(frame: bytes) -> int:
    return frame[74]


def payload(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def drop_first(match: Callable[[int, bytes], bool], count: int = 1) -> Chaos:
    """Drop the first ``count`` frames for which match(src_host, frame) holds."""
    left = [count]

    def chaos(t: float, h: int, port: int, f: bytes) -> list[tuple[float, bytes]]:
        if left[0] and match(h, f):
            left[0] -= 1
            return []
        return [(DELAY, f)]

    return chaos


# -- basics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 255, 256, 257, 5000])
def test_write_completes_once_and_places_bytes(qp_pair, size):
    w = qp_pair("rocev2")
    outer, mr = w.region(size)
    data = payload(size)
    w.qa.post_write(7, data, mr.base_va, mr.rkey)
    w.run(1.0)
    assert [(e.wr_id, e.status, e.byte_len) for e in w.of(0, WriteCompleted)] == [
        (7, WcStatus.SUCCESS, size)
    ]
    assert outer[32 : 32 + size] == data
    assert outer[:32] == b"\xa5" * 32 and outer[-32:] == b"\xa5" * 32
    assert w.qa.idle and w.qa.get_stats().retransmissions == 0
    assert w.qb.get_stats().tx_acks >= 1 and w.qb.get_stats().tx_nacks == 0


def test_zero_length_write_with_immediate(qp_pair):
    w = qp_pair("rocev2")
    _, mr = w.region(16)
    w.qa.post_write(1, b"", mr.base_va, mr.rkey, imm=0xDEADBEEF)
    w.run(1.0)
    assert [e.wr_id for e in w.of(0, WriteCompleted)] == [1]
    assert [(e.imm, e.byte_len) for e in w.of(1, ImmReceived)] == [(0xDEADBEEF, 0)]


def test_rc_wire_format_reth_only_on_first_and_no_trim_dscp(qp_pair):
    w = qp_pair("rocev2")
    _, mr = w.region(1000)
    w.qa.post_write(1, payload(1000), mr.base_va, mr.rkey, imm=9)
    w.run(1.0)
    frames = [wire.parse_frame(f) for _, _, f in w.sent[0]]
    assert [fr.mrc.bth.opcode for fr in frames] == [0x06, 0x07, 0x07, 0x09]
    assert [fr.mrc.reth is not None for fr in frames] == [True, False, False, False]
    assert frames[0].mrc.reth.length == 1000 and frames[0].mrc.reth.rkey == mr.rkey
    assert frames[-1].mrc.imm.imm == 9 and frames[-1].mrc.bth.ack_req
    assert all(fr.mrc.meth is None and fr.mrc.ts is None for fr in frames)
    assert {(fr.ip6.dscp, fr.ip6.ecn) for fr in frames} == {(wire.Dscp.NO_TRIM, wire.Ecn.ECT0)}
    acks = [wire.parse_frame(f) for _, _, f in w.sent[1]]
    assert {fr.mrc.bth.opcode for fr in acks} == {0x11}
    assert {fr.ip6.dscp for fr in acks} == {wire.Dscp.CONTROL}
    assert all(fr.mrc.aeth.syndrome == 0 for fr in acks)
    assert all(wire.verify_udp_checksum(fr, w.qa._final) for fr in frames)


def test_one_path_per_qp_from_the_flow_hash(qp_pair):
    w = qp_pair("rocev2", planes=4, t1=4)
    _, mr = w.region(4000)
    w.qa.post_write(1, payload(4000), mr.base_va, mr.rkey)
    w.run(1.0)
    evs = {wire.parse_frame(f).ev for _, _, f in w.sent[0]}
    ports = {p for _, p, _ in w.sent[0]}
    assert evs == {w.qa.ev} and ports == {w.qa.plane}
    info = usid.decode_path(w.shape, usid.ev_address(w.shape, 0, 1, w.qa.ev))
    assert (info.plane, info.t1) == (w.qa.plane, w.qa.t1)
    sport = rdma_udp_sport(rdma_flow_label(0x11, 0x22))
    assert w.qa.udp_sport == w.qb.udp_sport == sport and 0xC000 <= sport <= 0xFFFF
    assert w.qa.ev >> 16 == sport


def test_qps_hash_independently_and_collide_like_ecmp():
    shape = usid.ClosShape(planes=4, t0=2, t1=4, hosts_per_t0=1)

    def loads(seed: int) -> list[int]:
        count: dict[tuple[int, int], int] = {}
        for i in range(64):
            cfg = replace(BASE, ecmp_seed=seed)
            a = RoceQueuePair(0x100 + i, host_net(shape, 0), MemoryTable(1), RATE, cfg)
            b = RoceQueuePair(0x200 + i, host_net(shape, 1), MemoryTable(2), RATE, cfg)
            a.connect(b.local_attributes())
            count[(a.plane, a.t1)] = count.get((a.plane, a.t1), 0) + 1
        return sorted(count.values())

    per_seed = [loads(seed) for seed in range(4)]
    for load in per_seed:
        assert len(load) >= 12 and sum(load) == 64  # spread over most of the 16 paths...
        assert max(load) >= 6  # ...unevenly: a fair share would be 4 per path
    # the switches' seed changes which flows collide, not only the paths' names
    assert len({tuple(x) for x in per_seed}) > 1
    bound = RoceQueuePair(0x300, host_net(shape, 0), MemoryTable(1), RATE, replace(BASE, port=3))
    bound.connect(
        RoceQueuePair(0x301, host_net(shape, 1), MemoryTable(2), RATE, BASE).local_attributes()
    )
    assert bound.plane == 3


# -- in-order delivery and go-back-N ---------------------------------------------------------------


def test_a_lost_packet_costs_one_nak_and_go_back_n_resends_everything_after_it(qp_pair):
    lost_psn = []

    def chaos(t, h, port, f):
        if h == 0 and is_data(f) and not lost_psn and psn(f) == (w.qa.start_psn + 3) & MASK:
            lost_psn.append(psn(f))
            return []
        return [(DELAY, f)]

    w = qp_pair("rocev2", chaos)
    _, mr = w.region(256 * 12)
    data = payload(256 * 12)
    w.qa.post_write(1, data, mr.base_va, mr.rkey)
    w.run(1.0)
    assert bytes(mr.buffer) == data
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    sa, sb = w.qa.get_stats(), w.qb.get_stats()
    naks = [f for _, _, f in w.sent[1] if op(f) == 0x11 and syndrome(f) == SYN_NAK_PSN_SEQ]
    assert len(naks) == 1 and psn(naks[0]) == lost_psn[0]  # one NAK, naming the gap
    assert sb.rx_out_of_order >= 1 and sb.rx_out_of_order == sa.gbn_rewind_psns - 1
    # go-back-N: every PSN from the lost one to the highest sent went again, in order
    psns = w.data_psns()
    k = psns.index(lost_psn[0], psns.index(lost_psn[0]) + 1)
    resent = psns[k : k + sa.gbn_rewind_psns]
    assert resent == [(lost_psn[0] + i) & MASK for i in range(sa.gbn_rewind_psns)]
    assert sa.retransmissions == sa.gbn_rewind_psns > 1 and sa.gbn_rewinds == 1
    assert sa.timeouts == 0


def test_reordering_is_a_gap_too(qp_pair):
    held = []

    def chaos(t, h, port, f):
        if h == 0 and is_data(f) and not held and psn(f) == (w.qa.start_psn + 1) & MASK:
            held.append(f)
            return [(DELAY * 3, f)]  # arrives after its successors: dropped as out of order
        return [(DELAY, f)]

    w = qp_pair("rocev2", chaos)
    _, mr = w.region(256 * 8)
    data = payload(256 * 8, 1)
    w.qa.post_write(1, data, mr.base_va, mr.rkey)
    w.run(1.0)
    assert bytes(mr.buffer) == data and len(w.of(0, WriteCompleted)) == 1
    # the late packet is accepted when it lands, so the successors still in flight make a
    # new gap: one NAK per gap, and go-back-N for each
    assert w.qb.get_stats().rx_out_of_order >= 1 and w.qa.get_stats().gbn_rewinds >= 1
    assert w.qb.get_stats().tx_nacks == w.qa.get_stats().gbn_rewinds


def test_duplicates_are_reacked_and_never_complete_twice(qp_pair):
    def chaos(t, h, port, f):
        return [(DELAY, f), (DELAY * 2.5, f)]  # everything twice, ACKs and NAKs included

    w = qp_pair("rocev2", chaos)
    _, mr = w.region(3000)
    data = payload(3000, 2)
    w.qa.post_write(1, data, mr.base_va, mr.rkey, imm=5)
    w.qa.post_write(2, data[:100], mr.base_va, mr.rkey, imm=6)
    w.run(1.0)
    assert [e.wr_id for e in w.of(0, WriteCompleted)] == [1, 2]
    assert [e.imm for e in w.of(1, ImmReceived)] == [5, 6]
    assert w.qb.get_stats().rx_duplicates > 0 and w.qa.get_stats().rx_stale > 0
    assert bytes(mr.buffer)[:100] == data[:100] and bytes(mr.buffer)[100:] == data[100:]


def test_a_lost_nak_is_repaired_by_the_local_ack_timeout(qp_pair):
    drops = {"data": 0, "nak": 0}

    def chaos(t, h, port, f):
        if h == 0 and is_data(f) and not drops["data"] and psn(f) == (w.qa.start_psn + 2) & MASK:
            drops["data"] += 1
            return []
        if h == 1 and op(f) == 0x11 and syndrome(f) == SYN_NAK_PSN_SEQ and not drops["nak"]:
            drops["nak"] += 1
            return []
        return [(DELAY, f)]

    w = qp_pair("rocev2", chaos)
    _, mr = w.region(256 * 10)
    data = payload(256 * 10, 3)
    w.qa.post_write(1, data, mr.base_va, mr.rkey)
    w.run(1.0)
    assert bytes(mr.buffer) == data and len(w.of(0, WriteCompleted)) == 1
    sa, sb = w.qa.get_stats(), w.qb.get_stats()
    assert sa.timeouts == 1 and sa.gbn_rewinds == 0 and sb.tx_nacks == 1  # one NAK per gap
    assert w.of(0, WriteCompleted)[0].time_s >= BASE.ack_timeout_s


def test_lost_acks_are_covered_by_later_cumulative_acks(qp_pair):
    w = qp_pair("rocev2", drop_first(lambda h, f: h == 1 and op(f) == 0x11, count=2))
    _, mr = w.region(256 * 20)
    w.qa.post_write(1, payload(256 * 20), mr.base_va, mr.rkey)
    w.run(1.0)
    assert len(w.of(0, WriteCompleted)) == 1 and w.qa.get_stats().retransmissions == 0


def test_psn_wraps_around(qp_pair):
    w = qp_pair("rocev2", cfg_a=replace(BASE, start_psn=MASK - 5))
    _, mr = w.region(256 * 20)
    data = payload(256 * 20, 4)
    w.qa.post_write(1, data, mr.base_va, mr.rkey, imm=1)
    w.run(1.0)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    assert bytes(mr.buffer) == data and w.qa.snd_una == (MASK - 5 + 20) & MASK


def test_the_window_limits_outstanding_psns(qp_pair):
    w = qp_pair("rocev2", cfg_a=replace(BASE, max_outstanding_psns=5))
    _, mr = w.region(256 * 40)
    w.qa.post_write(1, payload(256 * 40), mr.base_va, mr.rkey)
    w.qa.frames_to_send(0.0)
    out = (w.qa.snd_nxt - w.qa.snd_una) & MASK
    assert out <= 5 and w.qa.window_psns == 5
    w.run(1.0)
    assert len(w.of(0, WriteCompleted)) == 1


def test_no_window_but_the_psn_space_unless_the_old_bdp_cap_is_asked_for():
    # a NIC keeps no window on RDMA writes: unacknowledged PSNs grow as pacing lets them
    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)

    def outstanding(cfg: RoceConfig) -> int:
        a = RoceQueuePair(0x51, host_net(shape, 0), MemoryTable(1), RATE, cfg)
        b = RoceQueuePair(0x52, host_net(shape, 1), MemoryTable(2), RATE, cfg)
        a.connect(b.local_attributes())
        mr = b.memory.register(bytearray(256 * 100))
        a.post_write(1, payload(256 * 100), mr.base_va, mr.rkey)
        for k in range(200):  # 20 ms, no ACK ever: only the window stops it
            a.frames_to_send(k * 1e-4)
        return (a.snd_nxt - a.snd_una) & MASK

    assert outstanding(BASE) == 100
    old = replace(BASE, bdp_window=True)  # 2 x 10 packets of BDP + ack_every 4
    assert outstanding(old) == 24


def _nak_storm(qp_pair, cfg: RoceConfig, drop_acks: bool):
    """Every 7th PSN is lost on its first transmission, so each go-back-N round meets a new
    gap: one NAK each.  With ``drop_acks`` no positive ACK ever reaches the requester."""
    first_sent: set[int] = set()

    def chaos(t, h, port, f):
        if h == 0 and is_data(f):
            k = (psn(f) - w.qa.start_psn) & MASK
            if k % 7 == 3 and k not in first_sent:
                first_sent.add(k)
                return []
        if drop_acks and h == 1 and op(f) == 0x11 and syndrome(f) == 0:
            return []
        return [(DELAY, f)]

    w = qp_pair("rocev2", chaos, cfg_a=cfg)
    _, mr = w.region(256 * 100)
    w.qa.post_write(1, payload(256 * 100, 8), mr.base_va, mr.rkey)
    w.run(10.0)
    return w


def test_naks_use_up_the_retry_count_that_only_a_positive_ack_restores(qp_pair):
    w = _nak_storm(qp_pair, BASE, drop_acks=True)
    errs = w.of(0, QpErrorEvent)
    assert [e.status for e in errs] == [WcStatus.RETRY_EXCEEDED] and "NAKed" in errs[0].reason
    sa = w.qa.get_stats()
    assert sa.timeouts == 0 and sa.nak_retries == 7 and sa.gbn_rewinds == 7
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.RETRY_EXCEEDED]
    # with the ACKs through, each one restores the count: more NAKs than retry_cnt, no error
    ok = _nak_storm(qp_pair, BASE, drop_acks=False)
    assert [e.status for e in ok.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    assert ok.qa.get_stats().nak_retries > 7 and not ok.of(0, QpErrorEvent)


def test_nak_retries_off_is_the_old_behaviour(qp_pair):
    w = _nak_storm(qp_pair, replace(BASE, nak_retries=False), drop_acks=True)
    errs = w.of(0, QpErrorEvent)  # every NAK rewound for free; the silent tail timed out
    assert [e.status for e in errs] == [WcStatus.RETRY_EXCEEDED] and "NAKed" not in errs[0].reason
    sa = w.qa.get_stats()
    assert sa.nak_retries == 0 and sa.gbn_rewinds > 7 and sa.timeouts == 7


# -- timeouts and errors ------------------------------------------------------------------------


def test_retry_exhaustion_ends_in_a_qp_error_with_backoff(qp_pair):
    def chaos(t, h, port, f):
        return [] if h == 0 and t > 0.001 else [(DELAY, f)]  # the path dies at 1 ms

    # a window short enough that each retry round is paced out before the next timeout
    w = qp_pair("rocev2", chaos, cfg_a=replace(BASE, max_outstanding_psns=16))
    _, mr = w.region(256 * 200)
    w.qa.post_write(1, payload(256 * 100), mr.base_va, mr.rkey)
    w.qa.post_write(2, payload(256 * 100), mr.base_va + 256 * 100, mr.rkey)
    w.qa.post_write(3, b"x", mr.base_va, mr.rkey)
    w.run(10.0)
    errs = w.of(0, QpErrorEvent)
    assert len(errs) == 1 and errs[0].status is WcStatus.RETRY_EXCEEDED
    assert w.qa.state is QpState.ERROR and "retry_cnt 7" in errs[0].reason
    assert w.qa.get_stats().timeouts == 7
    done = w.of(0, WriteCompleted)
    assert [(e.wr_id, e.status) for e in done] == [
        (1, WcStatus.RETRY_EXCEEDED),
        (2, WcStatus.FLUSHED),
        (3, WcStatus.FLUSHED),
    ]
    # each timeout retransmits from snd_una; the gaps between rounds double
    una = w.qa.snd_una
    rounds = [t for t, _, f in w.sent[0] if is_data(f) and psn(f) == una]
    gaps = [b - a for a, b in zip(rounds, rounds[1:], strict=False)]
    assert len(rounds) == 8
    assert all(
        g2 == pytest.approx(2 * g1, rel=0.05) for g1, g2 in zip(gaps, gaps[1:], strict=False)
    )
    assert w.qa.get_timer() is None and w.qa.frames_to_send(20.0) == []
    with pytest.raises(QpStateError):
        w.qa.post_write(9, b"y", mr.base_va, mr.rkey)


def test_port_down_no_failover_until_retries_run_out(qp_pair):
    def chaos(t, h, port, f):
        return [] if h == 0 and down[0] else [(DELAY, f)]

    down = [False]
    w = qp_pair("rocev2", chaos, planes=4)
    _, mr = w.region(256 * 400)  # about 9 ms at 100 Mb/s
    w.qa.post_write(1, payload(256 * 400), mr.base_va, mr.rkey)
    w.run(0.002)
    assert not w.of(0, WriteCompleted)
    down[0] = True
    w.qa.port_status(w.qa.plane, False, w.now)
    w.run(10.0)
    assert {p for _, p, _ in w.sent[0]} == {w.qa.plane}  # never another port
    assert [e.status for e in w.of(0, QpErrorEvent)] == [WcStatus.RETRY_EXCEEDED]
    assert w.qa.get_stats().tx_on_down_port > 0


def test_a_short_outage_is_survived_by_retrying(qp_pair):
    def chaos(t, h, port, f):
        return [] if h == 0 and 0.002 < t < 0.010 else [(DELAY, f)]

    w = qp_pair("rocev2", chaos)
    _, mr = w.region(256 * 100)
    data = payload(256 * 100, 5)
    w.qa.post_write(1, data, mr.base_va, mr.rkey)
    w.run(10.0)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.SUCCESS]
    assert bytes(mr.buffer) == data and 1 <= w.qa.get_stats().timeouts <= 3


def test_wrong_rkey_fails_at_the_requester_and_leaves_the_target_untouched(qp_pair):
    w = qp_pair("rocev2")
    outer, mr = w.region(4096)
    good = payload(600, 6)
    w.qa.post_write(1, good, mr.base_va, mr.rkey)
    w.qa.post_write(2, payload(1000, 7), mr.base_va + 1000, mr.rkey ^ 0x5A5A)
    w.qa.post_write(3, payload(10, 8), mr.base_va + 3000, mr.rkey)
    w.run(1.0)
    assert [(e.wr_id, e.status) for e in w.of(0, WriteCompleted)] == [
        (1, WcStatus.SUCCESS),
        (2, WcStatus.REMOTE_ACCESS_ERROR),
        (3, WcStatus.FLUSHED),
    ]
    assert outer[32 : 32 + 600] == good
    assert outer[32 + 600 :] == b"\xa5" * (len(outer) - 632)  # nothing else written
    errs = w.of(0, QpErrorEvent)
    assert len(errs) == 1 and errs[0].status is WcStatus.REMOTE_ACCESS_ERROR
    assert "R_Key" in errs[0].reason
    naks = [f for _, _, f in w.sent[1] if op(f) == 0x11 and syndrome(f) == SYN_NAK_REMOTE_ACCESS]
    assert len(naks) == 1
    assert [e.status for e in w.of(1, QpErrorEvent)] == [WcStatus.REMOTE_ACCESS_ERROR]


@pytest.mark.parametrize("where", ["out_of_bounds", "deregistered_midway"])
def test_bounds_and_deregistration_are_refused(qp_pair, where):
    w = qp_pair("rocev2")
    outer, mr = w.region(1024)
    if where == "out_of_bounds":
        w.qa.post_write(1, payload(2000), mr.base_va, mr.rkey)
        w.run(1.0)
        assert outer[32:-32] == b"\xa5" * 1024
    else:
        # deregister once the first packet has been placed
        w.qa.post_write(1, payload(1024), mr.base_va, mr.rkey)
        w.run(1.0, stop=lambda: w.qb.get_stats().rx_placed_bytes > 0)
        w.mem[1].deregister(mr)
        w.run(1.0)
    assert [e.status for e in w.of(0, WriteCompleted)] == [WcStatus.REMOTE_ACCESS_ERROR]


# -- write-with-immediate ---------------------------------------------------------------------


def test_immediates_complete_in_order_under_loss(qp_pair):
    w = qp_pair("rocev2", loss=0.1, seed=9)
    _, mr = w.region(256 * 60)
    sizes = [256 * 3, 10, 0, 256 * 5 + 7, 300]
    off = 0
    for k, n in enumerate(sizes):
        w.qa.post_write(k, payload(n, k), mr.base_va + off, mr.rkey, imm=100 + k)
        off += n
    w.run(10.0)
    assert [e.wr_id for e in w.of(0, WriteCompleted)] == list(range(len(sizes)))
    imms = w.of(1, ImmReceived)
    assert [(e.imm, e.byte_len, e.rqmsn) for e in imms] == [
        (100 + k, n, k) for k, n in enumerate(sizes)
    ]


# -- DCQCN -------------------------------------------------------------------------------------


def test_ce_marks_bring_cnps_a_rate_cut_and_then_recovery(qp_pair):
    marking = [True]

    def chaos(t, h, port, f):
        if h == 0 and is_data(f) and marking[0]:
            b = bytearray(f)
            b[15] |= 0x30  # CE
            f = bytes(b)
        return [(DELAY, f)]

    cfg = replace(BASE, lab_scale=10.0)  # DCQCN times 10x hardware: CNP interval 0.5 ms
    w = qp_pair("rocev2", chaos, cfg_a=cfg)
    _, mr = w.region(256 * 4000)
    w.qa.post_write(1, payload(256 * 4000), mr.base_va, mr.rkey)
    w.run(0.01)  # 10 ms of marks
    sa, sb = w.qa.get_stats(), w.qb.get_stats()
    cnps = [t for t, _, f in w.sent[1] if op(f) == OP_CNP]
    assert len(cnps) >= 2 and sb.tx_cnps == len(cnps) and sb.cnps_suppressed > 0
    assert all(b - a >= w.qb.cnp_interval_s - 1e-12 for a, b in zip(cnps, cnps[1:], strict=False))
    assert sa.rx_cnps == len(cnps) and sa.rate_cuts >= 1
    assert sa.rate_bps < 0.5 * RATE
    low = sa.rate_bps
    marking[0] = False  # the congestion is over: the rate climbs back
    w.run(w.now + 0.05)
    assert w.qa.get_stats().rate_bps > low
    assert w.qb.get_stats().tx_cnps == len(cnps)  # no CE, no CNP
    w.qa.dcqcn.advance(w.now + 10.0)  # long enough for every increase stage
    sa = w.qa.get_stats()
    assert sa.rate_bps == RATE and not w.qa.dcqcn.active
    assert sa.min_rate_bps < 0.5 * RATE


def test_pacing_follows_the_dcqcn_rate(qp_pair):
    # the paper's constants: its 10 MB byte counter leaves the rate alone during the run
    w = qp_pair("rocev2", cfg_a=replace(BASE, dcqcn_profile="paper"))
    _, mr = w.region(256 * 400)
    w.qa.post_write(1, payload(256 * 400), mr.base_va, mr.rkey)
    for _ in range(3):
        w.qa.dcqcn.on_cnp(w.now)
        w.qa.dcqcn._last_cut_s = float("-inf")  # let the next one cut too
    rate = w.qa.dcqcn.rate_bps
    w.run(0.05)
    data = [(t, len(f)) for t, _, f in w.sent[0] if is_data(f)]
    span = data[-1][0] - data[0][0]
    sent_bits = sum(n for _, n in data[:-1]) * 8
    assert sent_bits / span == pytest.approx(rate, rel=0.1)


def test_no_dcqcn_means_no_cnps(qp_pair):
    def chaos(t, h, port, f):
        if h == 0 and is_data(f):
            b = bytearray(f)
            b[15] |= 0x30
            f = bytes(b)
        return [(DELAY, f)]

    cfg = replace(BASE, dcqcn=False)
    w = qp_pair("rocev2", chaos, cfg_a=cfg, cfg_b=replace(cfg, seed=2))
    _, mr = w.region(256 * 30)
    w.qa.post_write(1, payload(256 * 30), mr.base_va, mr.rkey)
    w.run(1.0)
    assert w.qb.get_stats().tx_cnps == 0 and w.qb.get_stats().rx_ecn_marked > 0


# -- the QueuePair interface -----------------------------------------------------------------


def test_the_queue_pair_surface():
    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    q = RoceQueuePair(0x33, host_net(shape, 0), MemoryTable(1), RATE, QpConfig(mtu_bytes=512))
    assert q.mtu == 512 and q.dcqcn is not None and q.config.retry_cnt == 7
    attrs = q.local_attributes()
    assert QpAttributes.from_json(attrs.to_json()) == attrs
    assert set(q.ev_states()) == {s.name for s in EvState}
    with pytest.raises(QpStateError):
        q.post_write(1, b"x", 0, 1)
    with pytest.raises(RoceUnsupportedError, match="MRC-only"):
        q.deny_ev(1, 0.0)
    with pytest.raises(RoceUnsupportedError, match="MRC-only"):
        q.allow_ev(1, 0.0)
    off = RoceQueuePair(0x34, host_net(shape, 0), MemoryTable(1), RATE, QpConfig(cc="fixed"))
    assert off.dcqcn is None
    opts = QpConfig(cc_options=(("port", 1), ("retry_cnt", 3)))
    q2 = RoceQueuePair(0x35, host_net(shape, 0), MemoryTable(1), RATE, opts)
    assert q2.plane == 1 and q2.config.retry_cnt == 3
    with pytest.raises(ValueError, match="unknown RoCEv2 option"):
        RoceQueuePair(
            0x36, host_net(shape, 0), MemoryTable(1), RATE, QpConfig(cc_options=(("x", 1),))
        )
    for bad in (
        replace(BASE, retry_cnt=8),
        replace(BASE, port=5),
        replace(BASE, local_ack_timeout=0),
    ):
        with pytest.raises(ValueError):
            RoceQueuePair(0x37, host_net(shape, 0), MemoryTable(1), RATE, bad)
    peer = RoceQueuePair(0x38, host_net(shape, 1), MemoryTable(2), RATE, QpConfig(mtu_bytes=512))
    q.connect(peer.local_attributes())
    with pytest.raises(QpStateError):
        q.connect(peer.local_attributes())
    same = RoceQueuePair(0x39, host_net(shape, 0), MemoryTable(1), RATE)
    with pytest.raises(ValueError, match="loopback"):
        same.connect(q.local_attributes())


def test_hardware_timeout_encoding_scaled_to_the_lab():
    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    q = RoceQueuePair(0x40, host_net(shape, 0), MemoryTable(1), RATE, RoceConfig(base_rtt_s=1e-4))
    assert q.lab_scale == pytest.approx(1000.0)  # a 100 Mb/s port stands for 100 Gb/s
    assert q.ack_timeout_s == pytest.approx(4.096e-6 * 2 * 1000)
    q14 = RoceQueuePair(
        0x41, host_net(shape, 0), MemoryTable(1), RATE, RoceConfig(local_ack_timeout=14)
    )
    assert q14.ack_timeout_s == pytest.approx(4.096e-6 * 2**14 * 1000)
    assert q.cnp_interval_s == pytest.approx(0.004)  # ConnectX's 4 us, x 1000
    paper = RoceQueuePair(
        0x42, host_net(shape, 0), MemoryTable(1), RATE, RoceConfig(dcqcn_profile="paper")
    )
    assert paper.cnp_interval_s == pytest.approx(0.05)  # the paper's 50 us


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=200), st.integers(0, 199), st.integers(0, 255))
def test_malformed_frames_never_raise(qp_pair, junk, pos, byte):
    w = qp_pair("rocev2")
    _, mr = w.region(600)
    w.qa.post_write(1, payload(600), mr.base_va, mr.rkey)
    frames = [f for _, f in w.qa.frames_to_send(0.0)]
    for f in [junk, *frames]:
        b = bytearray(f)
        if b:
            b[pos % len(b)] = byte
        w.qb.receive_frame(bytes(b), 0.001)
        w.qa.receive_frame(bytes(b[: pos % (len(b) + 1)]), 0.001)
    assert w.qb.state in (QpState.READY, QpState.ERROR)


# -- properties -------------------------------------------------------------------------------


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.floats(0.0, 0.08),
    dup=st.floats(0.0, 0.1),
    reorder=st.floats(0.0, 0.2),
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=5),
)
def test_any_schedule_delivers_every_byte_once_in_order(qp_pair, seed, loss, dup, reorder, sizes):
    w = qp_pair("rocev2", loss=loss, reorder=reorder, dup=dup, seed=seed)
    total = sum(sizes)
    _, mr = w.region(max(total, 1))
    data = payload(total, seed)
    off = 0
    for k, n in enumerate(sizes):
        w.qa.post_write(k, data[off : off + n], mr.base_va + off, mr.rkey, imm=k)
        off += n
    w.run(60.0, stop=lambda: len(w.of(0, WriteCompleted)) == len(sizes))
    assert [(e.wr_id, e.status) for e in w.of(0, WriteCompleted)] == [
        (k, WcStatus.SUCCESS) for k in range(len(sizes))
    ]
    w.run(w.now + 0.05)  # let the last immediates land
    assert bytes(mr.buffer)[:total] == data
    assert [e.imm for e in w.of(1, ImmReceived)] == list(range(len(sizes)))
    assert not w.of(0, QpErrorEvent) and not w.of(1, QpErrorEvent)


def test_hosted_by_a_verbs_device():
    import inspect

    from mrcnic.verbs import Device, RemoteBuffer, SimNetwork

    if "transport" not in inspect.signature(Device.create_qp).parameters:
        pytest.skip("verbs.Device.create_qp has no transport parameter in this tree yet")
    net = SimNetwork(seed=3)
    client, server = net.devices
    target = bytearray(100_000)
    mr = server.register(target)
    cq, sq = client.create_qp(transport="rocev2"), server.create_qp(transport="rocev2")
    assert isinstance(cq.core, RoceQueuePair)
    cq.connect(sq.export())
    sq.connect(cq.export())
    data = payload(100_000, 11)
    cq.post_write(1, data, RemoteBuffer.of(mr), imm=77)
    done: list = []
    net.run_until(lambda: (done.extend(cq.poll_cq()), bool(done))[1])
    assert [(wc.wr_id, wc.status) for wc in done] == [(1, WcStatus.SUCCESS)]
    assert bytes(target) == data and [e.imm for e in sq.poll_recv()] == [77]
