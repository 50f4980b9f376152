"""`mrc-lab capture` on a real lab (root): a verified write h0 -> h3 captured on h0's ports
and on a T1 port, both directions, nanosecond timestamps, every frame of it dissected by
tshark with contrib/wireshark/mrc.lua without a malformed frame, every ICRC correct; and
examples/read_capture.py reading it with scapy; the usage errors."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import commands as C
import lab_helpers as H
import pytest

from lab.fabric import pcapng

LUA = Path(__file__).resolve().parents[2] / "contrib" / "wireshark" / "mrc.lua"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "read_capture.py"


@pytest.fixture(scope="module")
def clab():
    with H.running_lab(planes=2, t0=2, t1=2, hosts_per_t0=2, rate_mbit=10) as st:
        yield st


def test_capture_of_a_write_dissects_cleanly(clab, tmp_path):
    out = tmp_path / "w.pcapng"
    writer = C.bench_background("write", "--lab", clab.name, "--src", "h0", "--dst", "h3",
                                "--size", "64K", "--duration", "4", "--json", "-q")  # fmt: skip
    try:
        H.wait_writing(clab, "h0", "h3")
        p = C.lab_cli("capture", "--name", clab.name, "h0", "p0-t1-0:d1", "--seconds", "2",
                    "-w", str(out), "--json")  # fmt: skip
        assert p.returncode == 0, p.stderr
        res = json.loads(p.stdout)
    finally:
        wout, _ = writer.communicate(timeout=60)
    assert json.loads(wout)["verified"] is True
    assert res["frames"] > 100 and res["kernel_drops"] == 0
    names = [i["name"] for i in res["interfaces"]]
    assert names == ["h0:p0", "h0:p1", "p0-t1-0:d1"]
    back = list(pcapng.read(io.BytesIO(out.read_bytes())))
    assert len(back) == res["frames"]
    dirs = {d for i, _t, _f, d in back if i == 0}
    assert dirs == {pcapng.INBOUND, pcapng.OUTBOUND}  # data out, SACKs in
    ts = [t for _i, t, _f, _d in back]
    assert abs(ts[0] / 1e9 - time.time()) < 60
    tshark = shutil.which("tshark")
    assert tshark, "tshark is missing: `make setup` installs it"
    base = [tshark, "-X", f"lua_script:{LUA}", "-r", str(out)]
    bad = subprocess.run([*base, "-Y", "_ws.malformed || _ws.expert.severity >= error"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 0 and bad.stdout.strip() == "", bad.stdout[:2000]
    ops = subprocess.run([*base, "-T", "fields", "-e", "mrc.opcode", "-e", "mrc.icrc_ok"],
                         capture_output=True, text=True, timeout=120).stdout.split("\n")  # fmt: skip
    seen = {line.split("\t")[0] for line in ops if line}
    assert {"0xc6", "0xc7"} <= seen or {"0xca"} <= seen, seen  # data
    assert "0xdc" in seen or "0xd1" in seen, seen  # SACK / ACK
    assert not any(line.endswith("\t0") for line in ops)  # every ICRC correct
    # examples/read_capture.py on the real capture: scapy's layers dissect what the lab sent
    ex = subprocess.run([sys.executable, str(EXAMPLE), str(out)], capture_output=True,
                        text=True, timeout=120)  # fmt: skip
    assert ex.returncode == 0, ex.stderr[-2000:]
    assert "SACK" in ex.stdout and "flow labels (paths)" in ex.stdout, ex.stdout
    assert "not MRC" not in ex.stdout, ex.stdout  # every frame on those ports is MRC's


def test_capture_usage_errors(clab, tmp_path):
    p = C.lab_cli(
        "capture", "--lab", clab.name, "h9", "-w", str(tmp_path / "x"), "--duration", "1s"
    )
    assert p.returncode == 2 and "no node" in p.stderr  # a usage error (docs/cli.md)
    p = C.lab_cli("capture", "--lab", clab.name, "h0:p7", "-w", str(tmp_path / "x"))
    assert p.returncode == 2 and "has no port" in p.stderr and "p0, p1" in p.stderr
