"""Every wire fact in one place: sizes, frame offsets, masks, ports, the enums, the opcode sets
and predicates, and where DSCP and ECN sit in the IPv6 traffic class.

The codecs (headers, packet, frame), the NIC's hot paths (``mrcnic.transport.qp``,
``mrcnic.rocev2.qp``), the simulator, the switch (``mrcswitch``) and the C core
(``csrc/mrc_wire.h``, held to this module by tests/unit/test_wire_facts.py) take their numbers
from here rather than writing them again. Byte layouts and worked examples: docs/design/wire.md.
Sets hold plain ints (not enum members), so membership tests in hot paths stay cheap.
"""

from __future__ import annotations

from enum import IntEnum

# Bumped when a fact C depends on changes; csrc/mrc_wire.c reports the value it was built with.
LAYOUT_VERSION = 1

# --------------------------------------------------------------------------------------------
# Sizes

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
MAC_SIZE = 6
IPV6_ADDR_SIZE = 16
USID_SIZE = 2  # one uSID of the carrier, 16 bits (address plan: docs/design/architecture.md)

MRC_DATA_HEADERS_SIZE = BTH_SIZE + METH_SIZE + TS_SIZE + RETH_SIZE  # 40
FRAME_HEADERS_SIZE = ETH_SIZE + IPV6_SIZE + UDP_SIZE  # 62

# --------------------------------------------------------------------------------------------
# Numbers, masks, defaults

ETHERTYPE_IPV6 = 0x86DD
# IEEE 802.1Qbb priority flow control (PFC): a MAC Control frame (docs/design/wire.md, "PFC")
ETHERTYPE_MAC_CONTROL = 0x8808
PFC_OPCODE = 0x0101
PFC_DST_MAC = bytes.fromhex("0180c2000001")  # the MAC Control multicast address
PFC_PRIORITIES = 8
PAUSE_QUANTUM_BITS = 512  # one pause quantum: the time 512 bits take at the link's rate
MIN_FRAME_BYTES = 60  # an Ethernet frame without its FCS, padded to this length
IPV6_VERSION = 6
IPPROTO_UDP = 17
MRC_UDP_PORT = 4791
EV_PROBE_QPN = 0x2
PSN_MASK = 0xFFFFFF
QPN_MASK = 0xFFFFFF
EV_MASK = 0xFFFFFFFF
FLOW_LABEL_MASK = 0xFFFFF
# the EV split: its low EV_LABEL_BITS ride in the flow label, the rest in the UDP source port
EV_LABEL_BITS = 16
EV_LABEL_MASK = (1 << EV_LABEL_BITS) - 1
DEFAULT_HOP_LIMIT = 64
DEFAULT_PKEY = 0xFFFF

# --------------------------------------------------------------------------------------------
# Offsets

# Inside the IPv6 header (add OFF_IPV6 for a frame offset):
IPV6_OFF_PAYLOAD_LENGTH = 4
IPV6_OFF_NEXT_HEADER = 6
IPV6_OFF_HOP_LIMIT = 7
IPV6_OFF_SRC = 8
IPV6_OFF_DST = 24
# Inside the UDP header (add OFF_UDP for a frame offset):
UDP_OFF_DST_PORT = 2
UDP_OFF_LENGTH = 4
UDP_OFF_CHECKSUM = 6
# Inside the BTH (add OFF_BTH for a frame offset): the byte with FECN BECN RTX TS (BTH_FLAG_*)
BTH_OFF_FLAGS = 4

# Offsets of a whole frame (Ethernet first), for hot paths that peek without decoding.
OFF_ETHERTYPE = 2 * MAC_SIZE  # 12
OFF_IPV6 = ETH_SIZE  # 14
OFF_TC_HI = OFF_IPV6  # 14: version (4 bits) | DSCP's upper 4 bits
OFF_TC_LO = OFF_IPV6 + 1  # 15: DSCP's lower 2 bits | ECN (2) | flow label's upper 4 bits
OFF_PAYLOAD_LENGTH = OFF_IPV6 + IPV6_OFF_PAYLOAD_LENGTH  # 18
OFF_NEXT_HEADER = OFF_IPV6 + IPV6_OFF_NEXT_HEADER  # 20
OFF_HOP_LIMIT = OFF_IPV6 + IPV6_OFF_HOP_LIMIT  # 21
OFF_SRC = OFF_IPV6 + IPV6_OFF_SRC  # 22
OFF_DST = OFF_IPV6 + IPV6_OFF_DST  # 38
OFF_UDP = OFF_IPV6 + IPV6_SIZE  # 54: also where the Ethernet + IPv6 headers end
OFF_UDP_DST_PORT = OFF_UDP + UDP_OFF_DST_PORT  # 56
OFF_UDP_LENGTH = OFF_UDP + UDP_OFF_LENGTH  # 58
OFF_UDP_CHECKSUM = OFF_UDP + UDP_OFF_CHECKSUM  # 60
OFF_BTH = OFF_UDP + UDP_SIZE  # 62
OFF_BTH_FLAGS = OFF_BTH + BTH_OFF_FLAGS  # 66
OFF_METH = OFF_BTH + BTH_SIZE  # 74

# --------------------------------------------------------------------------------------------
# BTH bits

BTH_FLAG_FECN = 0x80  # in the byte at BTH_OFF_FLAGS (the top byte of BTH word 1)
BTH_FLAG_BECN = 0x40
BTH_FLAG_RTX = 0x20  # a retransmission
BTH_FLAG_TS = 0x10  # a timestamp extension follows METH
BTH_ACKREQ = 0x80000000  # in BTH word 2 (bytes 8..12), above the 24-bit PSN

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
    LOSSLESS = 26  # the RoCEv2 baseline's data when the lab has PFC (never MRC's)
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


# --------------------------------------------------------------------------------------------
# Opcode sets and predicates

_O = Opcode


def _ops(*members: Opcode) -> frozenset[int]:
    return frozenset(int(m) for m in members)


MRC_DATA_OPS = _ops(
    _O.WRITE_FIRST, _O.WRITE_MIDDLE, _O.WRITE_LAST, _O.WRITE_LAST_IMM, _O.WRITE_ONLY,
    _O.WRITE_ONLY_IMM,
)  # fmt: skip
RC_DATA_OPS = _ops(
    _O.RC_WRITE_FIRST, _O.RC_WRITE_MIDDLE, _O.RC_WRITE_LAST, _O.RC_WRITE_LAST_IMM,
    _O.RC_WRITE_ONLY, _O.RC_WRITE_ONLY_IMM,
)  # fmt: skip
MRC_IMM_OPS = _ops(_O.WRITE_LAST_IMM, _O.WRITE_ONLY_IMM)  # an ImmDt follows RETH
RC_IMM_OPS = _ops(_O.RC_WRITE_LAST_IMM, _O.RC_WRITE_ONLY_IMM)
IMM_OPS = MRC_IMM_OPS | RC_IMM_OPS
RC_RETH_OPS = _ops(_O.RC_WRITE_FIRST, _O.RC_WRITE_ONLY, _O.RC_WRITE_ONLY_IMM)  # RC FIRST/ONLY
# a message starts here (FIRST or ONLY) / ends here (LAST or ONLY, with or without immediate)
MRC_FIRST_OPS = _ops(_O.WRITE_FIRST, _O.WRITE_ONLY, _O.WRITE_ONLY_IMM)
RC_FIRST_OPS = _ops(_O.RC_WRITE_FIRST, _O.RC_WRITE_ONLY, _O.RC_WRITE_ONLY_IMM)
MRC_LAST_OPS = _ops(_O.WRITE_LAST, _O.WRITE_LAST_IMM, _O.WRITE_ONLY, _O.WRITE_ONLY_IMM)
RC_LAST_OPS = _ops(_O.RC_WRITE_LAST, _O.RC_WRITE_LAST_IMM, _O.RC_WRITE_ONLY, _O.RC_WRITE_ONLY_IMM)
FIRST_OPS = MRC_FIRST_OPS | RC_FIRST_OPS
LAST_OPS = MRC_LAST_OPS | RC_LAST_OPS
SACK_OPS = _ops(_O.ACK, _O.SACK)  # the body is a SACK (ACK: bitmap 0)
del _O


def is_data(op: int) -> bool:
    """An MRC data opcode (RDMA Write family, 0xC6-0xCB)."""
    return op in MRC_DATA_OPS


def is_rc_data(op: int) -> bool:
    """A RoCEv2 RC data opcode of the baseline (0x06-0x0B)."""
    return op in RC_DATA_OPS


def has_imm(op: int) -> bool:
    """The opcode carries an ImmDt header (write with immediate, LAST or ONLY)."""
    return op in IMM_OPS


def has_reth(op: int) -> bool:
    """The opcode carries a RETH: every MRC data packet; RC only on FIRST/ONLY."""
    return op in MRC_DATA_OPS or op in RC_RETH_OPS


def is_first(op: int) -> bool:
    """The packet starts a message (FIRST or ONLY)."""
    return op in FIRST_OPS


def is_last(op: int) -> bool:
    """The packet ends a message (LAST or ONLY, with or without immediate)."""
    return op in LAST_OPS


# --------------------------------------------------------------------------------------------
# DSCP and ECN in the IPv6 traffic class

# The first 32-bit word of IPv6 is version (4) | DSCP (6) | ECN (2) | flow label (20):
IPV6_W0_VERSION = IPV6_VERSION << 28  # 0x60000000, the word with every other field 0
DSCP_SHIFT = 22
ECN_SHIFT = 20
# In the frame's bytes the traffic class straddles OFF_TC_HI (DSCP >> 2 in the low nibble) and
# OFF_TC_LO (DSCP & 3 in bits 7-6, ECN in bits 5-4):
TC_HI_DSCP_MASK = 0x0F
TC_LO_DSCP_MASK = 0xC0
TC_LO_ECN_MASK = 0x30  # OR it in to mark CE (ECN 3)
TC_LO_ECN_SHIFT = 4

TRIMMED_DSCPS = frozenset((int(Dscp.TRIMMED), int(Dscp.TRIMMED_LASTHOP)))  # a trimmed header
TRIMMABLE_DSCPS = frozenset((int(Dscp.TRIMMABLE), int(Dscp.TRIMMABLE_RETX)))  # may be trimmed
# what a switch serves ahead of data, and never trims: control and trimmed headers
HIGH_PRIORITY_DSCPS = frozenset((int(Dscp.CONTROL), *TRIMMED_DSCPS))
ECN_CAPABLE = frozenset((int(Ecn.ECT0), int(Ecn.ECT1)))  # may be marked CE


def frame_dscp(frame: bytes | bytearray | memoryview) -> int:
    """The DSCP of an Ethernet + IPv6 frame."""
    return (frame[OFF_TC_HI] & TC_HI_DSCP_MASK) << 2 | frame[OFF_TC_LO] >> 6


def frame_ecn(frame: bytes | bytearray | memoryview) -> int:
    """The ECN codepoint of an Ethernet + IPv6 frame."""
    return (frame[OFF_TC_LO] & TC_LO_ECN_MASK) >> TC_LO_ECN_SHIFT


def dscp_ecn(frame: bytes | bytearray | memoryview) -> tuple[int, int]:
    """DSCP and ECN of an Ethernet + IPv6 frame (traffic class = DSCP << 2 | ECN)."""
    tc = (frame[OFF_TC_HI] & TC_HI_DSCP_MASK) << 4 | frame[OFF_TC_LO] >> 4
    return tc >> 2, tc & 3


def set_dscp(frame: bytearray | memoryview, dscp: int) -> None:
    """Write the DSCP of an Ethernet + IPv6 frame in place (version, ECN, flow label kept)."""
    frame[OFF_TC_HI] = (frame[OFF_TC_HI] & ~TC_HI_DSCP_MASK & 0xFF) | dscp >> 2
    frame[OFF_TC_LO] = (frame[OFF_TC_LO] & ~TC_LO_DSCP_MASK & 0xFF) | (dscp & 3) << 6


def set_ce(frame: bytearray | memoryview) -> None:
    """Mark an Ethernet + IPv6 frame Congestion Experienced, in place."""
    frame[OFF_TC_LO] |= TC_LO_ECN_MASK
