"""Claim 6 in the simulator: one path of 16 (2 T1s per plane x 8 planes) drops 20% of its
packets, at the paper's proportions: MRC's EVs on it leave the active set, backups on the
other path take their share and the write keeps its line rate. The figure is the goodput
with the lossy path over the same write without it; RoCEv2 (a QP per rail) runs over several
seeds, since only a QP that hashes onto the lossy path meets it."""

from __future__ import annotations

from dataclasses import replace

from lab.workloads.experiments.base import Context, Result, rounded
from lab.workloads.experiments.ev_drop import KEPT_MIN, PERCENT
from lab.workloads.experiments.sim.common import SimForm, p2p_command, p2p_setup, paper_p2p, run_p2p
from mrcnic.sim.transfer import SimConfig

PATHS_PER_PLANE = 2
ROCE_SEEDS = (1, 2, 3, 4)
KEYS = ("goodput_fraction", "retransmissions", "timeouts", "random_losses", "paths_retired",
        "ev_transitions", "verified", "qp_errors", "completion_s", "wall_s")  # fmt: skip


def configs(quick: bool) -> dict[str, SimConfig]:
    lossy = paper_p2p(paths_per_plane=PATHS_PER_PLANE, path_loss=((0, PERCENT / 100),))
    clean = paper_p2p(paths_per_plane=PATHS_PER_PLANE)
    base = SimConfig(fabric=lossy, size=(32 if quick else 256) << 20, msg_size=256 << 10)
    out = {"mrc": base, "mrc_clean": replace(base, fabric=clean)}
    for s in ROCE_SEEDS[: 2 if quick else None]:
        out[f"rocev2_seed{s}"] = replace(base, transport="rocev2", seed=s)
    out["rocev2_clean"] = replace(base, transport="rocev2", fabric=clean)
    return out


def _frac(r: dict) -> float | None:
    return r["goodput_fraction"] if r["verified"] and not r["qp_errors"] else None


def run(ctx: Context, res: Result) -> None:
    cfgs = configs(ctx.quick)
    out = run_p2p(cfgs, ctx.echo)
    m, mc = _frac(out["mrc"]), _frac(out["mrc_clean"])
    kept = m / mc if m is not None and mc else None
    roce = {n: r for n, r in out.items() if n.startswith("rocev2_seed")}
    # the plane-0 QP's path (rocev2.paths: [plane, t1] per QP): on T1 0, the lossy path
    on = [n for n, r in roce.items() if [0, 0] in (r.get("rocev2") or {}).get("paths", [])]
    rc = _frac(out["rocev2_clean"])
    r_on = [(_frac(roce[n]) or 0.0) / rc for n in on] if rc else []
    r_kept = min(r_on) if r_on else None
    res.setup = p2p_setup(
        cfgs["mrc"], lossy_path="plane 0, T1 0", loss_percent=PERCENT,
        scale_note=f"Simulated at 100 Gb/s; {PERCENT:g}% loss on 1 of "
        f"{PATHS_PER_PLANE * 8} paths from the start, data direction.",
    )  # fmt: skip
    res.mrc = {n: rounded({k: out[n].get(k) for k in KEYS}) for n in ("mrc", "mrc_clean")}
    res.mrc["kept"] = rounded(kept)
    res.mrc["ev_states"] = out["mrc"].get("ev_states")
    res.rocev2 = {
        n: rounded({k: r.get(k) for k in KEYS}) for n, r in out.items() if n.startswith("rocev2")
    }
    res.rocev2["on_lossy_path"] = on
    res.rocev2["kept_on_path"] = rounded(r_kept)
    res.commands = [p2p_command(c) for c in cfgs.values()]
    res.metrics = {
        "headline": {"name": "goodput with one lossy path of 16, over the same write without",
                     "unit": "of clean", "mrc": rounded(kept), "rocev2": rounded(r_kept),
                     "paper_mrc": 1.0},
        "mrc": rounded({"kept": kept, "goodput_fraction": m, "paths_retired": out["mrc"].get("paths_retired")}),
        "rocev2": rounded({"kept_on_path": r_kept, "runs_on_path": len(on), "runs": len(roce)}),
    }  # fmt: skip
    rtxt = (f"RoCEv2's plane-0 QP hashed onto the lossy path in {len(on)} of {len(roce)} seeds, "
            + (f"keeping {r_kept:.3f} of its clean goodput" if r_kept is not None else "")
            + "; QP errors " + ", ".join(str(r["qp_errors"]) for r in roce.values()))  # fmt: skip
    why = (f"{PERCENT:g}% loss on 1 of {PATHS_PER_PLANE * 8} paths: MRC kept "
           f"{kept if kept is not None else float('nan'):.3f} of its clean goodput "
           f"({out['mrc']['random_losses']} packets lost, {out['mrc']['retransmissions']} "
           f"retransmitted, {out['mrc'].get('paths_retired')} path retired, verified "
           f"{out['mrc']['verified']}); {rtxt} (threshold: kept >= {KEPT_MIN})")  # fmt: skip
    if kept is None:
        res.judge("not reproduced", why)
    else:
        res.judge(
            "reproduced" if kept >= KEPT_MIN else "partly" if kept >= 0.75 else "not reproduced",
            why,
        )


SIM = SimForm(run, minutes=1.5, quick_minutes=0.3)
