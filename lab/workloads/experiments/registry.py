"""The experiments, in claim order, and running them (one, or all and the report)."""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lab.proc.slower import attempts, cpu_bound_runs, repeat_slower
from lab.workloads.experiments.base import DEFAULT_OUT, Context, Result

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
    sim: Any = None  # its simulated form (sim.common.SimForm), when it has one

    def minutes_for(self, ctx: Context) -> float:
        form = self.sim if ctx.sim else self
        return form.quick_minutes if ctx.quick else form.minutes

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
        out.append(replace(m.EXPERIMENT, sim=_sim_form(mod)))
    return out


#: where the simulated forms write their JSON (beside the lab forms', never over them)
SIM_OUT = DEFAULT_OUT / "sim"


def sim_out(lab_out: Path) -> Path:
    """The directory of the simulated forms' results for a lab form's directory."""
    return Path(lab_out) / "sim"


def _sim_form(mod: str) -> Any:
    try:
        m = importlib.import_module(f"lab.workloads.experiments.sim.{mod}")
    except ModuleNotFoundError as e:
        if e.name == f"lab.workloads.experiments.sim.{mod}":
            return None  # no simulated form yet
        raise
    return m.SIM


def find(name: str) -> Spec:
    known = specs()
    for s in known:
        if s.name == name or str(s.number) == name:
            return s
    names = ", ".join(s.name for s in known)
    raise KeyError(f"no experiment {name!r} (known: {names}; or 'all')")


def run(spec: Spec, ctx: Context) -> Result:
    """Run one experiment and write its JSON (and PNG). A run the CPU limited measures the
    machine, not the fabric: when the result has CPU-bound runs, the whole experiment runs
    again at half the link rate, up to ``ctx.cpu_bound_repeats`` times, and the result is
    the last one, with every attempt listed in ``extra.cpu_bound_repeats`` and in ``why``.
    An experiment that raises is recorded as such (verdict ``not reproduced``, ``error`` in
    ``extra``), never hidden."""
    repeats = ctx.cpu_bound_repeats
    if repeats is None:
        repeats = 0 if ctx.quick else 2

    def once(rate_mbit: float | None) -> Result:
        return _run_once(spec, ctx if rate_mbit is None else replace(ctx, rate_mbit=rate_mbit))

    def counted(r: Result) -> int:
        if r.extra.get("error"):
            return 0  # (an experiment that failed is not run again)
        return cpu_bound_runs({"mrc": r.mrc, "rocev2": r.rocev2, "metrics": r.metrics})

    def rate_of(r: Result) -> float | None:
        return (r.setup or {}).get("link_rate_mbit")

    tries, best = repeat_slower(once, rate_of, counted, 0 if ctx.sim else repeats, ctx.echo)
    res, n = tries[best]
    if len(tries) > 1:
        res.extra["cpu_bound_repeats"] = made = attempts(tries, best, rate_of, lambda r: r.verdict)
        each = ", ".join(f"{t['cpu_bound_runs']} at {t['rate_mbit']:g} Mb/s" for t in made)
        res.why += (f"; run {len(tries)} times for CPU-bound runs ({each}): this verdict is "
                    f"the run at {rate_of(res):g} Mb/s")  # fmt: skip
        if n:
            res.why += " (still CPU-bound: it rests on runs the CPU limited"
            if tries[-1][1] >= tries[-2][1]:
                res.why += "; a lower rate did not make fewer of them"
            res.why += ")"
    path = res.write(ctx.out_dir)
    ctx.echo(f"  verdict: {res.verdict} ({res.why})\n  wrote {path} in {res.elapsed_s:.0f} s")
    return res


def _run_once(spec: Spec, ctx: Context) -> Result:
    res = spec.new_result(ctx)
    t = time.monotonic()
    form = " (simulated)" if ctx.sim else ""
    ctx.echo(f"== experiment {spec.number} {spec.name}{form}{' (quick)' if ctx.quick else ''}: "
             f"{spec.claim}")  # fmt: skip
    try:
        if ctx.sim:
            if spec.sim is None:
                raise RuntimeError(f"{spec.name} has no simulated form yet")
            spec.sim.run(ctx, res)
        else:
            spec.run(ctx, res)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # recorded, printed, and the run goes on
        res.extra["error"] = f"{type(exc).__name__}: {exc}"
        res.extra["traceback"] = traceback.format_exc()[-4000:]
        res.judge("not reproduced", f"the experiment failed before measuring: {exc}")
        ctx.echo(f"  FAILED: {type(exc).__name__}: {exc}")
    res.elapsed_s = time.monotonic() - t
    return res
