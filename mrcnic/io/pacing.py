"""Per-port pacing of the NIC, sans-I/O (unit-tested with a fake clock): a token bucket at
the port's link rate over a small two-class queue (control frames first). The asyncio shell
(``mrcnic.io.aio``) owns one per port; the simulator's host port
(``mrcnic.sim.fabric.HostPort``) follows the same rule.

What the bucket lets go leaves as :class:`OutBatch` objects (:meth:`PortPacer.due`), one
interface over the two places a frame may wait: Python frames (:class:`FrameBatch`, sent
with ``sendmmsg`` from a list) and the first frames of a port's C queue (:class:`QueueBatch`,
sent from its slots with no Python object per frame), so the shell has one send path."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

# PacerConfig lives with the rule it sizes (the simulator's NIC follows it too)
from mrcnic.transport.port_queues import PacerConfig, data_limit_frames
from mrcnic.wire import layout

# the high four DSCP bits sit in the low nibble of the IPv6 header's first traffic-class byte
_CONTROL_NIBBLE = int(layout.Dscp.CONTROL) >> 2


_LOSSLESS = int(layout.Dscp.LOSSLESS)


def is_lossless_frame(frame: bytes | bytearray | memoryview) -> bool:
    """DSCP LOSSLESS (26): the RoCEv2 baseline's data on a lab with PFC, held while the
    port is paused."""
    return (
        (frame[layout.OFF_TC_HI] & layout.TC_HI_DSCP_MASK) << 2 | frame[layout.OFF_TC_LO] >> 6
    ) == _LOSSLESS


def is_control_frame(frame: bytes | bytearray | memoryview) -> bool:
    """DSCP CONTROL (46): served before data. One byte read on the hot path: DSCPs 44..47
    share that nibble, and a NIC sends no other DSCP of them (trimmed headers, the other
    high-priority class, are made by switches, never sent by a NIC)."""
    return (frame[layout.OFF_TC_HI] & layout.TC_HI_DSCP_MASK) == _CONTROL_NIBBLE


class OutBatch(Protocol):
    """Frames the pacer let go, to be sent on one port."""

    def __len__(self) -> int: ...

    def send(self, sender: Any, fd: int) -> tuple[int, int, int, int]:
        """Send them on ``fd`` (``sender``: a ``mrcnic.io.batch.Sender``): (sent, failed,
        errno, bytes sent)."""

    def drop(self) -> int:
        """The port cannot send: drop them; how many frames went."""


class FrameBatch(list):
    """Python frames (bytes), sent with one ``sendmmsg``."""

    __slots__ = ()

    def send(self, sender: Any, fd: int) -> tuple[int, int, int, int]:
        res = sender.send(fd, self)
        nbytes = sum(map(len, self))
        if res.sent != len(self):  # (which ones went is not reported: pro rata)
            nbytes = nbytes * res.sent // len(self)
        return res.sent, res.failed, res.errno, nbytes

    def drop(self) -> int:
        return len(self)


class QueueBatch:
    """The first ``n`` frames of a port's C queue (``mrcnic.transport.port_queues``)."""

    __slots__ = ("queue", "n")

    def __init__(self, queue: Any, n: int) -> None:
        self.queue = queue
        self.n = n

    def __len__(self) -> int:
        return self.n

    def send(self, sender: Any, fd: int) -> tuple[int, int, int, int]:
        return self.queue.send(fd, self.n)

    def drop(self) -> int:
        return self.queue.clear()  # (a C ring drops frames only by sending: all of them go)


_DEFAULT_CONFIG = PacerConfig()
#: the most data frames a port's queue holds here, whatever its rate (it binds above ~4.3
#: Gb/s, where queue_s of line rate is more): what a pump builds before it sends, what one
#: sendmmsg may take (256), and where the C engines stop (a Python engine's pull may bring a
#: window more). 256 frames of 4 KiB (1.1 MB) are about the 1 MiB L2 cache; 2 ms of 20 Gb/s
#: (1,189 frames, 5 MB) were not, and a pump stamped them all with its start (the AioNic
#: pump pulls again instead). 128 cost the receivers more per frame (smaller batches):
#: docs/design/core.md, "Spurious timeouts at full speed".
MAX_DATA_FRAMES = 256


class Bucket:
    """A port's token bucket as Python keeps it: the twin of the bucket's fields of ``struct
    mrc_pace_port`` (``csrc/mrc_pace.h``; the same names), where :class:`PortPacer` moves it
    when the ports' pacers are served in C (``mrcnic.io.cpacing``)."""

    __slots__ = ("rate_Bps", "burst_bytes", "tokens", "last_s", "max_data_frames")
    rate_Bps: float
    burst_bytes: float
    tokens: float
    last_s: float
    max_data_frames: int


class PortPacer:
    """A token bucket at the port's link rate over a two-class queue (control, then data).

    ``push`` queues a frame; ``take(now)`` returns the frames that may leave now (tokens may go
    one frame negative, so the average rate is exact); ``next_due(now)`` is when the next frame
    may leave (None when empty); ``room()`` is how many more data frames the queue wants.

    Data frames of the lossless class (DSCP LOSSLESS) wait in a queue of their own, served
    before the other data unless ``pause`` (a :class:`mrcnic.io.pfc.PortPause`, set when the
    port honours PFC) says the link partner paused the priority.
    """

    __slots__ = (
        "b",
        "_b_owner",
        "high",
        "data",
        "data_limit",
        "high_limit",
        "high_drops",
        "cq",
        "c_take",
        "chq",
        "c_high_take",
        "lossless",
        "pause",
    )

    def __init__(
        self,
        rate_bps: float,
        config: PacerConfig = _DEFAULT_CONFIG,
        now_s: float = 0.0,
        pause: Any = None,
    ):
        if rate_bps <= 0:
            raise ValueError("a port rate must be > 0")
        b = Bucket()
        self.b: Any = b  # a Bucket, or its C twin (move_bucket)
        self._b_owner: Any = None  # what keeps a bucket in C memory alive (move_bucket)
        b.rate_Bps = rate_bps / 8.0
        fb = config.frame_bytes
        b.burst_bytes = max(2.0 * fb, config.burst_s * b.rate_Bps)
        b.tokens = b.burst_bytes  # an idle port may send a burst at once
        b.last_s = now_s
        b.max_data_frames = 0
        self.high: deque[bytes] = deque()
        self.data: deque[bytes] = deque()
        self.data_limit = min(data_limit_frames(rate_bps, config), MAX_DATA_FRAMES)
        self.high_limit = config.high_queue_frames
        self.high_drops = 0
        #: the port's queue of data frames built in C (mrcnic.transport.port_queues.PortQueue), served
        #: after the Python data queue; c_take: how many of them the last take() let go
        self.cq: Any = None
        self.c_take = 0
        #: the port's queue of control frames built in C (served right after the Python
        #: control queue); c_high_take: how many of them the last take() let go
        self.chq: Any = None
        self.c_high_take = 0
        self.lossless: deque[bytes] = deque()
        self.pause: Any = pause  # a PortPause when the port honours PFC

    # the bucket's fields, wherever it lives (tests and stats read them here)
    burst_bytes = property(lambda self: self.b.burst_bytes)
    max_data_frames = property(lambda self: self.b.max_data_frames)

    @property
    def tokens(self) -> float:
        return self.b.tokens

    @tokens.setter
    def tokens(self, value: float) -> None:
        self.b.tokens = value

    def move_bucket(self, b: Any, owner: Any = None) -> None:
        """Keep the bucket in ``b`` from now on (a ``struct mrc_pace_port`` of
        ``mrcnic.io.cpacing``, or a fresh :class:`Bucket`), its values carried over;
        ``owner`` keeps C memory alive while the pacer points into it."""
        old = self.b
        for name in Bucket.__slots__:
            setattr(b, name, getattr(old, name))
        self.b = b
        self._b_owner = owner

    def py_len(self) -> int:
        """Frames in the Python queues (what only this object, not C, can serve)."""
        return len(self.high) + len(self.data) + len(self.lossless)

    def __len__(self) -> int:
        chq = self.chq
        return len(self.high) + (len(chq) if chq is not None else 0) + self.data_len()

    def has_control(self) -> bool:
        chq = self.chq
        return bool(self.high) or (chq is not None and len(chq) > 0)

    def data_len(self) -> int:
        cq = self.cq
        return len(self.data) + len(self.lossless) + (len(cq) if cq is not None else 0)

    def blocking_len(self, now_s: float) -> int:
        """Data frames that hold the transport back: paused lossless frames do not (MRC's
        frames must not wait behind a pause of another class)."""
        n = self.data_len()
        if self.lossless and self.pause.paused(now_s):
            n -= len(self.lossless)
        return n

    def room(self) -> int:
        return self.data_limit - self.data_len()

    def push(self, frame: bytes) -> None:
        if is_control_frame(frame):
            if len(self.high) >= self.high_limit:
                self.high_drops += 1  # never in practice: control frames are few and small
                return
            self.high.append(frame)
        else:
            data = (
                self.lossless if self.pause is not None and is_lossless_frame(frame) else self.data
            )
            data.append(frame)
            if len(data) > self.b.max_data_frames:
                self.b.max_data_frames = len(data)

    def _refill(self, now_s: float) -> None:
        b = self.b
        dt = now_s - b.last_s
        if dt > 0:
            t = b.tokens + dt * b.rate_Bps
            b.tokens = t if t < b.burst_bytes else b.burst_bytes
            b.last_s = now_s

    def take(self, now_s: float) -> list[bytes]:
        """The frames that may leave now, control first: the Python control frames, then
        ``c_high_take`` of the C control queue's, then the Python data frames (returned with
        the control frames), then ``c_take`` of the C data queue's."""
        self._refill(now_s)
        self.c_take = self.c_high_take = 0
        b = self.b
        tokens = b.tokens
        if tokens <= 0:
            return []
        out = []
        high, data = self.high, self.data
        while tokens > 0 and high:
            f = high.popleft()
            tokens -= len(f)
            out.append(f)
        chq = self.chq
        if tokens > 0 and chq is not None and len(chq):
            self.c_high_take, tokens = chq.take(tokens)
        lossless = self.lossless
        if lossless and tokens > 0 and not self.pause.paused(now_s):
            while tokens > 0 and lossless:
                f = lossless.popleft()
                tokens -= len(f)
                out.append(f)
        while tokens > 0 and data:
            f = data.popleft()
            tokens -= len(f)
            out.append(f)
        cq = self.cq
        if tokens > 0 and cq is not None and len(cq):
            self.c_take, tokens = cq.take(tokens)
            n = len(cq)
            if n > b.max_data_frames:
                b.max_data_frames = n
        b.tokens = tokens
        return out

    def due(self, now_s: float) -> list[OutBatch]:
        """What :meth:`take` lets go, as batches in their order on the wire: the C control
        queue's (SACKs and NACKs), the Python frames (control, then data), the C data
        queue's."""
        frames = self.take(now_s)
        out: list[OutBatch] = []
        if self.c_high_take:
            out.append(QueueBatch(self.chq, self.c_high_take))
        if frames:
            out.append(FrameBatch(frames))
        if self.c_take:
            out.append(QueueBatch(self.cq, self.c_take))
        return out

    def next_due(self, now_s: float) -> float | None:
        if not len(self):
            return None
        if self.lossless and len(self) == len(self.lossless) and self.pause.paused(now_s):
            return self.pause.paused_until  # only paused frames wait: when the pause ends
        self._refill(now_s)
        b = self.b
        if b.tokens > 0:
            return now_s
        return now_s + (1e-9 - b.tokens) / b.rate_Bps

    def flush(self) -> int:
        n = len(self.high) + len(self.data) + len(self.lossless)
        self.high.clear()
        self.data.clear()
        self.lossless.clear()
        for q in (self.cq, self.chq):
            if q is not None:
                n += q.clear()
        return n


# -- the shell's loops over its ports (mrcnic.io.aio.AioNic; csrc/mrc_pace.c is their twin) --


def pull_room(ports: Iterable[tuple[PortPacer, bool]], now_s: float) -> int:
    """Whether the shell may pull data from the transport, over ``(pacer, port up)`` pairs:
    1 every live port's data queue has room, 0 a live port's queue is full (the last pull
    stopped there), -1 no live port (nothing to pull for)."""
    live = False
    for pacer, up in ports:
        if up:
            live = True
            if pacer.blocking_len(now_s) >= pacer.data_limit:
                return 0
    return 1 if live else -1


def earliest_due(pacers: Iterable[PortPacer], now_s: float, tick_s: float) -> float | None:
    """When the pacers next want the loop: the earliest due time of a port holding frames,
    where a port with only data waits at least until ``now_s + tick_s`` (the token bucket
    bounds the burst), so the shell does not wake once per data frame; None: all empty."""
    nxt = None
    tick = now_s + tick_s
    for pacer in pacers:
        if not len(pacer):
            continue
        d = pacer.next_due(now_s)
        if d is None:
            continue
        if d < tick and not pacer.has_control():
            d = tick
        if nxt is None or d < nxt:
            nxt = d
    return nxt
