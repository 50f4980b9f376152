"""Responder window + SACK coalescing rule, and the requester scoreboard."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.transport.sack import (
    MARK_DUP,
    MARK_NEW,
    MARK_OOR,
    ResponderWindow,
    Scoreboard,
    TxRecord,
)

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


@settings(max_examples=100, deadline=None)
@given(
    start=st.one_of(st.integers(MASK - 100, MASK), st.integers(0, MASK)),
    psns=st.lists(st.integers(-20, 140), max_size=120),
    trigger=st.integers(-20, 140),
)
def test_mirrors_and_sack_values_agree_with_the_window(start, psns, trigger):
    """expected/highest (plain ints kept by receive) equal the C window's, and sack_values is
    sack_fields plus penalty, whatever arrives (duplicates, old PSNs, beyond the window)."""
    w = ResponderWindow(size=128, start_psn=start, ack_every=4)
    for p in psns:
        w.receive((start + p) & MASK)
        assert w.expected == w.win.expected_psn and w.highest == w.win.highest_psn
    twin = ResponderWindow(size=128, start_psn=start, ack_every=4)
    for p in psns:
        twin.receive((start + p) & MASK)
    pen = twin.penalty()
    f = twin.sack_fields((start + trigger) & MASK)
    vals = w.sack_values((start + trigger) & MASK)
    assert vals == (f.cack_psn, f.sack_offset, f.bitmap, f.ooo_count, f.received_bytes, pen)
    assert w.pending == 0 and w.pending_lo == -1 and not w.ece_pending


class _HeapTimers:
    """The reference: one heap of (deadline, seq, psn) with lazy deletion."""

    def __init__(self, sb: Scoreboard) -> None:
        self.sb, self.heap = sb, []

    def arm(self, rec: TxRecord, deadline: float) -> None:
        import heapq

        heapq.heappush(self.heap, (deadline, rec.timer_seq, rec.psn))

    def live(self, seq: int, psn: int) -> bool:
        rec = self.sb.records.get(psn)
        return rec is not None and rec.timer_seq == seq and not rec.lost

    def next_deadline(self) -> float | None:
        import heapq

        while self.heap and not self.live(*self.heap[0][1:]):
            heapq.heappop(self.heap)
        return self.heap[0][0] if self.heap else None

    def expired(self, now: float) -> list[int]:
        import heapq

        out = []
        while self.heap and self.heap[0][0] <= now:
            _, seq, psn = heapq.heappop(self.heap)
            if self.live(seq, psn):
                out.append(psn)
        return out


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["send", "rearm", "ack", "lose", "expire", "peek"]),
            st.integers(0, 30),
            st.floats(0, 10),
        ),  # fmt: skip
        max_size=80,
    )
)
def test_timer_fifo_and_heap_fire_in_one_heaps_order(ops):
    """The deque + heap pair fires exactly the records one heap would, in the same order,
    and names the same next deadline, whatever the mix of in-order and earlier deadlines."""
    sb = Scoreboard(0)
    ref = _HeapTimers(sb)
    now = 0.0
    for op, k, x in ops:
        if op == "send":
            rec = TxRecord(sb.snd_nxt, None, 0, 10, 0xCA)
            sb.add(rec)
            sb.arm(rec, now + x)
            ref.arm(rec, now + x)
        elif sb.records:
            rec = sorted(sb.records.values(), key=lambda r: r.psn)[k % len(sb.records)]
            if op == "rearm":
                sb.resent(rec)
                sb.arm(rec, now + x)
                ref.arm(rec, now + x)
            elif op == "ack":
                if rec.psn == sb.snd_una:
                    sb.on_sack(rec.psn, 0, 0)  # cumulative
                else:  # selective: bit 0 of a bitmap placed at this PSN
                    sb.on_sack((sb.snd_una - 1) & MASK, (rec.psn - sb.snd_una) & MASK, 1)
            elif op == "lose":
                sb.mark_lost(rec)
        if op == "expire":
            now += x / 4
            assert [r.psn for r in sb.expired(now)] == ref.expired(now)
        elif op == "peek":
            assert sb.next_deadline() == ref.next_deadline()
    assert sb.next_deadline() == ref.next_deadline()
    assert [r.psn for r in sb.expired(1e9)] == ref.expired(1e9)


def test_cumulative_ack_across_the_psn_wrap():
    start = MASK - 3
    sb = Scoreboard(start)
    for i in range(10):
        sb.add(TxRecord((start + i) & MASK, None, 0, 10, 0xCA))
    acked = sb.on_sack((start + 6) & MASK, 1, 0b1)  # una..start+6, and start+8 by the bitmap
    assert [r.psn for r in acked] == [(start + i) & MASK for i in (0, 1, 2, 3, 4, 5, 6, 8)]
    assert sb.snd_una == (start + 7) & MASK and sorted(sb.records) == [3, 5]
    assert sb.inflight_bytes == 20
    assert sb.on_sack((start - 5) & MASK, 0, 0) == []  # stale: behind snd_una


def test_last_hop_trims_raise_the_receiver_penalty():
    """rcv_cwnd_pen is not only the window filling up (which never happens at the default
    window): the receiver's own port trimming headers (incast) asks senders to shrink."""
    w = ResponderWindow(size=65536, start_psn=0)
    for psn in range(8):
        w.receive(psn)
    assert w.sack_values(7)[5] == 0  # nothing trimmed: no penalty
    pens = []
    for k in range(8):  # a quarter of the arrivals trimmed at the last hop, SACK after SACK
        for psn in range(8 + 6 * k, 14 + 6 * k):
            w.receive(psn)
        w.lasthop_trims += 2
        pens.append(w.sack_values(13 + 6 * k)[5])
    assert pens == sorted(pens) and pens[-1] > 64  # rises towards 127 as it persists
    for k in range(40):  # trims stop: the penalty decays to 0
        w.receive(100 + k)
        last = w.sack_values(100 + k)[5]
    assert last == 0
