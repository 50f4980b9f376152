"""Claim 4 in the simulator: a 7:1 cross-spine incast beside a victim flow, at the paper's
proportions. Seven hosts under one T0 write to one host under another while the eighth host
of the senders' T0 writes to a second host under the destination's T0 (the paper's victim:
to an idle node in the destination's rack), sharing the senders' uplinks and the T1 -> T0
downlinks with the incast, never the destination's own links. The victim first runs alone on
a fresh fabric; its figure is its goodput beside the incast over alone, over the window after
the ramp (``mrcnic.workloads.skip_for``). Tiers: MRC with 1 QP per flow and with 8, RoCEv2
with a QP per plane (DCQCN; lossy: the simulator has no PFC, so PFC's congestion spreading,
the paper's main harm to a victim, is not part of this form).
"""

from __future__ import annotations

from dataclasses import replace

from lab.workloads.experiments.base import Context, Result, rounded
from lab.workloads.experiments.incast import HARMED, PAPER_MRC_RATIO, PAPER_ROCE_RATIO, UNTOUCHED
from lab.workloads.experiments.sim.common import SimForm, paper_spec, run_parallel, sim_setup
from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.collectives import Incast, IncastParams

SHAPE = {"t0": 2, "hosts_per_t0": 8, "t1": 8, "size": 64 << 10}  # 64 KiB writes, as the lab
SENDERS, DST, VICTIM = tuple(range(7)), 8, (7, 9)
DURATION_S, QUICK_DURATION_S = 1e-3, 3e-4  # virtual: ~100 and ~30 base RTTs
KEYS = ("incast_fraction", "jain", "trims_total", "ecn_marks_total", "drops_total",
        "retransmissions", "timeouts", "qp_errors_total", "verified", "wall_s")  # fmt: skip


def run_incast(job: tuple[ClosSpec, IncastParams]) -> dict:
    spec, p = job
    return Incast(spec, p).run()


def run(ctx: Context, res: Result) -> None:
    spec = paper_spec(**SHAPE)
    dur = QUICK_DURATION_S if ctx.quick else DURATION_S
    jobs = {
        "mrc": (spec, IncastParams(SENDERS, DST, VICTIM, 1, dur)),
        "mrc_8qp": (spec, IncastParams(SENDERS, DST, VICTIM, 8, dur)),
        "rocev2": (replace(spec, transport="rocev2"), IncastParams(SENDERS, DST, VICTIM, spec.planes, dur)),
    }  # fmt: skip
    out = run_parallel(run_incast, jobs, ctx.echo)

    def ratio(n: str) -> float | None:
        v = out[n].get("victim") or {}
        return v.get("ratio")

    res.setup = sim_setup(
        spec, senders=len(SENDERS), duration_s=dur, write_bytes=spec.size,
        victim=f"h{VICTIM[0]} -> h{VICTIM[1]}", destination=f"h{DST}",
        scale_note="Simulated at 100 Gb/s; no PFC in the simulator (RoCEv2 runs lossy).",
    )  # fmt: skip
    res.mrc = {n: {**rounded({k: out[n].get(k) for k in KEYS}), "victim": out[n].get("victim")}
               for n in ("mrc", "mrc_8qp")}  # fmt: skip
    res.rocev2 = {
        **rounded({k: out["rocev2"].get(k) for k in KEYS}),
        "victim": out["rocev2"].get("victim"),
    }
    res.commands = [
        f".venv/bin/mrc-sim --workload incast --planes 8 --t0 2 --hosts-per-t0 8 --t1 8 "
        f"--rate 100Gbit --delay 4us --buffer {spec.queue_bytes} --ecn {spec.ecn_bytes} "
        f"--size {spec.size} --senders {','.join(f'h{s}' for s in SENDERS)} --dst h{DST} "
        f"--victim h{VICTIM[0]}:h{VICTIM[1]} --duration {dur * 1e6:g}us --qps {p.qps} "
        f"--transport {s.transport} --json"
        for s, p in jobs.values()
    ]  # fmt: skip
    m, m8, r = ratio("mrc"), ratio("mrc_8qp"), ratio("rocev2")
    res.metrics = {
        "headline": {"name": "victim goodput with the 7:1 incast / alone", "unit": "of alone",
                     "mrc": m, "rocev2": r, "paper_mrc": PAPER_MRC_RATIO,
                     "paper_rocev2": PAPER_ROCE_RATIO},
        "mrc": rounded({"victim_ratio": m, "victim_ratio_8qp": m8,
                        "incast_fraction": out["mrc"].get("incast_fraction")}),
        "rocev2": rounded({"victim_ratio": r, "incast_fraction": out["rocev2"].get("incast_fraction"),
                           "qp_errors": out["rocev2"].get("qp_errors_total")}),
    }  # fmt: skip

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    clean = all(out[n]["verified"] and not out[n]["qp_errors_total"] for n in ("mrc", "mrc_8qp"))
    why = (f"MRC's victim kept {f(m)} of its rate alone with 1 QP per flow and {f(m8)} with 8 "
           f"(incast {f(out['mrc'].get('incast_fraction'))} of the destination's capacity; "
           f"verified and error-free: {clean}); RoCEv2's {f(r)} (incast "
           f"{f(out['rocev2'].get('incast_fraction'))}, {out['rocev2'].get('qp_errors_total')} QP "
           f"errors) (thresholds: MRC >= {UNTOUCHED}, RoCEv2 harmed below {HARMED}; paper "
           f"{PAPER_ROCE_RATIO} with PFC, which the simulator lacks)")  # fmt: skip
    mrc_ok = clean and m is not None and m8 is not None and min(m, m8) >= UNTOUCHED
    roce_harmed = r is None or r < HARMED
    if mrc_ok and roce_harmed:
        res.judge("reproduced", why)
    elif mrc_ok:
        res.judge("partly", why + "; MRC's half holds, RoCEv2's victim was not harmed here")
    else:
        res.judge("not reproduced", why)


SIM = SimForm(run, minutes=3.0, quick_minutes=0.5)
