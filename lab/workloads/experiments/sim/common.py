"""What the simulated forms of the claims share: the paper's fabric, running simulations on
every core, and the ``setup`` key at the simulator's scale.

A simulated form runs in :mod:`mrcnic.sim.clos` (the real QPs of both transports over a whole
multi-plane Clos in virtual time), so its figures do not depend on the machine's speed or
load, only its wall time does; no run is ever CPU-bound. Its JSON
(``results/experiments/sim/NAME.json``) has the lab form's contract keys.
"""

from __future__ import annotations

import os
import shlex
import statistics
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from lab.workloads.experiments.base import HEADER_BYTES, PAPER_SCALE, Context, Result
from mrcnic import workloads as wl
from mrcnic.rocev2.dcqcn import REFERENCE_PORT_BPS
from mrcnic.rocev2.qp import IB_TIMEOUT_UNIT_S
from mrcnic.sim import transfer
from mrcnic.sim.clos import ClosSpec, rocev2_qp_config, run_permutation
from mrcnic.sim.collectives import Allreduce
from mrcnic.sim.fabric import FabricSpec
from mrcnic.sim.scale import PAPER

# The paper's proportions (MRC-BRIEF: 8 x 100G NICs, 6.54 us one way across a T1): 100 Gb/s
# links, a few microseconds of propagation, deep switch buffers with ECN well below them.
PAPER_FABRIC: dict[str, Any] = {
    "planes": 8,
    "port_rate_bps": PAPER.port_rate_bps,
    "prop_s": PAPER.prop_s,
    "queue_bytes": PAPER.queue_bytes,
    "ecn_bytes": PAPER.ecn_bytes,
}

SimRun = Callable[[Context, Result], None]


@dataclass(frozen=True)
class SimForm:
    """A claim's simulated form: the function and how long it takes (wall minutes on the
    project's 2-core machine, full and quick)."""

    run: SimRun
    minutes: float = 5.0
    quick_minutes: float = 0.5


def paper_spec(**kw: Any) -> ClosSpec:
    """A :class:`ClosSpec` at the paper's proportions, ``kw`` on top."""
    return ClosSpec(**{**PAPER_FABRIC, **kw})


def paper_p2p(**kw: Any) -> FabricSpec:
    """mrc-sim's two-host fabric (``--workload p2p``) at the paper's proportions."""
    return FabricSpec(**{k: v for k, v in PAPER_FABRIC.items()}, **kw)


def run_parallel(
    fn: Callable[[Any], dict], jobs: Mapping[str, Any], echo: Callable[[str], None]
) -> dict[str, dict]:
    """``fn(job)`` for every job (name -> its spec or config), in parallel on the machine's
    cores (each simulation is one Python process); results by name, in the order given."""
    names = list(jobs)
    workers = max(1, min(len(names), os.cpu_count() or 1))
    echo(f"  {len(names)} simulations on {workers} cores: {', '.join(names)}")
    if workers == 1:
        out = {n: fn(jobs[n]) for n in names}
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {n: pool.submit(fn, jobs[n]) for n in names}
            out = {n: futures[n].result() for n in names}
    for n in names:
        r = out[n]
        util = r.get("window_utilisation", r.get("goodput_fraction", r.get("incast_fraction")))
        errors = r.get("qp_errors", r.get("qp_errors_total"))
        echo(f"    {n:<16} utilisation {util or 0:.3f}, verified {r['verified']}, "
             f"QP errors {errors}, {r['wall_s']:.0f} s wall")  # fmt: skip
    return out


def run_all(specs: Mapping[str, ClosSpec], echo: Callable[[str], None]) -> dict[str, dict]:
    """Whole-fabric permutations (:func:`run_parallel` of ``run_permutation``)."""
    return run_parallel(run_permutation, specs, echo)


def run_p2p(cfgs: Mapping[str, transfer.SimConfig], echo: Callable[[str], None]) -> dict[str, dict]:
    """Two-host transfers (:func:`run_parallel` of ``mrcnic.sim.transfer.run``)."""
    return run_parallel(transfer.run, cfgs, echo)


def bins(timeline: list[list[float]], start_s: float, end_s: float) -> list[float]:
    """The goodput (bit/s) of the timeline's bins that lie within [start_s, end_s)."""
    if not timeline:
        return []
    step = timeline[1][0] - timeline[0][0] if len(timeline) > 1 else 0.0
    return [bps for t, bps in timeline if t >= start_s and t + step <= end_s + 1e-12]


def p2p_setup(cfg: transfer.SimConfig, **extra: Any) -> dict[str, Any]:
    """The ``setup`` key of a two-host simulated form."""
    f = cfg.fabric
    frame = cfg.mtu + HEADER_BYTES
    rtt = transfer.base_rtt_s(f, cfg.mtu)
    return {
        "tier": "simulator (mrcnic.sim.transfer, two hosts, virtual time)",
        "hosts": 2,
        "planes": f.planes,
        "t0_per_plane": 2,
        "t1_per_plane": f.paths_per_plane,
        "paths_between_t0s": f.planes * f.paths_per_plane,
        "link_rate_mbit": f.port_rate_bps / 1e6,
        "host_rate_mbit": f.port_rate_bps * f.planes / 1e6,
        "base_rtt_s": round(rtt, 9),
        "bdp_packets_per_path": round(f.port_rate_bps / 8 * rtt / frame, 2),
        "buffer_packets": round(f.queue_bytes / frame, 2),
        "ecn_packets": None if f.ecn_bytes is None else round(f.ecn_bytes / frame, 2),
        "switch": "simulated",
        "pfc": False,
        "paper_scale": PAPER_SCALE,
        **extra,
    }


def p2p_command(cfg: transfer.SimConfig) -> str:
    """The ``mrc-sim`` command of one two-host run."""
    f = cfg.fabric
    argv = [
        ".venv/bin/mrc-sim", "--planes", str(f.planes), "--t1",
        str(f.paths_per_plane), "--rate", _gbit(f.port_rate_bps), "--delay",
        f"{f.prop_s * 1e6:g}us", "--buffer", str(f.queue_bytes), "--size", str(cfg.size),
        "--msg-size", str(cfg.msg_size), "--transport", cfg.transport, "--seed", str(cfg.seed),
    ]  # fmt: skip
    argv += ["--ecn", str(f.ecn_bytes)] if f.ecn_bytes is not None else ["--no-ecn"]
    if cfg.qps is not None:
        argv += ["--qps", str(cfg.qps)]
    for path, loss in f.path_loss:
        argv += ["--path-loss", f"{path}:{loss:g}"]
    for x in cfg.faults:
        argv += ["--heal" if x.up else "--fail", f"{x.kind}:{x.index}@{x.time_s * 1e3:g}ms"]
    if cfg.timeline_s:
        argv += ["--timeline", f"{cfg.timeline_s * 1e6:g}us"]
    return shlex.join([*argv, "--json"])


def sim_setup(spec: ClosSpec, **extra: Any) -> dict[str, Any]:
    """The ``setup`` key of a simulated form, in the lab form's terms (BDP and buffer in
    packets per link) and the paper's scale beside it."""
    frame = spec.mtu + HEADER_BYTES
    bdp_bytes = spec.port_rate_bps / 8 * spec.base_rtt_s
    return {
        "tier": "simulator (mrcnic.sim.clos, virtual time)",
        "hosts": spec.hosts,
        "planes": spec.planes,
        "t0_per_plane": spec.t0,
        "t1_per_plane": spec.t1,
        "paths_between_t0s": spec.planes * spec.t1,
        "link_rate_mbit": spec.port_rate_bps / 1e6,
        "host_rate_mbit": spec.port_rate_bps * spec.planes / 1e6,
        "base_rtt_s": round(spec.base_rtt_s, 9),
        "bdp_packets_per_path": round(bdp_bytes / frame, 2),
        "buffer_packets": round(spec.queue_bytes / frame, 2),
        "ecn_packets": None if spec.ecn_bytes is None else round(spec.ecn_bytes / frame, 2),
        "switch": "simulated",
        "pfc": False,
        "paper_scale": PAPER_SCALE,
        **extra,
    }


def sim_command(spec: ClosSpec, workload: str = "permutation", iters: int = 1) -> str:
    """The ``mrc-sim`` command that reruns one of the form's simulations by hand (its faults
    and timeline too; ``iters``: an all-reduce's iterations)."""
    argv = [
        ".venv/bin/mrc-sim", "--workload", workload, "--planes", str(spec.planes),
        "--t0", str(spec.t0), "--hosts-per-t0", str(spec.hosts_per_t0),
        "--t1", str(spec.t1), "--rate", _gbit(spec.port_rate_bps),
        "--delay", f"{spec.prop_s * 1e6:g}us", "--buffer", str(spec.queue_bytes),
        "--size", str(spec.size), "--msg-size", str(spec.msg_size),
        "--transport", spec.transport, "--seed", str(spec.seed),
    ]  # fmt: skip
    if spec.path_rate_bps is not None:
        argv += ["--path-rate", _gbit(spec.path_rate_bps)]
    argv += ["--ecn", str(spec.ecn_bytes)] if spec.ecn_bytes is not None else ["--no-ecn"]
    if spec.transport == "mrc":
        ev = spec.qp.ev
        argv += ["--path-policy", ev.path_policy, "--plane-share", ev.plane_share]
    if iters != 1:
        argv += ["--iters", str(iters)]
    for step in spec.faults:
        argv += ["--fault", step.text]
    if spec.timeline_s:
        argv += ["--timeline", f"{spec.timeline_s * 1e6:g}us"]
    return shlex.join([*argv, "--json"])


def _gbit(rate_bps: float) -> str:
    return f"{rate_bps / 1e9:g}Gbit"


def with_seed(spec: ClosSpec, seed: int) -> ClosSpec:
    return replace(spec, seed=seed)


# --- training jobs (claims 7 and 9): the ring all-reduce, iteration after iteration ---------


def run_allreduce(job: tuple[ClosSpec, int]) -> dict[str, Any]:
    """``(spec, iters)``: the all-reduce job's result, with the packets each T1 and each T0-T1
    link carried (``t1_packets``, ``link_packets``: which the job crossed most)."""
    spec, iters = job
    ar = Allreduce(spec, iters)
    r = ar.run()
    r["t1_packets"] = ar.hosts.t1_packets()
    r["link_packets"] = ar.hosts.link_packets()
    return r


def busiest(packets: Mapping[str, int], n: int = 1) -> list[str]:
    """The ``n`` names that carried the most packets (ties: by name)."""
    return sorted(sorted(packets), key=lambda k: -packets[k])[:n]


def job_summary(r: Mapping[str, Any]) -> dict[str, Any]:
    """An all-reduce job's result as the soak's summary (``step_log`` rows of ``job``,
    ``iter``, ``start_s``, ``end_s``, ``ok``, ``faults``; ``restarts``, ``failed_steps``,
    ...), so the lab forms' figures read it: an iteration is a step; a failed one ends the
    job, which a launcher would restart once."""
    log = r.get("fault_log") or []
    end_s = max([0.0, *r["iteration_starts_s"]]) + max([0.0, *r["iteration_times_s"]])
    if r["failed_at_s"] is not None:
        end_s = r["failed_at_s"] + r["failed_after_s"]

    def faulted(s: float, e: float) -> int:
        return sum(1 for f in log if f["start_s"] <= e and (f["end_s"] or end_s) >= s)

    rows = [[0, k, s, s + t, True, faulted(s, s + t)]
            for k, (s, t) in enumerate(zip(r["iteration_starts_s"], r["iteration_times_s"],
                                           strict=True))]  # fmt: skip
    if r["failed_at_s"] is not None:
        s, e = r["failed_at_s"], r["failed_at_s"] + r["failed_after_s"]
        rows.append([0, len(rows), s, e, False, faulted(s, e)])
    n = r["ranks"]
    busbw = [wl.allreduce_busbw_bps(r["size"] * 8 / t, n) for t in r["iteration_times_s"] if t]
    return {
        "step_columns": ["job", "iter", "start_s", "end_s", "ok", "faults"],
        "step_log": rows,
        "restarts": r["failed_iterations"],
        "failed_steps": r["failed_iterations"],
        "qp_errors": r["qp_errors"],
        "retransmissions": r["retransmissions"],
        "timeouts": r["timeouts"],
        "busbw_bps_p50": statistics.median(busbw) if busbw else None,
        "wall_s": r["wall_s"],
    }


def rocev2_retry_budget_s(spec: ClosSpec) -> float:
    """How long a RoCEv2 QP of this fabric retries an unanswered packet before it errors
    (RETRY_EXCEEDED): its local ACK timeout, doubling, ``retry_cnt + 1`` times
    (mrcnic.rocev2.qp)."""
    cfg = rocev2_qp_config(spec, 0, spec.seed)
    scale = cfg.lab_scale or REFERENCE_PORT_BPS / spec.port_rate_bps
    ack = max(IB_TIMEOUT_UNIT_S * (1 << cfg.local_ack_timeout) * scale, 4 * cfg.base_rtt_s)
    return sum(min(ack * (1 << k), cfg.max_ack_timeout_s) for k in range(cfg.retry_cnt + 1))
