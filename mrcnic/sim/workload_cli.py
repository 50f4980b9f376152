"""``mrc-sim --workload allreduce|alltoall|incast``: the flags, the run and the summary line
(the collectives themselves are :mod:`mrcnic.sim.collectives`).

``--size`` means what ``mrc-bench``'s does for the workload: bytes per rank for the
collectives (default 4M), bytes per write for the incast (default 256K).  The incast's
flags are ``mrc-bench incast``'s: ``--senders`` (a number, or the hosts: ``h3,h4``),
``--dst``, ``--victim SRC:DST|auto``, ``--qps`` and ``--duration`` (virtual time).
"""

from __future__ import annotations

import argparse
from typing import Any

from mrcnic import workloads as wl
from mrcnic.sim.clos import ClosSpec

COLLECTIVES = ("allreduce", "alltoall", "incast")
# --size when none is given: mrc-bench's defaults for the workload
DEFAULT_SIZE = {"allreduce": 4 << 20, "alltoall": 4 << 20, "incast": 256 << 10}
DEFAULT_DURATION_S = 0.2  # an incast phase, virtual (mrc-bench's 10 s would take minutes here)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from mrcnic.units import time_arg

    p.add_argument(
        "--senders",
        default=None,
        metavar="N|HOSTS",
        help="incast: how many hosts write to --dst (spread over the other T0s), or which "
        "(h3,h4); default 4",
    )
    p.add_argument("--dst", default=None, help="incast: the host written to (default the last)")
    p.add_argument(
        "--victim",
        default=None,
        metavar="SRC:DST|auto",
        help="incast: a victim flow, alone and then beside the incast (auto: a host under the "
        "T0 of most senders writing to one under --dst's T0; default none)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=1,
        metavar="N",
        help="allreduce: iterations back to back, each once every rank finished the previous "
        "(a training job's steps; default 1)",
    )
    p.add_argument(
        "--duration",
        type=time_arg,
        default=None,
        metavar="TIME",
        help=f"incast: virtual time per phase (default {DEFAULT_DURATION_S:g}s)",
    )


def parse_host(text: str, hosts: int) -> int:
    t = text.strip()
    h = int(t[1:]) if t[:1] == "h" and t[1:].isdigit() else int(t) if t.isdigit() else -1
    if not 0 <= h < hosts:
        raise ValueError(f"no host {text!r} (h0 .. h{hosts - 1})")
    return h


def incast_params(a: argparse.Namespace, spec: ClosSpec, qps: int | None) -> Any:
    from mrcnic.sim.collectives import IncastParams

    H = spec.hosts
    dst = parse_host(a.dst, H) if a.dst is not None else H - 1
    text = (a.senders if a.senders is not None else "4").strip()
    if text.isdigit():
        senders = wl.incast_senders(spec.shape, int(text), dst)
    else:
        senders = [parse_host(t, H) for t in text.split(",") if t.strip()]
    victim = None
    if a.victim not in (None, "", "none"):
        if a.victim == "auto":
            victim = wl.incast_victim(spec.shape, senders, dst)
            if victim is None:
                raise ValueError(
                    "--victim auto: no host under the senders' T0 is free to write to another "
                    f"under h{dst}'s T0 (more --hosts-per-t0, or give --victim SRC:DST)"
                )
        else:
            src, sep, vdst = a.victim.partition(":")
            if not sep:
                raise ValueError(f"--victim {a.victim!r}: SRC:DST (e.g. h1:h6) or auto")
            victim = (parse_host(src, H), parse_host(vdst, H))
    default_qps = 1 if spec.transport == "mrc" else spec.planes
    duration = a.duration if a.duration is not None else DEFAULT_DURATION_S
    return IncastParams(tuple(senders), dst, victim, qps or default_qps, duration)


def check_workload_flags(a: argparse.Namespace, workload: str) -> None:
    """A ValueError for an incast flag given to another workload (it would do nothing)."""
    if workload == "incast":
        if a.duration is not None and not a.duration > 0:
            raise ValueError(f"--duration {a.duration:g}: a time above 0 (e.g. 200ms)")
        return
    for flag, value in (("--senders", a.senders), ("--dst", a.dst), ("--victim", a.victim),
                        ("--duration", a.duration)):  # fmt: skip
        if value is not None:
            raise ValueError(f"{flag}: --workload incast only (this run is {workload})")


def run(a: argparse.Namespace, spec: ClosSpec, qps: int | None) -> dict[str, Any]:
    """Run ``a.workload`` (one of :data:`COLLECTIVES`) on ``spec``'s fabric."""
    from mrcnic.sim import collectives as co

    if a.workload == "allreduce":
        return co.Allreduce(spec, a.iters).run()
    if a.workload == "alltoall":
        return co.Alltoall(spec).run()
    return co.Incast(spec, incast_params(a, spec, qps)).run()


def _mbps(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e6:.1f} Mb/s"


def pfc_line(r: dict[str, Any]) -> str:
    """The summary's line for a ``--pfc`` run (mrcnic.sim.pfc)."""
    return (
        f"pfc            {r['pfc_pauses']} pauses, {r['pfc_resumes']} resumes; paused "
        f"{r['pfc_paused_s'] * 1e3:.3f} ms in all ({r['pfc_paused_nic_s'] * 1e3:.3f} ms on NIC "
        f"ports); lossless drops {r['pfc_lossless_drops']}"
    )


def summary(r: dict[str, Any]) -> str:
    fabric = (
        f"{r['t0']} T0 x {r['hosts_per_t0']}, {r['t1']} T1, {r['planes']} planes), {r['transport']}"
    )
    tail = (
        f"verified       {r['verified']}; QP errors {r.get('qp_errors', r.get('qp_errors_total'))}; "
        f"retransmissions {r['retransmissions']}, timeouts {r['timeouts']}, trims {r['trims']}"
    )
    if r["workload"] == "incast":
        lines = [
            f"incast {','.join(r['senders'])} -> {r['dst']} ({r['hosts']} hosts: {fabric}, "
            f"{r['qps']} QP(s) per flow, writes of {r['size']} B for {r['duration_s']:g} s",
            f"incast         {_mbps(r['incast_goodput_bps'])} = {r['incast_fraction']:.3f} of "
            f"{r['dst']}'s {_mbps(r['dst_capacity_bps'])}; Jain {r['jain']:.3f}",
        ]
        v = r["victim"]
        if v is not None:
            lines.append(
                f"victim         {v['src']} -> {v['dst']}: alone {_mbps(v['alone_bps'])}, with "
                f"the incast {_mbps(v['with_incast_bps'])}: ratio {v['ratio']}"
            )
        return "\n".join([*lines, tail, *([pfc_line(r)] if r.get("pfc") else [])])
    t = r["time_s"]
    times = r["iteration_times_s"]
    iters = []
    if r.get("iters", 1) > 1:
        span = f": {min(times) * 1e3:.3f} .. {max(times) * 1e3:.3f} ms" if times else ""
        iters.append(f"iterations     {r['iterations']} of {r['iters']}{span}")
    if r.get("failed_at_s") is not None:
        iters.append(
            f"failed         the iteration from {r['failed_at_s'] * 1e3:.3f} ms, after "
            f"{r['failed_after_s'] * 1e3:.3f} ms: {'; '.join(r['qp_error_reasons'])[:160]}"
        )
    faults = [f"fault          {f}" for f in r.get("faults", [])]
    if r.get("recovery_s") is not None:
        faults.append(f"recovery       {r['recovery_s']} s (first bin back to 90% of before)")
    return "\n".join(
        [
            f"{r['workload']} of {r['ranks']} ranks ({fabric}, {r['size']} bytes per rank",
            f"time           {t * 1e3:.3f} ms (virtual{', mean' if len(times) > 1 else ''}); "
            f"algbw {_mbps(r['algbw_bps'])}, busbw "
            f"{_mbps(r['busbw_bps'])} = {r['goodput_fraction']:.3f} of the pair capacity",
            *iters,
            "flow FCT       p50 / p99 "
            + (
                "n/a"
                if r["fct_p50_s"] is None
                else f"{r['fct_p50_s'] * 1e3:.2f} / {r['fct_p99_s'] * 1e3:.2f} ms"
            )
            + f"; Jain {r['jain']:.3f}; T0-T1 load max/mean {r['link_imbalance']}",
            tail,
            *faults,
            *([pfc_line(r)] if r.get("pfc") else []),
        ]
    )
