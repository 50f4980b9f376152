"""A switch's stats document (its keys are a contract: docs/switch.md) and its publishing: the
stats file (``stats_path``, through :class:`mrcswitch.statsfile.StatsWriter` while the loop
runs) and the control socket (``control_socket``: connect, read one JSON document, done).
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from collections.abc import Callable

from mrcnic.io import batch as batch_io

from .config import SwitchConfig
from .pfc import SwitchPfc
from .pipeline import DropReason
from .port import Port
from .statsfile import StatsWriter, write_atomic


class SwitchStats:
    """The counters of one switch's ports (and PFC) as its stats document, and where that
    document goes."""

    def __init__(
        self, cfg: SwitchConfig, config_path: str, ports: list[Port], table_entries: int,
        pfc: SwitchPfc | None,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self.config_path = config_path
        self.ports = ports
        self.table_entries = table_entries
        self.pfc = pfc
        self.started_unix = time.time()
        self._writer: StatsWriter | None = None

    def document(
        self, *, ready: bool, fwd_path: str, c_loop: dict | None, link_watch: dict | None
    ) -> dict:
        """The stats document (``c_loop``, ``link_watch``: those blocks as the switch has
        them; the C loop's counters must already be folded into the ports')."""
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
            "ready": ready,
            "config": self.config_path,
            "io_backend": batch_io.BACKEND,
            "rx_path": "mmap" if self.cfg.rx_ring_frames else "recvmmsg",
            # "c_loop": the C event loop (mrc_sw_poll) runs the common case; "one_call": a
            # batch is one mrc_fwd_wake; "batch": Python decides each batch
            "fwd_path": fwd_path,
            "queue_backend": "c" if getattr(self.ports[0].queue, "ptr", None) else "python",
            # the C loop's wake-ups: by arriving frames and by paced sends' timers
            # (a process serving several switches: its wake-ups, shared by all of them, with
            # this switch's own "port_wakeups" and "switches_in_process")
            "c_loop": c_loop,
            # netlink link notifications (None: none, only the SIOCGIFFLAGS probe): how many
            # named a port, how often the kernel dropped some
            "link_watch": link_watch,
            "started_unix": self.started_unix,
            "updated_unix": now,
            "uptime_s": now - self.started_unix,
            "cpu_user_s": ru.ru_utime,
            "cpu_system_s": ru.ru_stime,
            "rss_bytes": rss,
            "table_entries": self.table_entries,
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

    # --- publishing -----------------------------------------------------------------------
    def start_writer(self) -> None:
        """From now on the stats file is written by a writer thread (see statsfile.py)."""
        if self.cfg.stats_path:
            self._writer = StatsWriter(self.cfg.stats_path)

    def write(self, make: Callable[[], dict], *, sync: bool = False) -> None:
        """Refresh the stats file with ``make()``: from the writer thread while running,
        synchronously before the loop starts and at exit (``sync``: the writer, if any,
        ends with this document)."""
        path = self.cfg.stats_path
        if not path:
            return
        data = json.dumps(make(), separators=(",", ":")).encode()
        if sync or self._writer is None:
            if self._writer is not None:
                self._writer.close(data)  # pending writes first, this one last
                self._writer = None
            else:
                write_atomic(path, data)
        else:
            self._writer.submit(data)

    def close(self) -> None:
        """The loop ended abnormally: stop the writer thread anyway."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    @staticmethod
    def serve(ctl: socket.socket, make: Callable[[], dict]) -> None:
        """Answer every waiting connection on the control socket ``ctl`` with ``make()``."""
        while True:
            try:
                conn, _ = ctl.accept()
            except (BlockingIOError, InterruptedError):
                return
            try:
                conn.settimeout(0.5)
                conn.sendall(json.dumps(make()).encode() + b"\n")
            except OSError:
                pass
            finally:
                conn.close()
