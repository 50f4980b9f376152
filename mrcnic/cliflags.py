"""What every command line of the project shares (docs/cli.md): the flags of one vocabulary
whose values carry their units, the old names kept as hidden aliases that say once what to
use instead, and the exit statuses.

Scripts outside the project use the old names, so they keep working: the alias stores into
the same destination (converted to the same unit) and prints one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from mrcnic.units import parse_rate, parse_size, usage

#: exit statuses of mrc-lab, mrc-bench, mrc-sim and mrc-switch (docs/cli.md)
EXIT_OK = 0
EXIT_FAILED = 1  # it ran and failed: a check, a transfer not verified, a lab not built
EXIT_USAGE = 2  # the command line cannot be used: a flag, a value, a lab or node that is not there
EXIT_INTERRUPTED = 130


def deprecated(
    parser: Any,
    old: str,
    new: str,
    *,
    dest: str,
    type: Callable[[str], Any] | None = None,
    action: str = "store",
) -> None:
    """Add ``old`` as a hidden alias of ``new``: it stores into ``dest`` (``type`` converts
    its value to the unit ``new`` stores) and prints one line naming ``new``. ``parser`` is
    a parser or an argument group (a mutually exclusive one keeps the pair exclusive)."""

    class _Deprecated(argparse.Action):
        def __call__(self, p: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
            print(
                f"{p.prog}: {option_string} is an old name, kept working; use {new} (docs/cli.md)",
                file=sys.stderr,
            )
            setattr(namespace, self.dest, True if action == "store_true" else values)

    kw: dict[str, Any] = {"dest": dest, "help": argparse.SUPPRESS, "action": _Deprecated,
                          "default": argparse.SUPPRESS}  # fmt: skip
    if action == "store_true":
        kw["nargs"] = 0
    elif type is not None:
        kw["type"] = type
    parser.add_argument(old, **kw)


def renamed(
    parser: Any,
    new: str,
    old: str,
    *,
    dest: str,
    type: Callable[[str], Any],
    old_type: Callable[[str], Any] | None = None,
    **kw: Any,
) -> None:
    """``new`` (its value carries its unit: ``type`` reads it) and ``old``, its hidden alias
    (:func:`deprecated`; ``old_type`` reads the old form, default ``type``), both into
    ``dest``; ``kw`` (default, metavar, help) go to ``new``."""
    parser.add_argument(new, dest=dest, type=type, **kw)
    deprecated(parser, old, new, dest=dest, type=old_type or type)


def rate_with_unit(text: str) -> float:
    """``--rate``: bit/s from a rate that names its unit (``100Mbit``, ``2.5G``, ``800M``).
    A bare number is refused: the old flags read it as Mb/s (mrc-lab) or bit/s (mrc-sim)."""
    t = text.strip()
    if t.replace(".", "", 1).isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the unit, e.g. {t}Mbit or {t}G (a bare number meant Mb/s to "
            "--rate-mbit and bit/s to --port-rate)"
        )
    value = usage(parse_rate, t)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a rate above 0")
    return value


def size_kib(text: str) -> int:
    """``--buffer``/``--ecn`` of mrc-lab: a size (``64K``, ``1.5M``, ``65536``) in whole KiB."""
    n = usage(parse_size, text)
    if n % 1024:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of KiB (e.g. 64K)")
    return n // 1024


def loss_arg(allow_all: bool = False) -> Callable[[str], float]:
    """argparse ``type=`` for ``--loss``: a probability below 1 (``0.001``) or a percent
    (``0.1%``), as a probability. A bare 1 or 50 is refused, not read as "everything lost"
    (the old ``mrc-lab loss --percent`` took a percent: the two are easy to mix up).
    ``allow_all``: up to 100% (a link that loses every frame, as a fault), written as a
    percent: a bare 1 is refused there too."""

    def loss(text: str) -> float:
        t = text.strip()
        try:
            value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a loss: a probability (0.001) or a percent (0.1%)"
            ) from None
        top = 1.0 if allow_all and t.endswith("%") else 1.0 - 1e-12
        if not 0.0 <= value <= top:
            hint = ""
            if not t.endswith("%"):
                hint = f"; for {t}% write {t}% or {float(t) / 100:g}" if value == value else ""
            most = (
                "below 1, or a percent up to 100%"
                if allow_all
                else "below 1, or a percent below 100%"
            )
            raise argparse.ArgumentTypeError(f"{text!r}: loss is a probability {most}{hint}")
        return value

    return loss


def png_path(text: str) -> str:
    """argparse ``type=`` for a plot's file: a name ending in .png, checked before the run."""
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"{text!r}: a file name ending in .png")
    return text


def within(
    convert: Callable[[str], Any],
    low: float | None = None,
    high: float | None = None,
    *,
    above: bool = False,
    unit: str = "",
) -> Callable[[str], Any]:
    """argparse ``type=``: ``convert``'s value, refused (naming the range) unless ``low <=``
    it (``low <`` it with ``above``) and it ``<= high``; ``unit`` names how the range reads
    (``ms``). So a value is checked when the command line is read, before any work."""

    def check(text: str) -> Any:
        v = convert(text)
        ok = v == v and (low is None or (v > low if above else v >= low))
        ok = ok and (high is None or v <= high)
        if not ok:
            lo = "" if low is None else f"{'above' if above else 'at least'} {low:g}{unit}"
            hi = "" if high is None else f"at most {high:g}{unit}"
            raise argparse.ArgumentTypeError(f"{text!r}: {' and '.join(x for x in (lo, hi) if x)}")
        return v

    return check
