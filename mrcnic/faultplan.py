"""A fault step, the one definition the lab (``lab.proc.schedule``) and the whole-fabric
simulator (``mrcnic.sim.closfaults``) both play, and its text form.

A :class:`Step` names the lab's nodes (contract, ``lab/fabric/topology.py``): hosts ``h0..``,
switches ``p<plane>-t0-<i>`` and ``p<plane>-t1-<j>``.  Kinds: ``reboot`` (a = switch, back
after ``down_ms``), ``link`` (a, b down; up at ``undo_s``), ``port`` (host a's NIC port on
``plane`` down; up at ``undo_s``), ``loss`` (``percent`` random loss both ways on link a-b;
cleared at ``undo_s``).  ``undo_s`` None: never undone.

Text form (``--fault`` of ``mrc-sim``; TIME as :func:`mrcnic.units.parse_time` reads it, no
exponent; ``-END`` undoes at END, ``+FOR`` after FOR)::

    link:p0-t0-1,p0-t1-2@1s-2s        link down at 1 s, up at 2 s
    link:p0-t0-1,p0-t1-2@1s+500ms     the same for 500 ms
    reboot:p3-t1-0@1s+500ms           switch down at 1 s, back 500 ms later (default 1s)
    port:h0,3@1s-2s                   h0's NIC port on plane 3
    loss:p0-t0-0,p0-t1-1=1%@0.5s-2s   1 % random loss both ways
    flap:p0-t0-0,p0-t1-1,5x100ms@1s   5 flaps from 1 s, each 100 ms: down 50, up 50

``flap`` is no kind of its own: :func:`parse_steps` makes it the link steps
:func:`flap_steps` describes.  :attr:`Step.text` writes the form :func:`parse_step` reads
back to an equal step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any, Self

from mrcnic.units import UnitsError, in_unit, parse_time

KINDS = ("reboot", "link", "port", "loss")
EXAMPLES = (
    "link:p0-t0-1,p0-t1-2@1s-2s, reboot:p3-t1-0@1s+500ms, port:h0,3@1s-2s, "
    "loss:p0-t0-0,p0-t1-1=1%@0.5s-2s, flap:p0-t0-0,p0-t1-1,5x100ms@1s"
)
HOST_NAME = re.compile(r"h(\d+)")
SWITCH_NAME = re.compile(r"p(\d+)-t([01])-(\d+)")


@dataclass(frozen=True, slots=True)
class Step:
    """A fault at ``at_s`` after the run started; ``undo_s`` when to undo it (links, ports,
    loss); a reboot undoes itself after ``down_ms``.

    kind: ``reboot`` (a = switch), ``link`` (a, b), ``port`` (a = host, plane), ``loss``
    (a, b, percent)."""

    kind: str
    at_s: float
    a: str
    b: str = ""
    plane: int = -1
    undo_s: float | None = None
    down_ms: float = 1000.0
    percent: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (one of {', '.join(KINDS)})")
        if self.at_s < 0:
            raise ValueError(f"at_s must be >= 0, not {self.at_s}")
        if self.kind != "reboot" and self.undo_s is not None and self.undo_s <= self.at_s:
            raise ValueError("undo_s must come after at_s")
        if self.kind == "reboot" and not self.down_ms > 0:
            raise ValueError(f"a reboot's down_ms must be > 0, not {self.down_ms}")
        if self.kind == "loss" and not 0 < self.percent <= 100:
            raise ValueError(f"loss percent must be in (0, 100], not {self.percent}")

    @property
    def end_s(self) -> float | None:
        """When the fault is over (None: never)."""
        if self.kind == "reboot":
            return self.at_s + self.down_ms / 1000.0
        return self.undo_s

    @property
    def label(self) -> str:
        return {
            "reboot": f"reboot {self.a}",
            "link": f"link {self.a}-{self.b} down",
            "port": f"NIC port {self.a}/p{self.plane} down",
            "loss": f"{self.percent:g}% loss {self.a}-{self.b}",
        }[self.kind]

    @property
    def heal_label(self) -> str:
        return {
            "reboot": f"{self.a} back",
            "link": "link up",
            "port": "port up",
            "loss": "loss cleared",
        }[self.kind]

    @property
    def mark(self) -> str:
        """One character for the text timeline (upper: fault, lower: undone)."""
        return {"reboot": "R", "link": "L", "port": "P", "loss": "X"}[self.kind]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "at_s": self.at_s, "a": self.a}
        if self.b:
            d["b"] = self.b
        if self.kind == "port":
            d["plane"] = self.plane
        if self.kind == "reboot":
            d["down_ms"] = self.down_ms
        else:
            d["undo_s"] = self.undo_s
        if self.kind == "loss":
            d["percent"] = self.percent
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """The step :meth:`to_dict` wrote (keys that are no field of a step are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def text(self) -> str:
        """The text form (module doc); ``parse_step(s.text) == s``."""
        when = format_time(self.at_s)
        if self.kind == "reboot":
            return f"reboot:{self.a}@{when}+{_number(self.down_ms)}ms"
        if self.undo_s is not None:
            when += f"-{format_time(self.undo_s)}"
        if self.kind == "port":
            return f"port:{self.a},{self.plane}@{when}"
        if self.kind == "loss":
            return f"loss:{self.a},{self.b}={_number(self.percent)}%@{when}"
        return f"link:{self.a},{self.b}@{when}"


def _number(x: float) -> str:
    """``x`` as a plain decimal (no exponent) that reads back as exactly ``x``."""
    short = f"{x:g}"
    if "e" not in short and float(short) == x:
        return short
    return format(Decimal(repr(float(x))), "f")


def format_time(s: float) -> str:
    """Seconds as the shortest of ``1.5s``, ``200ms``, ``20us`` that reads back exactly."""
    best = f"{_number(s)}s"
    for unit, scale in (("ms", 1e3), ("us", 1e6)):
        text = f"{_number(round(s * scale, 9))}{unit}"
        if len(text) < len(best) and parse_time(text) == s:
            best = text
    return best


_SPEC = re.compile(r"(?P<kind>[a-z]+):(?P<args>[^=@]*)(?:=(?P<pct>[^@]*))?@(?P<when>.*)")
_WHEN = re.compile(r"(?P<at>[^+-]+)(?:(?P<op>[+-])(?P<end>[^+-]+))?")
_FLAP = re.compile(r"(\d+)x(.+)")


class FaultSpecError(ValueError):
    """A fault's text form that does not parse; the message names the bad part."""


def parse_steps(text: str) -> list[Step]:
    """The steps one text form (module doc) describes: one, or a flap's link steps."""
    spec = text.strip()
    m = _SPEC.fullmatch(spec)
    if m is None:
        raise FaultSpecError(f"bad fault {text!r}: KIND:ARGS@TIME (examples: {EXAMPLES})")
    kind, args, pct, when = m["kind"], m["args"].split(","), m["pct"], m["when"]

    def bad(part: str, why: str) -> FaultSpecError:
        return FaultSpecError(f"bad fault {text!r}: {part}: {why}")

    if kind not in (*KINDS, "flap"):
        raise bad(repr(kind), f"unknown kind (one of {', '.join((*KINDS, 'flap'))})")
    if pct is not None and kind != "loss":
        raise bad(f"={pct}", "only loss takes a percentage")
    wm = _WHEN.fullmatch(when.strip())
    if wm is None:
        raise bad(f"@{when}", "TIME, TIME-END or TIME+DURATION (no exponents)")

    def seconds(part: str) -> float:
        try:
            return parse_time(part)
        except UnitsError as e:
            raise bad(repr(part), str(e)) from None

    at = seconds(wm["at"])
    end: float | None = None
    if wm["op"] is not None:
        end = seconds(wm["end"]) if wm["op"] == "-" else at + seconds(wm["end"])
        if kind == "reboot" and wm["op"] == "-" and end <= at:
            raise bad(f"@{when}", "the switch must come back after it went down")
        if kind != "reboot" and end <= at:
            raise bad(f"@{when}", "the undo must come after the fault")

    def node(part: str, what: str, *patterns: re.Pattern[str]) -> str:
        name = part.strip()
        if not any(p.fullmatch(name) for p in patterns or (HOST_NAME, SWITCH_NAME)):
            raise bad(repr(name), f"not a {what} (hosts h0.., switches p<plane>-t0-<i>, "
                                  "p<plane>-t1-<j>)")  # fmt: skip
        return name

    def pair(n_args: int) -> tuple[str, str]:
        if len(args) != n_args:
            raise bad(",".join(args), f"{kind} takes {n_args} comma-separated arguments")
        a, b = node(args[0], "node"), node(args[1], "node")
        if a == b:
            raise bad(",".join(args[:2]), "a link joins two different nodes")
        return a, b

    try:
        if kind == "reboot":
            if len(args) != 1:
                raise bad(",".join(args), "reboot takes one switch")
            down_ms = 1000.0 if end is None else _ms(wm["end"]) if wm["op"] == "+" else (
                (end - at) * 1000.0)  # fmt: skip
            return [Step("reboot", at, node(args[0], "switch", SWITCH_NAME), down_ms=down_ms)]
        if kind == "port":
            if len(args) != 2:
                raise bad(",".join(args), "port takes HOST,PLANE")
            if not args[1].strip().isdigit():
                raise bad(repr(args[1]), "the plane is a number")
            host = node(args[0], "host", HOST_NAME)
            return [Step("port", at, host, plane=int(args[1]), undo_s=end)]
        if kind == "loss":
            a, b = pair(2)
            if pct is None:
                raise bad(text, "loss needs =PERCENT% (example: loss:p0-t0-0,p0-t1-1=1%@1s)")
            try:
                percent = float(pct.strip().removesuffix("%"))
            except ValueError:
                raise bad(f"={pct}", "PERCENT% (example: =1%, =0.5%)") from None
            if not 0 < percent <= 100:
                raise bad(f"={pct}", "the percentage must be in (0, 100]")
            return [Step("loss", at, a, b, undo_s=end, percent=percent)]
        if kind == "link":
            a, b = pair(2)
            return [Step("link", at, a, b, undo_s=end)]
        a, b = pair(3)  # flap
        fm = _FLAP.fullmatch(args[2].strip())
        if fm is None or int(fm[1]) < 1:
            raise bad(repr(args[2]), "COUNTxPERIOD, e.g. 5x100ms")
        if end is not None:
            raise bad(f"@{when}", "a flap starts at one TIME; its length is COUNTxPERIOD")
        period = seconds(fm[2])
        if period <= 0:
            raise bad(repr(args[2]), "the period must be > 0")
        return flap_steps(a, b, at, int(fm[1]), period)
    except FaultSpecError:
        raise
    except ValueError as e:  # what Step itself refuses
        raise bad(text, str(e)) from None


def _ms(part: str) -> float:
    """Milliseconds, exactly as written (``500ms`` -> 500.0; a plain number is seconds)."""
    if re.fullmatch(r"\s*[\d.]+\s*", part):
        return parse_time(part) * 1000.0
    return float(in_unit("time", part, 0.001))


def parse_step(text: str) -> Step:
    """The one step a text form describes (a flap, several steps, is refused)."""
    steps = parse_steps(text)
    if len(steps) != 1:
        raise FaultSpecError(f"bad fault {text!r}: a flap is several steps (parse_steps)")
    return steps[0]


def flap_steps(a: str, b: str, at_s: float, count: int, period_s: float) -> list[Step]:
    """Link a-b flapping ``count`` times from ``at_s``: down for the first half of each
    ``period_s``, up for the second (as ``mrc-lab flap`` does)."""
    return [
        Step("link", at_s + i * period_s, a, b, undo_s=at_s + (i + 0.5) * period_s)
        for i in range(count)
    ]
