"""Claim 6, one EV forced to drop 20% of its packets: it leaves the active set at once and a
backup takes its place.

Paper: with 16 paths between two hosts (2 per plane x 8 planes), one path made to drop 20%
of its packets: MRC's EVs on it leave the active set at once, a backup EV takes each one's
place, goodput recovers. Here: the default lab (8 planes x 2 T1: 16 paths between the T0s),
one long ``mrc-bench write --ev-log N`` from h0 to h3 while ``mrc-lab loss p0-t0-0 p0-t1-0
--loss 20%`` makes the path (plane 0, T1 0) lose 20% each way, then clears it. From the
write's EV log (every EV state change with its time, cause, and the plane's active set):
how many of the EVs sprayed on that path left GOOD, how long after the loss started, how
much of the loss window they spent out of the active set (probes bring an EV back after two
answered probes, and 80% of probes get through), whether backups filled the plane's active
set, and how many EVs on healthy paths were condemned meanwhile. Goodput during the loss
relative to before says whether it recovered. RoCEv2 as deployed (a QP per plane, its T1
hashed) meets the loss only if the plane-0 QP hashed onto T1 0: recorded per run, and its
go-back-N goodput then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lab.proc.benchrun import WriteRun, WriteSpec, run_write
from lab.proc.schedule import Step
from lab.views import plot
from lab.workloads.experiments.base import (
    Context,
    Result,
    lab_params,
    lab_up,
    median,
    rounded,
    setup_of,
)
from lab.workloads.experiments.port_loss import window_mean
from lab.workloads.experiments.registry import Spec

PERCENT = 20.0
PLANE, T1 = 0, 0  # the lossy path: plane 0 via its T1 0 (the link p0-t0-0 - p0-t1-0)
SIZE = 64 * 1024
BIN_MS = 250
WARMUP_S = 1.0
EV_LOG_MAX = 20000
NOT_GOOD = ("ASSUMED_BAD", "SKIP", "DENIED")
FAST_S = 1.0  # "at once": the median EV on the lossy path left GOOD within this
LEFT_MIN = 0.8  # share of the lossy path's sprayed EVs that must leave
OUT_MIN = 0.5  # and the share of the loss window they spend out of the active set
KEPT_MIN = 0.9  # goodput during the loss, relative to before


# --- the EV log (pure; unit-tested) ----------------------------------------------------------


def rows(log: dict[str, Any], key: str = "events", cols: str = "columns") -> list[dict[str, Any]]:
    """``ev_log``'s rows as dicts keyed by its column names."""
    names = log.get(cols) or []
    return [dict(zip(names, r, strict=False)) for r in log.get(key) or []]


def transitions(events: Sequence[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Per EV, its state changes in time order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for e in sorted(events, key=lambda e: e["t_s"]):
        out.setdefault(int(e["ev"]), []).append(e)
    return out


def time_not_good(trans: Sequence[dict[str, Any]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi) the EV spent outside GOOD (GOOD before its first change)."""
    state = trans[0]["old"] if trans else "GOOD"
    t_prev, out = lo, 0.0
    for e in trans:
        t = e["t_s"]
        if t <= lo:
            state = e["new"]
            continue
        if t >= hi:
            break
        if state != "GOOD":
            out += t - t_prev
        state, t_prev = e["new"], t
    if state != "GOOD":
        out += hi - t_prev
    return out


def first_exit(trans: Sequence[dict[str, Any]], after: float, before: float) -> dict | None:
    """The EV's first move out of GOOD in [after, before), or None."""
    return next(
        (e for e in trans if after <= e["t_s"] < before and e["old"] == "GOOD"
         and e["new"] in NOT_GOOD),
        None,
    )  # fmt: skip


def summarise_evs(
    log: dict[str, Any],
    loss_lo: float,
    loss_hi: float,
    active_per_plane: int,
    plane: int = PLANE,
    t1: int = T1,
) -> dict[str, Any]:
    """What the EVs did while the path (plane, t1) lost packets, from one write's ev_log."""
    pool = [p for p in rows(log, "pool", "pool_columns") if p["qp"] == 0]
    events = [e for e in rows(log) if e["qp"] == 0]
    if log.get("dropped"):  # the log stops early: judge only what it covers
        loss_hi = min(loss_hi, max((e["t_s"] for e in events), default=loss_lo))
    by_ev = transitions(events)
    on_path = [p for p in pool if p["plane"] == plane and p["t1"] == t1]
    sprayed = [p["ev"] for p in on_path if not p["backup"]]
    others = [p["ev"] for p in pool if not (p["plane"] == plane and p["t1"] == t1)]
    win = max(loss_hi - loss_lo, 1e-9)
    exits = {ev: first_exit(by_ev.get(ev, []), loss_lo, loss_hi) for ev in sprayed}
    delays = [e["t_s"] - loss_lo for e in exits.values() if e is not None]
    out_s = {ev: time_not_good(by_ev.get(ev, []), loss_lo, loss_hi) for ev in sprayed}
    out_share = [v / win for v in out_s.values()]
    n_exits = {
        ev: sum(1 for e in by_ev.get(ev, []) if loss_lo <= e["t_s"] < loss_hi
                and e["old"] == "GOOD" and e["new"] in NOT_GOOD)
        for ev in sprayed
    }  # fmt: skip
    leaves = sum(n_exits.values())
    plane_rows = [e for e in events if e["plane"] == plane and loss_lo <= e["t_s"] < loss_hi]
    actives = [e["active_on_plane"] for e in plane_rows if e["active_on_plane"] is not None]
    backups = [e["backups_active_on_plane"] for e in plane_rows
               if e["backups_active_on_plane"] is not None]  # fmt: skip
    condemned = {
        e["ev"] for e in events if e["ev"] in set(others) and e["new"] == "ASSUMED_BAD"
        and loss_lo <= e["t_s"] < loss_hi
    }  # fmt: skip
    plane_tx = sum(p["tx_packets"] for p in pool if p["plane"] == plane)
    path_tx = sum(p["tx_packets"] for p in on_path)
    causes: dict[str, int] = {}
    for ev in sprayed:
        e = exits.get(ev)
        if e is not None:
            causes[e["cause"]] = causes.get(e["cause"], 0) + 1
    return {
        "evs_on_path_sprayed": len(sprayed),
        "evs_on_path_backups": len(on_path) - len(sprayed),
        "evs_left": len(delays),
        "left_share": len(delays) / len(sprayed) if sprayed else None,
        "delay_median_s": median(delays),
        "delay_max_s": max(delays) if delays else None,
        "first_exit_causes": causes,
        "out_of_active_share": median(out_share),
        "exits_per_ev": leaves / len(sprayed) if sprayed else None,
        # how long one exit lasted before probes brought the EV back (median over EVs)
        "out_episode_s": median([out_s[ev] / n for ev, n in n_exits.items() if n]),
        "plane_active_min": min(actives) if actives else None,
        "plane_active_full": (min(actives) >= active_per_plane) if actives else None,
        "backups_active_max": max(backups) if backups else None,
        "healthy_evs_condemned": len(condemned),
        "healthy_evs": len(others),
        "path_share_of_plane_packets": path_tx / plane_tx if plane_tx else None,
        "events_in_window": sum(1 for e in events if loss_lo <= e["t_s"] < loss_hi),
        "log_dropped": log.get("dropped", 0),
    }


def goodput_phases(
    timeline: Sequence[Sequence[float]],
    bin_s: float,
    capacity_bps: float,
    loss_lo: float,
    loss_hi: float,
    end_s: float,
) -> dict[str, float | None]:
    """Goodput / capacity before the loss, during it (after its first second: the claim is
    that it recovers) and after it; ``kept`` = during / before."""
    if not capacity_bps:
        return {"fraction_before": None, "fraction_loss": None, "fraction_after": None,
                "fraction_loss_first_s": None, "kept": None}  # fmt: skip
    f = {
        "fraction_before": window_mean(timeline, bin_s, WARMUP_S, loss_lo) / capacity_bps,
        "fraction_loss_first_s": window_mean(timeline, bin_s, loss_lo, loss_lo + 1) / capacity_bps,
        "fraction_loss": window_mean(timeline, bin_s, loss_lo + 1, loss_hi) / capacity_bps,
        "fraction_after": window_mean(timeline, bin_s, loss_hi + 1, end_s) / capacity_bps
        if end_s > loss_hi + 1
        else None,
    }
    b = f["fraction_before"]
    f["kept"] = f["fraction_loss"] / b if b and math.isfinite(b) else None
    return f


def judge(m: dict[str, Any], ro: dict[str, Any], paths: int) -> tuple[str, str]:
    left, delay, out = m.get("left_share"), m.get("delay_median_s"), m.get("out_of_active_share")
    kept = m.get("kept")
    why = (
        f"{PERCENT:g}% loss on 1 of {paths} paths (plane {PLANE}, T1 {T1}): "
        f"{m.get('evs_left')} of the {m.get('evs_on_path_sprayed')} EVs MRC sprayed on it left "
        f"GOOD, the median {_s(delay)} after the loss began (max {_s(m.get('delay_max_s'))}; "
        f"causes {m.get('first_exit_causes')}); probes brought them back and they left again "
        f"({_f(m.get('exits_per_ev'))} exits per EV), out of the active set "
        f"{_f(out)} of the loss window; plane {PLANE}'s active set "
        + ("stayed full" if m.get("plane_active_full") else f"fell to {m.get('plane_active_min')}")
        + f" with up to {m.get('backups_active_max')} backups in it; an exit lasted "
        f"{_s(m.get('out_episode_s'))} (median); "
        f"{m.get('healthy_evs_condemned')} of {m.get('healthy_evs')} EVs on healthy paths "
        f"condemned meanwhile; goodput during the loss {_f(kept)} of before "
        f"({m.get('qp_errors', 0)} QP errors, verified {m.get('verified')}). RoCEv2: "
        + (
            f"its plane-{PLANE} QP hashed onto the lossy path in {ro.get('on_path_runs')} of "
            f"{ro.get('runs_n')} runs, goodput then {_f(ro.get('kept_on_path'))} of before "
            f"({ro.get('qp_errors', 0)} QP errors)"
            if ro.get("on_path_runs")
            else f"no run hashed a QP onto the lossy path ({ro.get('runs_n')} runs)"
        )
        + f" (thresholds: >= {LEFT_MIN:.0%} leave, median within {FAST_S:g} s, out >= "
        f"{OUT_MIN:.0%} of the window, goodput >= {KEPT_MIN} of before)"
    )
    clean = m.get("verified") and not m.get("qp_errors")
    if left is None or kept is None:
        return "not reproduced", why
    fast = left >= LEFT_MIN and delay is not None and delay <= FAST_S
    if fast and (out or 0) >= OUT_MIN and kept >= KEPT_MIN and clean:
        return "reproduced", why
    if fast or kept >= KEPT_MIN:
        return "partly", why
    return "not reproduced", why


def _f(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"


def _s(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.2f} s"


# --- running ---------------------------------------------------------------------------------


def one_run(ctx: Context, state: Any, params: Any, t: str, tm: dict[str, float]) -> dict[str, Any]:
    dst = f"h{params.host_count - 1}"
    qps = 1 if t == "mrc" else params.planes
    extra = ("--ev-log", str(EV_LOG_MAX)) if t == "mrc" else ()
    spec = WriteSpec("h0", dst, SIZE, tm["duration"], None, qps, t, BIN_MS, extra)
    a, b = f"p{PLANE}-t0-0", f"p{PLANE}-t1-{T1}"
    steps = [Step("loss", tm["at"], a, b, undo_s=tm["undo"], percent=PERCENT)]
    return analyse_run(run_write(state, spec, steps, echo=ctx.echo), params, tm)


def analyse_run(run: WriteRun, params: Any, tm: dict[str, float]) -> dict[str, Any]:
    res = run.result or {}
    f = run.faults[0] if run.faults else None
    lo = f.start_s if f else tm["at"]
    hi = f.end_s if f and f.end_s is not None else tm["undo"]
    hi = min(hi, tm["duration"])
    out: dict[str, Any] = goodput_phases(res.get("timeline") or [], BIN_MS / 1000,
                                         float(res.get("capacity_bps") or 0), lo, hi,
                                         tm["duration"])  # fmt: skip
    if res.get("ev_log"):
        out.update(summarise_evs(res["ev_log"], lo, hi, 128 // params.planes))
    stats = res.get("qp_stats") or []
    out.update(
        loss_s=[round(lo, 3), round(hi, 3)],
        base_rtt_s=res.get("base_rtt_s"),
        verified=bool(res.get("verified")),
        qp_errors=int(res.get("qp_errors") or 0),
        errors=(res.get("errors") or [])[:3] + ([run.error] if run.error else []),
        retransmissions=res.get("retransmissions"),
        sack_losses=sum(s.get("sack_losses", 0) for s in stats),
        timeouts=res.get("timeouts"),
        retx_rate=(res.get("retransmissions") or 0) / max(1, (res.get("bytes") or 0) // 4096),
        ev_transitions=res.get("ev_transitions"),
        # RoCEv2: QP i is bound to plane i; the plane-0 QP met the loss if it retransmitted
        retx_per_qp=[s.get("retransmissions", 0) for s in stats],
        cpu_bound=res.get("cpu_bound"),
        timeline=res.get("timeline") or [],
        argv=" ".join(run.argv[1:]),
    )
    if res.get("transport") == "rocev2":
        out["on_lossy_path"] = bool(len(out["retx_per_qp"]) > PLANE and out["retx_per_qp"][PLANE])
    if out.get("delay_median_s") is not None and out["base_rtt_s"]:
        out["delay_median_rtts"] = out["delay_median_s"] / out["base_rtt_s"]
    return out


def run(ctx: Context, res: Result) -> None:
    params = lab_params(ctx, planes=8, t0=2, t1=2)  # 16 paths between the T0s, as the paper
    reps = ctx.repetitions(3)
    dur = 10.0 if ctx.quick else 20.0
    tm = {"duration": dur, "at": 3.0 if ctx.quick else 4.0, "undo": dur - 2.0}
    runs: dict[str, list[dict[str, Any]]] = {"mrc": [], "rocev2": []}
    with lab_up(ctx, params) as state:
        for rep in range(reps):
            for t in ("mrc", "rocev2"):
                r = one_run(ctx, state, params, t, tm)
                runs[t].append(r)
                if rep == 0:
                    res.commands.append(
                        f"sudo .venv/bin/mrc-lab loss p{PLANE}-t0-0 p{PLANE}-t1-{T1} --loss "
                        f"{PERCENT:g}% --lab {params.name}  # {tm['at']:g} s into: "
                        f"sudo .venv/bin/{r['argv']}"
                    )
                ctx.echo(
                    f"  rep {rep + 1}/{reps} {t}: goodput before {_f(r['fraction_before'])}, "
                    f"during the loss {_f(r['fraction_loss'])} (kept {_f(r['kept'])})"
                    + (
                        f"; {r['evs_left']}/{r['evs_on_path_sprayed']} EVs on the path left "
                        f"GOOD, median {_s(r['delay_median_s'])}, out "
                        f"{_f(r['out_of_active_share'])} of the window"
                        if t == "mrc" and "evs_left" in r
                        else f"; plane-{PLANE} QP on the lossy path: {r.get('on_lossy_path')}"
                    )
                    + f"; QP errors {r['qp_errors']}"
                )
        res.setup = setup_of(
            params,
            writer="h0",
            reader=f"h{params.host_count - 1}",
            lossy_link=f"p{PLANE}-t0-0 - p{PLANE}-t1-{T1} ({PERCENT:g}% each way)",
            evs_per_plane=128 // params.planes,
            backups_per_plane=8,
            schedule_s=tm,
            scale_note="16 paths between the T0s as in the paper; at lab rates each EV carries "
            "tens of packets a second, so 'at once' is measured in milliseconds and RTTs of "
            "the lab, and a probe (answered twice) brings a condemned EV back within RTTs.",
        )
    m, ro = aggregate_mrc(runs["mrc"]), aggregate_roce(runs["rocev2"])
    res.mrc, res.rocev2 = rounded(m), rounded(ro)
    res.metrics = rounded({
        "headline": {"name": "time for the lossy path's EVs to leave GOOD (median)",
                     "unit": "s", "mrc": m.get("delay_median_s"), "rocev2": None},
        "mrc": {k: m.get(k) for k in ("delay_median_s", "delay_median_rtts", "left_share",
                                      "out_of_active_share", "exits_per_ev", "out_episode_s",
                                      "healthy_evs_condemned", "path_share_of_plane_packets",
                                      "kept", "fraction_loss_first_s", "retx_rate",
                                      "qp_errors")},
        "rocev2": {k: ro.get(k) for k in ("kept", "kept_on_path", "on_path_runs", "retx_rate",
                                          "qp_errors")},
    })  # fmt: skip
    res.judge(*judge(m, ro, params.planes * params.t1))
    path = ctx.out_dir / f"{res.name}.png"
    series = {}
    for t in ("mrc", "rocev2"):
        last = runs[t][-1]
        pts = [p for p in last["timeline"] if p[0] < tm["duration"]]
        cap = params.planes * params.rate_mbit * 1e6
        series[t] = ([p[0] for p in pts], [p[1] / cap for p in pts])
    lo, hi = runs["mrc"][-1]["loss_s"]
    plot.lines(path, f"Claim 6: {PERCENT:g}% loss on 1 of 16 paths during a write", series,
               xlabel="seconds since the write started", ylabel="goodput / capacity",
               marks=[(lo, f"{PERCENT:g}% loss p{PLANE}/T1 {T1}"), (hi, "loss cleared")],
               note=f"MRC: {m.get('evs_left')}/{m.get('evs_on_path_sprayed')} EVs on the path "
                    f"left GOOD, median {_s(m.get('delay_median_s'))}; RoCEv2 plane-0 QP on "
                    f"the lossy path in the last run: {runs['rocev2'][-1].get('on_lossy_path')}")  # fmt: skip
    res.plot = str(path)


def aggregate_mrc(rs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("left_share", "delay_median_s", "delay_max_s", "delay_median_rtts",
            "out_of_active_share", "exits_per_ev", "out_episode_s", "healthy_evs_condemned",
            "path_share_of_plane_packets", "kept", "fraction_before", "fraction_loss",
            "fraction_loss_first_s", "fraction_after", "retx_rate", "evs_left",
            "evs_on_path_sprayed", "backups_active_max", "plane_active_min")  # fmt: skip
    out: dict[str, Any] = {k: median([r.get(k) for r in rs]) for k in keys}
    out.update(
        healthy_evs=rs[0].get("healthy_evs") if rs else None,
        plane_active_full=all(r.get("plane_active_full") for r in rs),
        first_exit_causes=rs[-1].get("first_exit_causes") if rs else {},
        qp_errors=sum(r["qp_errors"] for r in rs),
        verified=all(r["verified"] for r in rs),
        errors=[e for r in rs for e in r["errors"]][:4],
        cpu_bound_runs=[r["cpu_bound"] for r in rs],
        runs=[{k: v for k, v in r.items() if k != "timeline"} for r in rs],
    )
    return out


def aggregate_roce(rs: list[dict[str, Any]]) -> dict[str, Any]:
    on = [r for r in rs if r.get("on_lossy_path")]
    return {
        "kept": median([r.get("kept") for r in rs]),
        "kept_on_path": median([r.get("kept") for r in on]),
        "on_path_runs": len(on),
        "runs_n": len(rs),
        "fraction_before": median([r.get("fraction_before") for r in rs]),
        "fraction_loss": median([r.get("fraction_loss") for r in rs]),
        "retx_rate": median([r.get("retx_rate") for r in rs]),
        "qp_errors": sum(r["qp_errors"] for r in rs),
        "verified": all(r["verified"] for r in rs),
        "errors": [e for r in rs for e in r["errors"]][:4],
        "runs": [{k: v for k, v in r.items() if k != "timeline"} for r in rs],
    }


EXPERIMENT = Spec(
    name="ev_drop",
    number=6,
    claim="One EV forced to drop 20% of its packets (16 paths: 2 per plane x 8): that EV "
    "leaves the active set at once and a backup takes its place",
    paper={
        "text": "one of 16 paths (2 per plane x 8 planes) made to drop 20% of its packets: "
        "its EV leaves the active set at once and a backup EV takes its place",
        "loss_percent": PERCENT,
        "paths": 16,
    },
    run=run,
    minutes=2.5,  # measured at 10 Mb/s on the 2-core machine
    quick_minutes=0.6,
)
