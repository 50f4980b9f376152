"""``mrc-lab top``: a live terminal view of a running lab, refreshed a few times a second.

What it shows, all read from what the lab's processes already publish (it never asks a switch
or a NIC for anything, so it cannot slow them):

- **ports**: per switch port its link state, queue depth, transmit rate, ECN marks, trims,
  drops by reason and PFC pauses, from the python switches' stats files (rewritten every
  0.5 s; rates from the change between two files); kernel switches: ``ip -s link`` and ``tc``
  counters (bytes, qdisc drops and backlog), read with the faults;
- **QPs**: per QP of every running NIC process (``mrc-bench``: :mod:`lab.fabric.nicstats`) its EV
  states per plane (GOOD / SKIP / ASSUMED_BAD / DENIED), congestion window, smoothed RTT,
  retransmissions, timeouts and rate;
- **faults in effect**: links down, loss rules, shaped links, switches down, as the kernel
  reports them, judged by ``mrc-lab status``'s own functions (:mod:`lab.fabric.status`) on a view
  read over netlink in-process (:mod:`lab.fabric.nlview`: no ``ip``/``tc``/``nft`` process), in a
  thread every ``--faults-s`` seconds (1).

The pure part (rates, rows, order, the frame) is separate from the terminal; rich is imported
only when a frame is drawn.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.fabric.nicstats import EV_STATES, nics_dir

DEFAULT_INTERVAL_S = 0.5
DEFAULT_FAULTS_S = 1.0
#: a NIC document older than this many of its own intervals is shown as stale
STALE_INTERVALS = 6


# --- rates ------------------------------------------------------------------------------------


class Rates:
    """Per-second rates of counters from successive samples ``(t, value)`` per key. A sample
    with the same time as the last one (a stats file not rewritten since) keeps the last
    rate; a counter that went down (a restarted switch) starts again."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[float, float, float | None]] = {}

    def update(self, key: Any, t: float | None, value: float | None) -> float | None:
        if t is None or value is None:
            return None
        prev = self._last.get(key)
        rate: float | None = None
        if prev is not None:
            t0, v0, r0 = prev
            if t <= t0:
                return r0
            rate = (value - v0) / (t - t0) if value >= v0 else None
        self._last[key] = (t, value, rate)
        return rate

    def forget_missing(self, keys: Iterable[Any]) -> None:
        keep = set(keys)
        for k in [k for k in self._last if k not in keep]:
            del self._last[k]


# --- rows -------------------------------------------------------------------------------------


@dataclass
class PortRow:
    """One switch port (or a switch that is not running: ``port`` ``"-"``)."""

    switch: str
    port: str
    peer: str = ""
    up: bool | None = True  # None: unknown (switch not running)
    running: bool = True
    queue_bytes: int | None = None
    tx_bps: float | None = None
    ecn: int | None = None
    ecn_rate: float | None = None
    trims: int | None = None
    trims_rate: float | None = None
    drops: dict[str, int] = field(default_factory=dict)
    drops_total: int | None = None
    drops_rate: float | None = None
    pauses: int | None = None  # PFC pause_tx + pause_rx; None: no PFC on this switch
    pauses_rate: float | None = None

    def order(self) -> tuple:
        """Sort key: switches down and ports down first, then ports with something happening
        now (trims, drops, pauses, marks), then the busiest, then the most trims ever."""
        busy = sum(r or 0.0 for r in (self.trims_rate, self.drops_rate, self.pauses_rate))
        return (
            0 if not self.running else 1 if self.up is False else 2,
            -busy,
            -(self.ecn_rate or 0.0),
            -(self.tx_bps or 0.0),
            -(self.trims or 0),
            -(self.drops_total or 0),
            self.switch,
            self.port,
        )


def switch_port_rows(
    docs: dict[str, dict[str, Any] | None], rates: Rates, now: float | None = None
) -> list[PortRow]:
    """Rows from mrc-switch stats documents (``None``: no file, or the switch is stopped)."""
    rows: list[PortRow] = []
    keys = []
    for sw, doc in docs.items():
        if not doc or not doc.get("ready"):
            rows.append(PortRow(sw, "-", "switch not running", up=None, running=False))
            continue
        t = doc.get("updated_unix")
        for name, p in (doc.get("ports") or {}).items():
            key = (sw, name)
            keys.append(key)
            pfc = p.get("pfc")
            pauses = None if not pfc else int(pfc.get("pause_tx", 0)) + int(pfc.get("pause_rx", 0))
            drops = {k: int(v) for k, v in (p.get("drops") or {}).items() if v}
            rows.append(
                PortRow(
                    sw,
                    name,
                    p.get("peer", ""),
                    up=bool(p.get("up", True)),
                    queue_bytes=p.get("queue_bytes"),
                    tx_bps=_times8(rates.update((*key, "tx"), t, p.get("tx_bytes"))),
                    ecn=p.get("ecn_marks"),
                    ecn_rate=rates.update((*key, "ecn"), t, p.get("ecn_marks")),
                    trims=p.get("trims"),
                    trims_rate=rates.update((*key, "trims"), t, p.get("trims")),
                    drops=drops,
                    drops_total=p.get("drops_total"),
                    drops_rate=rates.update((*key, "drops"), t, p.get("drops_total")),
                    pauses=pauses,
                    pauses_rate=rates.update((*key, "pauses"), t, pauses),
                )
            )
    rates.forget_missing([(*k, c) for k in keys for c in ("tx", "ecn", "trims", "drops", "pauses")])
    return rows


def kernel_port_rows(
    ports: dict[str, dict[str, dict[str, Any]]], t: float | None, rates: Rates
) -> list[PortRow]:
    """Rows of kernel switches: ``ports[switch][ifname]`` as :func:`lab.fabric.status.switch_stats`
    gives them (rx/tx bytes and packets, qdisc drops and backlog); no trims or ECN there."""
    rows = []
    for sw, pmap in ports.items():
        for name, p in pmap.items():
            key = (sw, name)
            qd = p.get("qdisc_drops")
            rows.append(
                PortRow(
                    sw,
                    name,
                    p.get("peer", ""),
                    up=p.get("up", True),
                    queue_bytes=p.get("qdisc_backlog_bytes"),
                    tx_bps=_times8(rates.update((*key, "tx"), t, p.get("tx_bytes"))),
                    drops={"qdisc": qd} if qd else {},
                    drops_total=qd,
                    drops_rate=rates.update((*key, "drops"), t, qd),
                )
            )
    return rows


def _times8(v: float | None) -> float | None:
    return None if v is None else v * 8


@dataclass
class Totals:
    tx_bps: float = 0.0
    ecn: int = 0
    ecn_rate: float = 0.0
    trims: int = 0
    trims_rate: float = 0.0
    drops: dict[str, int] = field(default_factory=dict)
    drops_total: int = 0
    drops_rate: float = 0.0
    pauses: int | None = None
    ports: int = 0
    ports_down: int = 0
    switches_down: int = 0


def totals(rows: Iterable[PortRow]) -> Totals:
    t = Totals()
    for r in rows:
        if not r.running:
            t.switches_down += 1
            continue
        t.ports += 1
        t.ports_down += r.up is False
        t.tx_bps += r.tx_bps or 0.0
        t.ecn += r.ecn or 0
        t.ecn_rate += r.ecn_rate or 0.0
        t.trims += r.trims or 0
        t.trims_rate += r.trims_rate or 0.0
        t.drops_total += r.drops_total or 0
        t.drops_rate += r.drops_rate or 0.0
        for k, v in r.drops.items():
            t.drops[k] = t.drops.get(k, 0) + v
        if r.pauses is not None:
            t.pauses = (t.pauses or 0) + r.pauses
    return t


@dataclass
class QpRow:
    host: str
    pid: int
    test: str
    qpn: int
    transport: str
    state: str
    peer: str
    ev_states: dict[str, int]
    ev_planes: list[list[int]]
    cwnd_bytes: float | None
    srtt_s: float | None
    retransmissions: int
    timeouts: int
    tx_bps: float | None
    rate_bps: float | None = None
    stale: bool = False

    def order(self) -> tuple:
        """Sort key: QPs in error, then QPs with EVs not GOOD, then the busiest senders."""
        bad = sum(v for k, v in self.ev_states.items() if k != "GOOD")
        return (
            0 if self.state == "ERROR" else 1,
            -bad,
            -(self.tx_bps or 0.0),
            self.host,
            self.pid,
            self.qpn,
        )


def qp_rows(docs: Iterable[dict[str, Any]], rates: Rates, now: float) -> list[QpRow]:
    rows = []
    keys = []
    for d in docs:
        t = d.get("updated_unix")
        stale = t is None or now - t > STALE_INTERVALS * float(d.get("interval_s") or 0.5)
        argv = d.get("argv") or []
        test = argv[0] if argv else "?"
        for q in d.get("qps") or []:
            key = (d.get("pid"), d.get("host"), q.get("qpn"))
            keys.append(key)
            peer = q.get("peer_host") or "-"
            rows.append(
                QpRow(
                    host=str(d.get("host", "?")),
                    pid=int(d.get("pid") or 0),
                    test=test,
                    qpn=int(q.get("qpn") or 0),
                    transport=str(q.get("transport", "?")),
                    state=str(q.get("state", "?")),
                    peer=peer,
                    ev_states={s: int((q.get("ev_states") or {}).get(s, 0)) for s in EV_STATES},
                    ev_planes=[list(r) for r in q.get("ev_planes") or []],
                    cwnd_bytes=q.get("cwnd_bytes"),
                    srtt_s=q.get("srtt_s"),
                    retransmissions=int(q.get("retransmissions") or 0),
                    timeouts=int(q.get("timeouts") or 0),
                    tx_bps=_times8(rates.update(key, t, q.get("tx_data_bytes"))),
                    rate_bps=q.get("rate_bps"),
                    stale=stale,
                )
            )
    rates.forget_missing(keys)
    return rows


def plane_strip(ev_planes: list[list[int]]) -> str:
    """One character per plane: ``.`` every EV GOOD, ``s`` some SKIP, ``B`` some ASSUMED_BAD,
    ``D`` some DENIED (the worst wins), ``-`` no EV on that plane (a RoCEv2 QP's other
    planes)."""
    out = []
    for row in ev_planes:
        g, s, b, d = (list(row) + [0, 0, 0, 0])[:4]
        out.append("D" if d else "B" if b else "s" if s else "." if g else "-")
    return "".join(out)


# --- faults -----------------------------------------------------------------------------------


@dataclass
class Faults:
    """Faults in effect as the kernel reports them (``mrc-lab status``)."""

    links_down: list[str] = field(default_factory=list)
    loss: list[str] = field(default_factory=list)
    shaped: list[str] = field(default_factory=list)
    switches_down: list[str] = field(default_factory=list)
    read_unix: float | None = None
    read_s: float | None = None
    error: str | None = None

    @property
    def count(self) -> int:
        return len(self.links_down) + len(self.loss) + len(self.shaped) + len(self.switches_down)

    def items(self) -> list[str]:
        return (
            [f"switch DOWN {s}" for s in self.switches_down]
            + [f"link DOWN {x}" for x in self.links_down]
            + [f"loss {x}" for x in self.loss]
            + [f"shaped {x}" for x in self.shaped]
        )


def faults_from_status(st: dict[str, Any]) -> Faults:
    """:func:`lab.fabric.status.status`'s dict -> the faults in effect."""
    f = Faults()
    for n in st.get("nodes", []):
        if n.get("kind") in ("t0", "t1") and not n.get("up"):
            f.switches_down.append(n["name"])
    for x in st.get("links", []):
        name = f"{x['a']} -- {x['b']}"
        if x.get("state") == "down":
            ends = []
            for side in ("a", "b"):
                e = x.get(f"{side}_end") or {}
                if e.get("admin") != "up":
                    ends.append(f"{x[side]} admin {e.get('admin', '?')}")
            f.links_down.append(name + (f" ({'; '.join(ends)})" if ends else " (no carrier)"))
        for flt in x.get("faults") or []:
            if flt == "loss":
                f.loss.append(name)
            elif flt.startswith("shaped"):
                f.shaped.append(f"{name} {flt.removeprefix('shaped').strip()}".strip())
    return f


# --- the frame --------------------------------------------------------------------------------


@dataclass
class Frame:
    """Everything one screen shows."""

    lab: str
    switch_mode: str
    planes: int
    rate_mbit: float
    switches: int
    now_unix: float
    interval_s: float
    ports: list[PortRow]
    qps: list[QpRow]
    processes: int
    faults: Faults | None
    notes: list[str] = field(default_factory=list)

    @property
    def totals(self) -> Totals:
        return totals(self.ports)


# --- formatting -------------------------------------------------------------------------------


def fmt_n(n: float) -> str:
    """A counter in at most 5 characters: 9999, 12.3k, 123k, 1.2M."""
    n = int(n)
    if n < 10_000:
        return str(n)
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return str(n)  # pragma: no cover


def fmt_count(total: int | None, rate: float | None, unit: str = "") -> str:
    """``1234``, or ``1234 +56`` while it grows (+56 per second; ``unit`` "/s" says so)."""
    if total is None:
        return "-"
    if rate is not None and rate >= 0.5:
        return f"{fmt_n(total)} +{fmt_n(round(rate))}{unit}"
    return fmt_n(total)


def fmt_mbps(bps: float | None) -> str:
    if bps is None:
        return "-"
    mb = bps / 1e6
    return f"{mb:.1f}" if mb < 1000 else f"{mb:.0f}"


def fmt_kib(n: int | float | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1024:.0f}" if n >= 10240 else f"{n / 1024:.1f}"


def fmt_drops(
    drops: dict[str, int], total: int | None, rate: float | None = None, unit: str = ""
) -> str:
    """``3 port_down`` / ``5 queue_full+1`` (the biggest reason, ``+k`` other reasons)."""
    if total is None:
        return "-"
    if not total:
        return "0"
    head = fmt_count(total, rate, unit)
    if not drops:
        return head
    top = max(drops, key=lambda k: drops[k])
    more = f"+{len(drops) - 1}" if len(drops) > 1 else ""
    return f"{head} {top}{more}"


def fmt_age(now: float, t: float | None) -> str:
    if t is None:
        return "never"
    return f"{max(0.0, now - t):.1f} s ago"


def header_line(fr: Frame) -> str:
    clock = time.strftime("%H:%M:%S", time.localtime(fr.now_unix))
    return (
        f"{clock}  lab {fr.lab}: {fr.switch_mode} switches, {fr.planes} planes x "
        f"{fr.rate_mbit:g} Mb/s  every {fr.interval_s:g} s  q: quit"
    )


def pack(parts: list[str], width: int, indent: str = "  ", sep: str = "  ") -> list[str]:
    """``parts`` joined by ``sep`` into lines of at most ``width`` (a part longer than a line
    is cut), later lines indented."""
    lines: list[str] = []
    cur = ""
    for part in parts:
        if cur and len(cur) + len(sep) + len(part) > width:
            lines.append(cur)
            cur = indent + part
        else:
            cur = f"{cur}{sep}{part}" if cur else part
    if cur:
        lines.append(cur)
    return [ln[:width] for ln in lines]


def fault_lines(fr: Frame, width: int, max_lines: int) -> list[str]:
    f = fr.faults
    if f is None:
        return ["FAULTS  (reading ...)"]
    if f.error:
        return [f"FAULTS  could not read: {f.error}"]
    age = f"(kernel, {fmt_age(fr.now_unix, f.read_unix)})"
    items = f.items()
    if not items:
        return [f"FAULTS  none {age}"]
    lines: list[str] = []
    cur = f"FAULTS  {len(items)} {age}: "
    for k, it in enumerate(items):
        piece = it + ("; " if k < len(items) - 1 else "")
        if len(cur) + len(piece) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = "  "
        cur += piece
    lines.append(cur.rstrip())
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [f"  ... {len(items)} faults in all (mrc-lab status)"]
    return [ln[:width] for ln in lines]


def totals_parts(fr: Frame) -> list[str]:
    t = fr.totals
    parts = [f"ALL PORTS  tx {fmt_mbps(t.tx_bps)} Mb/s"]
    if fr.switch_mode == "kernel":
        parts.append(f"drops {fmt_drops(t.drops, t.drops_total, t.drops_rate, '/s')}")
    else:
        parts += [
            f"ECN {fmt_count(t.ecn, t.ecn_rate, '/s')}",
            f"trims {fmt_count(t.trims, t.trims_rate, '/s')}",
            f"drops {fmt_drops(t.drops, t.drops_total, t.drops_rate, '/s')}",
        ]
        if t.pauses is not None:
            parts.append(f"PFC pauses {t.pauses}")
    down = []
    if t.ports_down:
        down.append(f"{t.ports_down} port" + ("s" if t.ports_down > 1 else ""))
    if t.switches_down:
        down.append(f"{t.switches_down} switch" + ("es" if t.switches_down > 1 else ""))
    if down:
        parts.append("DOWN: " + ", ".join(down))
    return parts


def layout_rows(height: int | None, n_ports: int, n_qps: int, fixed: int) -> tuple[int, int]:
    """How many port and QP rows fit in ``height`` lines after ``fixed`` lines of the rest:
    QPs get up to a third (at least 2 when there are any), ports the rest."""
    if height is None:
        return n_ports, n_qps
    room = max(2, height - fixed)
    q = min(n_qps, max(2 if n_qps else 0, room // 3))
    p = min(n_ports, max(1, room - q))
    q = min(n_qps, max(q, room - p))
    return p, q


def render(fr: Frame, width: int = 80, height: int | None = None) -> Any:
    """The frame as a rich renderable: ``width`` columns, at most ``height`` lines (None: no
    limit, every row)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    fault_max = 3 if height is None or height >= 30 else 2
    flines = fault_lines(fr, width, fault_max)
    ports = sorted(fr.ports, key=PortRow.order)
    qps = sorted(fr.qps, key=QpRow.order)
    # header, faults, ports title, ports header, totals, "more" line, QPs title, header, more
    tlines = pack(totals_parts(fr), width)
    fixed = 1 + len(flines) + 1 + 1 + len(tlines) + 1 + 1 + 1 + 1 + len(fr.notes)
    n_ports, n_qps = layout_rows(height, len(ports), len(qps), fixed)

    parts: list[Any] = [Text(header_line(fr)[:width], style="bold", no_wrap=True)]
    for ln in flines:
        bad = fr.faults is not None and fr.faults.count > 0
        parts.append(Text(ln, style="bold red" if bad else "green", no_wrap=True))
    for n in fr.notes:
        parts.append(Text(n[:width], style="yellow", no_wrap=True))

    kernel = fr.switch_mode == "kernel"
    parts.append(
        Text(
            f"PORTS {len(ports)}"
            + (" (kernel switches: counters from ip -s link and tc)" if kernel else "")
            + (" down and busiest first" if len(ports) > n_ports else ""),
            style="bold",
            no_wrap=True,
        )
    )
    t = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
    cols = [("SWITCH PORT", "left"), ("PEER", "left"), ("LINK", "left"), ("Q KiB", "right"),
            ("Mb/s", "right"), ("ECN +/s", "right"), ("TRIMS +/s", "right"),
            ("DROPS +/s", "left")]  # fmt: skip
    if kernel:  # tbf marks and trims nothing: its backlog and drops are the qdisc's
        cols = [c for c in cols if c[0] not in ("ECN +/s", "TRIMS +/s")]
    pfc = any(r.pauses is not None for r in ports)
    if pfc:
        cols.append(("PAUSES", "right"))
    for name, just in cols:
        t.add_column(name, justify=just, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for r in ports[:n_ports]:
        if not r.running:
            row = [r.switch, "stopped", "DOWN", "", "", "", "", "switch not running"]
            if kernel:
                del row[5:7]
            t.add_row(*row, *([""] if pfc else []), style="bold red")
            continue
        link = "up" if r.up else "DOWN"
        row = [
            f"{r.switch} {r.port}",
            r.peer,
            link,
            fmt_kib(r.queue_bytes),
            fmt_mbps(r.tx_bps),
            fmt_count(r.ecn, r.ecn_rate),
            fmt_count(r.trims, r.trims_rate),
            fmt_drops(r.drops, r.drops_total, r.drops_rate),
        ]
        if kernel:
            del row[5:7]
        if pfc:
            row.append(fmt_count(r.pauses, r.pauses_rate))
        busy = (r.trims_rate or 0) + (r.drops_rate or 0) > 0
        t.add_row(*row, style="bold red" if not r.up else "yellow" if busy else None)
    parts.append(t)
    if len(ports) > n_ports:
        parts.append(Text(f"  ... {len(ports) - n_ports} more ports", style="dim", no_wrap=True))
    for ln in tlines:
        parts.append(Text(ln, style="bold", no_wrap=True))

    parts.append(
        Text(
            f"QPS {len(qps)} in {fr.processes} NIC processes"
            + ("  PLANES: . GOOD  s SKIP  B ASSUMED_BAD  D DENIED" if qps else ""),
            style="bold",
            no_wrap=True,
        )
    )
    if not qps:
        parts.append(Text("  no NIC process is publishing (run mrc-bench against this lab)",
                          style="dim", no_wrap=True))  # fmt: skip
    else:
        q = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
        for name, just in (("HOST PID", "left"), ("QP", "left"), ("TR", "left"),
                           ("PEER", "left"), ("PLANES", "left"), ("G/S/B/D", "right"),
                           ("CWND KiB", "right"), ("RTT ms", "right"), ("RETX", "right"),
                           ("TMO", "right"), ("Mb/s", "right")):  # fmt: skip
            q.add_column(name, justify=just, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
        for r in qps[:n_qps]:
            ev = r.ev_states
            gsbd = "/".join(str(ev.get(s, 0)) for s in EV_STATES)
            not_good = sum(v for k, v in ev.items() if k != "GOOD") > 0
            tr = "roce" if r.transport == "rocev2" else r.transport
            rtt = "-" if not r.srtt_s else f"{r.srtt_s * 1e3:.1f}"
            state = "" if r.state == "READY" else f" {r.state}"
            q.add_row(
                f"{r.host} {r.pid}",
                f"{r.qpn:#x}{state}",
                tr,
                r.peer,
                plane_strip(r.ev_planes),
                gsbd,
                fmt_kib(r.cwnd_bytes),
                rtt,
                str(r.retransmissions),
                str(r.timeouts),
                fmt_mbps(r.tx_bps) + (" stale" if r.stale else ""),
                style="bold red" if r.state == "ERROR" else "yellow" if not_good else None,
            )
        parts.append(q)
        if len(qps) > n_qps:
            parts.append(Text(f"  ... {len(qps) - n_qps} more QPs", style="dim", no_wrap=True))
    return Group(*parts)


def render_text(fr: Frame, width: int = 80, height: int | None = None) -> str:
    """The frame as plain text (tests, ``--once`` into a pipe)."""
    from rich.console import Console

    con = Console(width=width, record=True, file=open(os.devnull, "w"), color_system=None)  # noqa: SIM115
    con.print(render(fr, width, height))
    text = con.export_text()
    con.file.close()
    return "\n".join(ln.rstrip() for ln in text.splitlines())


# --- reading the lab --------------------------------------------------------------------------


def read_json(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def pid_alive(pid: Any) -> bool:
    try:
        return isinstance(pid, int) and pid > 0 and os.path.exists(f"/proc/{pid}")
    except OSError:
        return False


def read_nic_docs(run_dir: Path) -> list[dict[str, Any]]:
    """The NIC documents of processes still running (a killed process's file is skipped)."""
    d = nics_dir(run_dir)
    out = []
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return out
    for n in names:
        if not n.endswith(".json"):
            continue
        doc = read_json(d / n)
        if doc and pid_alive(doc.get("pid")):
            out.append(doc)
    return out


class FaultReader:
    """Reads the faults (and, for kernel switches, their counters) in a thread every
    ``every_s``: over netlink in-process (:mod:`lab.fabric.nlview`, about 0.15 ms per namespace),
    or for kernel switches with ``ip``/``tc``/``nft`` per namespace (their counters; tens of
    milliseconds of CPU per read)."""

    def __init__(self, state: Any, every_s: float = DEFAULT_FAULTS_S) -> None:
        self.state = state
        self.every_s = every_s
        self.faults: Faults | None = None
        self.kernel_ports: dict[str, dict[str, dict[str, Any]]] = {}
        self.kernel_t: float | None = None
        self.reads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cv = threading.Condition()

    def read_once(self) -> None:
        from lab.fabric import nlview
        from lab.fabric.status import NsView, end_state, link_status, node_status, read_lab

        st = self.state
        t0 = time.perf_counter()
        try:
            if st.switch_mode == "kernel":
                views = read_lab(st)  # with the counters (ip -s link, tc -s qdisc)
            else:
                try:  # netlink, in-process: no ip/tc/nft processes (lab/fabric/nlview.py)
                    views = nlview.read_lab(st)
                except OSError:
                    views = read_lab(st)
            plan = st.plan
            nodes = [node_status(st, n, views) for n in plan.switches()]
            links = [link_status(st, x, views) for x in plan.links()]
            f = faults_from_status({"nodes": nodes, "links": links})
            kports: dict[str, dict[str, dict[str, Any]]] = {}
            if st.switch_mode == "kernel":
                for n in plan.switches():
                    view = views.get(plan.namespace(n.name), NsView(False))
                    pmap = {}
                    for sp in plan.switch_ports(n):
                        entry = view.links.get(sp.ifname, {})
                        s64 = entry.get("stats64", {})
                        q = view.qdiscs.get(sp.ifname, {})
                        es = end_state(view, sp.ifname)
                        pmap[sp.ifname.removeprefix(plan.prefix)] = {
                            "peer": getattr(sp, "peer", ""),
                            "up": es["admin"] == "up" and es["carrier"],
                            "tx_bytes": s64.get("tx", {}).get("bytes"),
                            "qdisc_drops": q.get("drops"),
                            "qdisc_backlog_bytes": q.get("backlog"),
                        }
                    kports[n.name] = pmap
        except Exception as e:  # shown on screen, never fatal
            f = Faults(error=f"{type(e).__name__}: {e}")
            kports = {}
        f.read_unix = time.time()
        f.read_s = time.perf_counter() - t0
        with self._cv:
            self.faults = f
            self.kernel_ports = kports
            self.kernel_t = f.read_unix
            self.reads += 1
            self._cv.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(self.every_s)

    def start(self) -> FaultReader:
        self._thread = threading.Thread(target=self._run, name="top-faults", daemon=True)
        self._thread.start()
        return self

    def wait_reads(self, n: int = 1, timeout_s: float = 10.0) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self.reads >= n, timeout_s)

    def stop(self) -> None:
        self._stop.set()


class Top:
    """Samples a lab and builds frames (the I/O side of ``mrc-lab top``)."""

    def __init__(self, state: Any, interval_s: float, faults_s: float = DEFAULT_FAULTS_S) -> None:
        self.state = state
        self.interval_s = interval_s
        self.plan = state.plan
        self.switch_names = [n.name for n in self.plan.switches()]
        self.port_rates = Rates()
        self.qp_rates = Rates()
        self.faults = FaultReader(state, faults_s)

    def switch_docs(self) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for name in self.switch_names:
            rec = self.state.processes.get(name)
            doc = read_json(rec.stats) if rec is not None and rec.stats else None
            out[name] = doc
        return out

    def frame(self) -> Frame:
        st = self.state
        now = time.time()
        notes = []
        if not st.path.exists():
            notes.append(f"lab {st.name} has no state file any more (brought down?)")
        if st.switch_mode == "kernel":
            with self.faults._cv:
                kp, kt = self.faults.kernel_ports, self.faults.kernel_t
            ports = kernel_port_rows(kp, kt, self.port_rates)
        else:
            ports = switch_port_rows(self.switch_docs(), self.port_rates, now)
        docs = read_nic_docs(st.run_dir)
        qps = qp_rows(docs, self.qp_rates, now)
        p = st.params
        return Frame(
            lab=st.name,
            switch_mode=st.switch_mode,
            planes=p.planes,
            rate_mbit=float(p.rate_mbit),
            switches=len(self.switch_names),
            now_unix=now,
            interval_s=self.interval_s,
            ports=ports,
            qps=qps,
            processes=len(docs),
            faults=self.faults.faults,
            notes=notes,
        )


# --- the terminal -----------------------------------------------------------------------------


@contextlib.contextmanager
def _cbreak(fd: int):
    """Keys without Enter and without echo (restored on the way out); nothing on a non-tty."""
    try:
        import termios
        import tty

        old = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):
        yield False
        return
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _wait_key(fd: int | None, timeout_s: float) -> str:
    """A key pressed within ``timeout_s`` ("" if none)."""
    if fd is None:
        time.sleep(timeout_s)
        return ""
    r, _w, _x = select.select([fd], [], [], max(0.0, timeout_s))
    if not r:
        return ""
    try:
        return os.read(fd, 32).decode(errors="replace")
    except OSError:
        return ""


def run(
    state: Any,
    interval_s: float = DEFAULT_INTERVAL_S,
    faults_s: float = DEFAULT_FAULTS_S,
    once: bool = False,
    width: int | None = None,
) -> int:
    """``mrc-lab top``: live until q or Ctrl-C; ``once``: one frame on stdout."""
    from rich.console import Console

    top = Top(state, interval_s, faults_s)
    top.faults.start()
    try:
        if once:
            top.faults.wait_reads(1)
            top.frame()  # the first sample: rates need two
            time.sleep(max(interval_s, 0.6))  # the switches rewrite their files every 0.5 s
            if state.switch_mode == "kernel":  # their counters come with the faults' reads
                top.faults.wait_reads(2, faults_s + 10.0)
            fr = top.frame()
            con = Console(width=width) if width else Console()
            tty = sys.stdout.isatty()
            con.print(render(fr, con.width, con.height if tty else None), crop=True)
            return 0
        return _live(top, interval_s, width)
    except KeyboardInterrupt:
        return 0
    finally:
        top.faults.stop()


def _live(top: Top, interval_s: float, width: int | None) -> int:
    from rich.console import Console
    from rich.live import Live

    con = Console(width=width) if width else Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    with (
        _cbreak(fd) if fd is not None else contextlib.nullcontext(False),
        Live(console=con, screen=True, auto_refresh=False, redirect_stdout=False) as live,
    ):
        try:
            while True:
                t0 = time.monotonic()
                fr = top.frame()
                w, h = con.size
                live.update(render(fr, w, h), refresh=True)
                deadline = t0 + interval_s
                while (left := deadline - time.monotonic()) > 0:
                    key = _wait_key(fd, left)
                    if key and (key[0] in "qQ" or key == "\x1b"):  # not an arrow's ESC [
                        return 0
        except KeyboardInterrupt:
            return 0
