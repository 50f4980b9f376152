"""Per-batch forwarding mechanics (csrc/mrc_fwd.c, mrc_fwd_wake in csrc/mrc_fcache.c) and
their pure-Python twins.

The switch decides every frame in Python (:class:`mrcswitch.pipeline.Pipeline`, memoised by
the frame's 54 header bytes) and hands the batch's decision codes to :meth:`Planner.plan`,
which, in C, checks each code against its frame, rewrites the forwarded frames in place in
the receive buffer (hop limit, uSID shift, MACs, cut to the payload length), counts the drops
per reason, and sorts the frames into: sent at once from the receive buffer (per out-port,
while the port's egress is empty and its token bucket covers them: :meth:`Planner.send`),
queued (the rest of a port's frames, in order), or refused (the code does not fit the frame:
the full pipeline decides again from the bytes). C makes no decision: a refusal only
sends the frame back to Python.

Every C call takes two structs built once, not per batch: ``struct mrc_fwd_rx`` (where a
ring's frames are: :class:`FwdRx` is its twin) and ``struct mrc_fwd_batch`` (the planner's
scratch and out-ports, with the results of the last call in ``res``: :class:`FwdBatch`).
With MRC_PURE_PYTHON=1 (or no C module) the twins below do the same in Python on the twin
structs; hypothesis tests check the two agree byte for byte.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from mrcnic.io import batch as batch_io

from .fcache import KEY_LEN, DecisionCache, lookup_py
from .pipeline import OFF_HOP, OFF_L4, rewrite

# csrc/mrc_fwd.h (tests/unit/test_switch_c_constants.py holds each to the C module's value)
HDR_LEN = 54  # MRC_FWD_HDR_LEN
SEND, QUEUE, DROP, REFUSED = 0, 1, 2, 3  # verdicts MRC_FWD_SEND, _QUEUE, _DROP, _REFUSED
OFF_PLEN = 18  # MRC_FWD_OFF_PLEN
L2_LEN = 12  # MRC_FWD_L2_LEN
MAX_BATCH = 0xFFFF  # MRC_FWD_MAX_BATCH
MAX_PORTS = 0x10000  # MRC_FWD_MAX_PORTS
_ZERO_HDR = bytes(HDR_LEN)

_mod = batch_io._mod


# --- the twins of the C structs ----------------------------------------------------------


class FwdRx:
    """Twin of ``struct mrc_fwd_rx``: where a batch's frames are (``buf`` a memoryview)."""

    __slots__ = ("buf", "buf_len", "offs", "lens", "slots", "cap", "block_size", "frame_size",
                 "frame_nr", "table", "table_len")  # fmt: skip
    # memoryviews in the twin (cffi pointers in the C struct it mirrors)
    buf: Any
    offs: Any
    lens: Any
    table: Any
    buf_len: int
    slots: int
    cap: int
    table_len: int
    block_size: int
    frame_size: int
    frame_nr: int

    def __init__(self) -> None:
        self.buf = self.offs = self.lens = self.table = None
        self.buf_len = self.slots = self.cap = self.table_len = 0
        self.block_size = self.frame_size = self.frame_nr = 0


class FwdSent:
    """Twin of ``struct mrc_fwd_sent``: what the send on one out-port did."""

    __slots__ = ("sent", "failed", "err", "bytes")

    def __init__(self, sent: int = 0, failed: int = 0, err: int = 0, nbytes: int = 0) -> None:
        self.sent, self.failed, self.err, self.bytes = sent, failed, err, nbytes


class FwdResult:
    """Twin of ``struct mrc_fwd_result``: what the last plan or wake did."""

    __slots__ = ("n", "misses", "n_defer", "released", "n_sent_ports", "rx_bytes", "drops")
    FIELDS = __slots__

    def __init__(self) -> None:
        self.clear()

    def clear(self, n: int = 0) -> None:
        self.n, self.misses, self.n_defer, self.released = n, 0, 0, 0
        self.n_sent_ports = self.rx_bytes = self.drops = 0


class FwdBatch:
    """Twin of ``struct mrc_fwd_batch`` (arrays are typed memoryviews, ``sent`` a list of
    :class:`FwdSent`, ``l2`` bytes)."""

    __slots__ = ("max_batch", "dec", "verdict", "order", "defer", "n_ports", "l2", "l2_len",
                 "block_bytes", "budget", "port_bytes", "port_count", "port_start", "fds",
                 "rate_per_ns", "burst", "stamp_ns", "sent", "sent_ports", "hist", "hist_len",
                 "res")  # fmt: skip
    # typed memoryviews and lists in the twin (cffi arrays in the C struct it mirrors)
    max_batch: int
    n_ports: int
    l2_len: int
    block_bytes: int
    hist_len: int
    dec: Any
    verdict: Any
    order: Any
    defer: Any
    l2: Any
    budget: Any
    port_bytes: Any
    port_count: Any
    port_start: Any
    fds: Any
    rate_per_ns: Any
    burst: Any
    stamp_ns: Any
    sent: Any
    sent_ports: Any
    hist: Any
    res: Any


def result_fields(res) -> dict[str, int]:
    """A result (``struct mrc_fwd_result`` or its twin) as a dict, to compare or print."""
    return {name: int(getattr(res, name)) for name in FwdResult.FIELDS}


def fill_rx(rx, ring, cache: DecisionCache | None = None, *, slots: int | None = None,
            cap: int | None = None) -> None:  # fmt: skip
    """Point ``rx`` (``struct mrc_fwd_rx`` or :class:`FwdRx`) at ``ring``'s frames (a
    batch_io ring; its geometry if it is a PACKET_MMAP ring) and ``cache``'s table.
    ``slots`` and ``cap`` default to the ring's."""
    twin = isinstance(rx, FwdRx)
    rx.buf = ring.view if twin else ring.ptr
    rx.buf_len = ring.buf_len
    rx.offs = ring.offs if twin else ring.c_offs
    rx.lens = ring.lens if twin else ring.c_lens
    rx.slots = ring.slots if slots is None else slots
    rx.cap = ring.cap if cap is None else cap
    rx.block_size = getattr(ring, "block_size", 0)
    rx.frame_size = getattr(ring, "frame_size", 0)
    rx.frame_nr = getattr(ring, "frame_nr", 0)
    if cache is not None:
        rx.table = cache.view if twin else cache.ptr
        rx.table_len = cache.table_len


# --- the twins of the C functions ---------------------------------------------------------


def _rx_ok(rx: FwdRx, n: int) -> bool:
    return rx.slots <= MAX_BATCH and 0 <= n <= rx.slots


def keys_py(rx: FwdRx, n: int, keys: memoryview) -> int:
    """Twin of mrc_fwd_keys."""
    if not _rx_ok(rx, n) or len(keys) // HDR_LEN < n:
        return -errno.EINVAL
    view, buf_len, offs, lens = rx.buf, rx.buf_len, rx.offs, rx.lens
    if any(offs[i] > buf_len for i in range(n)):
        return -errno.EINVAL
    for i in range(n):
        off = offs[i]
        k = min(lens[i], rx.cap, buf_len - off, HDR_LEN)
        at = i * HDR_LEN
        keys[at : at + k] = view[off : off + k]
        keys[at + k : at + HDR_LEN] = _ZERO_HDR[k:]
    return 0


def _batch_ok(b: FwdBatch, n: int) -> bool:
    return (
        0 <= n <= b.max_batch <= MAX_BATCH
        and 0 < b.n_ports <= MAX_PORTS
        and 1 <= b.block_bytes <= 14
        and b.l2_len // L2_LEN >= b.n_ports
        and b.hist_len > 0
    )


def plan_py(b: FwdBatch, rx: FwdRx, n: int) -> int:
    """Twin of mrc_fwd_plan (same structs, same results)."""
    if not _batch_ok(b, n) or not _rx_ok(rx, n):
        return -errno.EINVAL
    view, buf_len, offs, lens, cap = rx.buf, rx.buf_len, rx.offs, rx.lens, rx.cap
    dec, verdict, budget, hist = b.dec, b.verdict, b.budget, b.hist
    port_bytes, port_count, port_start = b.port_bytes, b.port_count, b.port_start
    n_ports, hist_len, l2, block_bytes = b.n_ports, b.hist_len, b.l2, b.block_bytes
    for p in range(n_ports):
        port_bytes[p] = 0
        port_count[p] = 0
    rx_bytes = drops = n_defer = 0
    tail = 16 - block_bytes
    for i in range(n):
        off, ln, d = offs[i], lens[i], dec[i]
        rx_bytes += ln
        v = REFUSED
        if HDR_LEN <= ln <= cap and off <= buf_len and ln <= buf_len - off:
            need = HDR_LEN + (view[off + OFF_PLEN] << 8 | view[off + OFF_PLEN + 1])
            if need <= ln:
                if d < 0:
                    if -d < hist_len:
                        v = DROP
                else:
                    port, shift_bytes = d & 0xFFFF, 2 * (d >> 16)
                    if port < n_ports and shift_bytes <= tail and view[off + OFF_HOP] > 1:
                        f = view[off : off + OFF_L4]
                        rewrite(f, d, l2[L2_LEN * port : L2_LEN * port + L2_LEN], block_bytes)
                        lens[i] = need
                        if budget[port] >= need:
                            budget[port] -= need
                            port_bytes[port] += need
                            v = SEND
                        else:
                            budget[port] = -1
                            v = QUEUE
        verdict[i] = v
        if v == SEND:
            port_count[d & 0xFFFF] += 1
        elif v == DROP:
            hist[-d] += 1
            drops += 1
        else:
            b.defer[n_defer] = i
            n_defer += 1
    start = 0
    for p in range(n_ports):
        port_start[p] = start
        start += port_count[p]
    for i in range(n):
        if verdict[i] == SEND:
            p = dec[i] & 0xFFFF
            b.order[port_start[p]] = i
            port_start[p] += 1
    for p in range(n_ports):
        port_start[p] -= port_count[p]
    res = b.res
    res.clear(n)
    res.n_defer, res.rx_bytes, res.drops = n_defer, rx_bytes, drops
    return n_defer


def wake_py(b: FwdBatch, rx: FwdRx, head: int, now_ns: int) -> int:
    """Twin of mrc_fwd_wake (same structs, same results; one send per frame)."""
    if not 0 < b.n_ports <= MAX_PORTS or rx.slots > b.max_batch or rx.slots > MAX_BATCH:
        return -errno.EINVAL
    try:
        lookup_py(rx.table, _ZERO_HDR)  # validates the table
    except (ValueError, TypeError):
        return -errno.EINVAL
    view, buf_len, offs, lens = rx.buf, rx.buf_len, rx.offs, rx.lens
    n = batch_io.ring_collect_py(view, rx.block_size, rx.frame_size, rx.frame_nr, head,
                                 rx.slots, offs, lens)  # fmt: skip
    if n < 0:
        return n
    res = b.res
    res.clear(n)
    if n == 0:
        return 0
    misses = 0
    dec, budget, stamp_ns = b.dec, b.budget, b.stamp_ns
    for i in range(n):
        off = offs[i]
        k = min(lens[i], rx.cap, buf_len - off, KEY_LEN)
        key = bytes(view[off : off + k]) + _ZERO_HDR[k:]
        d = lookup_py(rx.table, key)
        if d is None:
            misses += 1
        else:
            dec[i] = d
    if misses:
        res.misses = misses
        return n
    for p in range(b.n_ports):
        if budget[p] >= 0 and now_ns > stamp_ns[p]:
            earned = float(now_ns - stamp_ns[p]) * b.rate_per_ns[p]
            t = float(budget[p]) + earned
            budget[p] = int(t) if t < float(b.burst[p]) else b.burst[p]
            stamp_ns[p] = now_ns
    n_defer = plan_py(b, rx, n)
    if n_defer < 0:
        return n_defer
    n_sent_ports = 0
    for p in range(b.n_ports):
        count = b.port_count[p]
        if not count:
            continue
        out = b.sent[p]
        fd = b.fds[p]
        if fd < 0:
            out.sent, out.failed, out.err, out.bytes = 0, count, errno.EBADF, 0
        else:
            io = [0, 0, 0]
            idx = b.order[b.port_start[p] : b.port_start[p] + count]
            sent = batch_io.send_iov_py(fd, view, buf_len, offs, lens, n, idx, io)
            if sent < 0:
                return sent
            out.sent, out.failed, out.err, out.bytes = sent, *io
        b.sent_ports[n_sent_ports] = p
        n_sent_ports += 1
    res.n_sent_ports = n_sent_ports
    if n_defer == 0:
        batch_io.ring_release_py(view, rx.block_size, rx.frame_size, rx.frame_nr, head, n)
        res.released = 1
    return n


class Planner:
    """Scratch arrays for one batch (at most ``max_batch`` frames) and the calls that fill
    them, in C or in the twins. Read the results through the typed memoryviews: ``dec``,
    ``verdict``, ``order``, ``defer``, ``budget``, ``port_bytes``, ``port_count``,
    ``port_start``, ``hist`` (drops per reason, added to by :meth:`plan`; the caller
    empties it), and the named fields of ``res`` (``struct mrc_fwd_result``: n, n_defer,
    rx_bytes, drops of the last plan; for :meth:`wake` also misses, released,
    n_sent_ports). For :meth:`wake`: ``fds`` (set by the caller: each out-port's send
    socket, -1 if none), ``rate_per_ns``, ``burst`` (its token bucket), ``stamp_ns`` (when
    its budget was set: the caller sets it with the budget); ``sent[p]`` (``struct
    mrc_fwd_sent``: sent, failed, err, bytes) for the out-ports ``sent_ports[:res.n_sent_ports]``
    (see csrc/mrc_fcache.h)."""

    __slots__ = (
        "n_ports",
        "max_batch",
        "block_bytes",
        "dec",
        "verdict",
        "order",
        "defer",
        "budget",
        "port_bytes",
        "port_count",
        "port_start",
        "hist",
        "fds",
        "rate_per_ns",
        "burst",
        "stamp_ns",
        "sent_ports",
        "sent",
        "res",
        "_l2",
        "_keys",
        "_keys_view",
        "_structs",
        "_c",
        "_b",
        "_rx",
        "_out",
        "_use_c",
    )

    # typed memoryviews over the scratch arrays (see the docstring), C or twin alike
    n_ports: int
    max_batch: int
    block_bytes: int
    dec: Any
    verdict: Any
    order: Any
    defer: Any
    budget: Any
    port_bytes: Any
    port_count: Any
    port_start: Any
    hist: Any
    fds: Any
    rate_per_ns: Any
    burst: Any
    stamp_ns: Any
    sent_ports: Any
    sent: Any
    res: Any
    _keys: Any

    def __init__(
        self,
        l2: Sequence[bytes],
        block_bytes: int,
        max_batch: int,
        hist_len: int,
        *,
        use_c: bool | None = None,
    ) -> None:
        if not l2 or not 0 < max_batch <= MAX_BATCH or hist_len <= 0:
            raise ValueError("need ports, 1..65535 frames per batch and a histogram")
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_fwd is not available")
        self.n_ports = n_ports = len(l2)
        self.max_batch = max_batch
        self.block_bytes = block_bytes
        l2_bytes = b"".join(bytes(x) for x in l2)
        if len(l2_bytes) != L2_LEN * n_ports:
            raise ValueError("each l2 header is 12 bytes (Ethernet dst + src)")
        specs = {
            "dec": ("int32_t", "i", max_batch),
            "verdict": ("uint8_t", "B", max_batch),
            "order": ("uint16_t", "H", max_batch),
            "defer": ("uint16_t", "H", max_batch),
            "budget": ("int64_t", "q", n_ports),
            "port_bytes": ("int64_t", "q", n_ports),
            "port_count": ("uint32_t", "I", n_ports),
            "port_start": ("uint32_t", "I", n_ports),
            "hist": ("int64_t", "q", hist_len),
            "fds": ("int32_t", "i", n_ports),  # per out-port: its send socket, or -1
            "rate_per_ns": ("double", "d", n_ports),  # per out-port token bucket
            "burst": ("int64_t", "q", n_ports),
            "stamp_ns": ("int64_t", "q", n_ports),  # when budget[] was last set
            "sent_ports": ("uint32_t", "I", n_ports),
            "_keys": ("uint8_t", "B", HDR_LEN * max_batch),
        }
        self._c = {}
        for name, (ctype, fmt, count) in specs.items():
            if self._use_c:
                c = _mod.ffi.new(f"{ctype}[]", count)
                self._c[name] = c
                view = memoryview(_mod.ffi.buffer(c)).cast(fmt)  # type: ignore[call-overload]  # fmt: a str variable
            else:
                view = memoryview(array(fmt, bytes(struct.calcsize(fmt) * count)))
            setattr(self, name, view)
        self._keys_view = self._keys.cast("B")
        if self._use_c:
            ffi = _mod.ffi
            self._l2 = ffi.new("uint8_t[]", l2_bytes)
            self._out = ffi.new("int64_t[3]")
            self.sent = ffi.new("struct mrc_fwd_sent[]", n_ports)
            b = self._b = ffi.new("struct mrc_fwd_batch *")
            for name in ("dec", "verdict", "order", "defer", "budget", "port_bytes",
                         "port_count", "port_start", "hist", "fds", "rate_per_ns", "burst",
                         "stamp_ns", "sent_ports"):  # fmt: skip
                setattr(b, name, self._c[name])
            b.l2 = self._l2
            b.sent = self.sent
        else:
            self._l2 = l2_bytes
            self._out = [0, 0, 0]
            self.sent = [FwdSent() for _ in range(n_ports)]
            b = self._b = FwdBatch()
            for name in ("dec", "verdict", "order", "defer", "budget", "port_bytes",
                         "port_count", "port_start", "hist", "fds", "rate_per_ns", "burst",
                         "stamp_ns", "sent_ports", "sent"):  # fmt: skip
                setattr(b, name, getattr(self, name))
            b.l2 = l2_bytes
            b.res = FwdResult()
        b.max_batch = max_batch
        b.n_ports = n_ports
        b.l2_len = len(l2_bytes)
        b.block_bytes = block_bytes
        b.hist_len = hist_len
        self.res = b.res  # C: a view of the struct's res (written by every call)
        self._rx: tuple | None = None  # (ring, cache, rx) of the last unbound call
        self._structs: dict[int, struct.Struct] = {}

    def c_batch(self):
        """The ``struct mrc_fwd_batch *`` behind this planner, for C code that copies it
        (mrcswitch.cloop: its pointers stay valid while this planner lives)."""
        if not self._use_c:
            raise RuntimeError("this planner runs the Python twins: it has no C arrays")
        return self._b

    def new_rx(self, ring, cache: DecisionCache | None = None):
        """A ``struct mrc_fwd_rx`` (or its twin) for ``ring`` and ``cache`` (see
        :func:`fill_rx`): build it once per ring, keep ring and cache alive while it is used."""
        rx = _mod.ffi.new("struct mrc_fwd_rx *") if self._use_c else FwdRx()
        fill_rx(rx, ring, cache)
        return rx

    def _rx_of(self, ring, cache: DecisionCache | None = None):
        """The rx struct of the unbound calls below: rebuilt only when ring or cache change."""
        last = self._rx
        if last is None or last[0] is not ring or last[1] is not cache:
            last = self._rx = (ring, cache, self.new_rx(ring, cache))
        return last[2]

    def keys(self, ring, n: int) -> tuple[bytes, ...]:
        """The first 54 bytes of each of the n frames in ``ring`` (zero-filled past a short
        frame's end), the keys of the pipeline's header memo."""
        self._check(ring, n)
        rx = self._rx_of(ring)
        if self._use_c:
            r = _mod.lib.mrc_fwd_keys(rx, n, self._c["_keys"], HDR_LEN * self.max_batch)
        else:
            r = keys_py(rx, n, self._keys)
        if r < 0:
            raise ValueError(f"mrc_fwd_keys: {os.strerror(-r)}")
        s = self._structs.get(n)
        if s is None:
            s = self._structs[n] = struct.Struct(f"{HDR_LEN}s" * n)
        return s.unpack_from(self._keys_view)

    def plan(self, ring, n: int) -> int:
        """Apply ``dec[:n]`` to the n frames in ``ring`` (see csrc/mrc_fwd.h); returns how
        many frames ``defer`` lists (``res`` says the rest)."""
        self._check(ring, n)
        rx = self._rx_of(ring)
        r = _mod.lib.mrc_fwd_plan(self._b, rx, n) if self._use_c else plan_py(self._b, rx, n)
        if r < 0:
            raise ValueError(f"mrc_fwd_plan: {os.strerror(-r)}")
        return r

    def _check(self, ring, n: int) -> None:
        # C checks it too; this says which bound it is
        if not 0 <= n <= min(self.max_batch, ring.slots):
            raise ValueError(f"batch of {n} frames: this planner and ring hold at most "
                             f"{min(self.max_batch, ring.slots)}")  # fmt: skip

    def send(self, fd: int, ring, n: int, port: int) -> tuple[int, int, int, int]:
        """Send the frames :meth:`plan` put in ``order`` for ``port``, in place from the
        ring: (sent, failed, errno of the last failure, bytes sent)."""
        self._check(ring, n)
        if not 0 <= port < self.n_ports:
            raise ValueError(f"no port {port}")
        start, count = self.port_start[port], self.port_count[port]
        if start + count > self.max_batch:
            raise ValueError("port_start/port_count do not fit order[]")
        out = self._out
        if self._use_c:
            sent = _mod.lib.mrc_io_send_iov(
                fd, ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens, n,
                self._c["order"] + start, count, out,
            )  # fmt: skip
        else:
            idx = self.order[start : start + count]
            sent = batch_io.send_iov_py(
                fd, ring.view, ring.buf_len, ring.offs, ring.lens, n, idx, out
            )
        if sent < 0:
            raise ValueError(f"mrc_io_send_iov: {os.strerror(-sent)}")
        return sent, out[0], out[1], out[2]

    def bind(self, ring) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        """``(keys, plan, send)`` for batches of ``ring``: the calls above with every argument
        that does not change between batches bound once (the ring's ``struct mrc_fwd_rx`` is
        built here; no per-call checks, attribute or dict lookups: at a few thousand frames/s
        per port, nearly every frame is a batch of its own and these costs are per batch).
        ``keys(n)``, ``plan(n)`` and ``send(fd, n, port)`` return what :meth:`keys`,
        :meth:`plan` and :meth:`send` do. ``n`` must come from ``ring.recv``."""
        if ring.slots > self.max_batch:
            raise ValueError(f"a ring of {ring.slots} slots needs a planner of as many")
        if not self._use_c or ring.ptr is None:
            return (
                lambda n: self.keys(ring, n),
                lambda n: self.plan(ring, n),
                lambda fd, n, port: self.send(fd, ring, n, port),
            )
        lib, c = _mod.lib, self._c
        rx = self.new_rx(ring)  # the closures below keep it (and ring) alive
        structs = self._structs
        kview = self._keys_view
        c_keys = partial(lib.mrc_fwd_keys, rx)
        kbuf, klen = c["_keys"], HDR_LEN * self.max_batch

        def keys(n: int) -> tuple[bytes, ...]:
            r = c_keys(n, kbuf, klen)
            if r < 0:
                raise ValueError(f"mrc_fwd_keys: {os.strerror(-r)}")
            s = structs.get(n)
            if s is None:
                s = structs[n] = struct.Struct(f"{HDR_LEN}s" * n)
            return s.unpack_from(kview)

        c_plan = partial(lib.mrc_fwd_plan, self._b, rx)

        def plan(n: int) -> int:
            r = c_plan(n)
            if r < 0:
                raise ValueError(f"mrc_fwd_plan: {os.strerror(-r)}")
            return r

        send_iov = lib.mrc_io_send_iov
        ptr, buf_len, c_offs, c_lens = ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens
        order, port_start, port_count, out = c["order"], self.port_start, self.port_count, self._out

        def send(fd: int, n: int, port: int) -> tuple[int, int, int, int]:
            start = port_start[port]
            sent = send_iov(fd, ptr, buf_len, c_offs, c_lens, n, order + start if start else order,
                            port_count[port], out)  # fmt: skip
            if sent < 0:
                raise ValueError(f"mrc_io_send_iov: {os.strerror(-sent)}")
            return sent, out[0], out[1], out[2]

        return keys, plan, send

    def wake(self, ring, cache: DecisionCache, now_ns: int) -> int:
        """One wake-up of a PACKET_MMAP ``ring`` (an :class:`batch_io.MmapRing`) with the
        decisions in ``cache``: collect, look up, :meth:`plan`, send, release (see
        mrc_fwd_wake in csrc/mrc_fcache.h). Returns the frames collected; ``res`` says
        what happened. Does not move ``ring.head``: the caller does, when released."""
        if ring.slots > self.max_batch:
            raise ValueError(f"a ring of {ring.slots} slots needs a planner of as many")
        rx = self._rx_of(ring, cache)
        if self._use_c:
            r = _mod.lib.mrc_fwd_wake(self._b, rx, ring.head, now_ns)
        else:
            r = wake_py(self._b, rx, ring.head, now_ns)
        if r < 0:
            raise ValueError(f"mrc_fwd_wake: {os.strerror(-r)}")
        return r

    def bind_wake(self, ring, cache: DecisionCache):
        """:meth:`wake` for ``ring`` and ``cache`` with their ``struct mrc_fwd_rx`` built
        once: ``wake(now_ns)`` -> frames collected (C only; the per-wake-up cost is what it
        is for)."""
        if not self._use_c or ring.ptr is None or cache.ptr is None:
            return lambda now_ns: self.wake(ring, cache, now_ns)
        if ring.slots > self.max_batch:
            raise ValueError(f"a ring of {ring.slots} slots needs a planner of as many")
        c_wake = partial(_mod.lib.mrc_fwd_wake, self._b, self.new_rx(ring, cache))

        def wake(now_ns: int) -> int:
            r = c_wake(ring.head, now_ns)
            if r < 0:
                raise ValueError(f"mrc_fwd_wake: {os.strerror(-r)}")
            return r

        return wake
