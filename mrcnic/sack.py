"""Reliability bookkeeping: the responder's PSN window and SACK coalescing, and the
requester's scoreboard of unacknowledged packets with their retransmission timers.

SACK coalescing rule (docs/transport.md): the responder answers a data packet at once when

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
from dataclasses import dataclass

from mrcnic import fast

PSN_MASK = 0xFFFFFF
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
    counters of the rule above."""

    __slots__ = (
        "win",
        "pending",
        "pending_lo",
        "ece_pending",
        "received_bytes",
        "ack_every",
        "size",
    )

    def __init__(self, size: int = 65536, start_psn: int = 0, ack_every: int = 4) -> None:
        self.win = fast.PsnWindow(size, start_psn)
        self.size = size
        self.ack_every = ack_every
        self.pending = 0  # new packets not yet covered by a SACK we sent
        self.pending_lo = -1  # the lowest PSN among them
        self.ece_pending = False
        self.received_bytes = 0

    def receive(self, psn: int) -> int:
        """Record a data PSN; returns MARK_NEW, MARK_DUP or MARK_OOR (outside the window)."""
        win = self.win
        st = win.mark(psn)
        if st == MARK_NEW:
            if psn == win.expected_psn:
                win.advance()
            if self.pending == 0 or (psn - self.pending_lo) & PSN_MASK >= 1 << 23:
                self.pending_lo = psn
            self.pending += 1
        return st

    def wants_ack(self, status: int, ce: bool, ack_req: bool, rtx: bool) -> bool:
        """Rules 1-4: must a SACK go out now (otherwise: the delayed-ack timer)?"""
        return ce or status != MARK_NEW or rtx or ack_req or self.pending >= self.ack_every

    def sack_fields(self, trigger_psn: int) -> SackFields:
        """Build the SACK body for a trigger PSN and reset the coalescing counters."""
        win = self.win
        expected = win.expected_psn
        h = (win.highest_psn - expected) & PSN_MASK
        if h >= 1 << 23:  # nothing beyond the cumulative ack
            h = -1
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
        bitmap = win.sack_bitmap(offset) if h >= 0 else 0
        ooo = 0
        if h >= 0:
            ooo = min(0xFFFF, h + 1 - win.holes())
        self.pending = 0
        self.pending_lo = -1
        self.ece_pending = False
        return SackFields(win.cack_psn, offset, bitmap, ooo, self.received_bytes)

    def penalty(self) -> int:
        """rcv_cwnd_pen 0-127: ask the sender to shrink when the tracking window fills up with
        out-of-order state (0 below half full, rising linearly to 127 when full)."""
        win = self.win
        span = (win.highest_psn - win.cack_psn) & PSN_MASK
        if span >= 1 << 23:
            return 0
        half = self.size // 2
        if span <= half:
            return 0
        return min(127, (span - half) * 127 // half)


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
    )

    def __init__(self, psn: int, msg: object, offset: int, length: int, opcode: int) -> None:
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


class Scoreboard:
    """The requester's view: which PSNs are outstanding, when each times out, what is lost.

    ``records`` holds exactly the sent-but-unacknowledged PSNs; ``snd_una`` is the oldest of
    them (or ``snd_nxt`` when none).  Timers live in a heap with lazy deletion.
    """

    def __init__(self, start_psn: int = 0) -> None:
        self.records: dict[int, TxRecord] = {}
        self.snd_una = start_psn
        self.snd_nxt = start_psn
        self.inflight_bytes = 0
        self._heap: list[tuple[float, int, int]] = []
        self._seq = 0

    def outstanding(self) -> int:
        return (self.snd_nxt - self.snd_una) & PSN_MASK

    def add(self, rec: TxRecord) -> None:
        """A new PSN (must be ``snd_nxt``) goes out."""
        self.records[rec.psn] = rec
        self.snd_nxt = (rec.psn + 1) & PSN_MASK
        self.inflight_bytes += rec.length

    def arm(self, rec: TxRecord, deadline_s: float) -> None:
        self._seq += 1
        rec.timer_seq = self._seq
        heapq.heappush(self._heap, (deadline_s, self._seq, rec.psn))

    def next_deadline(self) -> float | None:
        heap = self._heap
        recs = self.records
        while heap:
            deadline, seq, psn = heap[0]
            rec = recs.get(psn)
            if rec is not None and rec.timer_seq == seq and not rec.lost:
                return deadline
            heapq.heappop(heap)
        return None

    def expired(self, now_s: float) -> list[TxRecord]:
        out = []
        heap = self._heap
        recs = self.records
        while heap and heap[0][0] <= now_s:
            _, seq, psn = heapq.heappop(heap)
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

    def _ack(self, psn: int, out: list[TxRecord]) -> None:
        rec = self.records.pop(psn, None)
        if rec is not None:
            if not rec.lost:
                self.inflight_bytes -= rec.length
            out.append(rec)

    def on_sack(self, cack_psn: int, offset: int, bitmap: int) -> list[TxRecord]:
        """Apply a SACK; returns the newly acknowledged records (each exactly once)."""
        out: list[TxRecord] = []
        una = self.snd_una
        span = (self.snd_nxt - una) & PSN_MASK
        if span == 0:
            return out
        n = ((cack_psn - una) & PSN_MASK) + 1  # PSNs una..cack inclusive
        if n <= span:
            for i in range(n):
                self._ack((una + i) & PSN_MASK, out)
        else:
            n = 0  # stale cumulative ack (behind una) or nonsense beyond snd_nxt
        if bitmap:
            base = (cack_psn + 1 + offset) & PSN_MASK
            while bitmap:
                low = bitmap & -bitmap
                psn = (base + low.bit_length() - 1) & PSN_MASK
                if ((psn - una) & PSN_MASK) < span:
                    self._ack(psn, out)
                bitmap ^= low
        if out:
            recs = self.records
            nxt = self.snd_nxt
            while una != nxt and una not in recs:
                una = (una + 1) & PSN_MASK
            self.snd_una = una
        return out
