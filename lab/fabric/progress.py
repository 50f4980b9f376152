"""A small progress display for bring-up and teardown (stderr; one line per step when not a tty)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.t0 = time.monotonic()
        self._step = ""
        self._total = 0
        self._done = 0
        self._step_t0 = self.t0

    def step(self, name: str, total: int = 0) -> None:
        self._finish_line()
        self._step, self._total, self._done = name, total, 0
        self._step_t0 = time.monotonic()
        self._draw()

    def advance(self, n: int = 1) -> None:
        self._done += n
        if self.tty:
            self._draw()

    def _draw(self) -> None:
        if self.quiet or not self.tty:
            return
        count = f" {self._done}/{self._total}" if self._total else ""
        self.stream.write(f"\r\033[K  {self._step}{count}")
        self.stream.flush()

    def _finish_line(self) -> None:
        if self.quiet or not self._step:
            return
        took = time.monotonic() - self._step_t0
        count = f" {self._total}/{self._total}" if self._total else ""
        prefix = "\r\033[K" if self.tty else ""
        self.stream.write(f"{prefix}  {self._step}{count}  ({took:.2f} s)\n")
        self.stream.flush()

    def done(self) -> float:
        self._finish_line()
        self._step = ""
        return time.monotonic() - self.t0
