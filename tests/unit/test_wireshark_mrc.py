"""contrib/wireshark/mrc.lua against the golden frames of docs/design/wire.md, through Debian's
tshark (`make setup` installs it): every field the doc writes down reads the same in
Wireshark, every ICRC checks, a trimmed frame is shown as trimmed, control packets and the
RoCEv2 baseline's (handed to Wireshark's own InfiniBand dissector) read right, and no frame
is malformed. The file is written by lab/fabric/pcapng.py, which scapy reads back with our layers."""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.fabric import pcapng
from mrcnic import wire as w
from mrcnic.wire import usid

ROOT = Path(__file__).resolve().parents[2]
LUA = ROOT / "contrib" / "wireshark" / "mrc.lua"
DOC = ROOT / "docs" / "design" / "wire.md"
BLOCK = re.compile(r"^```(hex|fields) wire:(\S+)\n(.*?)^```$", re.M | re.S)
TSHARK = shutil.which("tshark")
MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
SRC = bytes.fromhex("fcbbbb00340034000000000000000000")  # unused by the checks


def golden() -> dict[str, tuple[bytes, dict[str, object]]]:
    hexes, fields = {}, {}
    for kind, tag, body in BLOCK.findall(DOC.read_text()):
        (hexes if kind == "hex" else fields)[tag] = body
    out = {}
    for tag, body in hexes.items():
        vals = {}
        for line in fields[tag].splitlines():
            line = line.split("#")[0].strip()
            if line:
                k, v = (x.strip() for x in line.split("=", 1))
                vals[k] = ast.literal_eval(v)
        out[tag] = (bytes.fromhex(body), vals)
    return out


def frame_around(mrc: bytes, ev: int, dscp: int) -> bytes:
    """A whole frame carrying an MRC part (BTH ..) of the doc, on EV ``ev``."""
    dst = usid.encode([0x3C01])
    return w.build_frame(eth_src=MAC_A, eth_dst=MAC_B, ip_src=SRC, ip_dst=dst,
                         final_dst=usid.final_of(dst), ev=ev, mrc=mrc, dscp=dscp, ecn=0)  # fmt: skip


def rc_write_frame() -> bytes:
    g = golden()
    mrc, _ = g["MRC/rc-write-only-imm"]
    return frame_around(mrc, 0x00010003, int(w.Dscp.NO_TRIM))


FIELDS = [
    "frame.number", "mrc.opcode", "mrc.dest_qp", "mrc.psn", "mrc.rtx", "mrc.ts_present",
    "mrc.ack_req", "mrc.ev", "mrc.trimmed", "mrc.meth.msn", "mrc.meth.rqmsn",
    "mrc.ts.tx_ts_ns", "mrc.reth.va", "mrc.reth.rkey", "mrc.reth.length", "mrc.imm",
    "mrc.payload_length", "mrc.icrc", "mrc.icrc_ok", "mrc.sack.mark", "mrc.sack.ece",
    "mrc.sack.cack_psn", "mrc.sack.rcv_cwnd_pen", "mrc.sack.bitmap", "mrc.sack.ev",
    "mrc.sack.ooo_count", "mrc.sack.reflected_ts_ns", "mrc.sack.received_bytes",
    "mrc.nack.reason", "mrc.nack.psn", "mrc.nack.ev", "mrc.nack.cack_psn",
    "mrc.nack.reflected_ts_ns", "infiniband.bth.opcode", "_ws.col.Protocol",
]  # fmt: skip


def tshark(path: Path, *args: str) -> str:
    assert TSHARK, "tshark is missing: `make setup` installs it (Debian package tshark)"
    p = subprocess.run([TSHARK, "-X", f"lua_script:{LUA}", "-r", str(path), *args],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "Lua: Error" not in p.stderr and "lua_script" not in p.stderr, p.stderr
    return p.stdout


def rows(path: Path) -> list[dict[str, str]]:
    args = ["-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for f in FIELDS:
        args += ["-e", f]
    return [dict(zip(FIELDS, line.split("|"), strict=True))
            for line in tshark(path, *args).splitlines()]  # fmt: skip


def num(text: str) -> int:
    return int(text, 0)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    g = golden()
    frames = [g["frame/data"][0], g["frame/sack"][0], g["frame/trimmed"][0],
              frame_around(g["MRC/ack"][0], 0x00020007, int(w.Dscp.CONTROL)),
              frame_around(g["MRC/nack"][0], 0x00010003, int(w.Dscp.CONTROL)),
              rc_write_frame()]  # fmt: skip
    path = tmp_path_factory.mktemp("ws") / "golden.pcapng"
    with open(path, "wb") as fh:
        wr = pcapng.PcapngWriter(fh)
        wr.add_interface("h0:p0")
        for i, f in enumerate(frames):
            wr.write(0, 1_700_000_000_000_000_000 + i * 1000, f, outbound=bool(i % 2))
    return path, frames, g


def test_no_frame_is_malformed_and_every_icrc_checks(capture):
    path, frames, _ = capture
    bad = tshark(path, "-Y", "_ws.malformed || _ws.expert.severity >= error || mrc.icrc_ok == 0")
    assert bad.strip() == ""
    assert len(rows(path)) == len(frames)


def test_data_frame_fields_match_the_doc(capture):
    path, _, g = capture
    d = g["frame/data"][1]
    r = rows(path)[0]
    assert r["_ws.col.Protocol"] == "MRC"
    assert num(r["mrc.opcode"]) == d["mrc.bth.opcode"]
    assert num(r["mrc.dest_qp"]) == d["mrc.bth.dest_qp"]
    assert num(r["mrc.psn"]) == d["mrc.bth.psn"]
    assert (r["mrc.rtx"], r["mrc.ts_present"]) == (
        str(int(d["mrc.bth.rtx"])),
        str(int(d["mrc.bth.ts_present"])),
    )
    assert num(r["mrc.ev"]) == d["ev"]
    assert (
        num(r["mrc.meth.msn"]) == d["mrc.meth.msn"]
        and num(r["mrc.meth.rqmsn"]) == d["mrc.meth.rqmsn"]
    )
    assert num(r["mrc.ts.tx_ts_ns"]) == d["mrc.ts.tx_ts_ns"]
    assert (
        num(r["mrc.reth.va"]) == d["mrc.reth.va"] and num(r["mrc.reth.rkey"]) == d["mrc.reth.rkey"]
    )
    assert num(r["mrc.reth.length"]) == d["mrc.reth.length"]
    assert num(r["mrc.payload_length"]) == len(d["mrc.payload"])
    assert num(r["mrc.icrc"]) == d["mrc.icrc"] and r["mrc.icrc_ok"] == "1"
    assert r["mrc.trimmed"] == ""


def test_sack_ack_and_nack_fields_match_the_doc(capture):
    path, _, g = capture
    rs = rows(path)
    s = g["frame/sack"][1]
    r = rs[1]
    for ours, doc in (("mrc.sack.mark", "mark"), ("mrc.sack.cack_psn", "cack_psn"),
                      ("mrc.sack.rcv_cwnd_pen", "rcv_cwnd_pen"), ("mrc.sack.bitmap", "bitmap"),
                      ("mrc.sack.ev", "ev"), ("mrc.sack.ooo_count", "ooo_count"),
                      ("mrc.sack.reflected_ts_ns", "reflected_ts_ns"),
                      ("mrc.sack.received_bytes", "received_bytes")):  # fmt: skip
        assert num(r[ours]) == s[f"mrc.sack.{doc}"], ours
    assert r["mrc.sack.ece"] == str(int(s["mrc.sack.ece"]))
    a = g["MRC/ack"][1]
    assert (
        num(rs[3]["mrc.opcode"]) == 0xD1 and num(rs[3]["mrc.sack.cack_psn"]) == a["sack.cack_psn"]
    )
    n = g["MRC/nack"][1]
    r = rs[4]
    for f in ("reason", "psn", "ev", "cack_psn", "reflected_ts_ns"):
        assert num(r[f"mrc.nack.{f}"]) == n[f"nack.{f}"], f


def test_trimmed_frame_is_shown_trimmed_without_icrc(capture):
    path, _, g = capture
    r = rows(path)[2]
    t = g["frame/trimmed"][1]
    assert r["mrc.trimmed"] == "1" and r["mrc.icrc"] == "" and r["mrc.payload_length"] == ""
    assert (
        num(r["mrc.psn"]) == t["mrc.bth.psn"] and num(r["mrc.reth.length"]) == t["mrc.reth.length"]
    )
    info = tshark(path, "-Y", "frame.number == 3")
    assert "[TRIMMED]" in info


def test_roce_baseline_goes_to_wiresharks_infiniband_dissector(capture):
    path, _, g = capture
    r = rows(path)[5]
    assert r["mrc.opcode"] == "" and r["infiniband.bth.opcode"] != ""
    assert num(r["infiniband.bth.opcode"]) == g["MRC/rc-write-only-imm"][1]["bth.opcode"]


def test_pcapng_round_trip_and_scapy_reads_it(capture):
    path, frames, _ = capture
    back = list(pcapng.read(io.BytesIO(path.read_bytes())))
    assert [f for _i, _t, f, _d in back] == frames
    assert [d for *_, d in back] == [pcapng.INBOUND, pcapng.OUTBOUND] * 3
    from scapy.utils import rdpcap

    import mrcnic.wire.scapy_layers as sl

    pkts = rdpcap(str(path))
    assert len(pkts) == len(frames)
    assert pkts[0][sl.MRC_BTH].opcode == 0xCA and pkts[1].haslayer(sl.MRC_SACK)
