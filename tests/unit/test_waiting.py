"""tests/waiting.py, the tests' one way of waiting for something, on a fake clock: it returns
the predicate's first truthy value, polls at its interval, and on timeout fails naming what it
waited for and the last value; the JSON version treats missing and half-written files as
"not yet"."""

from __future__ import annotations

import json

import pytest
import waiting as W


class FakeClock:
    """The waiting module's clock and its sleeps (time's and asyncio's), in virtual time:
    sleeping advances the clock at once."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s

    async def asleep(self, s: float) -> None:
        self.sleep(s)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(W.time, "monotonic", c.monotonic)
    monkeypatch.setattr(W.time, "sleep", c.sleep)
    monkeypatch.setattr(W.asyncio, "sleep", c.asleep)
    return c


def counter(truthy_from: int, value: object = "done"):
    calls = []

    def pred():
        calls.append(1)
        return value if len(calls) >= truthy_from else 0

    return pred, calls


def test_returns_the_first_truthy_value_polling_at_the_interval(clock) -> None:
    pred, calls = counter(4, {"up": True})
    assert W.wait_for(pred, 10, interval_s=0.5, what="x") == {"up": True}
    assert len(calls) == 4 and clock.sleeps == [0.5, 0.5, 0.5]


def test_does_not_sleep_when_already_true(clock) -> None:
    assert W.wait_for(lambda: 7, 1.0) == 7
    assert clock.sleeps == []


def test_timeout_names_what_and_the_last_value(clock) -> None:
    seen = iter(range(1000))
    with pytest.raises(AssertionError, match=r"after 1 s waiting for the port to come up") as e:
        W.wait_for(lambda: [] if next(seen) < 999 else 1, 1.0, 0.25, "the port to come up")
    assert "last value: []" in str(e.value)
    assert clock.now >= 101.0 and len(clock.sleeps) == 4  # checked at 0, .25, .5, .75, 1.0


async def test_async_twin_awaits_coroutine_predicates(clock) -> None:
    n = 0

    async def pred():
        nonlocal n
        n += 1
        return n if n >= 3 else None

    assert await W.wait_for_async(pred, 5, 0.1) == 3
    assert clock.sleeps == [0.1, 0.1]
    with pytest.raises(AssertionError, match="waiting for nothing; last value: False"):
        await W.wait_for_async(lambda: False, 0.3, 0.1, what="nothing")


def test_json_waits_for_the_file_to_exist_parse_and_satisfy(clock, tmp_path, monkeypatch) -> None:
    path = tmp_path / "stats.json"
    steps = iter(
        [
            lambda: None,  # missing
            lambda: path.write_text('{"ready": tr'),  # half-written
            lambda: path.write_text(json.dumps({"ready": False})),
            lambda: path.write_text(json.dumps({"ready": True, "n": 2})),
        ]
    )

    def sleep(s: float) -> None:
        clock.now += s
        next(steps)()

    monkeypatch.setattr(W.time, "sleep", sleep)
    next(steps)()
    assert W.wait_for_json(path, lambda d: d["ready"], 5) == {"ready": True, "n": 2}
    assert W.read_json(tmp_path / "missing.json") is None


def test_json_timeout_shows_the_last_document(clock, tmp_path) -> None:
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({"updated_unix": 5.0}))
    with pytest.raises(
        AssertionError, match=r"a fresh document; last value: \{'updated_unix': 5.0\}"
    ):
        W.wait_for_json(path, W.updated_after(10.0), 1.0, what="a fresh document")
    assert W.wait_for_json(path, W.updated_after(4.0), 1.0) == {"updated_unix": 5.0}
    assert not W.updated_after(0.0)({})  # a document without the field is never fresh
