"""mrc-bench incast: several hosts write to one at once, optionally beside a victim flow.

    mrc-bench incast --lab mrc --senders h3,h4 --dst h0 --qps 8 --victim auto --duration 10

Every flow is one ``mrc-bench write`` (its own client and server processes in the hosts'
namespaces, verified byte for byte), all started together (:class:`WriteGroup`). With a
victim (``--victim SRC:DST`` or ``auto``: a host under the T0 of most senders writing to a
host under the destination's T0 that is not the destination, so it shares the senders'
uplinks and the spine's downlinks towards the destination's T0 but not the destination's
own links), the victim first runs alone for the same duration, then beside the incast:
``victim.ratio`` = its goodput with the incast / alone. That is the congestion-spreading
scenario of issue 14: with priority flow control (``mrc-lab up --pfc``) the incast's PAUSE
frames travel upstream and stop the victim on links it only shares with the incast.

Goodput is read from each write's timeline over the window in which every flow ran (after
a ramp-up of ``skip_s``): start-up skew between the processes does not count. The switches'
counters (pfc block, drops by reason, trims, ECN marks) are read before and after the incast
phase (waiting for a stats file written after the phase) and reported as deltas; a switch
without a ``pfc`` block (a lab without PFC) reports ``null`` for those counters and the
totals count it as 0.

The pieces ``mrc-bench pause-storm`` (lab/workloads/bench/storm.py) shares are here too: the write
group, the window goodput, the switch counters and their deltas. Manual: docs/bench.md.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.fabric.status import switch_stats
from lab.proc import children, cpu
from lab.proc.analysis import overlap_aggregate, window_mean_bps
from lab.proc.benchrun import WriteSpec, parse_json_output
from lab.proc.cpu import ChildrenCpuMeter
from lab.workloads.bench import common as bc
from mrcnic import workloads as wl

PFC_KEYS = ("pause_tx", "pause_rx", "paused_s", "lossless_drops", "watchdog_trips")
TIMELINE_MS = 100  # the flows' timeline bins: the window goodput is read from them
ROLES = ("incast", "victim")

Echo = Callable[[str], None]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- hosts and pairs (pure) ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Flow:
    """One write of a scenario: ``src`` writes to ``dst`` (host indices); ``role`` says what
    it is there for (``incast``, ``victim``; pause-storm: ``to-stuck``, ``victim``, ``flow``)."""

    src: int
    dst: int
    role: str


def parse_hosts(plan: Any, text: str) -> list[int]:
    """``h1,h2,3`` -> [1, 2, 3]; ValueError for an unknown host or a repeated one."""
    hosts = [bc.parse_host(plan, t) for t in text.split(",") if t.strip()]
    if not hosts:
        raise ValueError("no hosts given")
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"a host is named twice in {text!r}")
    return hosts


def parse_pair(plan: Any, text: str) -> tuple[int, int]:
    """``SRC:DST`` (e.g. ``h5:h2``) -> (5, 2)."""
    src, sep, dst = text.partition(":")
    if not sep:
        raise ValueError(f"{text!r}: give a pair as SRC:DST, e.g. h5:h2")
    a, b = bc.parse_host(plan, src), bc.parse_host(plan, dst)
    if a == b:
        raise ValueError(f"{text!r}: source and destination must be different hosts")
    return a, b


def hosts_under(plan: Any, t0: int) -> list[int]:
    return wl.hosts_under(plan.shape, t0)


def auto_victim(plan: Any, senders: Sequence[int], dst: int) -> tuple[int, int] | None:
    """``--victim auto``: :func:`mrcnic.workloads.incast_victim` in this lab (None: the lab
    has no such pair; then it needs more hosts per T0: ``--hosts-per-t0 3``)."""
    return wl.incast_victim(plan.shape, senders, dst)


# --- the switches' counters (pure) ---------------------------------------------------------------


def _num(v: Any) -> float | None:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else None


def _sum_pfc(blocks: Sequence[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = dict.fromkeys(PFC_KEYS, 0)
    for b in blocks:
        for k in PFC_KEYS:
            out[k] += _num(b.get(k)) or 0
    return out


def switch_counters(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the scenarios read of one switch, from ``lab.fabric.status.switch_stats``: ``pfc`` (the
    stats' ``totals.pfc``, else the sum of the ports' ``pfc`` blocks, else None: no PFC),
    ``drops`` by reason, ``trims``, ``ecn_marks`` (None in kernel mode, which has neither),
    and when the file was written and the switch started. None: no stats (not running)."""
    if not data:
        return None
    if data.get("source") == "kernel":
        ports = data.get("ports") or {}
        qd = sum(_num(p.get("qdisc_drops")) or 0 for p in ports.values())
        return {
            "pfc": None,
            "drops": {"qdisc": int(qd)},
            "trims": None,
            "ecn_marks": None,
            "updated_unix": None,
            "started_unix": None,
        }
    stats = data.get("stats")
    if not isinstance(stats, dict):
        return None
    totals = stats.get("totals") or {}
    pfc = totals.get("pfc")
    if not isinstance(pfc, dict):
        blocks = [
            p["pfc"] for p in (stats.get("ports") or {}).values() if isinstance(p.get("pfc"), dict)
        ]
        pfc = _sum_pfc(blocks) if blocks else None
    else:
        pfc = _sum_pfc([pfc])
    drops = {k: v for k, v in (totals.get("drops") or {}).items() if _num(v) is not None}
    return {
        "pfc": pfc,
        "drops": drops,
        "trims": _num(totals.get("trims")),
        "ecn_marks": _num(totals.get("ecn_marks")),
        "updated_unix": _num(stats.get("updated_unix")),
        "started_unix": _num(stats.get("started_unix")),
    }


def _delta(a: float | None, b: float | None, restarted: bool) -> float | None:
    """A counter's growth from ``a`` to ``b``; a switch restarted meanwhile counts from 0."""
    if b is None:
        return None
    if a is None or restarted or b < a:
        return b
    return b - a


def counter_deltas(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """One switch's row of the scenarios' ``switches``: the PFC counters' growth (None
    without a ``pfc`` block), ``drops`` by reason (the reasons that grew), ``drops_total``,
    ``trims``, ``ecn_marks`` (None where the switch has no such counter), ``pfc`` (whether it
    reported a pfc block) and ``restarted``."""
    b = before or {}
    a = after or {}
    restarted = bool(
        before
        and after
        and b.get("started_unix")
        and a.get("started_unix") != b.get("started_unix")
    )
    pfc_a, pfc_b = a.get("pfc"), b.get("pfc") or {}
    row: dict[str, Any] = {}
    for k in PFC_KEYS:
        v = None if pfc_a is None else _delta(pfc_b.get(k), pfc_a.get(k), restarted)
        if v is not None:
            v = round(v, 6) if k == "paused_s" else int(v)
        row[k] = v
    da, db = a.get("drops") or {}, b.get("drops") or {}
    drops = {}
    for reason, n in da.items():
        d = _delta(db.get(reason), n, restarted)
        if d:
            drops[reason] = int(d)
    row["drops"] = drops
    row["drops_total"] = sum(drops.values())
    for k in ("trims", "ecn_marks"):
        d = _delta(b.get(k), a.get(k), restarted)
        row[k] = None if d is None else int(d)
    row["pfc"] = pfc_a is not None
    row["restarted"] = restarted
    if after is None:
        row["missing"] = True  # no stats after the run (the switch was not running)
    return row


def switch_totals(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The totals over the switches' rows: ``<counter>_total`` (a switch without the counter
    adds 0) and ``pfc_reported`` (some switch had a pfc block)."""

    def tot(k: str) -> float:
        return sum(_num(r.get(k)) or 0 for r in rows.values())

    out: dict[str, Any] = {f"{k}_total": int(tot(k)) for k in PFC_KEYS if k != "paused_s"}
    out["paused_s_total"] = round(float(tot("paused_s")), 6)
    out["drops_total"] = int(tot("drops_total"))
    out["trims_total"] = int(tot("trims"))
    out["ecn_marks_total"] = int(tot("ecn_marks"))
    out["pfc_reported"] = any(r.get("pfc") for r in rows.values())
    return out


def read_switches(
    state: Any, fresh_after_unix: float | None = None, wait_s: float = 3.0
) -> dict[str, dict[str, Any] | None]:
    """Every switch's counters (:func:`switch_counters`). With ``fresh_after_unix`` (python
    switches) it waits up to ``wait_s`` for stats files written after that time (a switch
    rewrites its file at least once a second), so a phase's last frames are in them."""
    names = [n.name for n in state.plan.switches()]
    deadline = time.monotonic() + wait_s
    while True:
        got = {n: switch_counters(switch_stats(state, n)) for n in names}
        if fresh_after_unix is None or state.switch_mode != "python":
            return got
        stale = [
            n
            for n, c in got.items()
            if c is not None and (c.get("updated_unix") or 0) < fresh_after_unix
        ]
        if not stale or time.monotonic() >= deadline:
            return got
        time.sleep(0.1)


def switch_rows(
    before: dict[str, dict[str, Any] | None], after: dict[str, dict[str, Any] | None]
) -> dict[str, dict[str, Any]]:
    return {n: counter_deltas(before.get(n), after.get(n)) for n in after}


# --- goodput over a window (pure) ----------------------------------------------------------------


def window_goodput_bps(res: dict[str, Any] | None, lo_unix: float, hi_unix: float) -> float | None:
    """A write's goodput between two unix times, from its ``timeline`` (bins that only partly
    overlap count in proportion); None without a timeline or an empty window."""
    if not res or hi_unix <= lo_unix:
        return None
    tl, start = res.get("timeline"), _num(res.get("start_unix_s"))
    bin_s = (_num(res.get("timeline_ms")) or TIMELINE_MS) / 1000
    if not tl or start is None:
        return None
    return window_mean_bps(tl, bin_s, lo_unix, hi_unix, offset_s=start)


def run_window(res: dict[str, Any] | None, skip_s: float, max_len_s: float) -> tuple[float, float]:
    """(start, end) unix times of one write's steady part: after ``skip_s`` of ramp-up, until
    its timeline ends or ``max_len_s`` after its start (its tail, after posting stopped)."""
    assert res is not None
    start = float(res["start_unix_s"])
    tl = res.get("timeline") or []
    bin_s = (_num(res.get("timeline_ms")) or TIMELINE_MS) / 1000
    end = start + min(tl[-1][0] + bin_s if tl else 0.0, max_len_s)
    return start + skip_s, end


def common_window(
    results: Sequence[dict[str, Any] | None], skip_s: float, max_len_s: float
) -> dict[str, float] | None:
    """The window in which every write ran (after ``skip_s`` of ramp-up of the last to
    start): ``window_start_unix_s``, ``window_s``, ``start_skew_s``; None when they never
    overlapped or one has no timeline."""
    runs = []
    for r in results:
        if not r or not r.get("timeline") or _num(r.get("start_unix_s")) is None:
            return None
        bin_s = (_num(r.get("timeline_ms")) or TIMELINE_MS) / 1000
        runs.append((float(r["start_unix_s"]), bin_s, r["timeline"], 0.0))
    ov = overlap_aggregate(runs, skip_s=skip_s, max_len_s=max_len_s)
    if ov is None:
        return None
    return {k: ov[k] for k in ("window_start_unix_s", "window_s", "start_skew_s")}


skip_for = wl.skip_for  # ramp-up left out of the window goodput (mrcnic.workloads)


# --- running writes at once ----------------------------------------------------------------------

_RATE = re.compile(r"mrc-bench:\s+([\d.]+) s\s+\d+ writes\s+([\d.]+) Mb/s")


def last_progress(text: str) -> tuple[float, float] | None:
    """(seconds, Mb/s) of the last progress line of a write in ``text``, or None."""
    found = _RATE.findall(text)
    if not found:
        return None
    t, mbps = found[-1]
    return float(t), float(mbps)


@dataclass
class WriteGroup:
    """Several ``mrc-bench write`` runs started at once, each in its own session (stopped by
    its process group, never by name); their JSON results and stderr tails at the end."""

    state: Any
    flows: Sequence[Flow]
    transport: str
    qps: int
    size: int
    duration_s: float
    echo: Echo | None = _stderr
    label: str = ""
    progress_s: float = 2.0
    timeout_s: float | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)
    _files: list[tuple[Any, Any]] = field(default_factory=list)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _results: list[tuple[dict[str, Any] | None, str]] | None = None
    t_start: float = 0.0

    def specs(self) -> list[Any]:
        return [
            WriteSpec(
                src=f"h{f.src}",
                dst=f"h{f.dst}",
                size=self.size,
                duration_s=self.duration_s,
                qps=self.qps,
                transport=self.transport,
                timeline_ms=TIMELINE_MS,
                extra=("--progress", "1s"),
            )
            for f in self.flows
        ]

    def __enter__(self) -> WriteGroup:
        try:
            for spec in self.specs():
                out = self._stack.enter_context(tempfile.TemporaryFile(mode="w+"))
                err = self._stack.enter_context(tempfile.TemporaryFile(mode="w+"))
                self._files.append((out, err))
                self.procs.append(
                    children.spawn(spec.argv(self.state.name), stdout=out, stderr=err)
                )
        except BaseException:
            self.stop()
            self._stack.close()
            raise
        self.t_start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        try:
            self._results = self._collect()
        finally:
            self._stack.close()

    def stop(self) -> None:
        children.stop(self.procs)

    def running(self) -> int:
        return sum(1 for p in self.procs if p.poll() is None)

    def wait(self, tick: Callable[[], None] | None = None) -> bool:
        """Until every write ended (True) or the time limit (False: the rest are stopped);
        a progress line on stderr every ``progress_s`` (the writes' own last rates)."""
        limit = self.timeout_s if self.timeout_s is not None else self.duration_s + 90.0
        next_line = self.t_start + self.progress_s
        while self.running():
            now = time.monotonic()
            if now - self.t_start > limit:
                self.stop()
                return False
            if tick is not None:
                tick()
            if self.echo is not None and self.progress_s > 0 and now >= next_line:
                next_line = now + self.progress_s
                self.echo(self.progress_line(now - self.t_start))
            time.sleep(0.1)
        return True

    def progress_line(self, elapsed_s: float) -> str:
        parts = []
        for f, (_out, err) in zip(self.flows, self._files, strict=True):
            err.seek(0)
            last = last_progress(err.read())
            rate = f"{last[1]:.1f} Mb/s" if last else "starting"
            parts.append(f"h{f.src}->h{f.dst} {rate}")
        head = (
            f"mrc-bench {self.label}: {elapsed_s:5.1f} s" if self.label else f"{elapsed_s:5.1f} s"
        )
        return f"{head}  " + ", ".join(parts)

    def results(self) -> list[tuple[dict[str, Any] | None, str]]:
        """(the write's JSON or None, the last lines of its stderr) per flow; kept when the
        group's ``with`` block ends (its files are closed then)."""
        if self._results is None:
            self._results = self._collect()
        return self._results

    def _collect(self) -> list[tuple[dict[str, Any] | None, str]]:
        out = []
        for out_f, err_f in self._files:
            out_f.seek(0)
            err_f.seek(0)
            lines = [ln for ln in err_f.read().strip().splitlines() if not _RATE.search(ln)]
            out.append((parse_json_output(out_f.read()), "\n".join(lines[-8:])))
        return out


def flow_entry(
    plan: Any, flow: Flow, res: dict[str, Any] | None, tail: str, goodput: float | None
) -> dict[str, Any]:
    """One row of ``flows``: the contract keys, then the write's own figures."""
    entry: dict[str, Any] = {
        "src": plan.host_name(flow.src),
        "dst": plan.host_name(flow.dst),
        "role": flow.role,
        "goodput_bps": None if goodput is None else round(goodput, 1),
        "verified": bool(res and res.get("verified")),
        "qp_errors": None if res is None else int(res.get("qp_errors") or 0),
    }
    if res is None:
        entry["error"] = "the write printed no result: " + (tail[-400:] or "no message")
        return entry
    entry.update(
        {
            "goodput_run_bps": res.get("goodput_bps"),
            "capacity_bps": res.get("capacity_bps"),
            "bytes": res.get("bytes"),
            "duration_s": res.get("duration_s"),
            "retransmissions": res.get("retransmissions"),
            "timeouts": res.get("timeouts"),
            "cpu_bound": res.get("cpu_bound"),
            "start_unix_s": res.get("start_unix_s"),
        }
    )
    if res.get("errors"):
        entry["errors"] = list(res["errors"])[:5]
    return entry


def cpu_keys(
    meter: Any, window: dict[str, float] | None, results: Sequence[dict[str, Any] | None]
) -> dict[str, Any]:
    """``cpu_bound`` by mrc-bench's rule (lab.workloads.bench.common.cpu_verdict) over the window in
    which every flow ran (the whole phase when there is none): the machine's busy share from
    ``meter`` (lab.proc.cpu.ChildrenCpuMeter), every NIC process of every write, and the
    longest wait for a CPU per wake-up that a write measured (in frame times: each write's
    own, over its processes and the switch processes)."""
    busy = pressure = None
    if window is not None:
        lo = window["window_start_unix_s"]
        busy = meter.busy_between(lo, lo + window["window_s"])
        pressure = meter.pressure_between(lo, lo + window["window_s"])
    if busy is None and meter.result:
        busy = meter.result.machine_busy_percent / 100
    if pressure is None and meter.result:
        pressure = meter.result.cpu_pressure_fraction
    nics: list[float | None] = []
    waits: list[tuple[float, float]] = []  # (wait per wake-up in s, frame time in s)
    for r in results:
        if r:
            nics += [_num(r.get("cpu_percent_client")), _num(r.get("cpu_percent_server"))]
            us, per = _num(r.get("cpu_wait_us_per_wake")), _num(r.get("cpu_wait_per_frame_time"))
            if us is not None and per:
                waits.append((us / 1e6, us / 1e6 / per))
    machine = None if busy is None else round(100 * busy, 1)
    wait_s, frame_s = max(waits, key=lambda w: w[0] / w[1]) if waits else (None, None)
    return {
        "machine_cpu_percent": machine,
        **cpu.cpu_verdict(machine, nics, pressure, None, wait_s, frame_s),
    }


# --- the incast ----------------------------------------------------------------------------------


@dataclass
class IncastParams:
    senders: list[int]
    dst: int
    qps: int = 8
    victim: tuple[int, int] | None = None
    transport: str = "mrc"
    size: int = 256 << 10
    duration_s: float = 10.0
    progress: bool = True


def run_incast(state: Any, p: IncastParams, echo: Echo = _stderr) -> dict[str, Any]:
    """The victim alone (when there is one), then the incast with the victim beside it; see
    the module doc. Returns the result (the JSON contract of docs/bench.md)."""
    plan = state.plan
    say: Echo = echo if p.progress else (lambda _t: None)
    skip = skip_for(p.duration_s)
    group_kw = {
        "transport": p.transport,
        "qps": p.qps,
        "size": p.size,
        "duration_s": p.duration_s,
        "echo": echo if p.progress else None,
    }
    alone: tuple[dict[str, Any] | None, str] | None = None
    victim_flow = Flow(*p.victim, "victim") if p.victim else None
    if victim_flow is not None:
        say(
            f"mrc-bench incast: the victim h{victim_flow.src} -> h{victim_flow.dst} alone "
            f"for {p.duration_s:g} s"
        )
        with WriteGroup(state, [victim_flow], label="victim alone", **group_kw) as g:
            g.wait()
        alone = g.results()[0]
    flows = [Flow(s, p.dst, "incast") for s in p.senders]
    if victim_flow is not None:
        flows.append(victim_flow)
    say(
        f"mrc-bench incast: {','.join(f'h{s}' for s in p.senders)} -> h{p.dst}"
        + (f" with the victim h{victim_flow.src} -> h{victim_flow.dst}" if victim_flow else "")
        + f" for {p.duration_s:g} s"
    )
    before = read_switches(state, fresh_after_unix=time.time())
    with (
        ChildrenCpuMeter(state) as meter,
        WriteGroup(state, flows, label="incast", **group_kw) as g,
    ):
        g.wait()
    got = g.results()
    after = read_switches(state, fresh_after_unix=time.time())
    results = [r for r, _t in got]
    window = common_window(results, skip, p.duration_s)
    entries = []
    for f, (r, tail) in zip(flows, got, strict=True):
        if window is not None:
            lo = window["window_start_unix_s"]
            gp = window_goodput_bps(r, lo, lo + window["window_s"])
        else:
            gp = _num(r.get("goodput_bps")) if r else None
        entries.append(flow_entry(plan, f, r, tail, gp))
    victim = None
    if victim_flow is not None and alone is not None:
        ares, atail = alone
        alone_bps = None
        if ares and ares.get("timeline"):
            lo, hi = run_window(ares, skip, p.duration_s)
            alone_bps = window_goodput_bps(ares, lo, hi)
        elif ares:
            alone_bps = _num(ares.get("goodput_bps"))
        with_bps = entries[-1]["goodput_bps"]
        victim = {
            "src": plan.host_name(victim_flow.src),
            "dst": plan.host_name(victim_flow.dst),
            "alone_bps": None if alone_bps is None else round(alone_bps, 1),
            "with_incast_bps": with_bps,
            "ratio": round(with_bps / alone_bps, 4) if alone_bps and with_bps is not None else None,
            "alone_verified": bool(ares and ares.get("verified")),
            "alone_qp_errors": None if ares is None else int(ares.get("qp_errors") or 0),
        }
        if ares is None:
            victim["alone_error"] = atail[-400:] or "no result"
        # the victim's own timelines (bins of TIMELINE_MS from each run's start) so a reader
        # can find its worst second beside the incast, not only its average (issue 15)
        vres = got[-1][0]
        victim.update(
            {
                "timeline_ms": TIMELINE_MS,
                "start_unix_s": None if not vres else _num(vres.get("start_unix_s")),
                "timeline": None if not vres else vres.get("timeline"),
                "alone_start_unix_s": None if not ares else _num(ares.get("start_unix_s")),
                "alone_timeline": None if not ares else ares.get("timeline"),
            }
        )
    rows = switch_rows(before, after)
    totals = switch_totals(rows)
    incast_bps = [e["goodput_bps"] for e in entries if e["role"] == "incast"]
    dst_capacity = plan.params.planes * plan.params.rate_mbit * 1e6
    qp_errors = sum(e["qp_errors"] or 0 for e in entries)
    if victim is not None:
        qp_errors += victim["alone_qp_errors"] or 0
    verified = all(e["verified"] for e in entries) and (victim is None or victim["alone_verified"])
    incast_total = sum(x for x in incast_bps if x is not None)
    res: dict[str, Any] = {
        "scenario": "incast",
        "transport": p.transport,
        "lab": state.name,
        "pfc": bool(getattr(state.params, "pfc", False)),
        "switch_mode": state.params.switch,
        "realtime": state.params.realtime,
        "planes": plan.params.planes,
        "port_rate_bps": plan.params.rate_mbit * 1e6,
        "senders": [plan.host_name(s) for s in p.senders],
        "dst": plan.host_name(p.dst),
        "qps": p.qps,
        "size": p.size,
        "duration_s": p.duration_s,
        "flows": entries,
        "victim": victim,
        "incast_goodput_bps": round(incast_total, 1),
        "dst_capacity_bps": dst_capacity,
        "incast_fraction": round(incast_total / dst_capacity, 4) if dst_capacity else None,
        "window_s": None if window is None else round(window["window_s"], 3),
        "window_start_unix_s": None if window is None else window["window_start_unix_s"],
        "start_skew_s": None if window is None else round(window["start_skew_s"], 3),
        "skip_s": skip,
        "switches": rows,
        **totals,
        "qp_errors_total": qp_errors,
        "verified": verified,
        **cpu_keys(meter, window, results),
    }
    return res


# --- output --------------------------------------------------------------------------------------

_LINE = "-" * 94


def mbps(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:.1f} Mb/s"


def _v(v: Any) -> str:
    return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))


def lab_line(res: dict[str, Any]) -> str:
    return (
        f" lab {res['lab']}: {res['planes']} planes x {res['port_rate_bps'] / 1e6:g} Mb/s, "
        f"{res['switch_mode']} switches, PFC {'on' if res['pfc'] else 'off'}   transport "
        f"{res['transport']}"
    )


def flows_table(flows: Sequence[dict[str, Any]], extra: str | None = None) -> list[str]:
    head = f" {'FLOW':<14}{'ROLE':<10}{'GOODPUT':>14}"
    if extra:
        head += f"{extra:>16}"
    out = [head + f"{'VERIFIED':>10}{'QP ERRORS':>11}{'RETX':>8}"]
    for f in flows:
        row = f" {f['src'] + ' -> ' + f['dst']:<14}{f['role']:<10}{mbps(f['goodput_bps']):>14}"
        if extra:
            row += f"{mbps(f.get('storm_goodput_bps')):>16}"
        row += f"{'yes' if f['verified'] else 'NO':>10}{_v(f['qp_errors']):>11}"
        row += f"{_v(f.get('retransmissions')):>8}"
        out.append(row)
        for e in (f.get("errors") or [])[:2]:
            out.append(f"     error: {e}")
        if f.get("error"):
            out.append(f"     {f['error'][-200:]}")
    return out


def switches_table(rows: dict[str, dict[str, Any]], res: dict[str, Any]) -> list[str]:
    """The switches whose counters moved, then the totals."""
    out = [
        f" {'SWITCH':<12}{'PAUSE TX':>9}{'PAUSE RX':>9}{'PAUSED S':>9}{'LOSSLESS DROPS':>15}"
        f"{'WATCHDOG':>9}{'DROPS':>7}{'TRIMS':>7}{'ECN':>7}  drops by reason"
    ]
    quiet = 0
    for name, r in rows.items():
        moved = any(r.get(k) for k in (*PFC_KEYS, "drops_total", "trims", "ecn_marks"))
        if not moved:
            quiet += 1
            continue
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r["drops"].items()))
        out.append(
            f" {name:<12}{_v(r['pause_tx']):>9}{_v(r['pause_rx']):>9}{_v(r['paused_s']):>9}"
            f"{_v(r['lossless_drops']):>15}{_v(r['watchdog_trips']):>9}{r['drops_total']:>7}"
            f"{_v(r['trims']):>7}{_v(r['ecn_marks']):>7}  {reasons}"
        )
    if quiet:
        out.append(f" ({quiet} switches with no counter moved)")
    out.append(
        f" {'total':<12}{res['pause_tx_total']:>9}{res['pause_rx_total']:>9}"
        f"{res['paused_s_total']:>9.3f}{res['lossless_drops_total']:>15}"
        f"{res['watchdog_trips_total']:>9}{res['drops_total']:>7}{res['trims_total']:>7}"
        f"{res['ecn_marks_total']:>7}"
    )
    if not res.get("pfc_reported"):
        out.append(" (no switch reported PFC counters: a lab without PFC, shown as -)")
    return out


def format_incast(res: dict[str, Any]) -> str:
    out = [_LINE, f"{'Incast (mrc-bench)':^94}", lab_line(res)]
    out.append(
        f" {','.join(res['senders'])} -> {res['dst']}   QPs {res['qps']} per flow   "
        f"messages {res['size']} B   {res['duration_s']:g} s per phase"
    )
    out.append(_LINE)
    out += flows_table(res["flows"])
    window = (
        f"over the {res['window_s']:.1f} s all flows ran (skew {res['start_skew_s']:.1f} s, "
        f"first {res['skip_s']:g} s left out)"
        if res["window_s"] is not None
        else "over each write's whole run (the flows never overlapped)"
    )
    out.append(
        f" incast total {mbps(res['incast_goodput_bps'])} = {_v(res['incast_fraction'])} of "
        f"{res['dst']}'s {res['dst_capacity_bps'] / 1e6:g} Mb/s; goodput {window}"
    )
    v = res["victim"]
    if v is not None:
        out.append(
            f" victim {v['src']} -> {v['dst']}: alone {mbps(v['alone_bps'])}, with the incast "
            f"{mbps(v['with_incast_bps'])}: ratio {_v(v['ratio'])}"
        )
    out.append(_LINE)
    out += switches_table(res["switches"], res)
    out.append(_LINE)
    out.append(
        f" verified: {'yes' if res['verified'] else 'NO'}   QP errors: {res['qp_errors_total']}"
        + (
            f"   machine {res['machine_cpu_percent']:.0f}% busy"
            if res.get("machine_cpu_percent") is not None
            else ""
        )
    )
    if warn := cpu.cpu_warning(res):
        out.append(warn)
    return "\n".join(out)
