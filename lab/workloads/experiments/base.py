"""What every experiment shares: its context, its result (the JSON contract), its labs.

An experiment (one module in ``lab/workloads/experiments/``) turns one published MRC claim into a
measurement: it brings up the lab it needs, runs MRC and the RoCEv2 baseline as deployed
under the same schedule, repeats, and returns a :class:`Result`. The keys of the result's
JSON (``results/experiments/NAME.json``) are a contract (docs/results/experiments.md):

- ``claim``: the claim in a sentence; ``paper``: the published figure (text, and numbers
  where there are some);
- ``setup``: the lab (hosts, planes, paths, link rate, BDP and buffer in packets) and the
  paper's scale beside it;
- ``mrc``, ``rocev2``: what each transport did (per repetition and summarised);
- ``metrics``: the BMWG AI-fabric set where it applies (JCT, busbw, P99 step time, Jain
  fairness, max/mean link imbalance, out-of-order and retransmission rates, coefficient of
  variation across repetitions), per transport;
- ``verdict``: ``reproduced``, ``partly`` or ``not reproduced``; ``why``: the measured
  reason.

Plus ``name``, ``number``, ``quick``, ``commands`` (what to type to rerun a part by hand),
``machine``, ``started_unix``, ``elapsed_s`` and ``plot`` (the PNG's path).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.fabric import lifecycle
from lab.fabric.host import lab_base_rtt_s
from lab.fabric.params import LabParams
from lab.fabric.state import LabState, exists
from lab.proc.benchrun import bench_argv, parse_json_output
from lab.workloads import calibrate
from mrcnic.sim.clos import ClosSpec
from mrcnic.sim.scale import PAPER

VERDICTS = ("reproduced", "partly", "not reproduced")
RESULT_KEYS = ("claim", "paper", "setup", "mrc", "rocev2", "metrics", "verdict", "why")
DEFAULT_OUT = Path("results/experiments")
LAB_NAME = "mrcexp"
PAPER_SCALE = {  # the production fabric the paper's figures come from (MRC-BRIEF)
    "gpus": "~100,000",
    "planes": 8,
    "link_rate": "100-400 Gb/s",
    "tiers": "two-tier Clos per plane",
}
HEADER_BYTES = 106  # Eth + IPv6 + UDP + BTH + METH + TS + RETH + ICRC (docs/design/wire.md)
FRAME_BYTES = 4096 + HEADER_BYTES  # a full data frame of the lab's 4096-byte MTU payload

Printer = Callable[[str], None]


def _say(text: str) -> None:
    print(text, flush=True)


@dataclass
class Context:
    """What an experiment is run with: ``quick`` (the suite's short form: one repetition,
    short runs, the smallest lab that still tests the claim's mechanism), where results go,
    the lab's name, and how to print progress."""

    quick: bool = False
    out_dir: Path = DEFAULT_OUT
    lab_name: str = LAB_NAME
    echo: Printer = _say
    rate_mbit: float | None = None  # None: calibrated for each lab shape (cached per boot)
    reps: int | None = None  # None: the experiment's own (1 when quick)
    sim: bool = False  # the simulated form (mrc-sim's whole fabric), not the lab
    #: how often an experiment with CPU-bound runs is repeated, each time at half the link
    #: rate (registry.run); None: 2 for a full run, 0 for a quick one (the suite's budget)
    cpu_bound_repeats: int | None = None

    def repetitions(self, full: int) -> int:
        if self.reps is not None:
            return max(1, self.reps)
        return 1 if self.quick else full


@dataclass
class Result:
    name: str
    number: int
    claim: str
    paper: dict[str, Any]
    setup: dict[str, Any] = field(default_factory=dict)
    mrc: dict[str, Any] = field(default_factory=dict)
    rocev2: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    verdict: str = "not reproduced"
    why: str = ""
    commands: list[str] = field(default_factory=list)
    quick: bool = False
    plot: str | None = None
    started_unix: float = field(default_factory=time.time)
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def judge(self, verdict: str, why: str) -> None:
        if verdict not in VERDICTS:
            raise ValueError(f"verdict {verdict!r}: one of {VERDICTS}")
        self.verdict, self.why = verdict, why

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "number": self.number,
            "claim": self.claim,
            "paper": self.paper,
            "setup": self.setup,
            "mrc": self.mrc,
            "rocev2": self.rocev2,
            "metrics": self.metrics,
            "verdict": self.verdict,
            "why": self.why,
            "commands": self.commands,
            "quick": self.quick,
            "plot": self.plot,
            "machine": machine(),
            "started_unix": self.started_unix,
            "elapsed_s": round(self.elapsed_s, 1),
            **({"extra": self.extra} if self.extra else {}),
        }

    def write(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_clean(self.to_dict()), indent=1) + "\n")
        os.replace(tmp, path)
        return path


def _clean(x: Any) -> Any:
    """JSON without NaN/inf (strict readers refuse them): None instead."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


# --- labs -----------------------------------------------------------------------------------


def lab_params(ctx: Context, *, paper_bdp: bool = False, **shape: Any) -> LabParams:
    """The experiment's lab: ``shape`` (planes, t0, t1, hosts_per_t0, pfc, switch, ...) at the
    context's rate, or at the rate this machine carries fabric-bound for that shape (the
    data path issue's calibration, measured once per boot and cached). ``paper_bdp``: the
    switch-to-switch links get the delay that makes a path hold the paper's BDP in packets
    at that rate (:func:`paper_delay_us`)."""
    params = LabParams(name=ctx.lab_name, **shape)
    if ctx.rate_mbit is not None:
        params = params.with_overrides(rate_mbit=ctx.rate_mbit)
    else:
        cal_params = params.with_overrides(switch="python", pfc=False)
        cal = calibrate.get(cal_params, echo=ctx.echo)
        ctx.echo(f"  {cal.line()}")
        params = params.with_overrides(rate_mbit=cal.rate_mbit)
    if paper_bdp:
        delay_us = paper_delay_us(params)
        params = params.with_overrides(delay_us=delay_us)
        ctx.echo(
            f"  links delayed {delay_us / 1000:g} ms one way (T0-T1, both directions): a path "
            f"holds {bdp_packets_per_path(params):.1f} packets in flight, the paper's "
            f"{paper_bdp_packets_per_path():.1f}"
        )
    return params


def paper_bdp_packets_per_path() -> float:
    """A path's BDP in packets at the paper's proportions: the simulator's paper scale
    (mrcnic.sim.scale.PAPER: 100 Gb/s, a data packet and its ACK across a T1), as the
    claims' simulated forms state it (their ``bdp_packets_per_path``)."""
    spec = ClosSpec(port_rate_bps=PAPER.port_rate_bps, prop_s=PAPER.prop_s,
                    queue_bytes=PAPER.queue_bytes, ecn_bytes=PAPER.ecn_bytes)  # fmt: skip
    return PAPER.port_rate_bps / 8 * spec.base_rtt_s / (spec.mtu + HEADER_BYTES)


def bdp_packets_per_path(params: LabParams, base_rtt_s: float | None = None) -> float:
    """A lab path's BDP in packets: a link's rate over the base RTT across the T1 tier
    (``base_rtt_s``, else the lab's own: lab_base_rtt_s)."""
    if base_rtt_s is None:
        base_rtt_s = lab_base_rtt_s(params)
    return params.rate_mbit * 1e6 / 8 * base_rtt_s / FRAME_BYTES


def paper_delay_us(params: LabParams) -> float:
    """The one-way delay of each switch-to-switch link (``mrc-lab up --delay``) that makes a
    path of this lab hold the paper's BDP in packets (4 such links per round trip; 0 if the
    lab's own RTT already holds that much), in whole microseconds."""
    frame_bits = FRAME_BYTES * 8
    want_rtt_s = paper_bdp_packets_per_path() * frame_bits / (params.rate_mbit * 1e6)
    own_rtt_s = lab_base_rtt_s(params.with_overrides(delay_us=0.0))
    return float(max(0, math.ceil((want_rtt_s - own_rtt_s) / 4 * 1e6)))


@contextlib.contextmanager
def lab_up(ctx: Context, params: LabParams) -> Iterator[LabState]:
    """Bring the lab up (taking down a leftover of the same name first); always down."""
    if exists(params.name):
        ctx.echo(f"  lab {params.name} exists from an earlier run: taking it down first")
        lifecycle.down(params.name)
    t = time.monotonic()
    state = lifecycle.up(params)
    ctx.echo(
        f"  lab {params.name} up in {time.monotonic() - t:.1f} s: {params.planes} planes x "
        f"({params.t0} T0 + {params.t1} T1), {params.host_count} hosts, "
        f"{params.rate_mbit:g} Mb/s links{', PFC' if params.pfc else ''}"
    )
    try:
        yield state
    finally:
        lifecycle.down(params.name)
        ctx.echo(f"  lab {params.name} down")


def setup_of(params: LabParams, base_rtt_s: float | None = None, **extra: Any) -> dict[str, Any]:
    """The ``setup`` key: the lab's scale (paths between T0s, BDP and buffer in packets) and
    the paper's beside it."""
    if base_rtt_s is None:
        base_rtt_s = lab_base_rtt_s(params)
    if params.delay_us:
        extra = {
            "delay_us_per_t0_t1_link": params.delay_us,
            "paper_bdp_packets_per_path": round(paper_bdp_packets_per_path(), 2),
            **extra,
        }
    return {
        "hosts": params.host_count,
        "planes": params.planes,
        "t0_per_plane": params.t0,
        "t1_per_plane": params.t1,
        "paths_between_t0s": params.planes * params.t1,
        "link_rate_mbit": params.rate_mbit,
        "host_rate_mbit": params.rate_mbit * params.planes,
        "base_rtt_s": round(base_rtt_s, 6),
        "bdp_packets_per_path": round(bdp_packets_per_path(params, base_rtt_s), 2),
        "buffer_packets": round(params.buffer_bytes / FRAME_BYTES, 2),
        "switch": params.switch,
        "pfc": params.pfc,
        "realtime": params.realtime,
        "paper_scale": PAPER_SCALE,
        **extra,
    }


# --- statistics -----------------------------------------------------------------------------


def median(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(v) if v else None


def cv(xs: Sequence[float | None]) -> float | None:
    """Coefficient of variation across repetitions (stdev / mean), None below two values."""
    v = [x for x in xs if x is not None and math.isfinite(x)]
    if len(v) < 2 or statistics.mean(v) == 0:
        return None
    return statistics.stdev(v) / statistics.mean(v)


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear between ranks; None for no values."""
    v = sorted(x for x in xs if x is not None and math.isfinite(x))
    if not v:
        return None
    k = (len(v) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index of per-flow rates: 1 = equal, 1/n = one flow has it all."""
    v = [x for x in xs if x is not None]
    if not v or sum(v) == 0:
        return None
    return sum(v) ** 2 / (len(v) * sum(x * x for x in v))


def cpu_bound_note(tiers: dict[str, Any], names: Sequence[str]) -> str:
    """``"; CPU-bound runs in: a, b"`` for the tiers (of ``names``, in that order) with a run
    flagged ``cpu_bound``, or "" : appended to a verdict's ``why``."""
    bound = [t for t in names if any((tiers.get(t) or {}).get("cpu_bound_runs") or [])]
    return f"; CPU-bound runs in: {', '.join(bound)}" if bound else ""


def rounded(x: Any, nd: int = 4) -> Any:
    if isinstance(x, float):
        return round(x, nd) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: rounded(v, nd) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v, nd) for v in x]
    return x


# --- running mrc-bench ----------------------------------------------------------------------


def bench(ctx: Context, lab: str, args: Sequence[str], timeout_s: float = 300.0) -> dict:
    """One ``mrc-bench`` command against ``lab`` (its JSON), e.g. ``("write", "--src",
    "h0", ...)``; raises RuntimeError with the tail of its stderr when it prints none."""
    sub, *rest = args
    argv = [*bench_argv(), sub, "--lab", lab, *rest, "--json", "-q"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    res = parse_json_output(p.stdout)
    if res is None:
        raise RuntimeError(
            f"mrc-bench {' '.join(args)} printed no JSON (exit {p.returncode}): "
            f"{p.stderr.strip()[-800:]}"
        )
    return res


def command(lab: str, args: Sequence[str]) -> str:
    """How a user reruns one measurement by hand."""
    return " ".join(["sudo .venv/bin/mrc-bench", args[0], "--lab", lab, *args[1:]])
