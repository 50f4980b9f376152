"""Waiting for something to happen, for the tests of every tier (``import waiting as W``).

A test that needs a process, a switch or a file to reach some state polls for it with
:func:`wait_for` instead of sleeping a fixed time: it goes on as soon as the state is there
(fast on an idle machine) and still passes on a loaded one (the timeout is a generous upper
bound, never a measurement). On timeout it fails with what it waited for and the last value
it saw. :func:`wait_for_json` does the same for a JSON stats file that a process rewrites
(missing or half-written files count as "not yet"), and :func:`updated_after` is the
predicate for "a stats document written after this moment" (the switch's ``updated_unix``).

tests/ is on ``sys.path`` through tests/conftest.py (pytest's default import mode puts a
conftest's directory there), so both tiers import this module by its bare name.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

INTERVAL_S = 0.05


def _timed_out(what: str, timeout_s: float, last: object) -> AssertionError:
    return AssertionError(
        f"timed out after {timeout_s:g} s waiting for {what}; last value: {last!r}"
    )


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float,
    interval_s: float = INTERVAL_S,
    what: str = "the condition",
) -> T:
    """Call ``predicate`` every ``interval_s`` until it returns something truthy, and return
    that; raise AssertionError naming ``what`` and the last value after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout_s, value)
        time.sleep(interval_s)  # the polling interval: waiting on time itself


async def wait_for_async(
    predicate: Callable[[], T | Awaitable[T]],
    timeout_s: float,
    interval_s: float = INTERVAL_S,
    what: str = "the condition",
) -> T:
    """:func:`wait_for` inside an event loop: the loop keeps running while it waits.
    ``predicate`` may be a plain function or a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout_s, value)
        await asyncio.sleep(interval_s)  # the polling interval: waiting on time itself


def read_json(path: str | Path) -> Any | None:
    """The document in ``path``, or None while the file is missing or does not parse."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def wait_for_json(
    path: str | Path,
    predicate: Callable[[Any], object] = lambda doc: True,
    timeout_s: float = 10.0,
    interval_s: float = INTERVAL_S,
    what: str | None = None,
) -> Any:
    """The first document read from ``path`` that parses and satisfies ``predicate``."""
    doc: Any = None

    def ready() -> Any:
        nonlocal doc
        doc = read_json(path)
        return doc is not None and bool(predicate(doc))

    try:
        wait_for(ready, timeout_s, interval_s, what or f"{path} to satisfy the test")
    except AssertionError:
        raise _timed_out(what or f"{path}", timeout_s, doc) from None
    return doc


def updated_after(t_unix: float) -> Callable[[dict], bool]:
    """Predicate: a stats document built after ``t_unix`` (time.time()), so its counters
    include whatever happened before then (mrc-switch writes ``updated_unix``)."""
    return lambda doc: doc.get("updated_unix", 0.0) > t_unix
