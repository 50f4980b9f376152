"""Claim 8 in the simulator: one of the writer's 8 NIC ports lost mid-write at the paper's
proportions: MRC keeps 7/8 of its goodput (the paper: the job keeps 87.5%). Goodput before
is the median of the bins from WARMUP_RTTS to the fault, after the median of the bins from
SETTLE_RTTS after it to the end; RoCEv2 runs a QP per rail, so one QP loses its port."""

from __future__ import annotations

from dataclasses import replace
from statistics import median

from lab.workloads.experiments.base import Context, Result, rounded
from lab.workloads.experiments.port_loss import NEAR, PAPER_KEPT, PLANE, TOL
from lab.workloads.experiments.sim.common import (
    SimForm,
    bins,
    p2p_command,
    p2p_setup,
    paper_p2p,
    run_p2p,
)
from mrcnic.sim.transfer import Fault, SimConfig, base_rtt_s

WARMUP_RTTS, SETTLE_RTTS, BIN_RTTS = 10, 10, 2
KEYS = ("goodput_fraction", "retransmissions", "timeouts", "verified", "qp_errors",
        "qp_error_reasons", "recovery_s", "completion_s", "wall_s")  # fmt: skip


def configs(quick: bool) -> tuple[dict[str, SimConfig], float]:
    fabric = paper_p2p()
    rtt = base_rtt_s(fabric, 4096)
    size = (64 if quick else 256) << 20
    at = size * 8 / (fabric.planes * fabric.port_rate_bps) / 3  # a third of the way in
    base = SimConfig(fabric=fabric, size=size, msg_size=256 << 10,
                     faults=(Fault("port", PLANE, at, False),), timeline_s=BIN_RTTS * rtt)  # fmt: skip
    return {"mrc": base, "rocev2": replace(base, transport="rocev2")}, at


def kept(r: dict, at: float, rtt: float) -> tuple[float | None, float | None]:
    """(goodput after / before, before as a fraction of capacity) from the timeline."""
    tl = r.get("timeline") or []
    end = r.get("completion_s") or (tl[-1][0] if tl else 0.0)
    before = bins(tl, WARMUP_RTTS * rtt, at)
    after = bins(tl, at + SETTLE_RTTS * rtt, end)
    if not before or not after or median(before) <= 0:
        return None, None
    return median(after) / median(before), median(before) / r["capacity_bps"]


def run(ctx: Context, res: Result) -> None:
    cfgs, at = configs(ctx.quick)
    rtt = base_rtt_s(cfgs["mrc"].fabric, 4096)
    out = run_p2p(cfgs, ctx.echo)
    m, ro = out["mrc"], out["rocev2"]
    mk, mb = kept(m, at, rtt)
    rk, rb = kept(ro, at, rtt) if not ro["qp_errors"] else (None, None)
    planes = cfgs["mrc"].fabric.planes
    res.setup = p2p_setup(cfgs["mrc"], fault=f"h0's NIC port {PLANE} down at {at * 1e6:.0f} us "
                          f"({at / rtt:.0f} base RTTs) for good", scale_note="Simulated at 100 Gb/s.")  # fmt: skip
    res.mrc = {
        **rounded({k: m.get(k) for k in KEYS}),
        "kept": rounded(mk),
        "fraction_before": rounded(mb),
    }
    res.rocev2 = {
        **rounded({k: ro.get(k) for k in KEYS}),
        "kept": rounded(rk),
        "fraction_before": rounded(rb),
    }
    res.commands = [p2p_command(c) for c in cfgs.values()]
    clean = m["verified"] and not m["qp_errors"]
    res.metrics = {
        "headline": {"name": "goodput kept with 1 of 8 NIC ports down", "unit": "of before",
                     "mrc": rounded(mk) if clean else None, "rocev2": rounded(rk),
                     "paper_mrc": round(PAPER_KEPT, 4)},
        "mrc": rounded({"kept": mk, "fraction_before": mb}),
        "rocev2": rounded({"kept": rk, "fraction_before": rb, "qp_errors": ro["qp_errors"]}),
    }  # fmt: skip
    want = (planes - 1) / planes
    why = (f"with one of {planes} ports down MRC kept {mk if mk is not None else float('nan'):.3f} "
           f"of its goodput (paper {want:.3f}, tolerance {TOL}), before "
           f"{mb if mb is not None else float('nan'):.3f} of capacity, {m['qp_errors']} QP errors, "
           f"verified {m['verified']}; RoCEv2 (a QP per rail): "
           + (f"{ro['qp_errors']} QP errors ({'; '.join(ro.get('qp_error_reasons') or [])[:160]})"
              if ro["qp_errors"] else f"kept {rk if rk is not None else float('nan'):.3f}"))  # fmt: skip
    if mk is None or not clean:
        res.judge("not reproduced", why)
    elif abs(mk - want) <= TOL:
        res.judge("reproduced", why)
    else:
        res.judge("partly" if mk >= want - NEAR else "not reproduced", why)


SIM = SimForm(run, minutes=1.0, quick_minutes=0.3)
