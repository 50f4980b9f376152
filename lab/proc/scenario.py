"""Run ``mrc-bench write`` against a lab while a fault schedule plays, and line both up.

Used by ``make demo`` (lab/workloads/demo.py) and ``make bench`` (bench/bench_e2e.py). Needs root and
a lab that is up. The pure part (capacity, dips, rendering) is lab/proc/analysis/.

- :class:`NetDev` reads a namespace's ``/proc/net/dev`` without a process: the file is opened
  once from inside the namespace (``setns`` in this thread), and a ``/proc/net`` file keeps
  the namespace it was opened in.
- :class:`Watch` samples the source host's NIC transmit bytes and the destination's receive
  bytes every ``poll_s`` in a thread. The first sample at which the source has sent more
  than ``START_BYTES`` since the previous one marks the start of the write on this
  process's clock (the fault schedule counts from it): QP set-up over the management
  network sends nothing on the NIC ports, so that is when data starts to flow.
- :class:`Schedule` applies :class:`Step` s at fixed offsets from that start with
  :class:`lab.fabric.faults.Faults` (which prints each command), records when each one really
  happened, and always undoes what it did (a link or port taken down comes back up, loss is
  cleared) even when the write fails or the user presses Ctrl-C.
- :func:`run_write` starts the mrc-bench process, plays the schedule, and returns a
  :class:`WriteRun`: the bench's JSON, the faults on the bench's timeline clock, and the wire
  counters. The bench timeline's t = 0 is its ``t0_unix`` key when it prints one, else the
  start the watch saw.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.fabric.faults import Faults
from lab.fabric.netns import LabError, in_netns
from lab.fabric.state import LabState
from lab.proc.analysis import FaultWindow, Outage
from lab.proc.cpu import pid_cpu_s

START_BYTES = 64 * 1024  # > this much sent on the NIC ports within one poll = data flows
T0_KEYS = ("start_unix_s", "t0_unix", "start_unix")

Printer = Callable[[str], None]


def _say(text: str) -> None:
    print(text, flush=True)


# --- counters -------------------------------------------------------------------------------


class NetDev:
    """Byte counters of the interfaces of one namespace, read from an fd opened inside it."""

    def __init__(self, netns: str) -> None:
        with in_netns(netns):
            self._fd = os.open("/proc/thread-self/net/dev", os.O_RDONLY)

    def read(self) -> dict[str, tuple[int, int]]:
        """{ifname: (rx_bytes, tx_bytes)}"""
        os.lseek(self._fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            b = os.read(self._fd, 65536)
            if not b:
                break
            chunks.append(b)
        return parse_net_dev(b"".join(chunks).decode())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` -> {ifname: (rx_bytes, tx_bytes)}."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        f = rest.split()
        if len(f) >= 9:
            out[name.strip()] = (int(f[0]), int(f[8]))
    return out


@dataclass
class Sample:
    t_mono: float
    t_unix: float
    src_tx: int
    dst_rx: int


class Watch:
    """Samples src tx / dst rx bytes on the NIC ports; detects the start of the write."""

    def __init__(self, state: LabState, src: str, dst: str, poll_s: float = 0.05) -> None:
        prefix = f"{state.name}-p"  # NIC ports: <name>-p<plane>
        self.prefix = prefix
        self.src = NetDev(state.namespace(src))
        self.dst = NetDev(state.namespace(dst))
        self.poll_s = poll_s
        self.samples: list[Sample] = []
        self.started = threading.Event()
        self.start_mono: float | None = None
        self.start_unix: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mrc-watch", daemon=True)

    def _sum(self, dev: NetDev, which: int) -> int:
        return sum(v[which] for k, v in dev.read().items() if k.startswith(self.prefix))

    def sample(self) -> Sample:
        return Sample(time.monotonic(), time.time(), self._sum(self.src, 1), self._sum(self.dst, 0))

    def __enter__(self) -> Watch:
        self.samples.append(self.sample())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.src.close()
        self.dst.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            s = self.sample()
            prev = self.samples[-1]
            self.samples.append(s)
            if self.start_mono is None and s.src_tx - prev.src_tx > START_BYTES:
                # Data began somewhere in (prev, s]: take the middle.
                self.start_mono = (prev.t_mono + s.t_mono) / 2
                self.start_unix = (prev.t_unix + s.t_unix) / 2
                self.started.set()

    def rate_bps(self, window_s: float = 1.0) -> float:
        """Destination receive rate on the wire over the last ``window_s`` (headers included)."""
        if len(self.samples) < 2:
            return 0.0
        last = self.samples[-1]
        first = next(
            (s for s in self.samples if s.t_mono >= last.t_mono - window_s), self.samples[0]
        )
        dt = last.t_mono - first.t_mono
        return (last.dst_rx - first.dst_rx) * 8 / dt if dt > 0 else 0.0

    def wire_timeline(self, t0_unix: float, bin_s: float) -> list[list[float]]:
        """Destination wire receive rate per bin (headers, retransmissions and control included):
        ``[t_s, bps]`` with t on the bench's timeline clock."""
        out: list[list[float]] = []
        if not self.samples:
            return out
        t_end = self.samples[-1].t_unix - t0_unix
        k = 0
        t = 0.0
        while t + bin_s <= t_end:
            a = _interp(self.samples, t0_unix + t)
            b = _interp(self.samples, t0_unix + t + bin_s)
            out.append([round(t, 4), round((b - a) * 8 / bin_s)])
            k += 1
            t = k * bin_s
        return out


def _interp(samples: Sequence[Sample], t_unix: float) -> float:
    """dst rx bytes at t_unix, linear between samples."""
    if t_unix <= samples[0].t_unix:
        return samples[0].dst_rx
    for a, b in zip(samples, samples[1:], strict=False):
        if a.t_unix <= t_unix <= b.t_unix:
            f = (t_unix - a.t_unix) / (b.t_unix - a.t_unix) if b.t_unix > a.t_unix else 0.0
            return a.dst_rx + f * (b.dst_rx - a.dst_rx)
    return samples[-1].dst_rx


# --- fault schedule -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """A fault at ``at_s`` after the write started; ``undo_s`` when to undo it (links, ports,
    loss); a reboot undoes itself after ``down_ms``.

    kind: ``reboot`` (a = switch), ``link`` (a, b), ``port`` (a = host, plane), ``loss``
    (a, b, percent)."""

    kind: str
    at_s: float
    a: str
    b: str = ""
    plane: int = -1
    undo_s: float | None = None
    down_ms: float = 1000.0
    percent: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("reboot", "link", "port", "loss"):
            raise ValueError(f"unknown fault kind {self.kind!r}")
        if self.kind != "reboot" and self.undo_s is not None and self.undo_s <= self.at_s:
            raise ValueError("undo_s must come after at_s")

    @property
    def label(self) -> str:
        return {
            "reboot": f"reboot {self.a}",
            "link": f"link {self.a}-{self.b} down",
            "port": f"NIC port {self.a}/p{self.plane} down",
            "loss": f"{self.percent:g}% loss {self.a}-{self.b}",
        }[self.kind]

    @property
    def heal_label(self) -> str:
        return {
            "reboot": f"{self.a} back",
            "link": "link up",
            "port": "port up",
            "loss": "loss cleared",
        }[self.kind]

    @property
    def mark(self) -> str:
        """One character for the text timeline (upper: fault, lower: undone)."""
        return {"reboot": "R", "link": "L", "port": "P", "loss": "X"}[self.kind]

    def outage(self) -> Outage:
        if self.kind == "reboot":
            return Outage.switch(self.a)
        if self.kind == "link":
            return Outage.link(self.a, self.b)
        if self.kind == "port":
            return Outage.port(self.a, self.plane)
        return Outage.loss(self.a, self.b)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "at_s": self.at_s, "a": self.a}
        if self.b:
            d["b"] = self.b
        if self.kind == "port":
            d["plane"] = self.plane
        if self.kind == "reboot":
            d["down_ms"] = self.down_ms
        else:
            d["undo_s"] = self.undo_s
        if self.kind == "loss":
            d["percent"] = self.percent
        return d


@dataclass
class Applied:
    """When a step really happened (unix seconds)."""

    step: Step
    start_unix: float
    end_unix: float | None = None
    commands: list[str] = field(default_factory=list)
    error: str | None = None


class Schedule:
    """Plays steps in a thread, from the moment ``start`` says; undoes them in :meth:`finish`."""

    def __init__(self, state: LabState, steps: Sequence[Step], echo: Printer = _say) -> None:
        self.steps = sorted(steps, key=lambda s: s.at_s)
        self.state = state
        self.echo = echo
        self.applied: list[Applied] = []
        self._pending_undo: list[Applied] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._lock = threading.Lock()

    def _faults(self, record: Applied) -> Faults:
        def echo(cmd: str) -> None:
            record.commands.append(cmd)
            self.echo(f"  [{time.monotonic() - self._t0:6.2f} s] {cmd}")

        return Faults(self.state, echo=echo)

    def start(self, t0_mono: float) -> None:
        self._t0 = t0_mono
        self._thread = threading.Thread(target=self._play, name="mrc-faults", daemon=True)
        self._thread.start()

    def _wait_until(self, t_rel: float) -> bool:
        delay = self._t0 + t_rel - time.monotonic()
        return not self._stop.wait(delay) if delay > 0 else not self._stop.is_set()

    def _play(self) -> None:
        events: list[tuple[float, int, Step, bool]] = []
        for n, s in enumerate(self.steps):
            events.append((s.at_s, n, s, True))
            if s.kind != "reboot" and s.undo_s is not None:
                events.append((s.undo_s, n, s, False))
        events.sort(key=lambda e: (e[0], e[1]))
        records: dict[int, Applied] = {}
        for at, n, step, do in events:
            if not self._wait_until(at):
                return
            if do:
                rec = Applied(step, time.time())
                with self._lock:
                    self.applied.append(rec)
                    records[n] = rec
                    if step.kind != "reboot":
                        self._pending_undo.append(rec)
                self._do(rec)
            else:
                rec = records.get(n)
                if rec is not None:
                    self._undo(rec)

    def _do(self, rec: Applied) -> None:
        s = rec.step
        f = self._faults(rec)
        try:
            if s.kind == "reboot":
                f.reboot(s.a, s.down_ms)
                rec.end_unix = time.time()
            elif s.kind == "link":
                f.link_down(s.a, s.b)
            elif s.kind == "port":
                f.port(s.a, s.plane, up=False)
            elif s.kind == "loss":
                f.loss(s.a, s.b, s.percent)
        except LabError as e:
            rec.error = str(e)
            self.echo(f"  fault {s.label} failed: {e}")

    def _undo(self, rec: Applied) -> None:
        with self._lock:
            if rec not in self._pending_undo:
                return
            self._pending_undo.remove(rec)
        s = rec.step
        f = self._faults(rec)
        try:
            if s.kind == "link":
                f.link_up(s.a, s.b)
            elif s.kind == "port":
                f.port(s.a, s.plane, up=True)
            elif s.kind == "loss":
                f.loss_clear(s.a, s.b)
        except LabError as e:
            rec.error = str(e)
            self.echo(f"  undoing {s.label} failed: {e}")
        rec.end_unix = time.time()

    def finish(self, timeout_s: float = 30.0) -> None:
        """Stop playing (a reboot in progress completes) and undo whatever is still applied."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        for rec in list(self._pending_undo):
            self._undo(rec)

    def windows(self, t0_unix: float) -> list[FaultWindow]:
        """The faults as they happened, on a clock whose 0 is ``t0_unix``."""
        out = []
        for rec in self.applied:
            s = rec.step
            out.append(
                FaultWindow(
                    s.label,
                    rec.start_unix - t0_unix,
                    None if rec.end_unix is None else rec.end_unix - t0_unix,
                    s.outage(),
                    s.heal_label,
                )
            )
        return out


# --- running mrc-bench ----------------------------------------------------------------------


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
            a += ["--timeline-ms", str(self.timeline_ms)]
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
    cpu: dict[str, float] = field(default_factory=dict)
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
            "lab_cpu": self.cpu,
            "error": self.error,
        }


def _stop_process(proc: subprocess.Popen) -> None:
    """SIGINT, then SIGTERM, then SIGKILL to the process group we created for it."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # its own session (start_new_session): only its children
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_write(
    state: LabState,
    spec: WriteSpec,
    steps: Sequence[Step] = (),
    *,
    echo: Printer = _say,
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
    cpu = CpuMeter(state)
    with (
        tempfile.TemporaryFile(mode="w+") as out_file,
        tempfile.TemporaryFile(mode="w+") as err_file,
        Watch(state, spec.src, spec.dst) as watch,
        cpu,
    ):
        try:
            proc = subprocess.Popen(
                argv,
                stdout=out_file,
                stderr=err_file,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
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
                _stop_process(proc)
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
            procs.append(
                subprocess.Popen(
                    s.argv(state.name),
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        while any(p.poll() is None for p in procs) and time.monotonic() - t_begin < limit:
            time.sleep(0.1)
    finally:
        for p in procs:
            _stop_process(p)
    results = []
    for s, (out, err) in zip(specs, files, strict=False):
        out.seek(0)
        err.seek(0)
        results.append(
            (s, parse_json_output(out.read()), "\n".join(err.read().strip().splitlines()[-10:]))
        )
    return results


# --- CPU ------------------------------------------------------------------------------------


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    total = sum(vals[:8])
    return total - idle, total


class CpuMeter:
    """CPU used while the body runs: by the processes this one started and waited for (the
    bench and its NIC processes: ``RUSAGE_CHILDREN``), by the lab's switch processes
    (``/proc/PID/stat``; a switch restarted meanwhile counts from its restart), and by the
    whole machine (``/proc/stat``; other users of the machine included)."""

    #: how often the machine's busy share is sampled while the body runs (busy_between)
    SAMPLE_S = 0.25

    def __init__(self, state: LabState) -> None:
        self.state = state
        self.result: dict[str, float] = {}
        # (unix time, busy jiffies, total jiffies) every SAMPLE_S: the machine's load in a
        # window of the run (writes started together overlap only after their processes
        # started; start-up and verification are no part of it)
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def _sample_loop(self) -> None:
        while True:
            self.samples.append((time.time(), *_machine_ticks()))
            if self._stop.wait(self.SAMPLE_S):
                self.samples.append((time.time(), *_machine_ticks()))
                return

    def busy_between(self, t0_unix_s: float, t1_unix_s: float) -> float | None:
        """The machine's busy share (0..1) between two unix times, from the samples closest
        inside the window (None when the window holds fewer than two samples)."""
        inside = [x for x in self.samples if t0_unix_s <= x[0] <= t1_unix_s]
        if len(inside) < 2:
            return None
        (_ta, busy_a, total_a), (_tb, busy_b, total_b) = inside[0], inside[-1]
        return (busy_b - busy_a) / (total_b - total_a) if total_b > total_a else None

    def _switch_cpu(self) -> dict[int, float]:
        out = {}
        for rec in self.state.processes.values():
            v = pid_cpu_s(rec.pid)
            if v is not None:
                out[rec.pid] = v
        return out

    def __enter__(self) -> CpuMeter:
        import resource

        self._t = time.monotonic()
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._switches = self._switch_cpu()
        self._machine = _machine_ticks()
        self._sampler = threading.Thread(target=self._sample_loop, name="cpu-sampler", daemon=True)
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import resource

        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        wall = time.monotonic() - self._t
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        bench = (ch.ru_utime - self._children.ru_utime) + (ch.ru_stime - self._children.ru_stime)
        now = self._switch_cpu()
        switches = sum(v - self._switches.get(pid, 0.0) for pid, v in now.items())
        busy, total = _machine_ticks()
        d_busy, d_total = busy - self._machine[0], total - self._machine[1]
        cores = os.cpu_count() or 1
        self.result = {
            "wall_s": round(wall, 3),
            "cores": cores,
            "bench_cpu_s": round(bench, 3),
            "switch_cpu_s": round(switches, 3),
            "bench_cores": round(bench / wall, 3) if wall > 0 else 0.0,
            "switch_cores": round(switches / wall, 3) if wall > 0 else 0.0,
            "machine_busy_percent": round(100.0 * d_busy / d_total, 1) if d_total else 0.0,
        }
