"""A lab that knows its machine: the link rate at which the fabric, not the CPU, limits.

    mrc-lab calibrate [--json] [--recalibrate] [TOPOLOGY FLAGS]
    mrc-lab up --rate auto ...            (and make demo, make bench by default)

Everything in the lab is software on the same CPUs, and machines of one kind differ by 3x
from day to day, so no link rate suits every machine. The calibration **measures the real
stack as it is** (the NIC, the switches, the kernel's veths; whatever their code is today):

1. it brings up a calibration lab (``mrccal``) of the shape asked for (planes, T0s, T1s,
   hosts, switch mode: the shape sets the hops a frame crosses and how many processes share
   the work) at the highest rate allowed (``cap``, the lab's default 100 Mb/s), samples the
   machine's busy share with the lab idle for 1 s (``/proc/stat``: other users and the
   switches' timers; sampled again around every write, the larger sample counts, but
   never more than the machine did beyond the lab's own processes during it), then runs ``mrc-bench write`` on the same pairs the caller will use
   (default h0 -> the last host, across the T1 tier) for 2 s, once with MRC and once with
   the RoCEv2 baseline (one QP per plane, as the demo and the benchmarks run it), and keeps
   the costlier of the two (:data:`TRANSPORTS`: a RoCEv2 frame costs its NIC several times
   an MRC frame, so a rate chosen on MRC alone would leave the baseline CPU-bound);
2. from mrc-bench's JSON it takes the data frames delivered (the destinations' NIC ports),
   the machine's busy share over the write and the busiest NIC process's share of a core,
   and derives the CPU cost per delivered frame: **machine core-seconds per frame**
   ``(busy - idle) x cpus / frames-per-second`` and **NIC core-seconds per frame** (one
   process carries one flow);
3. it picks the highest rate whose frames keep the machine at **HEADROOM (3/4) of the
   cpu_bound thresholds** (lab.workloads.bench.common: machine >= 85% busy, a NIC process >= 90% of a
   core): at most 64% busy, no NIC process above 68% of a core, by the linear model
   ``busy = idle + cost x frames/s``; and whose frames are long enough that the lab's
   processes' wait for a CPU per wake-up, as measured (mrc-bench's ``cpu_wait_us_per_wake``,
   which moves little with the rate), is at most 3/4 of the cpu_bound threshold in frame
   times (2.5%): :func:`wait_rate_mbit`. The rate is floored to two significant digits and
   capped at ``cap``;
4. CPU per frame rises as the rate falls (fewer frames per wake-up: less batching), so the
   rate is **verified**: a fresh lab at that rate, the same write; a rate is verified when
   the measured load is within TOLERANCE (15%) of the targets (<= 73% busy, a NIC <= 78%
   of a core, a wait <= 2.2% of a frame time: still below cpu_bound). Over the targets, the cost measured there gives the
   next, lower rate (with two steps that were not CPU-bound, from ``busy - idle = k x
   fps^alpha`` fitted through them; after the first step at most a halving:
   :func:`next_rate`); well within them (the cost allows
   25% more), the next step tries that higher rate, below 0.9 x any rate that failed
   (:func:`decide`: a step spoiled by other work must not leave the rate far too low). At
   most MAX_STEPS (4) writes; the result is the highest verified rate. One that never
   verified says so (``verified: false``) and keeps the last step's choice.

Headroom, not the threshold itself, because a demo or benchmark run does more than the
calibration's 2 s write (fault recovery, probes, retransmissions, the RoCEv2 baseline's 8
QPs, the plotting process) and the machine's other users come and go.

The result is cached per boot in ``/run/mrc/calibration.json`` (``$MRC_CALIBRATION_DIR``
moves it): valid while ``/proc/sys/kernel/random/boot_id`` and the hash of the code that
matters (:data:`CODE_GLOBS`: NIC, switch, C core, the lab's bench and bring-up) are
unchanged, one entry per shape (:func:`cache_key`). ``--recalibrate`` measures again;
``--rate RATE`` forces a rate and skips all of this.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lab.fabric import lifecycle
from lab.fabric.netns import LabError, have_net_admin
from lab.fabric.params import DATA_FRAME_OVERHEAD_BYTES, LabParams, frame_time_s
from lab.fabric.paths import REPO
from lab.fabric.state import exists
from lab.proc.benchrun import WriteSpec, run_parallel
from lab.proc.cpu import CPU_BOUND_MACHINE, CPU_BOUND_NIC, CPU_BOUND_WAIT, cpu_bound, machine_ticks
from mrcnic.cliflags import deprecated, rate_with_unit
from mrcnic.units import rate_in

AUTO = "auto"
HEADROOM = 0.75  # the calibrated rate aims at 3/4 of each cpu_bound threshold
TOLERANCE = 0.15  # a verifying write may land up to 15% above the targets (noise of 2 s)
MAX_STEPS = 4
UP_MIN = 1.25  # a verified step is followed by a higher one only if that is 25% higher
MAX_DROP = 0.5  # after the first step, a failed step at most halves the rate
STEP_S = 2.0  # seconds of each calibration write
IDLE_S = 1.0  # seconds of the idle sample before the first write
IDLE_AFTER_S = 0.5  # before the later ones, and after each (the larger of the two counts)
SIZE = 1 << 18  # bytes per message: the demo's
MIN_RATE_MBIT = 1.0
BUSY_ELSEWHERE = 0.2  # idle load above this: the line says the machine was busy elsewhere
DEFAULT_CAP_MBIT = LabParams().rate_mbit  # the lab's default rate: never above it
CAL_NAME = "mrccal"
#: what each step writes with: MRC (1 QP) and the RoCEv2 baseline (one QP per plane, as the
#: demo and the benchmarks run it). A RoCEv2 frame costs the NIC several times an MRC frame
#: (its QP is Python; MRC's data path is C: docs/design/core.md), so a rate chosen on MRC alone
#: would leave the baseline CPU-bound where MRC is not: the rate suits the costlier one.
TRANSPORTS = ("mrc", "rocev2")
CACHE_VERSION = 1
DEFAULT_DIR = "/run/mrc"
# What a frame costs depends on this code; a change invalidates the cache.
CODE_GLOBS = (
    "mrcnic/**/*.py",
    "mrcswitch/**/*.py",
    "csrc/*.c",
    "csrc/*.h",
    "lab/workloads/bench/*.py",
    "lab/fabric/host.py",
    "lab/fabric/pyswitch.py",
    "lab/fabric/lifecycle.py",
    "lab/proc/benchrun.py",
    "lab/proc/children.py",
    "lab/proc/schedule.py",
    "lab/proc/watch.py",
    "lab/workloads/calibrate.py",
)
# Environment knobs that change the stack under the lab (they are part of the cache key).
ENV_KNOBS = (
    "MRC_SWITCH_C_LOOP",
    "MRC_NIC_ENGINE",
    "MRC_NIC_C_PACE",
    "MRC_PURE_PYTHON",
    "MRC_LAB_SWITCH_PROCS",
    "MRC_SWITCH_HOLD_US",
)

Printer = Callable[[str], None]


def rate_flag(text: str) -> float | str:
    """argparse ``type=`` for ``--rate``: ``auto`` or a rate with its unit, in Mbit/s
    (``100Mbit`` -> 100.0, ``1G`` -> 1000.0; a bare number is refused: docs/cli.md)."""
    if text.strip().lower() == AUTO:
        return AUTO
    return rate_with_unit(text) / 1e6


def rate_arg(text: str) -> float | str:
    """argparse ``type=`` for ``--rate-mbit``: ``auto`` or a rate in Mbit/s (``100``,
    ``50M``, ``1G``)."""
    if text.strip().lower() == AUTO:
        return AUTO
    return rate_in(1e6)(text)


# --- the measurement and the rule (pure) ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """One calibration write (or several at once, ``flows``) at ``rate_mbit``."""

    rate_mbit: float
    planes: int
    flows: int
    duration_s: float
    frames: int  # data frames delivered: received on the destinations' NIC ports
    frame_bytes: float  # their mean size on the wire
    cpus: int
    machine_busy: float  # busy share of all CPUs over the write (mrc-bench's /proc/stat)
    idle_busy: float  # the same with the lab up and idle, just before
    nic_core_max: float  # the busiest NIC process, share of one core
    goodput_fraction: float | None = None
    verified: bool = True
    # the lab's own processes over the write (NICs + switches, cores): what the machine's
    # busy share holds beyond them is the kernel's work outside them and other users
    lab_cores: float | None = None
    transport: str = "mrc"  # the transport of the write (the step's costlier one)
    # the lab's processes' wait for a CPU per wake-up (us; the longest of the flows'
    # cpu_wait_us_per_wake): it moves little with the rate, so it bounds the rate by itself
    wait_us: float | None = None

    @property
    def fps(self) -> float:
        return self.frames / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def machine_core_s_per_frame(self) -> float:
        """CPU (core-seconds, whole machine, idle load taken off) per delivered frame."""
        fps = self.fps
        return max(self.machine_busy - self.idle_busy, 0.0) * self.cpus / fps if fps else 0.0

    @property
    def nic_core_s_per_frame(self) -> float:
        """CPU of the busiest NIC process per frame of its own flow."""
        per_flow = self.fps / max(self.flows, 1)
        return self.nic_core_max / per_flow if per_flow else 0.0

    @property
    def wait_per_frame_time(self) -> float | None:
        """The wait per wake-up in frame times at this step's rate (None: not measured)."""
        if self.wait_us is None or self.rate_mbit <= 0:
            return None
        return self.wait_us * 1e-6 / frame_time_s(self.rate_mbit)

    @property
    def cpu_bound(self) -> bool:
        return cpu_bound(self.machine_busy, self.nic_core_max, None, None, self.wait_per_frame_time)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fps"] = round(self.fps, 1)
        d["machine_us_per_frame"] = round(self.machine_core_s_per_frame * 1e6, 2)
        d["nic_us_per_frame"] = round(self.nic_core_s_per_frame * 1e6, 2)
        wait = self.wait_per_frame_time
        d["wait_per_frame_time"] = None if wait is None else round(wait, 4)
        d["cpu_bound"] = self.cpu_bound
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(**{k: d[k] for k in cls.__slots__ if k in d})


def fps_at(m: Measurement, machine_limit: float, nic_limit: float) -> float:
    """Delivered frames/s (all flows) at which the linear model ``busy = idle + cost x fps``
    reaches ``machine_limit`` or a NIC process reaches ``nic_limit`` of a core, whichever
    comes first (inf when neither cost was measurable)."""
    out = math.inf
    cm, cn = m.machine_core_s_per_frame, m.nic_core_s_per_frame
    if cm > 0:
        out = min(out, max(machine_limit - m.idle_busy, 0.0) * m.cpus / cm)
    if cn > 0:
        out = min(out, nic_limit / cn * max(m.flows, 1))
    return out


def carried_fps(m: Measurement) -> float:
    """What this machine carries through this lab before a run turns CPU-bound."""
    return fps_at(m, CPU_BOUND_MACHINE, CPU_BOUND_NIC)


def target_fps(m: Measurement, headroom: float = HEADROOM) -> float:
    return fps_at(m, CPU_BOUND_MACHINE * headroom, CPU_BOUND_NIC * headroom)


def fps_per_mbit(planes: int, frame_bytes: float, flows: int = 1) -> float:
    """Frames/s the flows carry per Mb/s of link rate when each runs at its NIC's full rate
    (``planes`` ports, frames of ``frame_bytes`` on the wire)."""
    return flows * planes * 1e6 / (frame_bytes * 8)


def floor2(x: float) -> float:
    """``x`` floored to two significant digits (54.7 -> 54, 5.47 -> 5.4, 137 -> 130)."""
    if x <= 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - 1
    q = 10.0**e
    return round(math.floor(x / q + 1e-9) * q, max(0, -e))


def choose_rate(
    m: Measurement,
    cap_mbit: float = DEFAULT_CAP_MBIT,
    headroom: float = HEADROOM,
    min_mbit: float = MIN_RATE_MBIT,
) -> float:
    """The highest link rate (Mb/s, two significant digits, within [min, cap]) whose frames
    keep the machine at ``headroom`` of the cpu_bound thresholds, by the cost measured."""
    fps = target_fps(m, headroom)
    rate = wait_rate_mbit(m, headroom)
    if math.isfinite(fps):
        rate = min(rate, fps / fps_per_mbit(m.planes, m.frame_bytes, m.flows))
    if not math.isfinite(rate):
        return cap_mbit
    return max(min_mbit, min(cap_mbit, floor2(rate)))


def wait_rate_mbit(m: Measurement, headroom: float = HEADROOM) -> float:
    """The highest rate at which the lab's processes' wait for a CPU per wake-up, as
    measured, is ``headroom`` of the cpu_bound threshold in frame times (inf: not measured).
    The wait measured at a higher rate is the longer one, so this errs low."""
    if not m.wait_us:
        return math.inf
    return headroom * CPU_BOUND_WAIT * frame_time_s(1.0) / (m.wait_us * 1e-6)


def fitted_exponent(a: Measurement, b: Measurement) -> float | None:
    """``alpha`` of ``busy - idle = k x fps^alpha`` through two steps that were not CPU-bound
    (a saturated step measures what the CPU gave, not what the rate asked), clamped to
    [0.3, 1]; None when the two cannot tell. Below 1 when the CPU per frame rises as the
    rate falls (fewer frames per wake-up)."""
    if a.cpu_bound or b.cpu_bound or a.fps <= 0 or b.fps <= 0:
        return None
    la, lb = a.machine_busy - a.idle_busy, b.machine_busy - b.idle_busy
    if la <= 0 or lb <= 0 or abs(math.log(a.fps / b.fps)) < 0.05:
        return None
    alpha = math.log(la / lb) / math.log(a.fps / b.fps)
    return min(1.0, max(0.3, alpha))


def next_rate(
    steps: Sequence[Measurement], cap_mbit: float = DEFAULT_CAP_MBIT, headroom: float = HEADROOM
) -> float:
    """The rate to try after ``steps`` (none of which was within the targets): the choice of
    the last step's cost (:func:`choose_rate`, which assumes a constant cost per frame), or,
    when the last two steps show the cost rising as the rate falls, the lower rate the
    fitted ``busy - idle = k x fps^alpha`` gives; always at most 0.9 x the last rate and,
    after the first step (which starts at the cap, often far above), at least MAX_DROP (1/2)
    x it: a step spoiled by other work on the machine costs a halving, not the rate."""
    last = steps[-1]
    rate = choose_rate(last, cap_mbit, headroom)
    alpha = fitted_exponent(steps[-2], last) if len(steps) >= 2 else None
    load = last.machine_busy - last.idle_busy
    goal = CPU_BOUND_MACHINE * headroom - last.idle_busy
    if alpha is not None and alpha < 1 and load > 0 and goal > 0 and last.fps > 0:
        fps = last.fps * (goal / load) ** (1 / alpha)
        rate = min(rate, floor2(fps / fps_per_mbit(last.planes, last.frame_bytes, last.flows)))
    rate = min(rate, floor2(last.rate_mbit * 0.9))
    if len(steps) >= 2:  # after the first step, at most halve: one spoiled step cannot sink it
        rate = max(rate, floor2(last.rate_mbit * MAX_DROP))
    return max(MIN_RATE_MBIT, rate)


def decide(
    steps: Sequence[Measurement],
    cap_mbit: float = DEFAULT_CAP_MBIT,
    headroom: float = HEADROOM,
) -> tuple[float | None, float | None]:
    """(the highest rate verified so far or None, the next rate to measure or None: stop).

    A step over the targets sends the search down (:func:`next_rate`), but never to or
    below a rate already verified. A step within them sends it up when the cost measured
    there allows UP_MIN x that rate or more (a constant cost per frame, which overstates
    the cost at a higher rate: cautious), never to or above 0.9 x a rate that failed: a
    step spoiled by other work on the machine does not leave the rate far too low."""
    ok = [s.rate_mbit for s in steps if within_targets(s, headroom)]
    bad = [s.rate_mbit for s in steps if not within_targets(s, headroom)]
    best = max(ok) if ok else None
    last = steps[-1]
    if within_targets(last, headroom):
        nxt = choose_rate(last, cap_mbit, headroom)
        if bad:
            nxt = min(nxt, floor2(min(bad) * 0.9))
        return best, (nxt if nxt >= last.rate_mbit * UP_MIN else None)
    nxt = next_rate(steps, cap_mbit, headroom)
    if nxt >= last.rate_mbit or (best is not None and nxt <= best):
        return best, None
    return best, nxt


def within_targets(
    m: Measurement, headroom: float = HEADROOM, tolerance: float = TOLERANCE
) -> bool:
    """The measured load is at most ``(1 + tolerance)`` x the headroom targets."""
    k = headroom * (1 + tolerance)
    wait = m.wait_per_frame_time
    return (
        m.machine_busy <= CPU_BOUND_MACHINE * k
        and m.nic_core_max <= CPU_BOUND_NIC * k
        and (wait is None or wait <= CPU_BOUND_WAIT * k)
    )


def measurement_from_results(
    rate_mbit: float, planes: int, results: Sequence[dict[str, Any]], idle_busy: float
) -> Measurement:
    """A :class:`Measurement` from the mrc-bench write JSON of each flow of one step."""
    if not results:
        raise ValueError("no mrc-bench result to calibrate from")
    frames = rx_bytes = 0
    for r in results:
        for port in ((r.get("nic") or {}).get("server") or {}).get("ports", []):
            frames += int(port.get("rx_frames") or 0)
            rx_bytes += int(port.get("rx_bytes") or 0)
    nic = [
        c / 100
        for r in results
        for c in (r.get("cpu_percent_client"), r.get("cpu_percent_server"))
        if isinstance(c, int | float)
    ]
    busy = [r["machine_cpu_percent"] / 100 for r in results if r.get("machine_cpu_percent")]
    gf = [r["goodput_fraction"] for r in results if isinstance(r.get("goodput_fraction"), float)]
    cpus = int(results[0].get("cpus") or os.cpu_count() or 1)
    machine = sum(busy) / len(busy) if busy else 0.0
    waits = [
        float(r["cpu_wait_us_per_wake"])
        for r in results
        if isinstance(r.get("cpu_wait_us_per_wake"), int | float)
    ]
    lab = _lab_cores(results)
    if lab is not None:
        # Other work during the write is at most what the machine did beyond the lab's own
        # processes (an idle sample taken while something else ran just before or after
        # must not make the lab's frames look free).
        idle_busy = min(idle_busy, max(0.0, machine - lab / cpus))
    return Measurement(
        rate_mbit=rate_mbit,
        planes=planes,
        flows=len(results),
        duration_s=sum(float(r.get("duration_s") or 0) for r in results) / len(results),
        frames=frames,
        frame_bytes=round(rx_bytes / frames, 1) if frames else 4096.0 + DATA_FRAME_OVERHEAD_BYTES,
        cpus=cpus,
        machine_busy=round(machine, 4),
        idle_busy=round(idle_busy, 4),
        nic_core_max=round(max(nic), 4) if nic else 0.0,
        goodput_fraction=round(sum(gf) / len(gf), 4) if gf else None,
        verified=all(bool(r.get("verified")) for r in results),
        lab_cores=lab,
        wait_us=max(waits) if waits else None,
    )


def _lab_cores(results: Sequence[dict[str, Any]]) -> float | None:
    """NIC processes of every flow plus the switch processes (counted once: every client
    measures all of them over its run), in cores."""
    nics = sum(
        float(r.get(k) or 0) for r in results for k in ("cpu_percent_client", "cpu_percent_server")
    )
    sw = [r["switch_cpu_percent"] for r in results if r.get("switch_cpu_percent") is not None]
    return round((nics + (sum(sw) / len(sw) if sw else 0.0)) / 100, 3)


# --- the result, its cache ------------------------------------------------------------------


@dataclass
class Calibration:
    """The rate chosen for one lab shape on this machine, and the measurements behind it."""

    key: str
    rate_mbit: float
    verified: bool  # a write at rate_mbit measured the load within the targets
    capped: bool  # the machine could carry more: the rate is the cap
    cap_mbit: float
    headroom: float
    steps: list[Measurement]
    switch: str
    planes: int
    flows: int
    measured_at: str = ""
    boot_id: str = ""
    code_hash: str = ""
    wall_s: float = 0.0
    cache_file: str = ""
    # the cores it ran on and the shared switch processes the lab had (both follow the
    # machine: lifecycle.switch_procs_default)
    cores: int = 0
    switch_procs: int = 0
    from_cache: bool = field(default=False, compare=False)

    @property
    def basis(self) -> Measurement:
        """The step the figures come from: the one at the chosen rate, else the last."""
        at = [s for s in self.steps if s.rate_mbit == self.rate_mbit]
        return at[-1] if at else self.steps[-1]

    @property
    def carried_fps(self) -> float:
        return carried_fps(self.basis)

    @property
    def fps_at_rate(self) -> float:
        b = self.basis
        return fps_per_mbit(b.planes, b.frame_bytes, b.flows) * self.rate_mbit

    def line(self) -> str:
        """The one line a demo or benchmark prints about its rate."""
        b = self.basis
        carried = self.carried_fps
        what = f"~{carried:,.0f} frames/s" if math.isfinite(carried) else "more than it measured"
        us = b.machine_core_s_per_frame * 1e6
        head = (
            f"this machine carries {what} through the lab ({self.switch} switches, "
            f"{us:.0f} us of CPU per frame): links at {self.rate_mbit:g} Mb/s "
            f"({self.fps_at_rate:,.0f} frames/s) "
        )
        if b.wait_us and wait_rate_mbit(b, self.headroom) <= self.rate_mbit / 0.9:
            head += (
                f"(where the {b.wait_us:.0f} us its processes wait for a CPU per wake-up "
                "stay a small part of a frame time) "
            )
        if self.capped:
            head += f"(the cap, {self.cap_mbit:g}), so the fabric, not the CPU, limits"
        else:
            head += "so the fabric, not the CPU, limits"
        if not self.verified:
            head += f" (not verified within {len(self.steps)} steps: read the CPU-bound flags)"
        if b.idle_busy >= BUSY_ELSEWHERE:
            head += (
                f"; the machine was {b.idle_busy:.0%} busy with other work when measured: "
                "--recalibrate when it is quieter"
            )
        return head

    def source(self) -> str:
        how = "cached for this boot" if self.from_cache else "measured now"
        return (
            f"calibration {how} ({self.measured_at}, {self.wall_s:.0f} s; {self.cache_file}); "
            "--rate RATE forces a rate, --recalibrate measures again"
        )

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("steps", "from_cache")}
        d["steps"] = [s.to_dict() for s in self.steps]
        d["carried_fps"] = round(self.carried_fps, 1) if math.isfinite(self.carried_fps) else None
        d["fps_at_rate"] = round(self.fps_at_rate, 1)
        d["line"] = self.line()
        d["rule"] = {
            "cpu_bound_machine": CPU_BOUND_MACHINE,
            "cpu_bound_nic": CPU_BOUND_NIC,
            "headroom": self.headroom,
            "tolerance": TOLERANCE,
            "target_machine_busy": round(CPU_BOUND_MACHINE * self.headroom, 4),
            "target_nic_core": round(CPU_BOUND_NIC * self.headroom, 4),
            "cpu_bound_wait_per_frame_time": CPU_BOUND_WAIT,
            "target_wait_per_frame_time": round(CPU_BOUND_WAIT * self.headroom, 4),
        }
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        names = {f for f in cls.__dataclass_fields__ if f not in ("steps", "from_cache")}
        kw = {k: d[k] for k in names if k in d}
        return cls(steps=[Measurement.from_dict(s) for s in d["steps"]], **kw)


def cache_path() -> Path:
    return Path(os.environ.get("MRC_CALIBRATION_DIR") or DEFAULT_DIR) / "calibration.json"


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


def code_hash(root: Path = REPO, globs: Sequence[str] = CODE_GLOBS) -> str:
    """BLAKE2b of the paths and contents of the code a frame's cost depends on."""
    h = hashlib.blake2b(digest_size=12)
    files = sorted({p for g in globs for p in root.glob(g) if p.is_file()})
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(
    params: LabParams,
    pairs: Sequence[tuple[int, int]],
    size: int = SIZE,
    cap_mbit: float = DEFAULT_CAP_MBIT,
    env: dict[str, str] | None = None,
    transports: Sequence[str] = TRANSPORTS,
) -> str:
    """What a calibration holds for: the lab's shape (not its name or rate), the flows, the
    message size, the cap, the transports measured and the environment knobs that change
    the stack."""
    env = os.environ if env is None else env
    knobs = ",".join(f"{k}={env[k]}" for k in ENV_KNOBS if k in env)
    flows = ",".join(f"h{s}-h{d}" for s, d in pairs)
    return (
        f"{params.switch}:{params.planes}p:{params.t0}x{params.t1}:{params.hosts_per_t0}h:"
        f"mtu{params.mtu}:buf{params.buffer_kb}:ecn{params.ecn_kb}:{flows}:size{size}:"
        f"cap{cap_mbit:g}:{'+'.join(transports)}:{knobs}:cores{lifecycle.cores_here()}:"
        f"sp{lifecycle.switch_procs_default(params.planes)}" + (":rt" if params.realtime else "")
    )


def load_cached(
    key: str, *, boot: str | None = None, code: str | None = None, path: Path | None = None
) -> Calibration | None:
    """The cached calibration for ``key`` if it was made in this boot with this code."""
    path = path or cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return None
    if data.get("boot_id") != (boot or boot_id()) or data.get("code_hash") != (code or code_hash()):
        return None
    entry = (data.get("entries") or {}).get(key)
    if not entry:
        return None
    try:
        cal = Calibration.from_dict(entry)
    except (KeyError, TypeError):
        return None
    cal.from_cache = True
    return cal


def store(cal: Calibration, path: Path | None = None) -> Path | None:
    """Add ``cal`` to the cache file (entries of another boot or code are dropped); None
    when the cache directory cannot be written (no root: the result is simply not kept)."""
    path = path or cache_path()
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text())
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or data.get("boot_id") != cal.boot_id
        or data.get("code_hash") != cal.code_hash
    ):
        data = {"version": CACHE_VERSION, "boot_id": cal.boot_id, "code_hash": cal.code_hash}
    data.setdefault("entries", {})[cal.key] = cal.to_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        return None
    return path


# --- measuring (root) -----------------------------------------------------------------------


def idle_busy(seconds: float = IDLE_S) -> float:
    """The machine's busy share over ``seconds`` (/proc/stat), nothing of ours running."""
    t0, i0 = machine_ticks()
    time.sleep(seconds)
    t1, i1 = machine_ticks()
    return 1 - (i1 - i0) / (t1 - t0) if t1 > t0 else 0.0


def default_pairs(params: LabParams) -> list[tuple[int, int]]:
    """h0 -> the last host (under the other T0 when there are two: across the T1 tier)."""
    return [(0, params.host_count - 1)]


def measure_step(
    params: LabParams,
    pairs: Sequence[tuple[int, int]],
    *,
    size: int = SIZE,
    step_s: float = STEP_S,
    idle: float | None = None,
    transports: Sequence[str] = TRANSPORTS,
) -> tuple[Measurement, float]:
    """Bring the lab ``params`` up; for each of ``transports`` in turn (RoCEv2 with one QP
    per plane): sample the idle machine (1 s before the step's first write, ``idle`` None;
    0.5 s otherwise), run one write per pair for ``step_s``, sample again; take the lab
    down. Returns the measurement of the transport that allows the fewest frames/s (the
    constraining one) and the idle share used (the larger sample)."""

    if exists(params.name):
        lifecycle.down(params.name)
    ms: list[Measurement] = []
    state = lifecycle.up(params)
    try:
        time.sleep(0.2)  # let the switches' start-up settle
        for transport in transports:
            before = idle_busy(IDLE_S if idle is None else IDLE_AFTER_S)
            qps = 1 if transport == "mrc" else params.planes
            specs = [
                WriteSpec(
                    f"h{s}", f"h{d}", size, step_s, None, qps, transport, None, ("--quiet",)
                )  # fmt: skip
                for s, d in pairs
            ]
            out = run_parallel(state, specs)
            # Other work that started meanwhile is still there after the write, most often
            # (a test suite, another lab): count it as idle load, not as the lab's cost per
            # frame.
            idle = max(before, idle_busy(IDLE_AFTER_S))
            results = [r for _s, r, _t in out]
            if any(r is None for r in results):
                tail = next(t for _s, r, t in out if r is None)
                raise LabError(f"a calibration write printed no result: {tail[-400:]}")
            m = measurement_from_results(params.rate_mbit, params.planes, results, idle)
            ms.append(replace(m, transport=transport))
    finally:
        lifecycle.down(params.name)
    assert idle is not None
    return min(ms, key=target_fps), idle


def calibrate(
    params: LabParams,
    pairs: Sequence[tuple[int, int]] | None = None,
    *,
    size: int = SIZE,
    step_s: float = STEP_S,
    cap_mbit: float = DEFAULT_CAP_MBIT,
    max_steps: int = MAX_STEPS,
    name: str = CAL_NAME,
    headroom: float = HEADROOM,
    echo: Printer | None = None,
    transports: Sequence[str] = TRANSPORTS,
) -> Calibration:
    """Measure (see the module doc); root needed. ``params`` gives the shape (its name and
    rate are ignored: the calibration lab is ``name``)."""
    echo = echo or (lambda _t: None)
    pairs = list(pairs or default_pairs(params))
    t_start = time.monotonic()
    shape = replace(params, name=name)
    rate = cap_mbit
    steps: list[Measurement] = []
    idle: float | None = None
    for _ in range(max_steps):
        m, idle = measure_step(
            replace(shape, rate_mbit=rate), pairs, size=size, step_s=step_s, idle=idle,
            transports=transports,
        )  # fmt: skip
        steps.append(m)
        echo(
            f"  calibrate: links at {rate:g} Mb/s, {m.transport} (the costlier): "
            f"{m.fps:,.0f} frames/s delivered "
            f"(goodput {m.goodput_fraction or 0:.2f} of capacity), machine {m.machine_busy:.0%} "
            f"busy ({m.idle_busy:.0%} idle load), busiest NIC process {m.nic_core_max:.0%} of "
            f"a core, lab processes {m.lab_cores or 0:.2f} cores; "
            f"{m.machine_core_s_per_frame * 1e6:.0f} us of CPU per frame"
            + (
                f"; waits {m.wait_us:.0f} us for a CPU per wake-up "
                f"({m.wait_per_frame_time:.1%} of a frame time)"
                if m.wait_us is not None and m.wait_per_frame_time is not None
                else ""
            )
        )
        best, nxt = decide(steps, cap_mbit, headroom)
        if nxt is None:
            break
        rate = nxt
    best, _ = decide(steps, cap_mbit, headroom)
    if best is not None:
        chosen, verified = best, True
    else:
        chosen, verified = next_rate(steps, cap_mbit, headroom), False
    cal = Calibration(
        key=cache_key(params, pairs, size, cap_mbit, transports=transports),
        rate_mbit=chosen,
        verified=verified,
        capped=verified and chosen >= cap_mbit,
        cap_mbit=cap_mbit,
        headroom=headroom,
        steps=steps,
        switch=params.switch,
        planes=params.planes,
        flows=len(pairs),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        boot_id=boot_id(),
        code_hash=code_hash(),
        wall_s=round(time.monotonic() - t_start, 1),
        cores=lifecycle.cores_here(),
        switch_procs=lifecycle.switch_procs_default(params.planes),
    )
    return cal


def get(
    params: LabParams,
    pairs: Sequence[tuple[int, int]] | None = None,
    *,
    recalibrate: bool = False,
    measure: bool = True,
    size: int = SIZE,
    cap_mbit: float = DEFAULT_CAP_MBIT,
    name: str | None = None,
    echo: Printer | None = None,
) -> Calibration:
    """The calibration for this shape: from the cache when this boot and this code made one
    (unless ``recalibrate``), else measured now (``measure``; root) and cached."""
    pairs = list(pairs or default_pairs(params))
    key = cache_key(params, pairs, size, cap_mbit)
    if not recalibrate:
        cal = load_cached(key)
        if cal is not None:
            return cal
    if not measure:
        raise LabError(
            "no calibration of this lab shape in this boot: run `mrc-lab calibrate` (root) "
            "or give a rate"
        )
    if name is None:
        name = CAL_NAME if params.name != CAL_NAME else CAL_NAME + "x"
    say = echo or (lambda _t: None)
    say(
        f"calibrating: what this machine carries through a {params.planes}-plane lab with "
        f"{params.switch} switches ({len(pairs)} flow{'s' if len(pairs) > 1 else ''}, lab "
        f"{name}, a few seconds per step) ..."
    )
    cal = calibrate(params, pairs, size=size, cap_mbit=cap_mbit, name=name, echo=echo)
    cal.cache_file = str(cache_path())
    if store(cal) is None:
        cal.cache_file = f"not cached: cannot write {cache_path()}"
    return cal


# --- mrc-lab calibrate ----------------------------------------------------------------------


def add_arguments(p: Any) -> None:
    """The options of ``mrc-lab calibrate`` beyond the topology flags."""
    p.add_argument(
        "--lab",
        dest="name",
        metavar="NAME",
        default=CAL_NAME,
        help=f"name of the calibration lab it brings up and down [{CAL_NAME}]",
    )
    deprecated(p, "--name", "--lab", dest="name")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    p.add_argument(
        "--recalibrate", action="store_true", help="measure again even if this boot has a result"
    )
    p.add_argument(
        "--cap",
        type=lambda t: rate_with_unit(t) / 1e6,
        dest="cap_mbit",
        default=DEFAULT_CAP_MBIT,
        metavar="RATE",
        help=f"the highest rate to consider [{DEFAULT_CAP_MBIT:g}Mbit: the lab's default]",
    )
    deprecated(p, "--cap-mbit", "--cap", dest="cap_mbit", type=rate_in(1e6))


def run_cli(params: LabParams, args: Any) -> int:
    """``mrc-lab calibrate``: print (and cache) the calibration of ``params``'s shape."""
    cal = None
    if not args.recalibrate:
        cal = load_cached(cache_key(params, default_pairs(params), SIZE, args.cap_mbit))
    if cal is None:
        if not have_net_admin():
            print(
                "mrc-lab calibrate: measuring needs root (it brings up a small lab); nothing "
                "cached for this lab shape in this boot",
                file=sys.stderr,
            )
            return 2
        cal = get(
            params,
            recalibrate=True,
            cap_mbit=args.cap_mbit,
            name=params.name,
            echo=None if args.json else (lambda t: print(t, flush=True)),
        )
    if args.json:
        json.dump(cal.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(cal.line())
        print(cal.source())
    return 0
