"""A soak with random faults: an all-reduce loop for minutes while a seeded schedule breaks
the fabric, every step verified (issue 13, part 3; manual: docs/reliability.md).

    python -m lab.soak --minutes 30 --seed 1 [--name mrcsoak] [--transports mrc,rocev2]
                       [--events-per-min 4] [--size 4M] [--hosts h0,h1,h2,h3]
                       [--rate-mbit auto|R] [--out results/soak.json] [--keep-lab]

Brings up its own lab (the default 8-plane shape, python switches, the link rate from the
calibration of the ring's flows unless ``--rate-mbit`` is given), then for each transport in
turn (MRC first, then the RoCEv2 baseline) runs a ring all-reduce loop (``lab.workloads.bench.allreduce``:
one process per rank, every rank checks its result against the locally computed sum after
every step) for ``--minutes`` while the same seeded schedule, replayed from the start of each
transport's run, flaps T0-T1 links, reboots T0 and T1 switches, takes NIC ports down and adds
loss on links (:func:`make_schedule`). Each fault is undone before the next one; whatever is
still applied is undone at the end, on an error and on Ctrl-C (``lab.proc.scenario.Schedule``).

A step that fails (a QP error, a step timeout) ends that all-reduce job, as it would end a
training job; the soak starts a new one (new processes, new QPs) and counts the restart.
Each rank process is ``ip netns exec <lab>-<host> python -m lab.soak rank ...``: rank 0
prints every step as one JSON line as soon as it completes, so a long run shows progress and
loses nothing when it is stopped.

Output: progress lines, a summary screen, a JSON document (``--out``) and a PNG of step time
against time with the fault steps marked. Exit status 1 when MRC had a QP error or a failed
step, when any transport's step failed its verification, or when MRC completed no step; 2 on
a usage error; 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lab.fabric import lifecycle, pyswitch
from lab.fabric.faults import Faults
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import LabParams, ParamError, resolve
from lab.fabric.progress import Progress
from lab.fabric.state import LabState, exists
from lab.proc import cpu
from lab.proc.scenario import Applied, Schedule, Step
from lab.workloads import calibrate
from lab.workloads.bench import common as bc
from mrcnic.units import size_arg, time_arg

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
DEFAULT_NAME = "mrcsoak"
TITLES = {"mrc": "MRC", "rocev2": "RoCEv2"}

# --- the schedule's shape ---------------------------------------------------------------------
FAULT_KINDS = ("flap", "reboot-t0", "reboot-t1", "port", "loss")
FIRST_FAULT_S = 5.0  # the first steps run clean: a reference for the step time
SLOT_JITTER = 0.2  # a fault starts in the first 20% of its slot (60 / events-per-min s)
GAP_S = 1.5  # between one fault's undo and the next fault: faults never overlap
MIN_FAULT_S = 0.5  # shorter faults are not worth a slot
DOWN_S = (2.0, 5.0)  # a link flap's or a NIC port's down time: "a few seconds"
LOSS_S = (3.0, 8.0)  # how long a loss rule stays
LOSS_PERCENTS = (0.5, 1.0, 2.0, 5.0)
REBOOT_DOWN_MS = (500.0, 2000.0)
BOOT_S = 1.0  # a rebooted switch needs this long to be ready again (bounded in the slot)
MAX_EVENTS_PER_MIN = 20.0

# --- running ----------------------------------------------------------------------------------
SETTLE_S = 1.0  # a step this soon after a fault's undo still counts as a fault step
# An all-reduce step stuck this long without an error fails (its job is restarted). A QP
# error ends a job at once; this only catches a stall, and must not take the baseline's slow
# steps under loss (several times its ~6 s at the calibrated rate) for failures.
STEP_TIMEOUT_S = 60.0
MIN_JOB_S = 5.0  # no new job when less than this is left of the run
START_TIMEOUT_S = 60.0  # rank 0 must announce its port within this
LATE_S = 1.0  # a fault applied this much after its planned time is reported as late
STEP_COLUMNS = ("job", "iter", "start_s", "end_s", "ok", "faults")
_LISTENING = re.compile(r"listening on \[[^\]]*\]:(\d+)")

Printer = Callable[[str], None]


def _say(text: str) -> None:
    print(text, flush=True)


# === the seeded schedule (pure) ===============================================================


def make_schedule(
    seed: int,
    duration_s: float,
    events_per_min: float,
    params: LabParams,
    hosts: Sequence[str],
) -> list[Step]:
    """Random faults, one per slot of ``60 / events_per_min`` seconds from FIRST_FAULT_S on,
    each undone (or its switch back) GAP_S before the next slot and before the end, so faults
    never overlap. The same arguments always give the same schedule."""
    if events_per_min <= 0 or events_per_min > MAX_EVENTS_PER_MIN:
        raise ValueError(f"events per minute must be in (0, {MAX_EVENTS_PER_MIN:g}]")
    rng = random.Random(seed)
    period_s = 60.0 / events_per_min
    steps: list[Step] = []
    slot_start = FIRST_FAULT_S
    while slot_start < duration_s:
        at_s = round(slot_start + rng.uniform(0.0, SLOT_JITTER * period_s), 2)
        room_s = min(slot_start + period_s, duration_s) - GAP_S - at_s
        if room_s >= MIN_FAULT_S:
            steps.append(random_fault(rng, at_s, room_s, params, hosts))
        slot_start += period_s
    return steps


def random_fault(
    rng: random.Random, at_s: float, room_s: float, params: LabParams, hosts: Sequence[str]
) -> Step:
    """One fault of a random kind at ``at_s`` that is over within ``room_s``."""
    kind = rng.choice(FAULT_KINDS)
    plane = rng.randrange(params.planes)
    t0 = f"p{plane}-t0-{rng.randrange(params.t0)}"
    t1 = f"p{plane}-t1-{rng.randrange(params.t1)}"
    host = rng.choice(list(hosts))
    if kind in ("reboot-t0", "reboot-t1"):
        down_ms = min(rng.uniform(*REBOOT_DOWN_MS), max(100.0, (room_s - BOOT_S) * 1000))
        return Step("reboot", at_s, t0 if kind == "reboot-t0" else t1, down_ms=round(down_ms))
    if kind == "loss":
        percent = rng.choice(LOSS_PERCENTS)
        # half on a fabric (T0-T1) link, half on a ring host's link to its T0
        host_t0 = f"p{plane}-t0-{int(host[1:]) // params.hosts_per_t0}"
        a, b = (t0, t1) if rng.random() < 0.5 else (host, host_t0)
        undo = at_s + min(rng.uniform(*LOSS_S), room_s)
        return Step("loss", at_s, a, b, undo_s=round(undo, 2), percent=percent)
    undo = round(at_s + min(rng.uniform(*DOWN_S), room_s), 2)
    if kind == "port":
        return Step("port", at_s, host, plane=plane, undo_s=undo)
    return Step("link", at_s, t0, t1, undo_s=undo)


def fault_kind(step: Step) -> str:
    """The soak's name of a step's kind: flap, reboot-t0, reboot-t1, port or loss."""
    if step.kind == "reboot":
        return "reboot-t0" if "-t0-" in step.a else "reboot-t1"
    return "flap" if step.kind == "link" else step.kind


# === statistics (pure) ========================================================================


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of values sorted ascending."""
    if not sorted_values:
        raise ValueError("no values")
    k = max(1, -(-len(sorted_values) * q // 100))  # ceil(n q / 100), at least 1
    return sorted_values[int(min(k, len(sorted_values))) - 1]


def distribution(values: Sequence[float]) -> dict[str, Any]:
    """count, mean, p50, p90, p99, max and min of step times (seconds)."""
    if not values:
        return {"count": 0}
    v = sorted(values)
    out: dict[str, Any] = {"count": len(v), "mean_s": round(sum(v) / len(v), 6)}
    for q in (50, 90, 99):
        out[f"p{q}_s"] = round(percentile(v, q), 6)
    out["max_s"] = round(v[-1], 6)
    out["min_s"] = round(v[0], 6)
    return out


@dataclass
class FaultSpan:
    """Fault ``n`` (1, 2, ... as the screen counts them) as it happened on the run's clock:
    applied at ``start_s``, undone (a rebooted switch ready again) at ``end_s`` (None: still
    applied)."""

    n: int
    step: Step
    start_s: float
    end_s: float | None
    commands: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def planned_s(self) -> float:
        """How long the schedule meant the fault to last (a reboot: its down time)."""
        s = self.step
        if s.kind == "reboot" or s.undo_s is None:
            return s.down_ms / 1000.0
        return s.undo_s - s.at_s

    @property
    def late(self) -> bool:
        """Applied well after its time, or held for well under its planned length: the
        schedule plays in one thread, and a fault that blocks it (a switch that answers its
        restart late) delays the ones behind it, which then catch up at once."""
        held = None if self.end_s is None else self.end_s - self.start_s
        return self.start_s - self.step.at_s > LATE_S or (
            held is not None and held < 0.5 * self.planned_s
        )

    def to_dict(self) -> dict[str, Any]:
        s = self.step
        return {
            "n": self.n,
            "kind": fault_kind(s),
            "label": s.label,
            "heal_label": s.heal_label,
            "planned": s.to_dict(),
            "start_s": round(self.start_s, 3),
            "end_s": None if self.end_s is None else round(self.end_s, 3),
            "planned_s": round(self.planned_s, 3),
            "late": self.late,
            "commands": self.commands,
            "error": self.error,
        }


def overlapping(
    start_s: float, end_s: float, spans: Sequence[FaultSpan], settle_s: float, now_s: float
) -> list[int]:
    """The faults (their ``n``) whose window, extended by ``settle_s`` after the undo (paths
    come back through probes after a link is up again), overlaps the step [start, end]."""
    out = []
    for f in spans:
        f_end = (now_s if f.end_s is None else f.end_s) + settle_s
        if start_s < f_end and end_s > f.start_s:
            out.append(f.n)
    return out


# === one transport's steps ====================================================================


@dataclass
class StepRec:
    """One all-reduce step as rank 0 reported it, times in seconds from the run's start."""

    job: int
    it: int
    start_s: float
    end_s: float
    ok: bool
    corrupt: bool
    qp_errors: int
    errors: list[str]
    faults: list[int] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def row(self) -> list[Any]:
        return [
            self.job,
            self.it,
            round(self.start_s, 4),
            round(self.end_s, 4),
            self.ok,
            self.faults,
        ]


def step_line(it: int, reports: list[dict[str, Any]], now_mono: float) -> dict[str, Any]:
    """What rank 0 prints for a step: its span over all ranks (one monotonic clock for every
    namespace), whether every rank's result was right, and the errors."""
    errors = [e for r in reports for e in r["errors"]]
    errors.sort(key=lambda e: "QP " not in e)  # the cause (a QP error) before its effects
    starts = [r["start"] for r in reports if r["start"]]
    start = min(starts) if starts else now_mono
    ok = all(r["ok"] for r in reports)
    # a failed step ends when rank 0 learnt it failed, not at its last completion
    end = max(r["end"] for r in reports) if ok else now_mono
    return {
        "type": "step",
        "iter": it,
        "start_mono": start,
        "end_mono": max(end, start),
        "ok": ok,
        # a rank whose result differs from the sum although nothing reported an error
        "corrupt": any(not r["ok"] and not r["errors"] for r in reports),
        "qp_errors": sum(1 for e in errors if "QP " in e),
        "errors": errors[:8],
    }


@dataclass
class TransportRun:
    """Everything one transport's soak produced."""

    transport: str
    duration_s: float
    t0_mono: float = 0.0
    t0_unix: float = 0.0
    steps: list[StepRec] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    spans: list[FaultSpan] = field(default_factory=list)
    wall_s: float = 0.0
    machine_busy_percent: float | None = None
    interrupted: bool = False

    def rel(self, mono: float) -> float:
        return mono - self.t0_mono

    def mark_faults(self, settle_s: float) -> None:
        now = self.wall_s
        for s in self.steps:
            s.faults = overlapping(s.start_s, s.end_s, self.spans, settle_s, now)

    def summary(self, size_bytes: int, ranks: int, settle_s: float) -> dict[str, Any]:
        self.mark_faults(settle_s)
        good = [s for s in self.steps if s.ok]
        failed = [s for s in self.steps if not s.ok]
        results = [j["result"] for j in self.jobs if j.get("result")]
        qp_errors = sum(
            max(
                sum(s.qp_errors for s in self.steps if s.job == j["job"]),
                int((j.get("result") or {}).get("qp_errors") or 0),
            )
            for j in self.jobs
        )
        out: dict[str, Any] = {
            "transport": self.transport,
            "duration_s": self.duration_s,
            "wall_s": round(self.wall_s, 2),
            "interrupted": self.interrupted,
            "steps": len(good),
            "steps_per_min": round(len(good) * 60 / self.wall_s, 2) if self.wall_s else 0.0,
            "bytes_verified": len(good) * size_bytes * ranks,
            "qp_errors": qp_errors,
            "failed_steps": len(failed),
            "verification_failures": sum(1 for s in self.steps if s.corrupt),
            "jobs": len(self.jobs),
            "restarts": max(0, len(self.jobs) - 1),
            "faults_applied": len(self.spans),
            "faults_late": [f.n for f in self.spans if f.late],
            "fault_errors": [f"{f.step.label}: {f.error}" for f in self.spans if f.error],
            "step_time_s": {
                "all": distribution([s.duration_s for s in good]),
                "fault": distribution([s.duration_s for s in good if s.faults]),
                "clean": distribution([s.duration_s for s in good if not s.faults]),
            },
            "fault_steps": sum(1 for s in good if s.faults),
            "busbw_bps_p50": _busbw(size_bytes, ranks, good),
            "retransmissions": sum(int(r.get("retransmissions") or 0) for r in results),
            "timeouts": sum(int(r.get("timeouts") or 0) for r in results),
            "failed": [
                {
                    "job": s.job,
                    "iter": s.it,
                    "start_s": round(s.start_s, 3),
                    "end_s": round(s.end_s, 3),
                    "faults": s.faults,
                    "errors": s.errors,
                }
                for s in failed
            ],
            "errors": [e for j in self.jobs for e in j.get("errors", [])][:50],
            **self._cpu(),
            "fault_log": [f.to_dict() for f in self.spans],
            "job_log": [_job_brief(j) for j in self.jobs],
            "step_columns": list(STEP_COLUMNS),
            "step_log": [s.row() for s in self.steps],
        }
        return out

    def _cpu(self) -> dict[str, Any]:
        """Machine busy over the whole run; each rank's CPU as the time-weighted mean over
        the jobs; mrc-bench's cpu_bound rule over both."""
        weights: list[float] = []
        per_rank: list[list[float]] = []
        for j in self.jobs:
            res = j.get("result") or {}
            ranks = res.get("cpu_percent_ranks") or []
            if ranks and all(isinstance(c, int | float) for c in ranks):
                weights.append(float(res.get("duration_s") or 0.0) or 1e-9)
                per_rank.append([float(c) for c in ranks])
        ranks_mean: list[float | None] = []
        if per_rank:
            total = sum(weights)
            for k in range(len(per_rank[0])):
                ranks_mean.append(
                    round(sum(w * r[k] for w, r in zip(weights, per_rank, strict=True)) / total, 1)
                )
        return {
            "machine_cpu_percent": self.machine_busy_percent,
            "cpu_percent_ranks": ranks_mean,
            **cpu.cpu_verdict(self.machine_busy_percent, list(ranks_mean)),
        }


def _busbw(size_bytes: int, ranks: int, good: Sequence[StepRec]) -> float | None:
    """nccl-tests' busbw at the median step time."""
    if not good:
        return None
    p50 = percentile(sorted(s.duration_s for s in good), 50)
    return round(size_bytes * 8 / p50 * 2 * (ranks - 1) / ranks, 1) if p50 > 0 else None


def _job_brief(j: dict[str, Any]) -> dict[str, Any]:
    res = j.get("result") or {}
    return {
        "job": j["job"],
        "start_s": j.get("start_s"),
        "end_s": j.get("end_s"),
        "returncodes": j.get("returncodes"),
        "iterations": res.get("iterations"),
        "verified": res.get("verified"),
        "qp_errors": res.get("qp_errors"),
        "cpu_percent_ranks": res.get("cpu_percent_ranks"),
        "machine_cpu_percent": res.get("machine_cpu_percent"),
        "switch_cpu_percent": res.get("switch_cpu_percent"),
        "cpu_bound": res.get("cpu_bound"),
        "errors": j.get("errors", [])[:10],
    }


# === the rank side: python -m lab.soak rank ... ===============================================


def build_rank_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab.soak rank",
        description="one rank of the soak's all-reduce (started by the soak in the host's "
        "namespace); rank 0 prints one JSON line per step and the result",
    )
    ap.add_argument("--lab", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--hosts", required=True, help="ring order, e.g. h0,h1,h2,h3")
    ap.add_argument("--size", type=size_arg, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--transport", choices=("mrc", "rocev2"), default="mrc")
    ap.add_argument("--duration-s", type=float, required=True)
    ap.add_argument("--timeout-s", type=float, default=STEP_TIMEOUT_S)
    ap.add_argument("--port", type=int, default=0)
    return ap


def rank_main(argv: Sequence[str]) -> int:
    from lab.fabric import state as lab_state
    from lab.proc.control import ControlError
    from lab.workloads.bench.allreduce import AllreduceParams, run_rank
    from mrcnic.io import aio

    a = build_rank_parser().parse_args(argv)
    st = lab_state.load(a.lab)
    hosts = [bc.parse_host(st.plan, h) for h in a.hosts.split(",")]
    p = AllreduceParams(
        hosts=hosts,
        size=a.size,
        iters=1,
        warmup=0,  # every step counts: the first one after a restart is a real step too
        transport=a.transport,
        seed=a.seed,
        timeout_s=a.timeout_s,
        duration_s=a.duration_s,
    )

    def on_step(it: int, reports: list[dict[str, Any]]) -> None:
        print(json.dumps(step_line(it, reports, time.monotonic())), flush=True)

    def on_report(it: int, report: dict[str, Any]) -> None:
        # A failed part is said at once: the other ranks may wait for data that will never
        # come, and the soak ends the job now, as a launcher would, instead of a timeout later.
        if report["errors"]:
            line = step_line(it, [report], time.monotonic())
            print(json.dumps({**line, "type": "rank_error"}), flush=True)

    try:
        res = aio.run(run_rank(st, a.rank, p, a.port, on_step if a.rank == 0 else None, on_report))
    except (ControlError, OSError, ValueError) as e:
        print(f"soak rank {a.rank}: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    if res is not None:
        # wrapped: the result has a "type" key of its own (the element type)
        print(json.dumps({"type": "result", "result": res}), flush=True)
    return 0


# === one all-reduce job: a process per rank ===================================================


@dataclass(frozen=True)
class SoakConfig:
    """The run's settings that every job and transport shares."""

    hosts: list[str]
    size: int
    seed: int
    minutes: float
    events_per_min: float
    step_timeout_s: float = STEP_TIMEOUT_S
    settle_s: float = SETTLE_S
    progress_s: float = 30.0
    verbose: bool = False

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0

    @property
    def ring_size(self) -> int:
        """Bytes per rank the all-reduce really uses (a multiple of 4 x ranks)."""
        n = len(self.hosts)
        return self.size - self.size % (4 * n)


class Job:
    """The rank processes of one all-reduce (``ip netns exec NS python -m lab.soak rank``),
    each in its own session so that it is stopped by its PID's group and nothing else.  Their
    stdout lines (rank 0's steps and result, any rank's error) arrive on :attr:`lines`, each
    with its ``rank``, from one reader thread per rank."""

    def __init__(
        self, state: LabState, cfg: SoakConfig, transport: str, duration_s: float, n: int
    ) -> None:
        self.state, self.cfg, self.transport, self.n = state, cfg, transport, n
        self.duration_s = duration_s
        self.procs: list[tuple[str, subprocess.Popen[str], IO[str]]] = []
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.result: dict[str, Any] | None = None
        self.failed = False  # a rank reported an error: the job is over (as a launcher would)
        self._readers: list[threading.Thread] = []

    def _argv(self, rank: int, port: int) -> list[str]:
        host = self.cfg.hosts[rank]
        args = ["rank", "--lab", self.state.name, "--rank", str(rank)]
        args += ["--hosts", ",".join(self.cfg.hosts), "--size", str(self.cfg.size)]
        args += ["--seed", str(self.cfg.seed), "--transport", self.transport]
        args += ["--duration-s", f"{self.duration_s:.3f}", "--port", str(port)]
        args += ["--timeout-s", f"{self.cfg.step_timeout_s:g}"]
        ns = self.state.plan.namespace(host)
        return ["ip", "netns", "exec", ns, sys.executable, "-m", "lab.soak", *args]

    def _spawn(self, rank: int, port: int) -> subprocess.Popen[str]:
        # kept open for the job's life (rank 0's names its port; failures show their tail);
        # Job.close closes it
        err = tempfile.TemporaryFile("w+")  # noqa: SIM115
        p = subprocess.Popen(
            self._argv(rank, port),
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
            start_new_session=True,
        )
        self.procs.append((self.cfg.hosts[rank], p, err))
        reader = threading.Thread(target=self._read, args=(rank, p), daemon=True)
        reader.start()
        self._readers.append(reader)
        return p

    def start(self) -> None:
        rank0 = self._spawn(0, 0)
        port = self._wait_port(rank0, self.procs[0][2])
        for r in range(1, len(self.cfg.hosts)):
            self._spawn(r, port)

    def _wait_port(self, p: subprocess.Popen[str], err: IO[str]) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            err.seek(0)
            m = _LISTENING.search(err.read())
            if m:
                return int(m.group(1))
            if p.poll() is not None:
                break
            time.sleep(0.02)
        raise LabError(f"rank 0 did not start listening: {self.stderr_tail(0)}")

    def _read(self, rank: int, p: subprocess.Popen[str]) -> None:
        assert p.stdout is not None
        for line in p.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict):
                    self.lines.put({**msg, "rank": rank})

    def running(self) -> bool:
        return any(p.poll() is None for _h, p, _e in self.procs)

    def rank0_done(self) -> bool:
        return bool(self.procs) and self.procs[0][1].poll() is not None

    def drain_readers(self, timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        for t in self._readers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to every rank's own process group (by PID),
        each signal to all ranks at once."""
        for sig, wait_s in ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            alive = [p for _h, p, _e in self.procs if p.poll() is None]
            if not alive:
                return
            for p in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)  # its own session: only the rank and its children
            deadline = time.monotonic() + wait_s
            for p in alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=max(0.01, deadline - time.monotonic()))

    def returncodes(self) -> list[int | None]:
        return [p.returncode for _h, p, _e in self.procs]

    def stderr_tail(self, rank: int, lines: int = 6) -> str:
        if rank >= len(self.procs):
            return ""
        err = self.procs[rank][2]
        with contextlib.suppress(OSError, ValueError):
            err.seek(0)
            text = [ln for ln in err.read().splitlines() if "listening on" not in ln]
            return " | ".join(text[-lines:])
        return ""

    def close(self) -> None:
        for _h, _p, err in self.procs:
            with contextlib.suppress(OSError):
                err.close()


# === one transport: jobs back to back while the schedule plays ================================


class TransportSoak:
    """Runs one transport for the configured time: starts the schedule, runs jobs back to
    back (a new one after a failed step), turns the ranks' lines into :class:`StepRec` s,
    prints faults and progress as they happen, undoes every fault at the end and makes sure
    every switch is up again before the next transport."""

    def __init__(
        self,
        state: LabState,
        cfg: SoakConfig,
        transport: str,
        steps: Sequence[Step],
        say: Printer = _say,
    ) -> None:
        self.state, self.cfg, self.transport, self.say = state, cfg, transport, say
        self.title = TITLES.get(transport, transport)
        self.run = TransportRun(transport, cfg.duration_s)
        self.schedule = Schedule(state, steps, self._echo)
        self._shown: dict[int, tuple[bool, bool]] = {}  # fault n -> (start shown, end shown)
        self._last_progress = 0.0
        self._failed_at: dict[tuple[int, int], StepRec] = {}  # (job, iter) -> its failed step

    def _echo(self, text: str) -> None:
        # the commands are in the fault log; on screen only failures unless --verbose
        if self.cfg.verbose or "failed" in text:
            self.say(text)

    def execute(self) -> TransportRun:
        run = self.run
        run.t0_mono, run.t0_unix = time.monotonic(), time.time()
        ticks = cpu.machine_ticks()
        self.schedule.start(run.t0_mono)
        deadline = run.t0_mono + self.cfg.duration_s
        try:
            while deadline - time.monotonic() >= MIN_JOB_S:
                left_s = deadline - time.monotonic()
                self._run_job(
                    Job(self.state, self.cfg, self.transport, left_s, len(run.jobs)), deadline
                )
            # the last faults play out even when no job fits in what is left
            while time.monotonic() < deadline:
                self._poll_faults()
                time.sleep(0.2)
            self._progress(force=True)
        except KeyboardInterrupt:
            run.interrupted = True
            raise
        finally:
            self.schedule.finish()
            run.wall_s = time.monotonic() - run.t0_mono
            run.machine_busy_percent = _busy_percent(ticks, cpu.machine_ticks())
            try:
                if not run.interrupted:
                    self._switches_back()
            finally:
                self._poll_faults()
                run.spans = self._spans()
        return run

    def _run_job(self, job: Job, deadline: float) -> None:
        rec: dict[str, Any] = {"job": job.n, "start_s": round(self.run.rel(time.monotonic()), 3)}
        self.run.jobs.append(rec)
        hard_stop = deadline + self.cfg.step_timeout_s + 90.0
        try:
            job.start()
            while not job.rank0_done() and not job.failed and time.monotonic() < hard_stop:
                self._take_lines(job, rec, 0.2)
                self._poll_faults()
                self._progress()
            if not (job.rank0_done() or job.failed):
                rec.setdefault("errors", []).append("rank 0 still running after the run: stopped")
            self._finish_job(job, rec)
        except LabError as e:
            rec.setdefault("errors", []).append(str(e))
            self.say(f"  {self.title}: job {job.n} did not start: {e}")
            time.sleep(1.0)  # do not spin on a lab that cannot start a job
        finally:
            job.stop()
            job.close()
            rec["end_s"] = round(self.run.rel(time.monotonic()), 3)
            rec["returncodes"] = job.returncodes()

    def _finish_job(self, job: Job, rec: dict[str, Any]) -> None:
        if job.failed:
            job.stop()  # at once, as a launcher ends a job when one rank fails
        else:
            # the other ranks end right after rank 0; give them a moment, then stop them
            t_end = time.monotonic() + 10.0
            while job.running() and time.monotonic() < t_end:
                time.sleep(0.05)
            job.stop()
        job.drain_readers()
        self._take_lines(job, rec, 0.0)
        rcs = job.returncodes()
        if job.result is None and not job.failed:
            rec.setdefault("errors", []).append(
                f"no result from rank 0 (exit {rcs[0]}): {job.stderr_tail(0)}"
            )
        for r, rc in enumerate(rcs):
            if rc not in (0, None) and r > 0 and not job.failed:
                rec.setdefault("errors", []).append(f"rank {r} exit {rc}: {job.stderr_tail(r)}")
        failed = [s for s in self.run.steps if s.job == job.n and not s.ok]
        if failed or rec.get("errors"):
            why = failed[0].errors[:1] if failed else rec["errors"][:1]
            what = "by a failed step" if failed else "with an error"
            self.say(
                f"  [{self.run.rel(time.monotonic()):7.1f} s] {self.title}: job {job.n} ended "
                f"{what}: {(why[0] if why else 'no error text')[:160]}; starting a new one"
            )

    def _take_lines(self, job: Job, rec: dict[str, Any], wait_s: float) -> None:
        try:
            msg = job.lines.get(timeout=wait_s) if wait_s > 0 else job.lines.get_nowait()
        except queue.Empty:
            return
        while True:
            kind = msg.get("type")
            if kind == "step":
                self._add_step(job.n, msg)
            elif kind == "rank_error":
                self._add_step(job.n, msg)
                job.failed = True
            elif kind == "result":
                job.result = msg["result"]
                rec["result"] = _slim_result(job.result)
            try:
                msg = job.lines.get_nowait()
            except queue.Empty:
                return

    def _add_step(self, job_n: int, msg: dict[str, Any]) -> None:
        """A step from rank 0's line, or a failed one from a rank's error line (the first
        report of a failed step makes it; later ones add their errors to it)."""
        it = int(msg["iter"])
        errors = list(msg.get("errors") or [])
        old = self._failed_at.get((job_n, it))
        if old is not None:
            # rank 0's step line repeats what its own error line said: count each error once
            old.errors = (old.errors + [e for e in errors if e not in old.errors])[:20]
            old.qp_errors = max(old.qp_errors, sum(1 for e in old.errors if "QP " in e))
            old.corrupt = old.corrupt or bool(msg.get("corrupt"))
            return
        step = StepRec(
            job=job_n,
            it=it,
            start_s=self.run.rel(float(msg["start_mono"])),
            end_s=self.run.rel(float(msg["end_mono"])),
            ok=bool(msg["ok"]),
            corrupt=bool(msg.get("corrupt")),
            qp_errors=int(msg.get("qp_errors") or 0),
            errors=errors,
        )
        self.run.steps.append(step)
        if not step.ok:
            self._failed_at[(job_n, it)] = step

    # --- faults and progress on screen -------------------------------------------------------
    def _spans(self) -> list[FaultSpan]:
        return [self._span(n, a) for n, a in enumerate(list(self.schedule.applied), start=1)]

    def _span(self, n: int, a: Applied) -> FaultSpan:
        t0 = self.run.t0_unix
        return FaultSpan(
            n,
            a.step,
            a.start_unix - t0,
            None if a.end_unix is None else a.end_unix - t0,
            list(a.commands),
            a.error,
        )

    def _poll_faults(self) -> None:
        for n, a in enumerate(list(self.schedule.applied), start=1):
            started, ended = self._shown.get(n, (False, False))
            if not started:
                extra = f" for {a.step.down_ms / 1000:.1f} s" if a.step.kind == "reboot" else ""
                self.say(
                    f"  [{a.start_unix - self.run.t0_unix:7.1f} s] fault {n}: {a.step.label}{extra}"
                )
                started = True
            if not ended and a.end_unix is None and self._late_switch_ready(a):
                a.end_unix = time.time()
            if not ended and a.end_unix is not None:
                late = " (late: its restart had failed)" if a.error else ""
                self.say(
                    f"  [{a.end_unix - self.run.t0_unix:7.1f} s] fault {n} undone: "
                    f"{a.step.heal_label} ({a.end_unix - a.start_unix:.1f} s){late}"
                )
                ended = True
            self._shown[n] = (started, ended)

    def _late_switch_ready(self, a: Applied) -> bool:
        """A reboot whose restart failed (e.g. the switch process answered its start request
        too late) is over when the switch says it is ready again."""
        if a.step.kind != "reboot" or a.error is None:
            return False
        rec = self.state.processes.get(a.step.a)
        return rec is not None and pyswitch.is_ready(rec)

    def _switches_back(self, timeout_s: float = 120.0) -> None:
        """Every python switch ready before the next transport (a reboot whose restart failed
        may still be starting): waited for, then started again, else LabError."""
        recs = [r for r in self.state.processes.values() if not pyswitch.is_ready(r)]
        if not recs:
            return
        names = ", ".join(r.node for r in recs)
        self.say(f"  waiting for switches that are not up again: {names}")
        try:
            pyswitch.wait_ready(recs, timeout_s=timeout_s)
            return
        except LabError as e:
            self.say(f"  {e}: starting them again")
        faults = Faults(self.state, echo=self._echo)
        for r in recs:
            if not pyswitch.is_ready(r):
                faults.reboot(r.node, down_ms=0)
        pyswitch.wait_ready(recs, timeout_s=timeout_s)

    def _progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < self.cfg.progress_s:
            return
        self._last_progress = now
        self.say(progress_line(self.title, self.run, now, self.cfg))


def _busy_percent(a: tuple[int, int], b: tuple[int, int]) -> float | None:
    total, idle = b[0] - a[0], b[1] - a[1]
    return round(100 * (1 - idle / total), 1) if total > 0 else None


def _slim_result(res: dict[str, Any]) -> dict[str, Any]:
    """A job's all-reduce result without its per-iteration lists (the step log has them)."""
    drop = ("iteration_times_s",)
    return {k: v for k, v in res.items() if k not in drop}


def progress_line(title: str, run: TransportRun, now_mono: float, cfg: SoakConfig) -> str:
    t = run.rel(now_mono)
    good = [s.duration_s for s in run.steps if s.ok]
    failed = sum(1 for s in run.steps if not s.ok)
    qp = sum(s.qp_errors for s in run.steps)
    dist = distribution(good[-2000:])  # the recent steps: the line shows the run as it is now
    times = (
        f"step p50 {dist['p50_s'] * 1e3:.0f} ms p99 {dist['p99_s'] * 1e3:.0f} ms"
        if good
        else "no step yet"
    )
    gb = len(good) * cfg.ring_size * len(cfg.hosts) / 1e9
    return (
        f"  [{t:7.1f} s / {cfg.duration_s:.0f}] {title}: {len(good)} steps verified "
        f"({gb:.2f} GB), {failed} failed, QP errors {qp}, {times}, jobs {len(run.jobs)}"
    )


# === the document, the screen, the plot ======================================================


def machine_info() -> dict[str, Any]:
    """What the figures depend on: CPU model and count, memory, kernel, Python, load."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_gib": round(mem_kb / (1 << 20), 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def code_info() -> dict[str, Any]:
    """Which code ran: the git commit and how many tracked files differed from it (None
    outside a git checkout, e.g. an exported tree), and the calibration's hash of the code a
    frame's cost depends on."""
    head: str | None = None
    dirty: int | None = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(REPO)]
        r = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if r.returncode == 0:
            head = r.stdout.strip()
            st = subprocess.run(
                [*git, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            dirty = len(st.stdout.splitlines()) if st.returncode == 0 else None
    return {"git_head": head, "modified_files": dirty, "code_hash": calibrate.code_hash()}


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def verdict(doc: dict[str, Any]) -> tuple[bool, list[str]]:
    """The exit status's reasons: MRC must have no QP error, no failed step and at least one
    step; no transport may have a step whose result was wrong."""
    reasons = []
    runs: dict[str, dict[str, Any]] = doc["transports"]
    mrc = runs.get("mrc")
    if mrc is not None:
        if mrc["qp_errors"]:
            reasons.append(f"MRC had {mrc['qp_errors']} QP errors")
        if mrc["failed_steps"]:
            reasons.append(f"MRC had {mrc['failed_steps']} failed steps")
        if not mrc["steps"]:
            reasons.append("MRC completed no step")
    for key, r in runs.items():
        if r["verification_failures"]:
            reasons.append(
                f"{TITLES.get(key, key)}: {r['verification_failures']} steps failed verification"
            )
    return not reasons, reasons


def _ms(d: dict[str, Any], key: str) -> str:
    return f"{d[key] * 1e3:.0f}" if d.get("count") else "-"


def _dist_cell(d: dict[str, Any]) -> str:
    if not d.get("count"):
        return "-"
    return "/".join(_ms(d, k) for k in ("p50_s", "p90_s", "p99_s", "max_s")) + f" (n={d['count']})"


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def render_summary(doc: dict[str, Any]) -> str:
    """The closing screen, from the JSON document (pure)."""
    lab = doc["lab"]
    runs: dict[str, dict[str, Any]] = doc["transports"]
    kinds: dict[str, int] = {}
    for s in doc["schedule"]:
        k = fault_kind(Step(**{k: v for k, v in s.items() if k in Step.__slots__}))
        kinds[k] = kinds.get(k, 0) + 1
    lines = [
        f"mrc soak: {doc['minutes']:g} min per transport, seed {doc['seed']}, "
        f"{doc['events_per_min']:g} faults/min planned ({len(doc['schedule'])}: "
        + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
        + ")",
        f"ring {','.join(doc['hosts'])}, {doc['size']} B per rank; {lab['planes']} planes x "
        f"{lab['rate_mbit']:g} Mb/s, {lab['switch']} switches; {doc['started_at']}",
    ]
    keys = list(runs)
    w = 34

    def row(label: str, cells: list[str]) -> str:
        return f"{label:<34}" + "".join(f"{c:<{w}}" for c in cells).rstrip()

    lines.append(row("", [TITLES.get(k, k) for k in keys]))
    r = [runs[k] for k in keys]
    lines.append(row("steps verified", [f"{x['steps']} ({x['steps_per_min']:g}/min)" for x in r]))
    lines.append(row("bytes verified", [_gb(x["bytes_verified"]) for x in r]))
    lines.append(row("QP errors", [str(x["qp_errors"]) for x in r]))
    lines.append(
        row("failed steps / restarts", [f"{x['failed_steps']} / {x['restarts']}" for x in r])
    )
    lines.append(row("wrong results (verification)", [str(x["verification_failures"]) for x in r]))
    lines.append(
        row(
            "faults applied (late or cut short)",
            [f"{x['faults_applied']} ({len(x.get('faults_late', []))})" for x in r],
        )
    )
    lines.append("step time, ms: p50/p90/p99/max")
    for part, label in (
        ("all", "  all steps"),
        ("clean", "  clean steps"),
        ("fault", "  fault steps"),
    ):
        lines.append(row(label, [_dist_cell(x["step_time_s"][part]) for x in r]))
    lines.append(
        row(
            "CPU-bound (>=85% busy, NIC>=90%)",
            [
                f"{'YES' if x.get('cpu_bound') else 'no'} ({x.get('machine_cpu_percent')}% busy)"
                for x in r
            ],
        )
    )
    for key, x in runs.items():
        for e in x.get("fault_errors", [])[:3]:
            lines.append(f"  {TITLES.get(key, key)} fault error: {e}")
    ok, reasons = doc["verdict"]["ok"], doc["verdict"]["reasons"]
    lines.append("verdict: " + ("OK" if ok else "FAILED: " + "; ".join(reasons)))
    out = doc.get("outputs") or {}
    if out:
        lines.append("  ".join(f"{k}: {v}" for k, v in out.items()))
    return "\n".join(lines)


def _points(r: dict[str, Any], which: str) -> tuple[list[float], list[float]]:
    """(start_s, step time in ms) of a run's clean, fault or failed steps."""
    cols = {c: i for i, c in enumerate(r["step_columns"])}
    ok, fault, t0, t1 = cols["ok"], cols["faults"], cols["start_s"], cols["end_s"]
    keep = {
        "clean": lambda x: x[ok] and not x[fault],
        "fault": lambda x: x[ok] and bool(x[fault]),
        "failed": lambda x: not x[ok],
    }[which]
    rows = [x for x in r["step_log"] if keep(x)]
    return [x[t0] for x in rows], [max(1e-3, (x[t1] - x[t0]) * 1e3) for x in rows]


def _plot_panel(ax: Any, key: str, r: dict[str, Any], settle_s: float) -> None:
    for f in r["fault_log"]:
        end = f["end_s"] if f["end_s"] is not None else f["start_s"]
        ax.axvspan(f["start_s"], end + settle_s, color="tab:red", alpha=0.08, lw=0)
    ax.scatter(*_points(r, "clean"), s=3, c="tab:blue", label="clean step")
    ax.scatter(*_points(r, "fault"), s=5, c="tab:red", label="fault step")
    ax.scatter(*_points(r, "failed"), s=30, c="black", marker="x", label="failed step")
    ax.set_yscale("log")
    ax.set_ylabel("step time, ms")
    ax.set_title(
        f"{TITLES.get(key, key)}: {r['steps']} steps verified, QP errors {r['qp_errors']}, "
        f"failed steps {r['failed_steps']}",
        fontsize=10,
        loc="left",
    )
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=7, markerscale=2)


def plot(doc: dict[str, Any], path: str) -> str:
    """A PNG: per transport, step time against time (log scale), fault steps in red, failed
    steps as black crosses, fault windows (with the settle time) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs: dict[str, dict[str, Any]] = doc["transports"]
    n = max(1, len(runs))
    fig, axes = plt.subplots(n, 1, figsize=(11, 3.0 * n + 0.6), sharex=True, squeeze=False)
    for ax, (key, r) in zip(axes[:, 0], runs.items(), strict=False):
        _plot_panel(ax, key, r, doc["settle_s"])
    axes[-1, 0].set_xlabel("seconds since the transport's run started (shaded: faults)")
    fig.suptitle(
        f"soak, seed {doc['seed']}: all-reduce step times while links flap, switches reboot, "
        "NIC ports go down and links lose packets",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# === main =====================================================================================


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab.soak",
        description="A soak with random faults: a ring all-reduce loop on its own lab for "
        "--minutes per transport while a seeded schedule flaps links, reboots T0 and T1 "
        "switches, downs NIC ports and adds loss; every step verified. Needs root. Manual: "
        "docs/reliability.md.",
    )
    ap.add_argument("--minutes", type=float, default=30.0, help="per transport [30]")
    ap.add_argument("--seed", type=int, default=1, help="seed of the schedule and data [1]")
    ap.add_argument("--name", default=DEFAULT_NAME, help=f"lab name [{DEFAULT_NAME}]")
    ap.add_argument(
        "--transports", default="mrc,rocev2", help="comma-separated, in order [mrc,rocev2]"
    )
    ap.add_argument(
        "--events-per-min",
        type=float,
        default=4.0,
        help=f"faults per minute, at most {MAX_EVENTS_PER_MIN:g} [4]",
    )
    ap.add_argument(
        "--size", type=size_arg, default="4M", metavar="BYTES", help="bytes per rank [4M]"
    )
    ap.add_argument("--hosts", default="h0,h1,h2,h3", help="the ring [h0,h1,h2,h3]")
    ap.add_argument(
        "--rate-mbit",
        type=calibrate.rate_arg,
        default=calibrate.AUTO,
        metavar="R",
        help="link rate in Mb/s; auto: calibrated for the ring's flows, cached per boot [auto]",
    )
    ap.add_argument("--recalibrate", action="store_true", help="with auto: measure again")
    ap.add_argument("--switch", choices=("python", "kernel"), default="python")
    ap.add_argument(
        "--step-timeout-s",
        type=time_arg,
        default=STEP_TIMEOUT_S,
        metavar="S",
        help=f"a step stuck this long fails [{STEP_TIMEOUT_S:g}]",
    )
    ap.add_argument(
        "--settle-s",
        type=time_arg,
        default=SETTLE_S,
        metavar="S",
        help=f"steps this soon after a fault's undo count as fault steps [{SETTLE_S:g}]",
    )
    ap.add_argument(
        "--progress-s",
        type=time_arg,
        default=None,
        metavar="S",
        help="seconds between progress lines [30; 10 for runs under 5 minutes]",
    )
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
        line = f"links at {params.rate_mbit:g} Mb/s as given (--rate-mbit)"
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


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # the same clean-up as Ctrl-C: faults undone, lab down


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["rank"]:
        return rank_main(argv[1:])
    args = build_parser().parse_args(argv)
    say = _say
    if not have_net_admin():
        say("lab.workloads.soak needs root: it builds a lab of network namespaces (CAP_NET_ADMIN).")
        return 2
    try:
        params = resolve(None, name=args.name, switch=args.switch)
        cfg, transports = _config(args, params)
    except (UsageError, ParamError) as e:
        say(f"lab.workloads.soak: {e}")
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
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
            say(f"lab {params.name} left up (--keep-lab): mrc-lab down --name {params.name}")
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
        "started_at": _now_iso(),
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
        say(f"could not tear lab {name} down ({e}); run: mrc-lab down --name {name}")


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
    doc["finished_at"] = _now_iso()
    doc["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    doc["outputs"] = outputs
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    sys.exit(main())
