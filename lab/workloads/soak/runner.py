"""One transport's soak: all-reduce jobs back to back while the fault schedule plays."""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from typing import Any

from lab.fabric import pyswitch
from lab.fabric.faults import Faults
from lab.fabric.netns import LabError
from lab.fabric.state import LabState
from lab.proc import cpu
from lab.proc.schedule import Applied, Printer, Schedule, Step, say_to_stdout
from lab.workloads.soak.config import MIN_JOB_S, TITLES, SoakConfig
from lab.workloads.soak.job import Job
from lab.workloads.soak.records import FaultSpan, StepRec, TransportRun, distribution


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
        say: Printer = say_to_stdout,
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
