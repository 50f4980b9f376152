"""``make demo``: one write across a multi-plane fabric that keeps going while it breaks.

    python -m lab.demo [--duration 30] [--timeline-ms 250] [--no-baseline] [--name mrcdemo]

Brings up the default lab (8 planes x (2 T0 + 2 T1), python switches; root needed), runs
``mrc-bench write`` from h0 to h3 (under the other T0) for ``--duration`` seconds with a
goodput timeline, and meanwhile, on a fixed schedule counted from the moment data starts to
flow, reboots a T1 switch and takes a T0-T1 link down and up again (each command is printed
as it runs). Then the same for the RoCEv2 baseline (one QP per plane, each pinned to one
path) if the time budget allows. Prints one screen: goodput per interval with the faults
marked, depth and duration of each dip, bytes verified, QP errors, CPU. Writes
results/demo.json and results/demo-timeline.png. The lab is torn down at the end, also on
Ctrl-C or an error. Definitions of capacity, depth and duration: lab/proc/analysis/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from lab.fabric import lifecycle
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import LabParams, resolve
from lab.fabric.paths import RESULTS
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, exists
from lab.proc import analysis as an
from lab.proc import children
from lab.proc.benchrun import WriteRun, WriteSpec, bench_available, run_write
from lab.proc.cpu import CPU_BOUND_LABEL, cpu_verdict
from lab.proc.schedule import Step
from lab.workloads import calibrate
from mrcnic.cliflags import deprecated, png_path, renamed
from mrcnic.optional import first_missing
from mrcnic.units import size_arg, time_arg, time_in

TRANSPORT_TITLES = {"mrc": "MRC", "rocev2": "RoCEv2"}


def demo_schedule(duration_s: float, planes: int, t1: int) -> list[Step]:
    """The fixed schedule, scaled to the run: a T1 reboot at ~27% of the run (down for 2 s,
    or 7% of a shorter run), a T0-T1 link down at ~57% and up at ~77%. The T1 is in plane
    3 (or the last plane), the link is h0's T0 uplink to the last T1 of plane 5 (or the last
    plane)."""
    p_reboot = min(3, planes - 1)
    p_link = min(5, planes - 1)
    down_ms = min(2000.0, duration_s * 1000 * 0.07) if duration_s < 28 else 2000.0
    return [
        Step("reboot", round(duration_s * 0.27, 2), f"p{p_reboot}-t1-0", down_ms=down_ms),
        Step(
            "link",
            round(duration_s * 0.57, 2),
            f"p{p_link}-t0-0",
            f"p{p_link}-t1-{t1 - 1}",
            undo_s=round(duration_s * 0.77, 2),
        ),
    ]


# --- analysis of one run --------------------------------------------------------------------


def analyse_run(run: WriteRun, params: LabParams, src: int, dst: int) -> dict[str, Any]:
    """The run as the screen and the JSON show it: timeline, capacity per bin, dips."""
    out: dict[str, Any] = run.to_dict()
    res = run.result or {}
    tl_data = res.get("timeline") or []
    out["timeline"] = tl_data
    if not tl_data or run.t0_unix is None:
        out["analysis"] = None
        out["capacity_per_bin_bps"] = []
        return out
    bin_s = (run.spec.timeline_ms or 250) / 1000.0
    tl = an.Timeline.from_json(tl_data, bin_s)
    shape = an.Shape.from_params(params)
    full = float(res.get("capacity_bps") or an.flow_capacity_bps(shape, src, dst))
    cap = an.scaled_capacity(shape, src, dst, run.faults, full)
    a = an.analyse(tl, cap, run.faults)
    out["analysis"] = a.to_dict()
    out["capacity_per_bin_bps"] = [round(c) for c in a.capacities_bps]
    return out


# --- the screen -----------------------------------------------------------------------------


def _fraction_series(run: dict[str, Any]) -> list[float]:
    tl = run.get("timeline") or []
    caps = run.get("capacity_per_bin_bps") or []
    return [g / c if c else 0.0 for (_t, g), c in zip(tl, caps, strict=False)]


def _marks(
    run: dict[str, Any], steps: list[dict[str, Any]], duration_s: float = 0.0, bin_s: float = 0.0
) -> list[tuple[float, str]]:
    marks = []
    tl = run.get("timeline") or []
    if tl and duration_s and tl[-1][0] + 2 * bin_s < duration_s:
        marks.append((tl[-1][0] + bin_s, "E"))  # the write ended early
    for f, s in zip(run.get("faults") or [], steps, strict=False):
        m = Step.from_dict(s).mark
        marks.append((f["start_s"], m))
        if f.get("end_s") is not None:
            marks.append((f["end_s"], m.lower()))
    return marks


def _dip_cell(d: dict[str, Any] | None) -> str:
    if d is None:
        return "n/a"
    if not d.get("observed", True):
        return "write had ended"
    low = f"{d['lowest_fraction']:.0%}"
    if d["duration_s"] == 0:
        return f"none (low {low})"
    if d["recovered"]:
        return f"to {low} for {_secs(d['duration_s'])}"
    return f"to {low}, not back ({_secs(d['window_s'])})"


def _secs(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _bytes(n: float) -> str:
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n:.0f} B"


def _size(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"


def _cpu_cell(run: dict[str, Any]) -> str:
    lab = run.get("lab_cpu") or {}
    res = run.get("result") or {}
    bench = res.get("cpu_percent")
    parts = []
    if isinstance(bench, int | float):
        parts.append(f"bench {bench:.0f}%")
    if lab:
        parts.append(f"sw {lab.get('switch_cores', 0) * 100:.0f}%")
    return " ".join(parts) or "n/a"


def _cpu_bound_cell(res: dict[str, Any]) -> str:
    """Whether a run was CPU-bound (mrc-bench's flag; computed from its CPU figures for a
    result from before the flag existed), with the figures behind it."""
    if "cpu_bound" not in res:
        res = {
            **res,
            **cpu_verdict(
                res.get("machine_cpu_percent"),
                [res.get("cpu_percent_client"), res.get("cpu_percent_server")],
            ),
        }
    m, n = res.get("machine_busy_fraction"), res.get("nic_core_fraction_max")
    w, f = res.get("cpu_pressure_fraction"), res.get("cpu_wait_per_frame_time")
    figs = ", ".join(
        x
        for x in (
            f"{m:.0%} busy" if isinstance(m, int | float) else "",
            f"wait {f:.1%} frame" if isinstance(f, int | float) else "",
            f"wait {w:.0%}" if isinstance(w, int | float) and f is None else "",
            f"NIC {n:.0%}" if isinstance(n, int | float) else "",
        )
        if x
    )
    return f"{'YES' if res.get('cpu_bound') else 'no'} ({figs})" if figs else "?"


def render_screen(doc: dict[str, Any], width: int = 56, unicode: bool = True) -> str:
    """The one screen of the demo, from its JSON document (pure: tested without a lab)."""
    lab = doc["lab"]
    runs: dict[str, dict[str, Any]] = doc["runs"]
    steps = doc["schedule"]
    marks = "  ".join(
        f"{st.mark} {st.label} ({st.mark.lower()}: {st.heal_label})"
        for st in map(Step.from_dict, steps)
    )
    lines = [
        f"mrc demo: {doc['src']} -> {doc['dst']} across the T1 tier; {lab['planes']} planes x "
        f"({lab['t0']} T0 + {lab['t1']} T1), {lab['rate_mbit']:g} Mb/s links, "
        f"{lab['switch']} switches",
        f"{doc['duration_s']:g} s write, {_size(doc['size'])} messages; bars: goodput per "
        f"{doc['timeline_ms']} ms / what the surviving fabric can carry",
        f"faults: {marks}",
    ]
    why = (doc.get("rate_choice") or {}).get("line")
    if why:
        lines += textwrap.wrap(f"rate: {why}", 96, subsequent_indent="      ")
    lines.append("")
    for key, run in runs.items():
        title = TRANSPORT_TITLES.get(key, key)
        res = run.get("result") or {}
        ana = run.get("analysis") or {}
        qps = run.get("qps_label", "")
        head = f"{title} {qps}".rstrip()
        if run.get("error"):
            lines.append(f"{head}: FAILED: {run['error']}")
            if run.get("stderr_tail"):
                lines += ["    " + ln for ln in run["stderr_tail"].splitlines()[-4:]]
            lines.append("")
            continue
        frac = _fraction_series(run)
        mean = ana.get("mean_fraction")
        mean_txt = f"mean {mean:.0%} of capacity" if isinstance(mean, int | float) else ""
        lines.append(f"{head:<34}{mean_txt:>{width - 28}}")
        if frac:
            # One time axis for every run: the longest of the runs and the planned duration.
            t_end = max(doc["duration_s"], len(frac) * doc["timeline_ms"] / 1000.0)
            frac = frac + [0.0] * max(0, round(t_end * 1000 / doc["timeline_ms"]) - len(frac))
            bars = an.bars(frac, width, rows=2, unicode=unicode)
            lines.append(f"100% |{bars[0]}")
            lines.append(f"     |{bars[1]}")
            fill = "·" if unicode else "."
            bin_s = doc["timeline_ms"] / 1000.0
            mk = _marks(run, steps, doc["duration_s"], bin_s)
            lines.append("     +" + an.marker_line(mk, t_end, width, fill))
            if any(m == "E" for _t, m in mk):
                lines.append("      E: the write ended here (see QP errors)")
            lines.append("      " + an.axis_line(t_end, width))
        elif res:
            lines.append("     (no timeline in the bench's JSON)")
        lines.append("")
    keys = list(runs)
    col = 26
    lab_w = 34

    def row(label: str, cells: list[str]) -> str:
        # (a cell longer than its column keeps two spaces before the next: no run-together)
        text = "".join(f"{c:<{col}}" if len(c) < col - 1 else f"{c}  " for c in cells)
        return f"{label:<{lab_w}}" + text.rstrip()

    lines.append(row("", [TRANSPORT_TITLES.get(k, k) for k in keys]))
    cells_gp, cells_b, cells_qp, cells_cpu, cells_bound = [], [], [], [], []
    for k in keys:
        res = runs[k].get("result") or {}
        if not res:
            cells_gp.append("no result")
            cells_b.append("-")
            cells_qp.append("-")
            cells_cpu.append("-")
            cells_bound.append("-")
            continue
        gf = res.get("goodput_fraction")
        gp = res.get("goodput_bps")
        cells_gp.append(
            f"{an.fmt_bps(gp)} = {gf:.2f}"
            if isinstance(gp, int | float) and isinstance(gf, int | float)
            else "?"
        )
        v = res.get("verified")
        cells_b.append(f"{_bytes(res.get('bytes') or 0)}, {'verified' if v else 'NOT VERIFIED'}")
        cells_qp.append(str(res.get("qp_errors")))
        cells_cpu.append(_cpu_cell(runs[k]))
        cells_bound.append(_cpu_bound_cell(res))
    lines.append(row("goodput (of capacity)", cells_gp))
    lines.append(row("bytes written", cells_b))
    lines.append(row("QP errors", cells_qp))
    lines.append(row("CPU, 1 core = 100% (sw: switches)", cells_cpu))
    lines.append(row(CPU_BOUND_LABEL, cells_bound))
    thr = [
        f"{(runs[k].get('analysis') or {}).get('threshold_fraction', 0):.0%}"
        if runs[k].get("analysis")
        else "-"
        for k in keys
    ]
    lines.append(row("recovered = back to", [f">= {t} of capacity" for t in thr]))
    # One row per event: the fault and its repair.
    events: list[tuple[str, list[str]]] = []
    for n, s in enumerate(steps):
        st = Step.from_dict(s)
        for kind, label, mark in (
            ("fault", st.label, st.mark),
            ("repair", st.heal_label, st.mark.lower()),
        ):
            cells = []
            t_txt = ""
            for k in keys:
                d = _find_dip(runs[k], n, kind)
                if d is None and kind == "repair" and _find_dip(runs[k], n, "fault"):
                    cells.append("within the dip above")
                elif d is None and kind == "fault" and runs[k].get("timeline"):
                    cells.append("write had ended")  # the schedule stops with the write
                else:
                    cells.append(_dip_cell(d) if d else "-")
                if d and not t_txt:
                    t_txt = f"{d['t_s']:.1f}s"
            if kind == "repair" and all(c in ("-", "within the dip above") for c in cells):
                continue
            events.append((f"{mark} {label[:21]:<21} {t_txt:>6}", cells))
    if events:
        lines.append("dips (lowest goodput/capacity, time below):")
        lines += [row(label, cells) for label, cells in events]
    lines.append("")
    out = doc.get("outputs") or {}
    if out:
        lines.append("  ".join(f"{k}: {v}" for k, v in out.items()))
    return "\n".join(lines)


def _find_dip(run: dict[str, Any], n: int, kind: str) -> dict[str, Any] | None:
    """The n-th fault's dip (or its repair's) in a run's analysis."""
    ana = run.get("analysis") or {}
    dips = ana.get("dips") or []
    faults = [d for d in dips if d["kind"] == "fault"]
    if n >= len(faults):
        return None
    if kind == "fault":
        return faults[n]
    i = dips.index(faults[n])
    if i + 1 < len(dips) and dips[i + 1]["kind"] == "repair":
        return dips[i + 1]
    return None


# --- the link rate ---------------------------------------------------------------------------


def choose_rate(
    params: LabParams, auto: bool, pair: tuple[int, int], recalibrate: bool, say
) -> tuple[LabParams, dict[str, Any]]:
    """The demo's link rate: calibrated (cached per boot) for ``auto``, else as given; says
    which on one line and returns the lab's parameters at that rate and the why for the
    JSON."""
    if not auto:
        line = (
            f"links at {params.rate_mbit:g} Mb/s as given (--rate); the summary says "
            "whether the CPU limited the run"
        )
        say(line)
        return params, {"mode": "forced", "rate_mbit": params.rate_mbit, "line": line}
    cal = calibrate.get(params, [pair], recalibrate=recalibrate, echo=say)
    say(cal.line())
    say(f"  {cal.source()}")
    params = params.with_overrides(rate_mbit=cal.rate_mbit)
    return params, {
        "mode": "calibrated",
        "rate_mbit": cal.rate_mbit,
        "line": cal.line(),
        "calibration": cal.to_dict(),
    }


# --- main -----------------------------------------------------------------------------------


#: messages completing per timeline bin at full rate: a bin counts completed messages, so
#: with fewer one message more or less moves it by a visible step (at 4 Mb/s links and 256 KiB
#: messages a 250 ms bin held 3.8, and one fewer read as a dip to 79%: 2026-11-29)
MSGS_PER_BIN = 16


def message_size(capacity_bps: float, bin_ms: float, largest: int = 1 << 18) -> int:
    """The demo's message size: the largest power of two (16 KiB .. ``largest``) of which
    :data:`MSGS_PER_BIN` complete in one timeline bin at ``capacity_bps``."""
    fit = capacity_bps * bin_ms / 1000 / 8 / MSGS_PER_BIN
    size = 1 << 14
    while size * 2 <= min(fit, largest):
        size *= 2
    return size


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab.demo",
        description="make demo: an MRC write across the default 8-plane lab while a T1 "
        "reboots and a T0-T1 link goes down and up; the RoCEv2 baseline under the same "
        "schedule; one screen, results/demo.json and results/demo-timeline.png.",
    )
    ap.add_argument(
        "--lab", dest="name", metavar="NAME", default="mrcdemo", help="lab name [mrcdemo]"
    )
    deprecated(ap, "--name", "--lab", dest="name")
    ap.add_argument(
        "--duration", type=time_arg, default=30.0, metavar="SECONDS", help="per write [30]"
    )
    ap.add_argument(
        "--timeline",
        dest="timeline_ms",
        type=time_in(1e-3, whole=True),
        default=250,
        metavar="BIN",
        help="goodput bin: 250ms [250ms]",
    )
    deprecated(
        ap, "--timeline-ms", "--timeline", dest="timeline_ms", type=time_in(1e-3, whole=True)
    )
    ap.add_argument(
        "--size",
        type=size_arg,
        default=None,
        metavar="BYTES",
        help="bytes per message, or 256K, 1M... [the largest power of two up to 256K of which "
        f"{MSGS_PER_BIN} complete in each timeline bin at the lab's rate]",
    )
    ap.add_argument("--src", default="h0")
    ap.add_argument("--dst", default=None, help="default: the last host (under another T0)")
    ap.add_argument("--no-baseline", action="store_true", help="MRC only, no RoCEv2 run")
    renamed(ap, "--budget", "--budget-s", dest="budget_s", type=time_arg, metavar="TIME",
            default=300.0,
            help="skip the RoCEv2 run if it would end the demo later than this (5min, 300s) [300s]")  # fmt: skip
    ap.add_argument("--switch", choices=("python", "kernel"), default="python")
    ap.add_argument("--planes", type=int, default=None, help="lab planes [8]")
    ap.add_argument(
        "--rate",
        dest="rate_mbit",
        type=calibrate.rate_flag,
        default=calibrate.AUTO,
        metavar="RATE",
        help="link rate with its unit (50Mbit); auto: the highest rate at which this "
        "machine's CPU keeps up, so the fabric limits (measured once per boot: mrc-lab "
        "calibrate; docs/lab.md) [auto]",
    )
    deprecated(ap, "--rate-mbit", "--rate", dest="rate_mbit", type=calibrate.rate_arg)
    ap.add_argument(
        "--recalibrate",
        action="store_true",
        help="with --rate auto: measure this machine again, even if this boot has a result",
    )
    ap.add_argument("--out", default=str(RESULTS / "demo.json"))
    ap.add_argument("--png", type=png_path, default=str(RESULTS / "demo-timeline.png"))
    ap.add_argument("--ascii", action="store_true", help="no Unicode block characters")
    return ap


def _check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every value that needs no lab, before anything is built (a usage error, status 2)."""
    if not 0 < args.duration <= 3600:
        ap.error(f"--duration {args.duration:g}: above 0 and at most 1 hour (e.g. 30s)")
    if not 0 < args.timeline_ms < args.duration * 1000:
        ap.error(f"--timeline {args.timeline_ms} ms: above 0 and below --duration (e.g. 250ms)")
    if not args.budget_s > 0:
        ap.error(f"--budget {args.budget_s:g}: a time above 0 (e.g. 5min)")
    if args.size is not None and not 1 <= args.size < 1 << 32:
        ap.error(f"--size {args.size}: 1 byte .. 4 GiB - 1 (one RDMA Write)")
    if args.planes is not None and not 1 <= args.planes <= 16:
        ap.error(f"--planes {args.planes}: 1..16")
    for flag, host in (("--src", args.src), ("--dst", args.dst)):
        if host is not None and not re.fullmatch(r"h\d+", host):
            ap.error(f"{flag} {host!r}: a host name, e.g. h0")
    if args.src == args.dst:
        ap.error(f"--src and --dst are both {args.src}: they must be different hosts")
    for flag, path in (("--out", args.out), ("--png", args.png)):
        parent = Path(path).resolve().parent
        if not parent.is_dir():
            ap.error(f"{flag} {path}: directory {parent} does not exist")


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    _check_args(ap, args)
    children.sigterm_as_interrupt()  # killed, it tears its lab down as on Ctrl-C
    t_start = time.monotonic()
    if not have_net_admin():
        print(
            "make demo needs root: it creates network namespaces, veth pairs and switch "
            "processes (CAP_NET_ADMIN and CAP_SYS_ADMIN).\nRun it as root, e.g. `sudo make "
            "demo`.",
            file=sys.stderr,
        )
        return 2
    missing = first_missing({"matplotlib": "make demo's timeline plot"})
    if missing:
        print(f"make demo: {missing}", file=sys.stderr)
        return 1
    why = bench_available()
    if why:
        print(f"make demo: {why}; run `make setup` first.", file=sys.stderr)
        return 2
    auto = args.rate_mbit == calibrate.AUTO
    try:
        params = resolve(
            None,
            name=args.name,
            switch=args.switch,
            planes=args.planes,
            rate_mbit=None if auto else args.rate_mbit,
        )
    except (LabError, ValueError) as e:  # (ParamError is a LabError)
        ap.error(str(e))
    plan_hosts = params.host_count
    dst = args.dst or f"h{plan_hosts - 1}"
    src_i, dst_i = int(args.src[1:]), int(dst[1:])
    for flag, i in (("--src", src_i), ("--dst", dst_i)):
        if i >= plan_hosts:
            ap.error(f"{flag} h{i}: the lab has hosts h0 .. h{plan_hosts - 1}")
    if src_i == dst_i:
        ap.error(f"--src and --dst are both h{src_i}: they must be different hosts")
    say = _printer()
    try:
        params, rate_choice = choose_rate(params, auto, (src_i, dst_i), args.recalibrate, say)
    except LabError as e:
        say(f"make demo: calibration failed: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    if args.size is None:
        args.size = message_size(params.planes * params.rate_mbit * 1e6, args.timeline_ms)
    steps = demo_schedule(args.duration, params.planes, params.t1)
    unicode = not args.ascii and an.can_encode("█▁·", sys.stdout.encoding)
    say(
        f"mrc demo: lab {params.name} ({params.planes} planes, {plan_hosts} hosts, "
        f"{params.switch} switches); {args.src} -> {dst}; {args.duration:g} s per write"
    )
    state: LabState | None = None
    doc: dict[str, Any] = {
        "demo": "mrc",
        "lab": params.to_dict(),
        "src": args.src,
        "dst": dst,
        "size": args.size,
        "duration_s": args.duration,
        "timeline_ms": args.timeline_ms,
        "schedule": [s.to_dict() for s in steps],
        "rate_choice": rate_choice,
        "runs": {},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    try:
        if exists(params.name):
            say(f"lab {params.name} exists from an earlier run: taking it down first")
            lifecycle.down(params.name)
        say("bringing the lab up ...")
        state = lifecycle.up(params, Progress())
        say(f"lab up in {state.up_s:.1f} s")
        transports = [("mrc", 1)] + ([] if args.no_baseline else [("rocev2", params.planes)])
        for key, qps in transports:
            elapsed = time.monotonic() - t_start
            if key != "mrc" and doc["runs"]:
                last = next(iter(doc["runs"].values()))
                if elapsed + last["wall_s"] + 10 > args.budget_s:
                    say(f"skipping {key}: it would end the demo after --budget {args.budget_s:g}s")
                    break
            title = TRANSPORT_TITLES[key]
            spec = WriteSpec(
                src=args.src,
                dst=dst,
                size=args.size,
                duration_s=args.duration,
                qps=qps,
                transport=key,
                timeline_ms=args.timeline_ms,
            )
            say(
                f"\n{title} write ({qps} QP{'s' if qps > 1 else ''}): {' '.join(spec.argv(params.name))}"
            )

            def tick(t: float, bps: float, title: str = title) -> None:
                if round(t) % 5 == 0:
                    say(f"  [{t:6.2f} s] {title}: {an.fmt_bps(bps)} arriving at {dst} (wire)")

            run = run_write(state, spec, steps, echo=say, progress=tick)
            if run.error:
                say(f"  {title} write failed: {run.error}")
                if run.stderr_tail:
                    say("  " + run.stderr_tail.replace("\n", "\n  "))
            doc["runs"][key] = analyse_run(run, params, src_i, dst_i)
            doc["runs"][key]["qps_label"] = (
                "(1 QP, sprayed)" if key == "mrc" else f"({qps} QPs, one path each)"
            )
    except KeyboardInterrupt:
        say("\ninterrupted: tearing the lab down")
        _teardown(state, params.name, say)
        return 130
    except LabError as e:
        say(f"make demo: {e}")
        _teardown(state, params.name, say)
        return 1
    else:
        _teardown(state, params.name, say)
    doc["wall_s"] = round(time.monotonic() - t_start, 1)
    outputs = _write_outputs(doc, args.out, args.png, say)
    doc["outputs"] = outputs
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(render_screen(doc, unicode=unicode))
    ok = all(
        (r.get("result") or {}).get("verified") and not r.get("error")
        for k, r in doc["runs"].items()
        if k == "mrc"
    )
    return 0 if ok and doc["runs"] else 1


def _printer():
    def say(text: str) -> None:
        print(text, flush=True)

    return say


def _teardown(state: LabState | None, name: str, say) -> None:
    try:
        if state is not None or exists(name):
            report = lifecycle.down(name)
            say(f"lab {name} torn down in {report.seconds:.1f} s")
    except (LabError, KeyboardInterrupt) as e:  # never leave without trying; say what is left
        say(f"could not tear lab {name} down ({e}); run: mrc-lab down --lab {name}")


def _write_outputs(doc: dict[str, Any], out: str, png: str, say) -> dict[str, str]:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    outputs = {"json": _rel(out)}
    series = []
    for key, run in doc["runs"].items():
        ana = run.get("analysis")
        if not ana or not run.get("timeline"):
            continue
        tl = an.Timeline.from_json(run["timeline"], doc["timeline_ms"] / 1000.0)
        series.append(
            an.PlotSeries(
                f"{TRANSPORT_TITLES.get(key, key)} {run.get('qps_label', '')}",
                tl,
                run["capacity_per_bin_bps"],
                ana["threshold_fraction"],
                [an.FaultWindow(f["label"], f["start_s"], f["end_s"]) for f in run["faults"]],
            )
        )
    if series:
        try:
            an.plot_timelines(
                series,
                [],
                png,
                f"{doc['src']} -> {doc['dst']}: goodput while a T1 reboots and a link fails",
            )
            outputs["plot"] = _rel(png)
        except Exception as e:  # a plot must not cost the results
            say(f"could not write the plot: {e}")
    return outputs


def _rel(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


if __name__ == "__main__":
    sys.exit(main())
