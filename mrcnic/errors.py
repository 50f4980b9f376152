"""The project's base exception: every error mrc raises on purpose derives from ``MrcError``.

Each layer keeps its own subclass (``WireError``, ``QpStateError``, ``ConfigError``,
``LabError``, ...) and, where a standard exception fits, also derives from it (a
``WireError`` is a ``ValueError``), so ``except MrcError`` at a program's edge catches what
mrc means to report and lets real bugs through.
"""

from __future__ import annotations


class MrcError(Exception):
    """An error mrc reports on purpose; the message says what and why."""
