"""CPU meters and the CPU-bound rule: this process, the processes it started, the lab's switch
processes, the machine.

Two meters: :class:`SelfCpuMeter` (start/stop) measures the process it runs in (a NIC process
of mrc-bench); :class:`ChildrenCpuMeter` (a context manager that also samples the machine's
load) measures the processes the lab's runner started and waited for (mrc-bench and its NIC
processes).

A result measured while the CPU, not the fabric, was the limit says more about the machine than
about MRC: every mrc-bench result carries the verdict of :func:`cpu_verdict`.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

_HZ = os.sysconf("SC_CLK_TCK")


def process_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def pid_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _HZ


def cpu_pressure_us() -> int | None:
    """Microseconds so far during which at least one runnable task waited for a CPU (the
    kernel's pressure stall information, /proc/pressure/cpu "some"); None without PSI."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def pressure_fraction(before_us: int | None, after_us: int | None, wall_s: float) -> float | None:
    """The share (0..1) of ``wall_s`` during which a task waited for a CPU, from two
    :func:`cpu_pressure_us` readings (None if either is, or no time passed)."""
    if before_us is None or after_us is None or wall_s <= 0:
        return None
    return round((after_us - before_us) / 1e6 / wall_s, 4)


def _stat_cpu_fields() -> list[int]:
    """The jiffies of /proc/stat's first line (all CPUs): user, nice, system, idle, iowait,
    irq, softirq, steal, guest, guest_nice."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def machine_ticks() -> tuple[int, int]:
    """(total, idle) jiffies over all CPUs from /proc/stat (total: every field)."""
    v = _stat_cpu_fields()
    return sum(v), v[3] + v[4]


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat, total over the first eight fields
    (guest time is already counted in user time). :class:`ChildrenCpuMeter` measures with
    this one, :class:`SelfCpuMeter` and the soak with :func:`machine_ticks`, as their
    published figures were."""
    v = _stat_cpu_fields()
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    total = sum(v[:8])
    return total - idle, total


def machine_steal_ticks() -> tuple[int, int]:
    """(steal, total) jiffies over all CPUs from /proc/stat, total as in
    :func:`machine_busy_ticks`: steal is time this virtual machine's CPUs wanted to run and
    the hypervisor ran something else, which no figure inside the guest shows otherwise."""
    v = _stat_cpu_fields()
    return (v[7] if len(v) > 7 else 0), sum(v[:8])


@dataclass(frozen=True, slots=True)
class CpuSample:
    """One reading of :class:`SelfCpuMeter`: clock, own and switch CPU seconds, machine ticks."""

    wall_s: float
    self_s: float
    switches_s: dict[int, float] | None  # switch process -> its CPU seconds
    machine: tuple[int, int]
    pressure_us: int | None
    sched: dict[int, SchedWait] | None = None  # this process and each switch process


@dataclass(frozen=True, slots=True)
class SelfCpu:
    """What :class:`SelfCpuMeter` measured. Percentages are of one core, except
    ``machine_cpu_percent`` (busy share of all CPUs); None: not measured."""

    cpu_percent: float
    machine_cpu_percent: float | None
    cpus: int | None
    switch_cpu_percent: float | None
    switch_cpu_percent_max: float | None = None  # the busiest switch process, % of a core
    cpu_pressure_fraction: float | None = None  # share of the time a task waited for a CPU
    # the mean time this process, and each switch process, waited for a CPU once runnable
    # (SchedWait.wait_per_slice_s, in us); the switch processes' figure is the mean of
    # each one's: a frame meets each process on its path once, whatever its wake-up count
    cpu_wait_us_per_wake: float | None = None
    switch_wait_us_per_wake: float | None = None

    def to_json(self) -> dict[str, Any]:
        """mrc-bench's ``cpu`` keys, in their order."""
        return {
            "cpu_percent": self.cpu_percent,
            "machine_cpu_percent": self.machine_cpu_percent,
            "cpus": self.cpus,
            "switch_cpu_percent": self.switch_cpu_percent,
            "switch_cpu_percent_max": self.switch_cpu_percent_max,
            "cpu_pressure_fraction": self.cpu_pressure_fraction,
            "cpu_wait_us_per_wake": self.cpu_wait_us_per_wake,
            "switch_wait_us_per_wake": self.switch_wait_us_per_wake,
        }


class SelfCpuMeter:
    """CPU of this process (a NIC process of mrc-bench), of the lab's switch processes
    (python mode) and of the machine between :meth:`start` and :meth:`stop`."""

    def __init__(self, switch_pids: list[int] | None = None) -> None:
        self.switch_pids = list(switch_pids or [])
        self.a: CpuSample | None = None

    def _sample(self) -> CpuSample:
        sw: dict[int, float] | None = None
        if self.switch_pids:
            sw = {}
            for pid in self.switch_pids:
                c = pid_cpu_s(pid)
                if c is not None:
                    sw[pid] = c
        return CpuSample(
            time.monotonic(),
            process_cpu_s(),
            sw,
            machine_ticks(),
            cpu_pressure_us(),
            {pid: w for pid in (os.getpid(), *self.switch_pids) if (w := sched_wait([pid]))},
        )

    def start(self) -> None:
        self.a = self._sample()

    def stop(self) -> SelfCpu:
        assert self.a is not None
        b = self._sample()
        a = self.a
        wall = max(b.wall_s - a.wall_s, 1e-9)
        total = b.machine[0] - a.machine[0]
        idle = b.machine[1] - a.machine[1]
        switches = busiest = None
        if a.switches_s is not None and b.switches_s is not None:
            each = [v - a.switches_s.get(pid, 0.0) for pid, v in b.switches_s.items()]
            switches = round(100 * sum(each) / wall, 1)
            busiest = round(100 * max(each) / wall, 1) if each else None
        pressure = pressure_fraction(a.pressure_us, b.pressure_us, wall)
        waits = sched_wait_between(a.sched or {}, b.sched or {})
        own = waits.pop(os.getpid(), None)
        switch_waits = [w for w in waits.values() if w is not None]
        return SelfCpu(
            cpu_percent=round(100 * (b.self_s - a.self_s) / wall, 1),
            machine_cpu_percent=round(100 * (1 - idle / total), 1) if total > 0 else None,
            cpus=os.cpu_count(),
            switch_cpu_percent=switches,
            switch_cpu_percent_max=busiest,
            cpu_pressure_fraction=pressure,
            cpu_wait_us_per_wake=None if own is None else round(own * 1e6, 1),
            switch_wait_us_per_wake=(
                round(1e6 * sum(switch_waits) / len(switch_waits), 1) if switch_waits else None
            ),
        )


@dataclass(frozen=True, slots=True)
class ChildrenCpu:
    """What :class:`ChildrenCpuMeter` measured over its body: CPU seconds of the processes
    started and waited for (``bench``) and of the lab's switch processes, the same in cores,
    and the machine's busy share."""

    wall_s: float
    cores: int
    bench_cpu_s: float
    switch_cpu_s: float
    bench_cores: float
    switch_cores: float
    machine_busy_percent: float
    cpu_pressure_fraction: float | None = None  # share of the time a task waited for a CPU

    def to_json(self) -> dict[str, Any]:
        """The ``lab_cpu`` keys of a write's record, in their order."""
        return {
            "wall_s": self.wall_s,
            "cores": self.cores,
            "bench_cpu_s": self.bench_cpu_s,
            "switch_cpu_s": self.switch_cpu_s,
            "bench_cores": self.bench_cores,
            "switch_cores": self.switch_cores,
            "machine_busy_percent": self.machine_busy_percent,
            "cpu_pressure_fraction": self.cpu_pressure_fraction,
        }


class ChildrenCpuMeter:
    """CPU used while the body runs: by the processes this one started and waited for (the
    bench and its NIC processes: ``RUSAGE_CHILDREN``), by the lab's switch processes
    (``/proc/PID/stat``; a switch restarted meanwhile counts from its restart), and by the
    whole machine (``/proc/stat``; other users of the machine included)."""

    #: how often the machine's busy share is sampled while the body runs (busy_between)
    SAMPLE_S = 0.25

    def __init__(self, state: Any) -> None:
        self.state = state
        self.result: ChildrenCpu | None = None  # when the body is over
        # (unix time, busy jiffies, total jiffies) every SAMPLE_S: the machine's load in a
        # window of the run (writes started together overlap only after their processes
        # started; start-up and verification are no part of it)
        self.samples: list[tuple[float, int, int, int | None]] = []  # ... and pressure (us)
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def _sample_loop(self) -> None:
        while True:
            self.samples.append((time.time(), *machine_busy_ticks(), cpu_pressure_us()))
            if self._stop.wait(self.SAMPLE_S):
                self.samples.append((time.time(), *machine_busy_ticks(), cpu_pressure_us()))
                return

    def busy_between(self, t0_unix_s: float, t1_unix_s: float) -> float | None:
        """The machine's busy share (0..1) between two unix times, from the samples closest
        inside the window (None when the window holds fewer than two samples)."""
        inside = [x for x in self.samples if t0_unix_s <= x[0] <= t1_unix_s]
        if len(inside) < 2:
            return None
        (_ta, busy_a, total_a, _pa), (_tb, busy_b, total_b, _pb) = inside[0], inside[-1]
        return (busy_b - busy_a) / (total_b - total_a) if total_b > total_a else None

    def pressure_between(self, t0_unix_s: float, t1_unix_s: float) -> float | None:
        """The share of the time (0..1) between two unix times that a runnable task waited
        for a CPU (/proc/pressure/cpu), from the samples closest inside the window (None:
        fewer than two samples, or no PSI)."""
        inside = [x for x in self.samples if t0_unix_s <= x[0] <= t1_unix_s and x[3] is not None]
        if len(inside) < 2:
            return None
        a, b = inside[0], inside[-1]
        return pressure_fraction(a[3], b[3], b[0] - a[0])

    def _switch_cpu(self) -> dict[int, float]:
        out = {}
        for rec in self.state.processes.values():
            v = pid_cpu_s(rec.pid)
            if v is not None:
                out[rec.pid] = v
        return out

    def __enter__(self) -> ChildrenCpuMeter:
        self._t = time.monotonic()
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._switches = self._switch_cpu()
        self._machine = machine_busy_ticks()
        self._pressure = cpu_pressure_us()
        self._sampler = threading.Thread(target=self._sample_loop, name="cpu-sampler", daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        wall = time.monotonic() - self._t
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        bench = (ch.ru_utime - self._children.ru_utime) + (ch.ru_stime - self._children.ru_stime)
        now = self._switch_cpu()
        switches = sum(v - self._switches.get(pid, 0.0) for pid, v in now.items())
        busy, total = machine_busy_ticks()
        d_busy, d_total = busy - self._machine[0], total - self._machine[1]
        cores = os.cpu_count() or 1
        pressure = pressure_fraction(self._pressure, cpu_pressure_us(), wall)
        self.result = ChildrenCpu(
            wall_s=round(wall, 3),
            cores=cores,
            bench_cpu_s=round(bench, 3),
            switch_cpu_s=round(switches, 3),
            bench_cores=round(bench / wall, 3) if wall > 0 else 0.0,
            switch_cores=round(switches / wall, 3) if wall > 0 else 0.0,
            machine_busy_percent=round(100.0 * d_busy / d_total, 1) if d_total else 0.0,
            cpu_pressure_fraction=pressure,
        )


# A run is CPU-bound, and its goodput says more about this machine than about the fabric,
# when any of these held over the run (docs/bench.md, CPU-BOUND, has the measurements):
# - the machine >= 85% busy, or one NIC or switch process >= 90% of a core: the CPU's
#   throughput was the limit;
# - the lab's processes waited for a CPU, each time they became runnable, >= 2.5% of the time
#   a data frame takes on a link (each process's mean wait per wake-up, averaged over the
#   test's NIC processes and the switch processes): the CPU's latency was. Measured
#   2026-11-29 on the project's 2-core machine: one QP h0 -> h3 on the default lab waited
#   0.012-0.018 of a frame time at 5 and 10 Mb/s (0.97 of capacity, no spurious timeout),
#   0.028-0.029 at 15 Mb/s (1 and 31 spurious timeouts: processes late for their frames),
#   0.054-0.25 at 20-50 Mb/s (up to 224 spurious, 0.76-0.96 of capacity); four writers on
#   the 8-plane lab waited 0.004-0.007 at 1.2 Mb/s and 0.015-0.016 at 2.4 (0.97, no
#   spurious timeout), 0.046-0.050 at 4.8 (0.93-0.96). The wait per wake-up stays within
#   50-350 us whatever the rate, so what decides is how it compares with the fabric's time.
# - when those waits were not measured: a runnable task waited for a CPU >= 14% of the time
#   (PSI "some", the rule before). It cannot tell a 100 us wait at 25 Mb/s from one at 1 Mb/s:
#   the 8-plane lab's four writers at 1.2 and 2.4 Mb/s had a task waiting 19-46% of the time.
CPU_BOUND_MACHINE = 0.85  # busy share of all CPUs (/proc/stat)
CPU_BOUND_PRESSURE = 0.14  # share of the time a runnable task waited for a CPU (PSI "some")
CPU_BOUND_NIC = 0.90  # one NIC or switch process's share of one core
CPU_BOUND_WAIT = 0.025  # the lab's mean wait for a CPU per wake-up, in frame times
#: the rule in words, and as the label of a screen's row (one source for every screen)
CPU_BOUND_RULE = (
    f"machine >= {CPU_BOUND_MACHINE:.0%} busy, the lab's processes waiting for a CPU >= "
    f"{CPU_BOUND_WAIT:.1%} of a frame time per wake-up (without that figure: a task waiting "
    f">= {CPU_BOUND_PRESSURE:.0%} of the time), or a NIC or switch process >= "
    f"{CPU_BOUND_NIC:.0%} of a core"
)
CPU_BOUND_LABEL = f"CPU-bound (busy>={CPU_BOUND_MACHINE:.0%}, wait>={CPU_BOUND_WAIT:.1%})"  # fits a 34-column label


def cpu_bound(
    machine_busy_fraction: float | None,
    nic_core_fraction_max: float | None,
    cpu_pressure_fraction: float | None = None,
    switch_core_fraction_max: float | None = None,
    cpu_wait_per_frame_time: float | None = None,
) -> bool:
    """True when the machine was >= 85% busy, a NIC or switch process used >= 90% of a core,
    or the lab's processes waited for a CPU >= 2.5% of a frame time per wake-up (when that was
    not measured: a task waited for a CPU >= 14% of the time); a figure that was not measured
    (None) says nothing either way."""

    def over(x: float | None, limit: float) -> bool:
        return x is not None and x >= limit

    late = (
        over(cpu_wait_per_frame_time, CPU_BOUND_WAIT)
        if cpu_wait_per_frame_time is not None
        else over(cpu_pressure_fraction, CPU_BOUND_PRESSURE)
    )
    return (
        over(machine_busy_fraction, CPU_BOUND_MACHINE)
        or late
        or over(nic_core_fraction_max, CPU_BOUND_NIC)
        or over(switch_core_fraction_max, CPU_BOUND_NIC)
    )


def wait_per_wake(per_process_us: list[float | None]) -> float | None:
    """The lab's wait for a CPU per wake-up in seconds: the mean over its processes (the NIC
    processes of a test, the switch processes as one) of each one's mean wait in us
    (:class:`SelfCpu`'s figures; unmeasured ones left out); None when none was measured."""
    got = [w for w in per_process_us if w is not None]
    return sum(got) / len(got) / 1e6 if got else None


@dataclass(frozen=True, slots=True)
class CpuVerdict:
    """Whether a run was CPU-bound by :func:`cpu_bound`, and the figures it judged
    (fractions; None: not measured)."""

    cpu_bound: bool
    machine_busy_fraction: float | None
    nic_core_fraction_max: float | None
    cpu_pressure_fraction: float | None = None
    switch_core_fraction_max: float | None = None
    cpu_wait_us_per_wake: float | None = None
    cpu_wait_per_frame_time: float | None = None

    @classmethod
    def of(
        cls,
        machine_cpu_percent: float | None,
        nic_cpu_percents: list[float | None],
        cpu_pressure_fraction: float | None = None,
        switch_cpu_percent_max: float | None = None,
        wait_per_wake_s: float | None = None,
        frame_time_s: float | None = None,
    ) -> CpuVerdict:
        """From CPU figures in percent: the machine's busy share of all CPUs, each NIC
        process in % of one core, the busiest switch process in % of one core; the share of
        the time a task waited for a CPU (a fraction); the lab's processes' mean wait for a
        CPU per wake-up and the time a data frame takes on a link (seconds)."""
        machine = None if machine_cpu_percent is None else round(machine_cpu_percent / 100, 4)
        nics = [c for c in nic_cpu_percents if c is not None]
        nic = round(max(nics) / 100, 4) if nics else None
        sw = None if switch_cpu_percent_max is None else round(switch_cpu_percent_max / 100, 4)
        per_frame = None
        if wait_per_wake_s is not None and frame_time_s:
            per_frame = round(wait_per_wake_s / frame_time_s, 4)
        return cls(
            cpu_bound(machine, nic, cpu_pressure_fraction, sw, per_frame),
            machine,
            nic,
            cpu_pressure_fraction,
            sw,
            None if wait_per_wake_s is None else round(wait_per_wake_s * 1e6, 1),
            per_frame,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``cpu_bound`` keys of mrc-bench's JSON, in their order, with the thresholds."""
        return {
            "cpu_bound": self.cpu_bound,
            "machine_busy_fraction": self.machine_busy_fraction,
            "nic_core_fraction_max": self.nic_core_fraction_max,
            "cpu_pressure_fraction": self.cpu_pressure_fraction,
            "switch_core_fraction_max": self.switch_core_fraction_max,
            "cpu_wait_us_per_wake": self.cpu_wait_us_per_wake,
            "cpu_wait_per_frame_time": self.cpu_wait_per_frame_time,
            "cpu_bound_thresholds": {
                "machine_busy_fraction": CPU_BOUND_MACHINE,
                "nic_core_fraction": CPU_BOUND_NIC,
                "cpu_pressure_fraction": CPU_BOUND_PRESSURE,
                "switch_core_fraction": CPU_BOUND_NIC,
                "cpu_wait_per_frame_time": CPU_BOUND_WAIT,
            },
        }


def cpu_verdict(
    machine_cpu_percent: float | None,
    nic_cpu_percents: list[float | None],
    cpu_pressure_fraction: float | None = None,
    switch_cpu_percent_max: float | None = None,
    wait_per_wake_s: float | None = None,
    frame_time_s: float | None = None,
) -> dict[str, Any]:
    """The ``cpu_bound`` keys of mrc-bench's JSON from its CPU figures (percentages: the
    machine's busy share of all CPUs, each NIC process and the busiest switch process in %
    of one core; the CPU pressure as a fraction; the lab's mean wait for a CPU per wake-up
    and a data frame's time on a link in seconds): :class:`CpuVerdict` as JSON, the form
    every result spreads into its own."""
    return CpuVerdict.of(
        machine_cpu_percent,
        nic_cpu_percents,
        cpu_pressure_fraction,
        switch_cpu_percent_max,
        wait_per_wake_s,
        frame_time_s,
    ).to_json()


def cpu_warning(res: dict[str, Any]) -> str | None:
    """The screen's warning line for a CPU-bound result (None when it was not)."""
    if not res.get("cpu_bound"):
        return None
    parts = []
    m, n = res.get("machine_busy_fraction"), res.get("nic_core_fraction_max")
    p, sw = res.get("cpu_pressure_fraction"), res.get("switch_core_fraction_max")
    if m is not None:
        parts.append(f"machine {m:.0%} busy (limit {CPU_BOUND_MACHINE:.0%})")
    w, us = res.get("cpu_wait_per_frame_time"), res.get("cpu_wait_us_per_wake")
    if w is not None:
        parts.append(
            f"the lab's processes waited {us:.0f} us for a CPU per wake-up, {w:.1%} of a frame"
            f" time (limit {CPU_BOUND_WAIT:.1%})"
        )
    elif p is not None:
        parts.append(
            f"a task waited for a CPU {p:.0%} of the time (limit {CPU_BOUND_PRESSURE:.0%})"
        )
    if n is not None:
        parts.append(f"busiest NIC process {n:.0%} of a core (limit {CPU_BOUND_NIC:.0%})")
    if sw is not None:
        parts.append(f"busiest switch process {sw:.0%} of a core (limit {CPU_BOUND_NIC:.0%})")
    return (
        " WARNING: CPU-bound run: "
        + ", ".join(parts)
        + ": this machine's CPU, not the fabric, may have limited the result; lower the link "
        "rate (mrc-lab up --rate auto)"
    )


def switch_pids(lab_state: Any) -> list[int]:
    """PIDs of the lab's switch processes that still run what the lab started, each once
    (one shared process serves several switches: its CPU must not count once per switch)."""
    return sorted({rec.pid for rec in lab_state.processes.values() if rec.is_alive()})


@dataclass(frozen=True, slots=True)
class SchedWait:
    """What the scheduler did for some processes (all their threads): CPU time, time spent
    runnable but waiting for a CPU, and times they were given one (``/proc/PID/schedstat``)."""

    run_s: float
    wait_s: float
    slices: int

    def __sub__(self, before: SchedWait) -> SchedWait:
        return SchedWait(
            self.run_s - before.run_s, self.wait_s - before.wait_s, self.slices - before.slices
        )

    @property
    def wait_per_slice_s(self) -> float | None:
        """The mean wait for a CPU each time one was given (None: never ran)."""
        return self.wait_s / self.slices if self.slices > 0 else None


def sched_wait_between(
    before: dict[int, SchedWait], after: dict[int, SchedWait]
) -> dict[int, float | None]:
    """Each process's mean wait for a CPU per wake-up (seconds; None: it never ran) between
    two readings; a process in only one of them (started or ended meanwhile, such as a
    restarted switch) is left out."""
    return {pid: (after[pid] - before[pid]).wait_per_slice_s for pid in after if pid in before}


def sched_wait(pids: list[int]) -> SchedWait | None:
    """:class:`SchedWait` summed over ``pids`` and their threads; None when the kernel keeps
    no schedstat (CONFIG_SCHED_INFO) or none of them is alive. A process that waits for a CPU
    about as long as the lab's frame times is late for the fabric, whatever its CPU share:
    the machine's other users, not the lab's own load, are then the limit."""
    run = wait = slices = 0
    seen = False
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    r, w, s = (int(x) for x in f.read().split()[:3])
            except (OSError, ValueError):
                continue
            run, wait, slices, seen = run + r, wait + w, slices + s, True
    return SchedWait(run / 1e9, wait / 1e9, slices) if seen else None
