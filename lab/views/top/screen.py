"""``mrc-lab top``'s screen (pure): numbers as the screen writes them, the layout, and the frame
as a rich renderable or plain text (rich is imported only when a frame is drawn)."""

from __future__ import annotations

import os
import time
from typing import Any

from lab.fabric.nicstats import EV_STATES
from lab.views.top.rows import Frame, PortRow, QpRow, plane_strip

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
