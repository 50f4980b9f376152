"""The calibration on a real (small) lab: it runs, measures the stack, and picks a sane rate.

Lab: 2 planes x (2 T0 + 1 T1), one host per T0 (h0 -> h1 crosses T0-T1-T0: 6 python
switches), two steps of 1 s at most; about 15-25 s. The cache goes to a temporary
directory, the calibration lab is named mrcc<random> and is always taken down.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest

from lab.fabric.params import LabParams
from lab.fabric.state import exists
from lab.workloads import calibrate as cal


@pytest.mark.slow  # ~60 s
def test_calibrate_measures_the_stack_and_caches_a_sane_rate(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MRC_CALIBRATION_DIR", str(tmp_path))
    name = "mrcc" + secrets.token_hex(2)
    params = LabParams(planes=2, t0=2, t1=1, hosts_per_t0=1)
    lines: list[str] = []
    try:
        c = cal.calibrate(params, step_s=1.0, max_steps=2, name=name, echo=lines.append)
    finally:
        assert not exists(name), "the calibration lab must be gone"
    print("\n".join(lines))
    assert 1 <= len(c.steps) <= 2 and len(lines) == len(c.steps)
    first = c.steps[0]
    assert first.rate_mbit == cal.DEFAULT_CAP_MBIT
    # it measured real traffic: frames of about a full MTU, CPU on the machine and the NICs
    assert first.frames > 1000 and 4000 < first.frame_bytes < 4300
    assert first.verified and 0 < first.machine_busy <= 1 and 0 < first.nic_core_max <= 1.5
    assert 0 <= first.idle_busy < 1 and first.machine_core_s_per_frame > 0
    # a sane rate: within [min, cap], and at it the model keeps the machine under cpu_bound
    assert cal.MIN_RATE_MBIT <= c.rate_mbit <= cal.DEFAULT_CAP_MBIT
    if c.verified:
        assert cal.within_targets(c.steps[-1]) and c.rate_mbit == c.steps[-1].rate_mbit
    else:
        assert c.rate_mbit < c.steps[-1].rate_mbit
    assert c.line().startswith("this machine carries ~")
    # cached for this boot and this code, read back by a second process
    assert cal.store(c) is not None
    out = subprocess.run(
        [sys.executable, "-m", "lab.cli", "calibrate", "--json"]
        + ["--planes", "2", "--t0", "2", "--t1", "1", "--hosts-per-t0", "1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["rate_mbit"] == c.rate_mbit and got["key"] == c.key
    assert got["rule"]["headroom"] == cal.HEADROOM
