"""The IBTA RoCEv2 ICRC (InfiniBand Architecture, annex A17 "RoCEv2"): what the RoCEv2
baseline's frames carry, so a RoCE NIC would take them.

CRC-32 (the Ethernet/zlib one) over: 8 bytes of ones standing for the LRH RoCEv2 has not;
the IPv6 header with the fields routers change masked to ones (traffic class, so DSCP and
ECN; flow label; hop limit); the UDP header with its checksum masked to ones; the BTH with
its byte 4 (FECN, BECN and reserved bits) masked to ones; and everything after it up to the
ICRC. Stored least significant byte first, as Linux's rxe and scapy's RoCE layer store it
(tests/unit/test_rocev2_icrc.py holds this to scapy's).

SRv6 uSID switches also rewrite the destination address on the way (they shift it), so the
ICRC covers the address the receiver sees, the final one, as the UDP checksum does (RFC 9800
without a routing header): the sender writes it over its final address, the receiver checks
it over the final form of the address it got (itself once the last switch shifted it; the
simulator's links and a test's wire route without shifting).

MRC's own packets keep MRC's ICRC (``mrcnic.wire.packet.icrc``: over BTH..payload), a choice
the MRC specification leaves to us; the RC opcodes (data 0x06-0x0B, ACK 0x11) and the CNP
(0x81) carry this one.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache

from mrcnic.wire import layout, usid

OP_CNP = 0x81
#: the opcodes whose packets carry the IBTA ICRC: RC data, RC ACK/NAK, CNP
ICRC_OPS = frozenset((*range(0x06, 0x0C), int(layout.Opcode.RC_ACK), OP_CNP))

_ONES8_CRC = zlib.crc32(b"\xff" * 8)  # (the 8 bytes of ones every ICRC starts with)
_OFF_IP = layout.OFF_IPV6
_OFF_DST = layout.OFF_DST
_OFF_UCSUM = layout.OFF_UDP_CHECKSUM
_OFF_BTH = layout.OFF_BTH
_HEAD = _OFF_BTH + 8  # IPv6 + UDP + the first 8 bytes of BTH: the masked part
_ICRC = struct.Struct("<I")


def icrc(frame: bytes | bytearray | memoryview, end: int, dst: bytes | None = None) -> bytes:
    """The ICRC of the RoCEv2 packet in ``frame`` (a whole Ethernet frame; the ICRC belongs at
    ``end``), over destination address ``dst`` (default the frame's own)."""
    head = bytearray(frame[_OFF_IP:_HEAD])
    head[0] |= 0x0F  # traffic class (its high nibble) ...
    head[1] = head[2] = head[3] = 0xFF  # ... its low nibble and the flow label
    head[7] = 0xFF  # hop limit
    if dst is not None:
        d = _OFF_DST - _OFF_IP
        head[d : d + 16] = dst
    u = _OFF_UCSUM - _OFF_IP
    head[u] = head[u + 1] = 0xFF  # UDP checksum
    head[_OFF_BTH - _OFF_IP + 4] = 0xFF  # BTH byte 4: FECN, BECN, reserved
    crc = zlib.crc32(head, _ONES8_CRC)
    return _ICRC.pack(zlib.crc32(memoryview(frame)[_HEAD:end], crc))


@lru_cache(maxsize=4096)
def _final(dst: bytes) -> bytes:
    return usid.final_destination(dst)


def final_dst(frame: bytes | bytearray | memoryview) -> bytes:
    """The frame's destination address as it will be after its last uSID shift."""
    return _final(bytes(frame[_OFF_DST : _OFF_DST + 16]))


def icrc_ok(frame: bytes | bytearray | memoryview, end: int) -> bool:
    """The packet's ICRC, in its last 4 bytes before ``end``, matches (over the final form of
    the frame's destination address: what the receiver sees after the last switch)."""
    at = end - layout.ICRC_SIZE
    if at < _HEAD:
        return False
    return icrc(frame, at, final_dst(frame)) == bytes(frame[at:end])
