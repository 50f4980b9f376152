"""Real-time scheduling for the processes that play hardware (a lab's switches and NICs).

Under the kernel's default scheduler a frame's wake-ups wait for a CPU: on the project's
2-core virtual machine the lab's processes waited 22-31 us per wake-up whether the machine was
8% or 50% busy (``make bench-lab-wait``). Most of it is the scheduler putting a woken process
on its waker's CPU (a socket's wake-up says the waker will sleep soon: the switch does not)
and the time a halted virtual CPU takes to come back. SCHED_FIFO places a woken process on
a CPU that runs no real-time work, and a PM QoS request of 0 us keeps idle CPUs polling
instead of halting: together 2-6 us per wake-up. The costs: idle CPUs poll (the host sees them
busy) while the request is held, and a process woken on another CPU loses its cache, so the
RoCEv2 baseline's runs took up to a quarter more CPU (docs/design/core.md, "2026-11-30").

Priority 1, the lowest real-time one: the kernel's own threads and real-time throttling
(``kernel.sched_rt_runtime_us``, 95% by default) keep the machine usable if a process spins.
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
    """Make every thread of this process SCHED_FIFO at ``priority`` (threads started later
    inherit it). Raises RealtimeError when the kernel refuses."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, os.sched_param(priority))
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except OSError as e:
            raise RealtimeError(
                f"cannot run real-time (SCHED_FIFO {priority}): {e.strerror}; it needs root "
                "(CAP_SYS_NICE) and real-time time left (kernel.sched_rt_runtime_us)"
            ) from e


def is_realtime(pid: int = 0) -> bool:
    """Whether ``pid`` (0: this process) runs SCHED_FIFO or SCHED_RR."""
    return os.sched_getscheduler(pid) in (os.SCHED_FIFO, os.SCHED_RR)


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
