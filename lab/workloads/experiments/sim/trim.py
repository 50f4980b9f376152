"""Claim 10 in the simulator: trimming against dropping, the time from a congestion onset to
the first retransmission request, at the paper's proportions (8 planes x 100 Gb/s, 4 us).

The lab form's onset (``lab/workloads/experiments/trim.py``) on :mod:`mrcnic.sim.onset`: h1
writes to h0 at its NIC's full rate; LEAD_S later h2 joins with 8 QPs, so each of h0's plane
links is asked for twice its rate and the joiner's windows (1.5 BDP each) overflow the
buffer at once. The three hosts sit under three T0s of one T1 per plane, so the queue forms
on the T1 -> h0's T0 link of every plane, 4 us of propagation from either end. The onset is
the joiner's first post (each seed moves it by a fifth of a base RTT, so the seeds see
different phases of the steady write); the first NACK / retransmission after it, of either
write, is exact (:class:`mrcnic.sim.loss_clock.LossClock`).

The buffer is shallower than the paper's 1 MiB: BUFFER_BYTES, about one link's BDP, fills in
about one base RTT of the onset, before either transport's congestion control can answer,
as the lab form's 4-frame buffer does (ECN at half of it, the lab's rule). At 1 MiB (ECN at
200 KiB) NSCC holds the queue below overflow: nothing is trimmed or dropped, so there is no
loss to signal (the full form runs that case too: ``mrc.paper_buffer``).

Tiers: MRC on trimming switches, MRC on dropping switches (``ClosSpec.trim`` false), RoCEv2
(its data is never trimmable: dropped; a QP per plane for either write). The request is the
first NACK (MRC trimming: a trimmed packet's; RoCEv2: a NAK on the next packet out of
order), else the first retransmission (MRC dropping: from SACK gaps or a timeout, both
reported). The expected gap between trimming and dropping is about one full queue's drain
time (the packets that reveal a drop wait behind it, a trimmed header does not).
"""

from __future__ import annotations

import shlex
from dataclasses import fields, replace
from typing import Any

from lab.workloads.experiments.base import Context, Result, cv, median, rounded
from lab.workloads.experiments.sim.common import SimForm, paper_spec, run_parallel, sim_setup
from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.onset import OnsetParams, run_onset

BUFFER_BYTES = 128 << 10  # ~1.1 x a 100 Gb/s link's BDP at the 9.4 us base RTT
SHAPE = {"t0": 3, "t1": 1, "hosts_per_t0": 1, "msg_size": 256 << 10,
         "queue_bytes": BUFFER_BYTES, "ecn_bytes": BUFFER_BYTES // 2}  # fmt: skip
LEAD_S = {False: 200e-6, True: 100e-6}  # by quick: the steady write's head start
SIZES = {False: (32 << 20, 16 << 20), True: (16 << 20, 8 << 20)}  # steady, joiner bytes
SEEDS = {False: (1, 2, 3, 4, 5), True: (1,)}
TIERS = ("mrc_trim", "mrc_drop", "rocev2")
FIRSTS = ("first_request_s", "first_nack_s", "first_retx_s", "first_sack_loss_s",
          "first_timeout_s")  # fmt: skip
COUNTS = ("trims", "drops", "ecn_marks", "nacks", "retransmissions", "sack_losses", "timeouts",
          "spurious_timeouts")  # fmt: skip


def tier_spec(tier: str, seed: int) -> ClosSpec:
    spec = paper_spec(**SHAPE, seed=seed)
    if tier == "mrc_drop":
        return replace(spec, trim=False)
    if tier == "rocev2":
        return replace(spec, transport="rocev2")
    return spec


def params(spec: ClosSpec, quick: bool) -> OnsetParams:
    steady, joiner = SIZES[quick]
    join = LEAD_S[quick] + (spec.seed - 1) % 5 * spec.base_rtt_s / 5
    return OnsetParams(join_s=join, steady_bytes=steady, joiner_bytes=joiner)


def jobs(quick: bool) -> dict[str, tuple[ClosSpec, OnsetParams]]:
    out = {}
    for seed in SEEDS[quick]:
        for t in TIERS:
            spec = tier_spec(t, seed)
            out[f"{t}/{seed}"] = (spec, params(spec, quick))
    if not quick:  # the paper's own buffer: the onset does not overflow it
        spec = paper_spec(**{**SHAPE, "queue_bytes": 1 << 20, "ecn_bytes": 200 << 10})
        out["paper_buffer/1"] = (spec, params(spec, quick))
    return out


def run_job(job: tuple[ClosSpec, OnsetParams]) -> dict[str, Any]:
    return run_onset(*job)


def command(spec: ClosSpec, p: OnsetParams) -> str:
    """A Python line that reruns one simulation and prints its JSON."""

    def args(x: Any) -> str:
        d = type(x)()
        kw = [f"{f.name}={getattr(x, f.name)!r}" for f in fields(x)
              if getattr(x, f.name) != getattr(d, f.name)]  # fmt: skip
        return ", ".join(kw)

    code = ("import json; from mrcnic.sim.clos import ClosSpec; "
            "from mrcnic.sim.onset import OnsetParams, run_onset; "
            f"print(json.dumps(run_onset(ClosSpec({args(spec)}), OnsetParams({args(p)}))))")  # fmt: skip
    return shlex.join([".venv/bin/python", "-c", code])


def summarise(runs: list[dict[str, Any]], rtt_s: float) -> dict[str, Any]:
    """The medians over the valid runs (the steady write still running at the request)."""
    ok = [r for r in runs if r.get("valid")]
    out: dict[str, Any] = {k: median([r.get(k) for r in ok]) for k in FIRSTS}
    req = out["first_request_s"]
    out["first_request_rtts"] = None if req is None else req / rtt_s
    for i, role in enumerate(("steady", "joiner")):  # whose retransmission came first
        out[f"first_retx_{role}_s"] = median([r["flows"][i].get("first_retx_s") for r in ok])
    out["first_request_runs_s"] = [r.get("first_request_s") for r in runs]
    out["cv"] = cv([r.get("first_request_s") for r in ok])
    out.update({k: median([r.get(k) for r in runs]) for k in COUNTS})
    out["valid_runs"] = len(ok)
    out["runs"] = len(runs)
    out["verified"] = bool(runs) and all(r.get("verified") for r in runs)
    out["qp_errors"] = sum(int(r.get("qp_errors") or 0) for r in runs)
    out["wall_s"] = sum(r.get("wall_s") or 0.0 for r in runs)
    return out


def judge(
    trim_s: float | None,
    drop_s: float | None,
    roce_s: float | None,
    drain_s: float,
    rtt_s: float,
    how: str = "",
) -> tuple[str, str]:
    """Reproduced: MRC's first request with trimming comes at least a full queue's drain
    time before its first retransmission on dropping switches, and no later than RoCEv2's
    NAK; partly: trimming earlier than one of the two; else not (or a tier saw none)."""

    def us(x: float | None) -> str:
        return "none" if x is None else f"{x * 1e6:.1f} us ({x / rtt_s:.1f} RTTs)"

    why = (f"congestion onset (8 QPs join a full link) to the first retransmission request, "
           f"median: MRC with trimming {us(trim_s)} (a NACK), MRC with dropping {us(drop_s)} "
           f"(its first retransmission{how}), RoCEv2 (drops, NAK) {us(roce_s)}; base RTT "
           f"{rtt_s * 1e6:.1f} us, a full queue drains in {drain_s * 1e6:.1f} us")  # fmt: skip
    if trim_s is not None and drop_s is not None:
        gap = drop_s - trim_s
        why += (f"; trimming asked {gap * 1e6:.1f} us earlier than dropping "
                f"({gap / drain_s:.1f} queue drains, {gap / rtt_s:.1f} RTTs)")  # fmt: skip
    why += (
        ". Thresholds: trimming at least one queue drain before dropping, and no later than RoCEv2"
    )
    if trim_s is None or drop_s is None:
        return "not reproduced", why + " (a tier saw no request after the onset)"
    vs_drop = trim_s + drain_s <= drop_s
    vs_roce = roce_s is None or trim_s <= roce_s
    if vs_drop and vs_roce:
        return "reproduced", why
    if trim_s < drop_s or (roce_s is not None and trim_s < roce_s):
        return "partly", why
    return "not reproduced", why


def run(ctx: Context, res: Result) -> None:
    todo = jobs(ctx.quick)
    out = run_parallel(run_job, todo, ctx.echo)
    spec0 = todo[f"mrc_trim/{SEEDS[ctx.quick][0]}"][0]
    rtt, drain = spec0.base_rtt_s, spec0.queue_bytes * 8 / spec0.path_rate
    for name, r in out.items():
        ctx.echo(f"    {name:<16} onset -> first request {_us(r['first_request_s'])} (NACK "
                 f"{_us(r['first_nack_s'])}, retransmission {_us(r['first_retx_s'])}), trims "
                 f"{r['trims']}, drops {r['drops']}, valid {r['valid']}")  # fmt: skip
    runs = {t: [out[n] for n in todo if n.split("/")[0] == t] for t in TIERS}
    s = {t: summarise(runs[t], rtt) for t in TIERS}
    m, d, ro = s["mrc_trim"], s["mrc_drop"], s["rocev2"]
    p0 = todo[f"mrc_trim/{SEEDS[ctx.quick][0]}"][1]
    res.setup = sim_setup(
        spec0,
        flows=["h1 -> h0 (steady, MRC 1 QP, RoCEv2 a QP per plane)",
               f"h2 -> h0 (joins {p0.join_s * 1e6:.0f} us later, {p0.joiner_qps} QPs)"],
        bytes_per_flow=[p0.steady_bytes, p0.joiner_bytes],
        seeds=list(SEEDS[ctx.quick]),
        queue_drain_s=round(drain, 9),
        scale_note=f"Simulated at 100 Gb/s, 4 us; the buffer is {BUFFER_BYTES >> 10} KiB "
        f"(about one link's BDP) so that the onset overflows it before congestion control "
        f"answers, as in the lab form; at the paper's 1 MiB NSCC keeps the queue below "
        f"overflow.",
    )  # fmt: skip
    res.mrc = {"trimming": rounded(m, 9), "dropping": rounded(d, 9)}
    if "paper_buffer/1" in out:
        pb = out["paper_buffer/1"]
        res.mrc["paper_buffer"] = rounded({k: pb.get(k) for k in (*FIRSTS, *COUNTS, "valid",
                                                                  "verified")}, 9)  # fmt: skip
    res.rocev2 = rounded(ro, 9)
    res.commands = [command(*todo[f"{t}/{SEEDS[ctx.quick][0]}"]) for t in TIERS]
    keys = ("first_request_s", "first_request_rtts", "first_nack_s", "first_retx_s",
            "first_sack_loss_s", "first_timeout_s", "cv", "trims", "drops", "timeouts",
            "sack_losses")  # fmt: skip
    res.metrics = rounded({
        "headline": {"name": "congestion onset to the first retransmission request",
                     "unit": "s", "mrc": m["first_request_s"], "rocev2": ro["first_request_s"]},
        "mrc": {**{k: m.get(k) for k in keys},
                "first_request_s_dropping": d["first_request_s"],
                "first_request_rtts_dropping": d["first_request_rtts"],
                "first_sack_loss_s_dropping": d["first_sack_loss_s"],
                "first_timeout_s_dropping": d["first_timeout_s"]},
        "rocev2": {k: ro.get(k) for k in keys},
    }, 9)  # fmt: skip
    how = (f": the steady write's {_us(d['first_retx_steady_s'])}, the joiner's "
           f"{_us(d['first_retx_joiner_s'])}; first SACK-found loss "
           f"{_us(d['first_sack_loss_s'])}, first timeout {_us(d['first_timeout_s'])}")  # fmt: skip
    verdict, why = judge(m["first_request_s"], d["first_request_s"], ro["first_request_s"],
                         drain, rtt, how)  # fmt: skip
    if "paper_buffer/1" in out:
        pb = out["paper_buffer/1"]
        why += (f"; at the paper's 1 MiB buffer MRC (trimming) saw {pb['trims']} trims and "
                f"{pb['drops']} drops, and its first timeout came at "
                f"{_us(pb['first_timeout_s'])} ({pb['spurious_timeouts']} of "
                f"{pb['timeouts']} timeouts spurious)")  # fmt: skip
    bad = [t for t in TIERS if not s[t]["verified"] or s[t]["qp_errors"]]
    if bad:
        why += f"; not verified or QP errors in: {', '.join(bad)}"
    res.judge(verdict, why)


def _us(x: float | None) -> str:
    return "none" if x is None else f"{x * 1e6:.1f} us"


SIM = SimForm(run, minutes=2.0, quick_minutes=0.4)
