"""What a wake-up costs on this machine: ``make bench-wakeup``.

The lab's processes (NICs, switches) sleep in ``epoll_wait`` and are woken by a frame another
process sent, or by their own timer. On a machine of our kind (a virtual machine, nested) that
wake-up, not the frame's processing, is most of what a frame costs at the lab's rates. This
script measures it, with its baseline in the same run:

- ``cross_cpu``: two processes pinned to different CPUs play ping-pong over pipes: each round
  trip wakes each side once from sleep (the other CPU idles meanwhile);
- ``same_cpu``: the same two processes on one CPU: each wake-up is a context switch, no CPU
  goes idle (the baseline);
- ``timer_arm``: arming a timerfd (``csrc/mrc_timer.c``, what the NIC's one timer does) for
  a deadline ``d`` ahead, for d from 0.1 ms to 100 ms: a deadline nearer than the next
  scheduler tick reprograms the CPU's timer.

Each is run ``--reps`` times, alternating; the figures are medians, CPU microseconds per
wake-up (user + system of each side, ``getrusage``), and the ratio cross / same CPU.

    make bench-wakeup     # = .venv/bin/python bench/bench_wakeup.py --out results/bench-wakeup.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from lab.proc import provenance

ROUND_TRIPS = 20_000
TIMER_ARMS = 5_000
TIMER_AHEAD_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.1)


def _cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def ping_pong(cpu_a: int, cpu_b: int, round_trips: int = ROUND_TRIPS) -> dict[str, float]:
    """Round trips between two processes pinned to ``cpu_a`` and ``cpu_b``."""
    to_b_r, to_b_w = os.pipe()
    to_a_r, to_a_w = os.pipe()
    child_cpu0 = _cpu_s(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:  # the other side: answer every byte
        try:
            os.sched_setaffinity(0, {cpu_b})
            for _ in range(round_trips):
                os.read(to_b_r, 1)
                os.write(to_a_w, b"x")
        finally:
            os._exit(0)
    try:
        mask = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu_a})
        time.sleep(0.05)  # the child pinned and waiting
        c0, t0 = _cpu_s(), time.perf_counter()
        for _ in range(round_trips):
            os.write(to_b_w, b"x")
            os.read(to_a_r, 1)
        wall_s, cpu_s = time.perf_counter() - t0, _cpu_s() - c0
    finally:
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, mask)
        for fd in (to_b_r, to_b_w, to_a_r, to_a_w):
            os.close(fd)
    child_s = _cpu_s(resource.RUSAGE_CHILDREN) - child_cpu0
    return {
        "round_trip_us": wall_s / round_trips * 1e6,
        "cpu_us_per_wakeup": (cpu_s + child_s) / 2 / round_trips * 1e6,
    }


def timer_arms(ahead_s: float, arms: int = TIMER_ARMS) -> float | None:
    """CPU microseconds to arm the NIC's timerfd ``ahead_s`` ahead (None: no timerfd)."""
    from mrcnic.io.timer import timerfd_ops

    ops = timerfd_ops()
    if ops is None:
        return None
    fd = ops.open()
    try:
        c0 = _cpu_s()
        for _ in range(arms):
            ops.arm(fd, time.monotonic() + ahead_s)
        return (_cpu_s() - c0) / arms * 1e6
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="The CPU figures are what the machine charges the processes; run on a quiet "
        "machine.",
    )
    ap.add_argument("--reps", type=int, default=3, help="alternating repetitions [3]")
    ap.add_argument("--out", help="write the JSON here")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error(f"--reps {a.reps}: at least 1")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("bench-wakeup: needs two CPUs (a cross-CPU wake-up)", file=sys.stderr)
        return 2
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {"cross_cpu": [], "same_cpu": []}
    arms: dict[str, list[float]] = {f"{d * 1e3:g}ms": [] for d in TIMER_AHEAD_S}
    for rep in range(a.reps):
        order = ("cross_cpu", "same_cpu") if rep % 2 == 0 else ("same_cpu", "cross_cpu")
        for cfg in order:
            r = ping_pong(cpus[0], cpus[1] if cfg == "cross_cpu" else cpus[0])
            runs[cfg].append(r)
            print(f"rep {rep + 1}/{a.reps} {cfg}: round trip {r['round_trip_us']:.1f} us, "
                  f"{r['cpu_us_per_wakeup']:.1f} us of CPU per wake-up", flush=True)  # fmt: skip
        for d in TIMER_AHEAD_S:
            us = timer_arms(d)
            if us is not None:
                arms[f"{d * 1e3:g}ms"].append(us)
    med = {
        cfg: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]}
        for cfg, rs in runs.items()
    }
    cross, same = med["cross_cpu"]["cpu_us_per_wakeup"], med["same_cpu"]["cpu_us_per_wakeup"]
    result: dict[str, Any] = {
        "bench": "bench-wakeup",
        "command": "bench/bench_wakeup.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "timestamp_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": provenance.machine(load0),
        "method": {
            "round_trips": ROUND_TRIPS,
            "timer_arms": TIMER_ARMS,
            "reps": a.reps,
            "statistic": "median over alternating repetitions",
        },
        "cross_cpu": med["cross_cpu"],
        "same_cpu": med["same_cpu"],
        "wakeup_cpu_ratio_cross_vs_same": round(cross / same, 2) if same > 0 else None,
        "timer_arm_cpu_us": {k: round(statistics.median(v), 2) for k, v in arms.items() if v},
        "runs": runs,
    }
    print(f"a wake-up from another CPU: {cross:.1f} us of CPU, on the same CPU {same:.1f} us "
          f"(x{result['wakeup_cpu_ratio_cross_vs_same']})")  # fmt: skip
    print("arming the timer: " + ", ".join(
        f"{k} ahead {v} us" for k, v in result["timer_arm_cpu_us"].items()))  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
