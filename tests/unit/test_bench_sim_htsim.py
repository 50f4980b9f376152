"""bench/bench_sim.py beside htsim (``--htsim PATH``): the files it gives htsim, how it reads
htsim's output, the JSON keys, and its refusals, with a fake htsim_uec (a script printing what
htsim_uec prints), so no htsim build is needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_sim as bs

from mrcnic.sim.clos import ClosSpec, Permutation
from mrcnic.sim.scale import LAB, PAPER

# What htsim_uec prints for a run, trimmed (uet-htsim's README shows the same lines): setup,
# 'Starting simulation', one 'starting at' and one 'finished at' line per flow, clock ticks
# before 'Done', then the summary of its senders' counters.
FAKE_HTSIM = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_HTSIM_ARGS"], "w") as f:
    json.dump({{"args": args, "cwd": os.getcwd(),
               "topo": open(args[args.index("-topo") + 1]).read()}}, f)
if os.environ.get("FAKE_HTSIM_FAIL"):
    print("Failed to load connection matrix perm.cm")
    sys.exit(255)
lines = open(args[args.index("-tm") + 1]).read().splitlines()
flows = [l.split()[0].split("->") for l in lines[2:]]
print("Packet size (MTU) is", args[args.index("-mtu") + 1])
print("Parsed args")
print("Starting simulation")
for i, (s, d) in enumerate(flows):
    print(f"Flow Uec_{{s}}_{{d}} flowId {{i + 1}} uecSrc {{s}} starting at 0")
for i, (s, d) in enumerate(flows):
    print(f"Flow Uec_{{s}}_{{d}} flowId {{i + 1}} uecSrc {{s}} finished at {{90.5 + i}} total "
          "messages 1 total packets 17 RTS 0 total bytes 69632 in_flight now 0 fair_inc 0")
print("..Done")
print(f"New: {{16 * len(flows)}} Rtx: 5 RTS: 0 Bounced: 3 ACKs: 40 NACKs: 2 Pulls: 0 sleek_pkts: 0")
"""


@pytest.fixture
def fake_htsim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "htsim_uec"
    exe.write_text(FAKE_HTSIM.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_HTSIM_ARGS", str(tmp_path / "args.json"))
    return exe


def test_the_output_parser_reads_htsims_counters_and_finished_flows() -> None:
    lines = [
        "Starting simulation",
        "Flow Uec_0_13 flowId 1000000001 uecSrc 0 starting at 0",
        "Flow Uec_0_13 flowId 1000000001 uecSrc 0 finished at 176.2 total messages 1 total "
        "packets 490 RTS 0 total bytes 2002140 in_flight now 0",
        ".|Flow Uec_1_2 flowId 2 uecSrc 1 finished at 1.5e+03 total messages 1 total packets 9",
        ".Done",
        "New: 490 Rtx: 7 RTS: 0 Bounced: 2 ACKs: 124 NACKs: 1 Pulls: 0 sleek_pkts: 0",
    ]
    c = bs.parse_htsim_output(lines)
    assert (c["data_packets"], c["new_packets"], c["rtx_packets"]) == (490, 490, 7)
    assert (c["bounced"], c["acks"], c["nacks"]) == (2, 124, 1)
    assert c["flows_finished"] == 2 and c["last_finish_us"] == 1500.0
    with pytest.raises(ValueError, match="no 'New"):
        bs.parse_htsim_output(lines[:-1])


def test_htsim_gets_our_fabric_and_our_permutation(fake_htsim: Path, tmp_path: Path) -> None:
    h = bs.run_htsim(fake_htsim, 16, 64 << 10, PAPER, seed=3)
    seen = json.loads((tmp_path / "args.json").read_text())
    args = seen["args"]
    # the topology: 4 T0s of 4 hosts, 4 T1s, 100 Gb/s, a quarter of 4 us on each link
    topo = seen["topo"].split()
    assert topo[topo.index("Nodes") + 1] == "16" and topo.count("Radix_Down") == 2
    assert [topo[i + 1] for i, t in enumerate(topo) if t == "Radix_Down"] == ["4", "4"]
    assert topo[topo.index("Radix_Up") + 1] == "4"
    assert {topo[i + 1] for i, t in enumerate(topo) if t == "Downlink_Latency_ns"} == {"1000"}
    assert {topo[i + 1] for i, t in enumerate(topo) if t == "Downlink_speed_Gbps"} == {"100"}
    assert args[args.index("-mtu") + 1] == "4160"  # 4096 B of payload + htsim's 64 B header
    assert args[args.index("-q") + 1] == str((1 << 20) // 4160)  # the scale's 1 MiB
    assert args[args.index("-seed") + 1] == "3"
    assert int(args[args.index("-end") + 1]) >= 2000
    assert seen["cwd"] != os.getcwd()  # its log file lands in a scratch directory
    # the counters, the same permutation as mrc-sim's (seed 3), and the contract keys
    assert (
        h["data_packets"] == 16 * 16
        and h["rtx_packets"] == 5
        and h["flows_finished"] == 16 == h["flows"]
    )
    assert h["last_finish_us"] == 90.5 + 15
    assert h["data_packets_per_wall_s"] > 0 and h["peak_rss_bytes"] > 0
    assert h["peak_rss_from"].split()[0] in ("wait4", "wait4:", "VmHWM")
    assert bs._vm_hwm_bytes(os.getpid()) > 0  # a live process's own peak, not its spawner's
    assert h["wall_s"] >= 0 and h["process_wall_s"] >= h["wall_s"]
    assert h["command"].startswith(str(fake_htsim)) and "-topo fabric.topo" in h["command"]
    matrix = bs.htsim_matrix(16, 64 << 10, 3).splitlines()
    assert matrix[:2] == ["Nodes 16", "Connections 16"]
    perm = Permutation(ClosSpec(planes=1, t0=4, t1=4, hosts_per_t0=4, size=4096, seed=3)).perm
    assert [line.split()[0] for line in matrix[2:]] == [f"{s}->{d}" for s, d in enumerate(perm)]


def test_bench_sim_with_htsim_writes_both_and_the_ratio(fake_htsim: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench-sim.json"
    assert bs.main(["--hosts", "16", "--size", "64K", "--htsim", str(fake_htsim),
                    "--reps", "2", "--out", str(out)]) == 0  # fmt: skip
    doc = json.loads(out.read_text())
    run = doc["runs"]["16"]
    # the C cores, each run beside the Python twins', which gave the same output
    assert (run["fabric"], run["engine"]) == ("c", "c")
    assert len(run["data_packets_per_wall_s_runs"]) == 2 and run["same_output_every_run"]
    twin = run["python_twin"]
    assert len(twin["data_packets_per_wall_s_runs"]) == 2
    assert run["ratio_vs_python_twin"] > 0
    assert doc["scale"]["name"] == "paper" and doc["scale"]["port_rate_bps"] == 100e9
    assert doc["htsim"]["binary"] == str(fake_htsim.resolve()) and doc["htsim"]["differences"]
    run = doc["runs"]["16"]
    assert run["verified"] and run["data_packets_per_wall_s"] > 0 and run["peak_rss_bytes"] > 0
    h = run["htsim"]
    for key in ("data_packets_per_wall_s", "peak_rss_bytes", "wall_s", "command", "data_packets"):
        assert key in h
    assert run["ratio_vs_htsim"] == round(
        run["data_packets_per_wall_s"] / h["data_packets_per_wall_s"], 4
    )


def test_bench_sim_refuses_a_bad_htsim_path_before_running(tmp_path: Path) -> None:
    not_exe = tmp_path / "htsim_uec"
    not_exe.write_text("not a program\n")
    for path in (tmp_path / "missing", not_exe, tmp_path):
        with pytest.raises(SystemExit, match="not an executable file"):
            bs.main(["--hosts", "16", "--htsim", str(path)])


def test_a_failed_htsim_run_is_a_clear_error(
    fake_htsim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_HTSIM_FAIL", "1")
    with pytest.raises(SystemExit, match=r"16 hosts: htsim failed \(exit 255\)"):
        bs.run_htsim(fake_htsim, 16, 64 << 10, PAPER, seed=1)


def test_the_labs_scale_has_no_htsim_twin(fake_htsim: Path) -> None:
    with pytest.raises(SystemExit, match="whole Gb/s"):
        bs.htsim_topology(16, LAB)
    with pytest.raises(SystemExit, match="whole Gb/s"):
        bs.main(["--hosts", "16", "--scale", "lab", "--htsim", str(fake_htsim)])
