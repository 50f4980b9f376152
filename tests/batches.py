"""Frames handed to a device as the I/O shell hands them over: in receive batches of one ring
(``mrcnic.io.batch.RecvRing``), for the tests that hold the batch path to the per-frame one;
and frames put in a port's C queue as the engines put them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mrcnic.io.aio import RX_SLOT_BYTES as SLOT_BYTES
from mrcnic.io.batch import RecvRing
from mrcnic.transport.rx_engine import c_module
from mrcnic.verbs import Device


def put_frame(q: Any, frame: bytes) -> None:
    """What an engine does: ``frame`` into the next free slot of a port's C queue (``struct
    mrc_txq``, csrc/mrc_txq.h); a full queue takes nothing."""
    if q.n >= q.cap:
        return
    slot = (q.head + q.n) % q.cap
    c_module().ffi.memmove(q.buf + slot * q.slot_len, frame, len(frame))
    q.len[slot] = len(frame)
    q.n += 1
    q.bytes += len(frame)


def fill(ring: RecvRing, frames: Sequence[bytes]) -> None:
    """Put ``frames`` in the first slots of ``ring``, as a receive call would."""
    for i, f in enumerate(frames):
        ring.view[i * SLOT_BYTES : i * SLOT_BYTES + len(f)] = f
        ring.lens[i] = len(f)


def receive_batches(
    dev: Device, frames: Sequence[bytes], now_s: float, per_batch: int = 64
) -> None:
    """Hand ``frames`` to ``dev`` in receive batches of up to ``per_batch`` frames."""
    ring = RecvRing(SLOT_BYTES, max(1, per_batch))
    for start in range(0, len(frames), per_batch):
        got = frames[start : start + per_batch]
        fill(ring, got)
        dev.receive_batch(ring, len(got), now_s)
