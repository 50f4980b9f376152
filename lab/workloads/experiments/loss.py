"""Claim 3: ring all-reduce and all-to-all under random loss of 0, 0.1% and 1%. MRC with one
QP holds near line rate at 0.1% and keeps about a third at 1%; RoCEv2 with one QP keeps
about half at 0.1% and is unusable at 1%.

The default lab (4 hosts, 8 planes of 2 T0 + 2 T1), its T0-T1 links delayed so that a path
holds the paper's BDP in packets (``mrc-lab up --delay``; base.paper_delay_us: ~28 packets,
where the undelayed lab holds ~5, so a go-back-N rewind costs what it costs at the paper's
scale). Loss is random (nft ``numgen``) on every
T0-T1 link, both directions, as the paper induced it in the fabric: a packet between hosts
under different T0s crosses two such links, so each link drops ``1 - sqrt(1 - P)`` (about
P/2) and the path drops P; ACKs and NACKs are lost as often as data. The ring runs
``h0, h2, h1, h3`` (hosts of alternate T0s), so every hop of it crosses the lossy tier;
the all-to-all runs between all four hosts, where two of a rank's three peers are under the
other T0 (its pairs under one T0 see no loss: the slowest, lossy transfers set its time).

Each transport runs with one QP per connection (``mrc-bench allreduce``: one per ring
neighbour; ``mrc-bench alltoall``: one per peer). MRC sprays its QP over every plane;
a RoCEv2 QP rides one port (rail), so its line-rate fraction is at most 1/8 in the ring and
3/8 in the all-to-all: the figure that answers the claim is the busbw each transport keeps
relative to its own lossless run. RoCEv2 runs without PFC: PFC pauses a congested port, it
does nothing against random loss, so it would only add pause traffic here.

"Unusable" is measured: every RoCEv2 (and MRC) iteration under loss gets a timeout of
``TIMEOUT_FACTOR`` x the slowest iteration of that transport's lossless run (at least
``MIN_TIMEOUT_S``); a run that times out, hits a QP error or fails its verification did not
complete, and its busbw counts as 0. At 1% RoCEv2 runs fewer iterations (recorded).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lab.fabric.faults import Faults
from lab.proc.cpu import CPU_BOUND_RULE
from lab.views import plot
from lab.workloads.experiments.base import (
    Context,
    Result,
    bench,
    command,
    cv,
    lab_params,
    lab_up,
    median,
    percentile,
    rounded,
    setup_of,
)
from lab.workloads.experiments.registry import Spec

LOSSES = (0.0, 0.1, 1.0)  # percent per path between T0s
COLLECTIVES = ("allreduce", "alltoall")
TRANSPORTS = ("mrc", "rocev2")
SHORT = {"allreduce": "all-reduce", "alltoall": "all-to-all"}
SIZES = {"allreduce": "2M", "alltoall": "4M"}  # bytes per rank
QUICK_SIZES = {"allreduce": "512K", "alltoall": "1M"}
ITERS, WARMUP, QUICK_ITERS = 5, 1, 2
ROCE_1PCT_ITERS = 2  # RoCEv2 at 1%: fewer timed iterations, each under the timeout
TIMEOUT_FACTOR = 10.0  # an iteration this many times slower than lossless has "crawled"
MIN_TIMEOUT_S, QUICK_MIN_TIMEOUT_S = 10.0, 5.0
LOSSLESS_TIMEOUT_S = 60.0
# the paper's figures, as fractions of the lossless busbw
PAPER = {"mrc": {"0.1": 1.0, "1": 1 / 3}, "rocev2": {"0.1": 0.5, "1": 0.0}}
# verdict thresholds (stated in ``why``)
NEAR_LINE = 0.8  # MRC at 0.1%: "near line rate" = at least 0.8 of its lossless busbw
THIRD_MIN = 0.2  # MRC at 1%: "about a third" or more (0.2..0.5 = about a third)
THIRD_MAX = 0.5
HALF_MAX = 0.7  # RoCEv2 at 0.1%: "about half" or worse (0.3..0.7 = about half)
HALF_MIN = 0.3
UNUSABLE = 0.1  # RoCEv2 at 1%: did not complete, or kept less than 0.1 of its lossless busbw


def key(p: float) -> str:
    """A loss rate as a JSON key: ``0``, ``0.1``, ``1``."""
    return f"{p:g}"


def per_link_percent(path_percent: float, links: int = 2) -> float:
    """The loss on each of ``links`` lossy links that makes a path lose ``path_percent``."""
    return 100.0 * (1.0 - (1.0 - path_percent / 100.0) ** (1.0 / links))


def ring_across_t0s(t0: int, hosts_per_t0: int) -> list[str]:
    """Every host, ordered so that consecutive hosts (and the last and the first) sit under
    different T0s: host k of T0 0, host k of T0 1, ..., then host k+1 of each."""
    order = [t * hosts_per_t0 + k for k in range(hosts_per_t0) for t in range(t0)]
    return [f"h{h}" for h in order]


def fabric_links(plan: Any) -> list[tuple[str, str]]:
    return [(lk.a.node, lk.b.node) for lk in plan.links() if lk.kind == "t0-t1"]


def set_loss(state: Any, links: Sequence[tuple[str, str]], percent: float) -> None:
    """``percent`` loss on every link (0: clear it), with ``lab.fabric.faults`` (``mrc-lab loss``)."""
    f = Faults(state, echo=None)
    for a, b in links:
        if percent > 0:
            f.loss(a, b, percent)
        else:
            f.loss_clear(a, b)


def timeout_for(lossless_iteration_s: float | None, quick: bool) -> float:
    floor = QUICK_MIN_TIMEOUT_S if quick else MIN_TIMEOUT_S
    if not lossless_iteration_s:
        return LOSSLESS_TIMEOUT_S
    return max(floor, TIMEOUT_FACTOR * lossless_iteration_s)


# --- one run, and the runs of a condition -------------------------------------------------------


def run_figures(r: dict[str, Any]) -> dict[str, Any]:
    """One mrc-bench result: a run that did not complete (unverified: a timeout, a QP error,
    wrong data) delivered no usable collective, so its busbw counts as 0."""
    errors = r.get("errors") or []
    done = bool(r.get("verified"))
    busbw = float(r.get("busbw_bps") or 0.0)
    sent = r.get("tx_data_packets") or 0
    return {
        "completed": done,
        "timed_out": any("timed out" in e for e in errors),
        "busbw_bps": busbw if done else 0.0,
        "busbw_measured_bps": busbw,
        "algbw_bps": float(r.get("algbw_bps") or 0.0) if done else 0.0,
        "line_fraction": float(r.get("goodput_fraction") or 0.0) if done else 0.0,
        "capacity_bps": r.get("capacity_bps"),
        "time_s": r.get("time_s"),
        "iteration_times_s": r.get("iteration_times_s") or [],
        "iterations": r.get("iterations", 0),
        "retransmissions": r.get("retransmissions", 0),
        "tx_data_packets": sent,
        "retx_rate": (r.get("retransmissions", 0) / sent) if sent else None,
        "timeouts": r.get("timeouts", 0),
        "spurious_timeouts": r.get("spurious_timeouts", 0),
        "qp_errors": r.get("qp_errors", 0),
        "errors": errors[:3],
        "cpu_bound": r.get("cpu_bound"),
        "machine_cpu_percent": r.get("machine_cpu_percent"),
    }


def failed_run(reason: str) -> dict[str, Any]:
    """A run that printed no result (a rank died, the command timed out)."""
    return run_figures({"verified": False, "errors": [reason]})


def condition(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The repetitions of one (collective, transport, loss): medians, P99 over every timed
    iteration of every repetition, totals of errors."""
    times = [t for r in runs for t in r["iteration_times_s"]]
    sent = sum(r["tx_data_packets"] or 0 for r in runs)
    return {
        "busbw_bps": median([r["busbw_bps"] for r in runs]),
        "algbw_bps": median([r["algbw_bps"] for r in runs]),
        "line_fraction": median([r["line_fraction"] for r in runs]),
        "time_s": median([r["time_s"] for r in runs if r["completed"]]),
        "p99_step_s": percentile(times, 99),
        "retx_rate": sum(r["retransmissions"] for r in runs) / sent if sent else None,
        "timeouts": sum(r["timeouts"] for r in runs),
        "spurious_timeouts": sum(r.get("spurious_timeouts") or 0 for r in runs),
        "qp_errors": sum(r["qp_errors"] for r in runs),
        "completed": all(r["completed"] for r in runs),
        "completed_runs": sum(r["completed"] for r in runs),
        "runs": len(runs),
        "timed_out_runs": sum(r["timed_out"] for r in runs),
        "cv": cv([r["busbw_bps"] for r in runs]),
        "cpu_bound_runs": sum(bool(r["cpu_bound"]) for r in runs),
        "errors": [e for r in runs for e in r["errors"]][:3],
    }


def resent_per_loss(
    retx_rate: float | None, path_percent: float, lossless_rate: float | None = 0.0
) -> float | None:
    """Packets resent per packet the path lost, beyond what the same transport resent
    without loss (congestion, a busy machine's spurious timeouts): about 1 for selective
    repeat, about the packets in flight for go-back-N (every loss rewinds the window)."""
    if retx_rate is None or path_percent <= 0:
        return None
    return max(0.0, retx_rate - (lossless_rate or 0.0)) / (path_percent / 100.0)


def kept(conds: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """busbw at each loss rate over the lossless busbw of the same transport."""
    base = (conds.get(key(0.0)) or {}).get("busbw_bps")
    out: dict[str, float | None] = {}
    for p, c in conds.items():
        b = c.get("busbw_bps")
        out[p] = (b / base) if base and b is not None else None
    return out


# --- the verdict (pure) ------------------------------------------------------------------


def band(x: float | None, lo: float, hi: float) -> str:
    if x is None:
        return "not measured"
    return "below" if x < lo else "above" if x > hi else "within"


def sub_claims(k: dict[str, dict[str, float | None]], done: dict[str, bool]) -> dict[str, bool]:
    """The four figures for one collective; ``k[transport][loss]`` = busbw kept,
    ``done[transport]`` = its 1% runs all completed."""
    m01, m1 = k["mrc"].get("0.1"), k["mrc"].get("1")
    r01, r1 = k["rocev2"].get("0.1"), k["rocev2"].get("1")
    return {
        "mrc_0.1_near_line": m01 is not None and m01 >= NEAR_LINE,
        "mrc_1_third_or_more": m1 is not None and m1 >= THIRD_MIN,
        "rocev2_0.1_half_or_worse": r01 is not None and r01 <= HALF_MAX,
        "rocev2_1_unusable": not done["rocev2"] or (r1 is not None and r1 < UNUSABLE),
        "mrc_ahead_at_1": m1 is not None and (r1 is None or not done["rocev2"] or m1 > r1),
    }


FIGURES = (
    "mrc_0.1_near_line",
    "mrc_1_third_or_more",
    "rocev2_0.1_half_or_worse",
    "rocev2_1_unusable",
)


def decide(per_coll: dict[str, dict[str, bool]]) -> str:
    """reproduced: the paper's four figures hold in both collectives; partly: at least two
    of them do (e.g. MRC's side of the claim, or RoCEv2's); otherwise not reproduced."""
    both = [f for f in FIGURES if all(sc[f] for sc in per_coll.values())]
    if len(both) == len(FIGURES):
        return "reproduced"
    return "partly" if len(both) >= 2 else "not reproduced"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def explain(
    k: dict[str, dict[str, dict[str, float | None]]],
    done: dict[str, dict[str, bool]],
    per_coll: dict[str, dict[str, bool]],
    notes: str = "",
) -> str:
    parts = []
    for c, kc in k.items():
        r1 = "did not complete" if not done[c]["rocev2"] else f"kept {_f(kc['rocev2'].get('1'))}"
        parts.append(
            f"{SHORT.get(c, c)}: MRC kept {_f(kc['mrc'].get('0.1'))} of its lossless busbw "
            f"at 0.1% and {_f(kc['mrc'].get('1'))} at 1% "
            f"({band(kc['mrc'].get('1'), THIRD_MIN, THIRD_MAX)} 'about a third' "
            f"{THIRD_MIN}-{THIRD_MAX}); RoCEv2 kept {_f(kc['rocev2'].get('0.1'))} at 0.1% "
            f"({band(kc['rocev2'].get('0.1'), HALF_MIN, HALF_MAX)} 'about half' "
            f"{HALF_MIN}-{HALF_MAX}) and at 1% {r1}"
        )
    held = [f for f in FIGURES if all(sc[f] for sc in per_coll.values())]
    ahead = [SHORT.get(c, c) for c, sc in per_coll.items() if sc["mrc_ahead_at_1"]]
    rule = (
        f"thresholds: MRC at 0.1% >= {NEAR_LINE} ('near line rate'), at 1% >= {THIRD_MIN}; "
        f"RoCEv2 at 0.1% <= {HALF_MAX}, at 1% unusable = failed, timed out "
        f"({TIMEOUT_FACTOR:g}x its lossless iteration) or < {UNUSABLE}; reproduced when all "
        f"four hold in both collectives, partly when two or three do; holding: "
        f"{', '.join(held) or 'none'}; MRC kept more than RoCEv2 at 1% in: "
        f"{', '.join(ahead) or 'neither'}"
    )
    return "; ".join(parts) + ". " + (notes + ". " if notes else "") + rule


# --- the experiment --------------------------------------------------------------------------


def _args(coll: str, hosts: str, size: str, iters: int, t: str, timeout_s: float) -> tuple:
    return (coll, "--hosts", hosts, "--size", size, "--iters", str(iters), "--warmup",
            str(WARMUP), "--transport", t, "--timeout", f"{timeout_s:.0f}s")  # fmt: skip


def run(ctx: Context, res: Result) -> None:
    params = lab_params(ctx, paper_bdp=True)
    reps = ctx.repetitions(2)
    sizes = QUICK_SIZES if ctx.quick else SIZES
    iters = QUICK_ITERS if ctx.quick else ITERS
    ring = ",".join(ring_across_t0s(params.t0, params.hosts_per_t0))
    everyone = ",".join(f"h{h}" for h in range(params.host_count))
    hosts = {"allreduce": ring, "alltoall": everyone}
    lab = params.name
    runs: dict[str, dict[str, dict[str, list[dict]]]] = {
        c: {t: {key(p): [] for p in LOSSES} for t in TRANSPORTS} for c in COLLECTIVES
    }
    plan_iters: dict[str, int] = {}
    with lab_up(ctx, params) as state:
        links = fabric_links(state.plan)
        # Repetitions outside, loss rates inside: a lossless run and the lossy ones that are
        # compared with it run minutes apart at most (the machine's load drifts).
        for rep in range(reps):
            for p in LOSSES:
                per_link = per_link_percent(p)
                if p > 0:
                    t = time.monotonic()
                    set_loss(state, links, per_link)
                    ctx.echo(f"  rep {rep + 1}/{reps}: loss {p:g}% per path = {per_link:.4f}% "
                             f"on each of {len(links)} T0-T1 links, both directions "
                             f"({time.monotonic() - t:.1f} s)")  # fmt: skip
                    if rep == 0:
                        a, b = links[0]
                        res.commands.append(
                            f"sudo .venv/bin/mrc-lab loss --lab {lab} {a} {b} --loss "
                            f"{per_link:.4f}%   # and on each of the {len(links)} T0-T1 links"
                        )
                try:
                    for c in COLLECTIVES:
                        for tr in TRANSPORTS:
                            one = _one(ctx, lab, runs, c, tr, p, hosts[c], sizes[c], iters)
                            plan_iters[f"{c}/{tr}/{key(p)}"] = one
                            if rep == 0 and p in (0.0, 1.0):
                                a = _args(c, hosts[c], sizes[c], one, tr,
                                          _timeout(ctx, runs, c, tr, p))  # fmt: skip
                                res.commands.append(command(lab, a))
                finally:
                    if p > 0:
                        set_loss(state, links, 0.0)
        res.setup = setup_of(
            params,
            loss_percent_per_path=list(LOSSES),
            loss_percent_per_link={key(p): round(per_link_percent(p), 4) for p in LOSSES},
            lossy_links=f"every T0-T1 link ({len(links)}), both directions",
            ring=ring,
            alltoall_hosts=everyone,
            sizes_per_rank=sizes,
            iterations=plan_iters,
            warmup=WARMUP,
            repetitions=reps,
            qps="one per connection (ring neighbour / all-to-all peer), both transports",
            pfc=False,
            timeout_rule=f"{TIMEOUT_FACTOR:g}x the transport's slowest lossless iteration, "
            f"at least {QUICK_MIN_TIMEOUT_S if ctx.quick else MIN_TIMEOUT_S:g} s",
            scale_note=(
                "Links run ~1000x slower than production; the T0-T1 links' propagation delay "
                "(delay_us_per_t0_t1_link, held by mrc-switch) makes a path hold the paper's "
                "BDP in packets (bdp_packets_per_path, paper_bdp_packets_per_path), so a "
                "go-back-N rewind resends as many packets as there; retransmission timeouts "
                "stay a few RTTs long (milliseconds in production). 4 ranks, not 64; a "
                "RoCEv2 QP rides one of 8 planes, so compare each transport with its own "
                "lossless run."
            ),
        )
    _summarise(ctx, res, runs)


def _timeout(ctx: Context, runs: dict, c: str, t: str, p: float) -> float:
    if p == 0:
        return LOSSLESS_TIMEOUT_S
    base = [x for r in runs[c][t][key(0.0)] for x in r["iteration_times_s"]]
    return timeout_for(max(base) if base else None, ctx.quick)


def _one(
    ctx: Context,
    lab: str,
    runs: dict,
    c: str,
    t: str,
    p: float,
    hosts: str,
    size: str,
    iters: int,
) -> int:
    """One mrc-bench run into ``runs``; returns the timed iterations it asked for."""
    if t == "rocev2" and p >= 1.0:
        iters = min(iters, ROCE_1PCT_ITERS)
    timeout_s = _timeout(ctx, runs, c, t, p)
    a = _args(c, hosts, size, iters, t, timeout_s)
    # the command's own limit only catches a hung process: the ranks time out first
    limit = (iters + WARMUP) * timeout_s + 120
    try:
        r = run_figures(bench(ctx, lab, a, timeout_s=limit))
    except Exception as exc:  # recorded as a run that did not complete
        r = failed_run(f"{type(exc).__name__}: {str(exc)[:300]}")
    runs[c][t][key(p)].append(r)
    state = "completed" if r["completed"] else "DID NOT COMPLETE"
    ctx.echo(
        f"  {p:g}% {SHORT[c]} {t}: busbw {r['busbw_measured_bps'] / 1e6:.1f} Mb/s "
        f"({r['line_fraction']:.3f} of line), {state}, retx {r['retransmissions']}, "
        f"timeouts {r['timeouts']} ({r['spurious_timeouts']} spurious), "
        f"QP errors {r['qp_errors']}, cpu_bound {r['cpu_bound']}"
        + (f" [{r['errors'][0][:100]}]" if r["errors"] else "")
    )
    return iters


def _summarise(ctx: Context, res: Result, runs: dict) -> None:
    conds = {
        c: {t: {p: condition(rs) for p, rs in runs[c][t].items()} for t in TRANSPORTS}
        for c in COLLECTIVES
    }
    k = {c: {t: kept(conds[c][t]) for t in TRANSPORTS} for c in COLLECTIVES}
    done = {c: {t: conds[c][t][key(1.0)]["completed"] for t in TRANSPORTS} for c in COLLECTIVES}
    per_coll = {c: sub_claims(k[c], done[c]) for c in COLLECTIVES}
    detail: dict[str, dict[str, Any]] = {t: {} for t in TRANSPORTS}
    for t in TRANSPORTS:
        for c in COLLECTIVES:
            d: dict[str, Any] = {p: {**conds[c][t][p], "kept": k[c][t][p]} for p in conds[c][t]}
            d["runs"] = runs[c][t]
            detail[t][c] = d
    res.mrc, res.rocev2 = rounded(detail["mrc"]), rounded(detail["rocev2"])
    res.metrics = rounded({
        "headline": {"name": "all-reduce busbw kept at 1% loss (of the lossless busbw)",
                     "unit": "of lossless", "mrc": k["allreduce"]["mrc"].get("1"),
                     "rocev2": k["allreduce"]["rocev2"].get("1"),
                     "paper_mrc": PAPER["mrc"]["1"], "paper_rocev2": PAPER["rocev2"]["1"]},
        "mrc": flat_metrics(conds, k, "mrc"),
        "rocev2": flat_metrics(conds, k, "rocev2"),
        "sub_claims": per_coll,
    })  # fmt: skip
    res.judge(decide(per_coll), explain(k, done, per_coll, _notes(conds, res.setup)))
    path = ctx.out_dir / f"{res.name}.png"
    groups = [f"{'AR' if c == 'allreduce' else 'A2A'} {p}%" for c in COLLECTIVES for p in
              (key(x) for x in LOSSES)]  # fmt: skip
    series = {t: [k[c][t][key(p)] for c in COLLECTIVES for p in LOSSES] for t in TRANSPORTS}
    plot.bars(path, "Claim 3: busbw kept under random loss (1 QP per connection)", groups,
              series, ylabel="busbw / lossless busbw (same transport)",
              note="paper: MRC near line rate at 0.1%, ~1/3 at 1%; RoCEv2 ~1/2 at 0.1%, "
                   "unusable at 1%. AR = ring all-reduce, A2A = all-to-all; 0 = did not "
                   "complete")  # fmt: skip
    res.plot = str(path)


def _notes(conds: dict, setup: dict[str, Any]) -> str:
    """Why the figures came out as they did: go-back-N's cost per loss against the packets a
    path holds, and how many runs the machine's CPU may have limited."""
    out = []
    one = key(1.0)
    ar = conds["allreduce"]
    zero = key(0.0)
    rr = resent_per_loss(ar["rocev2"][one]["retx_rate"], 1.0, ar["rocev2"][zero]["retx_rate"])
    mr = resent_per_loss(ar["mrc"][one]["retx_rate"], 1.0, ar["mrc"][zero]["retx_rate"])
    if rr is not None and mr is not None:
        bdp = setup.get("bdp_packets_per_path")
        paper = setup.get("paper_bdp_packets_per_path")
        out.append(
            f"at 1% the all-reduce's RoCEv2 QPs resent {rr:.1f} packets per packet lost "
            f"(go-back-N rewinds what is in flight"
            + (f": {bdp:g} packets per path here" if bdp else "")
            + f"), MRC {mr:.1f} (selective)"
            + (
                f"; the links' delay gives a path the paper's {paper:g} packets in flight"
                if paper
                else "; at the paper's scale a path holds tens of packets"
            )
        )
    n = sum(conds[c][t][p]["runs"] for c in conds for t in conds[c] for p in conds[c][t])
    bound = sum(
        conds[c][t][p]["cpu_bound_runs"] for c in conds for t in conds[c] for p in conds[c][t]
    )
    if bound:
        cvs = [conds[c]["mrc"][key(0.0)]["cv"] for c in conds]
        cv_txt = ", ".join(f"{x:.2f}" for x in cvs if x is not None)
        out.append(
            f"{bound} of {n} runs were CPU-bound ({CPU_BOUND_RULE})"
            + (f"; cv of MRC's lossless busbw across repetitions {cv_txt}" if cv_txt else "")
        )  # fmt: skip
    return "; ".join(out)


def flat_metrics(conds: dict, k: dict, t: str) -> dict[str, Any]:
    """The report's per-transport table: the BMWG figures per collective and loss rate."""
    out: dict[str, Any] = {}
    for c in COLLECTIVES:
        ab = "ar" if c == "allreduce" else "a2a"
        for p, cd in conds[c][t].items():
            tag = f"{ab}_{p}pct"
            b = cd["busbw_bps"]
            out[f"{tag}_busbw_gbps"] = b / 1e9 if b is not None else None
            out[f"{tag}_kept"] = k[c][t][p]
            out[f"{tag}_line_fraction"] = cd["line_fraction"]
            out[f"{tag}_p99_step_s"] = cd["p99_step_s"]
            out[f"{tag}_retx_rate"] = cd["retx_rate"]
            if p != key(0.0):
                base = conds[c][t][key(0.0)]["retx_rate"]
                out[f"{tag}_resent_per_loss"] = resent_per_loss(cd["retx_rate"], float(p), base)
            out[f"{tag}_qp_errors"] = cd["qp_errors"]
            out[f"{tag}_completed"] = cd["completed"]
        out[f"{ab}_cv_lossless"] = conds[c][t][key(0.0)]["cv"]
    return out


EXPERIMENT = Spec(
    name="loss",
    number=3,
    claim="Loss: ring all-reduce and all-to-all at 0, 0.1% and 1% loss: MRC with 1 QP near "
    "line rate at 0.1% and about a third at 1%; RoCEv2 with 1 QP about half, unusable at 1%",
    paper={
        "text": "64-way ring all-reduce and all-to-all at 0, 0.1% and 1% induced loss: MRC "
        "(1 QP) holds near line rate at 0.1% and keeps about a third at 1%; RoCEv2 (1 QP) "
        "keeps about half at 0.1% and is unusable at 1%",
        "mrc_kept_0.1": PAPER["mrc"]["0.1"],
        "mrc_kept_1": PAPER["mrc"]["1"],
        "rocev2_kept_0.1": PAPER["rocev2"]["0.1"],
        "rocev2_kept_1": PAPER["rocev2"]["1"],
    },
    run=run,
    minutes=4.0,
    quick_minutes=1.0,
)
