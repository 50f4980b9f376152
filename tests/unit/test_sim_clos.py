"""mrc-sim over a whole Clos (mrcnic.sim.clos): every host a NIC, a permutation between them,
MRC sprayed and the RoCEv2 baseline on its rails, the same output for the same seed."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from mrcnic.sim.clos import ClosSpec, Permutation, derangement, run_permutation

ROOT = Path(__file__).resolve().parents[2]
SMALL = ClosSpec(planes=2, t0=2, t1=2, hosts_per_t0=2, size=256 << 10)
CONTRACT = ("hosts", "utilisation", "flows", "jain", "link_imbalance", "fct_p50_s",
            "fct_p99_s", "wall_s", "data_packets")  # fmt: skip


def _stable(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in ("wall_s", "cpu_s", "sim_pps")}


def test_a_derangement_writes_to_nobody_twice_and_never_to_itself() -> None:
    for n in (2, 3, 16, 128):
        perm = derangement(n, random.Random(n))
        assert sorted(perm) == list(range(n))
        assert all(i != d for i, d in enumerate(perm))


@pytest.mark.parametrize("transport", ["mrc", "rocev2"])
def test_every_flow_of_a_permutation_lands_its_bytes(transport: str) -> None:
    spec = ClosSpec(planes=2, t0=2, t1=2, hosts_per_t0=2, size=256 << 10, transport=transport)
    r = run_permutation(spec)
    assert r["verified"] and not r["qp_errors"] and r["misrouted"] == 0
    assert all(k in r for k in CONTRACT)
    assert r["hosts"] == 4 and len(r["flows"]) == 4
    assert sorted(f["dst"] for f in r["flows"]) == [0, 1, 2, 3]
    assert 0 < r["utilisation"] <= 1.0 and 0 < r["jain"] <= 1.0
    assert r["fct_p50_s"] <= r["fct_p99_s"] == r["completion_s"]


def test_flows_under_one_t0_never_cross_a_t1() -> None:
    """Two hosts under one T0 and nothing else: the T0 turns every packet round."""
    p = Permutation(ClosSpec(planes=2, t0=1, t1=2, hosts_per_t0=2, size=128 << 10))
    r = p.run()
    assert r["verified"] and r["misrouted"] == 0
    assert all(link.tx_packets == 0 for link in p.fabric.fabric_links())


def test_mrc_sprays_a_flow_over_every_t1_of_every_plane() -> None:
    p = Permutation(ClosSpec(planes=2, t0=2, t1=4, hosts_per_t0=1, size=512 << 10))
    r = p.run()
    assert r["verified"]
    ups = [link for plane in p.fabric.up for row in plane for link in row]
    assert all(link.tx_packets > 0 for link in ups)  # both hosts' T0s, every plane and T1


def test_the_same_seed_gives_the_same_output() -> None:
    a, b = run_permutation(SMALL), run_permutation(SMALL)
    assert json.dumps(_stable(a), sort_keys=True) == json.dumps(_stable(b), sort_keys=True)
    other = run_permutation(ClosSpec(planes=2, t0=2, t1=2, hosts_per_t0=2, size=256 << 10,
                                     seed=2))  # fmt: skip
    assert _stable(other) != _stable(a)


def test_mrc_sim_runs_a_permutation_and_refuses_what_it_cannot_do_there() -> None:
    cmd = [sys.executable, "-m", "mrcnic.sim.transfer", "--workload", "permutation",
           "--planes", "2", "--t0", "2", "--hosts-per-t0", "2", "--t1", "2", "--size", "128K"]  # fmt: skip
    d = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, text=True,
                                  check=True, cwd=ROOT).stdout)  # fmt: skip
    assert d["workload"] == "permutation" and d["hosts"] == 4 and d["verified"]
    r = subprocess.run([*cmd, "--fail", "path:0@1ms"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "not supported by --workload permutation" in r.stderr
    r = subprocess.run([*cmd[:5], "--t0", "1", "--hosts-per-t0", "1"], capture_output=True,
                       text=True, cwd=ROOT)  # fmt: skip
    assert r.returncode == 2 and "at least 2 hosts" in r.stderr


def test_bench_sim_writes_its_contract_keys(tmp_path: Path) -> None:
    out = tmp_path / "bench-sim.json"
    subprocess.run(
        [sys.executable, "bench/bench_sim.py", "--hosts", "16", "--size", "64K", "--out",
         str(out)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    run = doc["runs"]["16"]
    assert run["hosts"] == 16 and run["verified"]
    assert run["data_packets_per_wall_s"] > 0 and run["peak_rss_bytes"] > 1 << 20
    assert doc["scale"]["name"] == "paper"  # passed to mrc-sim explicitly
    assert "htsim" not in doc and "htsim" not in run and "ratio_vs_htsim" not in run


def test_a_whole_fabric_runs_at_the_papers_scale_unless_told() -> None:
    """p2p keeps the lab's 1/1000 scale (its contract); the whole-fabric workloads default to
    the paper's proportions, the lab's one flag away, and an explicit flag wins over both."""
    from mrcnic.sim import transfer
    from mrcnic.sim.scale import LAB, PAPER

    def fabric(*args: str) -> tuple[float, float, int, int | None]:
        f = transfer.config_from_args(transfer.build_parser().parse_args(list(args))).fabric
        return f.port_rate_bps, f.prop_s, f.queue_bytes, f.ecn_bytes

    lab = (LAB.port_rate_bps, LAB.prop_s, LAB.queue_bytes, LAB.ecn_bytes)
    paper = (PAPER.port_rate_bps, PAPER.prop_s, PAPER.queue_bytes, PAPER.ecn_bytes)
    assert fabric() == lab
    assert fabric("--workload", "permutation") == paper
    assert fabric("--workload", "allreduce", "--scale", "lab") == lab
    assert fabric("--workload", "permutation", "--port-rate", "25Gbit")[0] == 25e9
    assert fabric("--scale", "paper") == paper


def test_every_t0_t1_link_reports_its_utilisation_both_ways() -> None:
    spec = ClosSpec(planes=2, t0=2, t1=2, hosts_per_t0=2, size=256 << 10)
    p = Permutation(spec)
    r = p.run()
    util = r["link_utilisation"]
    assert sorted(util) == sorted(
        f"p{pl}-t0-{i},p{pl}-t1-{j}" for pl in range(2) for i in range(2) for j in range(2)
    )
    assert all(0.0 <= x <= 1.0 for pair in util.values() for x in pair)
    # what the links carried, over the run, at the links' rate
    link = p.fabric.up[0][0][1]
    want = link.tx_bytes * 8 / (spec.path_rate * p.fabric.now)
    assert util["p0-t0-0,p0-t1-1"][0] == round(want, 4) and want > 0
