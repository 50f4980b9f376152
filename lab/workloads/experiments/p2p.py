"""Claim 1, point to point: latency under one T0 against across a T1, and write bandwidth
at 32 KB messages.

Paper: 5.09 us between hosts under one T0, 6.54 us across a T1 (1.28x); RDMA Write at 96%
of line rate with 32 KB messages. The lab's links run ~1000x slower than 100-400 Gb/s and
its switches are software, so absolute latencies are hundreds of microseconds: what carries
over is the *shape* (two more hops cost more) and the bandwidth fraction. Latency:
``mrc-bench lat`` (ib_write_lat's columns); bandwidth: ``mrc-bench write --size 32K``
(ib_write_bw's columns, and libmrc's MsgSize/TotalOps/BW_avg/MsgRate). MRC sprays one QP
over every plane; RoCEv2 as deployed on a multi-port NIC runs one QP per port (rail).
"""

from __future__ import annotations

from typing import Any

from lab.views import plot
from lab.workloads.experiments.base import (
    Context,
    Result,
    bench,
    command,
    lab_params,
    lab_up,
    median,
    rounded,
    setup_of,
)
from lab.workloads.experiments.registry import Spec

SIZE = 32 * 1024
PAPER_SAME_T0_US, PAPER_ACROSS_T1_US, PAPER_BW_FRACTION = 5.09, 6.54, 0.96


def perftest_bw_columns(w: dict[str, Any]) -> dict[str, Any]:
    """ib_write_bw's columns from one mrc-bench write result."""
    dur = w.get("duration_s") or 0.0
    return {
        "#bytes": w.get("size"),
        "#iterations": w.get("iterations"),
        "BW_peak_Gbps": round(w["peak_bps"] / 1e9, 6) if w.get("peak_bps") else None,
        "BW_average_Gbps": round(w["goodput_bps"] / 1e9, 6) if w.get("goodput_bps") else None,
        "MsgRate_Mpps": round(w["iterations"] / dur / 1e6, 6)
        if dur and w.get("iterations")
        else None,
    }


def libmrc_columns(w: dict[str, Any]) -> dict[str, Any]:
    """The OCP libmrc benchmark's columns: perftest's under libmrc's names."""
    pt = perftest_bw_columns(w)
    return {"MsgSize": pt["#bytes"], "TotalOps": pt["#iterations"],
            "BW_avg_Gbps": pt["BW_average_Gbps"], "MsgRate_Mpps": pt["MsgRate_Mpps"]}  # fmt: skip


def run(ctx: Context, res: Result) -> None:
    params = lab_params(ctx)
    reps = ctx.repetitions(3)
    iters = 200 if ctx.quick else 1000
    secs = 4 if ctx.quick else 10
    hosts_per_t0 = params.hosts_per_t0
    same, across = "h1", f"h{hosts_per_t0}"  # h0's neighbour, and the first host of T0 1
    runs: dict[str, dict[str, list]] = {
        t: {"same": [], "across": [], "bw": []} for t in ("mrc", "rocev2")
    }
    lab = params.name
    with lab_up(ctx, params):
        for rep in range(reps):
            for t in ("mrc", "rocev2"):  # alternating transports, as every benchmark here
                qps = "1" if t == "mrc" else str(params.planes)
                for key, dst in (("same", same), ("across", across)):
                    a = (
                        "lat",
                        "--src",
                        "h0",
                        "--dst",
                        dst,
                        "--iters",
                        str(iters),
                        "--transport",
                        t,
                    )
                    r = bench(ctx, lab, a)
                    runs[t][key].append(r["latency_us"])
                    if rep == 0:
                        res.commands.append(command(lab, a))
                a = ("write", "--src", "h0", "--dst", across, "--size", str(SIZE), "--duration",
                     str(secs), "--qps", qps, "--transport", t)  # fmt: skip
                w = bench(ctx, lab, a)
                runs[t]["bw"].append(w)
                if rep == 0:
                    res.commands.append(command(lab, a))
                ctx.echo(
                    f"  rep {rep + 1}/{reps} {t}: lat same T0 {runs[t]['same'][-1]['t_typical']} us, "
                    f"across T1 {runs[t]['across'][-1]['t_typical']} us; 32 KiB write "
                    f"{w['goodput_fraction']:.3f} of capacity (verified {w['verified']}, "
                    f"cpu_bound {w.get('cpu_bound')})"
                )
        res.setup = setup_of(params, base_rtt_s=None, scale_note=(
            "Latencies are the lab's (software switches, ~1000x slower links); compare the "
            "ratio across/same and the bandwidth fraction, not microseconds."))  # fmt: skip
    out: dict[str, Any] = {}
    for t, r in runs.items():
        same_us = median([x["t_typical"] for x in r["same"]])
        across_us = median([x["t_typical"] for x in r["across"]])
        frac = median([w["goodput_fraction"] for w in r["bw"]])
        out[t] = {
            "lat_same_t0_us": same_us,
            "lat_across_t1_us": across_us,
            "lat_ratio_across_over_same": across_us / same_us if same_us else None,
            "lat_added_by_t1_us": across_us - same_us if same_us and across_us else None,
            "lat_p99_across_t1_us": median([x["p99"] for x in r["across"]]),
            "write_32k_goodput_fraction": frac,
            "write_32k_fraction_runs": [w["goodput_fraction"] for w in r["bw"]],
            "verified": all(w["verified"] for w in r["bw"]),
            "qp_errors": sum(w["qp_errors"] for w in r["bw"]),
            "retx_rate": median(
                [w["retransmissions"] / max(1, w["bytes"] // 4096) for w in r["bw"]]
            ),
            "cpu_bound_runs": [w.get("cpu_bound") for w in r["bw"]],
            "perftest_lat": r["across"][-1],
            "perftest_bw": perftest_bw_columns(r["bw"][-1]),
            "libmrc": libmrc_columns(r["bw"][-1]),
        }
    res.mrc, res.rocev2 = rounded(out["mrc"]), rounded(out["rocev2"])
    m, ro = out["mrc"], out["rocev2"]
    res.metrics = rounded({
        "headline": {"name": "32 KiB write, fraction of line rate", "unit": "of capacity",
                     "mrc": m["write_32k_goodput_fraction"], "rocev2": ro["write_32k_goodput_fraction"],
                     "paper_mrc": PAPER_BW_FRACTION},
        "mrc": {k: m[k] for k in ("lat_same_t0_us", "lat_across_t1_us", "lat_ratio_across_over_same",
                                   "write_32k_goodput_fraction", "retx_rate")},
        "rocev2": {k: ro[k] for k in ("lat_same_t0_us", "lat_across_t1_us", "lat_ratio_across_over_same",
                                       "write_32k_goodput_fraction", "retx_rate")},
    })  # fmt: skip
    bw_ok = (m["write_32k_goodput_fraction"] or 0) >= PAPER_BW_FRACTION - 0.03
    bw_near = (m["write_32k_goodput_fraction"] or 0) >= 0.85
    lat_shape = (m["lat_ratio_across_over_same"] or 0) > 1.0
    why = (
        f"MRC wrote 32 KiB messages at {m['write_32k_goodput_fraction']:.3f} of line rate "
        f"(paper 0.96; RoCEv2 with a QP per rail {ro['write_32k_goodput_fraction']:.3f}); "
        f"latency across a T1 was {m['lat_ratio_across_over_same']:.2f}x that under one T0 "
        f"(paper 1.28x: {m['lat_same_t0_us']:.0f} vs {m['lat_across_t1_us']:.0f} us here, "
        "software switches at lab rates)"
    )
    if bw_ok and lat_shape:
        res.judge("reproduced", why)
    elif bw_near and lat_shape:
        res.judge("partly", why)
    else:
        res.judge("not reproduced", why)
    path = ctx.out_dir / f"{res.name}.png"
    draw(path, m, ro)
    res.plot = str(path)


def draw(path: Any, m: dict[str, Any], ro: dict[str, Any]) -> Any:
    """Both halves of the claim side by side: the 32 KiB write's fraction of line rate, and
    the latency across a T1 over that under one T0 (each with the paper's figure dashed and
    the microseconds on the bars)."""
    plt = plot.pyplot()
    fig, (bw, lat) = plt.subplots(1, 2, figsize=(9, 4.2))
    keys = ("mrc", "rocev2")
    for ax, values, paper, ylabel in (
        (bw, [r["write_32k_goodput_fraction"] for r in (m, ro)], PAPER_BW_FRACTION,
         "32 KiB write: goodput / capacity"),
        (lat, [r["lat_ratio_across_over_same"] for r in (m, ro)],
         PAPER_ACROSS_T1_US / PAPER_SAME_T0_US, "latency across a T1 / under one T0"),
    ):  # fmt: skip
        for i, (key, v) in enumerate(zip(keys, values, strict=True)):
            ax.bar(i, v or 0.0, 0.6, color=plot.COLOURS[key], label=plot.LABELS[key])
            ax.annotate("n/a" if v is None else f"{v:.3g}", (i, v or 0.0), ha="center",
                        va="bottom", fontsize=7)  # fmt: skip
        ax.axhline(paper, ls="--", lw=1, color=plot.COLOURS["paper"], label=f"paper {paper:.3g}")
        ax.set_xticks(range(len(keys)), [plot.LABELS[k] for k in keys])
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    for i, r in enumerate((m, ro)):  # the microseconds behind each ratio
        lat.annotate(f"{r['lat_same_t0_us']:.0f} / {r['lat_across_t1_us']:.0f} us", (i, 0.02),
                     xycoords=("data", "axes fraction"), ha="center", fontsize=7, color="white")  # fmt: skip
    fig.suptitle("Claim 1: point to point: a 32 KiB write's rate, and latency across a T1")
    note = (
        f"paper: {PAPER_BW_FRACTION:g} of line rate; {PAPER_SAME_T0_US:g} us under "
        f"one T0, {PAPER_ACROSS_T1_US:g} us across a T1 (ib_write_lat)"
    )
    return plot.save(plt, fig, path, note)


EXPERIMENT = Spec(
    name="p2p",
    number=1,
    claim="Point to point: latency under one T0 5.09 us vs across T1 6.54 us; write "
    "bandwidth 96% of line rate at 32 KB messages",
    paper={
        "text": "5.09 us under one T0, 6.54 us across a T1; RDMA Write 96% of line rate "
        "at 32 KB messages",
        "lat_same_t0_us": PAPER_SAME_T0_US,
        "lat_across_t1_us": PAPER_ACROSS_T1_US,
        "write_32k_fraction": PAPER_BW_FRACTION,
    },
    run=run,
    minutes=3.0,
    quick_minutes=1.0,
)
