"""What a wake-up costs on this machine: ``make bench-wakeup``.

The lab's processes (NICs, switches) sleep in ``epoll_wait`` and are woken by a frame another
process sent, or by their own timer. On a machine of our kind (a virtual machine, nested) that
wake-up, not the frame's processing, is most of what a frame costs at the lab's rates. This
script measures it, with its baseline in the same run:

- ``cross_cpu``: two processes pinned to different CPUs play ping-pong over pipes: each round
  trip wakes each side once from sleep (the other CPU idles meanwhile);
- ``same_cpu``: the same two processes on one CPU: each wake-up is a context switch, no CPU
  goes idle (the baseline);
- ``cross_cpu_idle``: ``cross_cpu`` where the other side sleeps 1 ms before it answers, so
  the waiting side's CPU goes idle between wake-ups, as a lab process's does at the lab's
  rates;
- ``wait_us_per_wakeup`` (each config): how long the woken side waited for its CPU
  (``/proc/self/schedstat``, what the lab's ``cpu_bound`` rule measures). ``cross_cpu_idle``'s
  is what a lab process would wait per wake-up on an otherwise idle machine; ``wait_floor``
  gives the link rate above which that wait alone would make a run CPU-bound by the rule;
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

from lab.fabric.params import frame_time_s
from lab.proc import provenance
from lab.proc.cpu import CPU_BOUND_WAIT, sched_wait

ROUND_TRIPS = 20_000
TIMER_ARMS = 5_000
IDLE_ROUND_TRIPS = 1_000  # cross_cpu_idle: the other side sleeps IDLE_S before each answer
IDLE_S = 0.001
TIMER_AHEAD_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.1)


def _cpu_s(who: int = resource.RUSAGE_SELF) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def ping_pong(
    cpu_a: int, cpu_b: int, round_trips: int = ROUND_TRIPS, idle_s: float = 0.0
) -> dict[str, float]:
    """Round trips between two processes pinned to ``cpu_a`` and ``cpu_b``; with ``idle_s``
    the other side sleeps that long before it answers, so this side's CPU idles (as a lab
    process's does between frames at the lab's rates)."""
    to_b_r, to_b_w = os.pipe()
    to_a_r, to_a_w = os.pipe()
    child_cpu0 = _cpu_s(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:  # the other side: answer every byte
        try:
            os.sched_setaffinity(0, {cpu_b})
            for _ in range(round_trips):
                os.read(to_b_r, 1)
                if idle_s:
                    time.sleep(idle_s)
                os.write(to_a_w, b"x")
        finally:
            os._exit(0)
    try:
        mask = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpu_a})
        time.sleep(0.05)  # the child pinned and waiting
        w0 = sched_wait([os.getpid()])
        c0, t0 = _cpu_s(), time.perf_counter()
        for _ in range(round_trips):
            os.write(to_b_w, b"x")
            os.read(to_a_r, 1)
        wall_s, cpu_s = time.perf_counter() - t0, _cpu_s() - c0
        w1 = sched_wait([os.getpid()])
    finally:
        os.waitpid(pid, 0)
        os.sched_setaffinity(0, mask)
        for fd in (to_b_r, to_b_w, to_a_r, to_a_w):
            os.close(fd)
    child_s = _cpu_s(resource.RUSAGE_CHILDREN) - child_cpu0
    out = {
        "round_trip_us": wall_s / round_trips * 1e6,
        "cpu_us_per_wakeup": (cpu_s + child_s) / 2 / round_trips * 1e6,
    }
    # the wait for a CPU per wake-up, as the lab's cpu_bound rule reads it (lab.proc.cpu)
    per = (w1 - w0).wait_per_slice_s if w0 is not None and w1 is not None else None
    if per is not None:
        out["wait_us_per_wakeup"] = per * 1e6
    return out


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


def _wait_floor(wait_us: float | None) -> dict[str, Any] | None:
    """What a cross-CPU wake-up's wait for a CPU after an idle spell (the lab's case, on an
    otherwise idle machine) allows the lab by its cpu_bound rule: the link rate (full 4 KiB
    data frames) at which that wait alone is CPU_BOUND_WAIT of a frame time (None: no wait,
    no limit). None when the kernel keeps no schedstat."""
    if wait_us is None:
        return None
    rate = CPU_BOUND_WAIT * frame_time_s(1.0) / (wait_us * 1e-6) if wait_us > 0 else None
    return {
        "wait_us": round(wait_us, 1),
        "cpu_bound_wait_per_frame_time": CPU_BOUND_WAIT,
        "rate_mbit_at_rule": None if rate is None else round(rate, 1),
    }


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
    runs: dict[str, list[dict[str, float]]] = {
        "cross_cpu": [],
        "same_cpu": [],
        "cross_cpu_idle": [],
    }
    arms: dict[str, list[float]] = {f"{d * 1e3:g}ms": [] for d in TIMER_AHEAD_S}
    for rep in range(a.reps):
        order = ("cross_cpu", "same_cpu") if rep % 2 == 0 else ("same_cpu", "cross_cpu")
        for cfg in (*order, "cross_cpu_idle"):
            if cfg == "cross_cpu_idle":  # the wait after an idle spell: the lab's case
                r = ping_pong(cpus[0], cpus[1], IDLE_ROUND_TRIPS, idle_s=IDLE_S)
            else:
                r = ping_pong(cpus[0], cpus[1] if cfg == "cross_cpu" else cpus[0], ROUND_TRIPS)
            runs[cfg].append(r)
            wait = r.get("wait_us_per_wakeup")
            print(f"rep {rep + 1}/{a.reps} {cfg}: round trip {r['round_trip_us']:.1f} us, "
                  f"{r['cpu_us_per_wakeup']:.1f} us of CPU per wake-up"
                  + (f", waited {wait:.1f} us for the CPU" if wait is not None else ""),
                  flush=True)  # fmt: skip
        for d in TIMER_AHEAD_S:
            us = timer_arms(d)
            if us is not None:
                arms[f"{d * 1e3:g}ms"].append(us)
    med = {
        cfg: {
            k: round(statistics.median(r[k] for r in rs), 1)
            for k in rs[0]
            if all(k in r for r in rs)
        }
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
        "cross_cpu_idle": med["cross_cpu_idle"],
        "wakeup_cpu_ratio_cross_vs_same": round(cross / same, 2) if same > 0 else None,
        "timer_arm_cpu_us": {k: round(statistics.median(v), 2) for k, v in arms.items() if v},
        "wait_floor": _wait_floor(med["cross_cpu_idle"].get("wait_us_per_wakeup")),
        "runs": runs,
    }
    print(f"a wake-up from another CPU: {cross:.1f} us of CPU, on the same CPU {same:.1f} us "
          f"(x{result['wakeup_cpu_ratio_cross_vs_same']})")  # fmt: skip
    print("arming the timer: " + ", ".join(
        f"{k} ahead {v} us" for k, v in result["timer_arm_cpu_us"].items()))  # fmt: skip
    wf = result["wait_floor"]
    if wf is not None:
        limit = wf["rate_mbit_at_rule"]
        print(f"after an idle spell, a wake-up from another CPU waits {wf['wait_us']} us for its "
              "CPU: " + ("no limit by the cpu_bound rule" if limit is None else
                         f"the cpu_bound rule (a wait >= {CPU_BOUND_WAIT:.1%} of a frame time) "
                         f"holds the lab below {limit} Mb/s links"))  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
