"""A training job under a fault schedule, for the experiments about jobs (claims 7 and 9):
the soak's ring all-reduce (lab/workloads/soak/: one process per rank, every step verified, a job
restarted when a step fails, as a launcher would) for a fixed time while lab/proc/schedule's
``Step`` s play, and the BMWG AI-fabric figures of its steps: step time percentiles, JCT
(the run's wall time for the steps it completed), busbw, restarts, recovery time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.fabric.params import LabParams
from lab.fabric.state import LabState
from lab.proc.schedule import Step
from lab.workloads.experiments.base import Context, percentile
from lab.workloads.soak.config import STEP_COLUMNS, SoakConfig
from lab.workloads.soak.runner import TransportSoak

JOB_SIZE = 4 << 20  # bytes per rank per step (the soak's default)


@dataclass
class StepTimes:
    """One job run's steps: (start_s, end_s, ok, faulted) on the run's clock."""

    rows: list[tuple[float, float, bool, bool]]

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> StepTimes:
        cols = list(summary.get("step_columns") or STEP_COLUMNS)
        i_start, i_end = cols.index("start_s"), cols.index("end_s")
        i_ok, i_f = cols.index("ok"), cols.index("faults")
        return cls(
            [(r[i_start], r[i_end], bool(r[i_ok]), bool(r[i_f])) for r in summary["step_log"]]
        )

    def durations(self, *, ok: bool = True) -> list[float]:
        return [e - s for s, e, k, _f in self.rows if k or not ok]

    def between(self, t0: float, t1: float) -> list[float]:
        """Durations of the completed steps that overlap [t0, t1]."""
        return [e - s for s, e, k, _f in self.rows if k and e >= t0 and s <= t1]


def relative_step_series(
    step_log: list | None, median_s: float | None = None
) -> tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]]:
    """Each step's duration over ``median_s`` (default: the run's own median completed step),
    so transports whose steps differ tenfold share one scale around 1: ((end times, ratios)
    of the completed steps, (end times, ratios) of the failed ones)."""
    st = StepTimes.from_summary({"step_log": step_log or []})
    done = sorted(st.durations())
    base = median_s or (done[len(done) // 2] if done else 1.0)
    ok = [(e, (e - s) / base) for s, e, k, _f in st.rows if k]
    failed = [(e, (e - s) / base) for s, e, k, _f in st.rows if not k]
    return ([x for x, _ in ok], [y for _, y in ok]), (
        [x for x, _ in failed],
        [y for _, y in failed],
    )


def recovery_s(steps: StepTimes, fault_at_s: float, p99_s: float) -> float | None:
    """From the fault until the last completed step slower than the steady-state P99 ends
    (0: no step was); None when no step completed after the fault."""
    after = [(s, e) for s, e, k, _f in steps.rows if k and e >= fault_at_s]
    if not after:
        return None
    slow = [e for s, e in after if e - s > p99_s]
    return max(0.0, max(slow) - fault_at_s) if slow else 0.0


def run_job(
    ctx: Context, state: LabState, params: LabParams, transport: str, steps: Sequence[Step],
    seconds: float, size: int = JOB_SIZE, seed: int = 1,
) -> dict[str, Any]:  # fmt: skip
    """Run the all-reduce over every host for ``seconds`` while ``steps`` play; the soak's
    summary (steps, restarts, qp_errors, failed_steps, step_time_s, busbw_bps_p50, step_log,
    fault_log, ...)."""
    hosts = [h.name for h in state.plan.hosts()]
    cfg = SoakConfig(hosts=hosts, size=size, seed=seed, minutes=seconds / 60.0,
                     events_per_min=1.0, progress_s=max(10.0, seconds / 3))  # fmt: skip
    run = TransportSoak(state, cfg, transport, list(steps), say=ctx.echo).execute()
    summary = run.summary(cfg.ring_size, len(hosts), cfg.settle_s)
    summary["hosts"] = hosts
    summary["size_bytes"] = cfg.ring_size
    summary["link_rate_mbit"] = params.rate_mbit
    return summary


def step_figures(summary: dict[str, Any], clean_p99_s: float | None = None) -> dict[str, Any]:
    """The BMWG figures of one job run: step time p50/p99/max (all, clean, under faults),
    JCT per step, busbw, restarts, failed steps, QP errors."""
    st = StepTimes.from_summary(summary)
    ok = st.durations()
    clean = [e - s for s, e, k, f in st.rows if k and not f]
    fault = [e - s for s, e, k, f in st.rows if k and f]
    p99_clean = clean_p99_s if clean_p99_s is not None else percentile(clean, 99)
    return {
        "steps": len(ok),
        "step_p50_s": percentile(ok, 50),
        "step_p99_s": percentile(ok, 99),
        "step_max_s": max(ok) if ok else None,
        "clean_step_p50_s": percentile(clean, 50),
        "clean_step_p99_s": p99_clean,
        "fault_steps": len(fault),
        "fault_step_max_s": max(fault) if fault else None,
        "busbw_mbps": (summary.get("busbw_bps_p50") or 0) / 1e6 or None,
        "restarts": summary.get("restarts"),
        "failed_steps": summary.get("failed_steps"),
        "qp_errors": summary.get("qp_errors"),
        "retransmissions": summary.get("retransmissions"),
        "timeouts": summary.get("timeouts"),
        "wall_s": summary.get("wall_s"),
    }
