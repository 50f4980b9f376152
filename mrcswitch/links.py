"""A switch's view of its ports' links: netlink notifications (:mod:`mrcnic.io.linkstate`)
say when a port's link changed, and a SIOCGIFFLAGS probe every ``LINK_PROBE_INTERVAL_S`` is
the fallback. A port whose link went down is the data path's to take down
(:meth:`mrcswitch.datapath.DataPath.set_down`); one that comes back is used again, reopened
by the switch first if its interface was re-created.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable

from mrcnic.io import linkstate

from .datapath import DataPath
from .port import Port

log = logging.getLogger("mrc-switch")

LINK_PROBE_INTERVAL_S = 0.2  # the SIOCGIFFLAGS fallback (netlink notifications come first)


class PortLinks:
    """The link state of one switch's ports. ``in_ns`` enters the switch's namespace;
    ``reopen(port)`` opens a port's sockets again (False: it could not)."""

    def __init__(
        self, ports: list[Port], path: DataPath,
        in_ns: Callable[[], contextlib.AbstractContextManager], reopen: Callable[[Port], bool],
    ) -> None:  # fmt: skip
        self.ports = ports
        self.path = path
        self.in_ns = in_ns
        self.reopen = reopen
        self.ioctl: socket.socket | None = None  # link flags, in the switch's namespace
        self.watcher: linkstate.LinkWatcher | None = None  # netlink link notifications
        self.port_events = 0  # notifications that named a port

    def open(self) -> None:
        """The probe's socket and the notifications (call in the switch's namespace)."""
        self.ioctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.watcher = linkstate.LinkWatcher.open()

    def fileno(self) -> int:
        """The notifications' fd for the switch's epoll set (-1: none)."""
        return self.watcher.fileno() if self.watcher is not None else -1

    def on_events(self) -> None:
        """Netlink link notifications: when one names a port (or some were lost), check the
        ports now rather than at the next probe."""
        assert self.watcher is not None
        events, lost = self.watcher.read()
        names = {p.cfg.interface for p in self.ports}
        indexes = {p.ifindex for p in self.ports}
        mine = sum(1 for ev in events if ev.ifname in names or ev.ifindex in indexes)
        self.port_events += mine
        if mine or lost:
            self.probe()

    def probe(self) -> None:
        path = self.path
        for p in self.ports:
            flags = linkstate.link_flags(p.cfg.interface, self.ioctl)
            up = linkstate.flags_up(flags)
            if not up:
                if p.up:
                    path.set_down(p, "link down" if flags is not None else "interface gone")
                continue
            if p.up:
                continue
            try:
                with self.in_ns():
                    ifindex = socket.if_nametoindex(p.cfg.interface)
            except OSError:
                continue
            # the interface was re-created: the old socket is bound to a dead ifindex
            if (p.sock is None or ifindex != p.ifindex) and not self.reopen(p):
                continue
            p.up = True
            path.refresh_budget(p, time.monotonic_ns())
            if path.cloop is not None:
                path.cloop.sync(p)
            log.info("port %s (%s) up", p.cfg.name, p.cfg.interface)

    def stats(self) -> dict | None:
        """The ``link_watch`` block (None: no notifications, only the probe): how many
        notifications named a port, how often the kernel dropped some."""
        if self.watcher is None:
            return None
        return {"port_events": self.port_events, "overflows": self.watcher.overflows}

    def close(self) -> None:
        """Closing the notifications' fd takes it out of the epoll set."""
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
        if self.ioctl is not None:
            self.ioctl.close()
            self.ioctl = None
