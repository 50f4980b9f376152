"""The switch's stats file: written atomically, and off the forwarding loop.

Replacing the previous file frees its blocks, and on a file system mounted with ``discard``
(this machine's ext4, /run included) that waits for the device: milliseconds in which a
single-threaded switch would read no frames while its receive ring overflows. So the loop
only builds the document; a writer thread does the file system calls (they release the
GIL), always writing the newest document it was given. The last document (``"ready":
false`` at exit) is written synchronously, after the thread has finished, so it is the one
readers see last.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("mrc-switch")


def write_atomic(path: str, data: bytes) -> None:
    """Temp file + rename: readers never see a half-written file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot write stats to %s: %s", path, exc)


class StatsWriter:
    """Writes documents to ``path`` from a daemon thread, newest first (older pending ones
    are skipped: only the current state matters)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._cv = threading.Condition()
        self._pending: bytes | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="stats-writer", daemon=True)
        self._thread.start()

    def submit(self, data: bytes) -> None:
        with self._cv:
            self._pending = data
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._pending is None and not self._closing:
                    self._cv.wait()
                data, self._pending = self._pending, None
                if data is None:
                    return  # closing, nothing left
            write_atomic(self.path, data)

    def close(self, final: bytes | None = None) -> None:
        """Finish pending writes, stop the thread, then write ``final`` (synchronously)."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join()
        if final is not None:
            write_atomic(self.path, final)
