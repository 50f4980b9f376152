"""The soak's command line (``python -m lab.soak``): flags, the rate, the lab's life, each
transport's run into one JSON document, the verdict as the exit status."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.fabric import lifecycle
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import LabParams, ParamError, resolve
from lab.fabric.paths import RESULTS
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, exists
from lab.proc import children
from lab.proc.schedule import Printer, Step, say_to_stdout
from lab.workloads import calibrate
from lab.workloads.soak.config import (
    DEFAULT_NAME,
    SETTLE_S,
    STEP_TIMEOUT_S,
    TITLES,
    SoakConfig,
)
from lab.workloads.soak.rank import rank_main
from lab.workloads.soak.report import (
    code_info,
    machine_info,
    now_iso,
    plot,
    render_summary,
    verdict,
)
from lab.workloads.soak.runner import TransportSoak
from lab.workloads.soak.schedule import MAX_EVENTS_PER_MIN, fault_kind, make_schedule
from mrcnic.cliflags import deprecated, renamed, within
from mrcnic.optional import first_missing
from mrcnic.units import size_arg, time_arg


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab.soak",
        description="A soak with random faults: a ring all-reduce loop on its own lab for "
        "--minutes per transport while a seeded schedule flaps links, reboots T0 and T1 "
        "switches, downs NIC ports and adds loss; every step verified. Needs root. Manual: "
        "docs/design/reliability.md.",
    )
    ap.add_argument("--minutes", type=within(float, 0, 7 * 24 * 60, above=True), default=30.0,
                    help="per transport [30]")  # fmt: skip
    ap.add_argument("--seed", type=int, default=1, help="seed of the schedule and data [1]")
    ap.add_argument("--lab", dest="name", metavar="NAME", default=DEFAULT_NAME,
                    help=f"lab name [{DEFAULT_NAME}]")  # fmt: skip
    deprecated(ap, "--name", "--lab", dest="name")
    ap.add_argument(
        "--transports", default="mrc,rocev2", help="comma-separated, in order [mrc,rocev2]"
    )
    ap.add_argument(
        "--events-per-min",
        type=within(float, 0, MAX_EVENTS_PER_MIN, above=True),
        default=4.0,
        help=f"faults per minute, at most {MAX_EVENTS_PER_MIN:g} [4]",
    )
    ap.add_argument(
        "--size", type=size_arg, default="4M", metavar="BYTES", help="bytes per rank [4M]"
    )
    ap.add_argument("--hosts", default="h0,h1,h2,h3", help="the ring [h0,h1,h2,h3]")
    ap.add_argument(
        "--rate",
        dest="rate_mbit",
        type=calibrate.rate_flag,
        default=calibrate.AUTO,
        metavar="R",
        help="link rate with its unit (50Mbit); auto: calibrated for the ring's flows, cached "
        "per boot [auto]",
    )
    deprecated(ap, "--rate-mbit", "--rate", dest="rate_mbit", type=calibrate.rate_arg)
    ap.add_argument("--recalibrate", action="store_true", help="with auto: measure again")
    ap.add_argument("--switch", choices=("python", "kernel"), default="python")
    positive_time = within(time_arg, 0, above=True, unit=" s")
    renamed(ap, "--step-timeout", "--step-timeout-s", dest="step_timeout_s", type=positive_time,
            default=STEP_TIMEOUT_S, metavar="TIME",
            help=f"a step stuck this long fails [{STEP_TIMEOUT_S:g}s]")  # fmt: skip
    renamed(ap, "--settle", "--settle-s", dest="settle_s", type=within(time_arg, 0, unit=" s"),
            default=SETTLE_S, metavar="TIME",
            help=f"steps this soon after a fault's undo count as fault steps [{SETTLE_S:g}s]")  # fmt: skip
    renamed(ap, "--progress", "--progress-s", dest="progress_s", type=positive_time,
            default=None, metavar="TIME",
            help="time between progress lines [30s; 10s for runs under 5 minutes]")  # fmt: skip
    ap.add_argument("--out", default=str(RESULTS / "soak.json"), help="[results/soak.json]")
    ap.add_argument("--png", default=None, help="the plot [--out with .png]; 'none': no plot")
    ap.add_argument("--keep-lab", action="store_true", help="leave the lab up at the end")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every fault command")
    return ap


class UsageError(Exception):
    pass


def _config(args: argparse.Namespace, params: LabParams) -> tuple[SoakConfig, list[str]]:
    """The run's settings from the flags; UsageError for what cannot run."""
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or any(t not in TITLES for t in transports):
        raise UsageError(f"--transports: choose from {', '.join(TITLES)}")
    if len(set(transports)) != len(transports):
        raise UsageError("--transports lists a transport twice")
    if args.minutes <= 0:
        raise UsageError("--minutes must be > 0")
    if not 0 < args.events_per_min <= MAX_EVENTS_PER_MIN:
        raise UsageError(f"--events-per-min must be in (0, {MAX_EVENTS_PER_MIN:g}]")
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    for h in hosts:
        if not re.fullmatch(r"h\d+", h) or int(h[1:]) >= params.host_count:
            raise UsageError(
                f"--hosts: {h!r} is not a host of the lab (h0..h{params.host_count - 1})"
            )
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise UsageError("--hosts needs at least 2 distinct hosts")
    if args.size < 4 * len(hosts):
        raise UsageError(f"--size must be at least {4 * len(hosts)} bytes")
    progress = args.progress_s or (10.0 if args.minutes < 5 else 30.0)
    cfg = SoakConfig(
        hosts=hosts,
        size=args.size,
        seed=args.seed,
        minutes=args.minutes,
        events_per_min=args.events_per_min,
        step_timeout_s=args.step_timeout_s,
        settle_s=args.settle_s,
        progress_s=progress,
        verbose=args.verbose,
    )
    return cfg, transports


def calibration_name(name: str) -> str:
    """The calibration lab's name, our own (another user's calibration may run as mrccal)."""
    if len(name) < 9:
        return name + "c"
    return name[:8] + ("d" if name[8] == "c" else "c")


def choose_rate(
    params: LabParams, auto: bool, hosts: Sequence[str], recalibrate: bool, say: Printer
) -> tuple[LabParams, dict[str, Any]]:
    """Calibrated on the ring's flows at once (every NIC sends one and receives one, as in the
    all-reduce), or as given; one line saying which."""
    if not auto:
        line = f"links at {params.rate_mbit:g} Mb/s as given (--rate)"
        say(line)
        return params, {"mode": "forced", "rate_mbit": params.rate_mbit, "line": line}
    idx = [int(h[1:]) for h in hosts]
    pairs = [(idx[i], idx[(i + 1) % len(idx)]) for i in range(len(idx))]
    cal = calibrate.get(
        params, pairs, recalibrate=recalibrate, name=calibration_name(params.name), echo=say
    )
    say(cal.line())
    say(f"  {cal.source()}")
    return params.with_overrides(rate_mbit=cal.rate_mbit), {
        "mode": "calibrated",
        "rate_mbit": cal.rate_mbit,
        "pairs": pairs,
        "line": cal.line(),
        "calibration": cal.to_dict(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["rank"]:
        return rank_main(argv[1:])
    args = build_parser().parse_args(argv)
    say = say_to_stdout
    if not have_net_admin():
        say("lab.workloads.soak needs root: it builds a lab of network namespaces (CAP_NET_ADMIN).")
        return 2
    missing = first_missing({"numpy": "the soak's all-reduce", "matplotlib": "the soak's plot"})
    if missing:
        print(f"soak: {missing}", file=sys.stderr)
        return 1
    try:
        params = resolve(None, name=args.name, switch=args.switch)
        cfg, transports = _config(args, params)
    except (UsageError, ParamError) as e:
        say(f"lab.workloads.soak: {e}")
        return 2
    children.sigterm_as_interrupt()  # the same clean-up as Ctrl-C: faults undone, lab down
    try:
        return _soak(args, params, cfg, transports, say)
    except KeyboardInterrupt:
        say("interrupted: faults undone, lab torn down (unless --keep-lab)")
        return 130


def _soak(
    args: argparse.Namespace,
    params: LabParams,
    cfg: SoakConfig,
    transports: list[str],
    say: Printer,
) -> int:
    auto = args.rate_mbit == calibrate.AUTO
    if not auto:
        params = params.with_overrides(rate_mbit=float(args.rate_mbit))
    try:
        params, rate_choice = choose_rate(params, auto, cfg.hosts, args.recalibrate, say)
    except LabError as e:
        say(f"lab.workloads.soak: calibration failed: {e}")
        return 1
    steps = make_schedule(cfg.seed, cfg.duration_s, cfg.events_per_min, params, cfg.hosts)
    doc = _new_doc(args, params, cfg, steps, rate_choice)
    say(
        f"soak: lab {params.name}, ring {','.join(cfg.hosts)}, {cfg.minutes:g} min per transport "
        f"({', '.join(TITLES[t] for t in transports)}), {len(steps)} faults (seed {cfg.seed})"
    )
    return_code = _run_all(args, params, cfg, transports, steps, doc, say)
    ok, reasons = verdict(doc)
    doc["verdict"] = {"ok": ok, "reasons": reasons}
    _save(doc, args, say, final=True)
    print()
    print(render_summary(doc))
    if return_code is not None:
        return return_code
    return 0 if ok else 1


def _run_all(
    args: argparse.Namespace,
    params: LabParams,
    cfg: SoakConfig,
    transports: list[str],
    steps: Sequence[Step],
    doc: dict[str, Any],
    say: Printer,
) -> int | None:
    """Lab up, each transport's soak into ``doc``, lab down (always, unless --keep-lab).
    Returns 1 when the lab failed, else None (the verdict decides)."""
    state: LabState | None = None
    try:
        state = _lab_up(params, say)
        for t in transports:
            say(f"\n{TITLES[t]}: {cfg.minutes:g} min all-reduce loop with the fault schedule")
            soak = TransportSoak(state, cfg, t, steps, say)
            try:
                soak.execute()
            finally:
                # keep what was measured, even on Ctrl-C
                doc["transports"][t] = soak.run.summary(cfg.ring_size, len(cfg.hosts), cfg.settle_s)
                _save(doc, args, say, final=False)
    except LabError as e:
        say(f"lab.workloads.soak: {e}")
        doc["error"] = str(e)
        return 1
    finally:
        if not args.keep_lab:
            _teardown(state, params.name, say)
        elif state is not None:
            say(f"lab {params.name} left up (--keep-lab): mrc-lab down --lab {params.name}")
    return None


def _new_doc(
    args: argparse.Namespace,
    params: LabParams,
    cfg: SoakConfig,
    steps: Sequence[Step],
    rate_choice: dict[str, Any],
) -> dict[str, Any]:
    return {
        "soak": "mrc",
        "argv": sys.argv,
        "started_at": now_iso(),
        "machine": machine_info(),
        "code": code_info(),
        "lab": params.to_dict(),
        "rate_choice": rate_choice,
        "hosts": cfg.hosts,
        "size": cfg.ring_size,
        "seed": cfg.seed,
        "minutes": cfg.minutes,
        "events_per_min": cfg.events_per_min,
        "step_timeout_s": cfg.step_timeout_s,
        "settle_s": cfg.settle_s,
        "schedule": [s.to_dict() for s in steps],
        "schedule_kinds": [fault_kind(s) for s in steps],
        "transports": {},
        "verdict": {"ok": False, "reasons": ["not finished"]},
    }


def _lab_up(params: LabParams, say: Printer) -> LabState:
    if exists(params.name):
        say(f"lab {params.name} exists from an earlier run: taking it down first")
        lifecycle.down(params.name)
    say(f"bringing lab {params.name} up ...")
    state = lifecycle.up(params, Progress())
    say(f"lab up in {state.up_s:.1f} s")
    return state


def _teardown(state: LabState | None, name: str, say: Printer) -> None:
    try:
        if state is not None or exists(name):
            report = lifecycle.down(name)
            say(f"lab {name} torn down in {report.seconds:.1f} s")
    except (LabError, KeyboardInterrupt) as e:
        say(f"could not tear lab {name} down ({e}); run: mrc-lab down --lab {name}")


def _save(doc: dict[str, Any], args: argparse.Namespace, say: Printer, final: bool) -> None:
    """The JSON (after each transport too, so a long run keeps what it measured) and, at the
    end, the plot."""
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    outputs = {"json": str(out)}
    png = args.png or str(out.with_suffix(".png"))
    if final and png != "none" and doc["transports"]:
        try:
            outputs["plot"] = plot(doc, png)
        except Exception as e:  # a plot must not cost the results
            say(f"could not write the plot: {e}")
    doc["finished_at"] = now_iso()
    doc["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["outputs"] = outputs
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
