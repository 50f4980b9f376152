"""mrcnic.io.realtime on this machine's kernel (root): a child process made real-time is
SCHED_FIFO in every thread, a held PM QoS request shows in /dev/cpu_dma_latency and ends when
its file closes; mrc-switch --realtime refuses clearly when the kernel does; the lab's options
reach mrc-switch and the calibration's cache key."""

from __future__ import annotations

import os
import subprocess
import sys

from lab.fabric.params import LabParams
from lab.workloads.calibrate import cache_key
from mrcnic.io.realtime import cpu_latency_limit_us, hold_cpu_latency

CHILD = """
import os, threading
from mrcnic.io.realtime import enter_realtime, is_realtime
t = threading.Thread(target=lambda: None); t.start(); t.join()
enter_realtime()
late = threading.Thread(target=lambda: print(os.sched_getscheduler(0) == os.SCHED_FIFO))
late.start(); late.join()
print(is_realtime(), all(os.sched_getscheduler(int(t)) == os.SCHED_FIFO
                         for t in os.listdir('/proc/self/task')))
"""


def test_enter_realtime_makes_every_thread_fifo_and_new_ones_inherit():
    p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "True", "True"]
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # (this process is untouched)


def test_cpu_latency_request_lasts_while_the_file_is_open():
    before = cpu_latency_limit_us()
    assert before is not None and before > 5
    f = hold_cpu_latency(5)
    try:
        assert cpu_latency_limit_us() == 5
    finally:
        f.close()
    assert cpu_latency_limit_us() == before


def test_mrc_switch_realtime_refused_says_why():
    # in a user namespace of its own, root there is no root here: no CAP_SYS_NICE, and the
    # RLIMIT_RTPRIO of 0 allows no real-time priority, so the kernel refuses SCHED_FIFO
    argv = ["unshare", "--user", "--map-root-user", sys.executable, "-m", "mrcswitch.main"]
    p = subprocess.run([*argv, "--realtime", "--config", "x.json"], capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "mrc-switch: --realtime: cannot run real-time" in p.stderr


def test_realtime_is_in_the_calibration_key():
    plain = LabParams(name="mrcx")
    rt = LabParams(name="mrcx", realtime=True)
    pairs = [(0, 3)]
    assert cache_key(plain, pairs, env={}) != cache_key(rt, pairs, env={})
    assert cache_key(rt, pairs, env={}).endswith(":rt")
