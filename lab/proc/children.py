"""The one place where the lab starts and stops the processes it runs (mrc-bench writes, soak
ranks, a switch under test): each started in a session of its own, so that a stop reaches it
and its children by its PID's process group and nothing else, never by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

#: (signal, seconds to wait for the processes to end after it), in turn: a process that
#: ignores SIGINT (a write printing its result) gets SIGTERM, then SIGKILL
GRACEFUL: tuple[tuple[signal.Signals, float], ...] = (
    (signal.SIGINT, 5.0),
    (signal.SIGTERM, 3.0),
    (signal.SIGKILL, 3.0),
)

Stream = IO[Any] | int | None


def spawn(
    argv: Sequence[str],
    *,
    stdout: Stream = None,
    stderr: Stream = None,
    text: bool = False,
    cwd: str | Path | None = None,
) -> subprocess.Popen[Any]:
    """Start ``argv`` in a session of its own, its stdin closed."""
    return subprocess.Popen(
        list(argv),
        stdout=stdout,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
        text=text,
        cwd=cwd,
        start_new_session=True,
    )


def stop(
    procs: Sequence[subprocess.Popen[Any]],
    steps: Sequence[tuple[signal.Signals, float]] = GRACEFUL,
    *,
    group: bool = True,
) -> None:
    """Stop processes this one started, by PID: each signal of ``steps`` in turn to every one
    still running at once, then wait up to its seconds for them all. ``group``: to the
    process group of each (started by :func:`spawn`), else to the process alone."""
    for sig, wait_s in steps:
        alive = [p for p in procs if p.poll() is None]
        if not alive:
            return
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                if group:
                    os.killpg(p.pid, sig)  # its own session: only it and its children
                else:
                    p.send_signal(sig)
        deadline = time.monotonic() + wait_s
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.01, deadline - time.monotonic()))


def stop_one(
    proc: subprocess.Popen[Any],
    steps: Sequence[tuple[signal.Signals, float]] = GRACEFUL,
    *,
    group: bool = True,
) -> None:
    """:func:`stop` for one process."""
    stop([proc], steps, group=group)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt  # the clean-up of Ctrl-C: children stopped, lab down


def sigterm_as_interrupt() -> None:
    """A SIGTERM (``kill PID``, a CI timeout) cleans up as Ctrl-C does: the finally blocks
    that stop this process's children and take its labs down run, where the default action
    would end it at once and leave them (in the main thread only: Python's rule)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
