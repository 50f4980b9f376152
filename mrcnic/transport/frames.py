"""The queue pair's frame layouts: struct formats over whole Ethernet frames, and the wire
facts the hot paths read as module globals (every value comes from ``mrcnic.wire.layout``;
``tests/unit/test_qp_frames.py`` checks the bytes against ``mrcnic.wire``)."""

from __future__ import annotations

import struct
import zlib

from mrcnic import fast, wire
from mrcnic.transport.memory import PlaceStatus
from mrcnic.wire import layout

PSN_MASK = layout.PSN_MASK
PSN_HALF = 1 << 23
#: messages a responder tracks ahead of the next one to complete (MSNs are 16 bits): the
#: requester never has more under way, and a data packet whose MSN is further ahead is refused
MSN_WINDOW = 1 << 14
MSN_MASK = 0xFFFF

# -- frame layout (offsets in a whole Ethernet frame; the facts are mrcnic.wire.layout's) ------
OFF_UDP = layout.OFF_UDP
OFF_UCSUM = layout.OFF_UDP_CHECKSUM
OFF_BTH = layout.OFF_BTH
OFF_SRC = layout.OFF_SRC
OFF_DST = layout.OFF_DST
# Ethernet, IPv6, UDP, BTH, METH, TS, RETH (102 bytes), and the same + ImmDt (106 bytes)
FRAME_DATA = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQII")
FRAME_DATA_IMM = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQIII")
FRAME_CTRL = struct.Struct(">6s6sHIHBB16s16sHHHHBBHII")  # Ethernet .. BTH (74 bytes)
_SACK_BODY = "IHBxQIH2xQQ"  # wire.SACK (40 bytes)
FRAME_SACK = struct.Struct(FRAME_CTRL.format + _SACK_BODY)  # Ethernet .. SACK body
CTRL_MAX_BODY = layout.SACK_SIZE  # the largest control body
IMM = struct.Struct(">I")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
NACK = struct.Struct(">IIIQ")
RPROBE = struct.Struct(">IIQ")
ENDPOINT = struct.Struct(">B3xIIIQ")
RX_HEAD = struct.Struct(">HIHBB")  # at 12: ethertype, ip w0, payload length, next header, hop
RX_DATA = struct.Struct(">IIHHQQII")  # at 66: BTH words 1-2, METH, TS, RETH
RX_DATA_NO_TS = struct.Struct(">IIHHQII")  # the same without TS (BTH T flag clear)
TS_SIZE = layout.TS_SIZE
RX_SACK = struct.Struct(">IIIHBxQIH2xQQ")  # at 66: BTH words 1-2, the SACK body
SACK_FRAME_END = OFF_BTH + layout.BTH_SIZE + layout.SACK_SIZE + layout.ICRC_SIZE

TS_BIT = layout.BTH_FLAG_TS
RTX_BIT = layout.BTH_FLAG_RTX
ACKREQ = layout.BTH_ACKREQ
_O = layout.Opcode
OP_FIRST, OP_MIDDLE, OP_LAST = int(_O.WRITE_FIRST), int(_O.WRITE_MIDDLE), int(_O.WRITE_LAST)
OP_LAST_IMM, OP_ONLY, OP_ONLY_IMM = (
    int(_O.WRITE_LAST_IMM), int(_O.WRITE_ONLY), int(_O.WRITE_ONLY_IMM)
)  # fmt: skip
OP_ACK, OP_EP_REQ, OP_EP_RESP = int(_O.ACK), int(_O.EP_REQUEST), int(_O.EP_RESPONSE)
OP_SACK, OP_NACK, OP_RPROBE = int(_O.SACK), int(_O.NACK), int(_O.RPROBE)
del _O
# the hot paths test "op in [first, only_imm]" and "op < last" on these: hold them to the layout
assert frozenset(range(OP_FIRST, OP_ONLY_IMM + 1)) == layout.MRC_DATA_OPS
DSCP_DATA_ECT0 = (
    int(wire.Dscp.TRIMMABLE) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
DSCP_CTRL_ECT0 = (
    int(wire.Dscp.CONTROL) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
PLACE_OK = PlaceStatus.OK
MARK_SKIP_ONCE = int(wire.SackMark.SKIP_ONCE)
MARK_ALWAYS_SKIP = int(wire.SackMark.ALWAYS_SKIP)
crc32 = zlib.crc32
from_bytes = int.from_bytes
csum_partial = fast.csum_partial
DSCP_TRIMMED = int(wire.Dscp.TRIMMED)
DSCP_TRIMMED_LH = int(wire.Dscp.TRIMMED_LASTHOP)
DSCPS_TRIMMED = layout.TRIMMED_DSCPS
IMM_OPS = layout.MRC_IMM_OPS


#: see QueuePair._make_tmpl
Template = tuple[bytes, bytes, int, bytes, bytes, int, int]
