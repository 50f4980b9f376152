"""mrc-lab without root: `plan` output contracts, help text, fault helpers."""

from __future__ import annotations

import json

import commands as C
import pytest

from lab import cli
from lab.fabric.faults import _numgen, parse_rate
from lab.fabric.netns import LabError, _sysctl_path
from lab.fabric.params import LabParams
from lab.fabric.state import LabState, ProcessRecord


def test_plan_summary_json_has_the_contract_keys(capsys) -> None:
    code, out, _ = C.run_main(
        capsys,
        cli.main,
        "plan",
        "--planes",
        "8",
        "--t0",
        "512",
        "--t1",
        "256",
        "--hosts-per-t0",
        "256",
        "--summary",
        "--json",
    )
    assert code == 0
    s = json.loads(out)
    for key in (
        "switch_count",
        "host_count",
        "max_table_entries",
        "total_table_entries",
        "paths_between_t0s",
        "build_s",
    ):
        assert key in s
    assert s["host_count"] == 131_072 and s["max_table_entries"] == 512
    assert s["build_s"] > 0


def test_plan_json_is_the_whole_plan(capsys) -> None:
    code, out, _ = C.run_main(capsys, cli.main, "plan", "--json", "--planes", "2")
    assert code == 0
    d = json.loads(out)
    assert {"params", "summary", "hosts", "switches", "links", "templates", "mgmt"} <= set(d)
    assert len(d["switches"]) == 8 and len(d["hosts"]) == 4
    code, out, _ = C.run_main(capsys, cli.main, "plan", "--planes", "2")
    assert code == 0 and "p1-t1-1" in out


def test_plan_refuses_bad_parameters_with_a_message(capsys) -> None:
    # a bad value is a usage error (exit 2: docs/cli.md), the old --name too
    code, _, err = C.run_main(capsys, cli.main, "plan", "--lab", "Lab!", "--summary")
    assert code == 2 and "lab name" in err
    code, _, err = C.run_main(capsys, cli.main, "plan", "--name", "Lab!", "--summary")
    assert code == 2 and "lab name" in err and "use --lab" in err
    code, _, err = C.run_main(capsys, cli.main, "plan", "--mtu", "1500", "--summary")
    assert code == 2 and "4192" in err


def test_help_teaches(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for word in ("examples:", "mrc-lab up", "mrc-lab down", "loss", "reboot", "docs/lab.md"):
        assert word in out
    with pytest.raises(SystemExit):
        cli.main(["loss", "--help"])
    assert "--loss X%" in capsys.readouterr().out


def test_numgen_and_rates() -> None:
    assert _numgen(5) == "numgen random mod 100 < 5"
    assert _numgen(0.1) == "numgen random mod 1000000 < 1000"
    assert _numgen(100) == ""
    assert parse_rate("10mbit") == 10_000_000
    assert parse_rate("1gbit") == 1_000_000_000
    assert parse_rate("500kbit") == 500_000
    for bad in ("10 mbps", "", "-1mbit", "1kbit"):
        with pytest.raises(LabError):
            parse_rate(bad)


def test_sysctl_paths() -> None:
    assert _sysctl_path("net.ipv6.conf.all.forwarding") == "/proc/sys/net/ipv6/conf/all/forwarding"
    assert (
        _sysctl_path("net.ipv6.conf.mrc-m.disable_ipv6")
        == "/proc/sys/net/ipv6/conf/mrc-m/disable_ipv6"
    )
    assert _sysctl_path("net.ipv6.conf.a.b.accept_ra") == "/proc/sys/net/ipv6/conf/a.b/accept_ra"


def test_state_round_trip_and_pid_check(tmp_path, monkeypatch) -> None:
    import os
    import sys

    monkeypatch.setenv("MRC_LAB_STATE_DIR", str(tmp_path))
    from lab.fabric import state as state_mod

    st = LabState(name="mrcu1", params=LabParams(name="mrcu1", planes=1))
    st.namespaces = st.plan.namespaces()
    # This very process stands in for a switch: its cmdline ends with our argv.
    with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    st.processes["p0-t0-0"] = ProcessRecord("p0-t0-0", os.getpid(), argv, "c.json")
    st.save()
    back = state_mod.load("mrcu1")
    assert back.to_dict() == st.to_dict()
    assert back.processes["p0-t0-0"].is_alive()
    # Same PID, different command line (a reused PID): not ours, never signalled.
    other = ProcessRecord("x", os.getpid(), [sys.executable, "--config", "other.json"], "o")
    assert not other.is_alive()
    assert state_mod.list_labs() == ["mrcu1"]
    with pytest.raises(LabError, match="no lab named"):
        state_mod.load("mrcu2")
