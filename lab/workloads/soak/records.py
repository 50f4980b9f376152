"""What one transport's soak measured (pure): step records, fault spans on the run's clock,
the step-time statistics and the summary that goes into the JSON document."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.proc import cpu
from lab.proc.schedule import Step
from lab.workloads.soak.config import LATE_S, STEP_COLUMNS
from lab.workloads.soak.schedule import fault_kind


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
