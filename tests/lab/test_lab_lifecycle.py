"""mrc-lab up/down: nothing left behind, idempotent teardown, labs side by side, crashes."""

from __future__ import annotations

import json
import subprocess
import sys

import lab_helpers as H
import pytest

from lab.fabric import lifecycle, state
from lab.fabric.netns import LabError, netns_exists
from lab.fabric.params import LabParams


def test_kernel_up_then_down_leaves_nothing() -> None:
    name = H.lab_name()
    params = LabParams(name=name, switch="kernel", **H.SMALL)
    st = lifecycle.up(params)
    try:
        assert all(netns_exists(ns) for ns in st.namespaces)
        assert len(st.namespaces) == st.plan.namespace_count
        # Nothing of the lab lives in the root namespace, ever.
        assert H.lab_leftovers(name)["root_links"] == []
        assert H.crosses(st, 0, 1)
        # A loss rule puts an nft table in two namespaces: down must take it too.
        from lab.fabric.faults import Faults

        Faults(st, echo=None).loss("p0-t0-0", "p0-t1-0", 50)
    finally:
        report = lifecycle.down(name)
    assert report.found and len(report.namespaces_deleted) == st.plan.namespace_count
    assert H.lab_leftovers(name) == {"namespaces": [], "root_links": []}
    assert H.state_dir_files(name) == []
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert name not in out
    # Twice is harmless.
    again = lifecycle.down(name)
    assert not again.found


@pytest.mark.parametrize("procs", [0, 1, 3])
def test_python_up_then_down_stops_every_process(procs: int) -> None:
    name = H.lab_name()
    params = LabParams(name=name, switch="python", **H.SMALL)
    st = lifecycle.up(params, switch_procs=procs)
    pids = [rec.pid for rec in st.processes.values()]
    try:
        assert len(pids) == st.plan.switch_count
        assert len(set(pids)) == (procs or st.plan.switch_count)
        assert all(H.pid_running(p) for p in pids)
    finally:
        lifecycle.down(name)
    assert H.wait_gone(pids) == []
    assert H.lab_leftovers(name) == {"namespaces": [], "root_links": []}
    assert H.state_dir_files(name) == []


def test_two_labs_coexist() -> None:
    with H.running_lab(switch="kernel") as a, H.running_lab(switch="kernel", planes=1) as b:
        assert a.name != b.name
        assert H.crosses(a, 0, 1) and H.crosses(b, 0, 1)
        lifecycle.down(b.name)
        assert H.lab_leftovers(b.name)["namespaces"] == []
        # Taking b down did not touch a.
        assert all(netns_exists(ns) for ns in a.namespaces)
        assert H.crosses(a, 0, 1)


def test_down_after_a_crash_half_way(monkeypatch) -> None:
    """The state file is written before anything exists: a bring-up that dies after the
    namespaces are made is still cleaned up by `down`."""
    name = H.lab_name()
    params = LabParams(name=name, switch="kernel", **H.SMALL)

    def boom(*_a, **_k):
        raise RuntimeError("simulated crash after the namespaces")

    monkeypatch.setattr(lifecycle, "veth_lines", boom)
    try:
        with pytest.raises(RuntimeError):
            lifecycle.up(params, keep_on_error=True)  # like a crash: nothing cleaned
        assert state.exists(name)
        assert H.lab_leftovers(name)["namespaces"]
    finally:
        lifecycle.down(name)
    assert H.lab_leftovers(name)["namespaces"] == []
    assert not state.exists(name)


def test_failed_bring_up_cleans_itself(monkeypatch) -> None:
    name = H.lab_name()
    monkeypatch.setattr(lifecycle, "veth_lines", lambda plan: ["link add bogus type nosuchtype"])
    try:
        with pytest.raises(LabError, match="bogus"):
            lifecycle.up(LabParams(name=name, switch="kernel", **H.SMALL))
        assert H.lab_leftovers(name)["namespaces"] == []
        assert not state.exists(name)
    finally:
        lifecycle.down(name)


def test_up_refuses_a_running_lab_and_foreign_namespaces() -> None:
    with H.running_lab(switch="kernel") as st, pytest.raises(LabError, match="already up"):
        lifecycle.up(st.params)
    # A namespace with the lab's prefix that the lab did not make is never adopted or deleted.
    name = H.lab_name()
    foreign = f"{name}-h0"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        with pytest.raises(LabError, match="not made by this lab"):
            lifecycle.up(LabParams(name=name, switch="kernel", **H.SMALL))
        assert netns_exists(foreign)
        lifecycle.down(name)
        assert netns_exists(foreign)
    finally:
        subprocess.run(["ip", "netns", "del", foreign], check=False)


def test_cli_up_status_exec_down() -> None:
    name = H.lab_name()
    cli = [sys.executable, "-m", "lab.cli"]
    try:
        up = subprocess.run(
            [*cli, "up", "--name", name, "--switch", "kernel", "--planes", "1", "-q"],
            capture_output=True,
            text=True,
        )
        assert up.returncode == 0, up.stderr
        assert f"lab {name} is up" in up.stdout
        st = json.loads(
            subprocess.run(
                [*cli, "status", "--name", name, "--json"], capture_output=True, text=True
            ).stdout
        )
        assert st["counts"]["nodes_up"] == st["counts"]["nodes"]
        assert {n["namespace"] for n in st["nodes"]} == set(state.load(name).namespaces)
        ex = subprocess.run(
            [*cli, "exec", "--name", name, "h0", "--", "ip", "-br", "link"],
            capture_output=True,
            text=True,
        )
        assert ex.returncode == 0 and f"{name}-p0" in ex.stdout
    finally:
        down = subprocess.run([*cli, "down", "--name", name], capture_output=True, text=True)
    assert down.returncode == 0, down.stderr
    assert H.lab_leftovers(name)["namespaces"] == []


def test_management_network_reaches_every_host() -> None:
    import socket

    from lab.fabric.netns import in_netns

    with H.running_lab(switch="kernel", t0=2, hosts_per_t0=2, planes=1) as st:
        plan = st.plan
        with in_netns(plan.namespace("h3")):
            srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            srv.bind((plan.mgmt_address(3), 0))
            srv.listen(1)
        port = srv.getsockname()[1]
        with in_netns(plan.namespace("h0")):
            cli = socket.create_connection((plan.mgmt_address(3), port), timeout=2)
        conn, _ = srv.accept()
        cli.sendall(b"qp attributes")
        assert conn.recv(64) == b"qp attributes"
        for s in (cli, conn, srv):
            s.close()
        # The management network never carries MRC: no host port has IPv6 on.
        from lab.fabric.netns import read_sysctl

        assert (
            read_sysctl(plan.namespace("h0"), f"net.ipv6.conf.{plan.ifname('p0')}.disable_ipv6")
            == "1"
        )
