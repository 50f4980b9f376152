"""The NIC shell's timer (mrcnic.io.aio's FdTimer, a timerfd read as a loop reader, C in
csrc/mrc_timer.c, and its twin LoopTimer on loop.call_later) against the wall clock: this
tier lets real time pass, so it is not in tests/unit (``make test`` runs it; ``make
test-timing`` alone). The resolution test asks for 100 us deadlines many times on uvloop and
reports the lateness:

    .venv/bin/python -m pytest -q -s tests/timing/test_nic_timer_wallclock.py -k resolution

(the figures in docs/bench.md, "THE NIC UNDER THE BENCHMARK", come from it)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time

import pytest
import uvloop
import waiting as W

from mrcnic.io import timer
from mrcnic.io.timer import MIN_TIMER_S, FdTimer, LoopTimer

needs_timerfd = pytest.mark.skipif(timer.timerfd_ops() is None, reason="no timerfd backend")

# The re-armed deadline: far enough past the 3 ms look that a loaded machine's late wake-up
# cannot make it fire before the test has checked that the replaced 1 ms one did not.
LATER_S = 0.1


async def _lateness(make, n: int, delay_s: float) -> list[float]:
    """Arm ``n`` deadlines ``delay_s`` ahead, one after the other; the lateness of each."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    box: dict[str, object] = {}

    def fire() -> None:
        late.append(time.monotonic() - box["at"])  # type: ignore[operator]
        box["fut"].set_result(None)  # type: ignore[union-attr]

    timer = make(loop, fire)
    try:
        for _ in range(n):
            fut = loop.create_future()
            box["fut"] = fut
            now = time.monotonic()
            box["at"] = now + delay_s
            timer.arm(now + delay_s, now)
            await fut
    finally:
        timer.close()
    return late


def _summary(late: list[float]) -> dict[str, float]:
    s = sorted(late)
    return {
        "median_us": round(statistics.median(s) * 1e6, 1),
        "p99_us": round(s[int(0.99 * (len(s) - 1))] * 1e6, 1),
        "max_us": round(s[-1] * 1e6, 1),
    }


@needs_timerfd
def test_timer_resolution_well_under_a_base_rtt():
    """100 us deadlines: the timerfd fires a few tens of us late (the lab's delayed ACK is
    base RTT / 8, ~0.1-0.2 ms); call_later, libuv's ms timers, about a millisecond."""
    n = 2000

    async def main() -> tuple[dict, dict, float]:
        c0 = time.process_time()
        fine = await _lateness(lambda loop, fire: FdTimer.open(loop, fire), n, 100e-6)
        cpu = time.process_time() - c0
        coarse = await _lateness(lambda loop, fire: LoopTimer(loop, fire), 200, 100e-6)
        return _summary(fine), _summary(coarse), cpu

    fine, coarse, cpu = uvloop.run(main())
    print(f"\ntimerfd   100us deadlines x{n}: {fine}  (cpu {cpu:.3f} s)")
    print(f"call_later 100us deadlines x200: {coarse}")
    assert fine["median_us"] < 200, fine  # typically ~10-60 us; loose for a loaded machine
    assert coarse["median_us"] > 0.5 * MIN_TIMER_S * 1e6, coarse  # the floor is real
    # no busy-waiting: n x 100 us of waiting costs far less CPU than the wall time it spans
    assert cpu < 0.9 * n * (100e-6 + fine["median_us"] * 1e-6) + 0.2


@needs_timerfd
def test_fd_timer_rearm_disarm_and_idle():
    """A later arm replaces an earlier one (without a call: the timerfd is set again when it
    goes off early); disarm silences it; an idle timer costs no CPU."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        t = FdTimer.open(loop, lambda: fired.append(time.monotonic()))
        assert t is not None and t.fd >= 0
        try:
            now = time.monotonic()
            t.arm(now + 0.001, now)
            t.arm(now + LATER_S, now)  # replaces the first
            await asyncio.sleep(0.003)  # past the first deadline: letting time itself pass
            assert fired == []
            await W.wait_for_async(lambda: fired, 5, 0.001, what="the re-armed timer")
            assert len(fired) == 1 and fired[0] >= now + LATER_S
            assert t.fired_at == pytest.approx(now + LATER_S) and t.at is None
            # the later arm made no call: the timerfd went off at the first deadline, unseen,
            # and was set to the later one then
            assert t.rearms == 1
            now = time.monotonic()
            t.arm(now + 0.001, now)
            t.disarm()
            await asyncio.sleep(0.003)  # past the disarmed deadline: letting time itself pass
            assert len(fired) == 1
            t.arm(now - 1.0, now)  # a past deadline fires (soon after the spin guard)
            await W.wait_for_async(lambda: len(fired) == 2, 5, 0.001, what="the past deadline")
            assert len(fired) == 2
            r0, c0 = time.perf_counter(), time.process_time()
            await asyncio.sleep(0.2)  # idle, nothing armed: the CPU of time itself passing
            assert time.process_time() - c0 < 0.05 * (time.perf_counter() - r0) + 0.01
        finally:
            fd = t.fd
            t.close()
        with pytest.raises(OSError):
            os.fstat(fd)  # closed

    uvloop.run(main())
