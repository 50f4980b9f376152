"""Every header MRC puts on the wire: dataclasses with paired encode_*/decode_* functions.

Layouts, worked examples and the choices we made where the public MRC material is silent are in
docs/design/wire.md. All multi-byte fields are big-endian. PSNs are 24-bit, EVs 32-bit. The numbers
(sizes, enums) are in ``layout``; whole MRC packets in ``packet``, whole frames in ``frame``.

Decoders take bytes/bytearray/memoryview plus an offset and raise WireError (never IndexError,
struct.error or an enum's ValueError) for truncated or malformed input. Encoders validate value
ranges and raise WireError too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mrcnic.wire.layout import (
    AETH_SIZE,
    BTH_SIZE,
    DEFAULT_HOP_LIMIT,
    DEFAULT_PKEY,
    ENDPOINT_SIZE,
    ETH_SIZE,
    ETHERTYPE_IPV6,
    IMM_SIZE,
    IPPROTO_UDP,
    IPV6_SIZE,
    METH_SIZE,
    MRC_UDP_PORT,
    NACK_SIZE,
    PSN_MASK,
    RETH_SIZE,
    RPROBE_SIZE,
    SACK_SIZE,
    TS_SIZE,
    UDP_SIZE,
    AethSyndrome,
    Dscp,
    Ecn,
    EndpointKind,
    NackReason,
    Opcode,
    SackMark,
)
from mrcnic.wire.util import (
    BytesLike,
    WireError,
    _check_bytes,
    _check_uint,
    _explain,
    _known,
    _start,
    fast_constructor,
)

# Value -> member lookups: a dict.get is several times cheaper than calling the enum, and it
# lets decoders turn "unknown value" into a WireError instead of the enum's ValueError.
_OPCODE_OF = {int(m): m for m in Opcode}
_NACK_REASON_OF = {int(m): m for m in NackReason}
_SACK_MARK_OF = (SackMark.NONE, SackMark.SKIP_ONCE, SackMark.ALWAYS_SKIP, None)
_DSCP_OF = {int(m): m for m in Dscp}
_ECN_OF = (Ecn.NOT_ECT, Ecn.ECT1, Ecn.ECT0, Ecn.CE)
_EP_KIND_OF = {int(m): m for m in EndpointKind}
_AETH_OF = {int(m): m for m in AethSyndrome}

# --------------------------------------------------------------------------------------------
# Precompiled layouts

_ETH = struct.Struct(">6s6sH")
_IP6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")
_BTH = struct.Struct(">BBHII")
_METH = struct.Struct(">HH")
_TS = struct.Struct(">Q")
_RETH = struct.Struct(">QII")
_IMM = struct.Struct(">I")
_SACK = struct.Struct(">IHBxQIH2xQQ")
_NACK = struct.Struct(">IIIQ")
_RPROBE = struct.Struct(">IIQ")
_ENDPOINT = struct.Struct(">B3xIIIQ")
_AETH = struct.Struct(">I")

assert _SACK.size == SACK_SIZE and _NACK.size == NACK_SIZE and _ENDPOINT.size == ENDPOINT_SIZE

# --------------------------------------------------------------------------------------------
# Ethernet


@dataclass(frozen=True, slots=True)
class Ethernet:
    dst: bytes
    src: bytes
    ethertype: int = ETHERTYPE_IPV6


_new_Ethernet = fast_constructor(Ethernet)


def encode_ethernet(h: Ethernet) -> bytes:
    _check_bytes("Ethernet", "dst", h.dst, 6)
    _check_bytes("Ethernet", "src", h.src, 6)
    _check_uint("Ethernet", "ethertype", h.ethertype, 16)
    return _ETH.pack(bytes(h.dst), bytes(h.src), h.ethertype)


def decode_ethernet(buf: BytesLike, offset: int = 0) -> Ethernet:
    _start("Ethernet", buf, offset, ETH_SIZE)
    return _new_Ethernet(*_ETH.unpack_from(buf, offset))


# --------------------------------------------------------------------------------------------
# IPv6


@dataclass(frozen=True, slots=True)
class IPv6:
    """IPv6 fixed header. Traffic class = dscp << 2 | ecn; version is always 6."""

    src: bytes
    dst: bytes
    payload_length: int
    next_header: int = IPPROTO_UDP
    hop_limit: int = DEFAULT_HOP_LIMIT
    dscp: int = 0
    ecn: int = 0
    flow_label: int = 0


_new_IPv6 = fast_constructor(IPv6)


def encode_ipv6(h: IPv6) -> bytes:
    _check_bytes("IPv6", "src", h.src, 16)
    _check_bytes("IPv6", "dst", h.dst, 16)
    _check_uint("IPv6", "dscp", h.dscp, 6)
    _check_uint("IPv6", "ecn", h.ecn, 2)
    _check_uint("IPv6", "flow_label", h.flow_label, 20)
    _check_uint("IPv6", "payload_length", h.payload_length, 16)
    _check_uint("IPv6", "next_header", h.next_header, 8)
    _check_uint("IPv6", "hop_limit", h.hop_limit, 8)
    w0 = 0x60000000 | h.dscp << 22 | h.ecn << 20 | h.flow_label
    return _IP6.pack(w0, h.payload_length, h.next_header, h.hop_limit, bytes(h.src), bytes(h.dst))


def decode_ipv6(buf: BytesLike, offset: int = 0) -> IPv6:
    _start("IPv6", buf, offset, IPV6_SIZE)
    w0, plen, nh, hl, src, dst = _IP6.unpack_from(buf, offset)
    if w0 >> 28 != 6:
        raise WireError("IPv6", f"version {w0 >> 28}, not 6", offset)
    dscp = (w0 >> 22) & 0x3F
    return _new_IPv6(
        src,
        dst,
        plen,
        nh,
        hl,
        _DSCP_OF.get(dscp, dscp),
        _ECN_OF[(w0 >> 20) & 3],
        w0 & 0xFFFFF,
    )


# --------------------------------------------------------------------------------------------
# UDP


@dataclass(frozen=True, slots=True)
class UDP:
    src_port: int
    dst_port: int = MRC_UDP_PORT
    length: int = 0
    checksum: int = 0


_new_UDP = fast_constructor(UDP)


def encode_udp(h: UDP) -> bytes:
    try:
        return _UDP.pack(h.src_port, h.dst_port, h.length, h.checksum)
    except (struct.error, TypeError):
        for name in ("src_port", "dst_port", "length", "checksum"):
            _check_uint("UDP", name, getattr(h, name), 16)
        raise  # pragma: no cover (unreachable: one of the checks fails)


def decode_udp(buf: BytesLike, offset: int = 0) -> UDP:
    _start("UDP", buf, offset, UDP_SIZE)
    return _new_UDP(*_UDP.unpack_from(buf, offset))


# --------------------------------------------------------------------------------------------
# BTH


@dataclass(frozen=True, slots=True)
class BTH:
    """Base transport header (12 B).

    [0] opcode [1] SE(7) M(6) PadCnt(5:4) TVer(3:0) [2:4] P_Key
    [4] FECN(7) BECN(6) RTX(5) TS(4) rsvd(3:0) [5:8] DestQP(24) [8] AckReq(7) rsvd [9:12] PSN(24)
    """

    opcode: int
    dest_qp: int
    psn: int
    se: bool = False
    mig: bool = False
    pad_count: int = 0
    tver: int = 0
    pkey: int = DEFAULT_PKEY
    fecn: bool = False
    becn: bool = False
    rtx: bool = False
    ts_present: bool = False
    ack_req: bool = False


_new_BTH = fast_constructor(BTH)


def encode_bth(h: BTH) -> bytes:
    # Fast path: upper bounds of the sub-word fields checked here; a negative or non-integer
    # value makes struct.pack fail. Either way _explain names the culprit.
    try:
        pad, tver, dqp, psn = h.pad_count, h.tver, h.dest_qp, h.psn
        if pad <= 3 and tver <= 15 and dqp <= 0xFFFFFF and psn <= 0xFFFFFF:
            return _BTH.pack(
                h.opcode,
                (0x80 if h.se else 0) | (0x40 if h.mig else 0) | pad << 4 | tver,
                h.pkey,
                (0x80000000 if h.fecn else 0)
                | (0x40000000 if h.becn else 0)
                | (0x20000000 if h.rtx else 0)
                | (0x10000000 if h.ts_present else 0)
                | dqp,
                (0x80000000 if h.ack_req else 0) | psn,
            )
    except (struct.error, TypeError):
        pass
    _explain("BTH", h, _BTH_SPEC)
    raise AssertionError  # pragma: no cover (_explain raises)


_BTH_SPEC = (
    ("opcode", 8),
    ("dest_qp", 24),
    ("psn", 24),
    ("pad_count", 2),
    ("tver", 4),
    ("pkey", 16),
)


def _bth_from(op: int, b1: int, pkey: int, w1: int, w2: int) -> BTH:
    return _new_BTH(
        _OPCODE_OF.get(op, op),
        w1 & 0xFFFFFF,
        w2 & 0xFFFFFF,
        b1 & 0x80 != 0,
        b1 & 0x40 != 0,
        (b1 >> 4) & 3,
        b1 & 0xF,
        pkey,
        w1 & 0x80000000 != 0,
        w1 & 0x40000000 != 0,
        w1 & 0x20000000 != 0,
        w1 & 0x10000000 != 0,
        w2 & 0x80000000 != 0,
    )


def decode_bth(buf: BytesLike, offset: int = 0) -> BTH:
    """Any opcode value decodes here (known ones become Opcode members); decode_mrc is strict."""
    _start("BTH", buf, offset, BTH_SIZE)
    return _bth_from(*_BTH.unpack_from(buf, offset))


# --------------------------------------------------------------------------------------------
# METH, timestamp extension, RETH, ImmDt


@dataclass(frozen=True, slots=True)
class METH:
    """MRC extended transport header (4 B): msn = per-QP number of every write message;
    rqmsn = its number among write-with-immediate messages (orders completions)."""

    msn: int
    rqmsn: int


_new_METH = fast_constructor(METH)


def encode_meth(h: METH) -> bytes:
    try:
        return _METH.pack(h.msn, h.rqmsn)
    except (struct.error, TypeError):
        _explain("METH", h, (("msn", 16), ("rqmsn", 16)))
        raise  # pragma: no cover (_explain raises)


def decode_meth(buf: BytesLike, offset: int = 0) -> METH:
    _start("METH", buf, offset, METH_SIZE)
    return _new_METH(*_METH.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class TimestampExt:
    """Transmit timestamp (8 B, ns); present in a data packet iff BTH.ts_present."""

    tx_ts_ns: int


_new_TimestampExt = fast_constructor(TimestampExt)


def encode_ts(h: TimestampExt) -> bytes:
    try:
        return _TS.pack(h.tx_ts_ns)
    except (struct.error, TypeError):
        _explain("TS", h, (("tx_ts_ns", 64),))
        raise  # pragma: no cover (_explain raises)


def decode_ts(buf: BytesLike, offset: int = 0) -> TimestampExt:
    _start("TS", buf, offset, TS_SIZE)
    return _new_TimestampExt(*_TS.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class RETH:
    """RDMA extended transport header (16 B): va = where THIS packet's payload goes;
    rkey = the remote key of the region; length = the whole message length."""

    va: int
    rkey: int
    length: int


_new_RETH = fast_constructor(RETH)


def encode_reth(h: RETH) -> bytes:
    try:
        return _RETH.pack(h.va, h.rkey, h.length)
    except (struct.error, TypeError):
        _explain("RETH", h, (("va", 64), ("rkey", 32), ("length", 32)))
        raise  # pragma: no cover (_explain raises)


def decode_reth(buf: BytesLike, offset: int = 0) -> RETH:
    _start("RETH", buf, offset, RETH_SIZE)
    return _new_RETH(*_RETH.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class ImmDt:
    imm: int


_new_ImmDt = fast_constructor(ImmDt)


def encode_imm(h: ImmDt) -> bytes:
    try:
        return _IMM.pack(h.imm)
    except (struct.error, TypeError):
        _explain("ImmDt", h, (("imm", 32),))
        raise  # pragma: no cover (_explain raises)


def decode_imm(buf: BytesLike, offset: int = 0) -> ImmDt:
    _start("ImmDt", buf, offset, IMM_SIZE)
    return _new_ImmDt(*_IMM.unpack_from(buf, offset))


# --------------------------------------------------------------------------------------------
# SACK (also the body of ACK), NACK, reliability probe, endpoint messages, AETH


@dataclass(frozen=True, slots=True)
class SACK:
    """Selective ACK (40 B); also the body of ACK (0xD1) with bitmap 0.

    [0] mark(7:6) ece(5) rsvd [1:4] cack_psn [4:6] sack_offset [6] rcv_cwnd_pen(0-127) [7] rsvd
    [8:16] bitmap [16:20] ev [20:22] ooo_count [22:24] rsvd [24:32] reflected_ts_ns
    [32:40] received_bytes.
    bitmap bit i ((bitmap >> i) & 1) = PSN (cack_psn + 1 + sack_offset + i) mod 2^24 received.
    """

    cack_psn: int
    sack_offset: int = 0
    bitmap: int = 0
    ev: int = 0
    mark: int = SackMark.NONE
    ece: bool = False
    rcv_cwnd_pen: int = 0
    ooo_count: int = 0
    reflected_ts_ns: int = 0
    received_bytes: int = 0

    def bitmap_psns(self) -> list[int]:
        """The PSNs the bitmap marks as received, in ascending order of bit."""
        base = self.cack_psn + 1 + self.sack_offset
        bm = self.bitmap
        return [(base + i) & PSN_MASK for i in range(64) if (bm >> i) & 1]


_new_SACK = fast_constructor(SACK)


def sack_bitmap_of(cack_psn: int, received_psns, sack_offset: int = 0) -> int:
    """The 64-bit bitmap for a set of received PSNs (PSNs outside its 64-PSN span are ignored)."""
    base = (cack_psn + 1 + sack_offset) & PSN_MASK
    bm = 0
    for psn in received_psns:
        i = (psn - base) & PSN_MASK
        if i < 64:
            bm |= 1 << i
    return bm


def encode_sack(h: SACK) -> bytes:
    try:
        mark, cack, pen = h.mark, h.cack_psn, h.rcv_cwnd_pen
        if mark <= 2 and cack <= 0xFFFFFF and pen <= 127:
            return _SACK.pack(
                mark << 30 | (0x20000000 if h.ece else 0) | cack,
                h.sack_offset,
                pen,
                h.bitmap,
                h.ev,
                h.ooo_count,
                h.reflected_ts_ns,
                h.received_bytes,
            )
    except (struct.error, TypeError):
        pass
    if h.mark not in (0, 1, 2):
        raise WireError(
            "SACK", f"mark out of range: {h.mark!r} (NONE=0, SKIP_ONCE=1, ALWAYS_SKIP=2)"
        )
    _explain("SACK", h, _SACK_SPEC)
    raise AssertionError  # pragma: no cover (_explain raises)


_SACK_SPEC = (
    ("cack_psn", 24),
    ("sack_offset", 16),
    ("rcv_cwnd_pen", 7),
    ("bitmap", 64),
    ("ev", 32),
    ("ooo_count", 16),
    ("reflected_ts_ns", 64),
    ("received_bytes", 64),
)


def _sack_at(buf: BytesLike, offset: int) -> SACK:
    w0, off, pen, bm, ev, ooo, rts, rb = _SACK.unpack_from(buf, offset)
    mark = _SACK_MARK_OF[w0 >> 30]
    if mark is None:
        raise WireError("SACK", "mark 3 is undefined", offset)
    # reserved bits (byte 0 bits 4:0, byte 6 bit 7, bytes 7 and 22:24) are ignored
    return _new_SACK(
        w0 & 0xFFFFFF, off, bm, ev, mark, w0 & 0x20000000 != 0, pen & 0x7F, ooo, rts, rb
    )


def decode_sack(buf: BytesLike, offset: int = 0) -> SACK:
    _start("SACK", buf, offset, SACK_SIZE)
    return _sack_at(buf, offset)


@dataclass(frozen=True, slots=True)
class NACK:
    """Negative ACK (20 B): [0] reason [1:4] psn [4:8] ev [8] rsvd [9:12] cack_psn
    [12:20] reflected_ts_ns."""

    reason: int
    psn: int
    ev: int = 0
    cack_psn: int = 0
    reflected_ts_ns: int = 0


_new_NACK = fast_constructor(NACK)


def encode_nack(h: NACK) -> bytes:
    reason, psn, cack = h.reason, h.psn, h.cack_psn
    if not _known(reason, _NACK_REASON_OF):
        raise WireError("NACK", f"unknown reason {reason!r}")
    try:
        if psn <= 0xFFFFFF and cack <= 0xFFFFFF:
            return _NACK.pack(reason << 24 | psn, h.ev, cack, h.reflected_ts_ns)
    except (struct.error, TypeError):
        pass
    _explain("NACK", h, (("reason", 8), ("psn", 24), ("ev", 32), ("cack_psn", 24),
                         ("reflected_ts_ns", 64)))  # fmt: skip
    raise AssertionError  # pragma: no cover (_explain raises)


def _nack_at(buf: BytesLike, offset: int) -> NACK:
    w0, ev, w2, rts = _NACK.unpack_from(buf, offset)
    reason = _NACK_REASON_OF.get(w0 >> 24)
    if reason is None:
        raise WireError("NACK", f"unknown reason {w0 >> 24}", offset)
    return _new_NACK(reason, w0 & 0xFFFFFF, ev, w2 & 0xFFFFFF, rts)


def decode_nack(buf: BytesLike, offset: int = 0) -> NACK:
    _start("NACK", buf, offset, NACK_SIZE)
    return _nack_at(buf, offset)


@dataclass(frozen=True, slots=True)
class ReliabilityProbe:
    """Reliability probe (16 B), sent to the peer QP on one EV and answered by a SACK that
    echoes ev (and reflects tx_ts_ns). It carries no PSN of its own."""

    probe_id: int
    ev: int
    tx_ts_ns: int


_new_ReliabilityProbe = fast_constructor(ReliabilityProbe)


def encode_rprobe(h: ReliabilityProbe) -> bytes:
    try:
        return _RPROBE.pack(h.probe_id, h.ev, h.tx_ts_ns)
    except (struct.error, TypeError):
        _explain("RPROBE", h, (("probe_id", 32), ("ev", 32), ("tx_ts_ns", 64)))
        raise  # pragma: no cover (_explain raises)


def decode_rprobe(buf: BytesLike, offset: int = 0) -> ReliabilityProbe:
    _start("RPROBE", buf, offset, RPROBE_SIZE)
    return _new_ReliabilityProbe(*_RPROBE.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class EndpointMsg:
    """Endpoint message (24 B): [0] kind [1:4] rsvd [4:8] ident [8:12] ev [12:16] port_mask
    [16:24] ts_ns.

    EV probe: EP_REQUEST to QP 0x2, answered by EP_RESPONSE echoing ident/ev/ts_ns.
    Port status update: EP_REQUEST, kind PORT_STATUS, to the peer QP; port_mask bit p = port p
    up; ident = sequence number.
    """

    kind: int
    ident: int
    ev: int = 0
    port_mask: int = 0
    ts_ns: int = 0


_new_EndpointMsg = fast_constructor(EndpointMsg)


def encode_endpoint(h: EndpointMsg) -> bytes:
    if not _known(h.kind, _EP_KIND_OF):
        raise WireError("EndpointMsg", f"unknown kind {h.kind!r}")
    try:
        return _ENDPOINT.pack(h.kind, h.ident, h.ev, h.port_mask, h.ts_ns)
    except (struct.error, TypeError):
        _explain("EndpointMsg", h, (("kind", 8), ("ident", 32), ("ev", 32), ("port_mask", 32),
                                    ("ts_ns", 64)))  # fmt: skip
        raise  # pragma: no cover (_explain raises)


def _endpoint_at(buf: BytesLike, offset: int) -> EndpointMsg:
    kind, ident, ev, mask, ts = _ENDPOINT.unpack_from(buf, offset)
    k = _EP_KIND_OF.get(kind)
    if k is None:
        raise WireError("EndpointMsg", f"unknown kind {kind}", offset)
    return _new_EndpointMsg(k, ident, ev, mask, ts)


def decode_endpoint(buf: BytesLike, offset: int = 0) -> EndpointMsg:
    _start("EndpointMsg", buf, offset, ENDPOINT_SIZE)
    return _endpoint_at(buf, offset)


@dataclass(frozen=True, slots=True)
class AETH:
    """ACK extended transport header of the RoCEv2 baseline (4 B): syndrome (8) | MSN (24)."""

    syndrome: int
    msn: int


_new_AETH = fast_constructor(AETH)


def encode_aeth(h: AETH) -> bytes:
    try:
        syndrome, msn = h.syndrome, h.msn
        if syndrome <= 0xFF and msn <= 0xFFFFFF:
            return _AETH.pack(syndrome << 24 | msn)
    except (struct.error, TypeError):
        pass
    _explain("AETH", h, (("syndrome", 8), ("msn", 24)))
    raise AssertionError  # pragma: no cover (_explain raises)


def decode_aeth(buf: BytesLike, offset: int = 0) -> AETH:
    _start("AETH", buf, offset, AETH_SIZE)
    (w,) = _AETH.unpack_from(buf, offset)
    return _new_AETH(_AETH_OF.get(w >> 24, w >> 24), w & 0xFFFFFF)
