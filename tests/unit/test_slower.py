"""lab.proc.slower.repeat_slower: an experiment with CPU-bound runs runs again at half the
rate, while that helps and the lab's lowest rate allows."""

from __future__ import annotations

from lab.fabric.params import MIN_RATE_MBIT
from lab.proc.slower import repeat_slower


def _run(counts: dict[float, int], start: float):
    def run(rate: float | None) -> tuple[float, int]:
        r = start if rate is None else rate
        return r, counts.get(r, 0)

    return run


def test_halves_while_it_helps_and_keeps_the_fewest() -> None:
    said: list[str] = []
    tries, best = repeat_slower(_run({8.0: 4, 4.0: 2, 2.0: 0}, 8.0), lambda r: r[0],
                                lambda r: r[1], 5, said.append)  # fmt: skip
    assert [t[0][0] for t in tries] == [8.0, 4.0, 2.0] and best == 2
    assert len(said) == 2


def test_stops_at_the_labs_lowest_rate() -> None:
    said: list[str] = []
    start = MIN_RATE_MBIT * 1.5  # half of it is below what a lab takes
    tries, best = repeat_slower(_run({start: 3}, start), lambda r: r[0], lambda r: r[1], 5,
                                said.append)  # fmt: skip
    assert len(tries) == 1 and best == 0
    assert "no lower rate to try" in said[-1]
