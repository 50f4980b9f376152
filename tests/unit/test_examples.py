"""Every runnable program in examples/ runs as a user runs it (a subprocess from the project's
root) and prints what it promises. The one that needs a lab (lab_two_qps.py) runs in
tests/lab/test_e2e_write.py; the plugins are also loaded by the tests of their mechanisms
(test_cc_example.py, test_path_policy*.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: program -> lines (substrings) its output must hold
PROGRAMS = {
    "sim_two_qps.py": ["bytes in", "immediate 0xC0FFEE at the server", "DENIED -> GOOD",
                       "REMOTE_ACCESS_ERROR, QP now ERROR"],
    "ecn_loss_aimd.py": ["nscc: goodput", "ecn-loss-aimd: goodput", "verified True"],
    "one_path_per_plane.py": ["mrc: goodput", "one-path: goodput", "verified True"],
    "fault_schedule.py": ["schedule: link:p0-t0-0,p0-t1-0@20ms-80ms", "mrc: goodput",
                          "rocev2: goodput", "goodput per 10 ms"],
    "read_capture.py": ["WRITE_FIRST", "SACK", "flow labels (paths)", "MRC RETH: va="],
}  # fmt: skip


def test_every_program_is_listed() -> None:
    runnable = {p.name for p in (ROOT / "examples").glob("*.py") if "__main__" in p.read_text()}
    assert runnable == set(PROGRAMS) | {"lab_two_qps.py"}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_example_runs(name: str) -> None:
    p = subprocess.run([sys.executable, f"examples/{name}"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    for line in PROGRAMS[name]:
        assert line in p.stdout, (line, p.stdout[-2000:])


def test_fault_schedule_takes_the_users_faults() -> None:
    p = subprocess.run([sys.executable, "examples/fault_schedule.py", "reboot:p1-t1-0@20ms+30ms"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0 and "schedule: reboot:p1-t1-0@20ms+30ms" in p.stdout, p.stderr
