"""mrc-bench pause-storm: a host whose NIC stopped draining and keeps sending PFC PAUSE.

    mrc-bench pause-storm --lab mrc --stuck h3 --duration 5s [--interval 10ms] [--flow h0:h3]

From the stuck host's namespace, on every one of its ports, an AF_PACKET socket sends an
802.1Qbb PAUSE frame for the lossless priority (``mrcnic.io.pfc.DEFAULT_PRIORITY``, the
longest pause time, 65535 quanta) every ``--interval`` for ``--duration``, and one resume
(time 0) per port at the end, so the lab is not left paused for the last frame's time. It
sends while flows run that cross the stuck host's T0 (by default one writing *to* the stuck
host and a victim writing to another host under that T0; ``--flow SRC:DST``, repeatable,
chooses them), each a verified ``mrc-bench write``. The storm starts once every flow's data
is on the wire (its source's NIC counters), plus ``lead_s``.

Reported: each flow's goodput over its whole run, before the storm and during it, verified,
QP errors; the PAUSE frames sent; and the switches' counter deltas (lab/workloads/bench/incast.py):
once the switches have PFC, the stuck host's T0s show ``pause_rx`` growing and, when the
pause lasts longer than the watchdog's limit, ``watchdog_trips``. Without PFC in the switch
a PAUSE frame is dropped at the T0 under a drop reason (it is addressed to
01:80:c2:00:00:01, not to the port). Manual: docs/bench.md.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.proc import cpu
from lab.proc.cpu import ChildrenCpuMeter
from lab.proc.watch import Watch
from lab.workloads.bench import incast as ic
from mrcnic.io.afpacket import open_tx_socket
from mrcnic.io.netns import in_netns
from mrcnic.io.pfc import DEFAULT_PRIORITY
from mrcnic.wire import pfc as wire_pfc


def default_flows(plan: Any, stuck: int) -> list[ic.Flow]:
    """The flows of a storm when none are given: a host under another T0 writing to the
    stuck host (``to-stuck``), and a second host (under another T0 when there is one)
    writing to another host under the stuck host's T0 (``victim``), when the lab has one.
    Both cross the stuck host's T0."""
    shape = plan.shape
    st0 = shape.host_t0(stuck)
    everyone = [h for h in range(plan.host_count) if h != stuck]
    if not everyone:
        return []
    remote = [h for h in everyone if shape.host_t0(h) != st0] or everyone
    flows = [ic.Flow(remote[0], stuck, "to-stuck")]
    peers = [h for h in ic.hosts_under(plan, st0) if h != stuck]
    srcs = [h for h in remote if h != remote[0]] or [remote[0]]
    for src in srcs:
        dsts = [h for h in peers if h != src]
        if dsts:
            flows.append(ic.Flow(src, dsts[0], "victim"))
            break
    return flows


def flows_from_pairs(pairs: Sequence[tuple[int, int]], stuck: int) -> list[ic.Flow]:
    """Flows the user named: ``to-stuck`` when they write to the stuck host, else ``victim``."""
    return [ic.Flow(s, d, "to-stuck" if d == stuck else "victim") for s, d in pairs]


def stuck_t0s(plan: Any, stuck: int) -> list[str]:
    """The stuck host's T0 in every plane (the switches its PAUSE frames reach)."""
    t0 = plan.shape.host_t0(stuck)
    return [plan.t0_name(p, t0) for p in range(plan.params.planes)]


@dataclass
class PauseSender:
    """PAUSE frames from a host's ports: one AF_PACKET send socket per port, opened in the
    host's namespace (a socket keeps its namespace), frames built by mrcnic.wire.pfc."""

    state: Any
    host: int
    interval_s: float
    priority: int = DEFAULT_PRIORITY
    quanta: int = wire_pfc.MAX_QUANTA
    sent: int = 0
    per_port: list[int] = field(default_factory=list)
    resumes_sent: int = 0
    errors: int = 0
    start_unix: float | None = None
    end_unix: float | None = None
    socks: list[socket.socket] = field(default_factory=list)

    def open(self) -> PauseSender:
        plan = self.state.plan
        ports = plan.host_ports(self.host)
        with in_netns(plan.namespace(plan.host_name(self.host))):
            for port in ports:
                self.socks.append(open_tx_socket(port.ifname, sndbuf=None))
        self.pause = [wire_pfc.encode_pause(pt.mac, {self.priority: self.quanta}) for pt in ports]
        self.resume = [wire_pfc.encode_pause(pt.mac, {self.priority: 0}) for pt in ports]
        self.per_port = [0] * len(ports)
        return self

    def close(self) -> None:
        for s in self.socks:
            s.close()
        self.socks = []

    def _send_all(self, frames: list[bytes]) -> int:
        n = 0
        for i, (s, frame) in enumerate(zip(self.socks, frames, strict=True)):
            try:
                s.send(frame)
            except OSError:  # ENOBUFS, a port down: counted, the storm goes on
                self.errors += 1
                continue
            n += 1
            if frames is self.pause:
                self.per_port[i] += 1
        return n

    def run(self, seconds: float, stop: threading.Event) -> None:
        """Send every ``interval_s`` for ``seconds`` (or until ``stop``), then resume."""
        t0 = time.monotonic()
        self.start_unix = time.time()
        k = 0
        try:
            while not stop.is_set() and time.monotonic() - t0 < seconds:
                self.sent += self._send_all(self.pause)
                k += 1
                stop.wait(max(0.0, t0 + k * self.interval_s - time.monotonic()))
        finally:
            self.end_unix = time.time()
            self.resumes_sent += self._send_all(self.resume)


@dataclass
class StormParams:
    stuck: int
    seconds: float = 5.0
    interval_ms: float = 10.0
    flows: list[tuple[int, int]] | None = None
    transport: str = "mrc"
    qps: int = 8
    size: int = 256 << 10
    lead_s: float = 1.0  # flows' data on the wire this long before the storm starts
    tail_s: float = 1.0  # flows go on at least this long after it
    skew_s: float = 2.0  # room in the flows' duration for their start-up skew
    start_timeout_s: float = 45.0
    progress: bool = True

    @property
    def flow_duration_s(self) -> float:
        return self.lead_s + self.seconds + self.tail_s + self.skew_s


def _wait_started(group: ic.WriteGroup, watches: list[Any], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(w.started.is_set() for w in watches):
            return True
        if not group.running():
            return False
        time.sleep(0.05)
    return False


def run_storm(state: Any, p: StormParams, echo: ic.Echo = ic._stderr) -> dict[str, Any]:
    """The storm beside its flows; see the module doc. Returns the result (docs/bench.md)."""
    plan = state.plan
    say: ic.Echo = echo if p.progress else (lambda _t: None)
    flows = flows_from_pairs(p.flows, p.stuck) if p.flows else default_flows(plan, p.stuck)
    if not flows:
        raise ValueError("the lab has no other host to write with")
    sender = PauseSender(state, p.stuck, p.interval_ms / 1000).open()
    stop = threading.Event()
    storm_thread = threading.Thread(
        target=sender.run, args=(p.seconds, stop), name="pause-storm", daemon=True
    )
    started_ok = False
    say(
        f"mrc-bench pause-storm: flows {', '.join(f'h{f.src}->h{f.dst}' for f in flows)} "
        f"({p.transport}); h{p.stuck} sends PAUSE (priority {sender.priority}) on "
        f"{len(sender.socks)} ports every {p.interval_ms:g} ms for {p.seconds:g} s once they run"
    )
    try:
        before = ic.read_switches(state, fresh_after_unix=time.time())
        group = ic.WriteGroup(
            state,
            flows,
            transport=p.transport,
            qps=p.qps,
            size=p.size,
            duration_s=p.flow_duration_s,
            echo=echo if p.progress else None,
            label="pause-storm",
        )
        with contextlib.ExitStack() as stack:
            meter = stack.enter_context(ChildrenCpuMeter(state))
            stack.enter_context(group)
            watches = [
                stack.enter_context(Watch(state, f"h{f.src}", f"h{f.dst}", poll_s=0.2))
                for f in flows
            ]
            started_ok = _wait_started(group, watches, p.start_timeout_s)
            if not started_ok:
                say("mrc-bench pause-storm: not every flow's data started; storming anyway")
            stop.wait(p.lead_s)
            storm_thread.start()
            next_line = time.monotonic() + 1.0

            def tick() -> None:
                nonlocal next_line
                if p.progress and storm_thread.is_alive() and time.monotonic() >= next_line:
                    next_line += 1.0
                    t = time.time() - (sender.start_unix or time.time())
                    say(
                        f"mrc-bench pause-storm: {t:4.1f} s of {p.seconds:g} s, "
                        f"{sender.sent} PAUSE frames sent ({sender.errors} send errors)"
                    )

            group.wait(tick=tick)
            stop.set()
            storm_thread.join(timeout=5)
        got = group.results()
        after = ic.read_switches(state, fresh_after_unix=time.time())
    finally:
        stop.set()
        if storm_thread.is_alive():
            storm_thread.join(timeout=5)
        sender.close()
    return storm_result(state, p, flows, got, sender, before, after, meter, started_ok)


def storm_result(
    state: Any,
    p: StormParams,
    flows: Sequence[ic.Flow],
    got: Sequence[tuple[dict[str, Any] | None, str]],
    sender: PauseSender,
    before: dict[str, Any],
    after: dict[str, Any],
    meter: Any,
    started_ok: bool,
) -> dict[str, Any]:
    plan = state.plan
    lo, hi = sender.start_unix, sender.end_unix
    entries = []
    for f, (r, tail) in zip(flows, got, strict=True):
        e = ic.flow_entry(plan, f, r, tail, ic._num(r.get("goodput_bps")) if r else None)
        if lo is not None and hi is not None:
            sg = ic.window_goodput_bps(r, lo, hi)
            pre = ic.window_goodput_bps(r, max(lo - 1.0, r["start_unix_s"]), lo) if r else None
        else:
            sg = pre = None
        e["pre_storm_bps"] = None if pre is None else round(pre, 1)
        e["storm_goodput_bps"] = None if sg is None else round(sg, 1)
        e["storm_ratio"] = round(sg / pre, 4) if sg is not None and pre else None
        entries.append(e)
    rows = ic.switch_rows(before, after)
    totals = ic.switch_totals(rows)
    t0s = stuck_t0s(plan, p.stuck)
    rate = plan.params.rate_mbit * 1e6
    window = None
    if lo is not None and hi is not None:
        window = {"window_start_unix_s": lo, "window_s": hi - lo}
    results = [r for r, _t in got]
    return {
        "scenario": "pause-storm",
        "stuck": plan.host_name(p.stuck),
        "lab": state.name,
        "pfc": bool(getattr(state.params, "pfc", False)),
        "switch_mode": state.params.switch,
        "realtime": state.params.realtime,
        "planes": plan.params.planes,
        "port_rate_bps": rate,
        "transport": p.transport,
        "qps": p.qps,
        "size": p.size,
        "seconds": p.seconds,
        "interval_ms": p.interval_ms,
        "priority": sender.priority,
        "quanta": sender.quanta,
        "pause_frame_s": round(wire_pfc.pause_s(sender.quanta, rate), 6),
        "pauses_sent": sender.sent,
        "pauses_per_port": list(sender.per_port),
        "resumes_sent": sender.resumes_sent,
        "send_errors": sender.errors,
        "storm_start_unix_s": lo,
        "storm_s": None if lo is None or hi is None else round(hi - lo, 3),
        "flows_started": started_ok,
        "flows": entries,
        "stuck_t0s": t0s,
        "stuck_t0_pause_rx": int(sum(rows[n]["pause_rx"] or 0 for n in t0s if n in rows)),
        "stuck_t0_watchdog_trips": int(
            sum(rows[n]["watchdog_trips"] or 0 for n in t0s if n in rows)
        ),
        "switches": rows,
        **totals,
        "qp_errors_total": sum(e["qp_errors"] or 0 for e in entries),
        "verified": all(e["verified"] for e in entries),
        **ic.cpu_keys(meter, window, results),
    }


def format_storm(res: dict[str, Any]) -> str:
    out = [ic._LINE, f"{'PFC pause storm (mrc-bench)':^94}", ic.lab_line(res)]
    out.append(
        f" stuck {res['stuck']}: {res['pauses_sent']} PAUSE frames (priority {res['priority']}, "
        f"{res['quanta']} quanta = {res['pause_frame_s'] * 1e3:.1f} ms each) on "
        f"{len(res['pauses_per_port'])} ports every {res['interval_ms']:g} ms for "
        f"{res['storm_s'] if res['storm_s'] is not None else '-'} s, {res['resumes_sent']} resumes"
        + (f", {res['send_errors']} send errors" if res["send_errors"] else "")
    )
    out.append(_flows_head(res))
    out.append(ic._LINE)
    out += ic.flows_table(res["flows"], extra="IN THE STORM")
    for f in res["flows"]:
        if f.get("storm_ratio") is not None:
            out.append(
                f" {f['src']} -> {f['dst']}: {ic.mbps(f['pre_storm_bps'])} in the second before "
                f"the storm, {ic.mbps(f['storm_goodput_bps'])} during it (ratio {f['storm_ratio']:.3f})"
            )
    out.append(ic._LINE)
    out += ic.switches_table(res["switches"], res)
    out.append(
        f" the stuck host's T0s ({', '.join(res['stuck_t0s'])}): pause_rx "
        f"{res['stuck_t0_pause_rx']}, watchdog trips {res['stuck_t0_watchdog_trips']}"
    )
    out.append(ic._LINE)
    out.append(
        f" verified: {'yes' if res['verified'] else 'NO'}   QP errors: {res['qp_errors_total']}"
    )
    if warn := cpu.cpu_warning(res):
        out.append(warn)
    return "\n".join(out)


def _flows_head(res: dict[str, Any]) -> str:
    return (
        f" flows: {len(res['flows'])} x {res['qps']} QPs, {res['size']} B messages; "
        "goodput over each write's run, and while the PAUSE frames were sent"
    )
