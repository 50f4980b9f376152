"""Environment for the processes a lab starts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def env_added(env: dict[str, str] | None) -> Iterator[None]:
    """Run the body with ``env`` added to os.environ (processes started meanwhile, such as a
    lab's switches, inherit it), then put back what was there."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
