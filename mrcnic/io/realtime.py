"""Real-time scheduling for processes that play hardware (a lab's switches and NICs): SCHED_FIFO
for the calling process, and a PM QoS request that keeps idle CPUs polling instead of
halting. What they change and cost on the project's machines: docs/lab.md (REAL-TIME) and
docs/design/core.md ("2026-11-30: the wait is a floor").

Priority 1, the lowest real-time one, with SCHED_RESET_ON_FORK: threads and processes started
afterwards (a switch's stats writers, an ``ip`` command) run as ordinary ones. A process that
spins at real-time priority starves the ordinary ones on its CPU, kernel workers included,
until real-time throttling (``kernel.sched_rt_runtime_us``, 95% of each second by default)
stops it; the lab's processes sleep between batches.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

RT_PRIORITY = 1
CPU_LATENCY_DEV = "/dev/cpu_dma_latency"


class RealtimeError(RuntimeError):
    """The scheduler or the PM QoS device refused (not root, no such device...)."""


def enter_realtime(priority: int = RT_PRIORITY) -> None:
    """Make every thread of this process SCHED_FIFO at ``priority`` (threads and processes it
    starts later do not inherit it). Raises RealtimeError when the kernel refuses."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setscheduler(
                tid, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(priority)
            )
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except OSError as e:
            raise RealtimeError(
                f"cannot run real-time (SCHED_FIFO {priority}): {e.strerror}; it needs root "
                "(CAP_SYS_NICE) and real-time time left (kernel.sched_rt_runtime_us)"
            ) from e


def is_realtime(pid: int = 0) -> bool:
    """Whether ``pid`` (0: this process) runs SCHED_FIFO or SCHED_RR."""
    return os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK in (os.SCHED_FIFO, os.SCHED_RR)


def hold_cpu_latency(limit_us: int = 0) -> BinaryIO:
    """Ask the kernel to keep every CPU's wake-up latency within ``limit_us`` (0: idle CPUs
    poll instead of halting) for as long as the returned file stays open: the request ends
    when it is closed, or when the process exits however it exits."""
    try:
        f = open(CPU_LATENCY_DEV, "wb", buffering=0)  # noqa: SIM115 (held by the caller)
    except OSError as e:
        raise RealtimeError(f"cannot hold {CPU_LATENCY_DEV}: {e.strerror}") from e
    try:
        f.write(struct.pack("i", limit_us))
    except OSError as e:
        f.close()
        raise RealtimeError(f"cannot write {CPU_LATENCY_DEV}: {e.strerror}") from e
    return f


def cpu_latency_limit_us() -> int | None:
    """The CPU wake-up latency the kernel keeps now (the smallest request; 2,000,000,000 when
    none), or None when it cannot be read."""
    try:
        with open(CPU_LATENCY_DEV, "rb") as f:
            return int(struct.unpack("i", f.read(4))[0])
    except (OSError, struct.error):
        return None
