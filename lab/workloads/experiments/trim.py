"""Claim 10: trimming against dropping, the time from a congestion onset to the first
retransmission request.

A switch that trims forwards an overflowing packet's headers at high priority, so the
receiver NACKs it about half an RTT after the overflow, ahead of the full queue; a switch
that drops leaves the loss to be inferred from the packets behind it (MRC: SACK gaps, or a
timeout; RoCEv2: the next packet out of order, then a NAK), which wait through that queue.

The onset: one host (h1) writes to h0 at its NIC's full rate; a few seconds in, a second
host (h2, under the same T0) starts writing to h0 too with 8 QPs, so each of h0's plane links
is asked for twice its rate and the joiner's QPs start with windows that together overflow
the buffer (a single sprayed QP would not: NSCC keeps its window near the BDP). The onset is the second write's first post (``start_monotonic_s``, on the
CLOCK_MONOTONIC every namespace shares). Each write's ``loss_log`` (``mrc-bench write``:
the pump at which its QPs' retransmission and NACK counts grew, added for this experiment)
gives the first retransmission request after the onset, of either write: for MRC on trimming
switches and for RoCEv2 the first NACK / NAK received; for MRC on dropping switches, which get
no NACK, the first retransmission (the requester's own inference from SACKs or a timeout).
The first retransmission is reported for every tier too.

Tiers: MRC on python switches that trim (the lab's default), MRC on the same switches with
``trimming: false`` in every port's config (switches restarted on it), RoCEv2 (its data is
never trimmable: dropped on either lab; run on the trimming lab). The expected gap between
trimming and dropping is about one full queue's drain time (buffer / link rate), reported
beside the figures; both wait the same time for the queue to fill.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any

from lab.fabric.faults import Faults
from lab.fabric.params import LabParams
from lab.proc.benchrun import WriteSpec, run_parallel
from lab.views import plot
from lab.workloads import calibrate
from lab.workloads.bench.incast import read_switches, switch_rows, switch_totals
from lab.workloads.experiments.base import (
    HEADER_BYTES,
    Context,
    Result,
    cpu_bound_note,
    cv,
    lab_up,
    median,
    rounded,
    setup_of,
)
from lab.workloads.experiments.registry import Spec

# h0 h1 h2 under one T0; a shallow buffer (4 frames per port) fills in about one base RTT,
# before either transport's congestion control can answer the onset (production's incasts
# overflow in microseconds); at the default 64 KiB NSCC holds the queue below overflow
SHAPE = {"planes": 2, "t0": 1, "t1": 1, "hosts_per_t0": 3, "buffer_kb": 16}
STEADY, JOINER, DST = 1, 2, 0
SIZE = 64 << 10
LEAD_S = 2.5  # the steady write's head start (its processes start, NSCC settles)
JOINER_QPS = 8  # the onset: a write of 8 QPs joins (an incast's burst, from one host)
TIERS: dict[str, tuple[str, bool]] = {  # tier -> (transport, switches trim)
    "mrc_trim": ("mrc", True),
    "rocev2": ("rocev2", True),
    "mrc_drop": ("mrc", False),
}
FASTER = 0.8  # verdict: trimming's median delay at most this x dropping's (stated in why)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


# --- pure figures ---------------------------------------------------------------------------


def first_after(res: dict[str, Any] | None, onset_mono: float, column: str) -> float | None:
    """The monotonic time of the first growth of ``column`` (``retransmissions`` or
    ``nacks``) in a write's ``loss_log`` at or after ``onset_mono``; None when none."""
    if not res:
        return None
    start = _num(res.get("start_monotonic_s"))
    log = res.get("loss_log") or {}
    cols = log.get("columns") or []
    if start is None or column not in cols:
        return None
    i = cols.index(column)
    prev = None
    for row in log.get("rows") or []:
        t = start + row[0]
        grew = prev is None or row[i] > prev
        prev = row[i]
        if t >= onset_mono and grew and row[i] > 0:
            return t
    return None


def onset_delays(steady: dict[str, Any] | None, joiner: dict[str, Any] | None) -> dict[str, Any]:
    """From the two writes' JSON: the onset (the joiner's first post) and, after it, the
    first NACK, the first retransmission and the first request (a NACK where there is one,
    else the retransmission) of either write, in seconds after the onset. ``valid`` is false
    when the steady write was not running at the onset (it started late or ended early)."""
    out: dict[str, Any] = {"valid": False}
    onset = _num((joiner or {}).get("start_monotonic_s"))
    s0 = _num((steady or {}).get("start_monotonic_s"))
    if onset is None or s0 is None:
        return out
    s_end = s0 + (_num(steady.get("duration_s")) or 0.0)
    out["steady_lead_s"] = onset - s0
    out["valid"] = s0 + 0.5 <= onset < s_end
    firsts = {}
    for col in ("nacks", "retransmissions"):
        ts = [t for t in (first_after(r, onset, col) for r in (steady, joiner)) if t is not None]
        firsts[col] = min(ts) - onset if ts else None
    out["first_nack_s"] = firsts["nacks"]
    out["first_retx_s"] = firsts["retransmissions"]
    out["first_request_s"] = (
        firsts["nacks"] if firsts["nacks"] is not None else firsts["retransmissions"]
    )
    return out


def queue_drain_s(params: LabParams) -> float:
    """How long a full data buffer takes to drain at the link rate: what a loss signal that
    waits behind the queue pays over one that skips it."""
    return params.buffer_bytes * 8 / (params.rate_mbit * 1e6)


def summarise_tier(runs: list[dict[str, Any]], base_rtt_s: float | None) -> dict[str, Any]:
    ok = [r for r in runs if r.get("valid")]
    req = [r.get("first_request_s") for r in ok]
    out = {
        "first_request_s": median(req),
        "first_request_runs_s": req,
        "first_nack_s": median([r.get("first_nack_s") for r in ok]),
        "first_retx_s": median([r.get("first_retx_s") for r in ok]),
        "cv": cv(req),
        "valid_runs": len(ok),
        "runs": runs,
    }
    if base_rtt_s and out["first_request_s"] is not None:
        out["first_request_rtts"] = out["first_request_s"] / base_rtt_s
    for k in ("trims", "drops", "qp_errors", "timeouts", "sack_losses"):
        out[k] = median([_num(r.get(k)) for r in runs])
    out["verified"] = bool(runs) and all(r.get("verified") for r in runs)
    out["cpu_bound_runs"] = [r.get("cpu_bound") for r in runs]
    return out


def judge(tiers: dict[str, dict[str, Any]], drain_s: float) -> tuple[str, str]:
    """Reproduced: with trimming MRC's first request comes at most FASTER x as late as on the
    dropping switches, and no later than RoCEv2's NAK; partly: only one of the two holds;
    else not. Every tier needs valid runs with a request."""
    t = (tiers.get("mrc_trim") or {}).get("first_request_s")
    d = (tiers.get("mrc_drop") or {}).get("first_request_s")
    r = (tiers.get("rocev2") or {}).get("first_request_s")

    def ms(x: float | None) -> str:
        return "none" if x is None else f"{x * 1e3:.1f} ms"

    why = (
        f"congestion onset (a second writer joins a full link) to the first retransmission "
        f"request, median: MRC with trimming {ms(t)} (a NACK), MRC with dropping {ms(d)} (its "
        f"first retransmission), RoCEv2 (drops, NAK) {ms(r)}; a full queue drains in "
        f"{ms(drain_s)}. Thresholds: trimming <= {FASTER} x dropping, and <= RoCEv2"
    )
    why += cpu_bound_note(tiers, TIERS)
    if t is None or d is None:
        return "not reproduced", why + " (a tier saw no request after the onset)"
    vs_drop = t <= FASTER * d
    vs_roce = r is None or t <= r
    if vs_drop and vs_roce:
        return "reproduced", why
    if vs_drop or (r is not None and t <= r):
        return "partly", why
    return "not reproduced", why


# --- the lab --------------------------------------------------------------------------------


def set_trimming(state: Any, on: bool) -> None:
    """Every python switch port's ``trimming`` in its config file, then each switch restarted
    on its config (``Faults.reboot``, no down time): the lab has no flag for it."""
    faults = Faults(state, echo=None)
    for name, rec in sorted(state.processes.items()):
        path = Path(rec.config)
        conf = json.loads(path.read_text())
        for p in conf.get("ports") or []:
            p["trimming"] = on
        path.write_text(json.dumps(conf, indent=1))
        faults.reboot(name, down_ms=0)


def rate_params(ctx: Context) -> LabParams:
    """The lab at ``ctx``'s rate, else at the rate calibrated for both writers at once."""
    base = LabParams(name=ctx.lab_name, **SHAPE)
    if ctx.rate_mbit is not None:
        return base.with_overrides(rate_mbit=ctx.rate_mbit)
    cal = calibrate.get(base, [(STEADY, DST), (JOINER, DST)], echo=ctx.echo)
    ctx.echo(f"  {cal.line()}")
    return base.with_overrides(rate_mbit=cal.rate_mbit)


def specs(transport: str, planes: int, join_s: float) -> tuple[WriteSpec, WriteSpec]:
    """The steady write (MRC: 1 QP; RoCEv2 as deployed: a QP per plane) and the joiner with
    JOINER_QPS QPs: the QPs' windows together (each about 1.5 BDP when it starts) overflow
    the buffer, which one more sprayed QP would not (NSCC's window holds it below)."""
    qps = 1 if transport == "mrc" else planes
    steady_s = LEAD_S + join_s + 4.0  # covers the joiner's start-up and its whole run
    return (
        WriteSpec(f"h{STEADY}", f"h{DST}", SIZE, steady_s, None, qps, transport, 100, ("-q",)),
        WriteSpec(f"h{JOINER}", f"h{DST}", SIZE, join_s, None, JOINER_QPS, transport, 100, ("-q",)),
    )


def one_run(state: Any, transport: str, join_s: float) -> dict[str, Any]:
    """The steady write, the joiner LEAD_S later, the switches' counters around both."""
    a, b = specs(transport, state.params.planes, join_s)
    before = read_switches(state, fresh_after_unix=time.time())
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        fa = pool.submit(run_parallel, state, [a])
        time.sleep(LEAD_S)
        fb = pool.submit(run_parallel, state, [b])
        ra, rb = fa.result()[0][1], fb.result()[0][1]
    tot = switch_totals(switch_rows(before, read_switches(state, fresh_after_unix=time.time())))
    out = onset_delays(ra, rb)
    got = [r for r in (ra, rb) if r]
    out.update(
        {
            "trims": tot["trims_total"],
            "drops": tot["drops_total"],
            "verified": len(got) == 2 and all(r.get("verified") for r in got),
            "qp_errors": sum(int(r.get("qp_errors") or 0) for r in got),
            "timeouts": sum(int(r.get("timeouts") or 0) for r in got),
            "retransmissions": sum(int(r.get("retransmissions") or 0) for r in got),
            # how the losses were found: SACK gaps (MRC's inference on dropping switches)
            "sack_losses": sum(
                int(q.get("sack_losses") or 0) for r in got for q in r.get("qp_stats") or []
            ),
            "cpu_bound": any(bool(r.get("cpu_bound")) for r in got),
            "base_rtt_s": _num((ra or rb or {}).get("base_rtt_s")),
        }
    )
    if len(got) < 2:
        out["error"] = "a write printed no result"
    return out


def run(ctx: Context, res: Result) -> None:
    params = rate_params(ctx)
    reps = ctx.repetitions(5)
    join_s = 2.0 if ctx.quick else 3.0
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TIERS}
    for trimming in (True, False):
        tiers = [t for t, (_tr, trims) in TIERS.items() if trims == trimming]
        with lab_up(ctx, params) as state:
            if not trimming:
                set_trimming(state, False)
                ctx.echo("  every switch port restarted with trimming: false (drop on overflow)")
            for rep in range(reps):
                for t in tiers:  # alternating the tiers that share a lab
                    transport = TIERS[t][0]
                    r = one_run(state, transport, join_s)
                    runs[t].append(r)
                    if rep == 0:
                        a, b = specs(transport, params.planes, join_s)
                        note = (
                            ""
                            if trimming
                            else (
                                f' (after setting "trimming": false on every port in '
                                f"/run/mrc-lab/{params.name}/switches/*.json and `sudo "
                                f".venv/bin/mrc-lab reboot SWITCH --down 0ms --lab {params.name}` "
                                "for each switch)"
                            )
                        )
                        res.commands.append(
                            f"# {t}{note}: the second write {LEAD_S:g} s after the first\n"
                            + " ".join(["sudo .venv/bin/mrc-bench", *a.argv(params.name)[1:]])
                            + " &\nsleep "
                            + f"{LEAD_S:g}; "
                            + " ".join(["sudo .venv/bin/mrc-bench", *b.argv(params.name)[1:]])
                        )
                    ctx.echo(
                        f"  rep {rep + 1}/{reps} {t}: onset -> first request "
                        f"{_ms(r.get('first_request_s'))} (NACK {_ms(r.get('first_nack_s'))}, "
                        f"retransmission {_ms(r.get('first_retx_s'))}), trims {r['trims']}, "
                        f"drops {r['drops']}, valid {r['valid']}, verified {r['verified']}, "
                        f"cpu_bound {r['cpu_bound']}"
                    )
    rtt = median([r.get("base_rtt_s") for rs in runs.values() for r in rs])
    summary = {t: summarise_tier(runs[t], rtt) for t in TIERS}
    drain = queue_drain_s(params)
    frame_s = (4096 + HEADER_BYTES) * 8 / (params.rate_mbit * 1e6)
    res.setup = setup_of(
        params,
        base_rtt_s=rtt,
        flows=[f"h{STEADY} -> h{DST} (steady)", f"h{JOINER} -> h{DST} (joins {LEAD_S:g} s later)"],
        queue_drain_s=round(drain, 6),
        frame_time_s=round(frame_s, 6),
        scale_note=(
            "Two writers under one T0 overload h0's plane links 2:1; at the lab's rate a frame "
            f"takes {frame_s * 1e3:.1f} ms and the {params.buffer_kb} KiB buffer drains in "
            f"{drain * 1e3:.0f} ms, so the delays are tens of ms where production's are "
            "microseconds: compare them in queue drain times and base RTTs. The times come "
            "from the NIC's pump (sub-ms to a frame time of resolution)."
        ),
    )
    m, d, ro = summary["mrc_trim"], summary["mrc_drop"], summary["rocev2"]
    res.mrc = rounded({"trimming": m, "dropping": d})
    res.rocev2 = rounded(ro)
    keys = ("first_request_s", "first_request_rtts", "first_nack_s", "first_retx_s", "cv",
            "trims", "drops", "timeouts", "sack_losses")  # fmt: skip
    res.metrics = rounded({
        "headline": {"name": "congestion onset to the first retransmission request",
                     "unit": "s", "mrc": m.get("first_request_s"),
                     "rocev2": ro.get("first_request_s")},
        "mrc": {**{k: m.get(k) for k in keys},
                "first_request_s_dropping": d.get("first_request_s"),
                "first_request_rtts_dropping": d.get("first_request_rtts")},
        "rocev2": {k: ro.get(k) for k in keys},
    }, 6)  # fmt: skip
    res.judge(*judge(summary, drain))
    path = ctx.out_dir / f"{res.name}.png"
    draw_result({"mrc": res.mrc, "rocev2": res.rocev2, "setup": res.setup}, path)
    res.plot = str(path)


def draw_result(r: dict[str, Any], path: Path) -> Path:
    """The PNG of a result (its JSON's ``mrc``, ``rocev2`` and ``setup``)."""
    st = r["setup"]
    note = (f"a full queue ({st.get('buffer_packets')} packets) drains in "
            f"{(st.get('queue_drain_s') or 0) * 1e3:.0f} ms; base RTT "
            f"{(st.get('base_rtt_s') or 0) * 1e3:.1f} ms; {st.get('planes')} planes x "
            f"{st.get('link_rate_mbit')} Mb/s; bars: first request (a NACK, else the first "
            "retransmission), dots: first retransmission")  # fmt: skip
    return draw(path, [("MRC, trimming", "mrc", "", r["mrc"]["trimming"]),
                       ("MRC, dropping", "mrc", "//", r["mrc"]["dropping"]),
                       ("RoCEv2 (drops)", "rocev2", "", r["rocev2"])], note)  # fmt: skip


def draw(path: Path, bars: list[tuple[str, str, str, dict[str, Any]]], note: str) -> Path:
    """One bar per tier (label, colour key, hatch, summary), in the shared style
    (lab/views/plot.py), with each tier's first retransmission as a dot."""
    plt = plot.pyplot()
    fig, ax = plt.subplots()
    for i, (label, key, hatch, s) in enumerate(bars):
        v = s.get("first_request_s")
        ax.bar(i, (v or 0.0) * 1e3, 0.6, color=plot.COLOURS[key], hatch=hatch, label=label,
               edgecolor="white" if hatch else None)  # fmt: skip
        ax.annotate("none" if v is None else f"{v * 1e3:.1f} ms", (i, (v or 0.0) * 1e3),
                    ha="center", va="bottom", fontsize=7)  # fmt: skip
        r = s.get("first_retx_s")
        if r is not None:
            ax.plot([i], [r * 1e3], "o", color="#333333", ms=4)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars])
    ax.set_ylabel("ms after the onset (median)")
    ax.set_title("Claim 10: congestion onset to the first retransmission request")
    ax.legend(fontsize=7)
    return plot.save(plt, fig, path, note)


def _ms(x: float | None) -> str:
    return "none" if x is None else f"{x * 1e3:.1f} ms"


EXPERIMENT = Spec(
    name="trim",
    number=10,
    claim="Trimming vs dropping: time from congestion onset to the first retransmission request",
    paper={
        "text": "with trimming the receiver asks for a retransmission as soon as the trimmed "
        "header arrives; with drops the loss is found later (gaps behind the queue, or a "
        "timeout)",
    },
    run=run,
    minutes=4.0,
    quick_minutes=1.0,
)
