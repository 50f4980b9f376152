"""mrc-switch: one software uSID switch in the current network namespace.

``mrc-switch --config FILE`` (:mod:`mrcswitch.main`) opens one AF_PACKET socket per configured
port (:mod:`mrcswitch.port`), forwards with :mod:`mrcswitch.pipeline` through its data path
(:mod:`mrcswitch.datapath`), queues and paces with :mod:`mrcswitch.queue`, and publishes its
counters (:mod:`mrcswitch.stats`) as a JSON file (``stats_path``, rewritten atomically at
least every second; it says ``"ready": true`` once every port is open) and optionally on a
unix socket (``control_socket``: connect, read one JSON document, done). SIGTERM or SIGINT
stops it cleanly; starting it again with the same config is a switch reboot. A port whose
link goes down (ENETDOWN, or no carrier) is counted and skipped, and used again when it
comes back.

The loop is single-threaded: epoll over the port sockets, a signal wake-up pipe, the
control socket and netlink link notifications (:mod:`mrcswitch.links`; a SIOCGIFFLAGS
probe every ``LINK_PROBE_INTERVAL_S`` is the fallback). With a receive ring and the C core
the C loop (:mod:`mrcswitch.cloop`) runs the common case; the Python loop is its twin.
Priority flow control is :mod:`mrcswitch.pfc`'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from mrcnic.io import batch as batch_io
from mrcnic.io import linkstate
from mrcnic.io.netns import in_netns

from . import cloop
from .cloop import Wake
from .config import ConfigError, SwitchConfig
from .cqueue import new_flags, new_in_bytes
from .datapath import RX_BATCHES_PER_WAKE, DataPath
from .fastpath import Planner
from .fcache import DecisionCache
from .links import LINK_PROBE_INTERVAL_S, PortLinks
from .pfc import NEVER_NS, PfcHandler, SwitchPfc
from .pipeline import DropReason, Pipeline
from .port import Port
from .process import TIMER_SLACK_NS, hold_ns_from_env, listen_unix, stop_signals_wake
from .stats import SwitchStats
from .table import build_table

log = logging.getLogger("mrc-switch")

_EPOLLERR = select.EPOLLERR


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
        self.table = build_table(cfg)
        batch = min(cfg.batch_size, batch_io.MAX_BATCH)
        ring_frames = max(cfg.rx_ring_frames, batch) if cfg.rx_ring_frames else 0
        n = len(cfg.ports)
        # PFC: the lossless class in every queue, its bytes summed per in-port (docs/design/pfc.md)
        pfc_state: SwitchPfc | None = None
        lossless = in_bytes = None
        if cfg.pfc is not None:
            in_bytes = new_in_bytes(n)
            lossless = cfg.pfc.lossless_class(n)
            pfc_state = SwitchPfc(cfg.pfc, [p.rate_bps for p in cfg.ports], in_bytes, new_flags(n))
        self.ports = [
            Port(i, p, cfg.lblen, ring_frames, cfg.max_frame_bytes, batch, lossless, in_bytes)
            for i, p in enumerate(cfg.ports)
        ]
        self.path = DataPath(self.ports, cfg.max_frame_bytes, batch)
        self.pfc: PfcHandler | None = None
        if pfc_state is not None:
            self.pfc = PfcHandler(pfc_state, self.path)
            self.path.on_control_frame = self.pfc.on_frame
        self.counters = SwitchStats(cfg, config_path, self.ports, len(self.table), pfc_state)
        self.ready = False
        self._stop = False
        self.hosted = epoll is not None
        self._ep = epoll if epoll is not None else select.epoll()
        self._owners = owners if owners is not None else {}
        self.hold_ns = hold_ns_from_env() if hold_ns is None else hold_ns
        self._host_counters: Callable[[], dict] | None = (
            None  # hosted: the process's loop counters (a callable)
        )
        self._probe_due = self._stats_due = 0
        self._by_fd: dict[int, Port] = {}
        self._wake_r = self._wake_w = -1
        self._ctl: socket.socket | None = None
        self.links = PortLinks(self.ports, self.path, self._in_ns, self._reopen)

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
        # Link notifications before the ports: no change after a port's check at open is missed.
        self.links.open()
        if self.links.fileno() >= 0:
            self._watch(self.links.fileno())
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
        path = self.path
        path.pipeline = Pipeline(
            self.table,
            [p.mac for p in self.ports],  # type: ignore[misc]  # an opened port knows its MAC
            [p.cfg.peer_mac for p in self.ports],
            [p.cfg.source_prefix for p in self.ports],
            mac_control=self.pfc is not None,
        )
        path.planner = planner = Planner(
            path.pipeline.l2_headers,
            path.pipeline.block_bytes,
            path.ring.slots,
            max(DropReason) + 1,
        )
        # MRC_SWITCH_ONE_CALL=0: the per-batch Python path only (for comparisons)
        if batch_io.BACKEND == "c" and os.environ.get("MRC_SWITCH_ONE_CALL", "1") != "0":
            path.fcaches = [DecisionCache() for _ in self.ports]
        now = time.monotonic_ns()
        for p in self.ports:
            planner.rate_per_ns[p.index] = p.queue.rate_per_ns
            planner.burst[p.index] = p.queue.burst_bytes
            path.refresh_budget(p, now)
        # MRC_SWITCH_C_LOOP=0: the Python loop (the C loop's twin) even where C could run it
        if (
            path.fcaches
            and self.cfg.rx_ring_frames
            and cloop.available()
            and os.environ.get("MRC_SWITCH_C_LOOP", "1") != "0"
            and all(getattr(p.queue, "ptr", None) is not None for p in self.ports)
        ):
            path.cloop = cloop.CLoop(
                self._ep.fileno(), self.ports, path.fcaches, planner,
                slots=min(p.ring.slots for p in self.ports if p.ring is not None),
                cap=self.cfg.max_frame_bytes, hist_len=max(DropReason) + 1,
                batches_per_wake=RX_BATCHES_PER_WAKE, timer_slack_ns=TIMER_SLACK_NS,
                reasons=(DropReason.PORT_DOWN, DropReason.QUEUE_FULL, DropReason.TX_ERROR),
                hold_ns=self.hold_ns, pfc=self.pfc.state if self.pfc is not None else None,
            )  # fmt: skip
        path.sync_fds()

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
        self.counters.serve(self._ctl, self.stats)

    # --- counters -----------------------------------------------------------------------
    def stats(self) -> dict:
        """The stats document (docs/switch.md)."""
        cl = self.path.cloop
        if cl is not None:
            cl.fold()
        return self.counters.document(
            ready=self.ready,
            fwd_path=self._fwd_path(),
            c_loop=self._c_loop_counters(),
            link_watch=self.links.stats(),
        )

    def _c_loop_counters(self) -> dict | None:
        cl = self.path.cloop
        if cl is None:
            return None
        own = cl.counters()
        if self._host_counters is None:
            return own
        return {**self._host_counters(), "port_wakeups": own["port_wakeups"]}

    def _fwd_path(self) -> str:
        if self.path.cloop is not None:
            return "c_loop"
        return "one_call" if self.path.fcaches and self.cfg.rx_ring_frames else "batch"

    def write_stats(self, *, sync: bool = False) -> None:
        """Refresh the stats file: from the writer thread while running (see statsfile.py),
        synchronously before the loop starts and at exit."""
        self.counters.write(self.stats, sync=sync)

    # --- links --------------------------------------------------------------------------
    def probe_links(self) -> None:
        self.links.probe()

    def _reopen(self, p: Port) -> bool:
        """Open ``p``'s sockets again (its interface was re-created): False if it cannot."""
        self._unregister(p)
        try:
            with self._in_ns():
                p.open()
        except OSError as exc:
            log.warning("port %s: reopen failed: %s", p.cfg.name, exc)
            self.path.sync_fds()  # its old send socket is closed
            return False
        self._register(p)
        self.path.sync_fds()
        return True

    # --- the loops ----------------------------------------------------------------------
    def start(self) -> None:
        """Everything before the loop: signals (alone), the control socket, the stats
        writer, ``"ready": true``."""
        if not self.hosted:
            self._install_signals()
        self._open_control()
        self.counters.start_writer()
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
        if self.path.cloop is not None:
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

    def set_delay(self, port: str, delay_ns: int) -> dict:
        """The one-way propagation delay of the link out of ``port`` (its name or interface)
        from now on, until a restart reads the config again: frames already on the wire keep
        their release times. ValueError names what is wrong."""
        names = {p.cfg.name: p for p in self.ports} | {p.cfg.interface: p for p in self.ports}
        p = names.get(port)
        if p is None:
            known = ", ".join(sorted({q.cfg.name for q in self.ports}))
            raise ValueError(f"{self.cfg.name} has no port {port!r} (ports: {known})")
        if isinstance(delay_ns, bool) or not isinstance(delay_ns, int):
            raise ValueError(f"delay_ns must be an integer, not {delay_ns!r}")
        was = p.queue.delay_ns
        p.queue.set_delay(delay_ns)  # its range check names the bounds
        self.path.refresh_budget(p, time.monotonic_ns())  # nothing leaves at once if delayed
        log.info("port %s: one-way delay %d ns (was %d ns)", p.cfg.name, delay_ns, was)
        return {"port": p.cfg.name, "delay_ns": delay_ns, "was_ns": was}

    @property
    def cloop(self) -> cloop.CLoop | None:
        """The C event loop of this switch's ports, when C runs them."""
        return self.path.cloop

    @property
    def due_ns(self) -> int:
        """When :meth:`tick` has work next (link probes, stats file, PFC's refreshes)."""
        pfc_due = self.pfc.due_ns if self.pfc is not None else NEVER_NS
        return min(self._probe_due, self._stats_due, pfc_due)

    def tick(self, now: int) -> None:
        """Link probes, the stats file and PFC's refreshes when due (at ``now`` or earlier)."""
        if self.pfc is not None and now >= self.pfc.due_ns:
            self.pfc.tick(now)
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
        elif fd == self.links.fileno():
            self.links.on_events()

    def _serve_other_fds(self) -> None:
        """Every ready fd that is no port (the C loop leaves them to us)."""
        for fd, _ev in self._ep.poll(0):
            if fd not in self._by_fd:
                self.on_other_fd(fd)

    def on_c_wake(self, why: Wake, ev, now: int) -> None:
        """What the C loop handed back about this switch (``ev``: its struct mrc_sw_event;
        OTHER_FD is the caller's to serve)."""
        path = self.path
        cl = path.cloop
        assert cl is not None
        # Every port the loop took down, whatever this return reports (one batch can
        # down two ports, or down one and hand back refused frames).
        for p in cl.downed():
            path.set_down(p, "send failed: link down")
        if why is cloop.Wake.MISS or why is cloop.Wake.PUNT:
            path.c_batch(self.ports[ev.port], why, ev.frames, ev.n_punt, now)
        elif why is cloop.Wake.SOCK_ERR:
            p = self.ports[ev.port]
            path.sock_error(p)
            if p.sock is not None:
                path.rx(p)  # as the Python loop: read it too, so an error cannot starve it
        if self.pfc is not None and why is not cloop.Wake.DEADLINE:
            self.pfc.check(now)  # a crossing (PFC), or frames Python queued itself
        path.queued.clear()  # the C loop serves every queue

    def _run_c(self) -> None:
        """The event loop when C runs it (mrc_sw_poll): Python wakes up only for what the C
        loop hands back (see cloop.Wake), and for link probes and stats when they are due."""
        cl = self.path.cloop
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

    def on_fd(self, fd: int, ev: int) -> None:
        """The Python loop: a ready fd of this switch (a port, or another of its fds)."""
        p = self._by_fd.get(fd)
        if p is not None:
            if ev & _EPOLLERR:
                self.path.sock_error(p)
            if p.sock is not None:
                self.path.rx(p)
            if self.pfc is not None:
                self.pfc.check(time.monotonic_ns())
        else:
            self.on_other_fd(fd)

    def timeout_ns(self, now: int, deadline: int) -> int:
        """The Python loop: when it must look again (``deadline``, or a queued frame's
        send time if sooner)."""
        nxt = deadline
        for p in self.path.queued:
            t = p.queue.next_send_ns(now)
            if t is not None and t < nxt:
                nxt = t
        return nxt

    def serve_queues(self, now: int) -> None:
        """The Python loop: send what every queue may send by now."""
        queued = self.path.queued
        if queued:
            tx = self.path.tx
            for p in tuple(queued):
                tx(p, now)
            if self.pfc is not None:
                self.pfc.check(now)

    def _run_python(self) -> None:
        """The event loop in Python (the C loop's twin; with recvmmsg or without C)."""
        # one wake-up per frame is the common case at a few thousand frames/s per switch:
        # keep what the loop does per wake-up (outside rx) to a handful of operations
        poll = self._ep.poll
        by_fd = self._by_fd.get
        path = self.path
        queued = path.queued
        monotonic_ns = time.monotonic_ns
        rx, tx, sock_error = path.rx, path.tx, path.sock_error
        pfc = self.pfc
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
                        sock_error(p)
                    if p.sock is not None:
                        rx(p)
                else:
                    self.on_other_fd(fd)
            now = monotonic_ns()
            if queued:
                for p in tuple(queued):
                    tx(p, now)
            if pfc is not None:
                pfc.check(now)
                due = self.due_ns
            if now >= due:
                self.tick(now)
                due = self.due_ns

    def close(self, *, closer: Callable[[list[Port]], object] | None = None) -> None:
        """Close everything. ``closer`` takes the ports once they are out of the loop and
        closes them itself (a process serving other switches closes them in a helper thread:
        closing an AF_PACKET socket waits for RCU grace periods, ~75 ms for a T1)."""
        self.counters.close()  # the loop ended abnormally: stop the writer thread anyway
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
        if self.links.fileno() >= 0:
            self._unwatch(self.links.fileno())
        self.links.close()
        if not self.hosted:
            self._ep.close()


if __name__ == "__main__":
    # the old command line (python -m mrcswitch.switch), kept for scripts: mrcswitch.main runs
    import runpy

    runpy.run_module("mrcswitch.main", run_name="__main__", alter_sys=True)
