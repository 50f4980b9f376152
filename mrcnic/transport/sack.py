"""Reliability bookkeeping: the responder's PSN window and SACK coalescing, and the
requester's scoreboard of unacknowledged packets with their retransmission timers.

SACK coalescing rule (docs/design/transport.md): the responder answers a data packet at once when

1. it carried CE (the SACK then has mark SKIP_ONCE and that packet's EV, so the requester
   pins the congestion on the right path),
2. it is a duplicate or a retransmission (the requester is repairing: tell it at once),
3. it asks for one (BTH AckReq, set by the requester on the last packet of each message), or
4. ``ack_every`` new packets have arrived since the last SACK;

otherwise it waits at most ``ack_delay_s`` (a timer).  Each SACK's 64-bit bitmap is placed
so that it starts no later than the lowest PSN received since the previous SACK (the trigger
and the packets coalesced into it) and, when possible, ends at the highest PSN received:
``offset = max(0, min(lo, h - 63))`` with ``lo`` and ``h`` the distances of that lowest PSN
and of the highest PSN past the cumulative ack.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from mrcnic import fast
from mrcnic.transport.qp_types import TxMessage

PSN_MASK = 0xFFFFFF
PSN_MODULUS = 1 << 24
MARK_NEW = 0
MARK_DUP = 1
MARK_OOR = 2
BITMAP_BITS = 64


@dataclass(frozen=True, slots=True)
class SackFields:
    """What the responder puts in one SACK body (see ``wire.SACK``)."""

    cack_psn: int
    sack_offset: int
    bitmap: int
    ooo_count: int
    received_bytes: int


def _ahead(psn: int, expected: int) -> int:
    """Distance of ``psn`` past ``expected``; 0 for one behind it (the cack covers it)."""
    d = (psn - expected) & PSN_MASK
    return 0 if d >= 1 << 23 else d


class ResponderWindow:
    """The responder's PSN tracking window (``mrcnic.fast.PsnWindow``) plus the coalescing
    counters of the rule above.

    ``expected`` and ``highest`` mirror ``win.expected_psn`` and ``win.highest_psn`` as plain
    ints (reading them from the C struct costs a property call and a cffi access per read,
    several times per packet); :meth:`receive` is the only writer of ``win``, so they stay
    exact.  Mark the window only through :meth:`receive`."""

    __slots__ = (
        "win",
        "pending",
        "pending_lo",
        "ece_pending",
        "received_bytes",
        "ack_every",
        "size",
        "expected",
        "highest",
        "_half",
        "lasthop_trims",
        "lasthop_frac",
    )

    def __init__(self, size: int = 65536, start_psn: int = 0, ack_every: int = 4) -> None:
        self.win = fast.PsnWindow(size, start_psn)
        self.size = size
        self._half = size // 2
        self.ack_every = ack_every
        self.pending = 0  # new packets not yet covered by a SACK we sent
        self.pending_lo = -1  # the lowest PSN among them
        self.ece_pending = False
        self.received_bytes = 0
        self.expected = self.win.expected_psn
        self.highest = self.win.highest_psn
        self.lasthop_trims = 0  # TRIMMED_LASTHOP headers since the last SACK
        self.lasthop_frac = 0.0  # smoothed share of last-hop trims among arrivals

    def receive(self, psn: int) -> int:
        """Record a data PSN; returns MARK_NEW, MARK_DUP or MARK_OOR (outside the window)."""
        win = self.win
        st = win.mark(psn)
        if st == MARK_NEW:
            expected = self.expected
            # the window's rule for its highest PSN (a serial-number max past expected)
            if (psn - expected) & PSN_MASK >= (self.highest - expected + 1) & PSN_MASK:
                self.highest = psn
            if psn == expected:
                self.expected = (expected + win.advance()) & PSN_MASK
            if self.pending == 0 or (psn - self.pending_lo) & PSN_MASK >= 1 << 23:
                self.pending_lo = psn
            self.pending += 1
        return st

    def wants_ack(self, status: int, ce: bool, ack_req: bool, rtx: bool) -> bool:
        """Rules 1-4: must a SACK go out now (otherwise: the delayed-ack timer)?"""
        return ce or status != MARK_NEW or rtx or ack_req or self.pending >= self.ack_every

    def sack_values(self, trigger_psn: int) -> tuple[int, int, int, int, int, int]:
        """The SACK body for a trigger PSN as ``(cack_psn, sack_offset, bitmap, ooo_count,
        received_bytes, rcv_cwnd_pen)``, and reset the coalescing counters (the hot path's
        :meth:`sack_fields` plus :meth:`penalty`, without building a dataclass)."""
        expected = self.expected
        cack = (expected - 1) & PSN_MASK
        h = (self.highest - expected) & PSN_MASK
        if h >= 1 << 23:  # nothing beyond the cumulative ack
            h = -1
            pen = 0
        else:
            pen = self._penalty_of(h + 1) if h + 1 < 1 << 23 else 0
        if self.lasthop_trims or self.lasthop_frac:
            pen = max(pen, self._lasthop_penalty())
        d = (trigger_psn - expected) & PSN_MASK
        if d >= 1 << 23:
            d = 0  # a duplicate behind the cumulative ack: the cack covers it
        lo = d
        if self.pending:
            # the packets coalesced into this SACK arrived before the trigger, maybe far below
            # it (a slow path): the bitmap must start low enough to report them, or, stuck
            # behind a hole and no longer among the newest 64, they would never be acked
            lo = min(d, _ahead(self.pending_lo, expected))
        offset = max(0, min(lo, h - (BITMAP_BITS - 1)))
        if h >= 0:
            win = self.win
            bitmap = win.sack_bitmap(offset)
            ooo = min(0xFFFF, h + 1 - win.holes())
        else:
            bitmap = ooo = 0
        self.pending = 0
        self.pending_lo = -1
        self.ece_pending = False
        return cack, offset, bitmap, ooo, self.received_bytes, pen

    def sack_fields(self, trigger_psn: int) -> SackFields:
        """Build the SACK body for a trigger PSN and reset the coalescing counters."""
        cack, offset, bitmap, ooo, rb, _pen = self.sack_values(trigger_psn)
        return SackFields(cack, offset, bitmap, ooo, rb)

    def penalty(self) -> int:
        """The window part of rcv_cwnd_pen 0-127: ask the sender to shrink when the tracking
        window fills up with out-of-order state (0 below half full, rising linearly to 127
        when full). The SACK carries the larger of this and the last-hop part."""
        span = (self.highest - self.expected + 1) & PSN_MASK
        if span >= 1 << 23:
            return 0
        return self._penalty_of(span)

    def _lasthop_penalty(self) -> int:
        """The receiver's own last hop is overloaded (incast: headers trimmed at the T0
        downlink, TRIMMED_LASTHOP): ask every sender to shrink in proportion, 127 when a
        quarter of the arrivals are trimmed there. The share is smoothed over SACKs (1/4)."""
        trims = self.lasthop_trims
        frac = trims / (trims + self.pending) if trims or self.pending else 0.0
        self.lasthop_frac += (frac - self.lasthop_frac) * 0.25
        self.lasthop_trims = 0
        if self.lasthop_frac < 1 / 512:
            self.lasthop_frac = 0.0
        return min(127, int(self.lasthop_frac * 4 * 127))

    def _penalty_of(self, span: int) -> int:
        half = self._half
        if span <= half:
            return 0
        return min(127, (span - half) * 127 // half)


LOST_BY_TIMEOUT = 1
LOST_BY_SACK = 2  # the reordering window (RACK), from a SACK
LOST_BY_EV_ORDER = 3  # a later packet of the same EV was acknowledged, from a SACK
LOST_BY_TRIM = 4  # a NACK TRIMMED / TRIMMED_LASTHOP: certain, never spurious, not a loss
LOSS_CAUSES = (LOST_BY_TIMEOUT, LOST_BY_SACK, LOST_BY_EV_ORDER)


class TxRecord:
    """One sent, not yet acknowledged packet (enough to rebuild it for a retransmission)."""

    __slots__ = (
        "psn",
        "msg",
        "offset",
        "length",
        "opcode",
        "slot",
        "sent_s",
        "tx_ts_ns",
        "retries",
        "timer_seq",
        "lost",
        "ever_rtx",
        "to_sent_s",
        "to_slot",
        "to_ts_ns",
        "first_sent_s",
        "lost_by",
        "losses",
        "spurious",
        "recovery",
    )

    def __init__(self, psn: int, msg: TxMessage, offset: int, length: int, opcode: int) -> None:
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.opcode = opcode
        self.slot = -1
        self.sent_s = 0.0
        self.tx_ts_ns = 0
        self.retries = 0  # timeout retransmissions (the retry limit counts these)
        self.timer_seq = 0
        self.lost = False  # declared lost, waiting in the retransmit queue
        self.ever_rtx = False
        self.to_sent_s = -1.0  # send time of the transmission that last timed out
        self.to_slot = -1  # and its EV slot
        self.to_ts_ns = 0  # and its timestamp
        self.first_sent_s = 0.0  # the first transmission (loss recovery time is measured from it)
        self.lost_by = 0  # LOST_BY_*: how it was last declared lost
        self.losses = 0  # times declared lost (by SACK or timeout)
        self.spurious = False  # that declaration turned out wrong (the original got through)
        # [delay_s, spurious] of its first retransmission in the QP's recovery log (numbers
        # only: the log must not keep records, and with them user buffers, alive)
        self.recovery: list | None = None


class Scoreboard:
    """The requester's view: which PSNs are outstanding, when each times out, what is lost.

    ``records`` holds exactly the sent-but-unacknowledged PSNs; ``snd_una`` is the oldest of
    them (or ``snd_nxt`` when none).  Timers are entries ``(deadline_s, seq, psn)`` with lazy
    deletion: an entry is live while its record's ``timer_seq`` is ``seq``.  They are kept in
    two sorted containers: ``fifo``, a deque that takes every entry whose deadline is not
    earlier than its last one's (nearly all of them: a packet sent later usually times out
    later), and ``heap`` for the others.  Both are ordered by ``(deadline_s, seq)``, so
    merging their heads gives exactly the order of one heap, while most entries cost a deque
    append and popleft instead of a heap push and pop.  The QP's send loop arms its packets
    inline (hot path).
    """

    def __init__(self, start_psn: int = 0) -> None:
        self.records: dict[int, TxRecord] = {}
        self.snd_una = start_psn
        self.snd_nxt = start_psn
        self.inflight_bytes = 0
        self.heap: list[tuple[float, int, int]] = []
        self.fifo: deque[tuple[float, int, int]] = deque()
        self.seq = 0
        # every transmission in sending order, (record, its timestamp): the loss detector
        # walks it from the front (entries of acknowledged or resent records are dropped there)
        self.order: deque[tuple[TxRecord, int]] = deque()

    def lost_by_time(self, limit_s: float) -> list[TxRecord]:
        """The outstanding transmissions sent before ``limit_s`` (RACK's rule: something sent
        a reordering window after them has been acknowledged): declared lost, in send order."""
        out: list[TxRecord] = []
        order = self.order
        recs = self.records
        while order:
            rec, ts = order[0]
            if rec.tx_ts_ns != ts or rec.lost or recs.get(rec.psn) is not rec:
                order.popleft()  # acknowledged, resent since, or already being repaired
                continue
            if rec.sent_s >= limit_s:
                break
            order.popleft()
            out.append(rec)
        return out

    def outstanding(self) -> int:
        return (self.snd_nxt - self.snd_una) & PSN_MASK

    def add(self, rec: TxRecord) -> None:
        """A new PSN (must be ``snd_nxt``) goes out."""
        self.records[rec.psn] = rec
        self.snd_nxt = (rec.psn + 1) & PSN_MASK
        self.inflight_bytes += rec.length

    def arm(self, rec: TxRecord, deadline_s: float) -> None:
        self.seq += 1
        rec.timer_seq = self.seq
        fifo = self.fifo
        if not fifo or fifo[-1][0] <= deadline_s:
            fifo.append((deadline_s, self.seq, rec.psn))
        else:
            heapq.heappush(self.heap, (deadline_s, self.seq, rec.psn))

    def _live_heads(self) -> None:
        """Drop dead entries from the front of both containers."""
        recs = self.records
        fifo = self.fifo
        while fifo:
            _, seq, psn = fifo[0]
            rec = recs.get(psn)
            if rec is not None and rec.timer_seq == seq and not rec.lost:
                break
            fifo.popleft()
        heap = self.heap
        while heap:
            _, seq, psn = heap[0]
            rec = recs.get(psn)
            if rec is not None and rec.timer_seq == seq and not rec.lost:
                break
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        if not self.heap:  # the common case (asked at every turn of the I/O loop): FIFO only
            fifo = self.fifo
            recs = self.records
            while fifo:
                deadline, seq, psn = fifo[0]
                rec = recs.get(psn)
                if rec is not None and rec.timer_seq == seq and not rec.lost:
                    return deadline
                fifo.popleft()
            return None
        self._live_heads()
        fifo = self.fifo
        heap = self.heap
        if fifo:
            if heap and heap[0] < fifo[0]:
                return heap[0][0]
            return fifo[0][0]
        return heap[0][0] if heap else None

    def expired(self, now_s: float) -> list[TxRecord]:
        out = []
        fifo = self.fifo
        heap = self.heap
        recs = self.records
        while True:
            # the earlier of the two heads, as one heap would pop it
            if fifo and fifo[0][0] <= now_s and not (heap and heap[0] < fifo[0]):
                _, seq, psn = fifo.popleft()
            elif heap and heap[0][0] <= now_s:
                _, seq, psn = heapq.heappop(heap)
            else:
                break
            rec = recs.get(psn)
            if rec is not None and rec.timer_seq == seq and not rec.lost:
                out.append(rec)
        return out

    def mark_lost(self, rec: TxRecord) -> None:
        if not rec.lost:
            rec.lost = True
            rec.timer_seq = 0
            self.inflight_bytes -= rec.length

    def resent(self, rec: TxRecord) -> None:
        if rec.lost:
            rec.lost = False
            self.inflight_bytes += rec.length

    def on_sack(self, cack_psn: int, offset: int, bitmap: int) -> list[TxRecord]:
        """Apply a SACK; returns the newly acknowledged records (each exactly once)."""
        out: list[TxRecord] = []
        una = self.snd_una
        nxt = self.snd_nxt
        span = (nxt - una) & PSN_MASK
        if span == 0:
            return out
        pop = self.records.pop
        append = out.append
        inflight = self.inflight_bytes
        n = ((cack_psn - una) & PSN_MASK) + 1  # PSNs una..cack inclusive
        if n <= span:
            end = una + n
            # one range, or two when it crosses the 24-bit wrap
            psns = (
                range(una, end)
                if end <= PSN_MODULUS
                else (*range(una, PSN_MODULUS), *range(end - PSN_MODULUS))
            )
            for psn in psns:
                rec = pop(psn, None)
                if rec is not None:
                    if not rec.lost:
                        inflight -= rec.length
                    append(rec)
            una_floor = (cack_psn + 1) & PSN_MASK  # nothing at or behind cack is left
        else:
            una_floor = una  # stale cumulative ack (behind una) or nonsense beyond snd_nxt
        if bitmap:
            base = (cack_psn + 1 + offset) & PSN_MASK
            while bitmap:
                low = bitmap & -bitmap
                psn = (base + low.bit_length() - 1) & PSN_MASK
                if ((psn - una) & PSN_MASK) < span:
                    rec = pop(psn, None)
                    if rec is not None:
                        if not rec.lost:
                            inflight -= rec.length
                        append(rec)
                bitmap ^= low
        self.inflight_bytes = inflight
        if out:
            recs = self.records
            una = una_floor
            while una != nxt and una not in recs:
                una = (una + 1) & PSN_MASK
            self.snd_una = una
            if not recs:
                self.order.clear()  # nothing outstanding: no entry may keep a record alive
        return out
