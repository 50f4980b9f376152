"""Batched frame I/O over datagram sockets: the C core (csrc/mrc_io.c) and its Python twin.

Two receive paths share one interface (``ptr``/``view``/``buf_len``: the buffer; ``offs``,
``lens``: frame i of the last receive is ``lens[i]`` bytes at ``offs[i]``, a length above
``cap`` meaning it was cut; ``recv(fd)`` -> count or -errno; ``release(n)`` once the frames
are no longer needed):

- ``RecvRing``: a buffer of fixed slots filled by one ``recvmmsg`` per batch;
- ``MmapRing``: a PACKET_MMAP (TPACKET_V2) receive ring the kernel writes into directly
  (no receive system call and no copy on the switch's side; frames stay in the ring until
  released).

``Sender.send`` sends a list of frames with one system call per batch; ``Sender.send_iov``
sends frames in place from a receive buffer (iovecs into it, no copy in user space).
With MRC_PURE_PYTHON=1 (or no C module) the Python twins do the same with one system call
per frame; tests check both agree.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import socket
import struct
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mrcnic.io.afpacket import (
    NETDOWN_ERRNOS,
    PACKET_RX_RING,
    PACKET_VERSION,
    SOL_PACKET,
    TPACKET_V2,
)

MAX_BATCH = 256  # csrc/mrc_io.c MRC_IO_MAX_BATCH


def _load():
    if os.environ.get("MRC_PURE_PYTHON") == "1":
        return None
    try:
        from mrcnic import _mrcfast
    except ImportError:
        return None
    if not hasattr(_mrcfast.lib, "mrc_io_recv_batch"):
        return None
    return _mrcfast


_mod = _load()
BACKEND = "c" if _mod is not None else "python"


def c_module_with(symbol: str):
    """The C module if it is in use and has ``symbol`` (a build older than a new C file has
    not), else None: how each C-backed piece decides between C and its twin."""
    return _mod if _mod is not None and hasattr(_mod.lib, symbol) else None


class RecvRing:
    """A receive ring of ``slots`` frames of ``slot_len`` bytes each."""

    __slots__ = (
        "slot_len",
        "slots",
        "lens",
        "offs",
        "cap",
        "buf_len",
        "ptr",
        "view",
        "c_offs",
        "c_lens",
        "_buf",
        "_view",
        "_c",
        "_c_lens",
        "_use_c",
    )

    def __init__(self, slot_len: int, slots: int, *, use_c: bool | None = None) -> None:
        if not 0 < slots <= MAX_BATCH or slot_len <= 0:
            raise ValueError(f"need 1..{MAX_BATCH} slots of a positive length")
        self.slot_len = slot_len
        self.slots = slots
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_io is not available")
        self.cap = slot_len
        self.buf_len = slot_len * slots
        if self._use_c:
            ffi = _mod.ffi
            self._c = ffi.new("uint8_t[]", slot_len * slots)
            self._c_lens = ffi.new("uint32_t[]", slots)
            self.c_offs = ffi.new("uint32_t[]", [i * slot_len for i in range(slots)])
            self._buf = ffi.buffer(self._c)
            self.lens = memoryview(ffi.buffer(self._c_lens)).cast("I")
            self.offs = memoryview(ffi.buffer(self.c_offs)).cast("I")
        else:
            self._c = self._c_lens = self.c_offs = None
            self._buf = bytearray(slot_len * slots)
            self.lens = memoryview(array("I", bytes(4 * slots)))
            self.offs = memoryview(array("I", [i * slot_len for i in range(slots)]))
        self.ptr = self._c
        self.c_lens = self._c_lens
        self._view = memoryview(self._buf)
        self.view = self._view

    def frame(self, i: int) -> memoryview:
        """Frame i of the last receive (cut to slot_len if it was longer)."""
        off = i * self.slot_len
        return self._view[off : off + min(self.lens[i], self.slot_len)]

    def release(self, n: int) -> None:
        """Nothing to do: the next recv overwrites the slots."""

    def close(self) -> None:
        """Nothing to do: the buffer is plain memory."""

    def recv(self, sock_or_fd: socket.socket | int) -> int:
        """Receive what is waiting, without blocking: the number of frames, or -errno."""
        fd = sock_or_fd if isinstance(sock_or_fd, int) else sock_or_fd.fileno()
        if self._use_c:
            return _mod.lib.mrc_io_recv_batch(
                fd, self._c, self.slot_len * self.slots, self.slot_len, self._c_lens, self.slots
            )
        return self._recv_py(fd)

    def _recv_py(self, fd: int) -> int:
        """Twin of mrc_io_recv_batch: one recv per frame."""
        n = 0
        flags = socket.MSG_DONTWAIT | socket.MSG_TRUNC
        while n < self.slots:
            off = n * self.slot_len
            try:
                # os-level recv_into needs a socket object; build a cheap non-owning one
                got = _recv_into_fd(fd, self._view[off : off + self.slot_len], flags)
            except BlockingIOError:
                break
            except InterruptedError:
                break
            except OSError as exc:
                if n:
                    break  # report the error on the next call, as recvmmsg does
                return -(exc.errno or errno.EIO)
            self.lens[n] = got
            n += 1
        return n


def _recv_into_fd(fd: int, view: memoryview, flags: int) -> int:
    s = socket.socket(fileno=fd)
    try:
        n, _anc, msg_flags, _addr = s.recvmsg_into([view], 0, flags)
    finally:
        s.detach()
    if msg_flags & socket.MSG_TRUNC and n <= len(view):
        return len(view) + 1
    return n


class SendResult:
    __slots__ = ("sent", "failed", "errno")

    def __init__(self, sent: int, failed: int, err: int) -> None:
        self.sent = sent
        self.failed = failed
        self.errno = err


_NETDOWN = NETDOWN_ERRNOS


class Sender:
    """Sends lists of frames with one sendmmsg per batch (C) or one send per frame (twin)."""

    __slots__ = ("_use_c", "_err")

    def __init__(self, *, use_c: bool | None = None) -> None:
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_io is not available")
        # cffi's int32_t[2] (untyped) on the C path, None on the twin's
        self._err: Any = _mod.ffi.new("int32_t[2]") if self._use_c else None

    def send(
        self, sock_or_fd: socket.socket | int, frames: Sequence[bytes | bytearray]
    ) -> SendResult:
        fd = sock_or_fd if isinstance(sock_or_fd, int) else sock_or_fd.fileno()
        if not frames:
            return SendResult(0, 0, 0)
        if self._use_c:
            buf = b"".join(frames)
            lens = array("I", [len(f) for f in frames])
            ffi = _mod.ffi
            r = _mod.lib.mrc_io_send_batch(
                fd,
                ffi.from_buffer("uint8_t[]", buf),
                len(buf),
                ffi.from_buffer("uint32_t[]", lens),
                len(frames),
                self._err,
            )
            if r < 0:
                raise ValueError(f"mrc_io_send_batch: {os.strerror(-r)}")
            return SendResult(r, self._err[0], self._err[1])
        return self._send_py(fd, frames)

    @staticmethod
    def _send_py(fd: int, frames: Sequence[bytes | bytearray]) -> SendResult:
        """Twin of mrc_io_send_batch."""
        sent = failed = err = 0
        s = socket.socket(fileno=fd)
        try:
            for i, f in enumerate(frames):
                try:
                    s.send(f, socket.MSG_DONTWAIT)
                    sent += 1
                except OSError as exc:
                    err = exc.errno or errno.EIO
                    if err in _NETDOWN:
                        failed += len(frames) - i
                        break
                    failed += 1
        finally:
            s.detach()
        return SendResult(sent, failed, err)


def send_iov_py(
    fd: int,
    view: memoryview,
    buf_len: int,
    offs: Sequence[int],
    lens: Sequence[int],
    n_frames: int,
    idx: Sequence[int],
    out: list[int],
) -> int:
    """Twin of mrc_io_send_iov: send frames idx[j] of a batch in place, one send per frame.
    ``out`` receives [failed, errno, bytes sent]; returns the frames sent or -EINVAL."""
    for k in idx:
        if k >= n_frames or offs[k] > buf_len or lens[k] > buf_len - offs[k]:
            return -errno.EINVAL
    out[0] = out[1] = out[2] = 0
    sent = 0
    s = socket.socket(fileno=fd)
    try:
        for j, k in enumerate(idx):
            off = offs[k]
            try:
                s.send(view[off : off + lens[k]], socket.MSG_DONTWAIT)
            except OSError as exc:
                e = exc.errno or errno.EIO
                out[1] = e
                if e in _NETDOWN:
                    out[0] += len(idx) - j
                    break
                out[0] += 1
                continue
            sent += 1
            out[2] += lens[k]
    finally:
        s.detach()
    return sent


# --- PACKET_MMAP receive ring (TPACKET_V2) ------------------------------------------------

# (the socket options are in mrcnic.io.afpacket; this is the ring's memory layout)
TP_STATUS_USER = 1
TP2_HDR_LEN = 32  # sizeof(struct tpacket2_hdr)
# Where the kernel puts the Ethernet header in a TPACKET_V2 slot of a SOCK_RAW socket:
# TPACKET_ALIGN(TPACKET2_HDRLEN 52 + 16) - 14 (net/packet/af_packet.c, tpacket_rcv).
TP2_MAC_OFFSET = 66
_TP2 = struct.Struct("=IIIH")  # tp_status, tp_len, tp_snaplen, tp_mac
_PAGE = mmap.PAGESIZE
_MAX_BLOCK = 1 << 17  # keep kernel allocations small (order <= 5)


def ring_geometry(frame_cap: int, frames: int) -> tuple[int, int, int, int]:
    """(block_size, frame_size, frame_nr, block_nr) of a ring holding at least ``frames``
    frames of up to ``frame_cap`` bytes, with as little waste at block ends as possible."""
    frame_size = (TP2_MAC_OFFSET + frame_cap + 15) & ~15
    best: tuple[float, int, int] | None = None
    for per_block in range(1, 65):
        block = -(-per_block * frame_size // _PAGE) * _PAGE
        if block > _MAX_BLOCK and best is not None:
            break
        waste = (block - per_block * frame_size) / block
        if best is None or waste < best[0] - 1e-9:
            best = (waste, per_block, block)
    assert best is not None
    _, per_block, block = best
    block_nr = -(-frames // per_block)
    return block, frame_size, per_block * block_nr, block_nr


def _ring_geometry_ok(ring_len: int, block_size: int, frame_size: int, frame_nr: int) -> bool:
    if (
        frame_size < TP2_HDR_LEN
        or frame_size % 16
        or block_size % 16
        or block_size < frame_size
        or frame_nr <= 0
        or ring_len > 0xFFFFFFFF
    ):
        return False
    per_block = block_size // frame_size
    return -(-frame_nr // per_block) <= ring_len // block_size


def ring_collect_py(
    view: memoryview,
    block_size: int,
    frame_size: int,
    frame_nr: int,
    start: int,
    max_frames: int,
    offs: memoryview,
    lens: memoryview,
) -> int:
    """Twin of mrc_ring_collect (x86 orders plain loads, so no barrier is needed here)."""
    if not 0 <= start < frame_nr or not _ring_geometry_ok(
        len(view), block_size, frame_size, frame_nr
    ):
        return -errno.EINVAL
    per_block = block_size // frame_size
    n, k = 0, start
    for _ in range(min(max_frames, frame_nr)):
        at = (k // per_block) * block_size + (k % per_block) * frame_size
        status, length, snap, mac = _TP2.unpack_from(view, at)
        if not status & TP_STATUS_USER:
            break
        if mac < TP2_HDR_LEN or mac > frame_size or snap > frame_size - mac:
            offs[n] = at + TP2_HDR_LEN
            lens[n] = frame_size
        else:
            offs[n] = at + mac
            lens[n] = snap if length == snap else max(length, frame_size)
        n += 1
        k = 0 if k + 1 == frame_nr else k + 1
    return n


def ring_release_py(
    view: memoryview, block_size: int, frame_size: int, frame_nr: int, start: int, count: int
) -> int:
    """Twin of mrc_ring_release."""
    if (
        not 0 <= start < frame_nr
        or not 0 <= count <= frame_nr
        or not _ring_geometry_ok(len(view), block_size, frame_size, frame_nr)
    ):
        return -errno.EINVAL
    per_block = block_size // frame_size
    k = start
    for _ in range(count):
        at = (k // per_block) * block_size + (k % per_block) * frame_size
        view[at : at + 4] = b"\0\0\0\0"  # TP_STATUS_KERNEL
        k = 0 if k + 1 == frame_nr else k + 1
    return 0


_libc = ctypes.CDLL(None, use_errno=True)


def _setsockopt_unlocked(sock: socket.socket, level: int, name: int, value: bytes) -> None:
    """``sock.setsockopt`` without the GIL: setting up a ring waits for an RCU grace period
    in the kernel (~10 ms here), which a switch process opening ports in a helper thread
    must not make its forwarding thread wait for (socket.setsockopt keeps the GIL)."""
    buf = ctypes.create_string_buffer(value, len(value))
    if _libc.setsockopt(sock.fileno(), level, name, buf, len(value)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class MmapRing:
    """A PACKET_MMAP (TPACKET_V2) receive ring of an AF_PACKET socket: set it up before
    binding. ``recv`` collects up to ``slots`` frames the kernel has written (no system
    call); they stay valid (and writable, for in-place forwarding) until ``release``."""

    __slots__ = (
        "slots",
        "cap",
        "buf_len",
        "block_size",
        "frame_size",
        "frame_nr",
        "head",
        "ptr",
        "view",
        "offs",
        "lens",
        "c_offs",
        "c_lens",
        "_mm",
        "_use_c",
        "_collect",
        "_release",
    )
    # the C ring calls bound to this ring's geometry (None: the Python twins)
    _collect: Callable[..., int] | None
    _release: Callable[..., int] | None

    def __init__(
        self,
        sock: socket.socket,
        frame_cap: int,
        frames: int,
        slots: int,
        *,
        use_c: bool | None = None,
    ) -> None:
        if not 0 < slots <= MAX_BATCH or frame_cap <= 0 or frames < slots:
            raise ValueError(f"need 1..{MAX_BATCH} slots, a positive frame_cap, frames >= slots")
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_io is not available")
        self.slots = slots
        self.cap = frame_cap
        block, fsize, fnr, bnr = ring_geometry(frame_cap, frames)
        self.block_size, self.frame_size, self.frame_nr = block, fsize, fnr
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
        _setsockopt_unlocked(
            sock, SOL_PACKET, PACKET_RX_RING, struct.pack("IIII", block, bnr, fsize, fnr)
        )
        self.buf_len = block * bnr
        self._mm = mmap.mmap(sock.fileno(), self.buf_len, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)  # fmt: skip
        self.view = memoryview(self._mm)
        self.head = 0
        if self._use_c:
            ffi = _mod.ffi
            self.ptr = ffi.from_buffer("uint8_t[]", self._mm)
            self.c_offs = ffi.new("uint32_t[]", slots)
            self.c_lens = ffi.new("uint32_t[]", slots)
            self.offs = memoryview(ffi.buffer(self.c_offs)).cast("I")
            self.lens = memoryview(ffi.buffer(self.c_lens)).cast("I")
            # the geometry never changes: bind it once (recv runs once per wake-up)
            geometry = (self.ptr, self.buf_len, block, fsize, fnr)
            self._collect = partial(_mod.lib.mrc_ring_collect, *geometry)
            self._release = partial(_mod.lib.mrc_ring_release, *geometry)
        else:
            self.ptr = self.c_offs = self.c_lens = None
            self._collect = self._release = None
            self.offs = memoryview(array("I", bytes(4 * slots)))
            self.lens = memoryview(array("I", bytes(4 * slots)))

    def recv(self, _fd: object = None) -> int:
        """Frames waiting in the ring from the head on (at most ``slots``): their count."""
        if self._collect is not None:
            return self._collect(self.head, self.slots, self.c_offs, self.c_lens)
        return ring_collect_py(
            self.view, self.block_size, self.frame_size, self.frame_nr, self.head, self.slots,
            self.offs, self.lens,
        )  # fmt: skip

    def release(self, n: int) -> None:
        """Hand the first n collected frames back to the kernel and move the head on."""
        if n <= 0:
            return
        if self._release is not None:
            r = self._release(self.head, n)
        else:
            r = ring_release_py(
                self.view, self.block_size, self.frame_size, self.frame_nr, self.head, n
            )
        if r < 0:
            raise ValueError(f"ring release: {os.strerror(-r)}")
        self.head = (self.head + n) % self.frame_nr

    def close(self) -> None:
        if self._use_c and self.ptr is not None:
            self._collect = self._release = None
            _mod.ffi.release(self.ptr)
            self.ptr = None
        self.view.release()
        with contextlib.suppress(BufferError):
            self._mm.close()
