"""Egress queues: where congestion happens (sans-I/O: every method takes ``now_ns``).

One :class:`EgressQueue` per port, paced at the port's link rate by a token bucket, with
two classes served in strict priority:

- **high**: DSCP CONTROL, TRIMMED, TRIMMED_LASTHOP (and the headers this queue trims),
  bounded by ``high_buffer_bytes``;
- **data**: everything else, bounded by ``buffer_bytes``.

On enqueue of a data packet:

- ECN: if the port marks ECN and the data queue already holds more than
  ``ecn_threshold_bytes``, an ECN-capable packet (ECT(0)/ECT(1)) is marked CE.
- Overflow: the one trim rule, ``mrcnic.wire.trim`` (shared with the simulator's links): a
  trimmable packet (DSCP TRIMMABLE or TRIMMABLE_RETX, UDP to port 4791, an MRC data opcode,
  complete MRC headers) is cut to its headers when the port trims, its DSCP set to TRIMMED
  (TRIMMED_LASTHOP on a last-hop port), IPv6 payload length, UDP length and checksum fixed
  (over the final destination, with this queue's ``lblen``), and queued at high priority if
  the high class has room. Anything else that does not fit is dropped (``queue_full``; the
  caller counts DROPPED verdicts, so every drop is counted in one place).

With priority flow control (a :class:`~mrcswitch.config.LosslessClass`), frames of the
lossless DSCP wait in a third class, served after high and before data unless the port is
paused (``paused_until_ns``, set by the switch from the PAUSE frames the port receives), never
trimmed, each tagged with the port it came in on: ``in_bytes[in_port]`` (one list shared by
the switch's queues) sums what each in-port has queued anywhere, and a frame that would take
its in-port above ``in_limit_bytes`` (XOFF + headroom) is dropped and counted in
``lossless_drops``, which correct headroom keeps at 0 (docs/design/pfc.md).

With a link propagation delay (:meth:`EgressQueue.set_delay`, ``delay_ns`` > 0), a frame the
token bucket lets leave goes onto the *wire* instead, a FIFO of frames each released
``delay_ns`` later (never before the frame ahead: a link does not reorder), and leaves the
port when released. The wire holds at most ``wire_bound_bytes`` of frames (what the bucket
can put on it within one delay, plus a frame); a frame that does not fit waits in its class
(``wire_stalls``). Nothing leaves at once while the wire is in use (``fast_budget`` -1).
Frames on the wire are not queued: depth, ECN and PFC count the classes only; ``len()``
counts both (what the port still has to deliver); ``flush`` drops both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import MutableSequence
from enum import IntEnum

from mrcnic.wire import layout
from mrcnic.wire.layout import dscp_ecn
from mrcnic.wire.trim import TrimRule, overflows

from .config import MAX_DELAY_NS, MAX_FRAME_BYTES, LosslessClass, PortConfig

__all__ = ["EgressQueue", "Verdict", "dscp_ecn"]

_HIGH_DSCP = layout.HIGH_PRIORITY_DSCPS
_ECN_CAPABLE = layout.ECN_CAPABLE
_OFF_TC_HI = layout.OFF_TC_HI
_OFF_TC_LO = layout.OFF_TC_LO
_DSCP_HI = layout.TC_HI_DSCP_MASK
_ECN_BITS = layout.TC_LO_ECN_MASK
NS_PER_S = 1_000_000_000


class Verdict(IntEnum):
    QUEUED = 0
    MARKED = 1  # queued, ECN CE set
    TRIMMED = 2  # cut to its headers, queued at high priority
    DROPPED = 3  # queue_full
    HIGH = 4  # queued at high priority as it came (control / already trimmed)


class EgressQueue:
    """One port's paced egress queue (high, lossless if configured, data) with ECN marking
    and trimming."""

    __slots__ = (
        "cfg",
        "lblen",
        "high",
        "data",
        "lossless",
        "lossless_bytes",
        "lossless_drops",
        "paused_until_ns",
        "_ll",
        "_in_bytes",
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
        "_trim",
        "max_frame_bytes",
        "delay_ns",
        "wire",
        "wire_bytes",
        "wire_bound_bytes",
        "wire_stalls",
        "_last_release_ns",
    )

    def __init__(
        self, cfg: PortConfig, lblen: int = 32, now_ns: int = 0,
        lossless: LosslessClass | None = None, in_bytes: MutableSequence[int] | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.lblen = lblen
        self.high: deque[bytearray] = deque()
        self.data: deque[bytearray] = deque()
        self.lossless: deque[tuple[bytearray, int]] = deque()  # (frame, in-port or -1)
        self.lossless_bytes = 0
        self.lossless_drops = 0
        self.paused_until_ns = 0
        self._ll = lossless
        self._in_bytes: MutableSequence[int] = in_bytes if in_bytes is not None else []
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
        self._trim = TrimRule(cfg.trimming, cfg.last_hop, cfg.trim_bytes, lblen)
        self.max_frame_bytes = max_frame_bytes
        self.delay_ns = 0
        self.wire: deque[tuple[int, bytearray]] = deque()  # (release time, frame)
        self.wire_bytes = 0
        self.wire_bound_bytes = 0
        self.wire_stalls = 0
        self._last_release_ns = 0
        if cfg.delay_ns:
            self.set_delay(cfg.delay_ns)

    @property
    def depth_bytes(self) -> int:
        return self.high_bytes + self.data_bytes + self.lossless_bytes

    def __len__(self) -> int:
        return len(self.high) + len(self.data) + len(self.lossless) + len(self.wire)

    # --- the wire (link propagation delay) ------------------------------------------------
    def wire_bound(self, delay_ns: int) -> int:
        """The wire bound a delay gives (mrc_eq_wire_bound): 0 for 0, else what the bucket
        can put on the wire within the delay plus the longest frame, never less than what is
        on the wire now."""
        if not 0 <= delay_ns <= MAX_DELAY_NS:
            raise ValueError(f"delay_ns {delay_ns}: must be 0..{MAX_DELAY_NS}")
        if delay_ns == 0:
            return 0
        bound = int(self._burst + self._rate_per_ns * delay_ns) + self.max_frame_bytes
        return max(bound, self.wire_bytes)

    def set_delay(self, delay_ns: int) -> None:
        """The link's one-way delay from now on (frames on the wire keep their release
        times; with 0 they drain and new frames leave at once once the wire is empty)."""
        bound = self.wire_bound(delay_ns)
        if delay_ns:
            self.wire_bound_bytes = bound
        self.delay_ns = delay_ns

    def _wire_on(self) -> bool:
        return self.delay_ns > 0 or bool(self.wire)

    def _wire_due(self, now_ns: int, max_frames: int, out: list[bytearray]) -> None:
        wire = self.wire
        while wire and len(out) < max_frames and wire[0][0] <= now_ns:
            f = wire.popleft()[1]
            self.wire_bytes -= len(f)
            out.append(f)

    def _to_wire(self, now_ns: int) -> None:
        """Frames the tokens let leave by now go onto the wire, in dequeue's order, while
        the bound has room."""
        self._refill(now_ns)
        release = max(now_ns + self.delay_ns, self._last_release_ns)
        tokens = self._tokens
        while True:
            head = self._head(now_ns)
            if head is None or len(head) > tokens:
                break
            n = len(head)
            if self.wire_bytes + n > self.wire_bound_bytes:
                self.wire_stalls += 1
                break
            self._pop_head(now_ns)
            self.wire.append((release, head))
            self.wire_bytes += n
            self._last_release_ns = release
            tokens -= n
        self._tokens = tokens

    def _head(self, now_ns: int) -> bytearray | None:
        """The frame dequeue would serve next (high, lossless unless paused, data)."""
        if self.high:
            return self.high[0]
        if self.lossless and now_ns >= self.paused_until_ns:
            return self.lossless[0][0]
        if self.data:
            return self.data[0]
        return None

    def _pop_head(self, now_ns: int) -> None:
        if self.high:
            self.high_bytes -= len(self.high.popleft())
        elif self.lossless and now_ns >= self.paused_until_ns:
            f, in_port = self.lossless.popleft()
            self.lossless_bytes -= len(f)
            if in_port >= 0:
                self._in_bytes[in_port] -= len(f)
        else:
            self.data_bytes -= len(self.data.popleft())

    def _wire_dequeue(self, now_ns: int, max_frames: int) -> list[bytearray]:
        out: list[bytearray] = []
        self._wire_due(now_ns, max_frames, out)
        self._to_wire(now_ns)
        self._wire_due(now_ns, max_frames, out)  # a delay of 0 while the wire drains
        return out

    def _wire_next_ns(self, now_ns: int) -> int | None:
        nxt = max(self.wire[0][0], now_ns) if self.wire else None
        head = self._head(now_ns)
        t = None
        if head is not None:
            if self.wire_bytes + len(head) <= self.wire_bound_bytes:
                t = self._tokens_cover_ns(now_ns, len(head))
        elif self.lossless:
            t = self.paused_until_ns
        if t is not None and (nxt is None or t < nxt):
            nxt = t
        return nxt

    def _note_depth(self) -> None:
        d = self.high_bytes + self.data_bytes + self.lossless_bytes
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

    def _enqueue_lossless(self, frame: bytearray, tc: int, in_port: int) -> Verdict:
        ll = self._ll
        assert ll is not None
        n = len(frame)
        in_bytes = self._in_bytes
        counted = 0 <= in_port < len(in_bytes)
        if (counted and in_bytes[in_port] + n > ll.in_limit_bytes) or (
            self.lossless_bytes + n > ll.buffer_bytes
        ):
            self.lossless_drops += 1
            return Verdict.DROPPED
        verdict = Verdict.QUEUED
        if ll.ecn and self.lossless_bytes > self._threshold and (tc & 3) in _ECN_CAPABLE:
            frame[_OFF_TC_LO] |= _ECN_BITS  # ECN = CE
            self.ecn_marks += 1
            verdict = Verdict.MARKED
        self.lossless.append((frame, in_port if counted else -1))
        self.lossless_bytes += n
        if counted:
            in_bytes[in_port] += n
        self._note_depth()
        return verdict

    def enqueue(self, frame: bytearray, now_ns: int = 0, in_port: int = -1) -> Verdict:
        """Admit one forwarded frame (Ethernet first, IPv6, already rewritten) that came in
        on ``in_port`` (its lossless bytes are accounted there; -1: nowhere)."""
        tc = (frame[_OFF_TC_HI] & _DSCP_HI) << 4 | frame[_OFF_TC_LO] >> 4
        dscp = tc >> 2
        if dscp in _HIGH_DSCP:
            return Verdict.HIGH if self._enqueue_high(frame) else Verdict.DROPPED
        if self._ll is not None and dscp == self._ll.dscp:
            return self._enqueue_lossless(frame, tc, in_port)
        n = len(frame)
        if not overflows(self.data_bytes, n, self._buffer):
            verdict = Verdict.QUEUED
            if self._ecn_on and self.data_bytes > self._threshold and (tc & 3) in _ECN_CAPABLE:
                frame[_OFF_TC_LO] |= _ECN_BITS  # ECN = CE
                self.ecn_marks += 1
                verdict = Verdict.MARKED
            self.data.append(frame)
            self.data_bytes += n
            self._note_depth()
            return verdict
        t = self._trim.overflow(frame)  # the one trim rule (mrcnic.wire.trim)
        if t is not None and self._enqueue_high(bytearray(t)):
            self.trims += 1
            return Verdict.TRIMMED
        return Verdict.DROPPED

    def _refill(self, now_ns: int) -> None:
        if now_ns > self._last_ns:
            self._tokens = min(
                self._burst, self._tokens + (now_ns - self._last_ns) * self._rate_per_ns
            )
            self._last_ns = now_ns

    def dequeue(self, now_ns: int, max_frames: int = 64) -> list[bytearray]:
        """Frames the link may carry by now: high class first, then lossless (unless
        paused), then data, within the token bucket."""
        if self._wire_on():
            return self._wire_dequeue(now_ns, max_frames)
        out: list[bytearray] = []
        if not (self.high or self.data or self.lossless):
            return out
        self._refill(now_ns)
        tokens = self._tokens
        while len(out) < max_frames:
            head = self._head(now_ns)
            if head is None or len(head) > tokens:
                break
            self._pop_head(now_ns)
            out.append(head)
            tokens -= len(head)
        self._tokens = tokens
        return out

    def fast_budget(self, now_ns: int) -> int:
        """Bytes that may leave at once without queueing: the tokens available when both
        classes are empty, else -1 (frames must queue behind what is there). A frame sent
        within this budget has exactly the fate enqueue + dequeue would give it at now_ns
        (an empty queue neither marks nor trims), so the switch sends such frames straight
        from its receive buffer and calls :meth:`consume` with their bytes."""
        if self.high or self.data or self.lossless or self._wire_on():
            return -1
        if self._ll is not None and now_ns < self.paused_until_ns:
            return -1  # paused: a lossless frame must not leave at once
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
        if self._wire_on():
            return self._wire_next_ns(now_ns)
        head = self._head(now_ns)
        if head is None:  # only paused lossless frames: when the pause ends
            return self.paused_until_ns if self.lossless else None
        return self._tokens_cover_ns(now_ns, len(head))

    def _tokens_cover_ns(self, now_ns: int, n: int) -> int:
        self._refill(now_ns)
        missing = n - self._tokens
        if missing <= 0:
            return now_ns
        return now_ns + int(missing / self._rate_per_ns) + 1

    def flush(self) -> int:
        """Drop everything queued and on the wire (the link went down); returns how many
        frames."""
        n = len(self)
        for f, in_port in self.lossless:  # the in-ports get their lossless bytes back
            if in_port >= 0:
                self._in_bytes[in_port] -= len(f)
        self.high.clear()
        self.data.clear()
        self.lossless.clear()
        self.wire.clear()
        self.high_bytes = self.data_bytes = self.lossless_bytes = self.wire_bytes = 0
        return n
