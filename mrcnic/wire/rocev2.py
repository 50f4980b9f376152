"""What the RoCEv2 baseline puts on the wire beyond ``mrcnic.wire``: the CNP, the NAK codes,
and how one flow gets its one path (the UDP source port RoCEv2 derives from the QP numbers,
and an ECMP-style hash of the flow's 5-tuple).

Frames use the project's layout (Ethernet | IPv6 | UDP 4791 | BTH | ... | ICRC, see
docs/design/wire.md); the RC opcodes 0x06-0x0B and RC_ACK 0x11 with its AETH are in ``mrcnic.wire``.
The CNP (opcode 0x81) is RoCEv2's own (IBTA RoCEv2 annex): BTH with BECN set, the destination
QP of the flow being throttled, PSN 0, then 16 reserved zero bytes and the ICRC.
Docs: docs/design/rocev2.md.
"""

from __future__ import annotations

import hashlib
import struct

from mrcnic import wire
from mrcnic.wire import layout, usid
from mrcnic.wire.roce_icrc import OP_CNP, icrc, icrc_ok  # (the one ICRC, re-exported)

CNP_RESERVED_SIZE = 16
BECN_BIT = layout.BTH_FLAG_BECN << 24  # in BTH word 1 (with the destination QP)

# AETH syndromes (IBTA): 0x00 ACK (low 5 bits = credit count, left 0); 0x60 | code = NAK
SYN_ACK = 0x00
SYN_NAK_PSN_SEQ = 0x60  # PSN sequence error: go back to the PSN in BTH
SYN_NAK_INVALID_REQUEST = 0x61  # opcode sequence / length error
SYN_NAK_REMOTE_ACCESS = 0x62  # R_Key, bounds or permission
SYN_NAK_REMOTE_OP = 0x63  # remote operational error

ROCE_SPORT_MIN = 0xC000  # the kernel's IB_ROCE_UDP_ENCAP_VALID_PORT_MIN


def rdma_flow_label(lqpn: int, rqpn: int) -> int:
    """The 20-bit flow label Linux derives for a RoCEv2 QP (``rdma_calc_flow_label``): a hash
    of the product of the two QP numbers, so both ends of a connection compute the same."""
    v = (lqpn * rqpn) & 0xFFFFFFFFFFFFFFFF
    v ^= v >> 20
    v ^= v >> 40
    return v & 0xFFFFF


def rdma_udp_sport(flow_label: int) -> int:
    """The UDP source port Linux derives from that flow label
    (``rdma_flow_label_to_udp_sport``): 14 folded bits in 0xC000-0xFFFF."""
    low = flow_label & 0x3FFF
    high = flow_label & 0xFC000
    return (low ^ (high >> 14)) | ROCE_SPORT_MIN


def _seeded_hash(data: bytes, seed: int, salt: bytes) -> int:
    # A keyed hash, not a bare CRC: a CRC's seed only XORs every hash of equal-length keys by
    # one constant, which relabels the paths without changing which flows collide.
    key = salt + (seed & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")
    return int.from_bytes(hashlib.blake2b(data, digest_size=4, key=key).digest(), "big")


def ecmp_hash(src: bytes, dst: bytes, sport: int, seed: int) -> int:
    """A switch's ECMP hash of the flow's 5-tuple (addresses, ports, protocol), seeded as
    switches are; the T1 a T0 picks is ``hash % uplinks``."""
    key = src + dst + struct.pack(">HHB", sport, wire.MRC_UDP_PORT, wire.IPPROTO_UDP)
    return _seeded_hash(key, seed, b"ecmp")


def lag_hash(src_host: int, dst_host: int, sport: int, seed: int) -> int:
    """The NIC's port choice when a QP is not bound to a port (a LAG-style flow hash)."""
    return _seeded_hash(struct.pack(">IIH", src_host, dst_host, sport), seed, b"lag")


def ev_for_path(shape: usid.ClosShape, sport: int, flow_label: int, plane: int, t1: int) -> int:
    """The EV that carries ``sport`` in its high half and names (plane, t1).

    Our fabric is source-routed: the T1 a packet crosses is the one its address names, and the
    address is computed from the EV (plane = ev % P, t1 = (ev // P) % T).  So the hash a switch
    would apply is applied by the NIC, and the result is written into the low 16 bits (the
    flow label): the nearest value to the kernel's flow label with the right residue."""
    period = shape.planes * shape.t1
    want = plane + shape.planes * t1
    base = sport << 16
    low = flow_label & 0xFFFF
    low -= (base + low - want) % period
    if low < 0:
        low += period
    ev = base | low
    assert ev % shape.planes == plane and (ev // shape.planes) % shape.t1 == t1
    return ev


_BTH = struct.Struct(">BBHII")


def encode_cnp(dest_qp: int) -> bytes:
    """The CNP's part after UDP: BTH (opcode 0x81, BECN, dest QP, PSN 0), 16 zero bytes and
    room for the ICRC, which covers the headers before (:func:`icrc`): the frame's builder
    writes it."""
    body = _BTH.pack(
        OP_CNP, 0, layout.DEFAULT_PKEY, BECN_BIT | (dest_qp & layout.QPN_MASK), 0
    ) + bytes(CNP_RESERVED_SIZE)
    return body + bytes(layout.ICRC_SIZE)


__all__ = [
    "BECN_BIT",
    "CNP_RESERVED_SIZE",
    "OP_CNP",
    "ROCE_SPORT_MIN",
    "SYN_ACK",
    "SYN_NAK_INVALID_REQUEST",
    "SYN_NAK_PSN_SEQ",
    "SYN_NAK_REMOTE_ACCESS",
    "SYN_NAK_REMOTE_OP",
    "ecmp_hash",
    "encode_cnp",
    "icrc",
    "icrc_ok",
    "ev_for_path",
    "lag_hash",
    "rdma_flow_label",
    "rdma_udp_sport",
]
