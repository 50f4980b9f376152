"""Responder window + SACK coalescing rule, and the requester scoreboard."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.sack import MARK_DUP, MARK_NEW, MARK_OOR, ResponderWindow, Scoreboard, TxRecord

MASK = 0xFFFFFF


def test_brief_worked_example():
    w = ResponderWindow(size=1024, start_psn=0, ack_every=100)
    for psn in range(12):
        if psn not in (5, 8):
            assert w.receive(psn) == MARK_NEW
    f = w.sack_fields(trigger_psn=11)
    assert f.cack_psn == 4 and f.sack_offset == 0
    assert [(f.bitmap >> i) & 1 for i in range(7)] == [0, 1, 1, 0, 1, 1, 1]
    assert f.ooo_count == 5
    sb = Scoreboard(0)
    for psn in range(12):
        sb.add(TxRecord(psn, None, 0, 100, 0xCA))
    acked = sb.on_sack(f.cack_psn, f.sack_offset, f.bitmap)
    assert sorted(r.psn for r in acked) == [0, 1, 2, 3, 4, 6, 7, 9, 10, 11]
    assert sorted(sb.records) == [5, 8] and sb.snd_una == 5 and sb.inflight_bytes == 200


def test_coalescing_rule():
    w = ResponderWindow(size=1024, start_psn=10, ack_every=4)
    assert w.receive(10) == MARK_NEW
    assert not w.wants_ack(MARK_NEW, ce=False, ack_req=False, rtx=False)
    assert w.wants_ack(MARK_NEW, ce=True, ack_req=False, rtx=False)  # rule 1
    assert w.wants_ack(MARK_DUP, ce=False, ack_req=False, rtx=False)  # rule 2
    assert w.wants_ack(MARK_NEW, ce=False, ack_req=False, rtx=True)  # rule 2
    assert w.wants_ack(MARK_NEW, ce=False, ack_req=True, rtx=False)  # rule 3
    for psn in (11, 12, 13):
        w.receive(psn)
    assert w.wants_ack(MARK_NEW, ce=False, ack_req=False, rtx=False)  # rule 4
    w.sack_fields(13)
    assert w.pending == 0


def test_duplicates_and_out_of_window():
    w = ResponderWindow(size=64, start_psn=MASK - 2)  # wraps
    assert w.receive(MASK - 2) == MARK_NEW
    assert w.receive(MASK - 2) == MARK_DUP
    assert w.receive(3) == MARK_NEW  # across the wrap
    assert w.receive((MASK - 1 + 64) & MASK) == MARK_OOR


def test_bitmap_window_covers_the_trigger_and_ends_at_the_highest():
    w = ResponderWindow(size=4096, start_psn=0)
    for psn in range(1, 200):
        w.receive(psn)
        if psn % 4 == 0:
            w.sack_fields(psn)
    f = w.sack_fields(199)
    assert f.cack_psn == MASK and f.sack_offset == 199 - 63  # ends at the highest
    assert f.bitmap == (1 << 64) - 1
    f = w.sack_fields(3)  # an old hole filled late: the bitmap must include it
    assert f.sack_offset == 3 - 0 and f.bitmap & 1


def test_bitmap_covers_the_packets_coalesced_into_the_sack():
    """A slow path delivers PSN 20 late, without a SACK of its own (coalesced); the next
    SACK, triggered by PSN 300, must still report it: behind the hole at 0 and far below the
    newest 64, no later SACK would."""
    w = ResponderWindow(size=4096, start_psn=0, ack_every=4)
    for psn in range(1, 300):
        if psn != 20:
            w.receive(psn)
            w.sack_fields(psn)
    w.receive(20)
    assert not w.wants_ack(MARK_NEW, ce=False, ack_req=False, rtx=False)
    w.receive(300)
    f = w.sack_fields(300)
    assert f.sack_offset <= 20 < f.sack_offset + 64  # bit i: PSN cack + 1 + offset + i
    assert f.bitmap >> (20 - f.sack_offset) & 1
    sb = Scoreboard(0)
    for psn in range(301):
        sb.add(TxRecord(psn, None, 0, 10, 0xCA))
    assert 20 in {r.psn for r in sb.on_sack(f.cack_psn, f.sack_offset, f.bitmap)}


def test_penalty_rises_as_the_window_fills():
    w = ResponderWindow(size=128, start_psn=0)
    assert w.penalty() == 0
    w.receive(127)
    assert 0 < w.penalty() <= 127


@settings(max_examples=100, deadline=None)
@given(
    start=st.one_of(st.integers(MASK - 80, MASK), st.integers(0, MASK)),  # often across 2^24
    order=st.permutations(list(range(80))),
    lost=st.sets(st.integers(0, 79), max_size=20),
    every=st.integers(1, 8),
)
def test_scoreboard_agrees_with_the_window(start, order, lost, every):
    """Whatever the arrival order and losses, SACKs built by the rule ack exactly what
    arrived, each record once, and snd_una is the oldest missing PSN."""
    w = ResponderWindow(size=1024, start_psn=start, ack_every=every)
    sb = Scoreboard(start)
    for i in range(80):
        sb.add(TxRecord((start + i) & MASK, None, 0, 10, 0xCA))
    acked: list[int] = []
    for n, i in enumerate(order):
        if i in lost:
            continue
        psn = (start + i) & MASK
        w.receive(psn)
        if n % every == 0:
            f = w.sack_fields(psn)
            acked += [r.psn for r in sb.on_sack(f.cack_psn, f.sack_offset, f.bitmap)]
    f = w.sack_fields(w.win.highest_psn)
    acked += [r.psn for r in sb.on_sack(f.cack_psn, f.sack_offset, f.bitmap)]
    assert len(acked) == len(set(acked))
    arrived = {(start + i) & MASK for i in range(80) if i not in lost}
    assert set(acked) <= arrived
    if not lost:
        assert set(acked) == arrived and sb.snd_una == sb.snd_nxt
    else:
        assert sb.snd_una == (start + min(lost)) & MASK
    assert sb.inflight_bytes == 10 * len(sb.records)


def test_timers_are_lazy_and_lost_records_leave_inflight():
    sb = Scoreboard(5)
    r1, r2 = TxRecord(5, None, 0, 100, 0xCA), TxRecord(6, None, 0, 100, 0xCA)
    sb.add(r1)
    sb.add(r2)
    sb.arm(r1, 1.0)
    sb.arm(r2, 2.0)
    sb.arm(r1, 3.0)  # re-armed: the 1.0 entry is stale
    assert sb.next_deadline() == 2.0
    assert sb.expired(2.5) == [r2]
    sb.mark_lost(r2)
    assert sb.inflight_bytes == 100
    sb.resent(r2)
    assert sb.inflight_bytes == 200
    assert sb.on_sack(5, 0, 0) == [r1] and sb.snd_una == 6
    assert sb.on_sack(4, 0, 0) == []  # stale cumulative ack
