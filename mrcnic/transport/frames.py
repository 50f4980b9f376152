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
_HALF = 1 << 23
#: messages a responder tracks ahead of the next one to complete (MSNs are 16 bits): the
#: requester never has more under way, and a data packet whose MSN is further ahead is refused
MSN_WINDOW = 1 << 14
MSN_MASK = 0xFFFF

# -- frame layout (offsets in a whole Ethernet frame; the facts are mrcnic.wire.layout's) ------
_OFF_UDP = layout.OFF_UDP
_OFF_UCSUM = layout.OFF_UDP_CHECKSUM
_OFF_BTH = layout.OFF_BTH
_OFF_SRC = layout.OFF_SRC
_OFF_DST = layout.OFF_DST
# Ethernet, IPv6, UDP, BTH, METH, TS, RETH (102 bytes), and the same + ImmDt (106 bytes)
_FRAME_DATA = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQII")
_FRAME_DATA_IMM = struct.Struct(">6s6sHIHBB16s16sHHHHBBHIIHHQQIII")
_FRAME_CTRL = struct.Struct(">6s6sHIHBB16s16sHHHHBBHII")  # Ethernet .. BTH (74 bytes)
_SACK_BODY = "IHBxQIH2xQQ"  # wire.SACK (40 bytes)
_FRAME_SACK = struct.Struct(_FRAME_CTRL.format + _SACK_BODY)  # Ethernet .. SACK body
_CTRL_MAX_BODY = layout.SACK_SIZE  # the largest control body
_IMM = struct.Struct(">I")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_NACK = struct.Struct(">IIIQ")
_RPROBE = struct.Struct(">IIQ")
_ENDPOINT = struct.Struct(">B3xIIIQ")
_RX_HEAD = struct.Struct(">HIHBB")  # at 12: ethertype, ip w0, payload length, next header, hop
_RX_DATA = struct.Struct(">IIHHQQII")  # at 66: BTH words 1-2, METH, TS, RETH
_RX_SACK = struct.Struct(">IIIHBxQIH2xQQ")  # at 66: BTH words 1-2, the SACK body
_SACK_FRAME_END = _OFF_BTH + layout.BTH_SIZE + layout.SACK_SIZE + layout.ICRC_SIZE

_TS_BIT = layout.BTH_FLAG_TS
_RTX_BIT = layout.BTH_FLAG_RTX
_ACKREQ = layout.BTH_ACKREQ
_O = layout.Opcode
_OP_FIRST, _OP_MIDDLE, _OP_LAST = int(_O.WRITE_FIRST), int(_O.WRITE_MIDDLE), int(_O.WRITE_LAST)
_OP_LAST_IMM, _OP_ONLY, _OP_ONLY_IMM = (
    int(_O.WRITE_LAST_IMM), int(_O.WRITE_ONLY), int(_O.WRITE_ONLY_IMM)
)  # fmt: skip
_OP_ACK, _OP_EP_REQ, _OP_EP_RESP = int(_O.ACK), int(_O.EP_REQUEST), int(_O.EP_RESPONSE)
_OP_SACK, _OP_NACK, _OP_RPROBE = int(_O.SACK), int(_O.NACK), int(_O.RPROBE)
del _O
# the hot paths test "op in [first, only_imm]" and "op < last" on these: hold them to the layout
assert frozenset(range(_OP_FIRST, _OP_ONLY_IMM + 1)) == layout.MRC_DATA_OPS
_DSCP_DATA_ECT0 = (
    int(wire.Dscp.TRIMMABLE) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
_DSCP_CTRL_ECT0 = (
    int(wire.Dscp.CONTROL) << layout.DSCP_SHIFT | int(wire.Ecn.ECT0) << layout.ECN_SHIFT
)
_PLACE_OK = PlaceStatus.OK
_MARK_SKIP_ONCE = int(wire.SackMark.SKIP_ONCE)
_MARK_ALWAYS_SKIP = int(wire.SackMark.ALWAYS_SKIP)
_crc32 = zlib.crc32
_from_bytes = int.from_bytes
_csum_partial = fast.csum_partial
_DSCP_TRIMMED = int(wire.Dscp.TRIMMED)
_DSCP_TRIMMED_LH = int(wire.Dscp.TRIMMED_LASTHOP)
_DSCPS_TRIMMED = layout.TRIMMED_DSCPS
_IMM_OPS = layout.MRC_IMM_OPS


#: see QueuePair._make_tmpl
_Template = tuple[bytes, bytes, int, bytes, bytes, int, int]
