"""Trimming: what an egress queue does with a data frame it has no room for (the one rule).

A data frame that would take its queue past the buffer (:func:`overflows`) is, on a port
that trims, cut to its headers if it is *trimmable*, and the header is queued at high
priority; anything else is dropped. Trimmable (docs/switch.md, docs/design/wire.md): DSCP TRIMMABLE
or TRIMMABLE_RETX, UDP to port 4791, an MRC data opcode (RDMA Write First..Only with
Immediate; never RoCEv2's RC writes, which travel as NO_TRIM) and complete MRC headers
(:func:`header_end`). The cut is ``wire.trim_frame``: max(keep_bytes, the headers) bytes,
never more than the frame has; DSCP TRIMMED, or TRIMMED_LASTHOP on a last-hop port, ECN
kept; IPv6 payload length and UDP length fixed; UDP checksum over the final destination
(the current one shifted until end of carrier with an lblen-bit locator block).

Callers: the switch's Python queue (``mrcswitch.queue.EgressQueue``) and the simulator's
links (``mrcnic.sim.fabric.Link``). The switch's C queue (csrc/mrc_equeue.c) does the same in
C and tests/unit/test_trim_parity.py holds all three to this module. Where the header then
waits is the caller's: the switch's bounded high class (full: the header is dropped too),
the simulator's high priority, which waits for no data.
"""

from __future__ import annotations

from dataclasses import dataclass

from mrcnic.wire import layout
from mrcnic.wire.frame import trim_frame

__all__ = ["TrimRule", "header_end", "overflows", "trim"]

_TRIMMABLE_DSCPS = layout.TRIMMABLE_DSCPS
_OFF_TC_HI = layout.OFF_TC_HI
_OFF_TC_LO = layout.OFF_TC_LO
_DSCP_HI = layout.TC_HI_DSCP_MASK
_MIN_LEN = layout.OFF_BTH + layout.BTH_SIZE
_OFF_NH = layout.OFF_NEXT_HEADER
_OFF_DPORT = layout.OFF_UDP_DST_PORT
_OFF_BTH = layout.OFF_BTH
_OFF_FLAGS = layout.OFF_BTH_FLAGS
_TS_FLAG = layout.BTH_FLAG_TS
_DATA_OPCODES = layout.MRC_DATA_OPS
_IMM_OPCODES = layout.MRC_IMM_OPS
_DATA_END = _OFF_BTH + layout.BTH_SIZE + layout.METH_SIZE + layout.RETH_SIZE  # no TS, no ImmDt


def overflows(queued_bytes: float, frame_bytes: int, buffer_bytes: int) -> bool:
    """The frame does not fit: it would take the queue past its buffer (a frame that exactly
    fills it fits)."""
    return queued_bytes + frame_bytes > buffer_bytes


def header_end(frame: bytes | bytearray | memoryview) -> int | None:
    """Offset just past the MRC data headers (BTH METH [TS] RETH [ImmDt]), or None when the
    frame is not a complete MRC data packet over UDP to port 4791 (then it is not trimmable).
    Never raises: any bytes may reach a switch's queue."""
    if len(frame) < _MIN_LEN or frame[_OFF_NH] != layout.IPPROTO_UDP:
        return None
    if (frame[_OFF_DPORT] << 8 | frame[_OFF_DPORT + 1]) != layout.MRC_UDP_PORT:
        return None
    op = frame[_OFF_BTH]
    if op not in _DATA_OPCODES:
        return None
    end = _DATA_END  # what wire.headers_size(op, ts) says, without its checks
    if frame[_OFF_FLAGS] & _TS_FLAG:
        end += layout.TS_SIZE
    if op in _IMM_OPCODES:
        end += layout.IMM_SIZE
    return end if end <= len(frame) else None


def trim(
    frame: bytes | bytearray | memoryview,
    *,
    last_hop: bool = False,
    keep_bytes: int = 0,
    lblen: int = 32,
) -> bytes | None:
    """The trimmed header of a complete MRC data packet (whatever its DSCP), or None if the
    frame is not one (:func:`header_end`)."""
    if header_end(frame) is None:
        return None
    return trim_frame(frame, lasthop=last_hop, keep=keep_bytes, lblen=lblen)


@dataclass(frozen=True, slots=True)
class TrimRule:
    """How one port treats a data frame that overflows its queue."""

    enabled: bool = True  # False: drop every overflowing frame
    last_hop: bool = False  # a T0 downlink: trims become TRIMMED_LASTHOP
    keep_bytes: int = 0  # bytes a trim keeps at least (0: exactly the headers)
    lblen: int = 32  # locator block bits, for the final destination of the checksum

    def overflow(self, frame: bytes | bytearray | memoryview) -> bytes | None:
        """What replaces ``frame``, which does not fit: its trimmed header, to be queued at
        high priority, or None: drop it (the port does not trim, or the frame is not
        trimmable)."""
        if not self.enabled:
            return None
        dscp = (frame[_OFF_TC_HI] & _DSCP_HI) << 2 | frame[_OFF_TC_LO] >> 6
        if dscp not in _TRIMMABLE_DSCPS:
            return None
        return trim(frame, last_hop=self.last_hop, keep_bytes=self.keep_bytes, lblen=self.lblen)
