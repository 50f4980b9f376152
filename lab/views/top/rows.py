"""``mrc-lab top``'s model (pure): rates from two readings, the port and QP rows, their totals,
the faults in effect, and the frame that holds one screen's worth."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lab.fabric.nicstats import EV_STATES

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
