"""Claim 5 in the simulator: T0-T1 links taken down one after another while a write runs, at
the paper's proportions: 20 of the 64 paths between two T0s (8 planes x 8 T1s), spread over
the planes, one every INTERVAL_RTTS base RTTs (the paper's one per second, compressed: a
second is 10^5 RTTs of this fabric, and what matters is that each failure is over before the
next). The figure is MRC's goodput while links went down over its goodput before (medians of
BIN_RTTS bins), and the lowest bin; RoCEv2 runs a QP per rail, its T1s by hash, and does not
reroute (the simulator models no routing convergence)."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

from lab.workloads.experiments.base import Context, Result, rounded
from lab.workloads.experiments.links_down import GOOD, LOW_GOOD, NEAR, PAPER_LINKS
from lab.workloads.experiments.sim.common import (
    SimForm,
    bins,
    p2p_command,
    p2p_setup,
    paper_p2p,
    run_p2p,
)
from mrcnic.sim.transfer import Fault, SimConfig, base_rtt_s

T1S = 8
INTERVAL_RTTS, WARMUP_RTTS, BIN_RTTS = 50, 20, 10
KEYS = ("goodput_fraction", "retransmissions", "timeouts", "paths_retired", "verified",
        "qp_errors", "qp_error_reasons", "completion_s", "wall_s")  # fmt: skip


def schedule(n: int, first_s: float, every_s: float, planes: int = 8) -> tuple[Fault, ...]:
    """Path k of the schedule: plane k mod 8, a T1 that differs from the earlier ones'."""
    paths = [(k % planes) * T1S + (k // planes) * 3 % T1S for k in range(n)]
    return tuple(Fault("path", p, first_s + k * every_s, False) for k, p in enumerate(paths))


def configs(quick: bool) -> tuple[dict[str, SimConfig], float, float]:
    fabric = paper_p2p(paths_per_plane=T1S)
    rtt = base_rtt_s(fabric, 4096)
    n = 5 if quick else PAPER_LINKS
    first, every = 2 * WARMUP_RTTS * rtt, INTERVAL_RTTS * rtt
    last = first + (n - 1) * every
    ideal_s = last + 4 * every  # the write outlasts the last failure by a few intervals
    size = int(ideal_s * fabric.planes * fabric.port_rate_bps / 8) >> 20 << 20
    base = SimConfig(fabric=fabric, size=size, msg_size=256 << 10,
                     faults=schedule(n, first, every), timeline_s=BIN_RTTS * rtt)  # fmt: skip
    return {"mrc": base, "rocev2": replace(base, transport="rocev2")}, first, last + every


def figures(r: dict, first: float, until: float, rtt: float) -> dict:
    tl = r.get("timeline") or []
    before = bins(tl, WARMUP_RTTS * rtt, first)
    during = bins(tl, first, until)
    b = median(before) if before else None
    if not b or not during:
        return {"rel_down": None, "rel_lowest_bin": None, "fraction_before": None}
    return {"rel_down": median(during) / b, "rel_lowest_bin": min(during) / b,
            "fraction_before": b / r["capacity_bps"]}  # fmt: skip


def run(ctx: Context, res: Result) -> None:
    cfgs, first, until = configs(ctx.quick)
    rtt = base_rtt_s(cfgs["mrc"].fabric, 4096)
    out = run_p2p(cfgs, ctx.echo)
    m, ro = out["mrc"], out["rocev2"]
    mf, rf = figures(m, first, until, rtt), figures(ro, first, until, rtt)
    n = len(cfgs["mrc"].faults)
    res.setup = p2p_setup(
        cfgs["mrc"], links_down=n, every_s=INTERVAL_RTTS * rtt,
        scale_note=f"Simulated at 100 Gb/s; one link every {INTERVAL_RTTS} base RTTs "
        f"({INTERVAL_RTTS * rtt * 1e6:.0f} us) instead of one per second.",
    )  # fmt: skip
    res.mrc = {**rounded({k: m.get(k) for k in KEYS}), **rounded(mf)}
    res.rocev2 = {**rounded({k: ro.get(k) for k in KEYS}), **rounded(rf)}
    res.commands = [p2p_command(c) for c in cfgs.values()]
    clean = m["verified"] and not m["qp_errors"]
    res.metrics = {
        "headline": {"name": "goodput while links went down, vs before", "unit": "of before",
                     "mrc": rounded(mf["rel_down"]) if clean else None,
                     "rocev2": rounded(rf["rel_down"]), "paper_mrc": 1.0},
        "mrc": rounded(mf),
        "rocev2": rounded({**rf, "qp_errors": ro["qp_errors"]}),
    }  # fmt: skip
    rel, low = mf["rel_down"], mf["rel_lowest_bin"]

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    why = (f"{n} of {T1S * 8} T0-T1 paths down, one every {INTERVAL_RTTS} RTTs: MRC carried "
           f"{f(rel)} of its goodput before ({f(mf['fraction_before'])} of line rate), lowest "
           f"{BIN_RTTS}-RTT bin {f(low)}, {m.get('paths_retired')} paths retired, "
           f"{m['qp_errors']} QP errors, verified {m['verified']}; RoCEv2 (a QP per rail, no "
           f"rerouting): {f(rf['rel_down'])}, {ro['qp_errors']} QP errors "
           f"(thresholds: median >= {GOOD}, lowest bin >= {LOW_GOOD})")  # fmt: skip
    if rel is None or low is None or not clean:
        res.judge("not reproduced", why)
    elif rel >= GOOD and low >= LOW_GOOD:
        res.judge("reproduced", why)
    else:
        res.judge("partly" if rel >= NEAR else "not reproduced", why)


SIM = SimForm(run, minutes=2.0, quick_minutes=0.3)
