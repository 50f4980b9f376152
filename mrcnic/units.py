"""Sizes, times and rates as people type them: the one parser every mrc command line uses.

=========  ======================================================================================
kind       accepted forms (the number: ``4096``, ``1.5``, ``.5``, ``2e-5``; never negative)
=========  ======================================================================================
size       bytes, **binary** multiples (1K = 1024, as docs/sim.md and docs/bench.md have always
           said): a plain number is bytes; ``B``; ``K``/``M``/``G``/``T``, each optionally
           followed by ``B``, ``i`` or ``iB``, in any case: ``64K`` = ``64k`` = ``64KB`` =
           ``64kB`` = ``64KiB`` = ``64Ki`` = 65536.  Decimals are fine when the result is a
           whole number of bytes: ``1.5M`` = 1572864, ``1.3K`` is refused.
time       seconds: a plain number is seconds; ``s``, ``ms``, ``us`` (or ``µs``), ``ns``:
           ``10ms``, ``200us``, ``1.5s``, ``0.5``.
rate       bits per second, **decimal** multiples (1k = 1000, as tc and link speeds count): a
           plain number is bit/s; ``k``/``m``/``g``/``t`` in any case, optionally followed by
           ``bit``, ``bits``, ``bit/s`` (any case), ``bps`` or ``b/s``: ``100M`` = ``100Mbit``
           = ``100mbit`` = ``100Mbps`` = ``100Mb/s`` = 1e8; ``1G`` = ``1gbit``; ``25Gbps``.
           ``bps`` means *bits* here, as in "a 25 Gbps link"; ``MB/s`` and ``MBps`` (a capital
           B: bytes) are refused, and so is every ``bps`` in ``mrc-lab shape``, whose tc
           reads ``mbps`` as megabytes.
=========  ======================================================================================

Whitespace around the number and between number and unit is ignored.  Every failure raises
:class:`UnitsError` (a ``ValueError``) whose message names the accepted forms.

Command lines use the ``*_arg`` helpers as argparse ``type=``: they turn a ``UnitsError``
into an argparse error (exit status 2 with the usage line).  A flag whose name carries its
unit (``--rate-mbit``, ``--buffer-kb``, ``--period-ms``) takes a plain number in that unit
and any spelled-out value converted to it: ``--buffer-kb 64`` = ``--buffer-kb 64K``, and
``--buffer-kb 1.5M`` is 1536.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import TypeVar

from mrcnic.errors import MrcError

__all__ = [
    "RATE_FORMS",
    "SIZE_FORMS",
    "TIME_FORMS",
    "UnitsError",
    "in_unit",
    "parse_rate",
    "parse_size",
    "parse_time",
    "rate_arg",
    "rate_in",
    "size_arg",
    "size_in",
    "time_arg",
    "time_in",
]

SIZE_FORMS = (
    "bytes, optionally with a binary multiple K, M, G or T (1K = 1024; k, KB, KiB alike), "
    "e.g. 4096, 64K, 1.5M, 1GiB"
)
TIME_FORMS = "seconds, optionally with a unit s, ms, us or ns, e.g. 0.5, 1.5s, 10ms, 200us"
RATE_FORMS = (
    "bits per second, optionally with a decimal multiple k, M, G or T (1k = 1000) and bit, "
    "bps or b/s, e.g. 800, 100M, 100Mbit, 1gbit, 25Gbps"
)


class UnitsError(MrcError, ValueError):
    """A size, time or rate that does not parse; the message names the accepted forms."""


_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d{1,3}))?"
_MAX = Decimal("1e30")  # beyond any size, time or rate mrc can use (and float's precision)
_T = TypeVar("_T")
_PATTERNS = {
    "size": re.compile(rf"\s*{_NUMBER}\s*(?:([kmgt])(?:i?b|i)?|b)?\s*", re.IGNORECASE),
    "time": re.compile(rf"\s*{_NUMBER}\s*(s|ms|us|µs|μs|ns)?\s*", re.IGNORECASE),
    # the b of bps and b/s is lower case: B/s and Bps are bytes per second
    "rate": re.compile(rf"\s*{_NUMBER}\s*(?i:([kmgt]))?(?:(?i:bits?|bit/s)|bps|b/s)?\s*"),
}
_BYTE_RATE = re.compile(rf"\s*{_NUMBER}\s*[kmgtKMGT]?(?:B/s|Bps)\s*")
_PLAIN = re.compile(rf"\s*{_NUMBER}\s*", re.IGNORECASE)
_MULTIPLIERS: dict[str, dict[str, int | Decimal]] = {
    "size": {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40},
    "time": {
        "": 1,
        "s": 1,
        "ms": Decimal("1e-3"),
        "us": Decimal("1e-6"),
        "µs": Decimal("1e-6"),
        "μs": Decimal("1e-6"),
        "ns": Decimal("1e-9"),
    },
    "rate": {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12},
}
_FORMS = {"size": SIZE_FORMS, "time": TIME_FORMS, "rate": RATE_FORMS}


def _decimal(kind: str, value: object) -> Decimal:
    """``value`` (text, or a number as in a YAML file or a default) in bytes, seconds or
    bit/s, exactly."""
    forms = _FORMS[kind]
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        try:
            d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        except InvalidOperation:  # pragma: no cover - every int/float converts
            d = Decimal("NaN")
    elif isinstance(value, str) and (m := _PATTERNS[kind].fullmatch(value)):
        d = Decimal(m.group(1))
        if m.group(2) is not None:
            d = d.scaleb(int(m.group(2)))
        d *= _MULTIPLIERS[kind][(m.group(3) or "").lower()]
    elif kind == "rate" and isinstance(value, str) and _BYTE_RATE.fullmatch(value):
        raise UnitsError(f"bad rate {value!r}: B/s and Bps are bytes; give bits: {forms}")
    else:
        raise UnitsError(f"bad {kind} {value!r}: use {forms}")
    if not d.is_finite() or d < 0:
        raise UnitsError(f"bad {kind} {value!r}: must be >= 0; use {forms}")
    if d > _MAX:
        raise UnitsError(f"bad {kind} {value!r}: too large")
    return d


def parse_size(text: str | int) -> int:
    """Bytes from ``4096``, ``64K``, ``1.5M``, ``1GiB``... (binary multiples, see the module
    doc); a fraction of a byte is refused."""
    d = _decimal("size", text)
    if d != d.to_integral_value():
        raise UnitsError(f"size {text!r} is not a whole number of bytes; use {SIZE_FORMS}")
    return int(d)


def parse_time(text: str | float) -> float:
    """Seconds from ``10ms``, ``200us``, ``1.5s``, ``20ns`` or plain seconds (``0.5``)."""
    return float(_decimal("time", text))


def parse_rate(text: str | float) -> float:
    """Bits per second from ``100M``, ``100Mbit``, ``1gbit``, ``25Gbps``, ``800``...
    (decimal multiples, see the module doc)."""
    return float(_decimal("rate", text))


_UNIT_NAMES = {
    ("size", Decimal(1024)): "KiB",
    ("size", Decimal(1)): "bytes",
    ("time", Decimal("0.001")): "ms",
    ("time", Decimal(1)): "s",
    ("rate", Decimal(10**6)): "Mbit/s",
    ("rate", Decimal(1)): "bit/s",
}


def in_unit(kind: str, value: str | float, unit: float, whole: bool = False) -> float | int:
    """``value`` (a ``kind`` of "size", "time" or "rate") in multiples of ``unit`` bytes,
    seconds or bit/s: a plain number is taken to be in that unit already, anything spelled
    out is converted (``in_unit("size", "1.5M", 1024) == 1536``).  With ``whole`` the
    result must be a whole number of units and is an int (sizes always are)."""
    u = Decimal(repr(unit)) if isinstance(unit, float) else Decimal(unit)
    if not isinstance(value, str) or _PLAIN.fullmatch(value):
        d = _decimal(kind, value.strip() if isinstance(value, str) else value)
    else:
        d = _decimal(kind, value) / u
    if whole or kind == "size":
        if d != d.to_integral_value():
            name = _UNIT_NAMES.get((kind, u), f"units of {unit:g}")
            raise UnitsError(f"{kind} {value!r} is not a whole number of {name}")
        return int(d)
    return float(d)


# -- argparse ---------------------------------------------------------------------------------


def usage(convert: Callable[[str], _T], text: str) -> _T:
    """``convert(text)``, a ``UnitsError`` turned into an argparse usage error."""
    try:
        return convert(text)
    except UnitsError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def size_text(n: int) -> str:
    """A byte count as a person writes it back: ``64 GiB``, ``1.5 MiB``, ``4206 bytes``."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit:
            return f"{n / unit:g} {name}"
    return f"{n} bytes"


def size_arg(text: str) -> int:
    """argparse ``type=`` for a size in bytes (``--size 1.5M``)."""
    return usage(parse_size, text)


def time_arg(text: str) -> float:
    """argparse ``type=`` for a time in seconds (``--delay 20us``)."""
    return usage(parse_time, text)


def rate_arg(text: str) -> float:
    """argparse ``type=`` for a rate in bit/s (``--rate 100Mbit``)."""
    return usage(parse_rate, text)


def size_in(unit: int) -> Callable[[str], int]:
    """argparse ``type=`` for a size flag whose name holds its unit: ``size_in(1024)`` for
    ``--buffer-kb`` (``64`` and ``64K`` are 64, ``1.5M`` is 1536)."""

    def size(text: str) -> int:
        return int(usage(lambda t: in_unit("size", t, unit), text))

    return size


def time_in(unit: float, whole: bool = False) -> Callable[[str], float]:
    """argparse ``type=`` for a time flag in ``unit`` seconds: ``time_in(1e-3)`` for
    ``--period-ms`` (``400`` and ``0.4s`` are 400.0); an int with ``whole``."""

    def time(text: str) -> float:
        return usage(lambda t: in_unit("time", t, unit, whole), text)

    return time


def rate_in(unit: float) -> Callable[[str], float]:
    """argparse ``type=`` for a rate flag in ``unit`` bit/s: ``rate_in(1e6)`` for
    ``--rate-mbit`` (``100``, ``100M`` and ``100mbit`` are 100.0, ``1G`` is 1000.0)."""

    def rate(text: str) -> float:
        return usage(lambda t: in_unit("rate", t, unit), text)

    return rate
