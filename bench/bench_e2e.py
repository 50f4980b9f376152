#!/usr/bin/env python3
"""End-to-end benchmarks on the namespace lab with mrc-bench (root) -> results/bench-e2e-*.json.

    .venv/bin/python bench/bench_e2e.py [--only single,permutation,failures,cpu] [--quick]

1. ``single``: one QP on the idle default lab, h0 -> h3 (under the other T0): goodput_fraction
   (target >= 0.9), median of ``--reps`` runs; RoCEv2 with 1 QP and with one QP per plane
   in the same script as the baseline; the same MRC write with the switches running their
   Python event loop (the C loop's baseline) and on kernel switches; switch CPU per data
   frame and hop.
2. ``permutation``: every host writes to a distinct host under the other T0, all at once
   (one mrc-bench process per pair, started together). Aggregate goodput_fraction for MRC
   (1 QP per pair) on the multi-plane fabric, and for RoCEv2 as deployed: on a single-plane
   fabric of the same total capacity (1 plane at planes x rate) with 1 and with 8 QPs per
   pair, and on the multi-plane fabric with one QP per plane. MRC on the single plane too
   (spraying over T1s alone). CPU of the lab's processes and of the machine beside it.
3. ``failures``: one long write per fault, MRC vs RoCEv2, on the default lab: a T1 reboot, a
   T0-T1 link down, a NIC port down, 1% loss on one fabric link; for each the depth and
   duration of the goodput dip (lab/proc/analysis/), completed, verified, QP errors, bytes
   moved against a no-fault run of the same length.
4. ``cpu``: packets per second per core of the NIC send and receive paths on real ports,
   from mrc-bench's CPU figures of one MRC write (``single``'s runs when it ran too).

Every figure is measured here; nothing is hard-coded. Each benchmark brings up its own lab
(name ``--name``, default ``mrcbench``) and tears it down, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# bench/ is on sys.path when this runs as a script (and in its unit test)
from e2e_report import report
from e2e_stats import (  # steady_fraction and pps_per_core: part of this script's surface
    fmt_num,
    median,
    num,
    pps_per_core,  # noqa: F401
    pps_summary,
    steady_fraction,  # noqa: F401
    summarise_runs,
)

from lab.fabric import lifecycle
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import LabParams, resolve
from lab.fabric.state import LabState, exists
from lab.proc import analysis as an
from lab.proc.benchrun import (
    WriteRun,
    WriteSpec,
    bench_argv,
    bench_available,
    run_parallel,
    run_write,
)
from lab.proc.cpu import ChildrenCpuMeter, cpu_bound
from lab.proc.env import env_added
from lab.proc.schedule import Step
from lab.proc.slower import attempts, cpu_bound_runs, repeat_slower
from lab.workloads import calibrate
from mrcnic.cliflags import renamed
from mrcnic.units import size_arg, time_arg, time_in

BENCHMARKS = ("single", "permutation", "failures", "cpu")
RESULTS = Path(__file__).resolve().parents[1] / "results"


def say(text: str) -> None:
    print(text, flush=True)


def machine(load_at_start: list[float] | None = None) -> dict[str, Any]:
    """The machine, with the load average taken when the benchmark started (the caller passes
    it in; measured now if not, which is only right at the start)."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_avg_at_start": load_at_start or [round(x, 2) for x in os.getloadavg()],
        "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def switch_env(env: dict[str, str] | None) -> contextlib.AbstractContextManager[None]:
    """Run the body with ``env`` added to os.environ: the lab's switch processes inherit it
    (e.g. MRC_SWITCH_C_LOOP=0 for mrc-switch's Python loop)."""
    return env_added(env)


@contextlib.contextmanager
def lab_up(params: LabParams) -> Iterator[LabState]:
    if exists(params.name):
        say(f"  lab {params.name} exists from an earlier run: taking it down first")
        lifecycle.down(params.name)
    t = time.monotonic()
    state = lifecycle.up(params)
    say(
        f"  lab {params.name} up in {time.monotonic() - t:.1f} s: {params.planes} planes x "
        f"({params.t0} T0 + {params.t1} T1), {params.host_count} hosts, "
        f"{params.rate_mbit:g} Mb/s links"
    )
    try:
        yield state
    finally:
        lifecycle.down(params.name)
        say(f"  lab {params.name} down")


def link_rate(
    a: argparse.Namespace, flag: str, pairs: list[tuple[int, int]] | None = None, **shape: Any
) -> tuple[float, dict[str, Any]]:
    """The link rate of the labs of one benchmark and why: ``--rate`` (or
    ``--perm-rate``) as given, or with ``auto`` the calibration of this machine for
    the lab's shape with python switches (the costlier mode; kernel-switch labs of the
    same benchmark run at the same rate, so the two stay comparable), measured once per
    boot and cached (lab/workloads/calibrate.py). Prints one line saying which."""
    given = getattr(a, flag)
    if given != calibrate.AUTO:
        name = flag.removesuffix("_mbit").replace("_", "-")
        line = f"links at {given:g} Mb/s as given (--{name})"
        say(f"  {line}")
        return float(given), {"mode": "forced", "rate_mbit": float(given), "line": line}
    params = resolve(None, name=a.name, **{**shape, "switch": "python"})
    cal = calibrate.get(params, pairs, recalibrate=a.recalibrate, echo=say)
    a.recalibrate = False  # once per run of this script, not once per benchmark
    say(f"  {cal.line()}\n    {cal.source()}")
    return cal.rate_mbit, {
        "mode": "calibrated",
        "rate_mbit": cal.rate_mbit,
        "line": cal.line(),
        "calibration": cal.to_dict(),
    }


def command_text(spec: WriteSpec, lab: str) -> str:
    argv = spec.argv(lab)
    n = len(bench_argv())
    return " ".join(["mrc-bench", *argv[n:]])


# --- 1. one QP ------------------------------------------------------------------------------


def bench_single(a: argparse.Namespace) -> dict[str, Any]:
    rate, choice = link_rate(a, "rate_mbit")
    params = resolve(None, name=a.name, rate_mbit=rate)
    plans = [(params, [("mrc", 1), ("rocev2", 1), ("rocev2", params.planes)], "", None)]
    if a.single_python_loop:
        # The baseline of mrc-switch's C event loop: the same write, the switches running
        # their Python loop (the twin).
        plans.append((params, [("mrc", 1)], "_python_loop", {"MRC_SWITCH_C_LOOP": "0"}))
    if a.single_kernel:
        # The same write with the kernel as the switches: the NIC without the switches' CPU.
        kparams = resolve(None, name=a.name, switch="kernel", rate_mbit=rate)
        plans.append((kparams, [("mrc", 1)], "_kernel", None))
    out: dict[str, Any] = {
        "benchmark": "e2e-single",
        "what": "one write h0 -> h3 (other T0) on the idle default lab; median of reps",
        "lab": params.to_dict(),
        "rate_choice": choice,
        "target": {"mrc_goodput_fraction": 0.9},
        "configs": {},
    }
    for lab_params, configs, suffix, env in plans:
        with switch_env(env), lab_up(lab_params) as state:
            for transport, qps in configs:
                spec = WriteSpec(
                    "h0", f"h{params.host_count - 1}", a.size, a.single_s, None, qps, transport, 500
                )
                key = f"{transport}_{qps}qp{suffix}"
                raws, cpus = [], []
                for rep in range(a.reps):
                    say(f"  {key} rep {rep + 1}/{a.reps}: {command_text(spec, params.name)}")
                    run = run_write(state, spec, echo=say)
                    _report_run(run)
                    raws.append(run.result)
                    cpus.append(run.cpu.to_json() if run.cpu else {})
                s = summarise_runs(raws)
                s["switch"] = lab_params.switch
                s["switch_env"] = env or {}
                s["command"] = command_text(spec, params.name)
                s["lab_cpu"] = cpus
                per_hop = [_switch_us_per_frame_hop(r, c) for r, c in zip(raws, cpus, strict=True)]
                s["switch_us_per_frame_hop_runs"] = per_hop
                s["switch_us_per_frame_hop_median"] = median(per_hop)
                s["results"] = [_strip(r) for r in raws]
                out["configs"][key] = s
    m = out["configs"]["mrc_1qp"]["goodput_fraction_median"]
    for s in out["configs"].values():
        g = s["goodput_fraction_median"]
        s["mrc_vs_this"] = round(m / g, 3) if m is not None and g else None
    out["mrc_meets_target"] = m is not None and m >= 0.9
    return out


def _switch_us_per_frame_hop(r: dict[str, Any] | None, cpu: dict[str, Any]) -> float | None:
    """Switch CPU (all switch processes, user + system, over the run) per data frame sent
    and switch it crossed (3 across the T1 tier, 1 under one T0): what forwarding costs."""
    if not r or not cpu or cpu.get("switch_cpu_s") is None or r.get("switch_mode") == "kernel":
        return None  # kernel switches: no processes, their work is in the hosts' softirqs
    frames = sum(q.get("tx_data_packets", 0) for q in r.get("qp_stats") or [])
    hops = 1 if r.get("same_t0") else 3
    if frames <= 0:
        return None
    return round(cpu["switch_cpu_s"] / (frames * hops) * 1e6, 2)


def _strip(r: dict[str, Any] | None) -> dict[str, Any] | None:
    """A result without its timeline (kept short in the JSON)."""
    if r is None:
        return None
    return {k: v for k, v in r.items() if k != "timeline"}


def _report_run(run: WriteRun) -> None:
    r = run.result or {}
    if run.error or not r:
        say(f"    FAILED: {run.error}\n    " + run.stderr_tail.replace("\n", "\n    "))
        return
    gf = num(r.get("goodput_fraction"))
    say(
        f"    goodput {an.fmt_bps(num(r.get('goodput_bps')) or 0)} = "
        f"{gf if gf is None else round(gf, 3)} of capacity, verified {r.get('verified')}, "
        f"QP errors {r.get('qp_errors')}, CPU {r.get('cpu_percent')}%, "
        f"switches {(run.cpu.switch_cores if run.cpu else 0) * 100:.0f}% of a core"
    )


# --- 2. permutation -------------------------------------------------------------------------


def bench_permutations(a: argparse.Namespace) -> dict[str, Any]:
    """The permutation on each of ``--perm-switch``'s modes: the first mode's results at the
    top level (as with one mode), every mode's under ``modes``."""
    modes = [m.strip() for m in a.perm_switch.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("python", "kernel")]
    if not modes or bad:
        raise LabError(f"--perm-switch: python and/or kernel, not {a.perm_switch!r}")
    runs = {}
    for m in modes:
        load_at_start = [round(x, 2) for x in os.getloadavg()]
        runs[m] = bench_permutation(argparse.Namespace(**{**vars(a), "perm_switch": m}))
        runs[m]["machine"] = machine(load_at_start)
        runs[m]["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return {**runs[modes[0]], "modes": runs}


def bench_permutation(a: argparse.Namespace) -> dict[str, Any]:
    hpt = a.perm_hosts_per_t0
    planes = a.perm_planes
    t0 = a.perm_t0
    t1 = a.perm_t1 if a.perm_t1 is not None else hpt
    common = {"name": a.name, "t0": t0, "t1": t1, "hosts_per_t0": hpt, "switch": a.perm_switch}
    shape = an.Shape.from_params(resolve(None, planes=planes, **common))
    one_way = a.perm_mode == "oneway"
    pairs = an.permutation_pairs(shape, one_way=one_way)
    dims = {"planes": planes, "t0": t0, "t1": t1, "hosts_per_t0": hpt}
    rate, choice = link_rate(a, "perm_rate_mbit", list(pairs), **dims)
    multi = resolve(None, planes=planes, rate_mbit=rate, **common)
    single = resolve(None, planes=1, rate_mbit=rate * planes, **common)
    # RoCEv2 as deployed: the same multi-plane fabric with PFC (python switches only)
    multi_pfc = multi.with_overrides(pfc=True) if multi.switch == "python" else None
    out: dict[str, Any] = {
        "benchmark": "e2e-permutation",
        "what": "every host writes to a distinct host under the other T0, all at once; "
        "aggregate goodput / aggregate capacity; median over reps",
        "mode": a.perm_mode,
        "mode_note": "oneway: the hosts of T0 0 write to those of T0 1 (no host sends and "
        "receives: two mrc-bench processes on one host currently share QP numbers and R_Keys)"
        if one_way
        else "full: every host sends and receives",
        "hosts": multi.host_count,
        "writers": len(pairs),
        "pairs": [[f"h{s}", f"h{d}"] for s, d in pairs],
        "fabric_multi_plane": multi.to_dict(),
        "fabric_single_plane": single.to_dict(),
        "fabric_multi_plane_pfc": multi_pfc.to_dict() if multi_pfc is not None else None,
        "non_blocking": multi.t1 >= multi.hosts_per_t0,
        "rate_choice": choice,
        "capacity_bps_computed": an.permutation_capacity_bps(shape, pairs),
        "target": {"mrc_goodput_fraction": 0.9},
        "configs": {},
    }
    plan = [
        (multi, "mrc", 1, "mrc_multi_plane_1qp"),
        (multi, "rocev2", planes, f"rocev2_multi_plane_{planes}qp"),
        (single, "rocev2", 1, "rocev2_single_plane_1qp"),
        (single, "rocev2", 8, "rocev2_single_plane_8qp"),
        (single, "mrc", 1, "mrc_single_plane_1qp"),
    ]
    if multi_pfc is not None:
        plan.append((multi_pfc, "rocev2", planes, f"rocev2_pfc_multi_plane_{planes}qp"))
    for params in (multi, single, multi_pfc):
        if params is None:
            continue
        todo = [p for p in plan if p[0] is params]
        with lab_up(params) as state:
            for _p, transport, qps, key in todo:
                specs = [
                    WriteSpec(f"h{s}", f"h{d}", a.size, a.perm_s, None, qps, transport, 500)
                    for s, d in pairs
                ]
                reps = []
                for rep in range(a.perm_reps):
                    say(f"  {key} rep {rep + 1}/{a.perm_reps}: {len(specs)} writes at once")
                    with ChildrenCpuMeter(state) as cpu:
                        res = run_parallel(state, specs)
                    failed = [(s, tail) for s, r, tail in res if r is None]
                    for s, tail in failed[:2]:
                        say(f"    {s.src}->{s.dst} printed no JSON: {tail[-300:]}")
                    got = [r for _s, r, _t in res if r is not None]
                    agg = an.aggregate(got) if got else None
                    if agg is not None and failed:
                        agg["missing_pairs"] = len(failed)
                        # A pair that failed carried nothing: count its capacity.
                        per = agg["capacity_bps"] / len(got)
                        agg["capacity_bps"] += per * len(failed)
                        agg["goodput_fraction"] = agg["goodput_bps"] / agg["capacity_bps"]
                    ov = an.overlap_aggregate(
                        [
                            (
                                r["start_unix_s"],
                                (num(r.get("timeline_ms")) or 500) / 1000,
                                r["timeline"],
                                r["capacity_bps"] * (len(specs) / len(got)),
                            )
                            for r in got
                            if r.get("timeline") and num(r.get("start_unix_s"))
                        ],
                        skip_s=1.0,
                        max_len_s=a.perm_s,
                    )
                    if agg is not None:
                        # The figure: all pairs writing at once (the window where all ran,
                        # after 1 s of ramp-up); the per-process average is kept beside it.
                        agg["goodput_fraction_per_process_sum"] = agg["goodput_fraction"]
                        if ov is not None:
                            agg["overlap"] = {k: round(v, 4) for k, v in ov.items()}
                            agg["goodput_fraction"] = ov["goodput_fraction"]
                            agg["goodput_bps"] = ov["goodput_bps"]
                        agg["lab_cpu"] = cpu.result.to_json() if cpu.result else {}
                        _window_cpu(agg, cpu, ov, got)
                        agg["pair_fractions"] = [
                            round(num(r.get("goodput_fraction")) or 0, 3) for r in got
                        ]
                        say(
                            f"    aggregate {an.fmt_bps(agg['goodput_bps'])} = "
                            f"{agg['goodput_fraction']:.3f} of capacity; pairs "
                            f"{agg['pair_fractions']}; verified {agg['verified']}; QP errors "
                            f"{agg['qp_errors']}; machine CPU "
                            f"{agg['lab_cpu']['machine_busy_percent']}% of {agg['lab_cpu']['cores']} cores"
                            f" over the run, {fmt_num(agg['machine_busy_window_percent'], 1)}% while "
                            f"all wrote; cpu_bound {agg['cpu_bound']}"
                        )
                    reps.append(agg)
                ok = [r for r in reps if r]
                gf = [r["goodput_fraction"] for r in ok]
                out["configs"][key] = {
                    "transport": transport,
                    "qps_per_pair": qps,
                    "planes": params.planes,
                    "rate_mbit": params.rate_mbit,
                    "pfc": params.pfc,
                    "command_per_pair": command_text(specs[0], params.name).replace(
                        f"--src {specs[0].src} --dst {specs[0].dst}", "--src hS --dst hD"
                    ),
                    "goodput_fraction_median": round(statistics.median(gf), 4) if gf else None,
                    "goodput_fraction_runs": [round(g, 4) for g in gf],
                    "start_skew_s_max": max(
                        ((r.get("overlap") or {}).get("start_skew_s", 0) for r in ok), default=None
                    ),
                    "verified_all": bool(ok) and all(r["verified"] for r in ok),
                    "qp_errors_total": sum(r["qp_errors"] for r in ok),
                    "machine_busy_percent_median": median(
                        r["lab_cpu"]["machine_busy_percent"] for r in ok
                    ),
                    "machine_busy_window_percent_median": median(
                        r.get("machine_busy_window_percent") for r in ok
                    ),
                    "cpu_bound_runs": [r.get("cpu_bound") for r in ok],
                    "lab_cores_median": median(
                        r["lab_cpu"]["bench_cores"] + r["lab_cpu"]["switch_cores"] for r in ok
                    ),
                    "runs": [_strip_perm(r) for r in ok],
                }
    cfg = out["configs"]
    m = cfg.get("mrc_multi_plane_1qp", {}).get("goodput_fraction_median")
    out["ratios"] = {
        k: round(m / v["goodput_fraction_median"], 3)
        for k, v in cfg.items()
        if m and v.get("goodput_fraction_median") and k != "mrc_multi_plane_1qp"
    }
    out["ratios_note"] = "MRC multi-plane 1 QP goodput_fraction / the config's"
    return out


def _strip_perm(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "results"}


def _window_cpu(
    agg: dict[str, Any], cpu: ChildrenCpuMeter, ov: dict | None, got: list[dict]
) -> None:
    """The machine's load while every pair wrote (the overlap window), and ``cpu_bound`` by
    mrc-bench's rule over it: the whole run's figure (``lab_cpu``) also holds the start-up of
    every pair's processes and the verification of every region, which run before and after
    the writes overlap."""
    busy = None
    if ov is not None:
        lo = ov["window_start_unix_s"]
        busy = cpu.busy_between(lo, lo + ov["window_s"])
    nic = [num(r.get("nic_core_fraction_max")) for r in got]
    nic_max = max((v for v in nic if v is not None), default=None)
    agg["machine_busy_window_percent"] = round(100 * busy, 1) if busy is not None else None
    agg["nic_core_fraction_max"] = nic_max
    agg["cpu_bound"] = None if busy is None else cpu_bound(busy, nic_max)


# --- 3. failures ----------------------------------------------------------------------------


def failure_steps(at_s: float, undo_s: float, down_ms: float) -> dict[str, list[Step]]:
    return {
        "none": [],
        "t1_reboot": [Step("reboot", at_s, "p3-t1-0", down_ms=down_ms)],
        "link_down": [Step("link", at_s, "p5-t0-0", "p5-t1-1", undo_s=undo_s)],
        "nic_port_down": [Step("port", at_s, "h0", plane=2, undo_s=undo_s)],
        "loss_1pct": [Step("loss", at_s, "p1-t0-0", "p1-t1-0", undo_s=undo_s, percent=1.0)],
    }


def bench_failures(a: argparse.Namespace) -> dict[str, Any]:
    d = a.fail_s
    at, undo = round(d * 0.3, 2), round(d * 0.7, 2)
    scenarios = failure_steps(at, undo, a.reboot_down_ms)
    modes = [m.strip() for m in a.fail_switch.split(",") if m.strip()]
    rate, choice = link_rate(a, "rate_mbit")
    base = resolve(None, name=a.name, rate_mbit=rate)
    dst = base.host_count - 1
    out: dict[str, Any] = {
        "benchmark": "e2e-failures",
        "what": f"one write h0 -> h{dst} of {d:g} s per fault, fault at {at:g} s, undone at "
        f"{undo:g} s (a reboot: {a.reboot_down_ms:g} ms down); dips per lab/proc/analysis/",
        "lab": base.to_dict(),
        "rate_choice": choice,
        "switch_modes": modes,
        "definitions": {
            "capacity": "what the surviving fabric carries for h0 -> h3 (lab/proc/analysis/)",
            "lowest_fraction": "depth: lowest goodput/capacity bin from the fault to recovery",
            "duration_s": "time from the fault until goodput is back to >= threshold x "
            "capacity for 2 bins in a row (0: never below)",
            "threshold_fraction": "0.9, or 0.9 x the run's undisturbed level when that is lower",
            "control": "the no-fault run analysed as if a fault had come at the same time: "
            "the noise floor of the dip figures",
            "bytes_vs_no_fault": "bytes written / bytes of the no-fault run of the same length",
            "completed": "mrc-bench returned a result, no QP error",
        },
        "timeline_ms": a.timeline_ms,
        "size": a.fail_size,
        "scenarios": {k: [s.to_dict() for s in v] for k, v in scenarios.items()},
        "modes": {},
    }
    for mode in modes:
        # "python-pfc": RoCEv2 as deployed, on python switches with PFC (MRC is the same
        # as on "python": its classes are never paused)
        pfc = mode.endswith("-pfc")
        params = resolve(None, name=a.name, switch=mode.removesuffix("-pfc"), rate_mbit=rate,
                         pfc=pfc or None)  # fmt: skip
        shape = an.Shape.from_params(params)
        transports: dict[str, Any] = {}
        runs = (("rocev2", params.planes),) if pfc else (("mrc", 1), ("rocev2", params.planes))
        with lab_up(params) as state:
            for transport, qps in runs:
                per: dict[str, Any] = {}
                for name, steps in scenarios.items():
                    spec = WriteSpec(
                        "h0", f"h{dst}", a.fail_size, d, None, qps, transport, a.timeline_ms
                    )
                    say(f"  [{mode}] {transport} {name}: {command_text(spec, params.name)}")
                    run = run_write(state, spec, steps, echo=say)
                    _report_run(run)
                    per[name] = _failure_entry(run, shape, 0, dst, control_at_s=at)
                    for dip in (per[name].get("analysis") or {}).get("dips", []):
                        say(f"    {dip['kind']} {dip['label']}: {_dip_text(dip)}")
                ref = (per.get("none") or {}).get("bytes")
                for e in per.values():
                    if ref and e.get("bytes") is not None:
                        e["bytes_vs_no_fault"] = round(e["bytes"] / ref, 4)
                transports[f"{transport}_{qps}qp"] = per
        out["modes"][mode] = transports
    return out


def _dip_text(d: dict[str, Any]) -> str:
    if d["duration_s"] == 0:
        return f"no dip (lowest {d['lowest_fraction']:.2f})"
    state = "recovered" if d["recovered"] else "NOT recovered"
    return f"lowest {d['lowest_fraction']:.2f}, {d['duration_s']:.2f} s below, {state}"


def _failure_entry(
    run: WriteRun, shape: an.Shape, src: int, dst: int, control_at_s: float | None = None
) -> dict[str, Any]:
    """One failure run as the JSON shows it. A run without faults is analysed as if one had
    come at ``control_at_s`` (the control: what the same arithmetic finds in noise)."""
    r = run.result or {}
    e: dict[str, Any] = {
        "command": command_text(run.spec, run.argv[run.argv.index("--lab") + 1]),
        "error": run.error,
        "completed": bool(r) and not run.error and int(r.get("qp_errors") or 0) == 0,
        "verified": r.get("verified"),
        "qp_errors": r.get("qp_errors"),
        "bytes": r.get("bytes"),
        "goodput_fraction": r.get("goodput_fraction"),
        "goodput_bps": r.get("goodput_bps"),
        "cpu_percent": r.get("cpu_percent"),
        "lab_cpu": run.cpu.to_json() if run.cpu else {},
        "t0_source": run.t0_source,
        "faults": [f.to_dict() for f in run.faults],
        "fault_commands": [c for ap in run.applied for c in ap.commands],
        "timeline": r.get("timeline"),
        "wire_rx_timeline": run.wire,
        "analysis": None,
    }
    if r.get("timeline") and run.t0_unix is not None:
        tl = an.Timeline.from_json(r["timeline"], (run.spec.timeline_ms or 250) / 1000.0)
        full = num(r.get("capacity_bps")) or an.flow_capacity_bps(shape, src, dst)
        faults = list(run.faults)
        if not faults and control_at_s is not None:
            t = control_at_s + run.schedule_offset_s
            faults = [an.FaultWindow("no fault (control)", t, None, None)]
        cap = an.scaled_capacity(shape, src, dst, faults, full)
        e["analysis"] = an.analyse(tl, cap, faults).to_dict()
    return e


# --- 4. CPU ---------------------------------------------------------------------------------


def bench_cpu(a: argparse.Namespace, single: dict[str, Any] | None) -> dict[str, Any]:
    """Send path = the client's NIC process (data out, SACKs in); receive path = the
    server's (data in, SACKs out). python: the default lab; kernel: the kernel as the
    switches (there a sender's CPU also pays for the kernel forwarding its sends start)."""
    out: dict[str, Any] = {
        "benchmark": "e2e-cpu",
        "what": "packets per CPU-second of the NIC send and receive paths on real ports, "
        "from mrc-bench's CPU figures of MRC writes h0 -> h3, 1 QP",
        "modes": {},
    }
    if single:
        out["rate_choice"] = single.get("rate_choice")
    rate = None
    for key, mode in (("mrc_1qp", "python"), ("mrc_1qp_kernel", "kernel")):
        results = [
            r for r in ((single or {}).get("configs", {}).get(key, {}).get("results") or []) if r
        ]
        source = "the single benchmark's runs"
        if not results and (mode == "python" or a.single_kernel):
            if rate is None:
                rate, out["rate_choice"] = link_rate(a, "rate_mbit")
            params = resolve(None, name=a.name, switch=mode, rate_mbit=rate)
            spec = WriteSpec(
                "h0", f"h{params.host_count - 1}", a.size, a.single_s, None, 1, "mrc", None
            )
            with lab_up(params) as state:
                say(f"  cpu ({mode} switches): {command_text(spec, params.name)}")
                run = run_write(state, spec, echo=say)
                _report_run(run)
                results = [run.result] if run.result else []
            source = "one MRC write"
        if results:
            out["modes"][mode] = {"source": source, **pps_summary(results)}
    if not out["modes"]:
        out["missing"] = "no MRC write produced a result"
    return out


# --- main -----------------------------------------------------------------------------------


def write_json(
    name: str, data: dict[str, Any], out_dir: Path, load_at_start: list[float] | None = None
) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"bench-e2e-{name}.json"
    data = {
        **data,
        "machine": machine(load_at_start),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated subset")
    p.add_argument("--name", default="mrcbench", help="lab name [mrcbench]")
    p.add_argument("--out-dir", default=str(RESULTS))
    p.add_argument(
        "--size", type=size_arg, default=1 << 20, metavar="BYTES", help="bytes per message [1M]"
    )
    renamed(
        p, "--rate", "--rate-mbit", dest="rate_mbit", type=calibrate.rate_flag,
        old_type=calibrate.rate_arg, default=calibrate.AUTO, metavar="RATE",
        help="link rate of the single, failures and cpu labs, with its unit (100Mbit); auto: "
        "the highest rate at which this machine's CPU keeps up with the default lab, measured "
        "once per boot (mrc-lab calibrate) [auto]",
    )  # fmt: skip
    p.add_argument(
        "--recalibrate",
        action="store_true",
        help="with auto rates: measure this machine again even if this boot has a result",
    )
    p.add_argument("--reps", type=int, default=3, help="repetitions of each single config [3]")
    renamed(p, "--single", "--single-s", dest="single_s", type=time_arg, default=8.0, metavar="TIME",
            help="seconds per single write [8]")  # fmt: skip
    p.add_argument(
        "--no-single-python-loop",
        dest="single_python_loop",
        action="store_false",
        help="skip the single write on switches running their Python loop (the baseline of "
        "the C loop)",
    )
    p.add_argument(
        "--no-single-kernel",
        dest="single_kernel",
        action="store_false",
        help="skip the single write on kernel switches",
    )
    p.add_argument(
        "--perm-reps", type=int, default=3, help="repetitions of each permutation config [3]"
    )
    renamed(p, "--perm", "--perm-s", dest="perm_s", type=time_arg, default=8.0, metavar="TIME",
            help="seconds per permutation run [8]")  # fmt: skip
    p.add_argument("--perm-hosts-per-t0", type=int, default=4, help="hosts = --perm-t0 x this [4]")
    p.add_argument("--perm-t0", type=int, default=2, help="T0 switches per plane [2]")
    p.add_argument(
        "--perm-t1",
        type=int,
        default=None,
        help="T1 switches per plane [--perm-hosts-per-t0: non-blocking]",
    )
    p.add_argument("--perm-planes", type=int, default=8)
    p.add_argument(
        "--perm-mode",
        choices=("oneway", "full"),
        default="oneway",
        help="full: every host writes (and is written); oneway: T0 0's hosts write to T0 1's, "
        "so no host runs two mrc-bench processes [oneway]",
    )
    p.add_argument(
        "--perm-switch",
        default="python,kernel",
        help="switch modes of the permutation labs, in order (comma-separated: python, "
        "kernel) [python,kernel: the project's switches (ECN, trimming) and Linux seg6local "
        "(tail drop)]",
    )
    renamed(
        p, "--perm-rate", "--perm-rate-mbit", dest="perm_rate_mbit", type=calibrate.rate_flag,
        old_type=calibrate.rate_arg, metavar="RATE", default=calibrate.AUTO,
        help="link rate of the multi-plane permutation fabric, with its unit; the single-plane "
        "one runs at planes x this; auto: calibrated for the permutation's lab and writers, "
        "all at once [auto]",
    )  # fmt: skip
    renamed(p, "--fail", "--fail-s", dest="fail_s", type=time_arg, default=12.0, metavar="TIME",
            help="seconds per failure write [12]")  # fmt: skip
    p.add_argument(
        "--fail-switch",
        default="python,python-pfc,kernel",
        help="switch modes of the failure benchmark, in order: python, python-pfc (RoCEv2 "
        "alone, on python switches with PFC: the baseline as deployed), kernel "
        "[python,python-pfc,kernel]",
    )
    p.add_argument(
        "--fail-size",
        type=size_arg,
        default=1 << 18,
        metavar="BYTES",
        help="bytes per message of the failure writes (small: many per timeline bin) [256K]",
    )
    renamed(p, "--reboot-down", "--reboot-down-ms", dest="reboot_down_ms", type=time_in(1e-3),
            default=2000.0, metavar="TIME", help="how long a rebooted switch is down [2s]")  # fmt: skip
    renamed(p, "--timeline", "--timeline-ms", dest="timeline_ms", metavar="TIME",
            type=time_in(1e-3, whole=True), default=250, help="timeline bin [250ms]")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="1 rep each, shorter writes (a smoke run)")
    p.add_argument(
        "--cpu-bound-repeats",
        type=int,
        default=None,
        metavar="N",
        help="when a benchmark (single, permutation, failures) has CPU-bound runs, run it again "
        "at half the link rate, up to N times, while that leaves fewer; the JSON keeps the "
        "attempt with the fewest and lists all (cpu_bound_repeats) [2; 0 with --quick]",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="print markdown tables of the JSON in --out-dir and exit (no root needed)",
    )
    return p


#: the benchmarks that run again at a lower rate when CPU-bound, and the flag of their rate
RATE_FLAGS = {"single": "rate_mbit", "permutation": "perm_rate_mbit", "failures": "rate_mbit"}


def run_slower_if_cpu_bound(name: str, a: argparse.Namespace) -> dict[str, Any]:
    """One benchmark; while it has CPU-bound runs, again at half the link rate (its rate flag
    forced for that attempt), as lab.proc.slower says: a published figure never comes from a
    run the CPU limited when a lower rate gives one it did not."""
    fn = {"single": bench_single, "permutation": bench_permutations, "failures": bench_failures}
    flag = RATE_FLAGS[name]
    given = getattr(a, flag)

    def once(rate_mbit: float | None) -> dict[str, Any]:
        setattr(a, flag, given if rate_mbit is None else rate_mbit)
        try:
            return fn[name](a)
        finally:
            setattr(a, flag, given)

    def rate_of(d: dict[str, Any]) -> float | None:
        return num((d.get("rate_choice") or {}).get("rate_mbit"))

    repeats = a.cpu_bound_repeats
    if repeats is None:
        repeats = 0 if a.quick else 2
    tries, best = repeat_slower(once, rate_of, cpu_bound_runs, repeats, say)
    data = tries[best][0]
    if len(tries) > 1:
        data["cpu_bound_repeats"] = attempts(tries, best, rate_of)
    return data


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    bad = [x for x in only if x not in BENCHMARKS]
    if bad:
        print(f"unknown benchmark(s) {bad}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    if a.report:
        print(report(Path(a.out_dir)))
        return 0
    if a.quick:
        a.reps, a.perm_reps = 1, 1
        a.single_s, a.perm_s, a.fail_s = 5.0, 6.0, 10.0
    if not have_net_admin():
        print("bench_e2e needs root: it builds network-namespace labs", file=sys.stderr)
        return 2
    why = bench_available()
    if why:
        print(f"bench_e2e: {why}", file=sys.stderr)
        return 2
    out_dir = Path(a.out_dir)
    t0 = time.monotonic()
    single = None
    try:
        for name in BENCHMARKS:
            if name not in only:
                continue
            say(f"== {name}")
            tb = time.monotonic()
            load_at_start = [round(x, 2) for x in os.getloadavg()]
            if name == "cpu":
                data = bench_cpu(a, single)
            else:
                data = run_slower_if_cpu_bound(name, a)
                if name == "single":
                    single = data
            data["wall_s"] = round(time.monotonic() - tb, 1)
            path = write_json(name, data, out_dir, load_at_start)
            say(f"  wrote {path} ({data['wall_s']} s)")
    except KeyboardInterrupt:
        say("interrupted (the lab was torn down)")
        return 130
    except LabError as e:
        say(f"bench_e2e: {e}")
        return 1
    say(f"done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
