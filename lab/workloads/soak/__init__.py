"""A soak with random faults: an all-reduce loop for minutes while a seeded schedule breaks
the fabric, every step verified (issue 13, part 3; manual: docs/design/reliability.md).

    python -m lab.soak --minutes 30 --seed 1 [--lab mrcsoak] [--transports mrc,rocev2]
                       [--events-per-min 4] [--size 4M] [--hosts h0,h1,h2,h3]
                       [--rate auto|RATE] [--out results/soak.json] [--keep-lab]

Brings up its own lab (the default 8-plane shape, python switches, the link rate from the
calibration of the ring's flows unless ``--rate`` is given), then for each transport in
turn (MRC first, then the RoCEv2 baseline) runs a ring all-reduce loop (``lab.workloads.bench.allreduce``:
one process per rank, every rank checks its result against the locally computed sum after
every step) for ``--minutes`` while the same seeded schedule, replayed from the start of each
transport's run, flaps T0-T1 links, reboots T0 and T1 switches, takes NIC ports down and adds
loss on links (:func:`make_schedule`). Each fault is undone before the next one; whatever is
still applied is undone at the end, on an error and on Ctrl-C (``lab.proc.schedule.Schedule``).

A step that fails (a QP error, a step timeout) ends that all-reduce job, as it would end a
training job; the soak starts a new one (new processes, new QPs) and counts the restart.
Each rank process is ``ip netns exec <lab>-<host> python -m lab.soak rank ...``: rank 0
prints every step as one JSON line as soon as it completes, so a long run shows progress and
loses nothing when it is stopped.

Output: progress lines, a summary screen, a JSON document (``--out``) and a PNG of step time
against time with the fault steps marked. Exit status 1 when MRC had a QP error or a failed
step, when any transport's step failed its verification, or when MRC completed no step; 2 on
a usage error; 130 on Ctrl-C.

The package, one module per job: ``config`` (defaults, :class:`SoakConfig`), ``schedule``
(the seeded faults), ``records`` (steps, fault spans, statistics, the summary), ``rank`` (one
rank process), ``job`` (one all-reduce job's processes), ``runner`` (one transport's soak),
``report`` (document, verdict, screen, plot) and ``main`` (the command line). The names below
are its public surface.
"""

from lab.workloads.soak.config import (
    DEFAULT_NAME,
    LATE_S,
    SETTLE_S,
    STEP_COLUMNS,
    STEP_TIMEOUT_S,
    TITLES,
    SoakConfig,
)
from lab.workloads.soak.main import build_parser, calibration_name, choose_rate, main
from lab.workloads.soak.records import (
    FaultSpan,
    StepRec,
    TransportRun,
    distribution,
    overlapping,
    percentile,
    step_line,
)
from lab.workloads.soak.report import plot, render_summary, verdict
from lab.workloads.soak.runner import TransportSoak, progress_line
from lab.workloads.soak.schedule import (
    BOOT_S,
    FAULT_KINDS,
    GAP_S,
    LOSS_PERCENTS,
    MAX_EVENTS_PER_MIN,
    fault_kind,
    make_schedule,
    random_fault,
)

__all__ = [
    "BOOT_S",
    "DEFAULT_NAME",
    "FAULT_KINDS",
    "GAP_S",
    "LATE_S",
    "LOSS_PERCENTS",
    "MAX_EVENTS_PER_MIN",
    "SETTLE_S",
    "STEP_COLUMNS",
    "STEP_TIMEOUT_S",
    "TITLES",
    "FaultSpan",
    "SoakConfig",
    "StepRec",
    "TransportRun",
    "TransportSoak",
    "build_parser",
    "calibration_name",
    "choose_rate",
    "distribution",
    "fault_kind",
    "main",
    "make_schedule",
    "overlapping",
    "percentile",
    "plot",
    "progress_line",
    "random_fault",
    "render_summary",
    "step_line",
    "verdict",
]
