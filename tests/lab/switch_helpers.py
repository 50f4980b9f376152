"""The switch lab tests' helpers: the three-namespace switch chain of
``lab.workloads.bench.switch_chain`` (which bench/bench_switch.py uses too), under the name the tests
import (``import switch_helpers as H``).  Entering a namespace is ``mrcnic.io.netns.in_netns``.

Added for the tests: :func:`drain_until_quiet` (link-up chatter has passed) and
:func:`fresh_stats` (the switch's stats as of now, not as of its last refresh)."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable

import waiting as W

from lab.workloads.bench.switch_chain import *  # noqa: F403
from lab.workloads.bench.switch_chain import _start_switch  # noqa: F401  (a test restarts a switch)
from mrcnic.io.netns import in_netns  # noqa: F401


def drain_until_quiet(*socks: socket.socket, quiet_s: float = 0.3, timeout_s: float = 5.0) -> None:
    """Read and drop what arrives on ``socks`` until none has had a frame for ``quiet_s``:
    the kernel's link-up chatter (ND, MLD) has passed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select(list(socks), [], [], quiet_s)
        if not ready:
            return
        for s in ready:
            drain(s)  # noqa: F405
    raise AssertionError(f"sockets not quiet for {quiet_s} s within {timeout_s} s")


def fresh_stats(
    c: Chain,  # noqa: F405
    predicate: Callable[[dict], object] = lambda st: True,
    timeout_s: float = 5.0,
    what: str = "",
) -> dict:
    """The first stats document the switch built after this call (``updated_unix``) that
    satisfies ``predicate``: its counters include everything that happened before the call."""
    since = time.time()
    return W.wait_for_json(
        c.stats_path,
        lambda st: W.updated_after(since)(st) and predicate(st),
        timeout_s,
        what=what or "a stats refresh of the switch",
    )
