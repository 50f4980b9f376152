"""How many shared switch processes a lab gets by default: a third of the cores it may run
on, in whole planes (lab/fabric/lifecycle.py switch_procs_for; docs/results/performance.md)."""

from __future__ import annotations

import pytest

from lab.fabric import lifecycle


@pytest.mark.parametrize(
    ("cores", "planes", "procs"),
    [(1, 8, 1), (2, 8, 1), (5, 8, 1), (6, 8, 2), (16, 8, 4), (64, 8, 8), (64, 2, 2),
     (16, 6, 3), (16, 7, 1), (2, 1, 1)],
)  # fmt: skip
def test_a_third_of_the_cores_in_whole_planes(cores: int, planes: int, procs: int) -> None:
    n = lifecycle.switch_procs_for(cores, planes)
    assert n == procs and planes % n == 0


def test_the_environment_overrides_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRC_LAB_SWITCH_PROCS", "0")
    assert lifecycle.switch_procs_default(8) == 0
    monkeypatch.setenv("MRC_LAB_SWITCH_PROCS", "many")
    with pytest.raises(lifecycle.LabError, match="whole number"):
        lifecycle.switch_procs_default(8)
    monkeypatch.delenv("MRC_LAB_SWITCH_PROCS")
    assert lifecycle.switch_procs_default(8) == lifecycle.switch_procs_for(
        lifecycle.cores_here(), 8
    )
