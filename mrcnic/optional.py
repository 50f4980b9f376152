"""The optional packages: each is in one of mrc's extras (pyproject.toml), which `make setup`
(and so the README's two commands) installs; a bare `pip install mrc` leaves them out. What
needs one imports it through :func:`need` (or holds :func:`stand_in` in its place at module
level), so a missing package is a one-line error naming the extra that brings it, not a
traceback at import."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from mrcnic.errors import MrcError

#: package -> the extra of pyproject.toml that installs it (one source: tests hold
#: pyproject.toml to it)
EXTRAS = {"matplotlib": "plot", "numpy": "collectives", "rich": "top", "scapy": "capture"}


class MissingExtra(MrcError, ImportError):
    """An optional package is not installed; the message says how to install it."""


def message(package: str, for_what: str) -> str:
    extra = EXTRAS[package]
    return (f"{for_what} needs {package}, in mrc's '{extra}' extra: install it with "
            f".venv/bin/pip install -e '.[{extra}]' (`make setup` installs every extra)")  # fmt: skip


def need(module: str, for_what: str) -> ModuleType:
    """``module`` (e.g. ``matplotlib.pyplot``), or MissingExtra saying which extra has it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = module.split(".")[0]
        if package not in EXTRAS or (e.name or "").split(".")[0] != package:
            raise  # not the optional package itself: a real error
        raise MissingExtra(message(package, for_what)) from None


class _StandIn:
    """Held in a missing package's place: any use raises MissingExtra."""

    def __init__(self, package: str, for_what: str) -> None:
        self._text = message(package, for_what)

    def __getattr__(self, name: str) -> Any:
        raise MissingExtra(self._text)


def stand_in(package: str, for_what: str) -> Any:
    """What :func:`load` holds in a missing package's place."""
    return _StandIn(package, for_what)


def load(package: str, for_what: str) -> Any:
    """``package`` for a module-level name (``np = load("numpy", ...)``), or a stand-in
    that raises MissingExtra when used: importing the module never fails for it."""
    try:
        return need(package, for_what)
    except MissingExtra:
        return stand_in(package, for_what)


def agg_pyplot(for_what: str) -> Any:
    """matplotlib's pyplot on the Agg backend (files, no display), or MissingExtra."""
    mpl = need("matplotlib", for_what)
    mpl.use("Agg")
    return need("matplotlib.pyplot", for_what)


def first_missing(needs: dict[str, str]) -> str | None:
    """For a program's start: the message for the first missing package of ``needs``
    (package -> what needs it), or None when all are there."""
    for package, for_what in needs.items():
        try:
            need(package, for_what)
        except MissingExtra as e:
            return str(e)
    return None
