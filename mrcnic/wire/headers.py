"""Every header MRC puts on the wire: dataclasses with paired encode_*/decode_* functions.

Layouts, worked examples and the choices we made where the public MRC material is silent are in
docs/wire.md. All multi-byte fields are big-endian. PSNs are 24-bit, EVs 32-bit.

Decoders take bytes/bytearray/memoryview plus an offset and raise WireError (never IndexError,
struct.error or an enum's ValueError) for truncated or malformed input. Encoders validate value
ranges and raise WireError too. The frame-level functions (build_frame/parse_frame) and the
MRC-level ones (encode_mrc/decode_mrc) are the ones the hot paths use.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from mrcnic.errors import MrcError

BytesLike = bytes | bytearray | memoryview

# --------------------------------------------------------------------------------------------
# Exception


class WireError(MrcError, ValueError):
    """Truncated or malformed input (decode), or a value that does not fit its field (encode).

    .header: which header ("BTH", "SACK", "ICRC", ...); .reason: what was wrong;
    .offset: byte offset (into the buffer given) of the header or field, or None.
    """

    def __init__(self, header: str, reason: str, offset: int | None = None) -> None:
        super().__init__(header, reason, offset)
        self.header = header
        self.reason = reason
        self.offset = offset

    def __str__(self) -> str:
        if self.offset is None or "offset" in self.reason:
            return f"{self.header}: {self.reason}"
        return f"{self.header}: {self.reason} (offset {self.offset})"


def _truncated(header: str, need: int, offset: int, have: int) -> WireError:
    return WireError(
        header, f"truncated: need {need} bytes at offset {offset}, have {max(have, 0)}", offset
    )


def _range_error(header: str, name: str, value: object, bits: int) -> WireError:
    return WireError(header, f"{name} out of range: {value!r} (must fit in {bits} unsigned bits)")


def _check_uint(header: str, name: str, value: int, bits: int) -> None:
    if not (isinstance(value, int) and 0 <= value < (1 << bits)):
        raise _range_error(header, name, value, bits)


def _check_bytes(header: str, name: str, value: object, size: int) -> None:
    if not isinstance(value, (bytes, bytearray, memoryview)) or len(value) != size:
        raise WireError(header, f"{name} must be {size} bytes, got {value!r}")


def _explain(header: str, h: object, spec: tuple[tuple[str, int], ...]) -> None:
    """Slow path of an encoder whose fast path failed: raise WireError naming the field."""
    for name, bits in spec:
        _check_uint(header, name, getattr(h, name), bits)
    raise WireError(header, f"cannot encode {h!r}")


def _known(value: object, table: dict) -> bool:
    """value is one of an enum's defined values (False for anything unhashable)."""
    try:
        return value in table
    except TypeError:
        return False


def _start(header: str, buf: BytesLike, offset: int, size: int) -> None:
    """Check that buf holds size bytes at offset (the common prologue of every decoder)."""
    if offset < 0:
        raise WireError(header, f"negative offset {offset}", offset)
    have = len(buf) - offset
    if have < size:
        raise _truncated(header, size, offset, have)


def _fast_constructor(cls: type) -> type:
    """A class whose constructor returns a genuine, frozen `cls` instance about 5x faster than
    cls() for the decoders (hot paths): a frozen dataclass's __init__ pays object.__setattr__
    per field, while this twin has the same slots, assigns them plainly and then becomes cls
    (same slot layout, so the __class__ assignment is legal). Takes every field positionally."""
    names = cls.__slots__
    body = "".join(f"    self.{n} = {n}\n" for n in names)
    src = f"def __init__(self, {', '.join(names)}):\n{body}    self.__class__ = cls\n"
    ns: dict = {"cls": cls}
    exec(src, ns)  # noqa: S102 (fixed template over our own field names, like dataclasses)
    return type(f"_{cls.__name__}Builder", (), {"__slots__": names, "__init__": ns["__init__"]})


# Public name for other modules' hot-path dataclasses (e.g. cc.AckSample).
fast_constructor = _fast_constructor


# --------------------------------------------------------------------------------------------
# Constants

ETH_SIZE = 14
IPV6_SIZE = 40
UDP_SIZE = 8
BTH_SIZE = 12
METH_SIZE = 4
TS_SIZE = 8
RETH_SIZE = 16
IMM_SIZE = 4
ICRC_SIZE = 4
SACK_SIZE = 40
NACK_SIZE = 20
RPROBE_SIZE = 16
ENDPOINT_SIZE = 24
AETH_SIZE = 4

ETHERTYPE_IPV6 = 0x86DD
IPPROTO_UDP = 17
MRC_UDP_PORT = 4791
EV_PROBE_QPN = 0x2
PSN_MASK = 0xFFFFFF
QPN_MASK = 0xFFFFFF
EV_MASK = 0xFFFFFFFF
DEFAULT_HOP_LIMIT = 64

# Offsets of a full frame (Ethernet first), for hot paths that peek without decoding.
OFF_IPV6 = ETH_SIZE  # 14
OFF_UDP = OFF_IPV6 + IPV6_SIZE  # 54
OFF_BTH = OFF_UDP + UDP_SIZE  # 62
OFF_METH = OFF_BTH + BTH_SIZE  # 74
# Inside the IPv6 header (add OFF_IPV6 for a frame offset):
IPV6_OFF_PAYLOAD_LENGTH = 4
IPV6_OFF_HOP_LIMIT = 7
IPV6_OFF_SRC = 8
IPV6_OFF_DST = 24
# Inside the UDP header (add OFF_UDP for a frame offset):
UDP_OFF_LENGTH = 4
UDP_OFF_CHECKSUM = 6

MRC_DATA_HEADERS_SIZE = BTH_SIZE + METH_SIZE + TS_SIZE + RETH_SIZE  # 40
FRAME_HEADERS_SIZE = ETH_SIZE + IPV6_SIZE + UDP_SIZE  # 62


# --------------------------------------------------------------------------------------------
# Enums


class Opcode(IntEnum):
    WRITE_FIRST = 0xC6
    WRITE_MIDDLE = 0xC7
    WRITE_LAST = 0xC8
    WRITE_LAST_IMM = 0xC9
    WRITE_ONLY = 0xCA
    WRITE_ONLY_IMM = 0xCB
    ACK = 0xD1
    EP_REQUEST = 0xD8
    EP_RESPONSE = 0xD9
    SACK = 0xDC
    NACK = 0xDD
    RPROBE = 0xDE
    # RoCEv2 RC opcodes for the go-back-N baseline (IBTA values)
    RC_WRITE_FIRST = 0x06
    RC_WRITE_MIDDLE = 0x07
    RC_WRITE_LAST = 0x08
    RC_WRITE_LAST_IMM = 0x09
    RC_WRITE_ONLY = 0x0A
    RC_WRITE_ONLY_IMM = 0x0B
    RC_ACK = 0x11


_MRC_DATA_OPS = frozenset(range(0xC6, 0xCC))
_RC_DATA_OPS = frozenset(range(0x06, 0x0C))
_IMM_OPS = frozenset((0xC9, 0xCB, 0x09, 0x0B))
_RC_RETH_OPS = frozenset((0x06, 0x0A, 0x0B))  # RC FIRST/ONLY carry a RETH
_FIRST_OPS = frozenset((0xC6, 0xCA, 0xCB, 0x06, 0x0A, 0x0B))  # a message starts here
_LAST_OPS = frozenset((0xC8, 0xC9, 0xCA, 0xCB, 0x08, 0x09, 0x0A, 0x0B))  # a message ends here


def is_data(op: int) -> bool:
    """An MRC data opcode (RDMA Write family, 0xC6-0xCB)."""
    return op in _MRC_DATA_OPS


def is_rc_data(op: int) -> bool:
    """A RoCEv2 RC data opcode of the baseline (0x06-0x0B)."""
    return op in _RC_DATA_OPS


def has_imm(op: int) -> bool:
    """The opcode carries an ImmDt header (write with immediate, LAST or ONLY)."""
    return op in _IMM_OPS


def has_reth(op: int) -> bool:
    """The opcode carries a RETH: every MRC data packet; RC only on FIRST/ONLY."""
    return op in _MRC_DATA_OPS or op in _RC_RETH_OPS


def is_first(op: int) -> bool:
    """The packet starts a message (FIRST or ONLY)."""
    return op in _FIRST_OPS


def is_last(op: int) -> bool:
    """The packet ends a message (LAST or ONLY, with or without immediate)."""
    return op in _LAST_OPS


class NackReason(IntEnum):
    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    NO_BITMAP = 3
    NO_PKT_BUFFER = 4
    PSN_OOR_WINDOW = 5
    UNEXP_EVENT = 6
    REMOTE_ACCESS_ERROR = 7


class SackMark(IntEnum):
    NONE = 0
    SKIP_ONCE = 1
    ALWAYS_SKIP = 2


class Dscp(IntEnum):
    NO_TRIM = 0
    TRIMMABLE = 4
    TRIMMABLE_RETX = 8
    TRIMMED = 12
    TRIMMED_LASTHOP = 16
    CONTROL = 46


class Ecn(IntEnum):
    NOT_ECT = 0
    ECT1 = 1
    ECT0 = 2
    CE = 3


class EndpointKind(IntEnum):
    EV_PROBE = 1
    PORT_STATUS = 2


class AethSyndrome(IntEnum):
    ACK = 0x00
    NAK_PSN_SEQ_ERR = 0x60
    NAK_REMOTE_ACCESS = 0x62


# Value -> member lookups: a dict.get is several times cheaper than calling the enum, and it
# lets decoders turn "unknown value" into a WireError instead of the enum's ValueError.
_OPCODE_OF = {int(m): m for m in Opcode}
_NACK_REASON_OF = {int(m): m for m in NackReason}
_SACK_MARK_OF = (SackMark.NONE, SackMark.SKIP_ONCE, SackMark.ALWAYS_SKIP, None)
_DSCP_OF = {int(m): m for m in Dscp}
_ECN_OF = (Ecn.NOT_ECT, Ecn.ECT1, Ecn.ECT0, Ecn.CE)
_EP_KIND_OF = {int(m): m for m in EndpointKind}
_AETH_OF = {int(m): m for m in AethSyndrome}
_TRIMMED_DSCPS = frozenset((Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP))

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
_ICRC = struct.Struct(">I")
_SACK = struct.Struct(">IHBxQIH2xQQ")
_NACK = struct.Struct(">IIIQ")
_RPROBE = struct.Struct(">IIQ")
_ENDPOINT = struct.Struct(">B3xIIIQ")
_AETH = struct.Struct(">I")
_U16 = struct.Struct(">H")

assert _SACK.size == SACK_SIZE and _NACK.size == NACK_SIZE and _ENDPOINT.size == ENDPOINT_SIZE

# --------------------------------------------------------------------------------------------
# Ethernet


@dataclass(frozen=True, slots=True)
class Ethernet:
    dst: bytes
    src: bytes
    ethertype: int = ETHERTYPE_IPV6


_new_Ethernet = _fast_constructor(Ethernet)


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


_new_IPv6 = _fast_constructor(IPv6)


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


_new_UDP = _fast_constructor(UDP)


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
    pkey: int = 0xFFFF
    fecn: bool = False
    becn: bool = False
    rtx: bool = False
    ts_present: bool = False
    ack_req: bool = False


_new_BTH = _fast_constructor(BTH)


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


_new_METH = _fast_constructor(METH)


def encode_meth(h: METH) -> bytes:
    try:
        return _METH.pack(h.msn, h.rqmsn)
    except (struct.error, TypeError):
        _explain(
            "METH",
            h,
            (
                ("msn", 16),
                ("rqmsn", 16),
            ),
        )
        raise  # pragma: no cover (_explain raises)


def decode_meth(buf: BytesLike, offset: int = 0) -> METH:
    _start("METH", buf, offset, METH_SIZE)
    return _new_METH(*_METH.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class TimestampExt:
    """Transmit timestamp (8 B, ns); present in a data packet iff BTH.ts_present."""

    tx_ts_ns: int


_new_TimestampExt = _fast_constructor(TimestampExt)


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


_new_RETH = _fast_constructor(RETH)


def encode_reth(h: RETH) -> bytes:
    try:
        return _RETH.pack(h.va, h.rkey, h.length)
    except (struct.error, TypeError):
        _explain(
            "RETH",
            h,
            (
                ("va", 64),
                ("rkey", 32),
                ("length", 32),
            ),
        )
        raise  # pragma: no cover (_explain raises)


def decode_reth(buf: BytesLike, offset: int = 0) -> RETH:
    _start("RETH", buf, offset, RETH_SIZE)
    return _new_RETH(*_RETH.unpack_from(buf, offset))


@dataclass(frozen=True, slots=True)
class ImmDt:
    imm: int


_new_ImmDt = _fast_constructor(ImmDt)


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


_new_SACK = _fast_constructor(SACK)


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


_new_NACK = _fast_constructor(NACK)


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


_new_ReliabilityProbe = _fast_constructor(ReliabilityProbe)


def encode_rprobe(h: ReliabilityProbe) -> bytes:
    try:
        return _RPROBE.pack(h.probe_id, h.ev, h.tx_ts_ns)
    except (struct.error, TypeError):
        _explain(
            "RPROBE",
            h,
            (
                ("probe_id", 32),
                ("ev", 32),
                ("tx_ts_ns", 64),
            ),
        )
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


_new_EndpointMsg = _fast_constructor(EndpointMsg)


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


_new_AETH = _fast_constructor(AETH)


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


# --------------------------------------------------------------------------------------------
# ICRC


def icrc(data: BytesLike) -> int:
    """Our ICRC: zlib.crc32 over BTH..payload (everything after UDP except the ICRC itself);
    sent big-endian. No field is masked: nothing after UDP changes in flight."""
    return zlib.crc32(data)


# --------------------------------------------------------------------------------------------
# The MRC part of a packet (everything after UDP)

_EMPTY = memoryview(b"")
_NONE5 = (None, None, None, None)  # meth, ts, reth, imm of a control packet


@dataclass(frozen=True, slots=True)
class MrcPacket:
    """Everything after UDP. Which parts an opcode carries:

    data C6-CB: BTH METH [TS] RETH [ImmDt if imm opcode] payload ICRC
    ACK D1 / SACK DC: BTH SACK ICRC ; NACK DD: BTH NACK ICRC ; RPROBE DE: BTH ReliabilityProbe ICRC
    EP D8/D9: BTH EndpointMsg ICRC
    RC data 06-0B: BTH RETH(only FIRST/ONLY) [ImmDt] payload ICRC ; RC_ACK 11: BTH AETH ICRC
    icrc is the value found on decode (None when trimmed); encode_mrc always computes it.
    """

    bth: BTH
    meth: METH | None = None
    ts: TimestampExt | None = None
    reth: RETH | None = None
    imm: ImmDt | None = None
    sack: SACK | None = None
    nack: NACK | None = None
    probe: ReliabilityProbe | None = None
    endpoint: EndpointMsg | None = None
    aeth: AETH | None = None
    payload: BytesLike = b""
    icrc: int | None = None


_new_MrcPacket = _fast_constructor(MrcPacket)


# opcode -> (body header name, MrcPacket field, body size) for non-data opcodes
_CONTROL_BODY = {
    0xD1: ("SACK", "sack", SACK_SIZE),
    0xDC: ("SACK", "sack", SACK_SIZE),
    0xDD: ("NACK", "nack", NACK_SIZE),
    0xDE: ("RPROBE", "probe", RPROBE_SIZE),
    0xD8: ("EndpointMsg", "endpoint", ENDPOINT_SIZE),
    0xD9: ("EndpointMsg", "endpoint", ENDPOINT_SIZE),
    0x11: ("AETH", "aeth", AETH_SIZE),
}
_BODY_FIELDS = ("sack", "nack", "probe", "endpoint", "aeth")
_BODY_ENCODER = {
    "sack": encode_sack,
    "nack": encode_nack,
    "probe": encode_rprobe,
    "endpoint": encode_endpoint,
    "aeth": encode_aeth,
}


def headers_size(opcode: int, ts_present: bool = False) -> int:
    """Bytes of MRC headers (BTH onwards, no payload, no ICRC) an opcode carries: what a
    trimmed packet keeps after UDP. Raises WireError for an unknown opcode."""
    if not isinstance(opcode, int):
        raise WireError("BTH", f"opcode must be an int, got {opcode!r}")
    if opcode in _MRC_DATA_OPS:
        n = BTH_SIZE + METH_SIZE + RETH_SIZE + (TS_SIZE if ts_present else 0)
        return n + IMM_SIZE if opcode in _IMM_OPS else n
    if opcode in _RC_DATA_OPS:
        n = BTH_SIZE + (RETH_SIZE if opcode in _RC_RETH_OPS else 0)
        return n + IMM_SIZE if opcode in _IMM_OPS else n
    body = _CONTROL_BODY.get(opcode)
    if body is None:
        raise WireError("BTH", f"unknown opcode {opcode!r}")
    return BTH_SIZE + body[2]


def encode_mrc(pkt: MrcPacket, *, trimmed: bool = False) -> bytes:
    """BTH..payload + ICRC (zlib.crc32 over BTH..payload, big-endian).

    Checks that the packet carries exactly the parts its opcode needs (WireError otherwise).
    trimmed=True emits what a trimming switch leaves: the headers only, no payload, no ICRC.
    pkt.icrc is ignored: the ICRC is always computed.
    """
    bth = pkt.bth
    op = bth.opcode
    if not isinstance(op, int):
        raise WireError("BTH", f"opcode must be an int, got {op!r}")
    # Fast paths for well-formed packets; anything unusual goes to _encode_mrc_checked,
    # which says precisely what is wrong.
    no_body = (
        pkt.sack is None
        and pkt.nack is None
        and pkt.probe is None
        and pkt.endpoint is None
        and pkt.aeth is None
    )
    if op in _MRC_DATA_OPS:
        meth, ts, reth, imm = pkt.meth, pkt.ts, pkt.reth, pkt.imm
        if (
            no_body
            and meth is not None
            and reth is not None
            and (ts is None) != bool(bth.ts_present)
            and (imm is None) != (op in _IMM_OPS)
        ):
            hdr = encode_bth(bth) + encode_meth(meth)
            if ts is not None:
                hdr += encode_ts(ts)
            hdr += encode_reth(reth)
            if imm is not None:
                hdr += encode_imm(imm)
            if trimmed:
                return hdr
            payload = pkt.payload
            try:
                crc = zlib.crc32(payload, zlib.crc32(hdr))
            except TypeError:
                raise WireError(
                    "MRC", f"payload must be bytes-like, not {type(payload).__name__}"
                ) from None
            return b"".join((hdr, payload, _ICRC.pack(crc)))
    elif op in _SACK_OPS:
        sack = pkt.sack
        if (
            sack is not None
            and pkt.nack is None
            and pkt.probe is None
            and pkt.endpoint is None
            and pkt.aeth is None
            and pkt.meth is None
            and pkt.ts is None
            and pkt.reth is None
            and pkt.imm is None
            and pkt.payload == b""
        ):
            hdr = encode_bth(bth) + encode_sack(sack)
            return hdr if trimmed else hdr + _ICRC.pack(zlib.crc32(hdr))
    return _encode_mrc_checked(pkt, trimmed)


_SACK_OPS = frozenset((0xD1, 0xDC))


def _encode_mrc_checked(pkt: MrcPacket, trimmed: bool) -> bytes:
    """encode_mrc with every consistency check spelled out (its slow path)."""
    if not isinstance(pkt.payload, (bytes, bytearray, memoryview)):
        raise WireError("MRC", f"payload must be bytes-like, not {type(pkt.payload).__name__}")
    bth = pkt.bth
    op = bth.opcode
    out = bytearray(encode_bth(bth))
    if op in _MRC_DATA_OPS:
        if pkt.meth is None or pkt.reth is None:
            raise WireError("MRC", f"data opcode 0x{op:02x} needs meth and reth")
        if (pkt.ts is not None) != bool(bth.ts_present):
            raise WireError("TS", "timestamp extension present iff BTH.ts_present")
        out += encode_meth(pkt.meth)
        if pkt.ts is not None:
            out += encode_ts(pkt.ts)
        out += encode_reth(pkt.reth)
        _extra = ("sack", "nack", "probe", "endpoint", "aeth")
    elif op in _RC_DATA_OPS:
        if (pkt.reth is not None) != (op in _RC_RETH_OPS):
            raise WireError("RETH", f"RC opcode 0x{op:02x}: RETH only on FIRST/ONLY")
        if pkt.meth is not None or pkt.ts is not None:
            raise WireError("MRC", "RC data carries no METH or timestamp extension")
        if pkt.reth is not None:
            out += encode_reth(pkt.reth)
        _extra = ("sack", "nack", "probe", "endpoint", "aeth")
    else:
        body = _CONTROL_BODY.get(op)
        if body is None:
            raise WireError("BTH", f"unknown opcode {op!r}")
        name, field, _size = body
        value = getattr(pkt, field)
        if value is None:
            raise WireError(name, f"opcode 0x{op:02x} needs its {name} body")
        for f in ("meth", "ts", "reth", "imm"):
            if getattr(pkt, f) is not None:
                raise WireError("MRC", f"opcode 0x{op:02x} carries no {f}")
        if len(pkt.payload):
            raise WireError("MRC", f"opcode 0x{op:02x} carries no payload")
        out += _BODY_ENCODER[field](value)
        _extra = tuple(f for f in _BODY_FIELDS if f != field)
    for f in _extra:
        if getattr(pkt, f) is not None:
            raise WireError("MRC", f"opcode 0x{op:02x} carries no {f}")
    if op in _MRC_DATA_OPS or op in _RC_DATA_OPS:
        if (pkt.imm is not None) != (op in _IMM_OPS):
            raise WireError("ImmDt", f"ImmDt present iff the opcode has an immediate (0x{op:02x})")
        if pkt.imm is not None:
            out += encode_imm(pkt.imm)
        if trimmed:
            return bytes(out)
        out += pkt.payload
    elif trimmed:
        return bytes(out)
    out += _ICRC.pack(zlib.crc32(out))
    return bytes(out)


def decode_mrc(buf: BytesLike, trimmed: bool = False) -> MrcPacket:
    """Decode everything after UDP.

    Checks the ICRC (WireError on mismatch) unless trimmed=True; a trimmed packet ends after
    its headers (bytes beyond them are ignored; payload is empty, icrc None). payload is a
    memoryview slice of buf (zero copy). Unknown opcodes raise WireError.
    """
    return _decode_mrc(buf if type(buf) is memoryview else memoryview(buf), trimmed, 0)


def _decode_mrc(mv: memoryview, trimmed: bool, base: int) -> MrcPacket:
    # base: offset of mv[0] in the caller's frame, so errors name frame offsets.
    n = len(mv)
    if n < BTH_SIZE:
        raise _truncated("BTH", BTH_SIZE, base, n)
    op, b1, pkey, w1, w2 = _BTH.unpack_from(mv, 0)
    if op in _MRC_DATA_OPS:
        ts_present = w1 & 0x10000000
        imm_present = op in _IMM_OPS
        hdr = 40 if ts_present else 32
        if imm_present:
            hdr += IMM_SIZE
        if n < hdr:
            _data_truncated(n, base, (True, ts_present, True, imm_present))
        if trimmed:
            payload = _EMPTY
            crc = None
        else:
            if n < hdr + ICRC_SIZE:
                raise _truncated("ICRC", ICRC_SIZE, base + hdr, n - hdr)
            crc = _check_icrc(mv, n, base)
            payload = mv[hdr : n - ICRC_SIZE]
        meth = _new_METH(*_METH.unpack_from(mv, 12))
        if ts_present:
            ts = _new_TimestampExt(*_TS.unpack_from(mv, 16))
            reth = _new_RETH(*_RETH.unpack_from(mv, 24))
        else:
            ts = None
            reth = _new_RETH(*_RETH.unpack_from(mv, 16))
        imm = _new_ImmDt(*_IMM.unpack_from(mv, hdr - IMM_SIZE)) if imm_present else None
        return _new_MrcPacket(
            _bth_from(op, b1, pkey, w1, w2), meth, ts, reth, imm, None, None, None, None, None,
            payload, crc,
        )  # fmt: skip
    if op in _RC_DATA_OPS:
        reth_present = op in _RC_RETH_OPS
        imm_present = op in _IMM_OPS
        hdr = BTH_SIZE + (RETH_SIZE if reth_present else 0) + (IMM_SIZE if imm_present else 0)
        if n < hdr:
            _data_truncated(n, base, (False, False, reth_present, imm_present))
        if trimmed:
            payload = _EMPTY
            crc = None
        else:
            if n < hdr + ICRC_SIZE:
                raise _truncated("ICRC", ICRC_SIZE, base + hdr, n - hdr)
            crc = _check_icrc(mv, n, base)
            payload = mv[hdr : n - ICRC_SIZE]
        reth = _new_RETH(*_RETH.unpack_from(mv, 12)) if reth_present else None
        imm = _new_ImmDt(*_IMM.unpack_from(mv, hdr - IMM_SIZE)) if imm_present else None
        return _new_MrcPacket(
            _bth_from(op, b1, pkey, w1, w2), None, None, reth, imm, None, None, None, None, None,
            payload, crc,
        )  # fmt: skip
    body = _CONTROL_BODY.get(op)
    if body is None:
        raise WireError("BTH", f"unknown opcode 0x{op:02x}", base)
    name, field, size = body
    need = BTH_SIZE + size
    if n < need:
        raise _truncated(name, size, base + BTH_SIZE, n - BTH_SIZE)
    if trimmed:
        crc = None
    else:
        if n != need + ICRC_SIZE:
            if n < need + ICRC_SIZE:
                raise _truncated("ICRC", ICRC_SIZE, base + need, n - need)
            raise WireError(
                name, f"{n - need - ICRC_SIZE} trailing bytes after the {name} body", base + need
            )
        crc = _check_icrc(mv, n, base)
    bth = _bth_from(op, b1, pkey, w1, w2)
    try:
        if field == "sack":
            return _new_MrcPacket(
                bth, *_NONE5, _sack_at(mv, 12), None, None, None, None, _EMPTY, crc
            )
        if field == "nack":
            return _new_MrcPacket(
                bth, *_NONE5, None, _nack_at(mv, 12), None, None, None, _EMPTY, crc
            )
        if field == "probe":
            return _new_MrcPacket(
                bth, *_NONE5, None, None, _new_ReliabilityProbe(*_RPROBE.unpack_from(mv, 12)),
                None, None, _EMPTY, crc,
            )  # fmt: skip
        if field == "endpoint":
            return _new_MrcPacket(
                bth, *_NONE5, None, None, None, _endpoint_at(mv, 12), None, _EMPTY, crc
            )
        return _new_MrcPacket(
            bth, *_NONE5, None, None, None, None, decode_aeth(mv, 12), _EMPTY, crc
        )
    except WireError as e:
        if base:
            raise WireError(
                e.header, e.reason, None if e.offset is None else e.offset + base
            ) from None
        raise


def _data_truncated(n: int, base: int, present: tuple) -> None:
    """Name the first header a truncated data packet is missing (present: METH, TS, RETH, ImmDt)."""
    off = BTH_SIZE
    for name, size, here in zip(
        ("METH", "TS", "RETH", "ImmDt"), _DATA_PART_SIZES, present, strict=True
    ):
        if here:
            if n < off + size:
                raise _truncated(name, size, base + off, n - off)
            off += size
    raise AssertionError("unreachable: a truncated data packet misses one of its headers")


_DATA_PART_SIZES = (METH_SIZE, TS_SIZE, RETH_SIZE, IMM_SIZE)


def _check_icrc(mv: memoryview, n: int, base: int) -> int:
    (got,) = _ICRC.unpack_from(mv, n - ICRC_SIZE)
    want = zlib.crc32(mv[: n - ICRC_SIZE])
    if got != want:
        reason = f"mismatch: carried 0x{got:08x}, computed 0x{want:08x}"
        raise WireError("ICRC", reason, base + n - ICRC_SIZE)
    return got


# --------------------------------------------------------------------------------------------
# EV split and UDP checksum


def ev_to_udp_flow(ev: int) -> tuple[int, int]:
    """EV -> (UDP source port, IPv6 flow label): the port carries the high 16 bits, the flow
    label the low 16 bits (its top 4 bits are 0)."""
    if not 0 <= ev <= EV_MASK:
        raise _range_error("EV", "ev", ev, 32)
    return ev >> 16, ev & 0xFFFF


def udp_flow_to_ev(src_port: int, flow_label: int) -> int:
    """(UDP source port, IPv6 flow label) -> EV. The flow label's top 4 bits are not part of
    the EV and are ignored."""
    if not 0 <= src_port <= 0xFFFF:
        raise _range_error("EV", "src_port", src_port, 16)
    if not 0 <= flow_label <= 0xFFFFF:
        raise _range_error("EV", "flow_label", flow_label, 20)
    return src_port << 16 | (flow_label & 0xFFFF)


_udp6_checksum = None


def udp_checksum(ip_src: BytesLike, final_dst: BytesLike, udp: BytesLike) -> int:
    """UDP-over-IPv6 checksum (pseudo-header with the FINAL destination: the address the
    receiver sees after the last uSID shift). udp = UDP header + payload with checksum 0.
    A computed 0 is sent as 0xFFFF (RFC 8200)."""
    global _udp6_checksum
    if _udp6_checksum is None:
        # Imported on first use: mrcnic.fast is a separate module with a C backend.
        from mrcnic.fast import udp6_checksum

        _udp6_checksum = udp6_checksum
    return _udp6_checksum(ip_src, final_dst, udp)


# --------------------------------------------------------------------------------------------
# Whole frames


def build_frame(
    *,
    eth_src: BytesLike,
    eth_dst: BytesLike,
    ip_src: BytesLike,
    ip_dst: BytesLike,
    final_dst: BytesLike,
    ev: int,
    mrc: BytesLike,
    dscp: int,
    ecn: int = Ecn.ECT0,
    hop_limit: int = DEFAULT_HOP_LIMIT,
) -> bytes:
    """Ethernet + IPv6 (flow label from ev) + UDP (source port from ev, destination 4791,
    checksum over final_dst) + mrc (from encode_mrc)."""
    try:
        ok = (
            len(eth_src) == 6
            and len(eth_dst) == 6
            and len(ip_src) == 16
            and len(ip_dst) == 16
            and len(final_dst) == 16
            and 0 <= dscp <= 63
            and 0 <= ecn <= 3
            and 0 <= hop_limit <= 255
            and 0 <= ev <= EV_MASK
            and len(mrc) <= 0xFFFF - UDP_SIZE
        )
    except TypeError:
        ok = False
    if not ok:
        _explain_build_frame(eth_src, eth_dst, ip_src, ip_dst, final_dst, ev, mrc, dscp, ecn,
                             hop_limit)  # fmt: skip
    if type(ip_src) is not bytes:
        ip_src = bytes(ip_src)
    if type(final_dst) is not bytes:
        final_dst = bytes(final_dst)
    if type(mrc) is not bytes:
        mrc = bytes(mrc)
    try:
        sport = ev >> 16
        ulen = UDP_SIZE + len(mrc)
        # bytes all the way: the C checksum takes bytes without building a buffer view
        csum = udp_checksum(ip_src, final_dst, _UDP.pack(sport, MRC_UDP_PORT, ulen, 0) + mrc)
        w0 = 0x60000000 | dscp << 22 | ecn << 20 | (ev & 0xFFFF)
        head = _ETH.pack(bytes(eth_dst), bytes(eth_src), ETHERTYPE_IPV6) + _IP6.pack(
            w0, ulen, IPPROTO_UDP, hop_limit, ip_src, bytes(ip_dst)
        )
    except (struct.error, TypeError):  # e.g. a float where an int belongs
        _explain_build_frame(eth_src, eth_dst, ip_src, ip_dst, final_dst, ev, mrc, dscp, ecn,
                             hop_limit)  # fmt: skip
        raise
    return b"".join((head, _UDP.pack(sport, MRC_UDP_PORT, ulen, csum), mrc))


def _explain_build_frame(eth_src, eth_dst, ip_src, ip_dst, final_dst, ev, mrc, dscp, ecn,
                         hop_limit) -> None:  # fmt: skip
    """build_frame's slow path: raise WireError naming the bad argument."""
    _check_bytes("Ethernet", "eth_src", eth_src, 6)
    _check_bytes("Ethernet", "eth_dst", eth_dst, 6)
    _check_bytes("IPv6", "ip_src", ip_src, 16)
    _check_bytes("IPv6", "ip_dst", ip_dst, 16)
    _check_bytes("IPv6", "final_dst", final_dst, 16)
    _check_uint("IPv6", "dscp", dscp, 6)
    _check_uint("IPv6", "ecn", ecn, 2)
    _check_uint("IPv6", "hop_limit", hop_limit, 8)
    _check_uint("EV", "ev", ev, 32)
    try:
        n = len(mrc)
    except TypeError:
        raise WireError("MRC", f"mrc must be bytes-like, got {type(mrc).__name__}") from None
    raise WireError("UDP", f"datagram too long: {UDP_SIZE + n} bytes")


@dataclass(frozen=True, slots=True)
class Frame:
    eth: Ethernet
    ip6: IPv6
    udp: UDP
    mrc: MrcPacket | None
    raw: memoryview

    @property
    def ev(self) -> int:
        """The EV this frame travels on (UDP source port and flow label)."""
        return self.udp.src_port << 16 | (self.ip6.flow_label & 0xFFFF)

    @property
    def trimmed(self) -> bool:
        """The DSCP says a switch trimmed this packet."""
        return self.ip6.dscp in _TRIMMED_DSCPS


_new_Frame = _fast_constructor(Frame)


def parse_frame(
    buf: BytesLike, *, trimmed: bool | None = None, headers_only: bool = False
) -> Frame:
    """Decode Ethernet + IPv6 + UDP + the MRC part.

    trimmed=None: decide from the DSCP (TRIMMED/TRIMMED_LASTHOP). Bytes past the IPv6 payload
    length (Ethernet padding) are ignored. headers_only=True stops after UDP (Frame.mrc None).
    The UDP checksum is not verified here (see verify_udp_checksum): on the way the IPv6
    destination is not yet the final one. Raises WireError on anything malformed.
    """
    mv = buf if type(buf) is memoryview else memoryview(buf)
    n = len(mv)
    if n < FRAME_HEADERS_SIZE:
        if n < ETH_SIZE:
            raise _truncated("Ethernet", ETH_SIZE, 0, n)
        if n < OFF_UDP:
            raise _truncated("IPv6", IPV6_SIZE, OFF_IPV6, n - OFF_IPV6)
        raise _truncated("UDP", UDP_SIZE, OFF_UDP, n - OFF_UDP)
    dst, src, et = _ETH.unpack_from(mv, 0)
    if et != ETHERTYPE_IPV6:
        raise WireError("Ethernet", f"not IPv6: ethertype 0x{et:04x}", 12)
    w0, plen, nh, hl, ip_src, ip_dst = _IP6.unpack_from(mv, OFF_IPV6)
    if w0 >> 28 != 6:
        raise WireError("IPv6", f"version {w0 >> 28}, not 6", OFF_IPV6)
    if nh != IPPROTO_UDP:
        raise WireError("IPv6", f"not UDP: next header {nh}", OFF_IPV6 + 6)
    if plen > n - OFF_UDP:
        raise WireError(
            "IPv6", f"payload length {plen} but only {n - OFF_UDP} bytes follow", OFF_IPV6 + 4
        )
    sport, dport, ulen, csum = _UDP.unpack_from(mv, OFF_UDP)
    if dport != MRC_UDP_PORT:
        raise WireError("UDP", f"not MRC port: destination port {dport}", OFF_UDP + 2)
    if ulen != plen:
        raise WireError("UDP", f"length {ulen} != IPv6 payload length {plen}", OFF_UDP + 4)
    if ulen < UDP_SIZE:
        raise WireError("UDP", f"length {ulen} < 8", OFF_UDP + 4)
    dscp = (w0 >> 22) & 0x3F
    ip6 = _new_IPv6(
        ip_src, ip_dst, plen, nh, hl, _DSCP_OF.get(dscp, dscp), _ECN_OF[(w0 >> 20) & 3],
        w0 & 0xFFFFF,
    )  # fmt: skip
    if not headers_only:
        if trimmed is None:
            trimmed = dscp == 12 or dscp == 16
        mrc = _decode_mrc(mv[OFF_BTH : OFF_UDP + plen], trimmed, OFF_BTH)
    else:
        mrc = None
    return _new_Frame(_new_Ethernet(dst, src, et), ip6, _new_UDP(sport, dport, ulen, csum), mrc, mv)


def verify_udp_checksum(frame: Frame, final_dst: BytesLike | None = None) -> bool:
    """True if the UDP checksum is right for final_dst (default: the frame's IPv6 destination,
    which is the final one once the frame has arrived)."""
    udp = bytearray(frame.raw[OFF_UDP : OFF_UDP + frame.udp.length])
    udp[UDP_OFF_CHECKSUM : UDP_OFF_CHECKSUM + 2] = b"\0\0"
    dst = frame.ip6.dst if final_dst is None else final_dst
    return udp_checksum(frame.ip6.src, dst, udp) == frame.udp.checksum


def trim_frame(frame: BytesLike, *, final_dst: BytesLike, lasthop: bool = False) -> bytes:
    """What a trimming switch forwards instead of a data frame it cannot queue.

    The frame is cut right after its MRC headers (no payload, no ICRC), its DSCP becomes
    TRIMMED (TRIMMED_LASTHOP if lasthop) with ECN kept, the IPv6 payload length and UDP length
    shrink to match, and the UDP checksum is recomputed over final_dst. Only data frames (MRC
    or RC opcodes) can be trimmed; anything else raises WireError.
    """
    mv = frame if type(frame) is memoryview else memoryview(frame)
    if len(mv) < OFF_BTH + BTH_SIZE:
        raise _truncated("BTH", BTH_SIZE, OFF_BTH, len(mv) - OFF_BTH)
    op = mv[OFF_BTH]
    if op not in _MRC_DATA_OPS and op not in _RC_DATA_OPS:
        raise WireError("BTH", f"only data packets are trimmed, not opcode 0x{op:02x}", OFF_BTH)
    size = headers_size(op, mv[OFF_BTH + 4] & 0x10 != 0)
    if len(mv) < OFF_BTH + size:
        raise _truncated("MRC", size, OFF_BTH, len(mv) - OFF_BTH)
    out = bytearray(mv[: OFF_BTH + size])
    dscp = Dscp.TRIMMED_LASTHOP if lasthop else Dscp.TRIMMED
    out[OFF_IPV6] = 0x60 | dscp >> 2
    out[OFF_IPV6 + 1] = (dscp & 3) << 6 | (out[OFF_IPV6 + 1] & 0x3F)
    ulen = UDP_SIZE + size
    _U16.pack_into(out, OFF_IPV6 + IPV6_OFF_PAYLOAD_LENGTH, ulen)
    _U16.pack_into(out, OFF_UDP + UDP_OFF_LENGTH, ulen)
    _U16.pack_into(out, OFF_UDP + UDP_OFF_CHECKSUM, 0)
    src = out[OFF_IPV6 + IPV6_OFF_SRC : OFF_IPV6 + IPV6_OFF_SRC + 16]
    _U16.pack_into(out, OFF_UDP + UDP_OFF_CHECKSUM, udp_checksum(src, final_dst, out[OFF_UDP:]))
    return bytes(out)
