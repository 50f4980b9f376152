"""The simulator's C fabric (csrc/mrc_simnet.c, mrcnic/sim/cfabric.py) against its Python twin
(mrcnic/sim/fabric.py with clos.ClosFabric), and the C engines in the simulator against the
QPs' Python twins: for the same run, the same output bytes.

Three tiers: the fabrics alone, driven by the same made-up frames (random sizes, classes,
routes, send times, faults), must deliver the same frames at the same times with the same
counters; whole runs (every workload, with trims, marks, loss, faults, PFC's neighbour,
RoCEv2) must give the same JSON on the Python fabric, the C fabric with the Python engines,
and the C fabric with the C engines; and the C fabric must grow its pool and heap without a
difference.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from mrcnic.faultplan import parse_steps
from mrcnic.sim import cfabric
from mrcnic.sim.clos import ClosFabric, ClosSpec, Permutation, run_permutation, simulated
from mrcnic.sim.fabric import DATA_OVERHEAD_BYTES
from mrcnic.sim.scale import PAPER
from mrcnic.wire import layout, usid

pytestmark = pytest.mark.skipif(not cfabric.available(), reason="the C module is not built")
ROOT = Path(__file__).resolve().parents[2]
SMALL = ClosSpec(planes=4, t0=3, t1=2, hosts_per_t0=2, size=256 << 10)
_stable = simulated


# --- the fabrics alone ----------------------------------------------------------------------


def _frame(shape: usid.ClosShape, rng: random.Random, src: int, plane: int) -> bytes:
    """A made-up frame from ``src`` on ``plane``: a random destination, path, size and class
    (control, trimmable data with or without ECT, no-trim data), the MRC data headers
    whole so a trim can cut it."""
    hosts = shape.t0 * shape.hosts_per_t0
    dst = rng.choice([h for h in range(hosts) if h != src])
    ev = plane + shape.planes * rng.randrange(shape.t1)  # (ev_plane: ev % planes)
    f = bytearray(rng.randrange(160, 4096 + DATA_OVERHEAD_BYTES))
    f[12:14] = b"\x86\xdd"
    dscp = rng.choice([layout.Dscp.CONTROL, layout.Dscp.TRIMMABLE, layout.Dscp.TRIMMABLE,
                       layout.Dscp.NO_TRIM])  # fmt: skip
    ecn = rng.choice([0, 2])
    f[14] = 0x60 | int(dscp) >> 2
    f[15] = (int(dscp) & 3) << 6 | ecn << 4
    f[20] = layout.IPPROTO_UDP
    f[21] = 64
    f[38:54] = usid.ev_address(shape, src, dst, ev)
    f[56:58] = layout.MRC_UDP_PORT.to_bytes(2, "big")
    f[62] = layout.Opcode.WRITE_MIDDLE if dscp != layout.Dscp.CONTROL else layout.Opcode.SACK
    return bytes(f)


def _drive(fab: Any, spec: ClosSpec, seed: int, cut_at: float | None) -> None:
    rng = random.Random(seed)
    shape = spec.shape
    for _ in range(3000):
        t = rng.random() * 200e-6
        src = rng.randrange(spec.hosts)
        plane = rng.randrange(spec.planes)
        frame = _frame(shape, rng, src, plane)
        fab.at(t, lambda src=src, plane=plane, frame=frame: fab.send(src, plane, frame, fab.now))
    if cut_at is not None:
        fab.at(cut_at, lambda: fab.cut([fab.up[0][0][1], fab.down[1][0][2], fab.last[0][3]]))
        fab.at(cut_at * 1.5, lambda: fab.nic[2][1].set_up(False))
        for link in fab.fabric_links()[:5]:
            link.loss = 0.05


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("cut", [None, 60e-6])
def test_the_c_fabric_delivers_what_the_python_fabric_does(seed: int, cut: float | None) -> None:
    spec = replace(SMALL, port_rate_bps=PAPER.port_rate_bps, prop_s=PAPER.prop_s,
                   queue_bytes=32 << 10, ecn_bytes=8 << 10, seed=seed)  # fmt: skip
    got: dict[str, list] = {"py": [], "c": []}
    fabs = {
        "py": ClosFabric(spec, lambda h, p, f, t: got["py"].append((h, p, f, t))),
        "c": cfabric.CClosFabric(spec, lambda h, p, f, t: got["c"].append((h, p, f, t))),
    }
    for fab in fabs.values():
        _drive(fab, spec, seed, cut)
        fab.run(1.0)
    assert len(got["py"]) > 1000
    assert got["c"] == got["py"]  # the same frames (trimmed, marked) at the same times
    counters = ("tx_packets", "drops", "trims", "marks", "losses", "max_backlog")
    link_counters = (*counters, "tx_bytes")
    for a, b in zip(fabs["py"].links(), fabs["c"].links(), strict=True):
        assert a.name == b.name
        assert [getattr(a, k) for k in counters] == [getattr(b, k) for k in counters], a.name
    for a, b in zip(fabs["py"].fabric_links(), fabs["c"].fabric_links(), strict=True):
        assert [getattr(a, k) for k in link_counters] == [getattr(b, k) for k in link_counters]
    assert fabs["c"].misrouted == fabs["py"].misrouted
    assert fabs["c"].now == fabs["py"].now


def test_a_frame_with_no_path_is_misrouted_on_both() -> None:
    spec = SMALL
    for fab in (ClosFabric(spec, lambda *a: None), cfabric.CClosFabric(spec, lambda *a: None)):
        good = _frame(spec.shape, random.Random(1), 0, 0)
        fab.send(0, 1, good, 0.0)  # plane 1's port, a plane-0 address
        bad = bytearray(good)
        bad[38:54] = bytes(16)
        fab.send(0, 0, bytes(bad), 0.0)
        fab.run(1.0)
        assert fab.misrouted == 2, type(fab).__name__


# --- whole runs: three ways, one output -------------------------------------------------------


def _three_ways(spec: ClosSpec, run: Any = run_permutation) -> list[dict]:
    outs = []
    for fab, eng in (("py", "py"), ("c", "py"), ("c", "c")):
        r = run(replace(spec, fabric=fab, engine=eng))
        assert r["fabric"] == fab and r["engine"] == eng
        outs.append(r)
    return outs


PAPERISH = replace(SMALL, port_rate_bps=PAPER.port_rate_bps, prop_s=PAPER.prop_s,
                   queue_bytes=PAPER.queue_bytes, ecn_bytes=PAPER.ecn_bytes)  # fmt: skip
RUNS = {
    "plain": PAPERISH,
    "trims, marks and loss": replace(
        PAPERISH, t1=1, queue_bytes=24 << 10, ecn_bytes=8 << 10, loss=0.002, size=512 << 10
    ),  # fmt: skip
    "drops (no trim)": replace(PAPERISH, queue_bytes=32 << 10, trim=False),
    "faults and a timeline": replace(
        PAPERISH,
        size=1 << 20,
        timeline_s=20e-6,
        faults=tuple(
            s
            for text in (
                "link:p0-t0-1,p0-t1-0@20us-200us",
                "reboot:p3-t1-1@30us+100us",
                "port:h0,2@10us-300us",
                "loss:p1-t0-0,p1-t1-1=5%@0-1ms",
            )  # fmt: skip
            for s in parse_steps(text)
        ),
    ),
    "the lab's scale": SMALL,
    "rocev2": replace(PAPERISH, transport="rocev2", queue_bytes=64 << 10),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_permutation_is_the_same_on_either_fabric_and_either_engine(name: str) -> None:
    py, c_fabric, c_engines = _three_ways(RUNS[name])
    assert py["verified"]
    assert _stable(c_fabric) == _stable(py)
    assert _stable(c_engines) == _stable(py)
    if name == "trims, marks and loss":
        assert py["trims"] and py["ecn_marks"] and py["retransmissions"]
    if name != "rocev2":
        assert c_engines["sim_core"]["c_frames"] > py["data_packets"]  # C took the frames


def test_the_collectives_and_the_onset_are_the_same_on_either_engine() -> None:
    from mrcnic.sim import collectives as co
    from mrcnic.sim.onset import OnsetParams, run_onset

    spec = replace(PAPERISH, t0=2, hosts_per_t0=3, t1=2, size=256 << 10)
    reboot = tuple(parse_steps("reboot:p0-t1-1@40us+60us"))
    incast = co.IncastParams((0, 1), 5, (2, 3), 1, 300e-6)
    onset = OnsetParams(steady_bytes=1 << 20, joiner_bytes=512 << 10, join_s=60e-6,
                        joiner_qps=4)  # fmt: skip
    for run in (
        lambda s: run_onset(replace(s, queue_bytes=64 << 10), onset),
        lambda s: co.Allreduce(replace(s, faults=reboot, timeline_s=20e-6), 2).run(),
        lambda s: co.Alltoall(replace(s, loss=0.002, size=128 << 10)).run(),
        lambda s: co.Incast(replace(s, size=64 << 10), incast).run(),
    ):
        py, c_fabric, c_engines = _three_ways(spec, run)
        assert _stable(c_fabric) == _stable(py)
        assert _stable(c_engines) == _stable(py)


def test_the_c_fabric_grows_its_pool_heap_and_bins_without_a_difference(monkeypatch) -> None:
    spec = replace(PAPERISH, t0=8, hosts_per_t0=4, size=1 << 20, timeline_s=2e-6)
    want = _stable(run_permutation(replace(spec, fabric="py", engine="py")))
    monkeypatch.setattr(cfabric, "pool_chunks", lambda spec: 1)
    monkeypatch.setattr(cfabric, "_HEAP_START", 2048)
    monkeypatch.setattr(cfabric, "_BINS_START", 4)
    p = Permutation(replace(spec, fabric="c", engine="c"))
    r = p.run()
    assert p.fabric.c.n_chunks > 1 and p.fabric.c.heap_cap > 2048  # it did grow
    assert p.fabric.c.n_bins > 4 and len(r["timeline"]) > 8
    assert _stable(r) == want


# --- the choice of cores ----------------------------------------------------------------------


def test_auto_picks_c_and_keeps_python_where_c_does_not_run() -> None:
    assert SMALL.cores == ("c", "c")
    assert replace(SMALL, transport="rocev2").cores == ("c", "py")
    assert replace(SMALL, transport="rocev2", pfc=True).cores == ("py", "py")
    assert replace(SMALL, pfc=True).cores == ("c", "c")  # MRC is never paused
    with pytest.raises(ValueError, match="C engines run on the C fabric only"):
        replace(SMALL, fabric="py", engine="c").check()
    with pytest.raises(ValueError, match="PFC runs on the Python fabric only"):
        replace(SMALL, fabric="c", transport="rocev2", pfc=True).check()


def test_mrc_sim_says_which_cores_ran_and_refuses_them_for_p2p() -> None:
    def sim(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mrcnic.sim.transfer", *args],
                              capture_output=True, text=True, cwd=ROOT)  # fmt: skip

    r = sim("--workload", "permutation", "--t0", "2", "--hosts-per-t0", "2", "--t1", "2",
            "--planes", "2", "--size", "128K", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["fabric"], out["engine"]) == ("c", "c")
    assert out["sim_core"]["wakes"] > 0
    r = sim("--engine", "c", "--size", "64K", "--json")
    assert r.returncode == 2 and "whole-fabric workloads only" in r.stderr
    assert "Traceback" not in r.stderr
