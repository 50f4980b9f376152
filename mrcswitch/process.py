"""What a switch process sets up around its loops: stop signals, a listening unix socket, and
the C loop's process-wide timing (the paced-send slack, the receive hold from the
environment).

Both a switch alone (:class:`mrcswitch.switch.Switch`) and a process serving several
(:class:`mrcswitch.host.SwitchHost`) use these; the command line is :mod:`mrcswitch.main`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket

TIMER_SLACK_NS = 100_000  # C loop: a paced send may leave this late (fewer timer wake-ups)
# C loop: after a wake-up by frames, sleep this long before looking again instead of being
# woken by each frame (bounded receive coalescing; adds at most this much latency per
# wake-up). MRC_SWITCH_HOLD_US overrides it; 0 = off.
DEFAULT_HOLD_US = 0.0


def hold_ns_from_env() -> int:
    """``MRC_SWITCH_HOLD_US`` (microseconds, 0..1e6) as nanoseconds, else the default."""
    text = os.environ.get("MRC_SWITCH_HOLD_US", "")
    try:
        us = float(text) if text else DEFAULT_HOLD_US
    except ValueError:
        us = DEFAULT_HOLD_US
    return int(min(max(us, 0.0), 1e6) * 1000)


def stop_signals_wake(ep: select.epoll, handler: object) -> tuple[int, int]:
    """SIGTERM and SIGINT call ``handler`` and wake ``ep``: the read end of a wake-up pipe is
    registered with it. Returns the pipe (read end, write end)."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)  # type: ignore[arg-type]
    ep.register(r, select.EPOLLIN)
    return r, w


def listen_unix(path: str) -> socket.socket:
    """A non-blocking Unix stream socket listening at ``path`` (replacing a stale one)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    s.setblocking(False)
    return s
