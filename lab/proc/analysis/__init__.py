"""Goodput timelines under faults: capacity that survives, dips, text and PNG rendering.

Pure arithmetic over what ``mrc-bench write --timeline-ms MS --json`` prints (a list of
``[t_s, goodput_bps]``, ``t_s`` the start of each bin, relative to the start of the write) and
a schedule of faults on the lab. Used by ``make demo`` (lab/workloads/demo.py) and ``make bench``
(bench/bench_e2e.py); tested on synthetic timelines in tests/unit/test_timeline*.py.

Definitions (docs/results/performance.md quotes them):

- **capacity** at time t: what the fabric that survives at t can carry for one flow src ->
  dst. Per plane: ``min(src port, dst port, sum over live T1 j of the T0a-T1j-T0b path)``,
  summed over the planes, each link at the lab's rate. Random loss does not reduce it
  (the links still carry their rate; repairing loss is the transport's job).
  :func:`scaled_capacity` multiplies mrc-bench's own ``capacity_bps`` (the undisturbed
  figure) by the surviving share, so both agree on what "full" is.
- **fraction** of a bin: goodput / time-weighted capacity over the bin.
- **threshold**: 0.9 of capacity (the issue's "back to >= 90% of what the surviving fabric
  can carry"). A run whose own undisturbed level (the median fraction before the first
  fault, after a warm-up) is below 0.9 -- CPU-bound, or a baseline that never reaches line
  rate -- would never "recover" by that rule, so its threshold is 0.9 x its undisturbed
  level instead; the threshold used is reported with every dip.
- **dip** of a fault at t_f: the first bin below threshold that starts within ``onset_s`` of
  t_f opens it; it lasts until the first of ``hold_bins`` consecutive bins at or above the
  threshold. ``lowest_fraction`` (the depth) is the lowest bin fraction from t_f to the
  recovery; ``duration_s`` is the start of that first good bin minus t_f (0 when no bin
  fell below the threshold). Resolution: one bin. A dip still open when the window ends
  (the next fault, or the end of the run) is reported ``recovered: false`` with the time
  until then.

A package: ``capacity`` (shape, outages, capacity over time), ``dips`` (timelines, fractions,
dips, a run's analysis), ``text`` and ``plot`` (rendering), ``aggregate`` (parallel runs). Its
public names are here.
"""

from lab.proc.analysis.aggregate import (
    aggregate,
    median,
    overlap_aggregate,
    window_mean_bps,
)
from lab.proc.analysis.capacity import (
    FaultWindow,
    Outage,
    OutageKind,
    Shape,
    capacity_fn,
    flow_capacity_bps,
    permutation_capacity_bps,
    permutation_pairs,
    scaled_capacity,
)
from lab.proc.analysis.dips import (
    DEFAULT_WARMUP_S,
    THRESHOLD,
    Dip,
    RunAnalysis,
    Timeline,
    analyse,
    baseline_fraction,
    bin_fractions,
    find_dip,
    mean_capacity,
    sum_timelines,
    threshold_fraction,
)
from lab.proc.analysis.plot import (
    PlotSeries,
    plot_timelines,
)
from lab.proc.analysis.text import (
    ASCII_BLOCKS,
    BLOCKS,
    axis_line,
    bars,
    can_encode,
    describe_dip,
    fmt_bps,
    marker_line,
    resample,
)

__all__ = [
    "ASCII_BLOCKS",
    "BLOCKS",
    "DEFAULT_WARMUP_S",
    "Dip",
    "FaultWindow",
    "Outage",
    "OutageKind",
    "PlotSeries",
    "RunAnalysis",
    "Shape",
    "THRESHOLD",
    "Timeline",
    "aggregate",
    "analyse",
    "axis_line",
    "bars",
    "baseline_fraction",
    "bin_fractions",
    "can_encode",
    "capacity_fn",
    "describe_dip",
    "find_dip",
    "flow_capacity_bps",
    "fmt_bps",
    "marker_line",
    "mean_capacity",
    "median",
    "overlap_aggregate",
    "permutation_capacity_bps",
    "permutation_pairs",
    "plot_timelines",
    "resample",
    "scaled_capacity",
    "sum_timelines",
    "threshold_fraction",
    "window_mean_bps",
]
