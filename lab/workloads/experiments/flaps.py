"""Claim 9: several T0-T1 link flaps per minute: no measurable job impact.

The job is the soak's ring all-reduce (lab/workloads/experiments/jobs.py). Each transport runs it
twice for the same time: once clean (the control) and once while T0-T1 links flap
(``FLAPS_PER_MIN`` per minute, each link down ``DOWN_S``, a different link each time,
spread over planes). "No measurable impact" is judged on the step time: the flapping run's
median step within ``P50_TOL`` of the control's and its P99 within ``P99_TOL``, with no
failed step and no restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.fabric.params import LabParams
from lab.proc.schedule import Step
from lab.views import plot
from lab.workloads.experiments.base import Context, Result, lab_params, lab_up, rounded, setup_of
from lab.workloads.experiments.jobs import relative_step_series, run_job, step_figures
from lab.workloads.experiments.registry import Spec

FLAPS_PER_MIN = 6
DOWN_S = 1.0
FIRST_S = 4.0
P50_TOL, P99_TOL = 0.05, 0.25


def flap_steps(params: LabParams, seconds: float) -> list[Step]:
    """One flap every 60 / FLAPS_PER_MIN s from FIRST_S, over different T0-T1 links."""
    period = 60.0 / FLAPS_PER_MIN
    links = [(f"p{p}-t0-{a}", f"p{p}-t1-{b}") for b in range(params.t1)
             for a in range(params.t0) for p in range(params.planes)]  # fmt: skip
    out, t, i = [], FIRST_S, 0
    while t + DOWN_S + 1.0 < seconds:
        a, b = links[i % len(links)]
        out.append(Step("link", round(t, 2), a, b, undo_s=round(t + DOWN_S, 2)))
        t += period
        i += 1
    return out


def compare(control: dict[str, Any], flapped: dict[str, Any]) -> dict[str, Any]:
    c50, f50 = control.get("step_p50_s"), flapped.get("step_p50_s")
    c99, f99 = control.get("step_p99_s"), flapped.get("step_p99_s")
    return {
        "p50_change": (f50 / c50 - 1) if c50 and f50 else None,
        "p99_change": (f99 / c99 - 1) if c99 and f99 else None,
        "busbw_change": (flapped["busbw_mbps"] / control["busbw_mbps"] - 1)
        if control.get("busbw_mbps") and flapped.get("busbw_mbps") else None,
    }  # fmt: skip


def judge(c: dict[str, Any], flapped: dict[str, Any]) -> tuple[str, str]:
    p50, p99 = c.get("p50_change"), c.get("p99_change")
    clean = flapped.get("failed_steps") == 0 and flapped.get("restarts") == 0
    txt = (f"MRC under flaps: median step {100 * (p50 or 0):+.1f}%, P99 {100 * (p99 or 0):+.1f}% "
           f"against the clean control, {flapped.get('failed_steps')} failed steps, "
           f"{flapped.get('restarts')} restarts")  # fmt: skip
    if clean and p50 is not None and abs(p50) <= P50_TOL and p99 is not None and p99 <= P99_TOL:
        return "reproduced", txt + f" (within {P50_TOL:.0%} / {P99_TOL:.0%})"
    if clean:
        return "partly", txt + f" (no failure, but beyond {P50_TOL:.0%} / {P99_TOL:.0%})"
    return "not reproduced", txt


def run(ctx: Context, res: Result) -> None:
    params = lab_params(ctx)
    seconds = 20.0 if ctx.quick else 40.0
    steps = flap_steps(params, seconds)
    out: dict[str, Any] = {}
    with lab_up(ctx, params) as state:
        for t in ("mrc", "rocev2"):
            runs = {}
            for kind, sched in (("control", []), ("flaps", steps)):
                ctx.echo(f"  {t} {kind}: all-reduce for {seconds:g} s, {len(sched)} flaps")
                s = run_job(ctx, state, params, t, sched, seconds)
                runs[kind] = {"figures": step_figures(s), "step_log": s.get("step_log"),
                              "fault_log": s.get("fault_log")}  # fmt: skip
                ctx.echo(f"    {rounded(runs[kind]['figures'], 3)}")
            runs["change"] = compare(runs["control"]["figures"], runs["flaps"]["figures"])
            out[t] = runs
        res.setup = setup_of(params, scale_note=(
            f"{len(steps)} flaps in {seconds:g} s ({FLAPS_PER_MIN} per minute), each T0-T1 "
            f"link down {DOWN_S:g} s; one ring all-reduce over {params.host_count} hosts."))  # fmt: skip
    res.commands = [
        f"sudo .venv/bin/mrc-lab experiment flaps{' --quick' if ctx.quick else ''}",
        "sudo .venv/bin/mrc-lab flap p0-t0-0 p0-t1-0 --period 2000ms --lab LAB",
    ]
    res.mrc, res.rocev2 = rounded(out["mrc"]), rounded(out["rocev2"])
    mc, rc = out["mrc"]["change"], out["rocev2"]["change"]
    mf, rf = out["mrc"]["flaps"]["figures"], out["rocev2"]["flaps"]["figures"]
    keys = ("step_p50_s", "step_p99_s", "busbw_mbps", "failed_steps", "restarts", "qp_errors")
    res.metrics = rounded({
        "headline": {"name": "median step time change under flaps", "unit": "",
                     "mrc": mc.get("p50_change"), "rocev2": rc.get("p50_change"),
                     "paper_mrc": 0.0},
        "mrc": {**{k: mf.get(k) for k in keys}, **mc}, "rocev2": {**{k: rf.get(k) for k in keys}, **rc},
    })  # fmt: skip
    verdict, why = judge(mc, mf)
    why += (f"; RoCEv2: median {100 * (rc.get('p50_change') or 0):+.1f}%, "
            f"{rf.get('failed_steps')} failed steps, {rf.get('restarts')} restarts")  # fmt: skip
    res.judge(verdict, why)
    path = ctx.out_dir / f"{res.name}.png"
    draw({"mrc": res.mrc, "rocev2": res.rocev2}, path)
    res.plot = str(path)


def draw(d: dict[str, Any], path: Path) -> Path:
    """The PNG of a result (its JSON's ``mrc`` and ``rocev2``): each transport's steps over
    its control run's median, the control run dashed, failed steps as crosses, the flaps
    marked."""
    series, failed = {}, {}
    for t in ("mrc", "rocev2"):  # both runs over the control run's median: a change is a rise
        base = d[t]["control"]["figures"].get("step_p50_s") or None
        for kind in ("control", "flaps"):
            series[f"{t} {kind}"], fails = relative_step_series(d[t][kind]["step_log"], base)
            if kind == "flaps":
                failed[f"{t} failed step"] = fails
    flaps = [f["start_s"] for f in d["mrc"]["flaps"].get("fault_log") or []]
    return plot.lines(path, "Claim 9: all-reduce step time, clean (dashed) vs T0-T1 link flaps",
                      series, xlabel="run time (s)", ylabel="step time / the control run's median",
                      marks=[(t, "flap") for t in flaps], points=failed)  # fmt: skip


EXPERIMENT = Spec(
    name="flaps",
    number=9,
    claim="Several T0-T1 link flaps per minute: no measurable job impact",
    paper={
        "text": "several T0-T1 link flaps per minute with no measurable impact on the training job",
        "step_time_change": 0.0,
    },
    run=run,
    minutes=4.0,
    quick_minutes=1.5,
)
