"""The NIC shell's one timer: a timerfd (CLOCK_MONOTONIC, absolute deadlines) read as a loop
reader (:class:`FdTimer`, ``csrc/mrc_timer.c``), serving deadlines to tens of microseconds,
and its twin, ``loop.call_later`` floored at 1 ms as libuv's timers are (:class:`LoopTimer`).
docs/bench.md has the measured lateness of both."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from mrcnic.io import batch as batch_io

MIN_TIMER_S = 0.001  # LoopTimer: libuv timers are in ms, a shorter delay would spin the loop
FINE_MIN_S = 20e-6  # FdTimer: a deadline is at least this far after the pump (a spin guard)
TIMER_SLACK_S = 10e-6  # a new deadline this close to the armed one keeps the armed one
EARLY_S = 1e-6  # FdTimer: going off this much before the deadline is on time (clock rounding)


class LoopTimer:
    """The twin: ``loop.call_later``, floored at ``floor_s`` (libuv's timers are in ms, and a
    shorter delay would make the loop spin).  ``arm(at, now)`` (``at`` in the NIC's clock)
    replaces the deadline; ``fire`` is called once when it passes."""

    kind = "loop"

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        floor_s: float = MIN_TIMER_S,
    ) -> None:
        self.loop = loop
        self.fire = fire
        self.floor_s = floor_s
        self.at: float | None = None  # the deadline armed (None: disarmed)
        self.fired_at: float | None = None  # the deadline of the last firing
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, at: float, now: float) -> None:
        if self._handle is not None:
            if self.at is not None and abs(at - self.at) < max(TIMER_SLACK_S, self.floor_s / 5):
                return
            self._handle.cancel()
        delay = at - now
        if delay < self.floor_s:
            delay = self.floor_s
        self.at = at
        self._handle = self.loop.call_later(delay, self._on_fire)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.at = None

    def _on_fire(self) -> None:
        self._handle = None
        self.fired_at, self.at = self.at, None
        self.fire()

    def close(self) -> None:
        self.disarm()


@dataclass(frozen=True, slots=True)
class TimerfdOps:
    """A CLOCK_MONOTONIC timerfd's operations, each returning a status (-errno on failure):
    ``open()`` -> fd, ``arm(fd, deadline_s)`` (absolute), ``ack(fd)`` -> expirations read.
    (No disarm: :class:`FdTimer` lets a timerfd it no longer needs go off once, unseen.)"""

    source: str
    open: Callable[[], int]
    arm: Callable[[int, float], int]
    ack: Callable[[int], int]


def timerfd_ops() -> TimerfdOps | None:
    """The C module's timerfd (csrc/mrc_timer.c), else ``os.timerfd_*`` (Python >= 3.13),
    else None (the NIC then uses :class:`LoopTimer`)."""
    mod = batch_io.c_module_with("mrc_timer_arm")
    if mod is not None:
        lib = mod.lib
        return TimerfdOps("c", lib.mrc_timer_open, lib.mrc_timer_arm, lib.mrc_timer_ack)
    if sys.version_info < (3, 13) or not hasattr(os, "timerfd_create"):  # pragma: no cover
        return None

    def _open() -> int:  # pragma: no cover
        try:
            return os.timerfd_create(time.CLOCK_MONOTONIC, flags=os.TFD_NONBLOCK | os.TFD_CLOEXEC)
        except OSError as e:
            return -(e.errno or 1)

    def _arm(fd: int, at: float) -> int:  # pragma: no cover
        if not math.isfinite(at):
            return -22
        try:
            os.timerfd_settime(fd, flags=os.TFD_TIMER_ABSTIME, initial=max(at, 1e-9))
        except OSError as e:
            return -(e.errno or 1)
        return 0

    def _ack(fd: int) -> int:  # pragma: no cover
        try:
            return int.from_bytes(os.read(fd, 8), "little")
        except BlockingIOError:
            return 0
        except OSError as e:
            return -(e.errno or 1)

    return TimerfdOps("os", _open, _arm, _ack)


class FdTimer:
    """A timerfd (CLOCK_MONOTONIC, non-blocking) registered as a reader of the loop: wakes the
    loop at the deadline to tens of microseconds, where the loop's own timers are in ms.
    Arming is one system call (absolute time, so it needs no "now"); idle costs nothing.
    A deadline that moves later (a delayed ACK pushed back by every receive batch) costs no
    call: the timerfd goes off at the earlier one and is set again then, without ``fire``;
    a disarm likewise only forgets the deadline.
    ``open(loop, fire, clock)`` returns None when no timerfd can be had."""

    kind = "timerfd"

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        fd: int,
        ops: TimerfdOps,
        clock: Callable[[], float],
    ) -> None:
        self.loop = loop
        self.fire = fire
        self.fd = fd
        self.ops = ops
        self._arm_abs = ops.arm
        self._ack = ops.ack
        # time.monotonic() is CLOCK_MONOTONIC: its deadlines are the timerfd's; another clock's
        # deadlines become CLOCK_MONOTONIC ones through the delay
        self._absolute = clock is time.monotonic
        self._clock = clock
        self.at: float | None = None  # the deadline asked for (None: disarmed)
        self._fd_at: float | None = None  # the deadline the timerfd is set to (None: not set)
        self.rearms = 0  # times the timerfd went off early and was set again (for tests)
        self.fired_at: float | None = None  # the deadline of the last firing
        self.errors = 0
        loop.add_reader(fd, self._on_readable)

    @classmethod
    def open(
        cls,
        loop: asyncio.AbstractEventLoop,
        fire: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> FdTimer | None:
        ops = timerfd_ops()
        if ops is None:
            return None
        fd = ops.open()
        if fd < 0:
            return None
        try:
            return cls(loop, fire, fd, ops, clock)
        except BaseException:
            os.close(fd)
            raise

    def arm(self, at: float, now: float) -> None:
        armed = self.at
        if armed is not None and abs(at - armed) < TIMER_SLACK_S:
            return
        self.at = at
        fd_at = self._fd_at
        if fd_at is not None and fd_at <= at:
            return  # the timerfd goes off first; _on_readable sets it to this then
        self._set(at, now)

    def _set(self, at: float, now: float) -> None:
        if at < now + FINE_MIN_S:
            at = now + FINE_MIN_S
        self._fd_at = at
        mono = at if self._absolute else time.monotonic() + (at - now)
        if self._arm_abs(self.fd, mono) < 0:  # never seen: fire from the loop, coarsely
            self.errors += 1
            self._fd_at = None
            self.loop.call_later(max(at - now, MIN_TIMER_S), self._fire)

    def disarm(self) -> None:
        self.at = None  # (a timerfd still set goes off once, for nothing: cheaper than a call)

    def _on_readable(self) -> None:
        if self._ack(self.fd) == 0:
            return  # re-armed after the expiry was signalled: not due
        self._fd_at = None
        at = self.at
        if at is None:
            return  # disarmed since it was set
        now = self._clock()
        if now < at - EARLY_S:  # the deadline moved later since: set it there, no fire
            self.rearms += 1
            self._set(at, now)
            return
        self._fire()

    def _fire(self) -> None:
        self.fired_at, self.at = self.at, None
        self.fire()

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        self.at = self._fd_at = None
