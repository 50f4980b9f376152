"""The C core's SIMD switches (``lib.mrc_csum_simd``, ``lib.mrc_crc32_simd``) for the tests
that run both loops, and the CPU's flags they are held to."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def simd_loop(switch: Callable[[int], int], on: int) -> Iterator[int]:
    """Run the body with ``switch`` set to ``on`` (1: the SIMD loop where the CPU has it, 0:
    the plain one); yields the setting in force, and puts back the one before."""
    before = switch(-1)
    try:
        yield switch(on)
    finally:
        switch(before)


def cpu_flags() -> set[str]:
    """The flags /proc/cpuinfo lists."""
    with open("/proc/cpuinfo") as f:
        return set(f.read().split())
