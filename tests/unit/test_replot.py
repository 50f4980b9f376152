"""Experiment PNGs drawn again from their JSON (lab/workloads/experiments/replot.py): the
committed results of p2p, t1_reboot, flaps and trim each give a picture, and a directory
without them says so."""

from __future__ import annotations

import shutil
from pathlib import Path

from lab.workloads.experiments import replot

RESULTS = Path(__file__).resolve().parents[2] / "results" / "experiments"


def test_each_result_is_drawn_again(tmp_path: Path) -> None:
    for name in replot.DRAW:
        shutil.copy(RESULTS / f"{name}.json", tmp_path / f"{name}.json")
    assert replot.main([str(tmp_path)]) == 0
    for name in replot.DRAW:
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000, name


def test_an_empty_directory_says_so(tmp_path: Path, capsys) -> None:
    assert replot.main([str(tmp_path)]) == 1
    assert "no result JSON" in capsys.readouterr().err
