"""Claim 9 in the simulator: T0-T1 link flaps during a training job at the paper's
proportions (8 planes x 100 Gb/s, 4 us, 1 MiB buffers): no measurable job impact.

As the lab form: each transport runs the job (the ring all-reduce over every host, iteration
after iteration: ``mrc-sim --workload allreduce --iters N``) twice for the same number of
iterations, once clean (the control) and once while T0-T1 links flap: a flap every
PERIOD_ITERS iterations from FIRST_ITERS on, each link down DOWN_ITERS iterations (of that
transport's clean iteration time), a different link each time. The lab's 6 flaps a minute of
1 s each, with steps of a fraction of a second, become a flap every few iterations here; a
flap stays well inside RoCEv2's retry budget (about 10 ms), as the lab's 1 s does inside its.
The flapped links are the ones the transport's ring crossed most in its control run, so each
flap touches the job (for RoCEv2's hashed paths, a link chosen blind mostly would not). The
figures and the verdict are the lab form's (``flaps.compare``, ``judge``: median step within
P50_TOL of the control's, P99 within P99_TOL, no failure).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lab.workloads.experiments.base import Context, Result, rounded
from lab.workloads.experiments.flaps import P50_TOL, P99_TOL, compare, judge
from lab.workloads.experiments.jobs import step_figures
from lab.workloads.experiments.sim.common import (
    SimForm,
    busiest,
    job_summary,
    paper_spec,
    run_allreduce,
    run_parallel,
    sim_command,
    sim_setup,
)
from mrcnic.faultplan import Step
from mrcnic.sim.clos import ClosSpec

FULL = {"t0": 8, "hosts_per_t0": 2, "t1": 4, "size": 1 << 20, "msg_size": 1 << 20}
QUICK = {"t0": 4, "hosts_per_t0": 2, "t1": 2, "size": 256 << 10, "msg_size": 256 << 10}
ITERS, QUICK_ITERS = 40, 20
FIRST_ITERS, PERIOD_ITERS, DOWN_ITERS = 5, 8, 3
QUICK_FIRST_ITERS, QUICK_PERIOD_ITERS, QUICK_DOWN_ITERS = 4, 5, 2
TRANSPORTS = ("mrc", "rocev2")
KEYS = ("step_p50_s", "step_p99_s", "step_max_s", "busbw_mbps", "failed_steps", "restarts",
        "qp_errors")  # fmt: skip


def base_spec(quick: bool, transport: str) -> ClosSpec:
    return paper_spec(**(QUICK if quick else FULL), transport=transport)


def flap_steps(quick: bool, iteration_s: float, links: list[str]) -> tuple[Step, ...]:
    """One flap every PERIOD_ITERS iterations from FIRST_ITERS (mid-iteration), each link of
    ``links`` (``p0-t0-1,p0-t1-2``) in turn, down DOWN_ITERS iterations, all over before the
    job's last iteration."""
    iters, first, period, down = ((QUICK_ITERS, QUICK_FIRST_ITERS, QUICK_PERIOD_ITERS,
                                   QUICK_DOWN_ITERS) if quick else
                                  (ITERS, FIRST_ITERS, PERIOD_ITERS, DOWN_ITERS))  # fmt: skip
    out: list[Step] = []
    k = first
    while k + down + 1 <= iters and len(out) < len(links):
        at = (k + 0.5) * iteration_s
        a, b = links[len(out)].split(",")
        out.append(Step("link", round(at, 9), a, b, undo_s=round(at + down * iteration_s, 9)))
        k += period
    return tuple(out)


def over_planes(links: list[str], n: int) -> list[str]:
    """``n`` of ``links`` (busiest first), each plane's busiest before any plane's second:
    the flaps spread over the planes, as the lab's do."""
    rounds: dict[str, int] = {}
    ranked = []
    for i, link in enumerate(links):
        plane = link.split("-", 1)[0]
        rounds[plane] = rounds.get(plane, -1) + 1
        ranked.append((rounds[plane], i, link))
    return [link for _r, _i, link in sorted(ranked)[:n]]


def flaps_possible(quick: bool) -> int:
    iters, first, period, down = ((QUICK_ITERS, QUICK_FIRST_ITERS, QUICK_PERIOD_ITERS,
                                   QUICK_DOWN_ITERS) if quick else
                                  (ITERS, FIRST_ITERS, PERIOD_ITERS, DOWN_ITERS))  # fmt: skip
    return len(range(first, iters - down, period))


def run(ctx: Context, res: Result) -> None:
    quick = ctx.quick
    iters = QUICK_ITERS if quick else ITERS
    controls = run_parallel(run_allreduce,
                            {f"{t}_control": (base_spec(quick, t), iters) for t in TRANSPORTS},
                            ctx.echo)  # fmt: skip
    jobs: dict[str, tuple[ClosSpec, int]] = {}
    for t in TRANSPORTS:
        c = controls[f"{t}_control"]
        it = c["iteration_times_s"][0] if c["iteration_times_s"] else c["time_s"]
        links = over_planes(busiest(c["link_packets"], len(c["link_packets"])),
                            flaps_possible(quick))  # fmt: skip
        steps = flap_steps(quick, it, links)
        jobs[f"{t}_flaps"] = (replace(base_spec(quick, t), faults=steps), iters)
        ctx.echo(f"  {t}: {len(steps)} flaps of {steps[0].end_s - steps[0].at_s:.6f} s "
                 f"({', '.join(links[:len(steps)])})")  # fmt: skip
    flapped = run_parallel(run_allreduce, jobs, ctx.echo)
    out: dict[str, dict[str, Any]] = {}
    for t in TRANSPORTS:
        c, f = controls[f"{t}_control"], flapped[f"{t}_flaps"]
        cf, ff = step_figures(job_summary(c)), step_figures(job_summary(f))
        out[t] = {
            "control": {"figures": cf, "iteration_times_s": c["iteration_times_s"],
                        "verified": c["verified"], "wall_s": c["wall_s"], "cpu_s": c["cpu_s"]},
            "flaps": {"figures": ff, "iteration_times_s": f["iteration_times_s"],
                      "faults": f["faults"], "verified": f["verified"],
                      "qp_error_reasons": f["qp_error_reasons"],
                      "retransmissions": f["retransmissions"], "timeouts": f["timeouts"],
                      "lost_in_flight": f["lost_in_flight"], "wall_s": f["wall_s"],
                      "cpu_s": f["cpu_s"]},
            "change": compare(cf, ff),
        }  # fmt: skip
    spec0 = base_spec(quick, "mrc")
    rtt = spec0.base_rtt_s
    mrc_it = controls["mrc_control"]["time_s"]
    first, period, down = ((QUICK_FIRST_ITERS, QUICK_PERIOD_ITERS, QUICK_DOWN_ITERS) if quick
                           else (FIRST_ITERS, PERIOD_ITERS, DOWN_ITERS))  # fmt: skip
    res.setup = sim_setup(
        spec0, size_per_rank=spec0.size, iterations=iters, flaps=len(jobs["mrc_flaps"][0].faults),
        flap_every_iterations=period, flap_down_iterations=down, first_flap_iteration=first,
        scale_note=f"Simulated in virtual time at 100 Gb/s; a flap every {period} iterations, "
        f"each T0-T1 link down {down} iterations (MRC: {down * mrc_it * 1e6:.0f} us; an "
        f"iteration takes {mrc_it / rtt:.0f} base RTTs, against seconds in production), the "
        "links each transport's ring crossed most in its control run.",
    )  # fmt: skip
    res.mrc, res.rocev2 = rounded(out["mrc"], 9), rounded(out["rocev2"], 9)
    res.commands = [sim_command(spec, "allreduce", n) for spec, n in jobs.values()]
    mc, rc = out["mrc"]["change"], out["rocev2"]["change"]
    mf, rf = out["mrc"]["flaps"]["figures"], out["rocev2"]["flaps"]["figures"]
    res.metrics = rounded({
        "headline": {"name": "median step time change under flaps", "unit": "",
                     "mrc": mc.get("p50_change"), "rocev2": rc.get("p50_change"),
                     "paper_mrc": 0.0},
        "mrc": {**{k: mf.get(k) for k in KEYS}, **mc},
        "rocev2": {**{k: rf.get(k) for k in KEYS}, **rc},
    }, 9)  # fmt: skip
    verdict, why = judge(mc, mf)
    extra = (mf["step_max_s"] - out["mrc"]["control"]["figures"]["step_max_s"]) / rtt
    why += (f"; the slowest flapped iteration {extra:.1f} base RTTs over the control's slowest "
            f"(an iteration is {mrc_it / rtt:.0f}; thresholds {P50_TOL:.0%} / {P99_TOL:.0%})"
            f"; RoCEv2: median {100 * (rc.get('p50_change') or 0):+.1f}%, P99 "
            f"{100 * (rc.get('p99_change') or 0):+.1f}%, {rf.get('failed_steps')} failed "
            f"iterations, {rf.get('restarts')} restarts")  # fmt: skip
    res.judge(verdict, why)


SIM = SimForm(run, minutes=2.5, quick_minutes=0.3)
