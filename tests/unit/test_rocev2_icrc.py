"""The RoCEv2 baseline's frames carry the IBTA RoCEv2 ICRC (mrcnic/wire/roce_icrc.py), held to
an independent implementation: scapy's RoCE layer (scapy.contrib.roce), which computes it
over the same masked headers. Frames our QPs build check out by scapy's arithmetic, frames
scapy builds check out by ours and parse, and only the fields routers may change are masked."""

from __future__ import annotations

import random

import pytest

from mrcnic import wire
from mrcnic.wire import layout, roce_icrc, usid

scapy_roce = pytest.importorskip("scapy.contrib.roce", reason="scapy's RoCE layer is needed")
from scapy.layers.inet import UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

BTH = scapy_roce.BTH
OFF_DST = layout.OFF_DST


def _as_received(frame: bytes) -> bytes:
    """The frame as its receiver sees it: the uSID switches shifted its destination to the
    end of the carrier."""
    f = bytearray(frame)
    f[OFF_DST : OFF_DST + 16] = usid.final_destination(f[OFF_DST : OFF_DST + 16])
    return bytes(f)


def _scapy_icrc(frame: bytes) -> bytes:
    """scapy's ICRC of a whole frame (its BTH layer's own computation). The BTH is attached by
    hand: which layer scapy binds to UDP port 4791 depends on what was imported before (our
    own MRC layers bind it too)."""
    pkt = Ether(frame[: layout.OFF_BTH]) / BTH(frame[layout.OFF_BTH :])
    assert pkt.haslayer(UDP) and pkt.haslayer(BTH), pkt.summary()
    return pkt[BTH].compute_icrc(None)


def _roce_frames(qp_pair) -> list[bytes]:
    w = qp_pair("rocev2")
    _, mr = w.region(20000)
    w.qa.post_write(1, random.Random(1).randbytes(20000), mr.base_va, mr.rkey, imm=7)
    w.qa.post_write(2, b"x" * 100, mr.base_va, mr.rkey)
    w.qa.post_write(3, b"y" * 2000, mr.base_va, mr.rkey)
    w.qa.post_write(4, b"z" * 50, mr.base_va, mr.rkey, imm=8)
    w.run(1.0)
    frames = [f for _, _, f in w.sent[0]] + [f for _, _, f in w.sent[1]]
    # every RC data opcode (FIRST .. ONLY_IMM) and the ACK
    assert {f[layout.OFF_BTH] for f in frames} >= {0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x11}
    return frames


def test_our_rocev2_frames_carry_the_icrc_scapy_computes(qp_pair) -> None:
    frames = _roce_frames(qp_pair)
    for f in frames:
        got = _as_received(f)
        assert got[-4:] == _scapy_icrc(got), hex(f[layout.OFF_BTH])
        assert roce_icrc.icrc_ok(got, len(got)) and roce_icrc.icrc_ok(f, len(f))
        wire.parse_frame(got)  # (raises on a bad ICRC)


def test_a_frame_scapy_builds_checks_out_here() -> None:
    shape = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=1)
    src, dst = usid.host_address(shape, 0, 1), usid.final_address(shape, 1, 1)
    for op, body in ((0x0A, bytes(16) + b"payload!" * 40), (0x11, bytes(4))):
        pkt = (
            Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:02")
            / IPv6(src=usid.to_text(src), dst=usid.to_text(dst), tc=0x02, fl=0x12345, hlim=64)
            / UDP(sport=0xC123, dport=4791)
            / BTH(opcode=op, dqpn=0x123456, psn=77, ackreq=1, pkey=0xFFFF)
            / Raw(body)
        )
        frame = bytes(pkt)
        assert roce_icrc.icrc_ok(frame, len(frame)), hex(op)
        assert wire.parse_frame(frame).mrc is not None
    cnp = bytes(
        Ether() / IPv6(src=usid.to_text(src), dst=usid.to_text(dst)) / UDP(sport=0xC123, dport=4791)
        / BTH(opcode=0x81, becn=1, dqpn=0x123456) / Raw(bytes(16))
    )  # fmt: skip
    assert roce_icrc.icrc_ok(cnp, len(cnp))


def test_only_what_routers_change_is_masked(qp_pair) -> None:
    f = bytearray(_as_received(_roce_frames(qp_pair)[0]))
    n = len(f)
    assert roce_icrc.icrc_ok(f, n)
    variant = {  # byte -> bits a router or switch may change (TC/ECN, flow label, hop limit...)
        layout.OFF_IPV6: 0x0F,  # traffic class, high nibble (the version is not masked)
        layout.OFF_IPV6 + 1: 0xFF,
        layout.OFF_IPV6 + 3: 0xFF,
        layout.OFF_HOP_LIMIT: 0xFF,
        layout.OFF_UDP_CHECKSUM: 0xFF,
        layout.OFF_BTH + 4: 0xFF,  # FECN, BECN, reserved
    }
    for at, bits in variant.items():
        g = bytearray(f)
        g[at] ^= bits
        assert roce_icrc.icrc_ok(g, n), f"byte {at} is variant"
    for at in (layout.OFF_SRC, OFF_DST + 2, layout.OFF_BTH, layout.OFF_BTH + 5, layout.OFF_BTH + 9,
               n - 10):  # fmt: skip
        g = bytearray(f)
        g[at] ^= 0x01
        assert not roce_icrc.icrc_ok(g, n), f"byte {at} is covered"
        with pytest.raises(wire.WireError, match="ICRC"):
            wire.parse_frame(bytes(g))
