"""A timed fault schedule: :class:`Schedule` applies :class:`Step` s at fixed offsets from a
start with :class:`lab.fabric.faults.Faults` (which prints each command), records when each
one really happened (:class:`Applied`), and always undoes what it did (a link or port taken
down comes back up, loss is cleared) even when the run fails or the user presses Ctrl-C.

:class:`Step` (fields, checks, labels, text form) is :mod:`mrcnic.faultplan`'s, the one
definition ``mrc-sim --fault`` plays too; the lab adds what a step takes away (``outage``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.fabric.faults import Faults
from lab.fabric.netns import LabError
from lab.fabric.state import LabState
from lab.proc.analysis import FaultWindow, Outage
from mrcnic import faultplan

Printer = Callable[[str], None]


def say_to_stdout(text: str) -> None:
    print(text, flush=True)


class Step(faultplan.Step):
    """:class:`mrcnic.faultplan.Step` and what it takes away from the lab's fabric."""

    __slots__ = ()

    def outage(self) -> Outage:
        """What the step takes away, for the capacity analysis (``lab.proc.analysis``)."""
        if self.kind == "reboot":
            return Outage.switch(self.a)
        if self.kind == "link":
            return Outage.link(self.a, self.b)
        if self.kind == "port":
            return Outage.port(self.a, self.plane)
        return Outage.loss(self.a, self.b)


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

    def __init__(
        self, state: LabState, steps: Sequence[Step], echo: Printer = say_to_stdout
    ) -> None:
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
