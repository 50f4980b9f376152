"""The claims' simulated forms (``mrc-lab experiment NAME --sim``): no root and no lab; the
JSON has the experiments' contract keys, goes beside the lab form's (never over it), and the
report shows both side by side."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.workloads.experiments import base, registry, report
from lab.workloads.experiments.base import Result
from lab.workloads.experiments.sim import spray

ROOT = Path(__file__).resolve().parents[2]


def _lab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.slow
def test_every_simulated_form_writes_a_verdict_with_the_contract_keys(sim_quick_all: Path) -> None:
    forms = [s.name for s in registry.specs() if s.sim is not None]
    assert len(forms) >= 2
    assert not list(sim_quick_all.glob("*.json"))  # the lab forms' place stays untouched
    for name in forms:
        d = json.loads((sim_quick_all / "sim" / f"{name}.json").read_text())
        for k in base.RESULT_KEYS:
            assert k in d, (name, k)
        assert d["verdict"] in base.VERDICTS and d["quick"] is True, name
        assert "error" not in d.get("extra", {}), (name, d.get("extra"))
        s = d["setup"]
        assert s["link_rate_mbit"] == 100e3 and s["bdp_packets_per_path"] > 1, name
        # each run as a command: mrc-sim, or the simulator's Python entry point (trim's onset)
        assert d["commands"] and all("mrc-sim" in c or "mrcnic.sim" in c for c in d["commands"]), (
            name
        )
    assert (sim_quick_all / "REPORT.md").exists()


@pytest.mark.slow
def test_spray_sim_quick_sprays_better_than_hashing(sim_quick_all: Path) -> None:
    d = json.loads((sim_quick_all / "sim" / "spray.json").read_text())
    tiers = {**d["mrc"]["tiers"], **d["rocev2"]["tiers"]}
    assert set(tiers) == {"mrc", "mrc_ecmp", "rocev2_hash"}
    assert all(t["verified"] and t["qp_errors"] == 0 for t in tiers.values())
    h = d["metrics"]["headline"]
    # spraying beats hashing on the same transport even in the quick form's 16 hosts
    assert h["mrc"] > h["rocev2"] + 0.1, h
    assert d["setup"]["hosts"] == 16
    assert all("mrc-sim --workload permutation" in c for c in d["commands"])


@pytest.mark.slow
def test_incast_sim_quick_leaves_mrcs_victim_untouched(sim_quick_all: Path) -> None:
    d = json.loads((sim_quick_all / "sim" / "incast.json").read_text())
    assert d["metrics"]["headline"]["mrc"] >= 0.9, d["why"]
    assert d["mrc"]["mrc"]["verified"] and d["mrc"]["mrc"]["qp_errors_total"] == 0


def test_list_says_which_claims_have_a_simulated_form() -> None:
    p = _lab("experiment", "list")
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if " spray " in x)
    assert "--sim" in line
    assert registry.find("spray").sim is spray.SIM


def test_a_claim_without_a_simulated_form_is_refused_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every claim has a simulated form today; a new one without it must be refused by name
    (alone) and skipped with a line (in ``all``), never run as its lab form."""
    from lab import cli

    real = registry.specs()
    bare = dataclasses.replace(real[0], name="bare", number=99, sim=None)
    monkeypatch.setattr(registry, "specs", lambda: [*real[:1], bare])
    assert cli.main(["experiment", "bare", "--sim", "--out", str(tmp_path)]) == 2
    assert "bare has no simulated form yet" in capsys.readouterr().err
    res = registry.run(bare, base.Context(sim=True, out_dir=tmp_path, echo=lambda _t: None))
    assert res.verdict == "not reproduced" and "no simulated form yet" in res.extra["error"]


def test_the_spray_verdict_follows_its_thresholds() -> None:
    assert spray.judge(0.95, 0.55)[0] == "reproduced"
    assert spray.judge(0.80, 0.55)[0] == "partly"
    assert spray.judge(0.60, 0.55)[0] == "not reproduced"
    assert spray.judge(None, 0.55)[0] == "not reproduced"


def test_the_report_puts_the_simulated_form_beside_the_lab_form(tmp_path: Path) -> None:
    for out, mrc, verdict in ((tmp_path, 0.91, "reproduced"), (tmp_path / "sim", 0.97, "partly")):
        r = Result("spray", 2, "claim", {"text": "paper"})
        r.judge(verdict, f"why {verdict}")
        r.metrics = {"headline": {"name": "u", "unit": "x", "mrc": mrc, "rocev2": 0.5}}
        r.write(out)
    text = report.write(tmp_path).read_text()
    row = next(x for x in text.splitlines() if x.startswith("| 2 |"))
    assert "**reproduced**" in row and "**partly**" in row and "0.97" in row
    assert "Simulated at the paper's proportions" in text and "why partly" in text
