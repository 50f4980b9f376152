"""A real-time lab (root): ``mrc-lab up --realtime`` runs its switch processes SCHED_FIFO and
holds a PM QoS request of 0 us while it is up, a write's NIC processes run SCHED_FIFO too and
the write is verified; taking the lab down ends the request. What it does to the wait for a
CPU is measured by ``make bench-lab-wait``, not asserted here (a timed figure)."""

from __future__ import annotations

import json
import os
import time

import commands as C
import lab_helpers as H
import pytest

from lab.fabric.params import LabParams, ParamError
from mrcnic.io.realtime import cpu_latency_limit_us


def _policy(pid: int) -> int | None:
    try:
        return os.sched_getscheduler(pid)
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


def test_realtime_needs_python_switches():
    with pytest.raises(ParamError, match="realtime needs python switches"):
        LabParams(name="mrcx", switch="kernel", realtime=True)
    with pytest.raises(ParamError, match="realtime must be true or false"):
        LabParams(name="mrcx", realtime="yes")  # type: ignore[arg-type]


def test_realtime_lab_switches_and_nics_run_fifo_and_the_request_ends_with_it():
    before = cpu_latency_limit_us()
    assert before is not None and before > 0, "another request holds the CPUs polling"
    with H.running_lab(realtime=True, rate_mbit=20) as st:
        pids = sorted({rec.pid for rec in st.processes.values()})
        assert pids and all(_policy(p) == os.SCHED_FIFO for p in pids)
        for p in pids:  # every thread (the stats writers start after the switch went real-time)
            for tid in os.listdir(f"/proc/{p}/task"):
                assert _policy(int(tid)) in (os.SCHED_FIFO, None), (p, tid)
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
