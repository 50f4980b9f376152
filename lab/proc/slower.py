"""A measurement the CPU limited, run again at a lower link rate (``make reproduce``'s
experiments, ``make bench``'s benchmarks).

A run flagged ``cpu_bound`` (lab.proc.cpu) measured the machine, not the fabric. Halving the
link rate halves the frames the lab's processes move per second, and so their CPU, down to
the lab's fixed cost (its processes' wake-ups), which no rate removes. So: run again at half
the rate while that leaves fewer CPU-bound runs, up to a number of times, and keep the attempt
with the fewest, the fastest of those; every attempt is listed where it was kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from lab.fabric.params import MIN_RATE_MBIT

T = TypeVar("T")

#: each repeat runs at this share of the link rate of the attempt before
SLOWER = 0.5


def cpu_bound_runs(x: Any) -> int:
    """How many runs a result (or any part of it) flags CPU-bound: the sum of every
    ``cpu_bound_runs`` in it, a list of flags or a count, as the lab's results record them."""
    if isinstance(x, dict):
        n = 0
        for k, v in x.items():
            if k == "cpu_bound_runs":
                n += sum(1 for f in v if f) if isinstance(v, list) else int(v or 0)
            else:
                n += cpu_bound_runs(v)
        return n
    if isinstance(x, list):
        return sum(cpu_bound_runs(v) for v in x)
    return 0


def repeat_slower(
    run: Callable[[float | None], T],
    rate_of: Callable[[T], float | None],
    count: Callable[[T], int],
    repeats: int,
    echo: Callable[[str], None],
) -> tuple[list[tuple[T, int]], int]:
    """``run(None)`` (the caller's own rate), then ``run(rate)`` at half the rate of the
    attempt before while it had CPU-bound runs (``count``), fewer than the one before it, and
    ``repeats`` allow. Returns every attempt with its count, and the index of the one to keep:
    the fewest CPU-bound runs, the fastest of those."""
    first = run(None)
    tries = [(first, count(first))]
    while len(tries) <= repeats:
        res, n = tries[-1]
        rate = rate_of(res)
        if not n or not rate:
            break
        if len(tries) > 1 and n >= tries[-2][1]:
            break  # a lower rate did not help: the lab's fixed cost binds, not its rate
        slower = round(rate * SLOWER, 3)
        if slower < MIN_RATE_MBIT:
            echo(f"  {n} CPU-bound run(s) at {rate:g} Mb/s: no lower rate to try (a lab's "
                 f"links run at {MIN_RATE_MBIT:g} Mb/s or more)")  # fmt: skip
            break
        echo(f"  {n} CPU-bound run(s) at {rate:g} Mb/s: again at {slower:g} Mb/s")
        res = run(slower)
        tries.append((res, count(res)))
    best = min(range(len(tries)), key=lambda i: (tries[i][1], i))
    return tries, best


def attempts(
    tries: list[tuple[Any, int]],
    best: int,
    rate_of: Callable[[Any], Any],
    verdict_of: Callable[[Any], Any] | None = None,
) -> list[dict[str, Any]]:
    """The attempts as recorded beside the kept result (``cpu_bound_repeats``): each one's
    rate, CPU-bound runs, verdict (when there is one) and whether it is the one kept."""
    out = []
    for i, (r, n) in enumerate(tries):
        a: dict[str, Any] = {"rate_mbit": rate_of(r), "cpu_bound_runs": n}
        if verdict_of is not None:
            a["verdict"] = verdict_of(r)
        a["chosen"] = i == best
        out.append(a)
    return out


__all__ = ["SLOWER", "attempts", "cpu_bound_runs", "repeat_slower"]
