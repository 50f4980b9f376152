"""Running ``mrc-bench`` from the lab: how to start it, one write under a fault schedule lined
up with the wire counters, writes side by side, and the JSON it printed.

:func:`run_write` starts the mrc-bench process, plays the schedule (:mod:`lab.proc.schedule`)
from the moment data starts (:mod:`lab.proc.watch`), and returns a :class:`WriteRun`: the
bench's JSON, the faults on the bench's timeline clock, and the wire counters. The bench
timeline's t = 0 is its ``t0_unix`` key when it prints one, else the start the watch saw.
Used by ``make demo`` (lab/workloads/demo.py), the experiments and ``make bench``
(bench/bench_e2e.py). Needs root and a lab that is up.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.fabric.state import LabState
from lab.proc import children
from lab.proc.analysis import FaultWindow
from lab.proc.cpu import ChildrenCpu, ChildrenCpuMeter
from lab.proc.schedule import Applied, Printer, Schedule, Step, say_to_stdout
from lab.proc.watch import Watch

T0_KEYS = ("start_unix_s", "t0_unix", "start_unix")


def bench_argv() -> list[str]:
    """How to start mrc-bench: ``$MRC_BENCH`` (a command line, for testing), else the venv's
    script, else the module."""
    if os.environ.get("MRC_BENCH"):
        return shlex.split(os.environ["MRC_BENCH"])
    exe = Path(sys.executable).with_name("mrc-bench")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mrc-bench")
    return [found] if found else [sys.executable, "-m", "lab.bench_cli"]


def bench_command() -> list[str]:
    """How mrc-bench starts the sides of a test (``ip netns exec NS ...``): the venv's script
    run by this interpreter, else ``-m``; :func:`bench_argv` is how the lab starts a test."""
    script = Path(sys.executable).parent / "mrc-bench"
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "lab.bench_cli"]


def bench_available() -> str | None:
    """None when mrc-bench can run, else why not."""
    if os.environ.get("MRC_BENCH"):
        return None
    # mrc-bench runs as a process of its own: look for its module, never import it from here
    # (it sits on the top floor; an import would point up)
    if importlib.util.find_spec("lab.bench_cli") is None:
        return "mrc-bench is not available (no module lab.bench_cli)"
    return None


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """One ``mrc-bench write``: everything but the lab."""

    src: str = "h0"
    dst: str = "h3"
    size: int = 1 << 20
    duration_s: float | None = 30.0
    iters: int | None = None
    qps: int | None = None
    transport: str = "mrc"
    timeline_ms: int | None = 250
    extra: tuple[str, ...] = ()

    def argv(self, lab: str) -> list[str]:
        a = [*bench_argv(), "write", "--lab", lab, "--src", self.src, "--dst", self.dst]
        a += ["--size", str(self.size)]
        if self.iters is not None:
            a += ["--iters", str(self.iters)]
        else:
            a += ["--duration", f"{self.duration_s:g}"]
        if self.qps is not None:
            a += ["--qps", str(self.qps)]
        a += ["--transport", self.transport]
        if self.timeline_ms:
            a += ["--timeline", f"{self.timeline_ms:g}ms"]
        return [*a, *self.extra, "--json"]


@dataclass
class WriteRun:
    """What one write produced: the bench's JSON (None if it printed none), faults on its
    timeline clock, and the wire counters."""

    spec: WriteSpec
    argv: list[str]
    result: dict[str, Any] | None
    returncode: int | None
    wall_s: float
    t0_unix: float | None
    t0_source: str  # "bench" (its t0_unix key), "watch" (NIC counters), "none"
    faults: list[FaultWindow]
    applied: list[Applied]
    wire: list[list[float]]
    stderr_tail: str
    error: str | None = None
    cpu: ChildrenCpu | None = None  # the lab's CPU over the run
    watch_start_unix: float | None = None  # when the watch saw data start (schedule's 0)

    @property
    def schedule_offset_s(self) -> float:
        """Where the schedule's 0 lies on the timeline's clock (a few ms, usually)."""
        if self.watch_start_unix is None or self.t0_unix is None:
            return 0.0
        return self.watch_start_unix - self.t0_unix

    @property
    def ok(self) -> bool:
        return self.result is not None and self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "transport": self.spec.transport,
            "returncode": self.returncode,
            "wall_s": round(self.wall_s, 3),
            "t0_source": self.t0_source,
            "faults": [f.to_dict() for f in self.faults],
            "fault_commands": [c for a in self.applied for c in a.commands],
            "fault_errors": [a.error for a in self.applied if a.error],
            "result": self.result,
            "wire_rx_timeline": self.wire,
            "lab_cpu": self.cpu.to_json() if self.cpu else {},
            "error": self.error,
        }


def run_write(
    state: LabState,
    spec: WriteSpec,
    steps: Sequence[Step] = (),
    *,
    echo: Printer = say_to_stdout,
    progress: Callable[[float, float], None] | None = None,
    start_timeout_s: float = 60.0,
    timeout_s: float | None = None,
) -> WriteRun:
    """Run one write with ``steps`` played from the moment data starts; see the module doc.

    ``progress(t_since_start_s, wire_rx_bps)`` is called about once a second. ``timeout_s``
    bounds the whole run (default: duration + 60 s, or 600 s for --iters)."""
    argv = spec.argv(state.name)
    if timeout_s is None:
        timeout_s = (spec.duration_s + 60.0) if spec.iters is None else 600.0
    schedule = Schedule(state, steps, echo)
    t_begin = time.monotonic()
    proc: subprocess.Popen | None = None
    error = None
    cpu = ChildrenCpuMeter(state)
    with (
        tempfile.TemporaryFile(mode="w+") as out_file,
        tempfile.TemporaryFile(mode="w+") as err_file,
        Watch(state, spec.src, spec.dst) as watch,
        cpu,
    ):
        try:
            proc = children.spawn(argv, stdout=out_file, stderr=err_file)
            started = False
            last_tick = 0.0
            while proc.poll() is None:
                now = time.monotonic()
                if not started and watch.started.is_set():
                    started = True
                    schedule.start(watch.start_mono or now)
                if not started and now - t_begin > start_timeout_s:
                    error = f"no data on {spec.src}'s NIC ports within {start_timeout_s:.0f} s"
                    break
                if now - t_begin > timeout_s:
                    error = f"mrc-bench still running after {timeout_s:.0f} s: stopped"
                    break
                if progress and started and now - last_tick >= 1.0:
                    last_tick = now
                    progress(now - (watch.start_mono or now), watch.rate_bps())
                time.sleep(0.05)
        finally:
            if proc is not None:
                children.stop_one(proc)
            schedule.finish()
        wall = time.monotonic() - t_begin
        out_file.seek(0)
        err_file.seek(0)
        stdout = out_file.read()
        stderr = err_file.read()
    result = parse_json_output(stdout)
    if result is None and error is None:
        error = f"mrc-bench printed no JSON (exit status {proc.returncode if proc else None})"
    t0_unix, source = None, "none"
    if result is not None:
        for k in T0_KEYS:
            if isinstance(result.get(k), int | float):
                t0_unix, source = float(result[k]), "bench"
                break
    if t0_unix is None and watch.start_unix is not None:
        t0_unix, source = watch.start_unix, "watch"
    bin_s = (spec.timeline_ms or 250) / 1000.0
    return WriteRun(
        spec=spec,
        argv=argv,
        result=result,
        returncode=proc.returncode if proc else None,
        wall_s=wall,
        t0_unix=t0_unix,
        t0_source=source,
        faults=schedule.windows(t0_unix) if t0_unix is not None else [],
        applied=schedule.applied,
        wire=watch.wire_timeline(t0_unix, bin_s) if t0_unix is not None else [],
        stderr_tail="\n".join(stderr.strip().splitlines()[-15:]),
        error=error,
        cpu=cpu.result,
        watch_start_unix=watch.start_unix,
    )


def parse_json_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object mrc-bench printed (the last one, if it printed other lines too)."""
    text = stdout.strip()
    if not text:
        return None
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        return data if isinstance(data, dict) else None
    # Other output before the object: take the last line that starts an object.
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith("{"):
            with contextlib.suppress(ValueError):
                data = json.loads("\n".join(lines[i:]))
                if isinstance(data, dict):
                    return data
    return None


def run_parallel(
    state: LabState,
    specs: Sequence[WriteSpec],
    *,
    timeout_s: float | None = None,
) -> list[tuple[WriteSpec, dict[str, Any] | None, str]]:
    """Start several writes at once (no faults); returns (spec, JSON or None, stderr tail)."""
    procs = []
    files = []
    t_begin = time.monotonic()
    limit = timeout_s or (max((s.duration_s or 0) for s in specs) + 90.0)
    with contextlib.ExitStack() as stack:
        for _ in specs:
            out = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            err = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            files.append((out, err))
        return _run_all(state, specs, files, procs, t_begin, limit)


def _run_all(state, specs, files, procs, t_begin, limit):
    try:
        for s, (out, err) in zip(specs, files, strict=True):
            procs.append(children.spawn(s.argv(state.name), stdout=out, stderr=err))
        while any(p.poll() is None for p in procs) and time.monotonic() - t_begin < limit:
            time.sleep(0.1)
    finally:
        children.stop(procs)
    results = []
    for s, (out, err) in zip(specs, files, strict=False):
        out.seek(0)
        err.seek(0)
        results.append(
            (s, parse_json_output(out.read()), "\n".join(err.read().strip().splitlines()[-10:]))
        )
    return results
