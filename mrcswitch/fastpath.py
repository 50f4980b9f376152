"""Per-batch forwarding mechanics (csrc/mrc_fwd.c) and their pure-Python twins.

The switch decides every frame in Python (:class:`mrcswitch.pipeline.Pipeline`, memoised by
the frame's 54 header bytes) and hands the batch's decision codes to :meth:`Planner.plan`,
which, in C, checks each code against its frame, rewrites the forwarded frames in place in
the receive buffer (hop limit, uSID shift, MACs, cut to the payload length), counts the drops
per reason, and sorts the frames into: sent at once from the receive buffer (per out-port,
while the port's egress is empty and its token bucket covers them: :meth:`Planner.send`),
queued (the rest of a port's frames, in order), or refused (the code does not fit the frame:
the full pipeline decides again from the bytes). C makes no decision: a refusal only
sends the frame back to Python.

With MRC_PURE_PYTHON=1 (or no C module) the twins below do the same in Python; a hypothesis
test checks the two agree byte for byte.
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from collections.abc import Sequence
from functools import partial

from mrcnic.io import batch as batch_io

from .fcache import KEY_LEN, DecisionCache, lookup_py
from .pipeline import OFF_HOP, OFF_L4, rewrite

HDR_LEN = 54
SEND, QUEUE, DROP, REFUSED = 0, 1, 2, 3  # verdicts (csrc/mrc_fwd.h)
WAKE_RES_LEN = 5  # csrc/mrc_fcache.h MRC_WAKE_RES_LEN
_ZERO_HDR = bytes(HDR_LEN)

_mod = batch_io._mod


def keys_py(
    view: memoryview,
    buf_len: int,
    offs: Sequence[int],
    lens: Sequence[int],
    cap: int,
    n: int,
    keys: memoryview,
) -> int:
    """Twin of mrc_fwd_keys."""
    if len(keys) // HDR_LEN < n or any(offs[i] > buf_len for i in range(n)):
        return -errno.EINVAL
    for i in range(n):
        off = offs[i]
        k = min(lens[i], cap, buf_len - off, HDR_LEN)
        at = i * HDR_LEN
        keys[at : at + k] = view[off : off + k]
        keys[at + k : at + HDR_LEN] = _ZERO_HDR[k:]
    return 0


def plan_py(
    view: memoryview,
    buf_len: int,
    offs: Sequence[int],
    lens: memoryview,
    cap: int,
    dec: Sequence[int],
    verdict: memoryview,
    n: int,
    l2: bytes,
    block_bytes: int,
    budget: memoryview,
    port_bytes: memoryview,
    port_count: memoryview,
    port_start: memoryview,
    n_ports: int,
    order: memoryview,
    defer: memoryview,
    hist: memoryview,
    totals: memoryview,
) -> int:
    """Twin of mrc_fwd_plan (same arguments, same results)."""
    hist_len = len(hist)
    if (
        n > 0xFFFF
        or not 0 < n_ports <= 0x10000
        or not 1 <= block_bytes <= 14
        or len(l2) // 12 < n_ports
        or hist_len == 0
    ):
        return -errno.EINVAL
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
            need = HDR_LEN + (view[off + 18] << 8 | view[off + 19])
            if need <= ln:
                if d < 0:
                    if -d < hist_len:
                        v = DROP
                else:
                    port, shift_bytes = d & 0xFFFF, 2 * (d >> 16)
                    if port < n_ports and shift_bytes <= tail and view[off + OFF_HOP] > 1:
                        f = view[off : off + OFF_L4]
                        rewrite(f, d, l2[12 * port : 12 * port + 12], block_bytes)
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
            defer[n_defer] = i
            n_defer += 1
    start = 0
    for p in range(n_ports):
        port_start[p] = start
        start += port_count[p]
    for i in range(n):
        if verdict[i] == SEND:
            p = dec[i] & 0xFFFF
            order[port_start[p]] = i
            port_start[p] += 1
    for p in range(n_ports):
        port_start[p] -= port_count[p]
    totals[0] = rx_bytes
    totals[1] = drops
    return n_defer


def wake_py(
    view: memoryview,
    block_size: int,
    frame_size: int,
    frame_nr: int,
    head: int,
    max_frames: int,
    offs: memoryview,
    lens: memoryview,
    cap: int,
    table: memoryview,
    dec: memoryview,
    verdict: memoryview,
    l2: bytes,
    block_bytes: int,
    budget: memoryview,
    port_bytes: memoryview,
    port_count: memoryview,
    port_start: memoryview,
    n_ports: int,
    order: memoryview,
    defer: memoryview,
    hist: memoryview,
    totals: memoryview,
    fds: Sequence[int],
    port_out: memoryview,
    res: memoryview,
    now_ns: int,
    rate_per_ns: Sequence[float],
    burst: Sequence[int],
    stamp_ns: memoryview,
) -> int:
    """Twin of mrc_fwd_wake (same arguments, same results; one send per frame)."""
    buf_len = len(view)
    if not 0 < n_ports <= 0x10000 or max_frames > 0xFFFF:
        return -errno.EINVAL
    try:
        lookup_py(table, _ZERO_HDR)  # validates the table
    except ValueError:
        return -errno.EINVAL
    n = batch_io.ring_collect_py(view, block_size, frame_size, frame_nr, head, max_frames, offs,
                                 lens)  # fmt: skip
    if n < 0:
        return n
    res[:WAKE_RES_LEN] = array("q", [0] * WAKE_RES_LEN)
    res[0] = n
    if n == 0:
        return 0
    misses = 0
    for i in range(n):
        off = offs[i]
        k = min(lens[i], cap, buf_len - off, KEY_LEN)
        key = bytes(view[off : off + k]) + _ZERO_HDR[k:]
        d = lookup_py(table, key)
        if d is None:
            misses += 1
        else:
            dec[i] = d
    if misses:
        res[1] = misses
        return n
    for p in range(n_ports):
        if budget[p] >= 0 and now_ns > stamp_ns[p]:
            t = float(budget[p]) + float(now_ns - stamp_ns[p]) * rate_per_ns[p]
            budget[p] = int(t) if t < float(burst[p]) else burst[p]
            stamp_ns[p] = now_ns
    n_defer = plan_py(view, buf_len, offs, lens, cap, dec, verdict, n, l2, block_bytes, budget,
                      port_bytes, port_count, port_start, n_ports, order, defer, hist,
                      totals)  # fmt: skip
    if n_defer < 0:
        return n_defer
    res[2] = n_defer
    n_sent_ports = 0
    for p in range(n_ports):
        count = port_count[p]
        if not count:
            continue
        if fds[p] < 0:
            port_out[4 * p : 4 * p + 4] = array("q", [0, count, errno.EBADF, 0])
        else:
            io = [0, 0, 0]
            idx = order[port_start[p] : port_start[p] + count]
            sent = batch_io.send_iov_py(fds[p], view, buf_len, offs, lens, n, idx, io)
            if sent < 0:
                return sent
            port_out[4 * p : 4 * p + 4] = array("q", [sent, *io])
        res[WAKE_RES_LEN + n_sent_ports] = p
        n_sent_ports += 1
    res[4] = n_sent_ports
    if n_defer == 0:
        batch_io.ring_release_py(view, block_size, frame_size, frame_nr, head, n)
        res[3] = 1
    return n


class Planner:
    """Scratch arrays for one batch (at most ``max_batch`` frames) and the calls that fill
    them, in C or in the twins. Read the results through the typed memoryviews: ``dec``,
    ``verdict``, ``order``, ``defer``, ``budget``, ``port_bytes``, ``port_count``,
    ``port_start``, ``hist`` (drops per reason, added to by :meth:`plan`; the caller
    empties it), ``totals`` ([rx bytes, drops] of the last plan), and for :meth:`wake`:
    ``fds`` (set by the caller: each out-port's send socket, -1 if none), ``rate_per_ns``,
    ``burst`` (its token bucket), ``stamp_ns`` (when its budget was set: the caller sets
    it with the budget), ``port_out`` and ``res`` (see csrc/mrc_fcache.h)."""

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
        "totals",
        "fds",
        "port_out",
        "res",
        "rate_per_ns",
        "burst",
        "stamp_ns",
        "_l2",
        "_keys",
        "_keys_view",
        "_structs",
        "_c",
        "_out",
        "_use_c",
    )

    def __init__(
        self,
        l2: Sequence[bytes],
        block_bytes: int,
        max_batch: int,
        hist_len: int,
        *,
        use_c: bool | None = None,
    ) -> None:
        if not l2 or not 0 < max_batch <= 0xFFFF or hist_len <= 0:
            raise ValueError("need ports, 1..65535 frames per batch and a histogram")
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_fwd is not available")
        self.n_ports = len(l2)
        self.max_batch = max_batch
        self.block_bytes = block_bytes
        l2_bytes = b"".join(bytes(x) for x in l2)
        if len(l2_bytes) != 12 * self.n_ports:
            raise ValueError("each l2 header is 12 bytes (Ethernet dst + src)")
        specs = {
            "dec": ("int32_t", "i", max_batch),
            "verdict": ("uint8_t", "B", max_batch),
            "order": ("uint16_t", "H", max_batch),
            "defer": ("uint16_t", "H", max_batch),
            "budget": ("int64_t", "q", self.n_ports),
            "port_bytes": ("int64_t", "q", self.n_ports),
            "port_count": ("uint32_t", "I", self.n_ports),
            "port_start": ("uint32_t", "I", self.n_ports),
            "hist": ("int64_t", "q", hist_len),
            "totals": ("int64_t", "q", 2),
            "fds": ("int32_t", "i", self.n_ports),  # per out-port: its send socket, or -1
            "port_out": ("int64_t", "q", 4 * self.n_ports),
            "res": ("int64_t", "q", WAKE_RES_LEN + self.n_ports),
            "rate_per_ns": ("double", "d", self.n_ports),  # per out-port token bucket
            "burst": ("int64_t", "q", self.n_ports),
            "stamp_ns": ("int64_t", "q", self.n_ports),  # when budget[] was last set
            "_keys": ("uint8_t", "B", HDR_LEN * max_batch),
        }
        self._c = {}
        for name, (ctype, fmt, count) in specs.items():
            if self._use_c:
                c = _mod.ffi.new(f"{ctype}[]", count)
                self._c[name] = c
                view = memoryview(_mod.ffi.buffer(c)).cast(fmt)
            else:
                view = memoryview(array(fmt, bytes(struct.calcsize(fmt) * count)))
            setattr(self, name, view)
        self._keys_view = self._keys.cast("B")
        if self._use_c:
            self._l2 = _mod.ffi.new("uint8_t[]", l2_bytes)
            self._out = _mod.ffi.new("int64_t[3]")
        else:
            self._l2 = l2_bytes
            self._out = [0, 0, 0]
        self._structs: dict[int, struct.Struct] = {}

    def c_arrays(self) -> dict:
        """The C arrays behind the views (and ``l2``), for C code that keeps pointers to
        them (mrcswitch.cloop); the caller keeps this planner alive."""
        if not self._use_c:
            raise RuntimeError("this planner runs the Python twins: it has no C arrays")
        return {**self._c, "l2": self._l2}

    def keys(self, ring, n: int) -> tuple[bytes, ...]:
        """The first 54 bytes of each of the n frames in ``ring`` (zero-filled past a short
        frame's end), the keys of the pipeline's header memo."""
        self._check(ring, n)
        if self._use_c:
            r = _mod.lib.mrc_fwd_keys(
                ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens, ring.cap, n,
                self._c["_keys"], HDR_LEN * self.max_batch,
            )  # fmt: skip
        else:
            r = keys_py(ring.view, ring.buf_len, ring.offs, ring.lens, ring.cap, n, self._keys)
        if r < 0:
            raise ValueError(f"mrc_fwd_keys: {os.strerror(-r)}")
        s = self._structs.get(n)
        if s is None:
            s = self._structs[n] = struct.Struct(f"{HDR_LEN}s" * n)
        return s.unpack_from(self._keys_view)

    def plan(self, ring, n: int) -> int:
        """Apply ``dec[:n]`` to the n frames in ``ring`` (see csrc/mrc_fwd.h); returns how
        many frames ``defer`` lists."""
        self._check(ring, n)
        if self._use_c:
            c = self._c
            r = _mod.lib.mrc_fwd_plan(
                ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens, ring.cap, c["dec"],
                c["verdict"], n, self._l2, 12 * self.n_ports, self.block_bytes, c["budget"],
                c["port_bytes"], c["port_count"], c["port_start"], self.n_ports, c["order"],
                c["defer"], c["hist"], len(self.hist), c["totals"],
            )  # fmt: skip
        else:
            r = plan_py(
                ring.view, ring.buf_len, ring.offs, ring.lens, ring.cap, self.dec,
                self.verdict, n, self._l2, self.block_bytes, self.budget, self.port_bytes,
                self.port_count, self.port_start, self.n_ports, self.order, self.defer,
                self.hist, self.totals,
            )  # fmt: skip
        if r < 0:
            raise ValueError(f"mrc_fwd_plan: {os.strerror(-r)}")
        return r

    def _check(self, ring, n: int) -> None:
        # the C functions take n as the length of every per-frame array
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

    def bind(self, ring) -> tuple:
        """``(keys, plan, send)`` for batches of ``ring``: the calls above with every argument
        that does not change between batches bound once (no per-call checks, attribute or
        dict lookups: at a few thousand frames/s per port, nearly every frame is a batch of
        its own and these costs are per batch). ``keys(n)``, ``plan(n)`` and
        ``send(fd, n, port)`` return what :meth:`keys`, :meth:`plan` and :meth:`send` do.
        ``n`` must come from ``ring.recv`` (at most ``ring.slots``)."""
        if ring.slots > self.max_batch:
            raise ValueError(f"a ring of {ring.slots} slots needs a planner of as many")
        if not self._use_c or ring.ptr is None:
            return (
                lambda n: self.keys(ring, n),
                lambda n: self.plan(ring, n),
                lambda fd, n, port: self.send(fd, ring, n, port),
            )
        lib, c = _mod.lib, self._c
        structs = self._structs
        kview = self._keys_view
        c_keys = partial(lib.mrc_fwd_keys, ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens,
                         ring.cap)  # fmt: skip
        kbuf, klen = c["_keys"], HDR_LEN * self.max_batch

        def keys(n: int) -> tuple[bytes, ...]:
            r = c_keys(n, kbuf, klen)
            if r < 0:
                raise ValueError(f"mrc_fwd_keys: {os.strerror(-r)}")
            s = structs.get(n)
            if s is None:
                s = structs[n] = struct.Struct(f"{HDR_LEN}s" * n)
            return s.unpack_from(kview)

        c_plan = partial(lib.mrc_fwd_plan, ring.ptr, ring.buf_len, ring.c_offs, ring.c_lens,
                         ring.cap, c["dec"], c["verdict"])  # fmt: skip
        plan_rest = (
            self._l2, 12 * self.n_ports, self.block_bytes, c["budget"], c["port_bytes"],
            c["port_count"], c["port_start"], self.n_ports, c["order"], c["defer"], c["hist"],
            len(self.hist), c["totals"],
        )  # fmt: skip

        def plan(n: int) -> int:
            r = c_plan(n, *plan_rest)
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
        if self._use_c:
            c = self._c
            r = _mod.lib.mrc_fwd_wake(
                ring.ptr, ring.buf_len, ring.block_size, ring.frame_size, ring.frame_nr,
                ring.head, ring.slots, ring.c_offs, ring.c_lens, ring.cap, cache.ptr,
                cache.table_len, c["dec"], c["verdict"], self._l2, 12 * self.n_ports,
                self.block_bytes, c["budget"], c["port_bytes"], c["port_count"],
                c["port_start"], self.n_ports, c["order"], c["defer"], c["hist"],
                len(self.hist), c["totals"], c["fds"], c["port_out"], c["res"], now_ns,
                c["rate_per_ns"], c["burst"], c["stamp_ns"],
            )  # fmt: skip
        else:
            r = wake_py(
                ring.view, ring.block_size, ring.frame_size, ring.frame_nr, ring.head,
                ring.slots, ring.offs, ring.lens, ring.cap, cache.view, self.dec, self.verdict,
                self._l2, self.block_bytes, self.budget, self.port_bytes, self.port_count,
                self.port_start, self.n_ports, self.order, self.defer, self.hist, self.totals,
                self.fds, self.port_out, self.res, now_ns, self.rate_per_ns, self.burst,
                self.stamp_ns,
            )  # fmt: skip
        if r < 0:
            raise ValueError(f"mrc_fwd_wake: {os.strerror(-r)}")
        return r

    def bind_wake(self, ring, cache: DecisionCache):
        """:meth:`wake` for ``ring`` and ``cache`` with every fixed argument bound once:
        ``wake(now_ns)`` -> frames collected (C only; the per-wake-up cost is what it is for)."""
        if not self._use_c or ring.ptr is None or cache.ptr is None:
            return lambda now_ns: self.wake(ring, cache, now_ns)
        if ring.slots > self.max_batch:
            raise ValueError(f"a ring of {ring.slots} slots needs a planner of as many")
        c = self._c
        c_wake = _mod.lib.mrc_fwd_wake
        fixed = (ring.ptr, ring.buf_len, ring.block_size, ring.frame_size, ring.frame_nr)
        rest = (
            ring.slots, ring.c_offs, ring.c_lens, ring.cap, cache.ptr, cache.table_len,
            c["dec"], c["verdict"], self._l2, 12 * self.n_ports, self.block_bytes, c["budget"],
            c["port_bytes"], c["port_count"], c["port_start"], self.n_ports, c["order"],
            c["defer"], c["hist"], len(self.hist), c["totals"], c["fds"], c["port_out"],
            c["res"],
        )  # fmt: skip
        bucket = (c["rate_per_ns"], c["burst"], c["stamp_ns"])

        def wake(now_ns: int) -> int:
            r = c_wake(*fixed, ring.head, *rest, now_ns, *bucket)
            if r < 0:
                raise ValueError(f"mrc_fwd_wake: {os.strerror(-r)}")
            return r

        return wake
