"""`mrc-lab experiment` end to end on real labs (root): the quick forms of one bandwidth
experiment (p2p) and one job experiment (t1_reboot) run, write JSON with every contract key,
a verdict backed by measured figures and a PNG, and the report renders from them. The other
experiments' verdict logic is unit-tested (tests/unit/test_exp_*.py); `make reproduce` runs
them all."""

from __future__ import annotations

import json
import secrets
import subprocess

import commands as C
import pytest

from lab.workloads.experiments.base import RESULT_KEYS, VERDICTS


@pytest.mark.slow  # 40-90 s each
@pytest.mark.parametrize("name", ["p2p", "t1_reboot"])
def test_quick_experiment_writes_its_result(tmp_path, name):
    lab = "mrcx" + secrets.token_hex(2)
    p = C.experiment(name, "--quick", "--rate-mbit", "10", "--lab", lab, "--out", str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    d = json.loads((tmp_path / f"{name}.json").read_text())
    for k in RESULT_KEYS:
        assert k in d, k
    assert d["verdict"] in VERDICTS and d["why"] and d["quick"] is True
    assert "error" not in d.get("extra", {})
    h = d["metrics"]["headline"]
    assert h["mrc"] is not None and h["rocev2"] is not None
    assert d["setup"]["link_rate_mbit"] == 10 and d["setup"]["paper_scale"]
    assert (tmp_path / f"{name}.png").stat().st_size > 1000
    r = C.experiment("report", "--out", str(tmp_path))
    assert r.returncode == 0 and f"## {d['number']}. {name}" in (tmp_path / "REPORT.md").read_text()
    assert (
        subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(
            lab + "-"
        )
        == 0
    ), "the experiment left its lab behind"
