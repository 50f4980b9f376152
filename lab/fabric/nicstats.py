"""What a NIC process of a lab publishes for ``mrc-lab top``: one small JSON file per process.

Every ``mrc-bench`` process (write, lat, allreduce, alltoall, the flows of incast and
pause-storm, forge) gets its NIC from :meth:`lab.fabric.host.LabHost.nic`, which returns a
:class:`PublishingNic`: an :class:`mrcnic.io.aio.AioNic` that, while open, writes
``<run_dir>/nics/<host>-<pid>.json`` every :data:`INTERVAL_S` and removes it on close.

- **Never slows the NIC**: one timer on the NIC's own event loop builds the document (per
  QP a dozen counters and the EV states counted per plane: tens of microseconds, measured
  in each document as ``publish_cost_us``); the file system calls (temp file + rename, which
  can block for milliseconds on a file system mounted with ``discard``) run in the switch's
  writer thread (:class:`mrcswitch.statsfile.StatsWriter`), so the loop never waits on disk.
- **Atomic**: readers never see half a file (temp + rename).
- Only into a lab that is up: the run directory must exist (``mrc-lab down`` removes it), so a
  process outliving its lab leaves nothing behind; ``MRC_NIC_PUBLISH=0`` turns it off.

Document (``version`` 1)::

    {"version": 1, "pid": 4242, "lab": "mrc", "host": "h0", "argv": ["write", "--client", ...],
     "started_unix": ..., "updated_unix": ..., "interval_s": 0.5, "planes": 8,
     "publishes": 12, "publish_cost_us": 41.0, "publish_max_us": 90.0, "publish_wall_us": 60.0,
     "ports": [{"ifname": "mrc-p0", "up": true, "tx_bytes": ..., "rx_bytes": ..., "queue_frames": 0}],
     "qps": [{"qpn": 17, "transport": "mrc", "state": "READY", "peer_host": "h3", "peer_qpn": 18,
              "ev_states": {"GOOD": 128, "SKIP": 0, "ASSUMED_BAD": 0, "DENIED": 0},
              "ev_planes": [[16, 0, 0, 0], ...],      # per plane: GOOD, SKIP, ASSUMED_BAD, DENIED
              "cwnd_bytes": ..., "srtt_s": ..., "rto_s": ..., "retransmissions": ...,
              "timeouts": ..., "tx_data_bytes": ..., "tx_data_packets": ..., "rx_placed_bytes": ...,
              "rx_trimmed": ..., "rx_ecn_marked": ..., "probes_sent": ..., "rate_bps": null}]}

``rate_bps`` is RoCEv2's DCQCN rate (null for MRC); a RoCEv2 QP has one path: its plane shows
one GOOD EV, the others none.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lab.fabric.denials import Denier
from mrcnic.io.aio import AioNic
from mrcnic.transport.ev import EvState
from mrcswitch.statsfile import StatsWriter

VERSION = 1
INTERVAL_S = 0.5
NICS_DIR = "nics"
#: the EV states in the order of an ``ev_planes`` row
EV_STATES = ("GOOD", "SKIP", "ASSUMED_BAD", "DENIED")
_EV_INDEX = {s: i for i, s in enumerate(EV_STATES)}
_GOOD, _SKIP, _BAD = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD


def nics_dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / NICS_DIR


def enabled() -> bool:
    return os.environ.get("MRC_NIC_PUBLISH", "1") not in ("0", "no", "off", "")


def ev_planes(core: Any, planes: int) -> list[list[int]]:
    """Per plane, how many of the QP's EVs are GOOD, SKIP, ASSUMED_BAD and DENIED (MRC: from
    its EV table; RoCEv2: its one path on the plane it is bound to)."""
    out = [[0, 0, 0, 0] for _ in range(planes)]
    evs = getattr(core, "evs", None)
    if evs is not None:
        state, plane_of = evs.state, evs.plane_of
        if state.count(_GOOD) == len(state):  # the usual case, counted in C
            for p in range(planes):
                out[p][0] = plane_of.count(p)
            return out
        for p, st in zip(plane_of, state, strict=False):
            if p < planes:  # identity tests: an Enum's hash is a Python-level call
                out[p][0 if st is _GOOD else 1 if st is _SKIP else 2 if st is _BAD else 3] += 1
        return out
    plane = getattr(core, "plane", None)
    if isinstance(plane, int) and 0 <= plane < planes:
        counts = core.ev_states()
        for name, n in counts.items():
            if name in _EV_INDEX:
                out[plane][_EV_INDEX[name]] += int(n)
    return out


def qp_row(qp: Any, planes: int) -> dict[str, Any]:
    """One QP of :class:`mrcnic.verbs.Device` as the document has it."""
    core = qp.core
    s = qp.stats()
    peer = getattr(core, "peer", None)
    ev = ev_planes(core, planes)
    rate = getattr(s, "rate_bps", None)
    return {
        "qpn": qp.qpn,
        "transport": getattr(qp, "transport", "mrc"),
        "state": getattr(qp.state, "name", str(qp.state)),
        "peer_host": None if peer is None else f"h{peer.host}",
        "peer_qpn": None if peer is None else peer.qpn,
        "ev_states": {name: sum(row[i] for row in ev) for i, name in enumerate(EV_STATES)},
        "ev_planes": ev,
        "cwnd_bytes": round(float(s.cwnd_bytes), 1),
        "srtt_s": round(float(s.srtt_s), 6),
        "rto_s": round(float(s.rto_s), 6),
        "retransmissions": s.retransmissions,
        "timeouts": s.timeouts,
        "tx_data_packets": s.tx_data_packets,
        "tx_data_bytes": s.tx_data_bytes,
        "rx_placed_bytes": s.rx_placed_bytes,
        "rx_trimmed": s.rx_trimmed,
        "rx_ecn_marked": s.rx_ecn_marked,
        "probes_sent": s.probes_sent,
        "rate_bps": None if rate is None else round(float(rate), 1),
    }


def snapshot(device: Any, nic: AioNic | None, meta: dict[str, Any], planes: int) -> dict[str, Any]:
    """The whole document but the publisher's own counters."""
    ports = []
    if nic is not None:
        for p in nic.ports:
            ports.append(
                {
                    "ifname": p.ifname,
                    "up": p.up,
                    "tx_bytes": p.tx_bytes,
                    "rx_bytes": p.rx_bytes,
                    "tx_lost": p.tx_lost,
                    "queue_frames": len(p.pacer),
                }
            )
    qps = [qp_row(qp, planes) for qp in list(device.qps.values())]
    return {**meta, "updated_unix": time.time(), "ports": ports, "qps": qps}


class NicPublisher:
    """Publishes :func:`snapshot` every ``interval_s`` from the running loop (a ``call_later``
    timer) through a writer thread; :meth:`close` stops it and removes the file."""

    def __init__(
        self,
        path: Path,
        device: Any,
        nic: AioNic | None,
        meta: dict[str, Any],
        planes: int,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.path = path
        self.device = device
        self.nic = nic
        self.planes = planes
        self.interval_s = interval_s
        self.meta = {"version": VERSION, **meta, "interval_s": interval_s}
        self.publishes = 0
        self.cost_s = 0.0  # CPU time of the loop's thread spent building and handing over
        self.max_cost_s = 0.0
        self.wall_s = 0.0  # the same in wall time (a busy machine preempts the loop: more)
        self._writer = StatsWriter(str(path))
        # mrc-lab probe --deny: links the prober found down or lossy -> DENIED EVs
        self.denier = Denier(path.parent.parent)
        self._handle: Any = None
        self._loop: Any = None
        self._closed = False

    def start(self, loop: Any) -> None:
        self._loop = loop
        self.publish()
        self._handle = loop.call_later(self.interval_s, self._tick)

    def _tick(self) -> None:
        if self._closed:
            return
        if not os.path.isdir(self.path.parent):  # the lab went down under us: stop quietly
            self.close()
            return
        self.deny()
        self.publish()
        self._handle = self._loop.call_later(self.interval_s, self._tick)

    def deny(self) -> None:
        """Apply the prober's listed links to this NIC's MRC QPs (lab/fabric/denials.py)."""
        try:
            self.denier.apply(self.device)
        except Exception:  # a QP being torn down mid-change: try again next tick
            return

    def document(self) -> dict[str, Any]:
        doc = snapshot(self.device, self.nic, self.meta, self.planes)
        doc["publishes"] = self.publishes
        doc["denials"] = {"evs_denied_now": sum(map(len, self.denier.denied.values())),
                          "denied": self.denier.denials, "restored": self.denier.restored}  # fmt: skip
        doc["publish_cost_us"] = (
            round(self.cost_s / self.publishes * 1e6, 1) if self.publishes else None
        )
        doc["publish_max_us"] = round(self.max_cost_s * 1e6, 1)
        doc["publish_wall_us"] = (
            round(self.wall_s / self.publishes * 1e6, 1) if self.publishes else None
        )
        return doc

    def publish(self) -> None:
        t0, w0 = time.thread_time(), time.perf_counter()
        try:
            data = json.dumps(self.document(), separators=(",", ":")).encode()
        except Exception:  # a QP being torn down mid-read: skip this one, never hurt the NIC
            return
        self._writer.submit(data)
        dt = time.thread_time() - t0
        self.publishes += 1
        self.cost_s += dt
        self.wall_s += time.perf_counter() - w0
        self.max_cost_s = max(self.max_cost_s, dt)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
        self._writer.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def process_argv() -> list[str]:
    """What this process runs, for a reader: mrc-bench's arguments (without the interpreter)."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(("mrc-bench", "cli.py")):
        argv = argv[1:]
    return argv[:16]


class PublishingNic(AioNic):
    """An :class:`AioNic` that publishes its QPs for ``mrc-lab top`` while open."""

    def __init__(self, *args: Any, publish: dict[str, Any] | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._publish = publish
        self.publisher: NicPublisher | None = None

    def open(self) -> None:
        super().open()
        pub = self._publish
        if pub is None or not enabled():
            return
        run_dir = Path(pub["run_dir"])
        if not run_dir.is_dir():  # the lab is gone (or never was): publish nothing
            return
        d = nics_dir(run_dir)
        try:
            d.mkdir(exist_ok=True)
        except OSError:
            return
        host = pub["host"]
        meta = {
            "pid": os.getpid(),
            "lab": pub.get("lab"),
            "host": host,
            "argv": process_argv(),
            "started_unix": time.time(),
            "planes": pub["planes"],
        }
        self.publisher = NicPublisher(
            d / f"{host}-{os.getpid()}.json",
            self.device,
            self,
            meta,
            pub["planes"],
            float(pub.get("interval_s", INTERVAL_S)),
        )
        self.publisher.start(self._loop)

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
        super().close()
