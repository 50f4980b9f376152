"""Scapy layers for MRC, so a capture of our traffic dissects field by field.

    >>> from scapy.all import rdpcap
    >>> import mrcnic.wire.scapy_layers  # binds MRC_BTH to UDP destination port 4791
    >>> rdpcap("capture.pcap")[0].show()

After MRC_BTH the layers follow the opcode and flags, exactly as mrcnic.wire decodes them
(layouts in docs/design/wire.md):

    MRC data (0xC6-0xCB): MRC_METH, [MRC_TS if BTH.ts_present], MRC_RETH, [MRC_ImmDt], MRC_Payload
    ACK/SACK (0xD1/0xDC): MRC_SACK, MRC_Payload ; NACK (0xDD): MRC_NACK, MRC_Payload
    RPROBE (0xDE): MRC_RProbe, MRC_Payload ; EP_REQUEST/EP_RESPONSE (0xD8/0xD9): MRC_Endpoint, ...
    RC data (0x06-0x0B): [MRC_RETH on FIRST/ONLY], [MRC_ImmDt], MRC_Payload ; RC_ACK: MRC_AETH, ...

MRC_Payload holds the payload (`load`, empty for control packets) and the ICRC trailer
(`icrc`; left None when building, it is computed over BTH..payload by MRC_BTH). A trimmed
packet (IPv6 DSCP TRIMMED or TRIMMED_LASTHOP) ends after its headers: no MRC_Payload.
Field names are those of the mrcnic.wire dataclasses; reserved bits are `rsvd*` fields.

Importing this module replaces scapy.contrib.roce's binding of UDP port 4791, if loaded.
"""

from __future__ import annotations

import struct
import sys
import zlib

from mrcnic.optional import MissingExtra, message

try:
    from scapy.fields import (
        BitEnumField,
        BitField,
        ByteEnumField,
        IntField,
        LongField,
        ShortField,
        StrLenField,
        X3BytesField,
        XBitField,
        XByteField,
        XIntField,
        XLongField,
        XShortField,
    )
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Packet, Padding, Raw, bind_layers, split_layers
except ImportError:  # the 'capture' extra
    raise MissingExtra(message("scapy", "the scapy layers (mrcnic.wire.scapy_layers)")) from None

from mrcnic import wire

_OPCODE_NAMES = {int(op): op.name for op in wire.Opcode}
_TRIMMED_DSCPS = (int(wire.Dscp.TRIMMED), int(wire.Dscp.TRIMMED_LASTHOP))


def _bth_of(layer: Packet | None) -> MRC_BTH | None:
    while layer is not None and not isinstance(layer, MRC_BTH):
        layer = layer.underlayer
    return layer


def _is_trimmed(bth: MRC_BTH) -> bool:
    """A packet is trimmed when the IPv6 header below it says so (DSCP 12 or 16)."""
    layer = bth.underlayer
    while layer is not None and not isinstance(layer, IPv6):
        layer = layer.underlayer
    return layer is not None and (layer.tc >> 2) in _TRIMMED_DSCPS


def _after(layer: Packet, payload: bytes):
    """The layer that follows `layer`, chosen by the BTH opcode and flags."""
    bth = _bth_of(layer)
    if bth is None:
        return Raw
    op = bth.opcode
    if wire.is_data(op):
        chain: list[type[Packet]] = [MRC_METH]
        if bth.ts_present:
            chain.append(MRC_TS)
        chain.append(MRC_RETH)
        if wire.has_imm(op):
            chain.append(MRC_ImmDt)
    elif wire.is_rc_data(op):
        chain = [MRC_RETH] if wire.has_reth(op) else []
        if wire.has_imm(op):
            chain.append(MRC_ImmDt)
    elif op in _BODY_LAYER:
        chain = [_BODY_LAYER[op]]
    else:
        return Raw  # unknown opcode: leave the bytes undissected
    # chain: the headers after BTH; find the one after this layer
    if isinstance(layer, MRC_BTH):
        i = 0
    elif type(layer) in chain:
        i = chain.index(type(layer)) + 1
    else:
        return Raw  # a layer stacked by hand where the opcode says it does not belong
    if i < len(chain):
        return chain[i]
    return Padding if _is_trimmed(bth) else MRC_Payload


class _MrcLayer(Packet):
    def guess_payload_class(self, payload: bytes):
        return _after(self, payload)


class MRC_BTH(_MrcLayer):
    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", 0xC6, _OPCODE_NAMES),
        BitField("se", 0, 1),
        BitField("mig", 0, 1),
        BitField("pad_count", 0, 2),
        BitField("tver", 0, 4),
        XShortField("pkey", 0xFFFF),
        BitField("fecn", 0, 1),
        BitField("becn", 0, 1),
        BitField("rtx", 0, 1),
        BitField("ts_present", 0, 1),
        BitField("rsvd", 0, 4),
        X3BytesField("dest_qp", 0),
        BitField("ack_req", 0, 1),
        BitField("rsvd2", 0, 7),
        BitField("psn", 0, 24),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        # The ICRC covers this header and everything after it up to the ICRC itself, so it
        # can only be filled in here, once the whole MRC part is built.
        trailer = self.getlayer(MRC_Payload)
        if trailer is not None and trailer.icrc is None and len(pay) >= wire.ICRC_SIZE:
            body = pkt + pay[: -wire.ICRC_SIZE]
            pay = pay[: -wire.ICRC_SIZE] + struct.pack(">I", zlib.crc32(body))
        return pkt + pay


class MRC_METH(_MrcLayer):
    name = "MRC METH"
    fields_desc = [ShortField("msn", 0), ShortField("rqmsn", 0)]


class MRC_TS(_MrcLayer):
    name = "MRC transmit timestamp"
    fields_desc = [LongField("tx_ts_ns", 0)]


class MRC_RETH(_MrcLayer):
    name = "MRC RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("length", 0)]


class MRC_ImmDt(_MrcLayer):
    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRC_SACK(_MrcLayer):
    name = "MRC SACK"
    fields_desc = [
        BitEnumField("mark", 0, 2, {int(m): m.name for m in wire.SackMark}),
        BitField("ece", 0, 1),
        BitField("rsvd", 0, 5),
        BitField("cack_psn", 0, 24),
        ShortField("sack_offset", 0),
        BitField("rsvd2", 0, 1),
        BitField("rcv_cwnd_pen", 0, 7),
        XByteField("rsvd3", 0),
        XLongField("bitmap", 0),
        XIntField("ev", 0),
        ShortField("ooo_count", 0),
        XShortField("rsvd4", 0),
        LongField("reflected_ts_ns", 0),
        LongField("received_bytes", 0),
    ]


class MRC_NACK(_MrcLayer):
    name = "MRC NACK"
    fields_desc = [
        ByteEnumField("reason", 1, {int(r): r.name for r in wire.NackReason}),
        BitField("psn", 0, 24),
        XIntField("ev", 0),
        XByteField("rsvd", 0),
        BitField("cack_psn", 0, 24),
        LongField("reflected_ts_ns", 0),
    ]


class MRC_RProbe(_MrcLayer):
    name = "MRC reliability probe"
    fields_desc = [IntField("probe_id", 0), XIntField("ev", 0), LongField("tx_ts_ns", 0)]


class MRC_Endpoint(_MrcLayer):
    name = "MRC endpoint message"
    fields_desc = [
        ByteEnumField("kind", 1, {int(k): k.name for k in wire.EndpointKind}),
        XBitField("rsvd", 0, 24),
        IntField("ident", 0),
        XIntField("ev", 0),
        XIntField("port_mask", 0),
        LongField("ts_ns", 0),
    ]


class MRC_AETH(_MrcLayer):
    name = "RoCEv2 AETH"
    fields_desc = [
        ByteEnumField("syndrome", 0, {int(s): s.name for s in wire.AethSyndrome}),
        BitField("msn", 0, 24),
    ]


class MRC_Payload(Packet):
    """The payload (empty for control packets) and the ICRC trailer."""

    name = "MRC payload + ICRC"
    fields_desc = [
        StrLenField("load", b"", length_from=lambda p: max(p._left - wire.ICRC_SIZE, 0)),
        XIntField("icrc", None),  # None: a placeholder that MRC_BTH.post_build fills in
    ]
    _left = 0

    def pre_dissect(self, s: bytes) -> bytes:
        self._left = len(s)
        return s

    def guess_payload_class(self, payload: bytes):
        return Padding


_BODY_LAYER = {
    int(wire.Opcode.ACK): MRC_SACK,
    int(wire.Opcode.SACK): MRC_SACK,
    int(wire.Opcode.NACK): MRC_NACK,
    int(wire.Opcode.RPROBE): MRC_RProbe,
    int(wire.Opcode.EP_REQUEST): MRC_Endpoint,
    int(wire.Opcode.EP_RESPONSE): MRC_Endpoint,
    int(wire.Opcode.RC_ACK): MRC_AETH,
}

MRC_LAYERS = (
    MRC_BTH,
    MRC_METH,
    MRC_TS,
    MRC_RETH,
    MRC_ImmDt,
    MRC_SACK,
    MRC_NACK,
    MRC_RProbe,
    MRC_Endpoint,
    MRC_AETH,
    MRC_Payload,
)

if "scapy.contrib.roce" in sys.modules:  # only one layer can own UDP port 4791
    split_layers(UDP, sys.modules["scapy.contrib.roce"].BTH, dport=wire.MRC_UDP_PORT)
bind_layers(UDP, MRC_BTH, dport=wire.MRC_UDP_PORT)
