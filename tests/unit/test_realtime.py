"""What a real-time lab is, without root: kernel switches refuse it, it is a flag, and it is
part of the calibration's cache key. The kernel side (SCHED_FIFO, the PM QoS request,
mrc-switch refusing clearly) needs root: tests/lab/test_lab_realtime.py."""

from __future__ import annotations

import pytest

from lab.fabric.params import LabParams, ParamError
from lab.workloads.calibrate import cache_key


def test_realtime_needs_python_switches():
    with pytest.raises(ParamError, match="realtime needs python switches"):
        LabParams(name="mrcx", switch="kernel", realtime=True)
    with pytest.raises(ParamError, match="realtime must be true or false"):
        LabParams(name="mrcx", realtime="yes")  # type: ignore[arg-type]


def test_realtime_is_in_the_calibration_key():
    plain = LabParams(name="mrcx")
    rt = LabParams(name="mrcx", realtime=True)
    pairs = [(0, 3)]
    assert cache_key(plain, pairs, env={}) != cache_key(rt, pairs, env={})
    assert cache_key(rt, pairs, env={}).endswith(":rt")
