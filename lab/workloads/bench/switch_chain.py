"""A switch between two hosts, in three namespaces: the bench of bench/bench_switch.py
(mrc-switch against the kernel's seg6local next-csid) and of the switch lab tests
(tests/lab/test_switch_*.py, through tests/lab/switch_helpers.py).  Needs root.

A three-port chain, every name prefixed ``mrcsw`` plus a random suffix so parallel runs
never clash::

    ns <p>s (sender)        ns <p>w (switch)                ns <p>r (receivers)
    <p>hA  ------------------ <p>wA   [mrc-switch | kernel]
                              <p>wB  ------------------------ <p>hB
                              <p>wC  ------------------------ <p>hC

The switch owns uSID OWN; the table sends uSID B to port wB, uSIDs C and T1 to port wC.
Every command is an argv list; teardown deletes exactly the namespaces it created.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.fabric.paths import REPO as ROOT
from lab.proc import children  # the checkout: mrc-switch runs from it
from mrcnic.io.netns import in_netns

PYTHON = sys.executable
BLOCK = bytes.fromhex("fcbbbb00")
OWN = 0x1100
USID_B = 0x3001
USID_C = 0x3002
USID_T1 = 0x2001
SRC_ADDR = bytes.fromhex("20010db8000000000000000000000001")
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33  # Linux: SO_RCVBUF without the rmem_max cap (root)
MTU = 9000


def mac(i: int) -> bytes:
    return bytes([0x02, 0x6D, 0x72, 0x63, 0x00, i])


def mac_text(m: bytes) -> str:
    return ":".join(f"{b:02x}" for b in m)


MAC_HA, MAC_HB, MAC_HC = mac(0x0A), mac(0x0B), mac(0x0C)
MAC_WA, MAC_WB, MAC_WC = mac(0x1A), mac(0x1B), mac(0x1C)


def have_netadmin() -> str | None:
    """None when lab tests can run, else the reason they cannot."""
    if os.geteuid() != 0:
        return "lab tests need root (CAP_NET_ADMIN) to create network namespaces"
    if shutil.which("ip") is None:
        return "iproute2 (ip) is not installed"
    return None


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {r.stderr.strip()}")
    return r


def nsrun(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return run("ip", "netns", "exec", ns, *argv, check=check)


def packet_socket(ns: str, ifname: str, rcvbuf: int = 8 << 20) -> socket.socket:
    with in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(263, 23, 1)  # PACKET_IGNORE_OUTGOING
        with contextlib.suppress(OSError):
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
        s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


def ipv6_frame(
    dst: bytes,
    *,
    hop_limit: int = 64,
    flow: int = 0,
    payload: bytes = b"",
    eth_dst: bytes = MAC_WA,
    eth_src: bytes = MAC_HA,
    src: bytes = SRC_ADDR,
    plen: int | None = None,
    dscp: int = 0,
    ecn: int = 0,
) -> bytes:
    """Ethernet + IPv6 + UDP (checksum 0: the switch does not look at it) + payload."""
    udp = (40000).to_bytes(2, "big") + (4791).to_bytes(2, "big")
    udp += (8 + len(payload)).to_bytes(2, "big") + b"\0\0" + payload
    length = len(udp) if plen is None else plen
    w0 = 6 << 28 | (dscp << 2 | ecn) << 20 | (flow & 0xFFFFF)
    ip = w0.to_bytes(4, "big") + length.to_bytes(2, "big") + bytes([17, hop_limit]) + src + dst
    return eth_dst + eth_src + b"\x86\xdd" + ip + udp


def usid_addr(*usids: int, block: bytes = BLOCK) -> bytes:
    body = b"".join(u.to_bytes(2, "big") for u in usids)
    return (block + body + bytes(16))[:16]


@dataclass
class Chain:
    prefix: str
    mode: str  # "switch" or "kernel"
    workdir: Path
    ns_s: str = ""
    ns_w: str = ""
    ns_r: str = ""
    proc: subprocess.Popen | None = None
    stats_path: Path | None = None
    made: list[str] = field(default_factory=list)

    def ifname(self, short: str) -> str:
        return f"{self.prefix}{short}"


def _new_prefix() -> str:
    return "mrcsw" + secrets.token_hex(3)


def build_chain(
    mode: str,
    workdir: Path,
    *,
    switch_args: dict | None = None,
    new_session: bool = False,
    switch_env: dict[str, str] | None = None,
) -> Chain:
    """Create the three namespaces and veths; configure the kernel or start mrc-switch
    (in a session of its own with ``new_session``: a scheduler autogroup of its own;
    ``switch_env`` is added to its environment, e.g. MRC_PURE_PYTHON=1)."""
    c = Chain(prefix=_new_prefix(), mode=mode, workdir=workdir)
    c.ns_s, c.ns_w, c.ns_r = c.prefix + "s", c.prefix + "w", c.prefix + "r"
    try:
        for ns in (c.ns_s, c.ns_w, c.ns_r):
            run("ip", "netns", "add", ns)
            c.made.append(ns)
            nsrun(ns, "ip", "link", "set", "lo", "up")
        links = [
            ("hA", c.ns_s, MAC_HA, "wA", MAC_WA),
            ("hB", c.ns_r, MAC_HB, "wB", MAC_WB),
            ("hC", c.ns_r, MAC_HC, "wC", MAC_WC),
        ]
        for hname, hns, hmac, wname, wmac in links:
            h, w = c.ifname(hname), c.ifname(wname)
            run("ip", "link", "add", h, "netns", hns, "type", "veth", "peer", "name", w,
                "netns", c.ns_w)  # fmt: skip
            nsrun(hns, "sysctl", "-qw", f"net.ipv6.conf.{h}.disable_ipv6=1")
            nsrun(hns, "ip", "link", "set", h, "address", mac_text(hmac), "mtu", str(MTU), "up")
            if mode == "switch":
                nsrun(c.ns_w, "sysctl", "-qw", f"net.ipv6.conf.{w}.disable_ipv6=1")
            nsrun(c.ns_w, "ip", "link", "set", w, "address", mac_text(wmac), "mtu", str(MTU), "up")
        if mode == "kernel":
            _kernel_switch(c)
        else:
            _start_switch(c, switch_args or {}, new_session=new_session, env=switch_env)
    except BaseException:
        teardown(c)
        raise
    return c


def _kernel_switch(c: Chain) -> None:
    ns = c.ns_w
    nsrun(ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    for wname, hmac, gw in (("wB", MAC_HB, "fe80::b"), ("wC", MAC_HC, "fe80::c")):
        nsrun(ns, "ip", "-6", "neigh", "add", gw, "lladdr", mac_text(hmac), "dev",
              c.ifname(wname), "nud", "permanent")  # fmt: skip
    routes = ((USID_B, "wB", "fe80::b"), (USID_C, "wC", "fe80::c"), (USID_T1, "wC", "fe80::c"))
    for usid, wname, gw in routes:
        nsrun(ns, "ip", "-6", "route", "add", f"fcbb:bb00:{usid:x}::/48", "via", gw, "dev",
              c.ifname(wname))  # fmt: skip
    nsrun(ns, "ip", "-6", "route", "add", f"fcbb:bb00:{OWN:x}::/48", "encap", "seg6local",
          "action", "End", "flavors", "next-csid", "lblen", "32", "nflen", "16", "dev",
          c.ifname("wA"))  # fmt: skip


def switch_config(c: Chain, **overrides) -> dict:
    ports = []
    for name, peer_mac in (("wA", MAC_HA), ("wB", MAC_HB), ("wC", MAC_HC)):
        p = {
            "name": name,
            "interface": c.ifname(name),
            "peer": "h" + name[1],
            "peer_mac": mac_text(peer_mac),
            "rate_mbit": 100_000,
            "buffer_bytes": 4 << 20,
        }
        p.update(overrides.get("port", {}))
        ports.append(p)
    cfg = {
        "name": "sw-" + c.prefix,
        "block": "fcbb:bb00::/32",
        "own_usids": [f"{OWN:x}"],
        "ports": ports,
        "table": {f"{USID_B:x}": "wB", f"{USID_C:x}": "wC", f"{USID_T1:x}": "wC"},
        "stats_path": str(c.workdir / f"{c.prefix}-stats.json"),
        "stats_interval_s": 0.2,
    }
    cfg.update(overrides.get("top", {}))
    return cfg


def _start_switch(
    c: Chain, overrides: dict, *, new_session: bool = False, env: dict[str, str] | None = None
) -> None:
    cfg = switch_config(c, **overrides)
    path = c.workdir / f"{c.prefix}-switch.json"
    path.write_text(json.dumps(cfg, indent=1))
    c.stats_path = Path(cfg["stats_path"])
    log = open(c.workdir / f"{c.prefix}-switch.log", "w")  # noqa: SIM115
    c.proc = subprocess.Popen(
        ["ip", "netns", "exec", c.ns_w, PYTHON, "-m", "mrcswitch.main", "--config", str(path)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=new_session,
        env={**os.environ, **env} if env else None,
    )
    wait_ready(c)


def read_stats(c: Chain) -> dict:
    assert c.stats_path is not None
    return json.loads(c.stats_path.read_text())


def wait_ready(c: Chain, timeout_s: float = 15.0) -> dict:
    """Until the stats file says ready for THIS process (a stale file from a previous run
    carries another pid)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert c.proc is not None
        if c.proc.poll() is not None:
            raise RuntimeError(f"mrc-switch exited with {c.proc.returncode}: {switch_log(c)}")
        with contextlib.suppress(OSError, ValueError):
            st = read_stats(c)
            if st.get("ready") and st.get("pid") == c.proc.pid:
                return st
        time.sleep(0.05)
    raise TimeoutError(f"mrc-switch not ready after {timeout_s}s: {switch_log(c)}")


def switch_log(c: Chain) -> str:
    p = c.workdir / f"{c.prefix}-switch.log"
    return p.read_text()[-3000:] if p.exists() else ""


def stop_switch(c: Chain, timeout_s: float = 10.0) -> int | None:
    if c.proc is None:
        return None
    # our own child, by PID (not always in a session of its own: see _start_switch)
    children.stop_one(c.proc, ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)), group=False)
    return c.proc.returncode


def teardown(c: Chain) -> None:
    with contextlib.suppress(Exception):
        stop_switch(c)
    for ns in reversed(c.made):
        run("ip", "netns", "del", ns, check=False)  # veths go with their namespaces
    c.made.clear()


def drain(sock: socket.socket, limit: int = 100000) -> list[bytes]:
    out = []
    for _ in range(limit):
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            break
    return out


def is_chatter(frame: bytes) -> bool:
    """Kernel-originated noise (ND, MLD, RS: link-local or unspecified source)."""
    if len(frame) < 54 or frame[12:14] != b"\x86\xdd":
        return False
    s = frame[22:38]
    return (s[0] == 0xFE and s[1] & 0xC0 == 0x80) or s == bytes(16)
