"""The MRC part of a packet: everything after UDP (BTH, the headers its opcode carries, the
payload, the ICRC) as one MrcPacket, with encode_mrc/decode_mrc (the hot paths' codecs),
headers_size and the ICRC. Layouts: docs/design/wire.md; the single headers: ``headers``."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mrcnic.wire.headers import (
    _BTH,
    _IMM,
    _METH,
    _RETH,
    _RPROBE,
    _TS,
    AETH,
    BTH,
    METH,
    NACK,
    RETH,
    SACK,
    EndpointMsg,
    ImmDt,
    ReliabilityProbe,
    TimestampExt,
    _bth_from,
    _endpoint_at,
    _nack_at,
    _new_ImmDt,
    _new_METH,
    _new_ReliabilityProbe,
    _new_RETH,
    _new_TimestampExt,
    _sack_at,
    decode_aeth,
    encode_aeth,
    encode_bth,
    encode_endpoint,
    encode_imm,
    encode_meth,
    encode_nack,
    encode_reth,
    encode_rprobe,
    encode_sack,
    encode_ts,
)
from mrcnic.wire.layout import (
    AETH_SIZE,
    BTH_FLAG_TS,
    BTH_SIZE,
    ENDPOINT_SIZE,
    ICRC_SIZE,
    IMM_OPS,
    IMM_SIZE,
    METH_SIZE,
    MRC_DATA_HEADERS_SIZE,
    MRC_DATA_OPS,
    NACK_SIZE,
    RC_DATA_OPS,
    RC_RETH_OPS,
    RETH_SIZE,
    RPROBE_SIZE,
    SACK_OPS,
    SACK_SIZE,
    TS_SIZE,
    Opcode,
)
from mrcnic.wire.util import BytesLike, WireError, _truncated, fast_constructor

_ICRC = struct.Struct(">I")
_W1_TS = BTH_FLAG_TS << 24  # the TS flag in BTH word 1
_AT_TS = BTH_SIZE + METH_SIZE  # where a data packet's TS (else its RETH) starts
_DATA_HEADERS_NO_TS = MRC_DATA_HEADERS_SIZE - TS_SIZE


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


_new_MrcPacket = fast_constructor(MrcPacket)


# opcode -> (body header name, MrcPacket field, body size) for non-data opcodes
_CONTROL_BODY = {
    int(Opcode.ACK): ("SACK", "sack", SACK_SIZE),
    int(Opcode.SACK): ("SACK", "sack", SACK_SIZE),
    int(Opcode.NACK): ("NACK", "nack", NACK_SIZE),
    int(Opcode.RPROBE): ("RPROBE", "probe", RPROBE_SIZE),
    int(Opcode.EP_REQUEST): ("EndpointMsg", "endpoint", ENDPOINT_SIZE),
    int(Opcode.EP_RESPONSE): ("EndpointMsg", "endpoint", ENDPOINT_SIZE),
    int(Opcode.RC_ACK): ("AETH", "aeth", AETH_SIZE),
}
_BODY_FIELDS = ("sack", "nack", "probe", "endpoint", "aeth")
# MrcPacket field -> its body's encoder (each takes that field's header)
_BODY_ENCODER: dict[str, Callable[[Any], bytes]] = {
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
    if opcode in MRC_DATA_OPS:
        n = BTH_SIZE + METH_SIZE + RETH_SIZE + (TS_SIZE if ts_present else 0)
        return n + IMM_SIZE if opcode in IMM_OPS else n
    if opcode in RC_DATA_OPS:
        n = BTH_SIZE + (RETH_SIZE if opcode in RC_RETH_OPS else 0)
        return n + IMM_SIZE if opcode in IMM_OPS else n
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
    if op in MRC_DATA_OPS:
        meth, ts, reth, imm = pkt.meth, pkt.ts, pkt.reth, pkt.imm
        if (
            no_body
            and meth is not None
            and reth is not None
            and (ts is None) != bool(bth.ts_present)
            and (imm is None) != (op in IMM_OPS)
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
    elif op in SACK_OPS:
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


def _encode_mrc_checked(pkt: MrcPacket, trimmed: bool) -> bytes:
    """encode_mrc with every consistency check spelled out (its slow path)."""
    if not isinstance(pkt.payload, (bytes, bytearray, memoryview)):
        raise WireError("MRC", f"payload must be bytes-like, not {type(pkt.payload).__name__}")
    bth = pkt.bth
    op = bth.opcode
    out = bytearray(encode_bth(bth))
    if op in MRC_DATA_OPS:
        if pkt.meth is None or pkt.reth is None:
            raise WireError("MRC", f"data opcode 0x{op:02x} needs meth and reth")
        if (pkt.ts is not None) != bool(bth.ts_present):
            raise WireError("TS", "timestamp extension present iff BTH.ts_present")
        out += encode_meth(pkt.meth)
        if pkt.ts is not None:
            out += encode_ts(pkt.ts)
        out += encode_reth(pkt.reth)
        _extra: tuple[str, ...] = ("sack", "nack", "probe", "endpoint", "aeth")
    elif op in RC_DATA_OPS:
        if (pkt.reth is not None) != (op in RC_RETH_OPS):
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
    if op in MRC_DATA_OPS or op in RC_DATA_OPS:
        if (pkt.imm is not None) != (op in IMM_OPS):
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


def _decode_mrc(mv: memoryview, trimmed: bool, base: int, rc_frame: bool = False) -> MrcPacket:
    # base: offset of mv[0] in the caller's frame, so errors name frame offsets. rc_frame: mv
    # is a whole frame's, whose RC packet carries IBTA's ICRC, which the caller checks.
    n = len(mv)
    if n < BTH_SIZE:
        raise _truncated("BTH", BTH_SIZE, base, n)
    op, b1, pkey, w1, w2 = _BTH.unpack_from(mv, 0)
    if op in MRC_DATA_OPS:
        ts_present = w1 & _W1_TS
        imm_present = op in IMM_OPS
        hdr = MRC_DATA_HEADERS_SIZE if ts_present else _DATA_HEADERS_NO_TS
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
        meth = _new_METH(*_METH.unpack_from(mv, BTH_SIZE))
        if ts_present:
            ts = _new_TimestampExt(*_TS.unpack_from(mv, _AT_TS))
            reth: RETH | None = _new_RETH(*_RETH.unpack_from(mv, _AT_TS + TS_SIZE))
        else:
            ts = None
            reth = _new_RETH(*_RETH.unpack_from(mv, _AT_TS))
        imm = _new_ImmDt(*_IMM.unpack_from(mv, hdr - IMM_SIZE)) if imm_present else None
        return _new_MrcPacket(
            _bth_from(op, b1, pkey, w1, w2), meth, ts, reth, imm, None, None, None, None, None,
            payload, crc,
        )  # fmt: skip
    if op in RC_DATA_OPS:
        reth_present = op in RC_RETH_OPS
        imm_present = op in IMM_OPS
        hdr = BTH_SIZE + (RETH_SIZE if reth_present else 0) + (IMM_SIZE if imm_present else 0)
        if n < hdr:
            _data_truncated(n, base, (False, False, reth_present, imm_present))
        if trimmed:
            payload = _EMPTY
            crc = None
        else:
            if n < hdr + ICRC_SIZE:
                raise _truncated("ICRC", ICRC_SIZE, base + hdr, n - hdr)
            # a whole frame's RC packet carries IBTA's ICRC (parse_frame checks it); alone,
            # as the packet codec writes it, ours
            crc = _ICRC.unpack_from(mv, n - ICRC_SIZE)[0] if rc_frame else _check_icrc(mv, n, base)
            payload = mv[hdr : n - ICRC_SIZE]
        reth = _new_RETH(*_RETH.unpack_from(mv, BTH_SIZE)) if reth_present else None
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
        if rc_frame and op == _RC_ACK:  # IBTA's ICRC (over IP and UDP): parse_frame checks it
            crc = _ICRC.unpack_from(mv, n - ICRC_SIZE)[0]
        else:
            crc = _check_icrc(mv, n, base)
    bth = _bth_from(op, b1, pkey, w1, w2)
    try:
        if field == "sack":
            return _new_MrcPacket(
                bth, *_NONE5, _sack_at(mv, BTH_SIZE), None, None, None, None, _EMPTY, crc
            )
        if field == "nack":
            return _new_MrcPacket(
                bth, *_NONE5, None, _nack_at(mv, BTH_SIZE), None, None, None, _EMPTY, crc
            )
        if field == "probe":
            return _new_MrcPacket(
                bth, *_NONE5, None, None, _new_ReliabilityProbe(*_RPROBE.unpack_from(mv, BTH_SIZE)),
                None, None, _EMPTY, crc,
            )  # fmt: skip
        if field == "endpoint":
            return _new_MrcPacket(
                bth, *_NONE5, None, None, None, _endpoint_at(mv, BTH_SIZE), None, _EMPTY, crc
            )
        return _new_MrcPacket(
            bth, *_NONE5, None, None, None, None, decode_aeth(mv, BTH_SIZE), _EMPTY, crc
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


_RC_ACK = int(Opcode.RC_ACK)


def _check_icrc(mv: memoryview, n: int, base: int) -> int:
    (got,) = _ICRC.unpack_from(mv, n - ICRC_SIZE)
    want = zlib.crc32(mv[: n - ICRC_SIZE])
    if got != want:
        reason = f"mismatch: carried 0x{got:08x}, computed 0x{want:08x}"
        raise WireError("ICRC", reason, base + n - ICRC_SIZE)
    return got
