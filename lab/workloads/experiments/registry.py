"""The experiments, in claim order, and running them (one, or all and the report)."""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.workloads.experiments.base import Context, Result

# module names under lab/experiments, in the order of the claims (issue 15)
MODULES = (
    "p2p",
    "spray",
    "loss",
    "incast",
    "links_down",
    "ev_drop",
    "t1_reboot",
    "port_loss",
    "flaps",
    "trim",
)


@dataclass(frozen=True)
class Spec:
    """One experiment: its name (the command's argument), the claim's number, the claim,
    the paper's figure, how long it takes (full and quick, for --list), and the function."""

    name: str
    number: int
    claim: str
    paper: dict[str, Any]
    run: Callable[[Context, Result], None]
    minutes: float = 5.0
    quick_minutes: float = 1.0

    def new_result(self, ctx: Context) -> Result:
        return Result(self.name, self.number, self.claim, dict(self.paper), quick=ctx.quick)


def specs() -> list[Spec]:
    """Every experiment that exists, in claim order."""
    out = []
    for mod in MODULES:
        try:
            m = importlib.import_module(f"lab.workloads.experiments.{mod}")
        except ModuleNotFoundError as e:
            if e.name == f"lab.workloads.experiments.{mod}":
                continue  # not written yet
            raise
        out.append(m.EXPERIMENT)
    return out


def find(name: str) -> Spec:
    known = specs()
    for s in known:
        if s.name == name or str(s.number) == name:
            return s
    names = ", ".join(s.name for s in known)
    raise KeyError(f"no experiment {name!r} (known: {names}; or 'all')")


def run(spec: Spec, ctx: Context) -> Result:
    """Run one experiment and write its JSON (and PNG): an experiment that raises is
    recorded as such (verdict ``not reproduced``, ``error`` in ``extra``), never hidden."""
    res = spec.new_result(ctx)
    t = time.monotonic()
    ctx.echo(f"== experiment {spec.number} {spec.name}{' (quick)' if ctx.quick else ''}: "
             f"{spec.claim}")  # fmt: skip
    try:
        spec.run(ctx, res)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # recorded, printed, and the run goes on
        res.extra["error"] = f"{type(exc).__name__}: {exc}"
        res.extra["traceback"] = traceback.format_exc()[-4000:]
        res.judge("not reproduced", f"the experiment failed before measuring: {exc}")
        ctx.echo(f"  FAILED: {type(exc).__name__}: {exc}")
    res.elapsed_s = time.monotonic() - t
    path = res.write(ctx.out_dir)
    ctx.echo(f"  verdict: {res.verdict} ({res.why})\n  wrote {path} in {res.elapsed_s:.0f} s")
    return res
