"""mrc-lab: a multi-plane two-tier Clos of network namespaces, its tables and its faults."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lab.fabric import capture, lifecycle, probe
from lab.fabric.faults import Faults, tc_rate_arg
from lab.fabric.netns import LabError, ns_argv
from lab.fabric.params import DEFAULT_NAME, ParamError, resolve
from lab.fabric.partition import VXLAN_PORT, Partition, parse_underlay, split_spec
from lab.fabric.progress import Progress
from lab.fabric.state import NoSuchLab, list_labs, load
from lab.fabric.status import format_stats, format_status, status, switch_stats
from lab.fabric.topology import Plan
from lab.proc import children
from lab.workloads import calibrate
from mrcnic import plugins
from mrcnic.cliflags import (
    EXIT_FAILED,
    EXIT_USAGE,
    deprecated,
    loss_arg,
    renamed,
    size_kib,
    within,
)
from mrcnic.optional import MissingExtra
from mrcnic.units import size_in, time_arg, time_in

MAX_DOWN_MS = 600_000.0  # reboot --down and flap --period, at most (10 minutes)

MAIN_EPILOG = """\
examples:
  mrc-lab plan --summary                      what the default lab holds (no root needed)
  mrc-lab plan --planes 8 --t0 512 --t1 256 --hosts-per-t0 256 --summary --json
                                              the production shape: tables stay at 512 entries
  mrc-lab up                                  default lab "mrc": 8 planes, 4 hosts, 32 switches
  mrc-lab up --switch kernel --planes 2       the Linux kernel as the switches
  mrc-lab status                              what is up and down, as the kernel sees it
  mrc-lab exec h0 -- ip -br link              a command inside host h0's namespace
  mrc-lab link down p0-t0-0 p0-t1-1           take a fabric link down (and `link up` again)
  mrc-lab loss h0 p3-t0-0 --loss 1%          1% loss both ways on h0's plane-3 link
  mrc-lab reboot p0-t1-0 --down 2000ms       a switch reboot
  mrc-lab down                                remove everything the lab made

Every fault prints the exact ip/tc/nft command it runs. Names: hosts h0.., switches
p<plane>-t0-<i> and p<plane>-t1-<j>; namespaces <lab>-<node> (e.g. mrc-h0, mrc-p0-t1-1).
See docs/lab.md for the whole manual.
"""


def _topology_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("topology (defaults in brackets; a --topology file sets any of them)")
    g.add_argument("--topology", metavar="FILE", help="YAML, TOML or JSON file with these keys")
    g.add_argument("--planes", type=int, help="network planes = NIC ports per host [8]")
    g.add_argument("--t0", type=int, help="T0 (leaf) switches per plane [2]")
    g.add_argument("--t1", type=int, help="T1 (spine) switches per plane [2]")
    g.add_argument("--hosts-per-t0", type=int, dest="hosts_per_t0", help="hosts under each T0 [2]")
    g.add_argument(
        "--rate",
        type=calibrate.rate_flag,
        dest="rate_mbit",
        metavar="RATE",
        help="link rate with its unit: 100Mbit, 1G, 2.5Mbit; auto: the rate this machine "
        "carries with the fabric, not the CPU, as the limit (mrc-lab calibrate) [100Mbit]",
    )
    deprecated(g, "--rate-mbit", "--rate", dest="rate_mbit", type=calibrate.rate_arg)
    g.add_argument(
        "--buffer",
        type=size_kib,
        dest="buffer_kb",
        metavar="SIZE",
        help="switch port buffer: 64K, 1.5M [64K]",
    )
    deprecated(g, "--buffer-kb", "--buffer", dest="buffer_kb", type=size_in(1024))
    g.add_argument(
        "--ecn",
        type=size_kib,
        dest="ecn_kb",
        metavar="SIZE",
        help="python switches: ECN marking threshold of a port's queue: 32K [half the buffer]",
    )
    deprecated(g, "--ecn-kb", "--ecn", dest="ecn_kb", type=size_in(1024))
    g.add_argument("--mtu", type=int, help="MTU of fabric links (>= 4192) [4200]")
    g.add_argument("--block", help="SRv6 locator block [fcbb:bb00::/32]")
    g.add_argument(
        "--switch", choices=("python", "kernel"), help="mrc-switch processes or the kernel [python]"
    )
    g.add_argument(
        "--delay",
        type=time_arg,
        dest="delay_s",
        metavar="TIME",
        help="python switches: one-way propagation delay of every switch-to-switch link, "
        "both directions, e.g. 2ms, 500us (plain: seconds); a path's round trip gains 4x it "
        "(topology key delay_us) [0]",
    )
    g.add_argument(
        "--pfc",
        action="store_true",
        default=None,
        help="python switches: a lossless class with priority flow control for RoCEv2's "
        "data (PAUSE upstream above XOFF, a watchdog; docs/design/pfc.md) [off]",
    )
    g.add_argument(
        "--realtime",
        action="store_true",
        default=None,
        help="python switches: the switch and NIC processes run real-time (SCHED_FIFO) and "
        "idle CPUs poll while the lab is up: a woken process waits less for a CPU, for more "
        "CPU (docs/lab.md, REAL-TIME) [off]",
    )


def _split_flags(p: argparse.ArgumentParser, up: bool = False) -> None:
    g = p.add_argument_group("split over machines (docs/multihost.md)")
    g.add_argument(
        "--machines", type=int, metavar="N",
        help="split the lab over N machines, by plane"
        + ("; without --machine: all N parts here, each machine stood in for by a namespace "
           "(<lab>-m<K>) on a bridged underlay, to try a split on one machine" if up else ""),
    )  # fmt: skip
    g.add_argument(
        "--underlay",
        type=parse_underlay,
        metavar="ADDR=IFACE,...",
        help="each machine's underlay address and interface, machine 0 first "
        "(e.g. 10.0.0.1=eth1,10.0.0.2=eth1); the interface's MTU must carry the lab's "
        "frames in VXLAN (4,270 over IPv6, 4,250 over IPv4 for MTU 4200)",
    )
    g.add_argument(
        "--vxlan-port", type=int, default=VXLAN_PORT, metavar="PORT",
        help=f"UDP port of every crossing link's VXLAN (the VNI names the link) [{VXLAN_PORT}]",
    )  # fmt: skip
    if up:
        g.add_argument("--machine", type=int, metavar="K",
                       help="build machine K's part only (with --underlay)")  # fmt: skip
        g.add_argument(
            "--stitch-netns",
            metavar="NS",
            default=None,
            help="where this machine's stitch ends and VXLAN devices go [this namespace]; "
            "for a test that stands in for machines with namespaces",
        )


def _name_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lab",
        dest="name",
        metavar="NAME",
        default=os.environ.get("MRC_LAB_NAME", DEFAULT_NAME),
        help="lab name: 'mrc' + up to 6 [a-z0-9] [$MRC_LAB_NAME or mrc]",
    )
    deprecated(p, "--name", "--lab", dest="name")


def _params(args: argparse.Namespace):
    auto = args.rate_mbit == calibrate.AUTO
    params = resolve(
        args.topology,
        name=args.name,
        planes=args.planes,
        t0=args.t0,
        t1=args.t1,
        hosts_per_t0=args.hosts_per_t0,
        rate_mbit=None if auto else args.rate_mbit,
        buffer_kb=args.buffer_kb,
        ecn_kb=args.ecn_kb,
        mtu=args.mtu,
        block=args.block,
        switch=args.switch,
        pfc=args.pfc,
        realtime=args.realtime,
        delay_us=None if args.delay_s is None else args.delay_s * 1e6,
    )
    if auto and args.cmd != "calibrate":  # measured (root) or cached; `plan` only reads the cache
        cal = calibrate.get(params, measure=args.cmd == "up", echo=_stderr)
        print(f"{cal.line()}\n  {cal.source()}", file=sys.stderr)
        params = params.with_overrides(rate_mbit=cal.rate_mbit)
    return params


def _percent(text: str) -> float:
    """The old ``loss --percent X``: a number in (0, 100]."""
    try:
        return float(text) / 100
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percent") from None


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="mrc-lab",
        description="A multi-plane two-tier Clos of Linux network namespaces for MRC: "
        "static SRv6 uSID tables, one command up, one command down, scriptable faults.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", required=True)
    raw = argparse.RawDescriptionHelpFormatter

    def cmd(name: str, help_: str, epilog: str = "") -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_, description=help_, epilog=epilog, formatter_class=raw
        )

    p = cmd(
        "plan",
        "print the plan of a lab (names, uSIDs, MACs, tables, templates); no root needed",
        "examples:\n  mrc-lab plan --summary\n  mrc-lab plan --json > plan.json\n"
        "  mrc-lab plan --planes 8 --t0 512 --t1 256 --hosts-per-t0 256 --summary --json\n"
        "\n--summary --json prints switch_count, host_count, max_table_entries,\n"
        "total_table_entries, paths_between_t0s (EV paths between hosts under different\n"
        "T0s = planes x t1) and build_s, among others.",
    )
    _name_flag(p)
    _topology_flags(p)
    p.add_argument("--summary", action="store_true", help="counts only (any size, in seconds)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _split_flags(p)

    p = cmd(
        "up",
        "create the lab: namespaces, veths, tables, switches; wait until ready",
        "examples:\n  mrc-lab up\n  mrc-lab up --lab mrc2 --planes 2 --switch kernel\n"
        "  mrc-lab up --topology examples/topologies/small.yaml\n"
        "  mrc-lab up --machines 2                   a split over 2 machines, tried here\n"
        "  mrc-lab up --machine 1 --underlay 10.0.0.1=eth1,10.0.0.2=eth1\n"
        "                                            machine 1's part (docs/multihost.md)\n",
    )
    _name_flag(p)
    _topology_flags(p)
    _split_flags(p, up=True)
    p.add_argument("--keep-on-error", action="store_true", help="leave a half-built lab to debug")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.add_argument(
        "--switch-procs", type=int, default=None, metavar="N",
        help="python switches: 0 = one mrc-switch process per switch, N >= 1 = N processes "
        "serving whole planes each (default $MRC_LAB_SWITCH_PROCS, else "
        "a third of the cores in whole planes: "
        f"{lifecycle.switch_procs_for(lifecycle.cores_here(), 8)} here for 8 planes; see docs/lab.md)",
    )  # fmt: skip

    p = cmd(
        "export",
        "write a lab split over machines in another tool's format: containerlab, one topology "
        "file per machine (no root needed; docs/multihost.md)",
        "examples:\n  mrc-lab export --format containerlab --machines 2 -o clab/\n"
        "  mrc-lab export --format containerlab --underlay 10.0.0.1=eth1,10.0.0.2=eth1 -o clab/\n"
        "\nThe nodes run the image docker/Dockerfile builds: docker build -t mrc-lab -f "
        "docker/Dockerfile .\n",
    )
    _name_flag(p)
    _topology_flags(p)
    _split_flags(p)
    p.add_argument("--format", choices=("containerlab",), default="containerlab",
                   help="the format [containerlab]")  # fmt: skip
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR",
                   help="directory for the files (must exist or its parent must)")  # fmt: skip

    p = cmd(
        "calibrate",
        "measure the link rate at which this machine's CPU keeps up with a lab of this shape "
        "(cached per boot; used by up --rate auto, make demo, make bench)",
        "examples:\n  mrc-lab calibrate\n  mrc-lab calibrate --switch kernel --json\n"
        "  mrc-lab calibrate --recalibrate\n\nSee docs/lab.md (CALIBRATION).",
    )
    _topology_flags(p)
    calibrate.add_arguments(p)

    p = cmd(
        "down",
        "remove exactly what the lab created (state file driven; safe to repeat)",
        "examples:\n  mrc-lab down\n  mrc-lab down --lab mrc2\n"
        "  mrc-lab down --machine 1                  of a split lab, machine 1's part only\n",
    )
    _name_flag(p)
    p.add_argument("--machine", type=int, metavar="K", help="of a split lab: machine K's part")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")

    p = cmd(
        "status",
        "nodes and links as the kernel sees them now (faults included)",
        "examples:\n  mrc-lab status\n  mrc-lab status -v\n  mrc-lab status --json | jq .links\n",
    )
    _name_flag(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-v", "--verbose", action="store_true", help="show healthy nodes and links too")

    p = cmd("list", "names of labs that have a state file")

    p = cmd(
        "exec",
        "run a command in a node's namespace",
        "examples:\n  mrc-lab exec h0 -- ip -br link\n  mrc-lab exec p0-t0-0 -- ip -6 route\n"
        "  mrc-lab exec mgmt -- bridge link\n",
    )
    _name_flag(p)
    p.add_argument("node", help="h<N>, p<P>-t0-<I>, p<P>-t1-<J> or mgmt")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    p = cmd(
        "stats",
        "switch counters (mrc-switch stats file, or the kernel's in kernel mode)",
        "examples:\n  mrc-lab stats p0-t1-0\n  mrc-lab stats --json\n",
    )
    _name_flag(p)
    p.add_argument("node", nargs="?", help="a switch (default: every switch)")
    p.add_argument("--json", action="store_true")

    p = cmd(
        "top",
        "a live view of the lab: switch ports (queues, rates, ECN, trims, drops, PFC), the "
        "QPs of running NIC processes (EV states per plane, cwnd, RTT, retransmissions) and "
        "the faults in effect; q or Ctrl-C quits (docs/observe.md)",
        "examples:\n  mrc-lab top\n  mrc-lab top --lab mrc2 --interval 0.25\n"
        "  mrc-lab top --once --width 100     # one frame on stdout\n",
    )
    _name_flag(p)
    p.add_argument("--interval", type=time_in(1.0), default=0.5, metavar="S",
                   help="seconds between frames (or 250ms...) [0.5]")  # fmt: skip
    renamed(p, "--faults-every", "--faults-s", dest="faults_s", type=time_in(1.0), default=1.0,
            metavar="TIME", help="between reads of the faults from the kernel [1s]")  # fmt: skip
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument("--width", type=int, default=None, help="columns [the terminal's]")

    p = cmd(
        "link",
        "take a link down or up (acts on the switch end; hosts are never touched)",
        "examples:\n  mrc-lab link down p0-t0-0 p0-t1-1\n  mrc-lab link up p0-t0-0 p0-t1-1\n"
        "  mrc-lab link down h0 p2-t0-0\n",
    )
    _name_flag(p)
    p.add_argument("action", choices=("down", "up"))
    p.add_argument("a")
    p.add_argument("b")

    p = cmd(
        "flap",
        "take a link down and up repeatedly",
        "example:\n  mrc-lab flap p0-t0-0 p0-t1-0 --period 400ms --count 5\n"
        "  (down 200 ms, up 200 ms, five times)\n",
    )
    _name_flag(p)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument(
        "--period",
        dest="period_ms",
        type=within(time_in(1e-3), 0, MAX_DOWN_MS, above=True, unit=" ms"),
        metavar="TIME",
        help="one down+up cycle: 400ms, 2s (required)",
    )
    deprecated(p, "--period-ms", "--period", dest="period_ms",
               type=within(time_in(1e-3), 0, MAX_DOWN_MS, above=True, unit=" ms"))  # fmt: skip
    p.add_argument("--count", type=within(int, 1, 100_000), default=1, help="cycles [1]")

    p = cmd(
        "loss",
        "random loss on a link, both directions (nft numgen in a netdev egress chain)",
        "examples:\n  mrc-lab loss p0-t0-0 p0-t1-0 --loss 1%\n"
        "  mrc-lab loss p0-t0-0 p0-t1-0 --loss 0.001\n  mrc-lab loss p0-t0-0 p0-t1-0 --clear\n",
    )
    _name_flag(p)
    p.add_argument("a")
    p.add_argument("b")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--loss", type=loss_arg(allow_all=True), dest="loss_fraction",
                   metavar="X%|P", help="a percent (1%%) or a probability (0.01), up to 100%%")  # fmt: skip
    deprecated(g, "--percent", "--loss", dest="loss_fraction",
               type=within(_percent, 0, 1, above=True))  # fmt: skip
    g.add_argument("--clear", action="store_true", help="remove the loss rule")

    p = cmd(
        "shape",
        "limit a link's rate, both directions (tc tbf)",
        "examples:\n  mrc-lab shape p0-t0-0 p0-t1-0 --rate 10mbit\n"
        "  mrc-lab shape p0-t0-0 p0-t1-0 --clear\n",
    )
    _name_flag(p)
    p.add_argument("a")
    p.add_argument("b")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--rate",
        type=tc_rate_arg,
        help="rate in bit/s, tc units: 10mbit, 500kbit, 1gbit (also 10M, 2.5mbit)",
    )
    g.add_argument("--clear", action="store_true", help="back to the lab's link rate")

    p = cmd(
        "delay",
        "add one-way propagation delay to a link, both directions (python switches: "
        "mrc-switch holds the frames, through its control socket)",
        "examples:\n  mrc-lab delay p0-t0-0 p0-t1-0 2ms\n"
        "  mrc-lab delay p0-t0-0 p0-t1-0 --clear   # back to the lab's own (--delay of up)\n"
        "a host link (h0 p0-t0-0) gets it on the T0's side only: the NIC sends straight into "
        "its veth\n",
    )
    _name_flag(p)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument(
        "time",
        nargs="?",
        type=time_arg,
        metavar="TIME",
        help="one-way delay: 2ms, 500us, 0 (plain: seconds), at most 1 s",
    )
    p.add_argument("--clear", action="store_true", help="back to the lab's own delay")

    p = cmd(
        "reboot",
        "stop a switch, wait, start it again with its unchanged static config",
        "example:\n  mrc-lab reboot p0-t1-0 --down 2000ms\n",
    )
    _name_flag(p)
    p.add_argument("switch")
    p.add_argument(
        "--down",
        dest="down_ms",
        type=within(time_in(1e-3), 0, MAX_DOWN_MS, above=True, unit=" ms"),
        default=1000.0,
        metavar="TIME",
        help="time it stays down: 2s, 500ms [1s]",
    )
    deprecated(p, "--down-ms", "--down", dest="down_ms",
               type=within(time_in(1e-3), 0, MAX_DOWN_MS, above=True, unit=" ms"))  # fmt: skip

    p = cmd(
        "port",
        "a NIC port failure: take host HOST's port on PLANE down or up",
        "examples:\n  mrc-lab port down h0 3\n  mrc-lab port up h0 3\n",
    )
    _name_flag(p)
    p.add_argument("action", choices=("down", "up"))
    p.add_argument("host")
    p.add_argument("plane", type=int)

    p = cmd(
        "capture",
        "record frames on lab ports (both directions, ns timestamps) into a pcapng file "
        "that Wireshark opens with contrib/wireshark/mrc.lua (docs/observe.md)",
        "examples:\n  mrc-lab capture h0 --duration 5s -w h0.pcapng          # all 8 NIC ports\n"
        "  mrc-lab capture h0:p0,p3 p0-t1-0 --duration 2s -w x.pcapng\n"
        "  mrc-lab capture p0-t0-0:u1 -c 1000 -w uplink.pcapng\n"
        "  tshark -X lua_script:contrib/wireshark/mrc.lua -r h0.pcapng\n",
    )
    _name_flag(p)
    p.add_argument("targets", nargs="+", metavar="NODE[:PORT...]",
                   help="a host or switch, optionally some of its ports (p3, d0, u1; a "
                   "host's plane number)")  # fmt: skip
    p.add_argument("--duration", "-s", type=time_arg, dest="seconds", default=10.0,
                   metavar="TIME", help="how long: 10s, 500ms [10s]")  # fmt: skip
    deprecated(p, "--seconds", "--duration", dest="seconds", type=time_arg)
    p.add_argument("-c", "--count", type=int, default=None, help="stop after N frames")
    p.add_argument("-w", "--write", required=True, metavar="FILE", help="the pcapng file")
    p.add_argument("--json", action="store_true", help="the summary as JSON")

    p = cmd(
        "probe",
        "SRv6 self-probes host -> T0 -> host and host -> T0 -> T1 -> T0 -> host on every "
        "plane: a health table per link; names a link that is down or lossy (docs/observe.md)",
        "examples:\n  mrc-lab probe --duration 10s\n  mrc-lab probe --hosts h0,h3 --interval 50ms\n"
        "  mrc-lab probe --duration 5s --json | jq '.not_up'\n",
    )
    _name_flag(p)
    p.add_argument("--hosts", default=None, help="probing hosts, e.g. h0,h3 [all]")
    p.add_argument("--duration", "-s", type=time_arg, dest="seconds", default=10.0,
                   metavar="TIME", help="how long: 10s, 500ms [10s]")  # fmt: skip
    deprecated(p, "--seconds", "--duration", dest="seconds", type=time_arg)
    p.add_argument("--interval", dest="interval_ms", type=time_in(1e-3), default=100.0,
                   metavar="TIME", help="between probe rounds [100ms]")  # fmt: skip
    deprecated(p, "--interval-ms", "--interval", dest="interval_ms", type=time_in(1e-3))
    p.add_argument("--timeout", dest="timeout_ms", type=time_in(1e-3), default=200.0,
                   metavar="TIME", help="a probe not back by then is lost [200ms]")  # fmt: skip
    deprecated(p, "--timeout-ms", "--timeout", dest="timeout_ms", type=time_in(1e-3))
    p.add_argument("--down-after", type=int, default=3,
                   help="probes lost in a row on every path over a link: down [3]")  # fmt: skip
    p.add_argument("--lossy", dest="lossy_fraction", type=loss_arg(allow_all=True), default=0.05,
                   metavar="X%|P", help="loss over the last 50 probes that makes a link lossy [5%%]")  # fmt: skip
    deprecated(p, "--lossy-percent", "--lossy", dest="lossy_fraction", type=_percent)
    p.add_argument("--deny", action="store_true",
                   help="hand the links found down or lossy to the lab's NICs: they set the "
                   "EVs crossing them DENIED until the link is up or the probe ends")  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = cmd(
        "experiment",
        "run a published MRC claim as an experiment, MRC beside RoCEv2: its own lab, "
        "repetitions, results/experiments/NAME.json and a PNG (docs/results/experiments.md)",
        "examples:\n  mrc-lab experiment list\n  mrc-lab experiment p2p --quick\n"
        "  mrc-lab experiment loss\n  mrc-lab experiment all        # = make reproduce\n"
        "  mrc-lab experiment report     # results/REPORT.md from the JSON files\n"
        "  mrc-lab experiment spray --sim   # the claim in the simulator, paper's proportions\n",
    )
    p.add_argument(
        "experiment", metavar="NAME",
        help="an experiment's name or claim number, 'all', 'list' or 'report'",
    )  # fmt: skip
    p.add_argument(
        "--quick",
        action="store_true",
        help="one repetition, short runs, small labs (what the test suite runs)",
    )
    p.add_argument(
        "--out",
        default="results/experiments",
        metavar="DIR",
        help="where NAME.json and NAME.png go [results/experiments]",
    )
    p.add_argument(
        "--rate",
        dest="rate_mbit",
        type=calibrate.rate_flag,
        default=calibrate.AUTO,
        metavar="R",
        help="link rate of every lab; auto: calibrated per lab shape [auto]",
    )
    deprecated(p, "--rate-mbit", "--rate", dest="rate_mbit", type=calibrate.rate_arg)
    p.add_argument("--reps", type=within(int, 1), default=None,
                   help="repetitions [the experiment's]")  # fmt: skip
    p.add_argument(
        "--cpu-bound-repeats",
        type=within(int, 0, 10),
        default=None,
        metavar="N",
        help="when a result has CPU-bound runs, run the experiment again at half the link "
        "rate, up to N times (the report lists every attempt) [2; 0 with --quick]",
    )
    p.add_argument(
        "--sim",
        action="store_true",
        help="the claim's simulated form: mrc-sim's whole fabric at the paper's proportions, "
        "in virtual time (no root, no lab, never CPU-bound) -> DIR/sim/NAME.json; with 'all', "
        "every claim that has one",
    )
    plugins.add_arguments(p)
    p.add_argument("--lab", default="mrcexp", help="name of the labs it brings up [mrcexp]")
    return ap


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=1)
    sys.stdout.write("\n")


def _print_partition(part: Partition, underlay: list | None, as_json: bool) -> int:
    data = part.to_dict(underlay)
    if as_json:
        _print_json(data)
        return 0
    plan = part.plan
    print(
        f"lab {plan.params.name} over {part.machines} machines: {len(part.crossings)} crossing "
        f"links, VXLAN UDP port {part.vxlan_port}, VNIs {part.vni_base}.."
        f"{part.vni_base + max(len(part.crossings) - 1, 0)}"
    )
    for m in data["machines"]:
        where = (
            f"  underlay {m['underlay']['address']} on {m['underlay']['iface']}" if underlay else ""
        )
        print(
            f"  machine {m['machine']}: planes {','.join(map(str, m['planes']))}; hosts "
            f"{', '.join(m['hosts']) or '-'}; {m['nodes']} namespaces{where}"
            + ("; the management bridge" if m["machine"] == 0 else "")
        )
    need = data["underlay_mtu_needed"]
    print(
        f"  underlay MTU >= {need['ipv6']} (IPv6) / {need['ipv4']} (IPv4) for {plan.params.mtu}-byte frames"
    )
    print("\ncrossing links (VNI  a end  ->  b end  machines):")
    for c in data["crossings"]:
        print(
            f"  {c['vni']:<6} {c['a']:>5} {c['a_ifname']:<10} -> {c['b']:<9} {c['b_ifname']:<9} "
            f"m{c['a_machine']} -> m{c['b_machine']}"
        )
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    plan = Plan(_params(args))
    if args.machines is not None or args.underlay is not None:
        n = args.machines if args.machines is not None else len(args.underlay)
        if args.underlay is not None and len(args.underlay) != n:
            raise ParamError(f"--machines {n} but --underlay names {len(args.underlay)} machines")
        return _print_partition(Partition(plan, n, args.vxlan_port), args.underlay, args.json)
    if args.summary:
        summary = plan.summary()
        summary["build_s"] = time.perf_counter() - t0  # whole build, parameters included
        if args.json:
            _print_json(summary)
        else:
            width = max(len(k) for k in summary)
            for k, v in summary.items():
                print(f"{k:<{width}}  {v}")
        return 0
    if plan.host_count * plan.params.planes > 100_000:
        raise ParamError(
            f"the full plan of {plan.host_count} hosts is too large to print; use --summary"
        )
    data = plan.to_dict(templates=plan.host_count <= 64)
    if args.json:
        _print_json(data)
        return 0
    s = data["summary"]
    print(
        f"lab {s['name']}: {s['planes']} planes x ({s['t0_per_plane']} T0 + {s['t1_per_plane']} T1), "
        f"{s['host_count']} hosts, {s['switch_count']} switches, block {s['block']}"
    )
    print("\nhosts (port per plane -> T0 downlink; source address on that plane):")
    for h in data["hosts"]:
        print(f"  {h['name']:<6} ns {h['namespace']:<14} mgmt {h['mgmt_address']}")
        for port in h["ports"]:
            print(
                f"    {port['ifname']:<12} {port['mac']}  -> {port['peer']:<10} "
                f"{port['peer_ifname']:<10} {port['peer_mac']}  src {port['address']}"
            )
    print("\nswitches (own SID; table uSID -> port -> peer):")
    for sw in data["switches"]:
        print(f"  {sw['name']:<10} ns {sw['namespace']:<16} SID {sw['sid']}")
        for r in sw["table"]:
            print(f"    {r['prefix']:<22} -> {r['ifname']:<10} {r['peer']}")
    print("\n(--json prints all of it, with per-destination templates)")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    params = _params(args)
    plan = Plan(params)
    progress = Progress(quiet=args.quiet)
    if not args.quiet:
        print(
            f"mrc-lab up {params.name}: {params.planes} planes, {plan.host_count} hosts, "
            f"{plan.switch_count} switches ({params.switch} mode), {plan.namespace_count} "
            "namespaces",
            file=sys.stderr,
        )
    split = split_spec(
        plan, args.machines, args.machine, args.underlay, args.vxlan_port, args.stitch_netns
    )
    state = lifecycle.up(
        params, progress, keep_on_error=args.keep_on_error, switch_procs=args.switch_procs,
        split=split,
    )  # fmt: skip
    # here: it loads the NIC (python -X importtime, 2026-11-29: lab.cli 0.37 s without it at
    # the top, 0.70 s with it)
    from lab.fabric.host import lab_base_rtt_s

    st = status(state, with_faults=False)
    c = st["counts"]
    print(
        f"lab {params.name} is up in {state.up_s:.2f} s: {c['nodes_up']}/{c['nodes']} nodes, "
        f"{c['links_up']}/{c['links']} links up; {params.switch} switches; "
        f"links {params.rate_mbit:g} Mbit/s, MTU {params.mtu}, buffer {params.buffer_kb} KiB"
        + (
            f", ECN above {params.ecn_threshold_bytes // 1024} KiB"
            if params.switch == "python"
            else ""
        )
        + ("; PFC on (lossless RoCEv2 data)" if params.pfc else "")
        + (
            f"; {params.delay_us / 1000:g} ms one-way on switch-to-switch links "
            f"(base RTT {lab_base_rtt_s(params) * 1000:.1f} ms)"
            if params.delay_us
            else ""
        )
    )
    print(f"  hosts      {', '.join(h.name for h in plan.hosts())}  (namespaces {params.name}-hN)")
    print(f"  mgmt       {plan.mgmt_prefix} on bridge {plan.ifname('br')} in {params.name}-mgmt")
    if state.partition is not None:
        part = state.partition
        here = ", ".join(str(k) for k in state.here)
        print(
            f"  split      {part.machines} machines by plane; part {here} here"
            + (
                " (machines stood in for by namespaces " + f"{params.name}-m0..)"
                if split and split["simulated"]
                else ""
            )
            + f"; {len(part.crossings)} crossing links over VXLAN port {part.vxlan_port}"
        )
    print(f"  state file {state.path}")
    print(f"  next       mrc-lab status --lab {params.name}; mrc-lab down --lab {params.name}")
    return 0 if c["nodes_up"] == c["nodes"] else 1


def cmd_export(args: argparse.Namespace) -> int:
    from lab.fabric import clab  # here: PyYAML and the switch config load only for export

    plan = Plan(_params(args))
    if plan.params.switch != "python":
        raise ParamError(
            "export writes nodes that run mrc-switch: --switch kernel has no containerlab form "
            "yet (the kernel's seg6local tables would be each node's own exec lines)"
        )
    if plan.params.realtime:
        raise ParamError(
            "export has no --realtime: a container is seldom allowed real-time scheduling or "
            "the host's PM QoS device; drop --realtime"
        )
    n = args.machines if args.machines is not None else len(args.underlay or []) or None
    if n is None:
        raise ParamError("export needs --machines N (or --underlay naming each machine)")
    if args.underlay is not None and len(args.underlay) != n:
        raise ParamError(f"--machines {n} but --underlay names {len(args.underlay)} machines")
    if not args.out.parent.is_dir():
        raise ParamError(f"-o {args.out}: its parent directory {args.out.parent} does not exist")
    if args.out.exists() and not args.out.is_dir():
        raise ParamError(f"-o {args.out} exists and is not a directory")
    args.out.mkdir(exist_ok=True)
    part = Partition(plan, n, args.vxlan_port)
    files = clab.export(part, args.out, args.underlay)
    for f in files:
        print(f)
    print(
        f"wrote {len(files)} containerlab topologies, {plan.switch_count} switch configs and "
        f"the plan for mrc-bench under {args.out}; on machine K: containerlab deploy -t "
        f"{clab.file_name(plan.params.name, 0).replace('m0', 'mK')}"
        + ("" if args.underlay else "\n(remote: addresses are placeholders: pass --underlay)")
    )
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    report = lifecycle.down(args.name, Progress(quiet=args.quiet), machine=args.machine)
    if not report.found:
        print(f"lab {args.name}: no state file, nothing to remove")
        return 0
    stopped = sum(1 for v in report.processes.values() if v in ("stopped", "killed"))
    print(
        f"lab {args.name} is down in {report.seconds:.2f} s: {len(report.namespaces_deleted)} "
        f"namespaces deleted, {stopped} switch processes stopped"
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    st = status(load(args.name))
    if args.json:
        _print_json(st)
    else:
        print(format_status(st, verbose=args.verbose))
    return 0


def cmd_list(_args: argparse.Namespace) -> int:
    for name in list_labs():
        print(name)
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    command = list(args.command)
    # `exec h0 --name X -- cmd`: flags between the node and `--` are mrc-lab's, not the
    # command's (argparse's REMAINDER would hand them to the command)
    if command and command[0] == "--":
        command = command[1:]
    elif command and command[0].startswith("-") and "--" in command:
        cut = command.index("--")
        extra = argparse.ArgumentParser(prog="mrc-lab exec", add_help=False)
        extra.add_argument("--lab", dest="name", default=args.name)
        deprecated(extra, "--name", "--lab", dest="name")
        try:
            mine, rest = extra.parse_known_args(command[:cut])
        except SystemExit:
            raise ParamError(
                "--lab needs a lab name (mrc-lab exec NODE --lab LAB -- CMD)"
            ) from None
        if rest:
            raise ParamError(
                f"unknown option {rest[0]} before --; the command goes after it: "
                "mrc-lab exec NODE [--lab LAB] -- CMD [ARGS...]"
            )
        args.name, command = mine.name, command[cut + 1 :]
    state = load(args.name)
    if not command:
        raise ParamError("give a command after --, e.g. mrc-lab exec h0 -- ip -br link")
    argv = ns_argv(state.namespace(args.node), command)
    sys.stdout.flush()
    os.execvp(argv[0], argv)
    return 127  # not reached


def cmd_stats(args: argparse.Namespace) -> int:
    state = load(args.name)
    nodes = [args.node] if args.node else [n.name for n in state.switches()]
    data = [switch_stats(state, n) for n in nodes]
    if args.json:
        _print_json(data if not args.node else data[0])
    else:
        print("\n\n".join(format_stats(d) for d in data))
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from lab.views import top  # 0.09 s to import (python -X importtime, 2026-11-27)

    if args.interval <= 0 or args.faults_s <= 0:
        raise ParamError("--interval and --faults-every must be > 0")
    state = load(args.name)
    return top.run(state, args.interval, args.faults_s, once=args.once, width=args.width)


def cmd_link(args: argparse.Namespace) -> int:
    f = Faults(load(args.name))
    (f.link_down if args.action == "down" else f.link_up)(args.a, args.b)
    return 0


def cmd_flap(args: argparse.Namespace) -> int:
    if args.period_ms is None:
        raise ParamError("flap needs --period TIME (one down+up cycle, e.g. 400ms)")
    Faults(load(args.name)).flap(args.a, args.b, args.period_ms, args.count)
    return 0


def cmd_loss(args: argparse.Namespace) -> int:
    f = Faults(load(args.name))
    if args.clear:
        f.loss_clear(args.a, args.b)
    else:
        f.loss(args.a, args.b, args.loss_fraction * 100)
    return 0


def cmd_shape(args: argparse.Namespace) -> int:
    f = Faults(load(args.name))
    if args.clear:
        f.shape_clear(args.a, args.b)
    else:
        f.shape(args.a, args.b, args.rate)
    return 0


def cmd_delay(args: argparse.Namespace) -> int:
    if (args.time is None) == (not args.clear):
        raise ParamError("give a TIME (e.g. 2ms) or --clear, not both and not neither")
    Faults(load(args.name)).delay(args.a, args.b, None if args.clear else args.time)
    return 0


def cmd_reboot(args: argparse.Namespace) -> int:
    Faults(load(args.name)).reboot(args.switch, args.down_ms)
    return 0


def cmd_port(args: argparse.Namespace) -> int:
    Faults(load(args.name)).port(args.host, args.plane, args.action == "up")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    return calibrate.run_cli(_params(args), args)


def cmd_capture(args: argparse.Namespace) -> int:
    if args.seconds <= 0 or (args.count is not None and args.count < 1):
        raise ParamError("--duration must be > 0 and --count >= 1")
    w = Path(args.write)
    out_dir = w.resolve().parent
    if not args.write.strip() or w.is_dir():
        raise ParamError(f"-w {args.write!r}: a file name to write the capture to (FILE.pcapng)")
    if not out_dir.is_dir():
        raise ParamError(f"-w {args.write}: directory {out_dir} does not exist")
    kernel_fs = out_dir.parts[1:2] in (("proc",), ("sys",), ("dev",))
    if (w.exists() and not w.is_file()) or kernel_fs or not os.access(out_dir, os.W_OK):
        raise ParamError(f"-w {args.write}: cannot be written (not a regular file, or no write "
                         "permission there)")  # fmt: skip
    state = load(args.name)
    targets = capture.resolve(state, args.targets)
    say = None if args.json else _stderr
    if say:
        say(f"capturing {', '.join(t.label for t in targets)} for {args.seconds:g} s"
            + (f" or {args.count} frames" if args.count else "") + f" -> {args.write}")  # fmt: skip
    res = capture.capture(state, targets, Path(args.write), args.seconds, args.count, say)
    if args.json:
        _print_json(res)
    else:
        for i in res["interfaces"]:
            print(f"  {i['name']:<14} {i['frames']:>8} frames {i['bytes']:>12} bytes"
                  + (f"  {i['kernel_drops']} dropped by the kernel" if i["kernel_drops"] else ""))  # fmt: skip
        print(f"{res['frames']} frames in {res['seconds']:.1f} s -> {res['file']}; open it with "
              "wireshark -X lua_script:contrib/wireshark/mrc.lua " + res["file"])  # fmt: skip
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    if args.seconds <= 0 or args.interval_ms <= 0 or args.timeout_ms <= 0 or args.down_after < 1:
        raise ParamError("--duration, --interval and --timeout must be > 0, --down-after >= 1")
    if not 0 < args.lossy_fraction <= 1:
        raise ParamError("--lossy must be above 0 and at most 100%")
    state = load(args.name)
    hosts = None
    if args.hosts:
        hosts = [state.plan.parse_node(h.strip()).index for h in args.hosts.split(",") if h.strip()]

    def event(e: dict) -> None:
        if not args.json:
            loss = f" (loss {e['loss']:.0%})" if e.get("loss") is not None else ""
            print(f"  {e['t_s']:7.2f} s  {e['link']:<22} {e['from']} -> {e['to']}{loss}",
                  flush=True)  # fmt: skip

    if not args.json:
        print(f"probing lab {state.name} for {args.seconds:g} s every {args.interval_ms:g} ms "
              f"(a link down is named within {args.down_after * args.interval_ms + args.timeout_ms:g} ms)",
              flush=True)  # fmt: skip
    res = probe.run(
        state, hosts=hosts, interval_s=args.interval_ms / 1000, seconds=args.seconds,
        timeout_s=args.timeout_ms / 1000, down_after=args.down_after,
        lossy_fraction=args.lossy_fraction, on_event=event, deny=args.deny,
    )  # fmt: skip
    if args.json:
        _print_json(res)
        return 0
    print(f"{res['probes_sent']} probes over {res['paths']} paths, {res['probes_received']} back")
    bad = res["not_up"]
    if not bad:
        print(f"all {len(res['links'])} links up")
    for r in bad:
        print(f"  {r['link']:<22} {r['state'].upper():<6} loss {r['loss']:.1%} of {r['probes']} "
              f"probes, since {r['since_s']:.2f} s")  # fmt: skip
    return 0


def cmd_experiment(args: argparse.Namespace) -> int:
    # here, not at the top: the experiments cost 0.28 s to import (python -X importtime,
    # 2026-11-27), and every mrc-lab command would pay it
    from lab.workloads.experiments import registry, report
    from lab.workloads.experiments.base import Context

    try:  # the runs' QPs (their mrc-bench processes read it from the environment)
        plugins.choice_from_args(args).export()
    except plugins.PluginError as e:
        print(f"mrc-lab: {e}", file=sys.stderr)
        return 2
    which = args.experiment
    if which == "list":
        for s in registry.specs():
            sim = (f"; --sim ~{s.sim.minutes:g} min (quick ~{s.sim.quick_minutes:g})"
                   if s.sim else "; no --sim form yet")  # fmt: skip
            print(f"{s.number:>2} {s.name:<11} ~{s.minutes:g} min (quick ~{s.quick_minutes:g})"
                  f"{sim}: {s.claim}")  # fmt: skip
        return 0
    out = Path(args.out)
    if not out.is_dir() and not out.resolve().parent.is_dir():
        raise ParamError(f"--out {args.out}: its parent directory {out.resolve().parent} does "
                         "not exist (the results directory is made, not its parents)")  # fmt: skip
    if out.exists() and not out.is_dir():
        raise ParamError(f"--out {args.out} exists and is not a directory")
    if which == "report":
        print(f"wrote {report.write(out)}")
        return 0
    ctx = Context(
        quick=args.quick, out_dir=out, lab_name=args.lab,
        rate_mbit=None if args.rate_mbit == calibrate.AUTO else float(args.rate_mbit),
        reps=args.reps, sim=args.sim, cpu_bound_repeats=args.cpu_bound_repeats,
    )  # fmt: skip
    if args.sim:
        ctx.out_dir = registry.sim_out(out)
    try:
        todo = registry.specs() if which == "all" else [registry.find(which)]
    except KeyError as e:
        raise ParamError(str(e.args[0])) from None
    if args.sim:
        missing = [s.name for s in todo if s.sim is None]
        if missing and which != "all":
            raise ParamError(f"{missing[0]} has no simulated form yet (mrc-lab experiment list)")
        if missing:
            print(f"no simulated form yet, skipped: {', '.join(missing)}")
        todo = [s for s in todo if s.sim is not None]
    results = [registry.run(s, ctx) for s in todo]
    if which == "all":
        print(f"wrote {report.write(out)}")
    for r in results:
        print(f"{r.number:>2} {r.name:<11} {r.verdict:<15} {r.why}")
    return 1 if any((r.extra or {}).get("error") for r in results) else 0


COMMANDS = {
    "plan": cmd_plan,
    "calibrate": cmd_calibrate,
    "export": cmd_export,
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "list": cmd_list,
    "exec": cmd_exec,
    "stats": cmd_stats,
    "top": cmd_top,
    "link": cmd_link,
    "flap": cmd_flap,
    "loss": cmd_loss,
    "shape": cmd_shape,
    "delay": cmd_delay,
    "reboot": cmd_reboot,
    "port": cmd_port,
    "experiment": cmd_experiment,
    "capture": cmd_capture,
    "probe": cmd_probe,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    children.sigterm_as_interrupt()  # a killed experiment or up stops its runs, takes labs down
    try:
        return COMMANDS[args.cmd](args)
    except (NoSuchLab, ParamError) as e:  # the command line cannot be used (docs/cli.md)
        print(f"mrc-lab {args.cmd}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LabError, MissingExtra) as e:  # MissingExtra: an optional package (--plot: plot)
        print(f"mrc-lab {args.cmd}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # e.g. `mrc-lab plan | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"mrc-lab {args.cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
