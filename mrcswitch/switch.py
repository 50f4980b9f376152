"""mrc-switch: one software uSID switch in the current network namespace.

``mrc-switch --config FILE`` opens one AF_PACKET socket per configured port, forwards with
:mod:`mrcswitch.pipeline`, queues and paces with :mod:`mrcswitch.queue`, and publishes its
counters as a JSON file (``stats_path``, rewritten atomically at least every second; it
says ``"ready": true`` once every port is open) and optionally on a unix socket
(``control_socket``: connect, read one JSON document, done). SIGTERM or SIGINT stops it
cleanly; starting it again with the same config is a switch reboot. A port whose link goes
down (ENETDOWN, or no carrier) is counted and skipped, and used again when it comes back.

The loop is single-threaded: epoll over the port sockets, a signal wake-up pipe, the
control socket and netlink link notifications (:mod:`mrcnic.io.linkstate`; a SIOCGIFFLAGS
probe every ``LINK_PROBE_INTERVAL_S`` is the fallback). Each port receives into a
PACKET_MMAP ring (or with recvmmsg, see ``rx_ring``); per batch, Python decides every frame
(one dict lookup of the pipeline's memo in the common case) and csrc/mrc_fwd.c applies the
decisions in place; frames whose out-port is idle leave straight from the receive buffer
(one sendmmsg per port), the others are copied into the port's paced egress queue. With a
receive ring and the C core, a batch whose decisions Python already made is one C call
(mrc_fwd_wake: the decisions replayed from a C copy of the memo); Python then only does the
counters and the deferred frames.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import select
import signal
import socket
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path

from mrcnic.io import afpacket, linkstate
from mrcnic.io import batch as batch_io
from mrcnic.io.netns import in_netns

from . import cloop
from .config import ConfigError, PortConfig, SwitchConfig, load_config
from .cqueue import make_egress_queue, new_flags, new_in_bytes
from .fastpath import QUEUE, Planner
from .fcache import DecisionCache
from .pfc import SwitchPfc
from .pipeline import TO_SWITCH, DropCounter, DropReason, Pipeline
from .queue import LosslessClass, Verdict
from .statsfile import StatsWriter, write_atomic
from .table import build_table

log = logging.getLogger("mrc-switch")

LINK_PROBE_INTERVAL_S = 0.2  # the SIOCGIFFLAGS fallback (netlink notifications come first)
RX_BATCHES_PER_WAKE = 8  # bound the time one busy port can hold the loop
SMALL_BATCH = 4  # up to this many frames, a batch refreshes only the budgets it needs
RCVBUF_BYTES = 4 << 20
_NEVER = 1 << 62  # a due time that never comes
TIMER_SLACK_NS = 100_000  # C loop: a paced send may leave this late (fewer timer wake-ups)
# C loop: after a wake-up by frames, sleep this long before looking again instead of being
# woken by each frame (bounded receive coalescing; adds at most this much latency per
# wake-up). MRC_SWITCH_HOLD_US overrides it; 0 = off.
DEFAULT_HOLD_US = 0.0


def hold_ns_from_env() -> int:
    """``MRC_SWITCH_HOLD_US`` (microseconds, 0..1e6) as nanoseconds, else the default."""
    text = os.environ.get("MRC_SWITCH_HOLD_US", "")
    try:
        us = float(text) if text else DEFAULT_HOLD_US
    except ValueError:
        us = DEFAULT_HOLD_US
    return int(min(max(us, 0.0), 1e6) * 1000)


_NETDOWN = afpacket.NETDOWN_ERRNOS
_EPOLLERR = select.EPOLLERR


def _mac_text(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def stop_signals_wake(ep: select.epoll, handler: object) -> tuple[int, int]:
    """SIGTERM and SIGINT call ``handler`` and wake ``ep``: the read end of a wake-up pipe is
    registered with it. Returns the pipe (read end, write end)."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)  # type: ignore[arg-type]
    ep.register(r, select.EPOLLIN)
    return r, w


def listen_unix(path: str) -> socket.socket:
    """A non-blocking Unix stream socket listening at ``path`` (replacing a stale one)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    s.setblocking(False)
    return s


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
        self.bound: tuple | None = None  # (rx ring, *Planner.bind(rx ring))
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


class Switch:
    """One switch. Alone (``mrc-switch --config FILE``) it owns its epoll set and runs its
    own loop (:meth:`run`); hosted by :class:`mrcswitch.host.SwitchHost` it registers its
    fds in the host's ``epoll`` (and ``owners``: fd -> this switch) and the host drives it
    (:meth:`start`, the ``on_*`` handlers, :meth:`tick`, :meth:`finish`)."""

    def __init__(
        self, cfg: SwitchConfig, config_path: str = "", *, epoll: select.epoll | None = None,
        owners: dict | None = None, hold_ns: int | None = None,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.config_path = config_path
        self.table = build_table(cfg)
        batch = min(cfg.batch_size, batch_io.MAX_BATCH)
        ring_frames = max(cfg.rx_ring_frames, batch) if cfg.rx_ring_frames else 0
        n = len(cfg.ports)
        # PFC: the lossless class in every queue, its bytes summed per in-port (docs/pfc.md)
        self.pfc: SwitchPfc | None = None
        lossless = in_bytes = None
        if cfg.pfc is not None:
            in_bytes = new_in_bytes(n)
            lossless = cfg.pfc.lossless_class(n)
            self.pfc = SwitchPfc(cfg.pfc, [p.rate_bps for p in cfg.ports], in_bytes, new_flags(n))
        self._pfc_due = _NEVER
        self.ports = [
            Port(i, p, cfg.lblen, ring_frames, cfg.max_frame_bytes, batch, lossless, in_bytes)
            for i, p in enumerate(cfg.ports)
        ]
        self.ring = batch_io.RecvRing(cfg.max_frame_bytes, batch)
        self.sender = batch_io.Sender()
        self.pipeline: Pipeline | None = None
        self.planner: Planner | None = None
        self.started_unix = time.time()
        self.ready = False
        self._stop = False
        self.hosted = epoll is not None
        self._ep = epoll if epoll is not None else select.epoll()
        self._owners = owners if owners is not None else {}
        self.hold_ns = hold_ns_from_env() if hold_ns is None else hold_ns
        self._host_counters = None  # hosted: the process's loop counters (a callable)
        self._ioctl: socket.socket | None = None  # link flags, in the switch's namespace
        self._probe_due = self._stats_due = 0
        self._by_fd: dict[int, Port] = {}
        self._wake_r = self._wake_w = -1
        self._ctl: socket.socket | None = None
        self._writer: StatsWriter | None = None
        self._queued: set[Port] = set()  # ports whose egress queue holds frames
        # per in-port: the C copy of the pipeline's header memo (one-call wake-ups, see _rx)
        self._fcaches: list[DecisionCache] = []
        self._cloop: cloop.CLoop | None = None  # the C event loop, when it runs
        self._internal_errors_logged = 0
        self._links: linkstate.LinkWatcher | None = None  # netlink link notifications
        self._link_events = 0  # notifications that named a port

    # --- set-up -------------------------------------------------------------------------
    def _in_ns(self) -> contextlib.AbstractContextManager:
        """The body runs in the switch's namespace (``netns`` of the config), if it has one:
        sockets opened there stay there."""
        return in_netns(self.cfg.netns) if self.cfg.netns else contextlib.nullcontext()

    def _watch(self, fd: int) -> None:
        self._ep.register(fd, select.EPOLLIN)
        self._owners[fd] = self

    def open_ports(self) -> None:
        try:
            with self._in_ns():
                self._open_ports()
        except OSError as exc:  # NetnsError: the namespace is missing
            raise ConfigError("netns", str(exc)) from None

    def prepare_ports(self) -> None:
        """Open the ports' sockets and rings and nothing else: safe in a helper thread (it
        touches only the ports), so that a process serving other switches keeps forwarding
        while the kernel sets up the rings (an RCU grace period each). :meth:`open_ports`
        then registers them; a port that could not open is retried (and named) there."""
        with contextlib.suppress(OSError), self._in_ns():
            for p in self.ports:
                with contextlib.suppress(OSError):
                    p.open()

    def _open_ports(self) -> None:
        self._ioctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # Link notifications before the ports: no change after a port's check at open is missed.
        self._links = linkstate.LinkWatcher.open()
        if self._links is not None:
            self._watch(self._links.fileno())
        for i, p in enumerate(self.ports):
            if p.sock is None:  # not opened by prepare_ports
                try:
                    p.open()
                except OSError as exc:
                    raise ConfigError(
                        f"ports[{i}].interface",
                        f"cannot open {p.cfg.interface!r}: {exc.strerror}",
                    ) from None
            else:  # a change of the link between prepare_ports and here is not missed
                p.up = linkstate.link_up(p.cfg.interface)
            self._register(p)
        self.pipeline = Pipeline(
            self.table,
            [p.mac for p in self.ports],
            [p.cfg.peer_mac for p in self.ports],
            [p.cfg.source_prefix for p in self.ports],
            mac_control=self.pfc is not None,
        )
        self.planner = Planner(
            self.pipeline.l2_headers,
            self.pipeline.block_bytes,
            self.ring.slots,
            max(DropReason) + 1,
        )
        # MRC_SWITCH_ONE_CALL=0: the per-batch Python path only (for comparisons)
        if batch_io.BACKEND == "c" and os.environ.get("MRC_SWITCH_ONE_CALL", "1") != "0":
            self._fcaches = [DecisionCache() for _ in self.ports]
        now = time.monotonic_ns()
        for p in self.ports:
            self.planner.rate_per_ns[p.index] = p.queue.rate_per_ns
            self.planner.burst[p.index] = p.queue.burst_bytes
            self._refresh_budget(p, now)
        # MRC_SWITCH_C_LOOP=0: the Python loop (the C loop's twin) even where C could run it
        if (
            self._fcaches
            and self.cfg.rx_ring_frames
            and cloop.available()
            and os.environ.get("MRC_SWITCH_C_LOOP", "1") != "0"
            and all(getattr(p.queue, "ptr", None) is not None for p in self.ports)
        ):
            self._cloop = cloop.CLoop(
                self._ep.fileno(), self.ports, self._fcaches, self.planner,
                slots=min(p.ring.slots for p in self.ports if p.ring is not None),
                cap=self.cfg.max_frame_bytes, hist_len=max(DropReason) + 1,
                batches_per_wake=RX_BATCHES_PER_WAKE, timer_slack_ns=TIMER_SLACK_NS,
                reasons=(DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR),
                hold_ns=self.hold_ns, pfc=self.pfc,
            )  # fmt: skip
        self._sync_fds()

    def _sync_fds(self) -> None:
        """Tell the one-call path and the C loop which sockets and rings each port has, and
        whether it is up (after (re)opening, a link change)."""
        if self.planner is not None:
            for p in self.ports:
                self.planner.fds[p.index] = p.tx_sock.fileno() if p.tx_sock is not None else -1
        if self._cloop is not None:
            self._cloop.sync_all()

    def _refresh_budget(self, p: Port, now: int) -> None:
        """budget = the port's tokens now (-1 if it cannot send at once); mrc_fwd_wake adds
        what the bucket earns from stamp_ns on."""
        pl = self.planner
        if pl is not None:
            ok = p.up and p.tx_sock is not None
            pl.budget[p.index] = p.queue.fast_budget(now) if ok else -1
            pl.stamp_ns[p.index] = p.queue.refilled_ns

    def _register(self, p: Port) -> None:
        assert p.sock is not None
        fd = p.sock.fileno()
        self._watch(fd)
        self._by_fd[fd] = p

    def _unregister(self, p: Port) -> None:
        if p.sock is not None:
            fd = p.sock.fileno()
            self._by_fd.pop(fd, None)
            self._unwatch(fd)

    def _unwatch(self, fd: int) -> None:
        if self._owners.get(fd) is self:
            del self._owners[fd]
        with contextlib.suppress(OSError):
            self._ep.unregister(fd)

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = stop_signals_wake(self._ep, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        self._stop = True

    def _open_control(self) -> None:
        path = self.cfg.control_socket
        if not path:
            return
        self._ctl = listen_unix(path)
        self._watch(self._ctl.fileno())

    def _serve_control(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                conn, _ = self._ctl.accept()
            except (BlockingIOError, InterruptedError):
                return
            try:
                conn.settimeout(0.5)
                conn.sendall(json.dumps(self.stats()).encode() + b"\n")
            except OSError:
                pass
            finally:
                conn.close()

    # --- counters -----------------------------------------------------------------------
    def stats(self) -> dict:
        if self._cloop is not None:
            self._cloop.fold()
        for p in self.ports:
            p.poll_socket_drops()
        ports = {p.cfg.name: p.stats() for p in self.ports}
        pfc_total = None
        if self.pfc is not None:
            pfc_total = {"pause_tx": 0, "pause_rx": 0, "paused_s": 0.0, "lossless_drops": 0,
                         "watchdog_trips": 0}  # fmt: skip
            for p in self.ports:
                block = self.pfc.port_stats(p.index, p.queue.lossless_drops)
                ports[p.cfg.name]["pfc"] = block
                for k in pfc_total:
                    pfc_total[k] += block[k]
            pfc_total["paused_s"] = round(pfc_total["paused_s"], 6)
        drops: dict[str, int] = {r.key: 0 for r in DropReason}
        for ps in ports.values():
            for k, v in ps["drops"].items():
                drops[k] += v
        ru = resource.getrusage(resource.RUSAGE_SELF)
        try:
            with open("/proc/self/statm") as fh:
                rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            rss = 0
        now = time.time()
        return {
            "name": self.cfg.name,
            "pid": os.getpid(),
            "ready": self.ready,
            "config": self.config_path,
            "io_backend": batch_io.BACKEND,
            "rx_path": "mmap" if self.cfg.rx_ring_frames else "recvmmsg",
            # "c_loop": the C event loop (mrc_sw_poll) runs the common case; "one_call": a
            # batch is one mrc_fwd_wake; "batch": Python decides each batch
            "fwd_path": self._fwd_path(),
            "queue_backend": "c" if getattr(self.ports[0].queue, "ptr", None) else "python",
            # the C loop's wake-ups: by arriving frames and by paced sends' timers
            # (a process serving several switches: its wake-ups, shared by all of them, with
            # this switch's own "port_wakeups" and "switches_in_process")
            "c_loop": self._c_loop_counters(),
            # netlink link notifications (None: none, only the SIOCGIFFLAGS probe): how many
            # named a port, how often the kernel dropped some
            "link_watch": {"port_events": self._link_events, "overflows": self._links.overflows}
            if self._links is not None
            else None,
            "started_unix": self.started_unix,
            "updated_unix": now,
            "uptime_s": now - self.started_unix,
            "cpu_user_s": ru.ru_utime,
            "cpu_system_s": ru.ru_stime,
            "rss_bytes": rss,
            "table_entries": len(self.table),
            "totals": {
                "rx_packets": sum(p.rx_packets for p in self.ports),
                "rx_bytes": sum(p.rx_bytes for p in self.ports),
                "rx_socket_drops": sum(p.rx_socket_drops for p in self.ports),
                "tx_packets": sum(p.tx_packets for p in self.ports),
                "tx_bytes": sum(p.tx_bytes for p in self.ports),
                "ecn_marks": sum(p.queue.ecn_marks for p in self.ports),
                "trims": sum(p.queue.trims for p in self.ports),
                "drops": drops,
                "drops_total": sum(drops.values()),
                # priority flow control (docs/switch.md): only on a switch with "pfc"
                **({"pfc": pfc_total} if pfc_total is not None else {}),
            },
            "ports": ports,
        }

    def _c_loop_counters(self) -> dict | None:
        if self._cloop is None:
            return None
        own = self._cloop.counters()
        if self._host_counters is None:
            return own
        return {**self._host_counters(), "port_wakeups": own["port_wakeups"]}

    def _fwd_path(self) -> str:
        if self._cloop is not None:
            return "c_loop"
        return "one_call" if self._fcaches and self.cfg.rx_ring_frames else "batch"

    def write_stats(self, *, sync: bool = False) -> None:
        """Refresh the stats file: from the writer thread while running (see statsfile.py),
        synchronously before the loop starts and at exit."""
        path = self.cfg.stats_path
        if not path:
            return
        data = json.dumps(self.stats(), separators=(",", ":")).encode()
        if sync or self._writer is None:
            if self._writer is not None:
                self._writer.close(data)  # pending writes first, this one last
                self._writer = None
            else:
                write_atomic(path, data)
        else:
            self._writer.submit(data)

    # --- links --------------------------------------------------------------------------
    def _set_down(self, p: Port, why: str) -> None:
        if p.up:
            p.up = False
            p.link_down_events += 1
            log.info("port %s (%s) down: %s", p.cfg.name, p.cfg.interface, why)
        flushed = p.queue.flush()
        if flushed:
            p.drops.add(DropReason.PORT_DOWN, flushed)
        self._queued.discard(p)
        if self.planner is not None:
            self.planner.budget[p.index] = -1
        if self._cloop is not None:
            self._cloop.sync(p)

    def _on_link_events(self) -> None:
        """Netlink link notifications: when one names a port (or some were lost), check the
        ports now rather than at the next probe."""
        assert self._links is not None
        events, lost = self._links.read()
        names = {p.cfg.interface for p in self.ports}
        indexes = {p.ifindex for p in self.ports}
        mine = sum(1 for ev in events if ev.ifname in names or ev.ifindex in indexes)
        self._link_events += mine
        if mine or lost:
            self.probe_links()

    def probe_links(self) -> None:
        for p in self.ports:
            flags = linkstate.link_flags(p.cfg.interface, self._ioctl)
            up = linkstate.flags_up(flags)
            if not up:
                if p.up:
                    self._set_down(p, "link down" if flags is not None else "interface gone")
                continue
            if p.up:
                continue
            try:
                with self._in_ns():
                    ifindex = socket.if_nametoindex(p.cfg.interface)
            except OSError:
                continue
            if p.sock is None or ifindex != p.ifindex:
                # the interface was re-created: the old socket is bound to a dead ifindex
                self._unregister(p)
                try:
                    with self._in_ns():
                        p.open()
                except OSError as exc:
                    log.warning("port %s: reopen failed: %s", p.cfg.name, exc)
                    self._sync_fds()  # its old send socket is closed
                    continue
                self._register(p)
                self._sync_fds()
            p.up = True
            self._refresh_budget(p, time.monotonic_ns())
            if self._cloop is not None:
                self._cloop.sync(p)
            log.info("port %s (%s) up", p.cfg.name, p.cfg.interface)

    # --- data path ----------------------------------------------------------------------
    def _sock_error(self, p: Port) -> None:
        """EPOLLERR: read (and so clear) the socket's pending error; a receive ring never
        reports it otherwise, and a level-triggered epoll would wake up for it forever."""
        if p.sock is None:
            return
        try:
            err = p.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError as exc:
            err = exc.errno or 0
        if err in _NETDOWN:
            self._set_down(p, os.strerror(err))

    def _rx(self, p: Port) -> None:
        ring = p.ring
        if ring is None or not self._fcaches:
            self._rx_batches(p)
            return
        # PACKET_MMAP ring and C: one C call per batch (mrc_fwd_wake) collects, looks each
        # frame's decision up in the C copy of the pipeline's memo, applies it, sends what
        # may leave at once and releases the slots. Python runs for misses (the whole batch
        # then takes the path below), deferred frames and counters.
        planner = self.planner
        assert planner is not None
        bound = self._bound_one_call(p, ring)
        wake = bound[4]
        res = planner.res  # struct mrc_fwd_result: what the last wake did
        sent_ports = planner.sent_ports
        ports = self.ports
        queued = self._queued
        monotonic_ns = time.monotonic_ns
        slots = ring.slots
        for _ in range(RX_BATCHES_PER_WAKE):
            now = monotonic_ns()
            if queued:
                for q in tuple(queued):
                    self._tx(q, now)  # what already waits leaves first
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

    def _bound_one_call(self, p: Port, ring) -> tuple:
        """``p.bound`` for the one-call path of ``ring`` (rebuilt when the ring changed):
        (ring, keys, plan, send, wake, insert into the port's decision cache)."""
        bound = p.bound
        if bound is None or bound[0] is not ring or bound[4] is None:
            planner = self.planner
            assert planner is not None
            cache = self._fcaches[p.index]
            bound = p.bound = (ring, *planner.bind(ring), planner.bind_wake(ring, cache),
                               cache.insert)  # fmt: skip
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
                self._set_down(out, os.strerror(err))  # its budget becomes -1
            else:
                out.drops.add(DropReason.TX_ERROR, failed)

    def _rx_batches(self, p: Port) -> None:
        """The receive loop of the recvmmsg ring (and of the pure-Python build)."""
        ring = p.ring if p.ring is not None else self.ring
        planner = self.planner
        assert planner is not None and p.sock is not None
        bound = p.bound
        if bound is None or bound[0] is not ring:
            bound = p.bound = (ring, *planner.bind(ring), None, None)
        fd = p.sock.fileno()
        recv, slots = ring.recv, ring.slots
        monotonic_ns = time.monotonic_ns
        queued = self._queued
        for _ in range(RX_BATCHES_PER_WAKE):
            n = recv(fd)
            if n <= 0:
                if n < 0 and -n in _NETDOWN:
                    self._set_down(p, os.strerror(-n))
                return
            now = monotonic_ns()
            if queued:
                for q in tuple(queued):
                    self._tx(q, now)  # what already waits leaves first
            self._forward_batch(p, ring, n, bound, now)
            if n < slots:
                return

    def _forward_batch(self, p: Port, ring, n: int, bound: tuple, now: int) -> None:
        """Decide, apply, send and queue one received batch of n frames, then release it.
        ``bound``: (ring, keys, plan, send, wake, insert) with insert (or None) storing each
        decision in the C memo of the one-call path."""
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
                targets = set()
                for i, k in enumerate(keys):
                    d = get(k)
                    if d is None:
                        d = self._decide_miss(k, in_idx)
                    dec[i] = d
                    if d >= 0 and (d & 0xFFFF) < n_ports:
                        targets.add(d & 0xFFFF)
                for j in targets:
                    self._refresh_budget(ports[j], now)
            else:
                try:
                    dec[:n] = array("i", map(get, keys))
                except TypeError:  # a miss (None): decide it
                    dec[:n] = array("i", [self._decide_miss(k, in_idx) for k in keys])
                targets = range(n_ports)
                for j, b in enumerate(budget):
                    if b < floor:
                        self._refresh_budget(ports[j], now)
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
                self._on_pfc_frame(p, f, now)
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
            self._queued.add(out)
            if self.planner is not None:
                self.planner.budget[out.index] = -1  # newcomers queue behind it

    def _log_internal(self) -> None:
        if self._internal_errors_logged < 10:
            self._internal_errors_logged += 1
            log.exception("internal error in the pipeline (frame dropped)")

    def _tx(self, p: Port, now_ns: int) -> None:
        """Send what the token bucket allows from a port's queue."""
        q = p.queue
        if not len(q):
            self._queued.discard(p)
            return
        if not p.up or p.tx_sock is None:
            n = q.flush()
            p.drops.add(DropReason.PORT_DOWN, n)
            self._queued.discard(p)
            return
        fd = p.tx_sock.fileno()
        batch = self.ring.slots
        while True:
            frames = q.dequeue(now_ns, batch)
            if not len(q):
                self._queued.discard(p)
                self._refresh_budget(p, now_ns)  # frames may leave at once again
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
                    self._set_down(p, os.strerror(res.errno))
                    return
                p.drops.add(DropReason.TX_ERROR, res.failed)
            else:
                p.tx_bytes += total
            if len(frames) < batch:
                return

    # --- priority flow control (mrcswitch.pfc decides; here its frames go out) ------------
    def _on_pfc_frame(self, p: Port, f: bytearray, now: int) -> None:
        """A PFC frame came in on ``p``: pause (or resume) the lossless class of its queue."""
        assert self.pfc is not None
        until = self.pfc.on_frame(p.index, f, now)
        if until is not None:
            self._set_paused(p, until, now)

    def _set_paused(self, p: Port, until_ns: int, now: int) -> None:
        q = p.queue
        if q.paused_until_ns == until_ns:
            return
        q.paused_until_ns = until_ns
        if self.planner is not None:
            if until_ns > now:
                self.planner.budget[p.index] = -1  # nothing may leave at once while paused
            else:
                self._refresh_budget(p, now)
        if len(q):
            self._queued.add(p)
        self._note_pfc_due(now)

    def _note_pfc_due(self, now: int) -> None:
        assert self.pfc is not None
        due = self.pfc.due_ns(now)
        self._pfc_due = _NEVER if due is None else due

    def _pfc_step(self, now: int) -> None:
        """Send the PAUSE / resume frames the in-ports' lossless bytes call for."""
        pfc = self.pfc
        assert pfc is not None
        for i, action in pfc.step(now):
            p = self.ports[i]
            ing = pfc.ingress[i]
            try:
                if p.tx_sock is None or not p.up or p.mac is None:
                    raise OSError("port down")
                p.tx_sock.send(ing.frame(p.mac, action))
            except OSError as exc:
                ing.not_sent(action)
                log.debug("port %s: PFC frame not sent: %s", p.cfg.name, exc)
        self._note_pfc_due(now)

    def _pfc_check(self, now: int) -> None:
        """The data path's PFC work: nothing unless an in-port crossed XOFF or XON."""
        assert self.pfc is not None
        if self.pfc.crossing():
            self._pfc_step(now)

    def _pfc_tick(self, now: int) -> None:
        """Refresh pauses still needed, run the watchdog on paused ports."""
        pfc = self.pfc
        assert pfc is not None
        self._pfc_step(now)
        for i in pfc.paused_ports():
            self._set_paused(self.ports[i], pfc.paused_until_ns(i, now), now)
        self._note_pfc_due(now)

    def start(self) -> None:
        """Everything before the loop: signals (alone), the control socket, the stats
        writer, ``"ready": true``."""
        if not self.hosted:
            self._install_signals()
        self._open_control()
        if self.cfg.stats_path:
            self._writer = StatsWriter(self.cfg.stats_path)
        self.ready = True
        self.write_stats()
        self.set_phase(0.0)
        log.info(
            "%s ready: %d ports, %d table entries, io %s",
            self.cfg.name,
            len(self.ports),
            len(self.table),
            batch_io.BACKEND,
        )

    def finish(self) -> None:
        """After the loop: a last stats file with ``"ready": false``."""
        self.ready = False
        self.write_stats(sync=True)

    def run(self) -> None:
        self.start()
        if self._cloop is not None:
            self._run_c()
        else:
            self._run_python()
        self.finish()

    def set_phase(self, fraction: float) -> None:
        """Start the periodic work (link probes, stats file) ``fraction`` of an interval
        late. A process serving many switches gives each its own phase: the stats of 32
        switches done at once took ~9 ms, a stall every 0.5 s that the NICs saw as an RTT
        spike and answered with spurious timeouts."""
        now = time.monotonic_ns()
        self._probe_due = now + int(LINK_PROBE_INTERVAL_S * (1.0 + fraction) * 1e9)
        self._stats_due = now + int(self.cfg.stats_interval_s * (1.0 + fraction) * 1e9)

    @property
    def due_ns(self) -> int:
        """When :meth:`tick` has work next (link probes, stats file)."""
        return min(self._probe_due, self._stats_due, self._pfc_due)

    def tick(self, now: int) -> None:
        """Link probes, the stats file and PFC's refreshes when due (at ``now`` or earlier)."""
        if now >= self._pfc_due:
            self._pfc_tick(now)
        if now >= self._probe_due:
            self.probe_links()
            self._probe_due = now + int(LINK_PROBE_INTERVAL_S * 1e9)
        if now >= self._stats_due:
            self.write_stats()
            self._stats_due = now + int(self.cfg.stats_interval_s * 1e9)

    def on_other_fd(self, fd: int) -> None:
        """A ready fd that is no port: the signal pipe (drained; the handler has run), the
        control socket or the link notifications."""
        if fd == self._wake_r:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 512)
        elif self._ctl is not None and fd == self._ctl.fileno():
            self._serve_control()
        elif self._links is not None and fd == self._links.fileno():
            self._on_link_events()

    def _serve_other_fds(self) -> None:
        """Every ready fd that is no port (the C loop leaves them to us)."""
        for fd, _ev in self._ep.poll(0):
            if fd not in self._by_fd:
                self.on_other_fd(fd)

    def on_c_wake(self, why: cloop.Wake, ev, now: int) -> None:
        """What the C loop handed back about this switch (``ev``: its struct mrc_sw_event;
        OTHER_FD is the caller's to serve)."""
        cl = self._cloop
        assert cl is not None
        # Every port the loop took down, whatever this return reports (one batch can
        # down two ports, or down one and hand back refused frames).
        for p in cl.downed():
            self._set_down(p, "send failed: link down")
        if why is cloop.Wake.MISS or why is cloop.Wake.PUNT:
            self._c_batch(self.ports[ev.port], why, ev.frames, ev.n_punt, now)
        elif why is cloop.Wake.SOCK_ERR:
            p = self.ports[ev.port]
            self._sock_error(p)
            if p.sock is not None:
                self._rx(p)  # as the Python loop: read it too, so an error cannot starve it
        if self.pfc is not None and why is not cloop.Wake.DEADLINE:
            self._pfc_check(now)  # a crossing (PFC), or frames Python queued itself
        self._queued.clear()  # the C loop serves every queue

    def _run_c(self) -> None:
        """The event loop when C runs it (mrc_sw_poll): Python wakes up only for what the C
        loop hands back (see cloop.Wake), and for link probes and stats when they are due."""
        cl = self._cloop
        assert cl is not None
        ev = cl.event  # struct mrc_sw_event: the details of why the loop returned
        monotonic_ns = time.monotonic_ns
        while not self._stop:
            why = cl.poll(self.due_ns)
            now = monotonic_ns()
            if why is cloop.Wake.OTHER_FD:
                self._serve_other_fds()
            self.on_c_wake(why, ev, now)
            if now >= self.due_ns:
                self.tick(now)

    def _c_batch(self, p: Port, why: cloop.Wake, n: int, n_punt: int, now: int) -> None:
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

    def on_fd(self, fd: int, ev: int) -> None:
        """The Python loop: a ready fd of this switch (a port, or another of its fds)."""
        p = self._by_fd.get(fd)
        if p is not None:
            if ev & _EPOLLERR:
                self._sock_error(p)
            if p.sock is not None:
                self._rx(p)
            if self.pfc is not None:
                self._pfc_check(time.monotonic_ns())
        else:
            self.on_other_fd(fd)

    def timeout_ns(self, now: int, deadline: int) -> int:
        """The Python loop: when it must look again (``deadline``, or a queued frame's
        send time if sooner)."""
        nxt = deadline
        for p in self._queued:
            t = p.queue.next_send_ns(now)
            if t is not None and t < nxt:
                nxt = t
        return nxt

    def serve_queues(self, now: int) -> None:
        """The Python loop: send what every queue may send by now."""
        queued = self._queued
        if queued:
            for p in tuple(queued):
                self._tx(p, now)
            if self.pfc is not None:
                self._pfc_check(now)

    def _run_python(self) -> None:
        """The event loop in Python (the C loop's twin; with recvmmsg or without C)."""
        # one wake-up per frame is the common case at a few thousand frames/s per switch:
        # keep what the loop does per wake-up (outside _rx) to a handful of operations
        poll = self._ep.poll
        by_fd = self._by_fd.get
        queued = self._queued
        monotonic_ns = time.monotonic_ns
        rx = self._rx
        due = self.due_ns
        now = monotonic_ns()
        while not self._stop:
            if queued:
                timeout = max(0.0, (self.timeout_ns(now, due) - now) / 1e9)
            else:
                timeout = (due - now) / 1e9 if due > now else 0.0
            for fd, ev in poll(timeout):
                p = by_fd(fd)
                if p is not None:
                    if ev & _EPOLLERR:
                        self._sock_error(p)
                    if p.sock is not None:
                        rx(p)
                else:
                    self.on_other_fd(fd)
            now = monotonic_ns()
            if queued:
                for p in tuple(queued):
                    self._tx(p, now)
            if self.pfc is not None:
                self._pfc_check(now)
                due = self.due_ns
            if now >= due:
                self.tick(now)
                due = self.due_ns

    def close(self, *, closer: Callable[[list[Port]], object] | None = None) -> None:
        """Close everything. ``closer`` takes the ports once they are out of the loop and
        closes them itself (a process serving other switches closes them in a helper thread:
        closing an AF_PACKET socket waits for RCU grace periods, ~75 ms for a T1)."""
        if self._writer is not None:  # the loop ended abnormally: stop the thread anyway
            self._writer.close()
            self._writer = None
        for p in self.ports:
            self._unregister(p)
            if closer is None:
                p.close()
        if closer is not None:
            closer(list(self.ports))
        if self._ctl is not None:
            self._unwatch(self._ctl.fileno())
            self._ctl.close()
            self._ctl = None
            if self.cfg.control_socket:
                Path(self.cfg.control_socket).unlink(missing_ok=True)
        if self._links is not None:
            self._unwatch(self._links.fileno())
            self._links.close()  # closing the fd takes it out of the epoll set
            self._links = None
        if self._ioctl is not None:
            self._ioctl.close()
            self._ioctl = None
        if not self.hosted:
            self._ep.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="mrc-switch",
        description="Run one SRv6 uSID software switch in this netns (or several in one "
        "process: --config more than once, each config naming its netns).",
    )
    ap.add_argument(
        "--config", required=True, action="append",
        help="TOML or JSON (.json) switch config; more than once: one process serves them all",
    )  # fmt: skip
    ap.add_argument("--check", action="store_true", help="validate the config(s) and exit")
    ap.add_argument(
        "--control", default=None,
        help="unix socket taking stop/start/list requests for single switches (JSON lines); "
        "implies the serving of several switches even with one --config",
    )  # fmt: skip
    ap.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s mrc-switch %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if len(args.config) > 1 or args.control:
        return _main_host(args)
    path = args.config[0]
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"mrc-switch: {path}: OK ({len(cfg.ports)} ports, {len(cfg.table)} routes)")
        return 0
    sw = Switch(cfg, str(Path(path).resolve()))
    try:
        sw.write_stats()  # "ready": false until every port is open
        sw.open_ports()
        sw.run()
    except ConfigError as exc:
        print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
        return 2
    finally:
        sw.close()
    return 0


def _main_host(args: argparse.Namespace) -> int:
    """Several switches in this process (mrcswitch.host)."""
    from .host import SwitchHost

    if args.check:
        for path in args.config:
            try:
                cfg = load_config(path)
            except ConfigError as exc:
                print(f"mrc-switch: bad config {path}: {exc}", file=sys.stderr)
                return 2
            print(f"mrc-switch: {path}: OK ({len(cfg.ports)} ports, {len(cfg.table)} routes)")
        return 0
    try:
        host = SwitchHost(args.config, args.control)
    except ConfigError as exc:
        print(f"mrc-switch: bad config: {exc}", file=sys.stderr)
        return 2
    try:
        host.open()
        host.run()
    except ConfigError as exc:
        print(f"mrc-switch: bad config: {exc}", file=sys.stderr)
        return 2
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
