"""A switch's data path: the receive paths (a PACKET_MMAP ring with the one-call C path, or
recvmmsg), the per-batch decisions, the frames sent at once from the receive buffer and the
paced egress queues, with their counters.

Per batch, Python decides every frame (one dict lookup of the pipeline's memo in the common
case) and csrc/mrc_fwd.c applies the decisions in place; frames whose out-port is idle leave
straight from the receive buffer (one sendmmsg per port), the others are copied into the
port's paced egress queue. With a receive ring and the C core, a batch whose decisions
Python already made is one C call (mrc_fwd_wake: the decisions replayed from a C copy of the
memo); Python then only does the counters and the deferred frames. The event loops that
call in here are :class:`mrcswitch.switch.Switch`'s and :class:`mrcswitch.host.SwitchHost`'s.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from array import array
from collections.abc import Callable

from mrcnic.io import afpacket
from mrcnic.io import batch as batch_io

from . import cloop
from .fastpath import QUEUE, Planner
from .fcache import DecisionCache
from .pipeline import TO_SWITCH, DropReason, Pipeline
from .port import BatchContext, Port
from .queue import Verdict

log = logging.getLogger("mrc-switch")

RX_BATCHES_PER_WAKE = 8  # bound the time one busy port can hold the loop
SMALL_BATCH = 4  # up to this many frames, a batch refreshes only the budgets it needs

_NETDOWN = afpacket.NETDOWN_ERRNOS


class DataPath:
    """The ports' frames of one switch: received, decided, sent or queued, counted.

    ``pipeline`` and ``planner`` exist once the ports are open; ``fcaches`` (per in-port
    decision caches) when the one-call path runs; ``cloop`` when the C loop runs.
    ``on_control_frame`` takes the frames addressed to the switch itself (PFC)."""

    def __init__(self, ports: list[Port], max_frame_bytes: int, batch: int) -> None:
        self.ports = ports
        self.ring = batch_io.RecvRing(max_frame_bytes, batch)  # shared by recvmmsg ports
        self.sender = batch_io.Sender()
        self.pipeline: Pipeline | None = None
        self.planner: Planner | None = None
        self.queued: set[Port] = set()  # ports whose egress queue holds frames
        # per in-port: the C copy of the pipeline's header memo (one-call wake-ups, see rx)
        self.fcaches: list[DecisionCache] = []
        self.cloop: cloop.CLoop | None = None  # the C event loop, when it runs
        self.on_control_frame: Callable[[Port, bytearray, int], None] = _no_control
        self._internal_errors_logged = 0

    # --- budgets and link state ------------------------------------------------------
    def refresh_budget(self, p: Port, now: int) -> None:
        """budget = the port's tokens now (-1 if it cannot send at once); mrc_fwd_wake adds
        what the bucket earns from stamp_ns on."""
        pl = self.planner
        if pl is not None:
            ok = p.up and p.tx_sock is not None
            pl.budget[p.index] = p.queue.fast_budget(now) if ok else -1
            pl.stamp_ns[p.index] = p.queue.refilled_ns

    def set_down(self, p: Port, why: str) -> None:
        if p.up:
            p.up = False
            p.link_down_events += 1
            log.info("port %s (%s) down: %s", p.cfg.name, p.cfg.interface, why)
        flushed = p.queue.flush()
        if flushed:
            p.drops.add(DropReason.PORT_DOWN, flushed)
        self.queued.discard(p)
        if self.planner is not None:
            self.planner.budget[p.index] = -1
        if self.cloop is not None:
            self.cloop.sync(p)

    def sock_error(self, p: Port) -> None:
        """EPOLLERR: read (and so clear) the socket's pending error; a receive ring never
        reports it otherwise, and a level-triggered epoll would wake up for it forever."""
        if p.sock is None:
            return
        try:
            err = p.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError as exc:
            err = exc.errno or 0
        if err in _NETDOWN:
            self.set_down(p, os.strerror(err))

    # --- receive ------------------------------------------------------------------------
    def rx(self, p: Port) -> None:
        ring = p.ring
        if ring is None or not self.fcaches:
            self._rx_batches(p)
            return
        # PACKET_MMAP ring and C: one C call per batch (mrc_fwd_wake) collects, looks each
        # frame's decision up in the C copy of the pipeline's memo, applies it, sends what
        # may leave at once and releases the slots. Python runs for misses (the whole batch
        # then takes the path below), deferred frames and counters.
        planner = self.planner
        assert planner is not None
        bound = self._bound_one_call(p, ring)
        wake = bound.wake
        assert wake is not None  # the one-call path is bound with it
        res = planner.res  # struct mrc_fwd_result: what the last wake did
        sent_ports = planner.sent_ports
        ports = self.ports
        queued = self.queued
        monotonic_ns = time.monotonic_ns
        slots = ring.slots
        for _ in range(RX_BATCHES_PER_WAKE):
            now = monotonic_ns()
            if queued:
                for q in tuple(queued):
                    self.tx(q, now)  # what already waits leaves first
            n = wake(now)
            if n <= 0:
                return
            if res.misses:  # a miss: Python decides the batch (and stores the decisions)
                self._forward_batch(p, ring, n, bound, now)
            else:
                self._count_rx(p, n)
                k = res.n_sent_ports
                if k:
                    for j in sent_ports[:k]:
                        self._sent_now(ports[j])
                n_defer = res.n_defer
                if n_defer:
                    try:
                        self._rx_deferred(p, ring, n_defer, now)
                    finally:
                        ring.release(n)
                else:  # mrc_fwd_wake handed the slots back
                    ring.head = (ring.head + n) % ring.frame_nr
            if n < slots:
                return

    def _bound_one_call(self, p: Port, ring) -> BatchContext:
        """``p.bound`` for the one-call path of ``ring`` (rebuilt when the ring changed): with
        ``wake`` and ``insert`` into the port's decision cache."""
        bound = p.bound
        if bound is None or bound.ring is not ring or bound.wake is None:
            planner = self.planner
            assert planner is not None
            cache = self.fcaches[p.index]
            keys, plan, send = planner.bind(ring)
            bound = p.bound = BatchContext(
                ring, keys, plan, send, planner.bind_wake(ring, cache), cache.insert
            )
        return bound

    def _sent_now(self, out: Port) -> None:
        """Account for what mrc_fwd_wake sent on ``out`` (see _send_now)."""
        planner = self.planner
        assert planner is not None
        s = planner.sent[out.index]  # struct mrc_fwd_sent
        self._count_sent(out, s.sent, s.failed, s.err, s.bytes)

    def _count_rx(self, p: Port, n: int) -> None:
        """Account for a planned batch of n frames received on ``p`` (bytes and drops per
        reason from the last plan's ``res``; the histogram is emptied)."""
        planner = self.planner
        assert planner is not None
        res, hist = planner.res, planner.hist
        p.rx_packets += n
        p.rx_bytes += res.rx_bytes
        if res.drops:
            in_drops = p.drops.by_reason
            for r in range(1, len(hist)):
                if hist[r]:
                    in_drops[r] += hist[r]
                    hist[r] = 0

    def _count_sent(self, out: Port, sent: int, failed: int, err: int, nbytes: int) -> None:
        """Account for frames sent at once on ``out`` from the receive buffer (the plan
        took their bytes from its budget: the queue's tokens follow)."""
        planner = self.planner
        assert planner is not None
        out.queue.consume(planner.port_bytes[out.index])
        out.tx_packets += sent
        out.tx_bytes += nbytes
        if failed:
            if err in _NETDOWN:
                out.drops.add(DropReason.PORT_DOWN, failed)
                self.set_down(out, os.strerror(err))  # its budget becomes -1
            else:
                out.drops.add(DropReason.TX_ERROR, failed)

    def _rx_batches(self, p: Port) -> None:
        """The receive loop of the recvmmsg ring (and of the pure-Python build)."""
        ring = p.ring if p.ring is not None else self.ring
        planner = self.planner
        assert planner is not None and p.sock is not None
        bound = p.bound
        if bound is None or bound.ring is not ring:
            bound = p.bound = BatchContext(ring, *planner.bind(ring), None, None)
        fd = p.sock.fileno()
        recv, slots = ring.recv, ring.slots
        monotonic_ns = time.monotonic_ns
        queued = self.queued
        for _ in range(RX_BATCHES_PER_WAKE):
            n = recv(fd)
            if n <= 0:
                if n < 0 and -n in _NETDOWN:
                    self.set_down(p, os.strerror(-n))
                return
            now = monotonic_ns()
            if queued:
                for q in tuple(queued):
                    self.tx(q, now)  # what already waits leaves first
            self._forward_batch(p, ring, n, bound, now)
            if n < slots:
                return

    def _forward_batch(self, p: Port, ring, n: int, bound: BatchContext, now: int) -> None:
        """Decide, apply, send and queue one received batch of n frames, then release it.
        ``bound.insert`` (or None) stores each decision in the C memo of the one-call path."""
        planner = self.planner
        pipe = self.pipeline
        assert planner is not None and pipe is not None
        _, keys_of, plan, send, _wake, insert = bound
        get = pipe.header_cache(p.index).get
        ports = self.ports
        n_ports = len(ports)
        in_idx = p.index
        dec, budget = planner.dec, planner.budget
        port_count = planner.port_count
        # Budgets persist between batches: budget[j] <= port j's tokens (both move by what
        # leaves at once), and -1 while its queue holds frames or it cannot send. A small
        # batch (the common case at a few thousand frames/s: one frame per wake-up) refreshes
        # only the budgets of the ports its frames go to; a big one refreshes every budget
        # that cannot cover a whole batch of the longest frames.
        floor = ring.slots * ring.cap
        try:
            # the per-frame decisions: one lookup each in the pipeline's memo
            keys = keys_of(n)
            if n <= SMALL_BATCH:
                hit: set[int] = set()
                for i, k in enumerate(keys):
                    d = get(k)
                    if d is None:
                        d = self._decide_miss(k, in_idx)
                    dec[i] = d
                    if d >= 0 and (d & 0xFFFF) < n_ports:
                        hit.add(d & 0xFFFF)
                targets: set[int] | range = hit
                for j in targets:
                    self.refresh_budget(ports[j], now)
            else:
                try:
                    dec[:n] = array("i", map(get, keys))  # type: ignore[type-var]  # a None (a miss) raises
                except TypeError:  # a miss (None): decide it
                    dec[:n] = array("i", [self._decide_miss(k, in_idx) for k in keys])
                targets = range(n_ports)
                for j, b in enumerate(budget):
                    if b < floor:
                        self.refresh_budget(ports[j], now)
            if insert is not None:
                for i, k in enumerate(keys):
                    if dec[i] != -DropReason.INTERNAL:  # a bug is not a decision to replay
                        insert(k, dec[i])
            n_defer = plan(n)
            self._count_rx(p, n)
            for j in targets:
                if port_count[j]:
                    self._send_now(ports[j], send, n)
            if n_defer:
                self._rx_deferred(p, ring, n_defer, now)
        finally:
            ring.release(n)

    def _decide_miss(self, key: bytes, in_idx: int) -> int:
        try:
            return self.pipeline.decide_header(key, in_idx)  # type: ignore[union-attr]
        except Exception:  # a bug, never a packet: count it, go on
            self._log_internal()
            return -DropReason.INTERNAL

    def _send_now(self, out: Port, send, n: int) -> None:
        """Send what the plan let ``out`` take at once, in place from the receive buffer
        (``send``: the batch's bound send, see Planner.bind)."""
        assert out.tx_sock is not None
        self._count_sent(out, *send(out.tx_sock.fileno(), n, out.index))

    def _rx_deferred(self, p: Port, ring, n_defer: int, now: int) -> None:
        """Frames the plan did not send: queued ones (already rewritten) are copied into
        their port's egress queue; refused ones go through the whole pipeline."""
        planner = self.planner
        assert planner is not None
        ports = self.ports
        view, offs, lens, cap = ring.view, ring.offs, ring.lens, ring.cap
        verdict, dec = planner.verdict, planner.dec
        in_drops = p.drops.by_reason
        decide = self.pipeline.decide  # type: ignore[union-attr]
        for i in planner.defer[:n_defer]:
            off, ln = offs[i], lens[i]
            if verdict[i] == QUEUE:
                self._enqueue(ports[dec[i] & 0xFFFF], bytearray(view[off : off + ln]), now, p.index)
                continue
            if ln > cap:
                in_drops[DropReason.TOO_BIG] += 1
                continue
            f = bytearray(view[off : off + ln])
            try:
                r = decide(f, p.index)
            except Exception:  # a bug, never a packet: keep forwarding, count it
                r = -DropReason.INTERNAL
                self._log_internal()
            if r == TO_SWITCH:
                self.on_control_frame(p, f, now)
            elif r >= 0:
                self._enqueue(ports[r], f, now, p.index)
            else:
                in_drops[-r] += 1

    def _enqueue(self, out: Port, f: bytearray, now: int, in_port: int = -1) -> None:
        if not out.up:
            out.drops.by_reason[DropReason.PORT_DOWN] += 1
            return
        if out.queue.enqueue(f, now, in_port) is Verdict.DROPPED:
            out.drops.by_reason[DropReason.QUEUE_FULL] += 1
        if len(out.queue):
            self.queued.add(out)
            if self.planner is not None:
                self.planner.budget[out.index] = -1  # newcomers queue behind it

    def _log_internal(self) -> None:
        if self._internal_errors_logged < 10:
            self._internal_errors_logged += 1
            log.exception("internal error in the pipeline (frame dropped)")

    # --- egress -------------------------------------------------------------------------
    def tx(self, p: Port, now_ns: int) -> None:
        """Send what the token bucket allows from a port's queue."""
        q = p.queue
        if not len(q):
            self.queued.discard(p)
            return
        if not p.up or p.tx_sock is None:
            n = q.flush()
            p.drops.add(DropReason.PORT_DOWN, n)
            self.queued.discard(p)
            return
        fd = p.tx_sock.fileno()
        batch = self.ring.slots
        while True:
            frames = q.dequeue(now_ns, batch)
            if not len(q):
                self.queued.discard(p)
                self.refresh_budget(p, now_ns)  # frames may leave at once again
            if not frames:
                return
            res = self.sender.send(fd, frames)
            total = sum(map(len, frames))
            p.tx_packets += res.sent
            if res.failed:
                # which frames failed is not reported: bytes are apportioned
                p.tx_bytes += total * res.sent // len(frames)
                if res.errno in _NETDOWN:
                    p.drops.add(DropReason.PORT_DOWN, res.failed)
                    self.set_down(p, os.strerror(res.errno))
                    return
                p.drops.add(DropReason.TX_ERROR, res.failed)
            else:
                p.tx_bytes += total
            if len(frames) < batch:
                return

    # --- the C loop ---------------------------------------------------------------------
    def c_batch(self, p: Port, why: cloop.Wake, n: int, n_punt: int, now: int) -> None:
        """A batch the C loop handed back: a miss (Python decides the whole batch and stores
        the decisions, so the next one stays in C) or refused frames (Python decides them,
        then releases the batch)."""
        ring = p.ring
        assert ring is not None
        if why is cloop.Wake.MISS:
            self._forward_batch(p, ring, n, self._bound_one_call(p, ring), now)
            return
        try:
            self._rx_deferred(p, ring, n_punt, now)
        finally:
            ring.release(n)

    def sync_fds(self) -> None:
        """Tell the one-call path and the C loop which sockets and rings each port has, and
        whether it is up (after (re)opening, a link change)."""
        if self.planner is not None:
            for p in self.ports:
                self.planner.fds[p.index] = p.tx_sock.fileno() if p.tx_sock is not None else -1
        if self.cloop is not None:
            self.cloop.sync_all()


def _no_control(_p: Port, _f: bytearray, _now: int) -> None:
    """Frames to the switch itself come only with PFC, which sets its own handler."""
