"""One switch port: its receive and send sockets (AF_PACKET, a PACKET_MMAP receive ring or
the switch's shared recvmmsg ring), its paced egress queue and its counters (the ``ports``
blocks of the stats document, docs/switch.md)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from mrcnic.io import afpacket, linkstate
from mrcnic.io import batch as batch_io

from .config import LosslessClass, PortConfig
from .cqueue import make_egress_queue
from .pipeline import DropCounter

RCVBUF_BYTES = 4 << 20


class BatchContext(NamedTuple):
    """A port's receive ring bound to the switch's planner (see ``Planner.bind``): the calls
    one received batch goes through, built once per ring and kept in :attr:`Port.bound`."""

    ring: Any  # batch_io.MmapRing or batch_io.RecvRing
    keys: Callable[[int], tuple[bytes, ...]]  # keys(n): the frames' header keys
    plan: Callable[[int], int]  # plan(n): decisions applied; how many frames are deferred
    send: Callable[..., tuple]  # send(fd, n, port): what the plan let that port take at once
    wake: Callable[[int], int] | None  # wake(now_ns): the one-call path (None: without it)
    insert: Callable[[bytes, int], Any] | None  # stores a decision in the port's C memo


class Port:
    """One port: its socket, egress queue and counters."""

    def __init__(
        self, index: int, cfg: PortConfig, lblen: int, ring_frames: int = 0, frame_cap: int = 0,
        batch: int = 0, lossless: LosslessClass | None = None, in_bytes=None,
    ) -> None:  # fmt: skip
        self.index = index
        self.cfg = cfg
        self.sock: socket.socket | None = None  # receives (epoll-registered)
        # sends only: bound with protocol 0 it receives nothing and nobody polls it, so the
        # kernel's "write space" wake-up on every freed frame finds no waiter to call
        self.tx_sock: socket.socket | None = None
        # PACKET_MMAP receive ring of ring_frames frames (0: the switch's shared recvmmsg ring)
        self.ring_frames = ring_frames
        self.frame_cap = frame_cap
        self.batch = batch
        self.ring: batch_io.MmapRing | None = None
        self.bound: BatchContext | None = None
        self.ifindex = 0
        self.mac = cfg.mac
        self.up = False
        self.link_down_events = 0
        # C (mrc_equeue) unless MRC_PURE_PYTHON=1; queue.EgressQueue is its twin
        self.queue = make_egress_queue(
            cfg, lblen, time.monotonic_ns(), frame_cap, lossless, in_bytes
        )
        self.drops = DropCounter()
        self.rx_packets = self.rx_bytes = 0
        self.tx_packets = self.tx_bytes = 0
        self.rx_socket_drops = 0  # frames the kernel dropped before we could read them

    def poll_socket_drops(self) -> None:
        if self.sock is None:
            return
        with contextlib.suppress(OSError):
            self.rx_socket_drops += afpacket.socket_drops(self.sock)

    def open(self) -> None:
        """Open (or reopen) the AF_PACKET sockets bound to the interface."""
        self.close()
        self.bound = None
        name = self.cfg.interface
        rings: list[batch_io.MmapRing] = []

        def add_ring(s: socket.socket) -> None:  # before bind: every frame lands in the ring
            rings.append(batch_io.MmapRing(s, self.frame_cap, self.ring_frames, self.batch))

        s = tx = None
        try:
            s = afpacket.open_rx_socket(
                name, rcvbuf=RCVBUF_BYTES, before_bind=add_ring if self.ring_frames else None
            )
            tx = afpacket.open_tx_socket(name, sndbuf=None)
        except OSError:
            for ring in rings:
                ring.close()
            if s is not None:
                s.close()
            raise
        self.sock = s
        self.tx_sock = tx
        self.ring = rings[0] if rings else None
        self.ifindex = socket.if_nametoindex(name)
        if self.mac is None:
            self.mac = afpacket.hw_address(s)
        self.up = linkstate.link_up(name)

    def close(self) -> None:
        if self.sock is not None:
            self.poll_socket_drops()
            self.bound = None
            if self.ring is not None:
                self.ring.close()
                self.ring = None
            self.sock.close()
            self.sock = None
        if self.tx_sock is not None:
            self.tx_sock.close()
            self.tx_sock = None

    def stats(self) -> dict:
        q = self.queue
        return {
            "interface": self.cfg.interface,
            "peer": self.cfg.peer,
            "up": self.up,
            "link_down_events": self.link_down_events,
            "rx_packets": self.rx_packets,
            "rx_bytes": self.rx_bytes,
            "rx_socket_drops": self.rx_socket_drops,
            "tx_packets": self.tx_packets,
            "tx_bytes": self.tx_bytes,
            "queue_bytes": q.depth_bytes,
            "queue_packets": len(q),
            "max_queue_bytes": q.max_depth_bytes,
            "ecn_marks": q.ecn_marks,
            "trims": q.trims,
            "drops": self.drops.as_dict(),
            "drops_total": self.drops.total,
        }
