"""The ports' C queues (``csrc/mrc_txq.c``): the frames the C engines build wait in them, per
port and class, until the I/O shell's pacers let them go with ``sendmmsg`` from their slots
(no Python object per frame). ``verbs.Device.attach_port_queues`` makes them; the pacer
(``mrcnic.io.pacing``) serves them next to its Python queues, by the same token rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mrcnic.transport.rx_engine import c_module


@dataclass(frozen=True, slots=True)
class PacerConfig:
    """Per-port pacing: ``burst_s`` of line rate is the token bucket depth (at least two
    frames); the data queue holds ``queue_s`` of line rate (at least ``min_queue_frames``)
    before the NIC stops pulling frames from the transport (:func:`data_limit_frames`).
    The I/O shell's pacer (``mrcnic.io.pacing``, which caps the data queue at
    ``pacing.MAX_DATA_FRAMES``) and the simulator's NIC (``mrcnic.sim.fabric.HostPort``) both
    size their ports by it."""

    burst_s: float = 0.002
    queue_s: float = 0.002
    min_queue_frames: int = 4
    high_queue_frames: int = 512
    frame_bytes: int = 4202  # a full 4096-byte MRC data frame, for sizing the above


def data_limit_frames(rate_bps: float, config: PacerConfig = PacerConfig()) -> int:
    """The data frames a port's queue holds before the NIC stops taking data from the
    transport: ``queue_s`` of the port's rate, at least ``min_queue_frames``."""
    return max(config.min_queue_frames, int(config.queue_s * (rate_bps / 8.0) / config.frame_bytes))


class PortQueues:
    """The ports' C queues, filled in C and drained by the I/O shell's pacers with sendmmsg
    (``csrc/mrc_txq.c``): per port, one for the data frames the C send engine builds (the
    engine writes into ``array[plane]``) and one for the control frames the C receive engine
    builds (``high``: SACKs, NACKs). ``queue(i)`` / ``high_queue(i)`` are port i's
    :class:`PortQueue` objects."""

    HIGH_SLOT = 128  # bytes per control frame slot (a SACK frame is 118)

    def __init__(self, caps: Sequence[int], high_cap: int = 512, slot_len: int = 9344) -> None:
        m = c_module()
        if m is None:
            raise RuntimeError("the C module mrcnic._mrcfast is not available")
        self._ffi = m.ffi
        self._lib = m.lib
        self.slot_len = slot_len
        self.n = len(caps)
        self._keep: list[Any] = []
        self.array = self._make([max(1, c) for c in caps], slot_len)
        self.high = self._make([high_cap] * self.n, self.HIGH_SLOT)
        self.queues = [PortQueue(self, self.array, i) for i in range(self.n)]
        self.high_queues = [PortQueue(self, self.high, i) for i in range(self.n)]

    def _make(self, caps: list[int], slot_len: int) -> Any:
        ffi = self._ffi
        arr = ffi.new("struct mrc_txq[]", len(caps))
        for i, cap in enumerate(caps):
            q = arr[i]
            buf = ffi.new("uint8_t[]", cap * slot_len)
            lens = ffi.new("uint32_t[]", cap)
            self._keep += [buf, lens]
            q.buf, q.len, q.slot_len, q.cap = buf, lens, slot_len, cap
        return arr

    def push_high(self, buf: Any, slot_len: int, lens: Any, planes: Any, n: int) -> None:
        """Control frames from an output array (the receive engine's) to their ports."""
        self._lib.mrc_txq_push_many(self.high, self.n, buf, slot_len, lens, planes, n)


class PortQueue:
    """One port's C-built data frames (see :class:`PortQueues`)."""

    __slots__ = ("_owner", "q", "_tokens", "_res", "_lib")

    def __init__(self, owner: PortQueues, array: Any, i: int) -> None:
        ffi = owner._ffi
        self._owner = owner  # keeps the array alive
        self.q = array + i
        self._tokens = ffi.new("double *")
        self._res = ffi.new("struct mrc_txq_sent *")
        self._lib = owner._lib

    def __len__(self) -> int:
        return self.q.n

    def take(self, tokens: float) -> tuple[int, float]:
        """How many of the first frames ``tokens`` lets go, and the tokens left after them."""
        t = self._tokens
        t[0] = tokens
        k = self._lib.mrc_txq_take(self.q, t)
        return k, t[0]

    def send(self, fd: int, n: int) -> tuple[int, int, int, int]:
        """Send (and drop) the first ``n`` frames: (sent, failed, errno, bytes sent)."""
        r = self._res
        if self._lib.mrc_txq_send(self.q, fd, n, r) < 0:
            raise ValueError(f"mrc_txq_send: {n} frames asked, {self.q.n} queued")
        return r.sent, r.failed, r.err, r.bytes

    def clear(self) -> int:
        return self._lib.mrc_txq_clear(self.q)
