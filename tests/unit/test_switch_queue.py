"""mrcswitch.queue: pacing, priority, ECN marking, trimming (fake clock: now_ns arguments)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.wire import BTH, METH, RETH, Dscp, Ecn, ImmDt, MrcPacket, Opcode, TimestampExt, usid
from mrcnic.wire.trim import trim
from mrcswitch.config import config_from_dict
from mrcswitch.queue import EgressQueue, Verdict, dscp_ecn

SRC = bytes.fromhex("fcbbbb00100130000000000000000001")
MAC = bytes(6)


def port_cfg(**kw):
    p = {"name": "p", "interface": "v0", "peer_mac": "02:00:00:00:00:01", "rate_mbit": 8,
         "buffer_bytes": 20000, "high_buffer_bytes": 12000, "burst_bytes": 10000,
         "max": None}  # fmt: skip
    p.pop("max")
    p.update(kw)
    return config_from_dict({"name": "t", "ports": [p], "max_frame_bytes": 9216 if False else 4096,
                             "own_usids": ["1"]}).ports[0]  # fmt: skip


def mrc_frame(
    *,
    usids=(0x2001, 0x1002, 0x3000),
    dscp=Dscp.TRIMMABLE,
    ecn=Ecn.ECT0,
    payload=b"p" * 1000,
    op=Opcode.WRITE_MIDDLE,
    ts=True,
) -> bytearray:
    dst = usid.encode(list(usids))
    pkt = MrcPacket(
        bth=BTH(opcode=op, dest_qp=7, psn=42, ts_present=ts),
        meth=METH(msn=1, rqmsn=0),
        ts=TimestampExt(tx_ts_ns=123) if ts else None,
        reth=RETH(va=0x1000, rkey=5, length=len(payload)),
        imm=ImmDt(imm=0xABCD) if wire.has_imm(op) else None,
        payload=payload,
    )
    f = wire.build_frame(eth_src=MAC, eth_dst=MAC, ip_src=SRC, ip_dst=dst,
                         final_dst=usid.final_of(dst), ev=0x12345678, mrc=wire.encode_mrc(pkt),
                         dscp=dscp, ecn=ecn)  # fmt: skip
    return bytearray(f)


def plain_frame(n: int, dscp: int = 0, ecn: int = 0) -> bytearray:
    f = mrc_frame(dscp=dscp, ecn=ecn, payload=b"q" * max(0, n - 106))
    assert len(f) == max(n, 106)
    return f


def test_token_bucket_paces_at_link_rate():
    q = EgressQueue(port_cfg(buffer_bytes=200_000), now_ns=0)  # 8 Mbit/s = 1 byte per us
    for _ in range(100):
        assert q.enqueue(plain_frame(1000), 0) is Verdict.QUEUED
    sent = sum(map(len, q.dequeue(0, 1000)))
    assert sent <= 10_000  # the burst
    for t_us in range(100, 50_001, 100):
        sent += sum(map(len, q.dequeue(t_us * 1000, 1000)))
        assert sent <= 10_000 + t_us  # never above burst + rate * t
    assert sent >= 50_000 - 1000  # and keeps up with the rate
    assert q.next_send_ns(50_000_000) >= 50_000_000


def test_next_send_time_is_when_tokens_suffice():
    q = EgressQueue(port_cfg(burst_bytes=4096), now_ns=0)
    for _ in range(6):
        q.enqueue(plain_frame(1000), 0)
    assert len(q.dequeue(0, 100)) == 4
    t = q.next_send_ns(0)
    assert t is not None and 900_000 < t <= 1_000_001  # ~1000 bytes at 1 byte/us minus leftover
    assert q.dequeue(t - 2000, 10) == []
    assert len(q.dequeue(t, 10)) == 1


def test_high_priority_is_served_first():
    q = EgressQueue(port_cfg(), now_ns=0)
    q.enqueue(plain_frame(500, Dscp.TRIMMABLE), 0)
    q.enqueue(plain_frame(500, Dscp.CONTROL), 0)
    q.enqueue(plain_frame(500, Dscp.TRIMMED), 0)
    out = q.dequeue(0, 10)
    assert [dscp_ecn(f)[0] for f in out] == [Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMABLE]


@pytest.mark.parametrize(("ecn", "marked"), [(Ecn.ECT0, True), (Ecn.ECT1, True),
                                             (Ecn.NOT_ECT, False), (Ecn.CE, False)])  # fmt: skip
def test_ecn_marks_capable_data_above_threshold(ecn, marked):
    q = EgressQueue(port_cfg(ecn_threshold_bytes=3000), now_ns=0)
    for _ in range(3):
        assert q.enqueue(plain_frame(1000, Dscp.NO_TRIM, ecn), 0) is Verdict.QUEUED
    f = plain_frame(1000, Dscp.NO_TRIM, ecn)
    q.enqueue(f, 0)  # 3000 queued: not yet above the threshold
    assert dscp_ecn(f)[1] == ecn
    f = plain_frame(1000, Dscp.NO_TRIM, ecn)
    v = q.enqueue(f, 0)
    assert (v is Verdict.MARKED) == marked
    assert dscp_ecn(f)[1] == (Ecn.CE if marked else ecn)
    assert q.ecn_marks == int(marked)


def test_last_hop_port_does_not_mark_by_default():
    q = EgressQueue(port_cfg(ecn_threshold_bytes=0, last_hop=True), now_ns=0)
    for _ in range(5):
        assert q.enqueue(plain_frame(1000, ecn=Ecn.ECT0), 0) is Verdict.QUEUED
    assert q.ecn_marks == 0


def fill(q, n=20):
    while q.data_bytes + 1000 <= 20000:
        q.enqueue(plain_frame(1000, Dscp.NO_TRIM), 0)


@pytest.mark.parametrize("ts", [True, False])
@pytest.mark.parametrize("op", [Opcode.WRITE_MIDDLE, Opcode.WRITE_ONLY_IMM, Opcode.WRITE_LAST_IMM])
@pytest.mark.parametrize("last_hop", [False, True])
def test_overflow_trims_trimmable_to_headers(ts, op, last_hop):
    q = EgressQueue(port_cfg(last_hop=last_hop), now_ns=0)
    fill(q)
    f = mrc_frame(op=op, ts=ts, dscp=Dscp.TRIMMABLE_RETX)
    assert q.enqueue(f, 0) is Verdict.TRIMMED
    assert q.trims == 1 and len(q.high) == 1
    t = q.high[0]
    want = 62 + 12 + 4 + (8 if ts else 0) + 16 + (4 if wire.has_imm(op) else 0)
    assert len(t) == want
    assert t[:want] != f[:want]  # DSCP / lengths / checksum changed ...
    dscp, ecn = dscp_ecn(t)
    assert dscp == (Dscp.TRIMMED_LASTHOP if last_hop else Dscp.TRIMMED) and ecn == Ecn.ECT0
    fr = wire.parse_frame(bytes(t))  # DSCP says trimmed: parses headers only, no ICRC
    assert fr.ip6.payload_length == fr.udp.length == want - 54
    assert fr.mrc.bth.psn == 42 and fr.mrc.reth.va == 0x1000
    if wire.has_imm(op):
        assert fr.mrc.imm.imm == 0xABCD
    # checksum over the FINAL destination (shifted until end of carrier), not the current one
    final = usid.final_of(fr.ip6.dst)
    assert final != fr.ip6.dst
    assert wire.verify_udp_checksum(fr, final)


def test_trim_size_is_configurable():
    q = EgressQueue(port_cfg(trim_bytes=200), now_ns=0)
    fill(q)
    assert q.enqueue(mrc_frame(), 0) is Verdict.TRIMMED
    t = q.high[0]
    assert len(t) == 200 and (t[18] << 8 | t[19]) == 146


def test_non_trimmable_overflow_is_dropped():
    q = EgressQueue(port_cfg(), now_ns=0)
    fill(q)
    assert q.enqueue(mrc_frame(dscp=Dscp.NO_TRIM), 0) is Verdict.DROPPED
    sack_like = mrc_frame(op=Opcode.WRITE_ONLY)
    sack_like[62] = Opcode.SACK  # trimmable DSCP but not a data opcode
    assert q.enqueue(sack_like, 0) is Verdict.DROPPED
    q2 = EgressQueue(port_cfg(trimming=False), now_ns=0)
    fill(q2)
    assert q2.enqueue(mrc_frame(), 0) is Verdict.DROPPED
    assert q.trims == q2.trims == 0


def test_high_class_has_its_own_bound():
    q = EgressQueue(port_cfg(), now_ns=0)
    n = 0
    while q.enqueue(plain_frame(1000, Dscp.CONTROL), 0) is Verdict.HIGH:
        n += 1
    assert n == 12 and q.high_bytes <= 12000
    assert q.max_depth_bytes == q.depth_bytes == 12000


def test_flush_empties_everything():
    q = EgressQueue(port_cfg(), now_ns=0)
    fill(q)
    assert q.flush() == 20 and len(q) == 0 and q.depth_bytes == 0
    assert q.next_send_ns(0) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=54, max_size=300))
def test_trim_never_raises(data):
    f = bytearray(data)
    t = trim(f)
    assert t is None or len(t) <= len(f)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(list(Dscp)), st.integers(100, 3000),
                          st.integers(0, 2_000_000)), max_size=60))  # fmt: skip
def test_buffers_are_bounded_and_bytes_conserved(events):
    q = EgressQueue(port_cfg(), now_ns=0)
    now = 0
    admitted = sent = 0
    for dscp, size, dt in events:
        now += dt
        f = plain_frame(size, dscp, Ecn.ECT0)
        v = q.enqueue(f, now)
        if v in (Verdict.QUEUED, Verdict.MARKED, Verdict.HIGH):
            admitted += len(f)
        elif v is Verdict.TRIMMED:
            admitted += len(q.high[-1])
        assert q.data_bytes <= 20000 and q.high_bytes <= 12000
        sent += sum(map(len, q.dequeue(now, 5)))
    assert admitted == sent + q.depth_bytes


def test_fast_budget_is_the_tokens_of_an_empty_queue():
    q = EgressQueue(port_cfg(burst_bytes=4096), now_ns=0)  # 1 byte per us
    assert q.fast_budget(0) == 4096
    q.consume(3000)  # a frame of 3000 bytes left without queueing
    assert q.fast_budget(0) == 1096
    assert q.fast_budget(500_000) == 1596  # refilled at the link rate
    assert q.fast_budget(10**9) == 4096  # never above the burst
    q.enqueue(plain_frame(1000), 10**9)
    assert q.fast_budget(10**9) == -1  # something waits: newcomers queue behind it
    q.dequeue(10**9, 10)
    assert q.fast_budget(10**9) == 3096


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(list(Dscp)), st.sampled_from(list(Ecn)), st.integers(100, 3000),
       st.integers(0, 10**7))  # fmt: skip
def test_a_frame_within_the_fast_budget_has_the_fate_enqueue_dequeue_gives_it(dscp, ecn, n, t):
    """What lets the switch send straight from its receive buffer: for a frame that fits
    the fast budget, enqueue + dequeue at the same instant sends it, unmodified, and
    consumes the same tokens."""
    a = EgressQueue(port_cfg(ecn_threshold_bytes=0), now_ns=0)
    b = EgressQueue(port_cfg(ecn_threshold_bytes=0), now_ns=0)
    f = plain_frame(n, dscp, ecn)
    budget = a.fast_budget(t)
    if len(f) > budget:
        return
    a.consume(len(f))
    before = bytes(f)
    assert b.enqueue(f, t) in (Verdict.QUEUED, Verdict.HIGH)
    assert b.dequeue(t, 10) == [f] and bytes(f) == before
    assert a.fast_budget(t) == b.fast_budget(t)
    assert a.ecn_marks == b.ecn_marks == 0 and a.trims == b.trims == 0
