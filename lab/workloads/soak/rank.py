"""One rank of the soak's all-reduce: ``python -m lab.soak rank ...``, started by a
:class:`lab.workloads.soak.job.Job` in its host's namespace. Rank 0 prints one JSON line per
step and the result."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from lab.fabric import state as lab_state
from lab.proc.control import ControlError
from lab.workloads.bench import common as bc
from lab.workloads.bench.allreduce import AllreduceParams, run_rank
from lab.workloads.soak.config import STEP_TIMEOUT_S
from lab.workloads.soak.records import step_line
from mrcnic.io import aio
from mrcnic.units import size_arg


def build_rank_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m lab.soak rank",
        description="one rank of the soak's all-reduce (started by the soak in the host's "
        "namespace); rank 0 prints one JSON line per step and the result",
    )
    ap.add_argument("--lab", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--hosts", required=True, help="ring order, e.g. h0,h1,h2,h3")
    ap.add_argument("--size", type=size_arg, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--transport", choices=("mrc", "rocev2"), default="mrc")
    ap.add_argument("--duration-s", type=float, required=True)
    ap.add_argument("--timeout-s", type=float, default=STEP_TIMEOUT_S)
    ap.add_argument("--port", type=int, default=0)
    return ap


def rank_main(argv: Sequence[str]) -> int:
    a = build_rank_parser().parse_args(argv)
    st = lab_state.load(a.lab)
    hosts = [bc.parse_host(st.plan, h) for h in a.hosts.split(",")]
    p = AllreduceParams(
        hosts=hosts,
        size=a.size,
        iters=1,
        warmup=0,  # every step counts: the first one after a restart is a real step too
        transport=a.transport,
        seed=a.seed,
        timeout_s=a.timeout_s,
        duration_s=a.duration_s,
    )

    def on_step(it: int, reports: list[dict[str, Any]]) -> None:
        print(json.dumps(step_line(it, reports, time.monotonic())), flush=True)

    def on_report(it: int, report: dict[str, Any]) -> None:
        # A failed part is said at once: the other ranks may wait for data that will never
        # come, and the soak ends the job now, as a launcher would, instead of a timeout later.
        if report["errors"]:
            line = step_line(it, [report], time.monotonic())
            print(json.dumps({**line, "type": "rank_error"}), flush=True)

    try:
        res = aio.run(run_rank(st, a.rank, p, a.port, on_step if a.rank == 0 else None, on_report))
    except (ControlError, OSError, ValueError) as e:
        print(f"soak rank {a.rank}: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    if res is not None:
        # wrapped: the result has a "type" key of its own (the element type)
        print(json.dumps({"type": "result", "result": res}), flush=True)
    return 0
