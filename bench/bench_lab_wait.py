"""The lab's wait for a CPU per wake-up against its link rate, and what the scheduler changes:
``make bench-lab-wait``.

mrc-bench's CPU-BOUND rule counts a run CPU-bound when the lab's processes waited for a CPU
>= 2.5% of a frame time per wake-up (schedstat; docs/bench.md). If that wait does not fall
with the load, it is a floor of the machine and the rule caps the link rate by itself:
``rate_cap_mbit`` below. This measures it. For each rate in ``--rates``, each repetition and
each config the default lab comes up anew, and each transport
(``mrc``: one QP; ``rocev2``: one QP per plane, as the calibration runs it) runs one
``mrc-bench write`` of 256 KiB messages h0 -> h3 (a repetition's configs in turn first).
The configs:

- ``default``: the lab as ``mrc-lab up`` makes it;
- ``realtime``: ``mrc-lab up --realtime`` (the switch and NIC processes SCHED_FIFO, idle CPUs
  polling while the lab is up: docs/lab.md, REAL-TIME).

Per run: goodput, machine busy share, the NIC and switch processes' core shares, the wait per
wake-up (mean and per process) and in frame times. Headline keys: ``wait_floor_us`` (the
``default`` runs' median wait at the lowest rate; ``wait_floor_us_each`` per transport),
``rate_cap_mbit`` (``_each``: the rate at which that wait is the rule's 2.5% of a frame time)
and, per config and rate, the medians.

    make bench-lab-wait   # bench/bench_lab_wait.py --out results/bench-lab-wait.json

A run the rule calls CPU-bound stays in the file (its wait is what this measures) and in the
medians of its rate; the floor and the caps come from the lowest rate's runs alone.

Needs root; about 3 minutes with the defaults (16 writes, 8 labs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_lab_cpu import say, wait_quiet

from lab.fabric import lifecycle
from lab.fabric.netns import have_net_admin
from lab.fabric.params import frame_time_s, resolve
from lab.fabric.state import LabState, exists
from lab.proc.benchrun import WriteSpec, run_write
from lab.proc.cpu import CPU_BOUND_WAIT
from mrcnic.cliflags import rate_with_unit

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("default", "realtime")
TRANSPORTS = ("mrc", "rocev2")
ROCEV2_QPS = 8  # one QP per plane of the default lab
KEYS = (
    "goodput_fraction",
    "machine_busy_fraction",
    "nic_core_fraction_max",
    "switch_core_fraction_max",
    "cpu_wait_us_per_wake",
    "cpu_wait_per_frame_time",
    "cpu_bound",
)


def one_write(state: LabState, transport: str, config: str, a: argparse.Namespace) -> dict:
    qps = ROCEV2_QPS if transport == "rocev2" else 1
    spec = WriteSpec("h0", "h3", a.size, a.duration, None, qps, transport, None)
    idle = wait_quiet()
    run = run_write(state, spec, echo=say)
    r = run.result or {}
    out: dict[str, Any] = {"transport": transport, "config": config, "idle_before": idle}
    out["error"] = None if run.result else "no result (see the output above)"
    out.update({k: r.get(k) for k in KEYS})
    out["cpu_wait_us_per_wake_each"] = r.get("cpu_wait_us_per_wake_each")
    w, f = r.get("cpu_wait_us_per_wake"), r.get("cpu_wait_per_frame_time")
    say(
        f"    {transport:6s} {config:6s}: wait {w} us/wake-up ({f} of a frame time), machine "
        f"{out['machine_busy_fraction']}, goodput {out['goodput_fraction']}"
    )
    return out


def _median(xs: list[Any]) -> float | None:
    v = [x for x in xs if x is not None]
    return round(statistics.median(v), 4) if v else None


def rate_cap_mbit(wait_us: float | None) -> float | None:
    """The link rate at which a wait of ``wait_us`` per wake-up is the rule's share of a frame
    time (the frame time of mrc-bench's rule: a full data frame, lab.fabric.params)."""
    if not wait_us:
        return None
    return round(CPU_BOUND_WAIT * frame_time_s(1.0) / (wait_us * 1e-6), 1)


def summarize(rows: list[dict], rates: list[float]) -> dict[str, Any]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[f"{r['rate_mbit']:g}Mbit/{r['config']}/{r['transport']}"].append(r)
    per = {g: {k: _median([r[k] for r in rs]) for k in KEYS if k != "cpu_bound"}
           for g, rs in groups.items()}  # fmt: skip
    low = min(rates)

    def floor(tr: str | None) -> float | None:
        return _median([r["cpu_wait_us_per_wake"] for r in rows if r["rate_mbit"] == low
                        and r["config"] == "default" and tr in (None, r["transport"])])  # fmt: skip

    each = {tr: floor(tr) for tr in TRANSPORTS}
    return {
        "medians": per,
        "wait_floor_us": floor(None),
        "wait_floor_us_each": each,
        "wait_floor_rate_mbit": low,
        "rule_wait_frame_times": CPU_BOUND_WAIT,
        "rate_cap_mbit": rate_cap_mbit(floor(None)),
        "rate_cap_mbit_each": {tr: rate_cap_mbit(w) for tr, w in each.items()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", default="mrcwait", help="lab name (default mrcwait)")
    ap.add_argument("--rates", default="2Mbit,27Mbit",
                    help="link rates with their units, lowest first counts as the floor "
                    "[2Mbit,27Mbit]")  # fmt: skip
    ap.add_argument("--reps", type=int, default=2, help="repetitions (>= 1) [2]")
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per write [4]")
    ap.add_argument("--size", type=int, default=256 << 10, help="message bytes [256 KiB]")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {CONFIGS}")
    ap.add_argument("--out", default=None, help="write the JSON here")
    a = ap.parse_args(argv)
    if not have_net_admin():
        print("bench_lab_wait: needs root (CAP_NET_ADMIN)", file=sys.stderr)
        return 2
    try:
        rates = sorted(rate_with_unit(t) / 1e6 for t in a.rates.split(",") if t)
    except ValueError as e:
        print(f"bench_lab_wait: --rates: {e}", file=sys.stderr)
        return 2
    configs = [c for c in a.configs.split(",") if c]
    if not rates or a.reps < 1 or any(c not in CONFIGS for c in configs):
        print(f"bench_lab_wait: need rates, reps >= 1 and configs from {CONFIGS}",
              file=sys.stderr)  # fmt: skip
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    t0 = time.monotonic()
    rows: list[dict] = []
    try:
        for rate in rates:
            for rep in range(a.reps):
                for cfg in configs if rep % 2 == 0 else configs[::-1]:
                    if exists(a.name):
                        lifecycle.down(a.name)
                    say(f"lab {a.name} at {rate:g} Mb/s, {cfg}")
                    params = resolve(None, name=a.name, rate_mbit=rate,
                                     realtime=cfg == "realtime")  # fmt: skip
                    state = lifecycle.up(params)
                    try:
                        time.sleep(1.0)
                        for tr in TRANSPORTS:
                            row = one_write(state, tr, cfg, a)
                            row.update(rate_mbit=rate, rep=rep)
                            rows.append(row)
                    finally:
                        lifecycle.down(a.name)
    except KeyboardInterrupt:
        print("bench_lab_wait: interrupted", file=sys.stderr)
        return 130
    out = {
        "bench": "lab_wait",
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "wall_s": round(time.monotonic() - t0, 1),
        "rates_mbit": rates,
        "args": vars(a),
        "runs": rows,
        **summarize(rows, rates),
    }
    say(f"wait floor at {rates[0]:g} Mb/s (default): {out['wait_floor_us_each']} us per wake-up; "
        f"the rule ({CPU_BOUND_WAIT:.1%} of a frame time) then caps the links at "
        f"{out['rate_cap_mbit_each']} Mb/s")  # fmt: skip
    text = json.dumps(out, indent=2)
    if a.out:
        Path(a.out).write_text(text + "\n")
        say(f"wrote {a.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
