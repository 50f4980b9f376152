"""mrc-bench: perftest-style benchmarks of the MRC NIC between hosts of a running lab.

    mrc-bench write --lab mrc --src h0 --dst h3 --size 64K --duration 10 [--json]
    mrc-bench lat   --lab mrc --src h0 --dst h3
    mrc-bench allreduce --lab mrc --hosts h0,h1,h2,h3 --size 4M
    mrc-bench alltoall --lab mrc --hosts h0,h1,h2,h3 --sizes 1M,4M,16M
    mrc-bench forge --lab mrc --writer h0 --target h1 --forger h2
    mrc-bench incast --lab mrc --senders h3,h4 --dst h0 --qps 8 --victim auto
    mrc-bench pause-storm --lab mrc --stuck h3 --duration 5s

Without ``--server``/``--client`` (and for ``allreduce``/``alltoall`` without ``--rank``), mrc-bench runs
every side itself: it starts ``ip netns exec <host namespace> mrc-bench ...`` for each side
(each its own process with its own NIC on its host's ports), relays the progress lines and
prints the result.  The sides talk over the lab's management network (lab.proc.control).
Manual page: docs/bench.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.fabric import state
from lab.fabric.netns import LabError
from lab.proc import control
from lab.views import benchplot
from lab.workloads.bench import common as bc
from lab.workloads.bench import write as bench_write
from lab.workloads.bench.orchestrate import PORT_SLOT, Side, listen_port, orchestrate
from lab.workloads.bench.screen import format_allreduce, format_alltoall, format_pair
from lab.workloads.bench.write import WriteParams
from mrcnic import plugins
from mrcnic.cliflags import EXIT_FAILED, EXIT_OK, EXIT_USAGE, deprecated, png_path, renamed, within
from mrcnic.errors import MrcError
from mrcnic.io import aio
from mrcnic.optional import MissingExtra
from mrcnic.transport.qp_types import MAX_OUTSTANDING_WRITES
from mrcnic.units import size_arg, time_arg, time_in
from mrcnic.verbs import _core_class


class UsageError(MrcError):
    pass


# --- argument parsing ----------------------------------------------------------------------------

_HOST = re.compile(r"h\d+|\d+|[0-9A-Fa-f:.]+")  # a host: h3, 3, or its management address


def _add_lab_json_transport(sp: argparse.ArgumentParser) -> None:
    """--lab, --json, --transport: every subcommand's."""
    sp.add_argument(
        "--lab",
        default=os.environ.get("MRC_LAB_NAME", "mrc"),
        help="lab name (default $MRC_LAB_NAME or mrc)",
    )
    sp.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    sp.add_argument(
        "--transport",
        default="mrc",
        choices=("mrc", "rocev2"),
        help="mrc (default) or the rocev2 baseline",
    )
    plugins.add_arguments(sp)


def _add_common(sp: argparse.ArgumentParser) -> None:
    _add_lab_json_transport(sp)
    sp.add_argument(
        "--port",
        type=within(int, 0, 65535),
        default=control.DEFAULT_PORT,
        help=f"TCP control port; 0: any free one, for a side that listens (default "
        f"{control.DEFAULT_PORT})",
    )
    renamed(sp, "--timeout", "--timeout-s", dest="timeout_s",
            type=within(time_arg, 0, above=True, unit=" s"), default=None, metavar="TIME",
            help="give up after this long: 60s, 500ms (default: from the run's size)")  # fmt: skip
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _add_pair(sp: argparse.ArgumentParser, size_default: str, iters_default: int | None) -> None:
    sp.add_argument(
        "--report-gbits", action="store_true",
        help="bandwidth in Gb/sec, as perftest's flag of the name (default: bytes, MB/sec or "
        "GB/sec by magnitude, as perftest prints them)",
    )  # fmt: skip
    sp.add_argument("--src", default="h0", help="writing host (default h0)")
    sp.add_argument("--dst", default=None, help="written host (default: the last host)")
    sp.add_argument(
        "--size",
        type=size_arg,
        default=size_default,
        metavar="BYTES",
        help=f"message size: bytes, or binary K/M/G (1.5M, 64KiB) (default {size_default})",
    )
    g = sp.add_mutually_exclusive_group()
    g.add_argument(
        "--iters",
        "-n",
        type=int,
        default=None,
        help=f"messages to write (default {iters_default})",
    )
    g.add_argument(
        "--duration",
        "-D",
        type=time_arg,
        default=None,
        metavar="SECONDS",
        help="write for this long (seconds, or 500ms...)",
    )
    sp.add_argument(
        "--server",
        action="store_true",
        help="run only the server side here (in the host's namespace)",
    )
    sp.add_argument(
        "--client", metavar="HOST", default=None, help="run only the client side, against HOST"
    )
    sp.add_argument(
        "--host",
        default=None,
        help="this side's host with --server/--client (default: detected from the namespace)",
    )
    sp.add_argument(
        "--bind", default=None, help="server: listen address (default: its mgmt address)"
    )
    sp.add_argument("--seed", type=int, default=None, help="data pattern seed (default random)")
    sp.add_argument(
        "--region",
        type=within(size_arg, 1),
        default="32M",
        metavar="BYTES",
        help="server region size cap; messages cycle over it (default 32M)",
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mrc-bench",
        description="perftest-style RDMA Write benchmarks of the MRC NIC in a running mrc-lab.",
    )
    sub = ap.add_subparsers(dest="test", required=True)

    w = sub.add_parser("write", help="bandwidth, like ib_write_bw")
    _add_common(w)
    _add_pair(w, "64K", 5000)
    w.add_argument("--qps", type=int, default=1, help="queue pairs (default 1)")
    w.add_argument(
        "--depth",
        "-t",
        type=within(int, 1),
        default=None,
        help="outstanding writes over all QPs (default: 2 MiB worth, 16..1024)",
    )
    w.add_argument(
        "--timeline",
        type=within(time_in(1e-3), 1, unit=" ms"),
        dest="timeline_ms",
        metavar="BIN",
        default=None,
        help="add a goodput timeline with this bin width to the JSON: 10ms, 0.1s",
    )
    deprecated(w, "--timeline-ms", "--timeline", dest="timeline_ms",
               type=within(time_in(1e-3), 1, unit=" ms"))  # fmt: skip
    renamed(w, "--progress", "--progress-s", dest="progress_s",
            type=within(time_arg, 0, above=True, unit=" s"), metavar="TIME", default=1.0,
            help="time between progress lines: 1s, 500ms (default 1s; runs over 2 s)")  # fmt: skip
    w.add_argument(
        "--ev-log",
        type=within(int, 0, 1_000_000),
        metavar="N",
        default=0,
        help="add the first N EV state changes (time, EV, plane, T1, old, new, cause, active "
        "set) and every EV's final state to the JSON (key ev_log; MRC only; default 0: off)",
    )
    w.add_argument(
        "--plot",
        metavar="FILE.png",
        type=png_path,
        default=None,
        help="also write a PNG of goodput over time with the capacity and every fault of the "
        "lab's journal; implies --timeline 100ms unless given",
    )

    lat = sub.add_parser("lat", help="latency, like ib_write_lat")
    _add_common(lat)
    _add_pair(lat, "64", 1000)
    lat.add_argument("--warmup", type=within(int, 0), default=10,
                     help="writes before measuring (default 10)")  # fmt: skip

    ar = sub.add_parser("allreduce", help="ring all-reduce (reduce-scatter + all-gather)")
    _add_common(ar)
    ar.add_argument(
        "--hosts", required=False, default=None, help="ring order, e.g. h0,h1,h2,h3 (default: all)"
    )
    ar.add_argument(
        "--size",
        type=size_arg,
        default="4M",
        metavar="BYTES",
        help="bytes per rank, a multiple of 4 x ranks (default 4M)",
    )
    _add_collective_loop(ar, "")

    aa = sub.add_parser(
        "alltoall", help="all-to-all: every rank writes one chunk to every other (nccl-tests)"
    )
    _add_common(aa)
    aa.add_argument("--hosts", default=None, help="the ranks, e.g. h0,h1,h2,h3 (default: all)")
    sz = aa.add_mutually_exclusive_group()
    sz.add_argument(
        "--size",
        type=size_arg,
        default=None,
        metavar="BYTES",
        help="bytes per rank, a multiple of 4 x ranks (default 4M)",
    )
    sz.add_argument(
        "--sizes",
        type=size_list_arg,
        default=None,
        metavar="LIST",
        help="sweep these sizes in order, as nccl-tests does, e.g. 1M,4M,16M",
    )
    _add_collective_loop(aa, " per size")

    fg = sub.add_parser(
        "forge",
        help="forged writes from a third host during a verified write (needs python switches)",
        description="A verified write from --writer into --target while --forger, holding the "
        "target QP's number, R_Key, region address and PSNs, sends forged data (stolen and "
        "guessed R_Keys, PSNs in and out of the window, trimmed headers, an unknown QP), NACKs "
        "and PORT_STATUS aimed at the writer, from its own address and spoofing the victims'. "
        "Passes when the write verifies with no QP error, 0 bytes change outside it, and every "
        "forged frame is counted under the reason that names it. Exit status 1 otherwise.",
    )
    _add_common(fg)
    fg.add_argument("--writer", default="h0", help="the legitimate writer (default h0)")
    fg.add_argument("--target", default="h1", help="the host written to (default h1)")
    fg.add_argument("--forger", default="h2", help="the third host (default h2)")
    fg.add_argument(
        "--size", type=size_arg, default="4M", metavar="BYTES", help="bytes written (default 4M)"
    )
    fg.add_argument(
        "--per-kind", type=int, default=40, help="forged frames per kind and address (default 40)"
    )
    fg.add_argument("--seed", type=int, default=1, help="data and forgery seed (default 1)")

    ic = sub.add_parser(
        "incast",
        help="several hosts write to one at once, optionally beside a victim flow",
        description="Every sender writes to --dst at once (one verified mrc-bench write each, "
        "--qps QPs). With --victim (SRC:DST, or auto: a host under the T0 of most senders "
        "writing to a host under --dst's T0 that is not --dst), the victim first runs alone for "
        "--duration, then beside the incast: victim ratio = goodput with / alone. Reports each "
        "flow's goodput, verification and QP errors, and the switches' counter deltas (PFC, "
        "drops by reason, trims, ECN marks).",
    )
    _add_scenario(ic)
    ic.add_argument("--senders", required=True, help="writing hosts, e.g. h3,h4")
    ic.add_argument("--dst", required=True, help="the host they all write to")
    ic.add_argument("--qps", type=int, default=8, help="queue pairs per flow (default 8)")
    ic.add_argument(
        "--victim",
        default=None,
        metavar="SRC:DST|auto",
        help="a victim flow beside the incast (auto: see above; default none)",
    )
    ic.add_argument(
        "--duration",
        "-D",
        type=time_arg,
        default=10.0,
        metavar="SECONDS",
        help="seconds per phase (default 10)",
    )
    ic.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="also write a PNG of the victim's goodput alone and beside the incast",
    )

    ps = sub.add_parser(
        "pause-storm",
        help="a stuck host sends PFC PAUSE frames on every port while flows cross its T0",
        description="From --stuck's namespace, a PFC PAUSE frame for the lossless priority on "
        "every port every --interval for --duration (and a resume at the end), while verified "
        "writes run (--flow SRC:DST, repeatable; default one writing to the stuck host and a "
        "victim writing to another host under its T0). Reports the flows' goodput before and "
        "during the storm, the frames sent, and the switches' counter deltas.",
    )
    _add_scenario(ps)
    ps.add_argument("--stuck", required=True, help="the host whose NIC stopped draining")
    ps.add_argument(
        "--duration", type=time_arg, dest="seconds", default=5.0, metavar="TIME",
        help="how long it sends PAUSE: 5s, 500ms (default 5s)",
    )  # fmt: skip
    deprecated(ps, "--seconds", "--duration", dest="seconds", type=time_arg)
    ps.add_argument(
        "--interval",
        dest="interval_ms",
        type=time_in(1e-3),
        default=10.0,
        metavar="TIME",
        help="one PAUSE frame per port this often: 10ms (default 10ms)",
    )
    deprecated(ps, "--interval-ms", "--interval", dest="interval_ms", type=time_in(1e-3))
    ps.add_argument(
        "--flow",
        action="append",
        default=None,
        metavar="SRC:DST",
        help="a write during the storm (repeatable; default: see above)",
    )
    ps.add_argument("--qps", type=int, default=8, help="queue pairs per flow (default 8)")
    return ap


def size_list_arg(text: str) -> list[int]:
    """``--sizes``: comma-separated sizes (``1M,4M,16M``)."""
    out = [size_arg(t) for t in text.split(",") if t.strip()]
    if not out:
        raise argparse.ArgumentTypeError("--sizes needs at least one size")
    return out


def _add_scenario(sp: argparse.ArgumentParser) -> None:
    """The options of the scenarios (incast, pause-storm)."""
    _add_lab_json_transport(sp)
    sp.add_argument(
        "--size",
        type=size_arg,
        default="256K",
        metavar="BYTES",
        help="message size of every write (default 256K)",
    )
    sp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


# --- entry ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _main(args)
    except UsageError as e:
        print(f"mrc-bench: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (control.ControlError, OSError, ValueError, MissingExtra) as e:
        print(f"mrc-bench: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def _check_values(args: argparse.Namespace) -> None:
    """The values that need no lab, checked before it is looked for: a bad value is a usage
    error whether or not the lab is up (the same checks run again where the lab is known)."""
    size = getattr(args, "size", None)
    if isinstance(size, int) and not 1 <= size < 1 << 32:
        raise UsageError(f"--size {size}: 1 byte .. 4 GiB - 1 (one RDMA Write)")
    for flag, attr, low in (("--iters", "iters", 1), ("--qps", "qps", 1), ("--depth", "depth", 1)):
        v = getattr(args, attr, None)
        if isinstance(v, int) and v < low:
            raise UsageError(f"{flag} {v}: must be >= {low}")
    qps = getattr(args, "qps", None)
    if isinstance(qps, int) and qps > 256:
        raise UsageError(f"--qps {qps}: 1..256")
    for flag, attr in (("--duration", "duration"), ("--timeline", "timeline_ms"),
                       ("--duration", "seconds"), ("--interval", "interval_ms")):  # fmt: skip
        v = getattr(args, attr, None)
        if isinstance(v, int | float) and not v > 0:
            raise UsageError(f"{flag} {v:g}: must be > 0")
    src, dst = getattr(args, "src", None), getattr(args, "dst", None)
    if src is not None and src == dst:
        raise UsageError(f"--src and --dst are both {src}: they must be different hosts")
    for flag in ("hosts", "senders"):
        text = getattr(args, flag, None)
        tokens = [t.strip() for t in text.split(",") if t.strip()] if isinstance(text, str) else []
        if isinstance(text, str) and (not tokens or not all(map(_HOST.fullmatch, tokens))):
            raise UsageError(
                f"--{flag} {text!r}: hosts with commas, each h3, 3 or a management address "
                "(e.g. h0,h1,h2,h3)"
            )
    depth, qps = getattr(args, "depth", None), getattr(args, "qps", None) or 1
    if isinstance(depth, int) and depth > MAX_OUTSTANDING_WRITES * qps:
        raise UsageError(
            f"--depth {depth}: at most {MAX_OUTSTANDING_WRITES} writes outstanding per QP "
            f"({MAX_OUTSTANDING_WRITES * qps} over {qps})"
        )
    rank = getattr(args, "rank", None)
    if isinstance(rank, int) and rank < 0:
        raise UsageError(f"--rank {rank}: 0 or more (rank 0 coordinates)")
    plot = getattr(args, "plot", None)
    if plot and not Path(plot).resolve().parent.is_dir():
        raise UsageError(f"--plot {plot}: directory {Path(plot).resolve().parent} does not exist")


def _load_lab(name: str) -> Any:
    try:
        return state.load(name)
    except LabError as e:
        raise UsageError(str(e)) from None


def _check_transport(name: str) -> None:
    try:
        _core_class(name)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _main(args: argparse.Namespace) -> int:
    try:  # before the lab is looked at: a bad name is a usage error wherever it runs
        plugins.choice_from_args(args).export()  # (the NIC processes read it: LabHost)
    except plugins.PluginError as e:
        raise UsageError(str(e)) from None
    _check_values(args)
    st = _load_lab(args.lab)
    if st.phase != "up":
        raise UsageError(f"lab {args.lab} is not up (phase {st.phase!r})")
    part = st.partition
    if part is not None and set(st.here) != set(range(part.machines)) and args.test != "write" \
            and args.test != "lat":  # fmt: skip
        raise UsageError(
            f"mrc-bench {args.test} drives every host of the lab from here, and this machine "
            f"holds part {', '.join(map(str, st.here))} of {part.machines}: run it where every "
            "part is (a split tried on one machine: mrc-lab up --machines N), or use write/lat "
            "with --server/--client on each host's machine (docs/multihost.md)"
        )
    _check_transport(args.transport)
    if args.test == "allreduce":
        return _allreduce(st, args)
    if args.test == "alltoall":
        return _alltoall(st, args)
    if args.test == "forge":
        return _forge(st, args)
    if args.test == "incast":
        return _incast(st, args)
    if args.test == "pause-storm":
        return _pause_storm(st, args)
    return _pair(st, args)


def _forge(st: Any, args: argparse.Namespace) -> int:
    # here, not at the top: scapy (forge), numpy (the collectives) and the incast's counters
    # cost 0.09-0.13 s each to import (python -X importtime, 2026-11-27), and every side of
    # every test is an mrc-bench process
    from lab.workloads.bench.forge import ForgeParams, format_forge, run_forge

    if args.transport != "mrc":
        raise UsageError("forge runs against MRC QPs (--transport mrc)")
    p = ForgeParams(args.writer, args.target, args.forger, args.size, args.per_kind, args.seed)
    if args.timeout_s is not None:
        p.timeout_s = args.timeout_s
    res = asyncio.run(run_forge(st, p))
    print(json.dumps(res, indent=1) if args.json else format_forge(res), flush=True)
    return 0 if res["passed"] else EXIT_FAILED


def _scenario_common(args: argparse.Namespace) -> None:
    if not 1 <= args.qps <= 256:
        raise UsageError("--qps must be 1..256")
    if args.size < 1 or args.size >= 1 << 32:
        raise UsageError("--size must be 1 byte .. 4 GiB - 1 (one RDMA Write)")


def _incast(st: Any, args: argparse.Namespace) -> int:
    from lab.workloads.bench import incast  # import cost: see _forge

    _scenario_common(args)
    plan = st.plan
    try:
        senders = incast.parse_hosts(plan, args.senders)
        dst = bc.parse_host(plan, args.dst)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if dst in senders:
        raise UsageError(f"--dst {plan.host_name(dst)} is also a sender")
    if args.duration <= 0:
        raise UsageError("--duration must be > 0")
    victim = None
    if args.victim not in (None, "", "none"):
        if args.victim == "auto":
            victim = incast.auto_victim(plan, senders, dst)
            if victim is None:
                raise UsageError(
                    "--victim auto: no host under the senders' T0 is free to write to another "
                    f"host under {plan.host_name(dst)}'s T0 (a lab with --hosts-per-t0 3, senders "
                    "under another T0 than --dst), or give --victim SRC:DST"
                )
        else:
            try:
                victim = incast.parse_pair(plan, args.victim)
            except ValueError as e:
                raise UsageError(str(e)) from None
            if victim[1] == dst:
                raise UsageError("the victim must not write to --dst (it would join the incast)")
    p = incast.IncastParams(
        senders=senders,
        dst=dst,
        qps=args.qps,
        victim=victim,
        transport=args.transport,
        size=args.size,
        duration_s=args.duration,
        progress=not args.quiet,
    )
    res = incast.run_incast(st, p)
    if args.json:
        print(json.dumps(res, separators=(",", ":")), flush=True)
    else:
        print(incast.format_incast(res), flush=True)
    if args.plot:
        _plot(res, args.plot)
    return EXIT_OK if res["verified"] else EXIT_FAILED


def _pause_storm(st: Any, args: argparse.Namespace) -> int:
    from lab.workloads.bench import incast, storm  # import cost: see _forge

    _scenario_common(args)
    plan = st.plan
    try:
        stuck = bc.parse_host(plan, args.stuck)
        pairs = [incast.parse_pair(plan, f) for f in args.flow] if args.flow else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.seconds <= 0:
        raise UsageError("--duration must be > 0")
    if args.interval_ms <= 0:
        raise UsageError("--interval must be > 0")
    p = storm.StormParams(
        stuck=stuck,
        seconds=args.seconds,
        interval_ms=args.interval_ms,
        flows=pairs,
        transport=args.transport,
        qps=args.qps,
        size=args.size,
        progress=not args.quiet,
    )
    try:
        res = storm.run_storm(st, p)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.json:
        print(json.dumps(res, separators=(",", ":")), flush=True)
    else:
        print(storm.format_storm(res), flush=True)
    return EXIT_OK if res["verified"] else EXIT_FAILED


def _self_host(st: Any, given: str | None) -> int:
    if given is not None:
        try:
            return bc.parse_host(st.plan, given)
        except ValueError as e:
            raise UsageError(str(e)) from None
    h = bc.detect_host(st)
    if h is None:
        raise UsageError(
            f"this process is not in a host namespace of lab {st.name}: run it with "
            f"`ip netns exec {st.plan.namespace('h0')} mrc-bench ...` or give --host"
        )
    return h


def _write_params(st: Any, args: argparse.Namespace) -> Any:
    size, region = args.size, args.region
    if size < 1 or size >= 1 << 32:
        raise UsageError("--size must be 1 byte .. 4 GiB - 1 (one RDMA Write)")
    lat = args.test == "lat"
    iters = args.iters
    if iters is None and args.duration is None:
        iters = 1000 if lat else 5000
    if iters is not None and iters < 1:
        raise UsageError("--iters must be >= 1")
    if args.duration is not None and args.duration <= 0:
        raise UsageError("--duration must be > 0")
    qps = 1 if lat else args.qps
    if not 1 <= qps <= 256:
        raise UsageError("--qps must be 1..256")
    depth = 1 if lat else args.depth
    if depth is None:
        depth = min(1024, max(16, -(-(2 << 20) // size)))  # keep the pipe full at any size
    if depth < 1:
        raise UsageError("--depth must be >= 1")
    tl = None if lat else args.timeline_ms
    if tl is not None and tl <= 0:
        raise UsageError("--timeline must be > 0")
    return WriteParams(
        test="lat" if lat else "write",
        size=size,
        iters=iters,
        duration_s=args.duration,
        qps=qps,
        depth=depth,
        transport=args.transport,
        timeline_ms=tl,
        region_cap=region,
        seed=args.seed,
        progress_s=0.0 if args.quiet else (1.0 if lat else args.progress_s),
        timeout_s=args.timeout_s,
        warmup=args.warmup if lat else 0,
        ev_log=0 if lat else max(0, getattr(args, "ev_log", 0) or 0),
    )


def _plot(res: dict[str, Any], path: str) -> None:
    """``--plot``: the PNG of a result (lab/views/benchplot.py); a result it cannot plot says why
    on stderr without failing the run."""
    try:
        print(f"mrc-bench: wrote {benchplot.plot_result(res, path)}", file=sys.stderr, flush=True)
    except (ValueError, KeyError, TypeError) as e:
        print(f"mrc-bench: no plot: {e}", file=sys.stderr, flush=True)


def _pair(st: Any, args: argparse.Namespace) -> int:
    plan = st.plan
    plot = getattr(args, "plot", None)
    if plot and args.timeline_ms is None:
        args.timeline_ms = 100.0  # the plot is drawn from the timeline
    if args.server and args.client:
        raise UsageError("--server and --client exclude each other")
    if args.server:
        host = _self_host(st, args.host)
        return aio.run(bench_write.serve(st, host, args.port, args.bind))
    params = _write_params(st, args)
    if args.client is not None:
        host = _self_host(st, args.host)
        try:
            server = bc.parse_host(plan, args.client)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if server == host:
            raise UsageError("the client and the server must be different hosts")
        res = aio.run(bench_write.run_client(st, host, server, args.port, params))
        _emit(res, args.json, args.report_gbits)
        if plot:
            _plot(res, plot)
        return EXIT_OK if res["verified"] else EXIT_FAILED
    # both sides, each in its host's namespace
    try:
        src = bc.parse_host(plan, args.src)
        dst = bc.parse_host(plan, args.dst if args.dst is not None else f"h{plan.host_count - 1}")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if src == dst:
        raise UsageError("--src and --dst must be different hosts")
    # The server takes a free port (--port 0) unless one was given, and says which on stderr.
    server_argv = [args.test, "--lab", st.name, "--port", listen_port(args.port)]
    server_argv += ["--server", "--host", plan.host_name(dst)]
    client_argv = [args.test, "--lab", st.name, "--port", PORT_SLOT]
    client_argv += ["--client", plan.host_name(dst), "--host", plan.host_name(src), "--json"]
    client_argv += _forward(args)
    sides = [Side(dst, server_argv, listens=True), Side(src, client_argv, result=True)]
    return _orchestrate(
        st, sides, args.json, on_result=(lambda r: _plot(r, plot)) if plot else None,
        report_gbits=args.report_gbits,
    )  # fmt: skip


def _forward(args: argparse.Namespace) -> list[str]:
    """The client's copy of the user's options."""
    out = ["--size", str(args.size), "--transport", args.transport, "--region", str(args.region)]
    if args.iters is not None:
        out += ["--iters", str(args.iters)]
    if args.duration is not None:
        out += ["--duration", str(args.duration)]
    if args.seed is not None:
        out += ["--seed", str(args.seed)]
    if args.timeout_s is not None:
        out += ["--timeout", f"{args.timeout_s}s"]
    if args.quiet:
        out.append("--quiet")
    if args.test == "write":
        out += ["--qps", str(args.qps)]
        if args.depth is not None:
            out += ["--depth", str(args.depth)]
        out += ["--progress", f"{args.progress_s}s"]
        if args.timeline_ms is not None:
            out += ["--timeline", f"{args.timeline_ms:g}ms"]
        if args.ev_log:
            out += ["--ev-log", str(args.ev_log)]
    else:
        out += ["--warmup", str(args.warmup)]
    return out


def _add_collective_loop(p: argparse.ArgumentParser, per: str) -> None:
    """A collective's loop options (``per``: what an iteration count is counted per)."""
    p.add_argument("--iters", "-n", type=int, default=5, help=f"timed iterations{per} (default 5)")
    p.add_argument(
        "--warmup", type=int, default=1, help=f"untimed iterations{per} first (default 1)"
    )
    p.add_argument("--seed", type=int, default=1, help="data seed (default 1)")
    p.add_argument(
        "--rank", type=int, default=None, help="run only this rank here (rank 0 coordinates)"
    )


def _collective_hosts(plan: Any, args: argparse.Namespace) -> list[int]:
    """The ranks' hosts (``--hosts``, default every host) and the loop counts, checked."""
    try:
        names = (
            args.hosts.split(",")
            if args.hosts
            else [plan.host_name(h) for h in range(plan.host_count)]
        )
        hosts = [bc.parse_host(plan, h) for h in names]
    except ValueError as e:
        raise UsageError(str(e)) from None
    if len(hosts) < 2 or len(set(hosts)) != len(hosts):
        raise UsageError("--hosts needs at least 2 distinct hosts")
    if args.iters < 1 or args.warmup < 0:
        raise UsageError("--iters must be >= 1 and --warmup >= 0")
    return hosts


def _collective(st: Any, args: argparse.Namespace, p: Any, run_rank: Any, sizes: list[str]) -> int:
    """One rank here (``--rank``), or every rank in its host's namespace, rank 0 reporting.
    ``sizes``: the size options every rank is given."""
    hosts = p.hosts
    if args.rank is not None:
        if not 0 <= args.rank < len(hosts):
            raise UsageError(f"--rank must be 0..{len(hosts) - 1}")
        res = aio.run(run_rank(st, args.rank, p, args.port))
        if res is not None:
            _emit(res, args.json)
            return EXIT_OK if res["verified"] else EXIT_FAILED
        return EXIT_OK
    hosts_arg = ",".join(st.plan.host_name(h) for h in hosts)
    common = [args.test, "--lab", st.name, "--hosts", hosts_arg, *sizes]
    common += ["--iters", str(args.iters), "--warmup", str(args.warmup)]
    common += ["--seed", str(args.seed), "--transport", args.transport]
    if args.timeout_s is not None:
        common += ["--timeout", f"{args.timeout_s}s"]
    rank0 = [*common, "--port", listen_port(args.port), "--rank", "0", "--json"]
    sides = [Side(hosts[0], rank0, listens=True, result=True)]
    sides += [
        Side(h, [*common, "--port", PORT_SLOT, "--rank", str(r)])
        for r, h in enumerate(hosts)
        if r > 0
    ]
    return _orchestrate(st, sides, args.json)


def _allreduce(st: Any, args: argparse.Namespace) -> int:
    from lab.workloads.bench.allreduce import AllreduceParams, run_rank  # import cost: see _forge

    hosts = _collective_hosts(st.plan, args)
    p = AllreduceParams(
        hosts=hosts,
        size=args.size,
        iters=args.iters,
        warmup=args.warmup,
        transport=args.transport,
        seed=args.seed,
        timeout_s=args.timeout_s or 120.0,
    )
    return _collective(st, args, p, run_rank, ["--size", str(args.size)])


def _alltoall(st: Any, args: argparse.Namespace) -> int:
    from lab.workloads.bench.alltoall import (  # import cost: see _forge
        AlltoallParams,
        check_sizes,
        run_rank,
    )

    hosts = _collective_hosts(st.plan, args)
    sizes = args.sizes or [args.size if args.size is not None else 4 << 20]
    try:
        check_sizes(sizes, len(hosts))
    except ValueError as e:
        raise UsageError(str(e)) from None
    p = AlltoallParams(
        hosts=hosts,
        sizes=sizes,
        iters=args.iters,
        warmup=args.warmup,
        transport=args.transport,
        seed=args.seed,
        timeout_s=args.timeout_s or 120.0,
    )
    return _collective(st, args, p, run_rank, ["--sizes", ",".join(str(x) for x in sizes)])


def _orchestrate(
    st: Any,
    sides: list[Side],
    as_json: bool,
    on_result: Callable[[dict], None] | None = None,
    report_gbits: bool = False,
) -> int:
    """Run every side (lab.workloads.bench.orchestrate), print the result, and say how it went."""
    res, codes = orchestrate(st, sides)
    _emit(res, as_json, report_gbits)
    if on_result is not None:
        on_result(res)
    return EXIT_OK if res.get("verified") and all(c == 0 for c in codes) else EXIT_FAILED


# --- output --------------------------------------------------------------------------------------


def _emit(res: dict[str, Any], as_json: bool, report_gbits: bool = False) -> None:
    if res.get("transport", "mrc") == "mrc":  # how the MRC QPs were made (mrcnic.plugins)
        choice = plugins.choice_from_env()
        res.setdefault("path_policy", choice.path_policy or "mrc")
        res.setdefault("plane_share", choice.plane_share or "equal")
        res.setdefault("cc", choice.cc or "nscc")
    if as_json:
        print(json.dumps(res, separators=(",", ":")), flush=True)
    elif res["test"] == "allreduce":
        print(format_allreduce(res), flush=True)
    elif res["test"] == "alltoall":
        print(format_alltoall(res), flush=True)
    else:
        print(format_pair(res, report_gbits), flush=True)


if __name__ == "__main__":
    sys.exit(main())
