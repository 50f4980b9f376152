"""The soak's settings: the defaults of a run and :class:`SoakConfig`, what every job and
transport of one run shares."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_NAME = "mrcsoak"
TITLES = {"mrc": "MRC", "rocev2": "RoCEv2"}

SETTLE_S = 1.0  # a step this soon after a fault's undo still counts as a fault step
# An all-reduce step stuck this long without an error fails (its job is restarted). A QP
# error ends a job at once; this only catches a stall, and must not take the baseline's slow
# steps under loss (several times its ~6 s at the calibrated rate) for failures.
STEP_TIMEOUT_S = 60.0
MIN_JOB_S = 5.0  # no new job when less than this is left of the run
START_TIMEOUT_S = 60.0  # rank 0 must announce its port within this
LATE_S = 1.0  # a fault applied this much after its planned time is reported as late
STEP_COLUMNS = ("job", "iter", "start_s", "end_s", "ok", "faults")


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
