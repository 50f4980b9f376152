"""A lab split over machines, on one machine (docs/multihost.md): namespaces stand in for
the machines, each with its own underlay address on a bridge; crossing links are veths
stitched to kernel VXLAN devices by tc mirred.

- ``mrc-lab up --machines 2``: both parts in one state file; a verified write h0 -> h3 (every
  frame crosses once) and an all-to-all over the four hosts; a link down on a crossing link
  during a write takes the host's carrier as on a local link, shows in ``status`` and ``top``,
  and the write completes verified, ``top`` showing no fault after;
  ``down --machine K`` removes exactly part K.
- ``mrc-lab up --machine K --underlay ...`` twice, each part with its own state directory
  (as on two machines), and the write's two sides started one per part; loss on a crossing
  link set by each part on its own end.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from lab.fabric import lifecycle
from lab.fabric.netns import netns_exists, run
from lab.fabric.params import LabParams
from lab.fabric.partition import split_spec
from lab.fabric.state import load, state_path
from lab.fabric.topology import Plan
from tests.lab.lab_helpers import lab_name

RATE_MBIT = 5.0


def _cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True,
                       env=env, timeout=120)  # fmt: skip
    assert not check or p.returncode == 0, p.stderr
    return p


def _bench(*args: str, env: dict | None = None) -> dict:
    p = subprocess.run([sys.executable, "-m", "lab.bench_cli", *args, "--json"],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def _carrier(ns: str, ifname: str) -> bool:
    out = run(["ip", "-n", ns, "-j", "link", "show", "dev", ifname])
    return "LOWER_UP" in json.loads(out)[0]["flags"]


def test_split_over_two_machines_on_one() -> None:
    name = lab_name()
    params = LabParams(name=name, rate_mbit=RATE_MBIT)
    plan = Plan(params)
    try:
        st = lifecycle.up(params, split=split_spec(plan, 2, None, None))
        part = st.partition
        assert part is not None and st.here == [0, 1]
        assert {name + "-m0", name + "-m1", name + "-ul"} <= set(st.namespaces)

        w = _bench("write", "--lab", name, "--src", "h0", "--dst", "h3", "--size", "2M",
                   "--iters", "1")  # fmt: skip
        assert w["verified"] and not w["errors"] and w["qp_errors"] == 0
        assert w["goodput_fraction"] > 0.8, w["goodput_fraction"]
        a2a = _bench("alltoall", "--lab", name, "--size", "256K", "--iters", "1", "--warmup", "0")
        assert a2a["verified"] and not a2a["errors"] and a2a["qp_errors"] == 0, a2a

        # a crossing link, h0's plane-4 port (machine 0) to p4-t0-0 (machine 1), down and up
        # again while a write h0 -> h3 runs over it
        writer = subprocess.Popen(
            [sys.executable, "-m", "lab.bench_cli", "write", "--lab", name, "--src", "h0",
             "--dst", "h3", "--size", "16M", "--iters", "1", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            time.sleep(1.5)
            down = _cli("link", "down", "h0", "p4-t0-0", "--lab", name)
            assert f"-n {name}-m0 link set dev {name}-x0 down" in down.stdout
            assert not _carrier(plan.namespace("h0"), plan.ifname("p4"))
            status = json.loads(_cli("status", "--lab", name, "--json").stdout)
            (link,) = [lk for lk in status["links"] if lk["a"] == "h0" and lk["b"] == "p4-t0-0"]
            assert link["state"] == "down"
            top = _cli("top", "--lab", name, "--once", "--width", "120").stdout
            assert "link DOWN h0 -- p4-t0-0" in top, top
            time.sleep(1.0)
            _cli("link", "up", "h0", "p4-t0-0", "--lab", name)
            out, err = writer.communicate(timeout=240)
        finally:
            if writer.poll() is None:
                writer.kill()
        assert writer.returncode == 0, err[-2000:]
        w = json.loads(out)
        assert w["verified"] and not w["errors"] and w["qp_errors"] == 0, w
        assert _carrier(plan.namespace("h0"), plan.ifname("p4"))
        status = json.loads(_cli("status", "--lab", name, "--json").stdout)
        assert status["counts"]["links_up"] == status["counts"]["links"]
        top = _cli("top", "--lab", name, "--once", "--width", "120").stdout
        assert re.search(r"^FAULTS\s+none", top, re.M) and "link DOWN" not in top, top

        # down, part by part: exactly that part each time
        part1 = set(part.namespaces_on(1)) | {name + "-m1"}
        part0 = set(part.namespaces_on(0)) | {name + "-m0"}
        _cli("down", "--lab", name, "--machine", "1")
        assert not any(netns_exists(ns) for ns in part1)
        assert all(netns_exists(ns) for ns in part0 | {name + "-ul"})
        left = load(name)
        assert left.here == [0] and set(left.namespaces) == part0 | {name + "-ul"}
        assert {left.partition.machine_of(n) for n in left.processes} == {0}  # type: ignore[union-attr]
        assert _cli("down", "--lab", name, "--machine", "1", check=False).returncode == 1
        _cli("down", "--lab", name, "--machine", "0")
        assert not any(netns_exists(ns) for ns in part0 | {name + "-ul"})
        assert not state_path(name).exists()
    finally:
        lifecycle.down(name)


def test_two_parts_built_apart_as_on_two_machines(tmp_path: Path) -> None:
    """Each part by its own ``up --machine K --underlay ...`` with its own state directory,
    its stitches in a namespace that stands in for that machine's own."""
    name = lab_name()
    ul, m0, m1 = f"{name}-ul", f"{name}-m0", f"{name}-m1"
    made: list[str] = []
    dirs = [tmp_path / "machine0", tmp_path / "machine1"]
    envs = [{**os.environ, "MRC_LAB_STATE_DIR": str(d)} for d in dirs]
    underlay = "fd00:5::1=ul0,fd00:5::2=ul0"
    try:
        for ns in (ul, m0, m1):
            run(["ip", "netns", "add", ns])
            made.append(ns)
        run(["ip", "-n", ul, "link", "add", "name", "br0", "type", "bridge"])
        for k, ns in enumerate((m0, m1)):
            run(["ip", "link", "add", "ul0", "netns", ns, "mtu", "4300", "type", "veth", "peer",
                 "name", f"m{k}", "netns", ul, "mtu", "4300"])  # fmt: skip
            run(["ip", "-n", ul, "link", "set", f"m{k}", "master", "br0", "up"])
            run(["ip", "-n", ns, "addr", "add", f"fd00:5::{k + 1}/64", "dev", "ul0", "nodad"])
            run(["ip", "-n", ns, "link", "set", "ul0", "up"])
        run(["ip", "-n", ul, "link", "set", "br0", "up"])

        # an underlay that cannot carry the frames is refused before anything is made
        run(["ip", "-n", m0, "link", "set", "ul0", "mtu", "4200"])
        bad = _cli("up", "--lab", name, "--rate", "5Mbit", "--machine", "0", "--underlay",
                   underlay, "--stitch-netns", m0, "-q", env=envs[0], check=False)  # fmt: skip
        assert bad.returncode == 1 and "need 4270" in bad.stderr, bad.stderr
        run(["ip", "-n", m0, "link", "set", "ul0", "mtu", "4300"])

        for k, ns in enumerate((m0, m1)):
            _cli("up", "--lab", name, "--rate", "5Mbit", "--machine", str(k), "--underlay",
                 underlay, "--stitch-netns", ns, "-q", env=envs[k])  # fmt: skip
        part0 = json.loads((dirs[0] / f"{name}.json").read_text())
        assert (
            part0["split"]["here"] == [0]
            and part0["split"]["underlay"][1]["address"] == "fd00:5::2"
        )
        # a node of the other part: refused, naming the machine to run it on
        far = _cli("link", "down", "p0-t0-1", "p0-t1-0", "--lab", name, env=envs[1], check=False)
        assert far.returncode == 2 and "run the command on machine 0" in far.stderr
        # loss on a crossing link (h0 on machine 0, p4-t0-0 on machine 1): each machine sets
        # its own end and names the other's command; --clear likewise
        for k, (mine, other) in enumerate((("h0", "p4-t0-0"), ("p4-t0-0", "h0"))):
            out = _cli("loss", "h0", "p4-t0-0", "--loss", "1%", "--lab", name, env=envs[k]).stdout
            assert f"sets {mine}'s end; for {other}'s, run on machine {1 - k}" in out, out
            assert out.count(" nft ") == 1, out  # (its own end only)
        tables = [run(["ip", "netns", "exec", f"{name}-{n}", "nft", "list", "tables"])
                  for n in ("h0", "p4-t0-0")]  # fmt: skip
        assert all("netdev" in t for t in tables), tables
        for k in (0, 1):
            _cli("loss", "h0", "p4-t0-0", "--clear", "--lab", name, env=envs[k])
        tables = [run(["ip", "netns", "exec", f"{name}-{n}", "nft", "list", "tables"])
                  for n in ("h0", "p4-t0-0")]  # fmt: skip
        assert not any("netdev" in t for t in tables), tables

        srv = subprocess.Popen(
            ["ip", "netns", "exec", f"{name}-h3", sys.executable, "-m", "lab.bench_cli", "write",
             "--lab", name, "--server", "--host", "h3", "--port", "18777"],
            env=envs[1], stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            res = _bench_client(name, envs[0])
        finally:
            srv.wait(timeout=60)
        assert res["verified"] and res["goodput_fraction"] > 0.8, res
        for k in (1, 0):
            _cli("down", "--lab", name, env=envs[k])
        assert not any(netns_exists(f"{name}-{n}") for n in ("h0", "h3", "mgmt", "p0-t0-0"))
    finally:
        for k in (1, 0):
            _cli("down", "--lab", name, env=envs[k], check=False)
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def _bench_client(name: str, env: dict) -> dict:
    argv = [sys.executable, "-m", "lab.bench_cli", "write", "--lab", name, "--client", "h3",
            "--host", "h0", "--port", "18777", "--size", "1M", "--iters", "4", "--json"]  # fmt: skip
    for _ in range(50):  # the server may not listen yet
        p = subprocess.run(["ip", "netns", "exec", f"{name}-h0", *argv], capture_output=True,
                           text=True, env=env, timeout=120)  # fmt: skip
        if p.returncode == 0:
            return json.loads(p.stdout)
        if "refused" not in p.stderr and "connect" not in p.stderr:
            raise AssertionError(p.stderr[-2000:])
        time.sleep(0.2)
    raise AssertionError("the server side never listened")
