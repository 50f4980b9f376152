"""``mrc-lab top`` on a terminal: the live loop, keys (q quits), the one-shot frame."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from typing import Any

from lab.views.top.reader import Top
from lab.views.top.rows import DEFAULT_FAULTS_S, DEFAULT_INTERVAL_S
from lab.views.top.screen import render

# --- the terminal -----------------------------------------------------------------------------


@contextlib.contextmanager
def _cbreak(fd: int):
    """Keys without Enter and without echo (restored on the way out); nothing on a non-tty."""
    try:
        import termios
        import tty

        old = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):
        yield False
        return
    try:
        tty.setcbreak(fd)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, old)


def _wait_key(fd: int | None, timeout_s: float) -> str:
    """A key pressed within ``timeout_s`` ("" if none)."""
    if fd is None:
        time.sleep(timeout_s)
        return ""
    r, _w, _x = select.select([fd], [], [], max(0.0, timeout_s))
    if not r:
        return ""
    try:
        return os.read(fd, 32).decode(errors="replace")
    except OSError:
        return ""


def run(
    state: Any,
    interval_s: float = DEFAULT_INTERVAL_S,
    faults_s: float = DEFAULT_FAULTS_S,
    once: bool = False,
    width: int | None = None,
) -> int:
    """``mrc-lab top``: live until q or Ctrl-C; ``once``: one frame on stdout."""
    from mrcnic.optional import need

    Console = need("rich.console", "mrc-lab top").Console

    top = Top(state, interval_s, faults_s)
    top.faults.start()
    try:
        if once:
            top.faults.wait_reads(1)
            top.frame()  # the first sample: rates need two
            time.sleep(max(interval_s, 0.6))  # the switches rewrite their files every 0.5 s
            if state.switch_mode == "kernel":  # their counters come with the faults' reads
                top.faults.wait_reads(2, faults_s + 10.0)
            fr = top.frame()
            con = Console(width=width) if width else Console()
            tty = sys.stdout.isatty()
            con.print(render(fr, con.width, con.height if tty else None), crop=True)
            return 0
        return _live(top, interval_s, width)
    except KeyboardInterrupt:
        return 0
    finally:
        top.faults.stop()


def _live(top: Top, interval_s: float, width: int | None) -> int:
    from mrcnic.optional import need

    Console = need("rich.console", "mrc-lab top").Console
    from rich.live import Live

    con = Console(width=width) if width else Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    with (
        _cbreak(fd) if fd is not None else contextlib.nullcontext(False),
        Live(console=con, screen=True, auto_refresh=False, redirect_stdout=False) as live,
    ):
        try:
            while True:
                t0 = time.monotonic()
                fr = top.frame()
                w, h = con.size
                live.update(render(fr, w, h), refresh=True)
                deadline = t0 + interval_s
                while (left := deadline - time.monotonic()) > 0:
                    key = _wait_key(fd, left)
                    if key and (key[0] in "qQ" or key == "\x1b"):  # not an arrow's ESC [
                        return 0
        except KeyboardInterrupt:
            return 0
