"""Real-time scheduling on this machine's kernel (root). mrcnic.io.realtime: a process made
real-time is SCHED_FIFO in every thread it has, and what it starts afterwards is not; a held
PM QoS request shows in /dev/cpu_dma_latency and ends when its file closes; mrc-switch
--realtime refuses clearly, changing nothing, when the kernel refuses. ``mrc-lab up
--realtime``: its switch processes run SCHED_FIFO and hold a request of 0 us while it is up,
a write's NIC processes run SCHED_FIFO too, the write is verified, and taking the lab down
ends the request. What it does to the wait for a CPU is measured by ``make bench-lab-wait``,
not asserted here (a timed figure). Lab tests run one at a time: nothing else holds a
request meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import commands as C
import lab_helpers as H

from mrcnic.io.realtime import CPU_LATENCY_DEV, cpu_latency_limit_us, hold_cpu_latency

CHILD = """
import os, subprocess, sys, threading
from mrcnic.io.realtime import enter_realtime, is_realtime
t = threading.Thread(target=lambda: None); t.start(); t.join()
enter_realtime()
late = threading.Thread(target=lambda: print(is_realtime(0)))
late.start(); late.join()
child = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                       capture_output=True, text=True).stdout.strip()
print(is_realtime(), all(is_realtime(int(t)) for t in os.listdir('/proc/self/task')),
      child == str(os.SCHED_OTHER))
"""


def _holders() -> list[str]:
    """The processes that hold the PM QoS device open (for a failure's message)."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{d}/fd")
            if any(os.readlink(f"/proc/{d}/fd/{fd}") == CPU_LATENCY_DEV for fd in fds):
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().replace(b"\0", b" ").decode()
                out.append(f"{d}: {argv[:100]}")
        except OSError:
            continue
    return out


def _no_request() -> int:
    before = cpu_latency_limit_us()
    assert before is not None and before > 5, f"a PM QoS request is held: {_holders()}"
    return before


def test_enter_realtime_makes_every_thread_fifo_and_nothing_started_later():
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    # a thread started later: ordinary; the threads it had: real-time; a child: ordinary
    assert p.stdout.split() == ["False", "True", "True", "True"]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # (this process is untouched)


def test_cpu_latency_request_lasts_while_the_file_is_open():
    before = _no_request()
    f = hold_cpu_latency(5)
    try:
        assert cpu_latency_limit_us() == 5
    finally:
        f.close()
    assert cpu_latency_limit_us() == before


def test_mrc_switch_realtime_refused_says_why_and_holds_nothing():
    # in a user namespace of its own, root there is no root here: no CAP_SYS_NICE, and the
    # RLIMIT_RTPRIO of 0 allows no real-time priority, so the kernel refuses SCHED_FIFO
    before = _no_request()
    argv = ["unshare", "--user", "--map-root-user", sys.executable, "-m", "mrcswitch.main"]
    p = subprocess.run([*argv, "--realtime", "--config", "x.json"], capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "mrc-switch: --realtime: cannot run real-time" in p.stderr
    assert cpu_latency_limit_us() == before


def _policy(pid: int) -> int | None:
    try:
        return os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK
    except OSError:
        return None


def _sides(lab: str) -> list[int]:
    """PIDs of the mrc-bench sides (server, client) of a write on ``lab``."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if lab.encode() in argv and (b"--server" in argv or b"--client" in argv):
            out.append(int(d))
    return out


def test_realtime_lab_switches_and_nics_run_fifo_and_the_request_ends_with_it():
    before = _no_request()
    with H.running_lab(realtime=True, rate_mbit=20) as st:
        pids = sorted({rec.pid for rec in st.processes.values()})
        # the forwarding thread (the stats writers, started after, run as ordinary threads)
        assert pids and all(_policy(p) == os.SCHED_FIFO for p in pids)
        assert cpu_latency_limit_us() == 0
        w = C.bench_background("write", "--lab", st.name, "--src", "h0", "--dst", "h1",
                               "--size", "64K", "--duration", "3", "--json")  # fmt: skip
        try:
            seen: dict[int, int | None] = {}
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and w.poll() is None:
                for pid in _sides(st.name):
                    if seen.get(pid) != os.SCHED_FIFO:
                        seen[pid] = _policy(pid)
                if len(seen) >= 2 and all(v == os.SCHED_FIFO for v in seen.values()):
                    break
                time.sleep(0.05)
            out, err = w.communicate(timeout=60)
        finally:
            if w.poll() is None:
                w.kill()
        assert len(seen) >= 2 and all(v == os.SCHED_FIFO for v in seen.values()), seen
        assert json.loads(out)["verified"] is True, err[-2000:]
    deadline = time.monotonic() + 10  # the switch processes' exit ends the request
    while cpu_latency_limit_us() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cpu_latency_limit_us() == before
