"""Egress queues: where congestion happens (sans-I/O: every method takes ``now_ns``).

One :class:`EgressQueue` per port, paced at the port's link rate by a token bucket, with
two classes served in strict priority:

- **high**: DSCP CONTROL, TRIMMED, TRIMMED_LASTHOP (and the headers this queue trims),
  bounded by ``high_buffer_bytes``;
- **data**: everything else, bounded by ``buffer_bytes``.

On enqueue of a data packet:

- ECN: if the port marks ECN and the data queue already holds more than
  ``ecn_threshold_bytes``, an ECN-capable packet (ECT(0)/ECT(1)) is marked CE.
- Overflow: a trimmable packet (DSCP TRIMMABLE or TRIMMABLE_RETX, UDP to port 4791, an MRC
  data opcode, complete MRC headers) is cut to its headers when the port trims, its DSCP
  set to TRIMMED (TRIMMED_LASTHOP on a last-hop port), IPv6 payload length, UDP length and
  checksum fixed, and queued at high priority. Anything else that does not fit is dropped
  (``queue_full``; the caller counts DROPPED verdicts, so every drop is counted in one place).

The UDP checksum of a trimmed header is recomputed over the packet's *final* destination
(the sender's convention, RFC 9800 without an SRH): the current destination shifted until
end of carrier. At the last hop the destination is already final; mid-fabric it still has
uSIDs to go.
"""

from __future__ import annotations

from collections import deque
from enum import IntEnum

from mrcnic.fast import udp6_checksum
from mrcnic.wire import (
    BTH_SIZE,
    IMM_SIZE,
    IPPROTO_UDP,
    METH_SIZE,
    MRC_UDP_PORT,
    OFF_BTH,
    OFF_UDP,
    RETH_SIZE,
    TS_SIZE,
    Dscp,
    Ecn,
)

from .config import USID_BITS, PortConfig

_HIGH_DSCP = frozenset((Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP))
_TRIMMABLE_DSCP = frozenset((Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX))
_DATA_OPCODES = frozenset(range(0xC6, 0xCC))  # MRC RDMA Write First..Only-with-Imm
_IMM_OPCODES = frozenset((0xC9, 0xCB))
_TS_FLAG = 0x10  # BTH byte 4 bit 4: timestamp extension present
_ECN_CAPABLE = frozenset((Ecn.ECT0, Ecn.ECT1))
NS_PER_S = 1_000_000_000


class Verdict(IntEnum):
    QUEUED = 0
    MARKED = 1  # queued, ECN CE set
    TRIMMED = 2  # cut to its headers, queued at high priority
    DROPPED = 3  # queue_full
    HIGH = 4  # queued at high priority as it came (control / already trimmed)


def dscp_ecn(frame: bytes | bytearray) -> tuple[int, int]:
    """DSCP and ECN of an Ethernet+IPv6 frame (traffic class = DSCP << 2 | ECN)."""
    tc = (frame[14] & 0x0F) << 4 | frame[15] >> 4
    return tc >> 2, tc & 3


def set_dscp(frame: bytearray, dscp: int) -> None:
    frame[14] = (frame[14] & 0xF0) | (dscp >> 2)
    frame[15] = (frame[15] & 0x3F) | ((dscp & 3) << 6)


def final_destination(dst: bytes | bytearray, lblen: int) -> bytes:
    """Shift a uSID carrier until end of carrier: the address the destination host sees."""
    a = int.from_bytes(dst, "big")
    after_block = 128 - lblen
    blk_mask = ((1 << lblen) - 1) << after_block
    arg_mask = (1 << after_block) - 1
    tail_mask = (1 << (after_block - USID_BITS)) - 1
    while a & tail_mask:
        a = (a & blk_mask) | ((a << USID_BITS) & arg_mask)
    return a.to_bytes(16, "big")


def mrc_header_end(frame: bytes | bytearray) -> int | None:
    """Offset just past the MRC data headers (BTH METH [TS] RETH [ImmDt]), or None when the
    frame is not a complete MRC data packet (then it is not trimmable)."""
    if len(frame) < OFF_BTH + BTH_SIZE or frame[20] != IPPROTO_UDP:
        return None
    if (frame[OFF_UDP + 2] << 8 | frame[OFF_UDP + 3]) != MRC_UDP_PORT:
        return None
    op = frame[OFF_BTH]
    if op not in _DATA_OPCODES:
        return None
    end = OFF_BTH + BTH_SIZE + METH_SIZE + RETH_SIZE
    if frame[OFF_BTH + 4] & _TS_FLAG:
        end += TS_SIZE
    if op in _IMM_OPCODES:
        end += IMM_SIZE
    return end if end <= len(frame) else None


def trim_frame(
    frame: bytes | bytearray, *, last_hop: bool, trim_bytes: int, lblen: int
) -> bytearray | None:
    """The trimmed copy of a trimmable frame, or None if it is not a complete MRC data packet.

    Keeps max(trim_bytes, the MRC headers) bytes (never more than the frame has), sets the
    DSCP to TRIMMED / TRIMMED_LASTHOP (ECN bits kept), fixes IPv6 payload length and UDP
    length, and recomputes the UDP checksum over the final destination.
    """
    end = mrc_header_end(frame)
    if end is None:
        return None
    keep = min(len(frame), max(end, trim_bytes))
    t = bytearray(frame[:keep])
    set_dscp(t, Dscp.TRIMMED_LASTHOP if last_hop else Dscp.TRIMMED)
    ulen = keep - OFF_UDP
    t[18] = ulen >> 8
    t[19] = ulen & 0xFF
    t[OFF_UDP + 4] = ulen >> 8
    t[OFF_UDP + 5] = ulen & 0xFF
    t[OFF_UDP + 6] = 0
    t[OFF_UDP + 7] = 0
    final = final_destination(t[38:54], lblen)
    c = udp6_checksum(bytes(t[22:38]), final, t[OFF_UDP:])
    t[OFF_UDP + 6] = c >> 8
    t[OFF_UDP + 7] = c & 0xFF
    return t


class EgressQueue:
    """One port's paced two-class egress queue with ECN marking and trimming."""

    __slots__ = (
        "cfg",
        "lblen",
        "high",
        "data",
        "high_bytes",
        "data_bytes",
        "max_depth_bytes",
        "ecn_marks",
        "trims",
        "_tokens",
        "_last_ns",
        "_rate_per_ns",
        "_burst",
        "_ecn_on",
        "_threshold",
        "_buffer",
        "_high_buffer",
        "_trim_on",
    )

    def __init__(self, cfg: PortConfig, lblen: int = 32, now_ns: int = 0) -> None:
        self.cfg = cfg
        self.lblen = lblen
        self.high: deque[bytearray] = deque()
        self.data: deque[bytearray] = deque()
        self.high_bytes = 0
        self.data_bytes = 0
        self.max_depth_bytes = 0
        self.ecn_marks = 0
        self.trims = 0
        self._rate_per_ns = cfg.rate_bps / 8 / NS_PER_S  # bytes per nanosecond
        self._burst = float(cfg.burst_bytes)
        self._tokens = self._burst  # an idle link may send a burst at once
        self._last_ns = now_ns
        self._ecn_on = cfg.ecn
        self._threshold = cfg.ecn_threshold_bytes
        self._buffer = cfg.buffer_bytes
        self._high_buffer = cfg.high_buffer_bytes
        self._trim_on = cfg.trimming

    @property
    def depth_bytes(self) -> int:
        return self.high_bytes + self.data_bytes

    def __len__(self) -> int:
        return len(self.high) + len(self.data)

    def _note_depth(self) -> None:
        d = self.high_bytes + self.data_bytes
        if d > self.max_depth_bytes:
            self.max_depth_bytes = d

    def _enqueue_high(self, frame: bytearray) -> bool:
        n = len(frame)
        if self.high_bytes + n > self._high_buffer:
            return False
        self.high.append(frame)
        self.high_bytes += n
        self._note_depth()
        return True

    def enqueue(self, frame: bytearray, now_ns: int = 0) -> Verdict:
        """Admit one forwarded frame (Ethernet first, IPv6, already rewritten)."""
        tc = (frame[14] & 0x0F) << 4 | frame[15] >> 4
        dscp = tc >> 2
        if dscp in _HIGH_DSCP:
            return Verdict.HIGH if self._enqueue_high(frame) else Verdict.DROPPED
        n = len(frame)
        if self.data_bytes + n <= self._buffer:
            verdict = Verdict.QUEUED
            if self._ecn_on and self.data_bytes > self._threshold and (tc & 3) in _ECN_CAPABLE:
                frame[15] |= 0x30  # ECN = CE
                self.ecn_marks += 1
                verdict = Verdict.MARKED
            self.data.append(frame)
            self.data_bytes += n
            self._note_depth()
            return verdict
        if self._trim_on and dscp in _TRIMMABLE_DSCP:
            t = trim_frame(
                frame, last_hop=self.cfg.last_hop, trim_bytes=self.cfg.trim_bytes, lblen=self.lblen
            )
            if t is not None:
                if self._enqueue_high(t):
                    self.trims += 1
                    return Verdict.TRIMMED
                return Verdict.DROPPED
        return Verdict.DROPPED

    def _refill(self, now_ns: int) -> None:
        if now_ns > self._last_ns:
            self._tokens = min(
                self._burst, self._tokens + (now_ns - self._last_ns) * self._rate_per_ns
            )
            self._last_ns = now_ns

    def dequeue(self, now_ns: int, max_frames: int = 64) -> list[bytearray]:
        """Frames the link may carry by now: high class first, within the token bucket."""
        out: list[bytearray] = []
        if not (self.high or self.data):
            return out
        self._refill(now_ns)
        tokens = self._tokens
        high, data = self.high, self.data
        while len(out) < max_frames:
            if high:
                q = high
            elif data:
                q = data
            else:
                break
            n = len(q[0])
            if n > tokens:
                break
            tokens -= n
            out.append(q.popleft())
            if q is high:
                self.high_bytes -= n
            else:
                self.data_bytes -= n
        self._tokens = tokens
        return out

    def fast_budget(self, now_ns: int) -> int:
        """Bytes that may leave at once without queueing: the tokens available when both
        classes are empty, else -1 (frames must queue behind what is there). A frame sent
        within this budget has exactly the fate enqueue + dequeue would give it at now_ns
        (an empty queue neither marks nor trims), so the switch sends such frames straight
        from its receive buffer and calls :meth:`consume` with their bytes."""
        if self.high or self.data:
            return -1
        self._refill(now_ns)
        return int(self._tokens)

    @property
    def rate_per_ns(self) -> float:
        """The token bucket's rate (bytes per ns)."""
        return self._rate_per_ns

    @property
    def burst_bytes(self) -> int:
        """The token bucket's depth."""
        return int(self._burst)

    @property
    def refilled_ns(self) -> int:
        """The time the tokens were last brought up to date (what fast_budget counted to)."""
        return self._last_ns

    def consume(self, nbytes: int) -> None:
        """Take the tokens of frames that left without queueing (see :meth:`fast_budget`)."""
        self._tokens -= nbytes

    def next_send_ns(self, now_ns: int) -> int | None:
        """When the head frame may leave (now_ns if already), or None if the queue is empty."""
        q = self.high or self.data
        if not q:
            return None
        self._refill(now_ns)
        missing = len(q[0]) - self._tokens
        if missing <= 0:
            return now_ns
        return now_ns + int(missing / self._rate_per_ns) + 1

    def flush(self) -> int:
        """Drop everything queued (the link went down); returns how many frames."""
        n = len(self.high) + len(self.data)
        self.high.clear()
        self.data.clear()
        self.high_bytes = self.data_bytes = 0
        return n
