"""IEEE 802.1Qbb priority flow control (PFC) frames: encode, decode, pause time.

A PFC frame is an Ethernet MAC Control frame (60 bytes without the FCS)::

    0   destination 01:80:c2:00:00:01      12  ethertype 0x8808
    6   source: the sending port's MAC     14  opcode 0x0101
    16  class-enable vector: bit p set = the time for priority p is valid (8 bits used)
    18  eight pause times, priority 0..7, 16 bits each, in quanta of 512 bit times
    34  zero padding to 60 bytes

A time of 0 for an enabled priority resumes it at once (XON). Used by the switch's lossless
class (``mrcswitch.pfc``) and the NIC; dissects as scapy's MACControlClassBasedFlowControl.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mrcnic.wire.layout import (
    ETHERTYPE_MAC_CONTROL,
    MIN_FRAME_BYTES,
    PAUSE_QUANTUM_BITS,
    PFC_DST_MAC,
    PFC_OPCODE,
    PFC_PRIORITIES,
)
from mrcnic.wire.util import WireError

_HEAD = struct.Struct("!6s6sHHH8H")  # dst, src, ethertype, opcode, enable vector, times
MAX_QUANTA = 0xFFFF


@dataclass(frozen=True, slots=True)
class PauseFrame:
    """A decoded PFC frame: ``quanta[p]`` for each priority ``p`` whose enable bit is set."""

    src_mac: bytes
    quanta: dict[int, int]

    def pauses(self, priority: int) -> bool:
        return self.quanta.get(priority, 0) > 0


def encode_pause(src_mac: bytes, quanta: dict[int, int]) -> bytes:
    """A PFC frame from ``src_mac`` setting each listed priority's pause time (0: resume)."""
    if len(src_mac) != 6:
        raise WireError("PFC", f"source MAC must be 6 bytes, got {len(src_mac)}")
    times = [0] * PFC_PRIORITIES
    vector = 0
    for prio, q in quanta.items():
        if not 0 <= prio < PFC_PRIORITIES:
            raise WireError("PFC", f"priority {prio} is not 0..7")
        if not 0 <= q <= MAX_QUANTA:
            raise WireError("PFC", f"pause time {q} is not 0..65535 quanta")
        times[prio] = q
        vector |= 1 << prio
    head = _HEAD.pack(PFC_DST_MAC, src_mac, ETHERTYPE_MAC_CONTROL, PFC_OPCODE, vector, *times)
    return head + bytes(MIN_FRAME_BYTES - len(head))


def is_pfc(frame: bytes | bytearray | memoryview) -> bool:
    """A MAC Control frame with the PFC opcode (what a port must not forward)."""
    return (
        len(frame) >= 16
        and frame[12] == ETHERTYPE_MAC_CONTROL >> 8
        and frame[13] == ETHERTYPE_MAC_CONTROL & 0xFF
        and frame[14] == PFC_OPCODE >> 8
        and frame[15] == PFC_OPCODE & 0xFF
    )


def decode_pause(frame: bytes | bytearray | memoryview) -> PauseFrame:
    """The PFC frame ``frame``; WireError if it is not one or is cut short."""
    if not is_pfc(frame):
        raise WireError("PFC", "not a MAC Control frame with opcode 0x0101")
    if len(frame) < _HEAD.size:
        raise WireError("PFC", f"{len(frame)} bytes: a PFC frame has at least {_HEAD.size}")
    _dst, src, _et, _op, vector, *times = _HEAD.unpack_from(frame)
    quanta = {p: times[p] for p in range(PFC_PRIORITIES) if vector >> p & 1}
    return PauseFrame(bytes(src), quanta)


def pause_s(quanta: int, rate_bps: float) -> float:
    """How long ``quanta`` pause quanta last on a link of ``rate_bps``."""
    return quanta * PAUSE_QUANTUM_BITS / rate_bps


def headroom_bytes(rate_bps: float, reaction_s: float, one_way_s: float, mtu_bytes: int) -> int:
    """Bytes that can still arrive on a port after it crossed XOFF: the upstream keeps sending
    for a round trip plus its reaction time, and a frame may be on the wire at each end."""
    in_flight = rate_bps / 8 * (2 * one_way_s + reaction_s)
    return int(in_flight + 2 * mtu_bytes)


MIN_XOFF_FRAMES = 4  # XOFF never below this many full frames


def xoff_xon_bytes(buffer_bytes: int, frame_bytes: int) -> tuple[int, int]:
    """A lossless in-port's thresholds from its port's buffer: XOFF at half the buffer (at
    least :data:`MIN_XOFF_FRAMES` full frames), XON at half of XOFF (the lab's switches and
    the simulator's, docs/design/pfc.md)."""
    xoff = max(buffer_bytes // 2, MIN_XOFF_FRAMES * frame_bytes)
    return xoff, xoff // 2


def quanta_for(seconds: float, rate_bps: float) -> int:
    """The pause time (in quanta, at most 65535) that lasts at least ``seconds``."""
    q = -(-seconds * rate_bps // PAUSE_QUANTUM_BITS)
    return int(min(MAX_QUANTA, max(1, q)))
