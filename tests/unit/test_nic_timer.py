"""The NIC shell's timer (mrcnic.io.aio): a timerfd read as a loop reader (FdTimer, C in
csrc/mrc_timer.c) and its twin on loop.call_later (LoopTimer, floored at 1 ms), without the
wall clock. The tests that let real time pass (resolution, re-arm, disarm, idle) are in
tests/timing/test_nic_timer_wallclock.py."""

from __future__ import annotations

import asyncio
import os

import pytest
import uvloop

from mrcnic.io import timer
from mrcnic.io.timer import MIN_TIMER_S, FdTimer, LoopTimer


def test_loop_timer_is_the_floored_twin():
    """Without a timerfd the NIC uses call_later, floored at MIN_TIMER_S."""

    class Handle:
        def cancel(self) -> None:
            pass

    class Loop:
        def __init__(self) -> None:
            self.calls: list[float] = []

        def call_later(self, delay: float, fn) -> Handle:
            self.calls.append(delay)
            return Handle()

    loop = Loop()
    t = LoopTimer(loop, lambda: None)  # type: ignore[arg-type]
    t.arm(10.0001, 10.0)
    assert loop.calls == [MIN_TIMER_S]
    t.arm(10.00015, 10.0)  # within the slack of the armed deadline: kept
    assert len(loop.calls) == 1
    t.arm(10.5, 10.0)
    assert loop.calls[-1] == pytest.approx(0.5)
    assert os.environ.get("MRC_PURE_PYTHON") == "1" or timer.timerfd_ops() is not None


def test_nic_falls_back_without_timerfd(monkeypatch):
    monkeypatch.setattr(timer, "timerfd_ops", lambda: None)

    async def main() -> object:
        return FdTimer.open(asyncio.get_running_loop(), lambda: None)

    assert uvloop.run(main()) is None
