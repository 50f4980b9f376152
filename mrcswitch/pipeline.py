"""The forwarding pipeline: frame + in-port -> Forward(port, frame) | Drop(reason).

A pure function of the frame, the in-port and the static table, with the Linux kernel's
``seg6local End flavors next-csid lblen L nflen 16`` semantics (checked against the
kernel by tests/lab/test_switch_conformance.py):

1. The frame must be addressed to the in-port's MAC, carry IPv6 (ethertype 0x86DD,
   version 6) with a payload length that does not claim more bytes than the frame has
   (a frame longer than its payload length is cut to it, as ``ipv6_rcv`` does), and a
   source that may be forwarded (not ::, ::1, multicast or link-local) and, on a port with
   a ``source_prefix`` (a T0's host port), inside that prefix (a host cannot spoof another's
   address: the fabric's anti-spoofing, as a top-of-rack switch's source guard).
2. If the destination's leading ``block:uSID`` (/48 with the default block) is one of the
   switch's own uSIDs: drop at end of carrier (nothing after the active uSID: the kernel
   then runs plain End, which needs a segment routing header), else shift the uSIDs left
   by 16 bits, zero-filling; repeat while the new active uSID is again one of ours (the
   kernel re-enters seg6local for it).
3. Look the (possibly shifted) leading ``block:uSID`` up in the static table; an unknown
   one is dropped (``zero_usid`` if the active uSID is 0, e.g. a 0 in the middle of the
   carrier that reached the front; ``no_route`` otherwise). A destination that is not ours
   but is in the table is forwarded unshifted, like any IPv6 packet.
4. Hop limit <= 1 is dropped (ip6_forward's check, after the lookup), else decremented.
5. Ethernet rewritten: destination = the out-port's peer MAC, source = the out-port's MAC.

With PFC (``mac_control``), a MAC Control frame to the PFC address (ethertype 0x8808,
01:80:c2:00:00:01) is neither forwarded nor dropped: the decision :data:`TO_SWITCH` hands it
to the switch itself, which pauses the port it came in on (mrcswitch.pfc). Without PFC it
is ``not_my_mac``, as before.

Every drop leaves through one place (a negative return of :meth:`Pipeline.decide`) with a
named :class:`DropReason`; the switch counts it per port and reason.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

from mrcnic.wire import layout, usid

from .config import USID_BITS
from .table import StaticTable

ETH_LEN = layout.ETH_SIZE
IPV6_LEN = layout.IPV6_SIZE
OFF_IP = layout.OFF_IPV6
OFF_HOP = layout.OFF_HOP_LIMIT
OFF_SRC = layout.OFF_SRC
OFF_DST = layout.OFF_DST
OFF_L4 = layout.OFF_UDP  # where the Ethernet + IPv6 headers end: a decision's key length
_OFF_PLEN = layout.OFF_PAYLOAD_LENGTH
_OFF_ETHERTYPE = layout.OFF_ETHERTYPE
_ETHERTYPE_HI, _ETHERTYPE_LO = layout.ETHERTYPE_IPV6.to_bytes(2, "big")
ADDR_BITS = usid.ADDR_BITS
_ETHERTYPE_IPV6 = layout.ETHERTYPE_IPV6
_IPV6_VERSION = layout.IPV6_VERSION
_ZERO16 = bytes(16)
_LOOPBACK = bytes(15) + b"\x01"
_BAD_SOURCES = frozenset((_ZERO16, _LOOPBACK))
# Ethernet dst, (src skipped), ethertype, IPv6 version/TC byte, (TC/flow skipped), payload
# length, (next header skipped), hop limit, source, destination: 54 bytes.
_HDR = struct.Struct("!6s6xHB3xHxB16s16s")
CACHE_ENTRIES = 4096  # decisions remembered per destination address


class DropReason(IntEnum):
    """Why a frame was dropped. The lower-case name is the counter key in the stats file."""

    MALFORMED = 1  # runt, IPv6 version != 6, payload length claims more than the frame has
    NOT_IPV6 = 2  # ethertype is not 0x86DD
    NOT_MY_MAC = 3  # Ethernet destination is not the in-port's MAC (kernel: PACKET_OTHERHOST)
    BAD_SOURCE = 4  # source ::, ::1, multicast or link-local: never forwarded
    WRONG_BLOCK = 5  # destination outside the locator block
    NOT_MINE = 6  # in the block, but neither an own uSID nor a table entry
    END_OF_CARRIER = 7  # own uSID with nothing after it
    ZERO_USID = 8  # after the shift the active uSID is 0 (a 0 in the middle of the carrier)
    NO_ROUTE = 9  # after the shift the active uSID is not in the table
    HOP_LIMIT = 10  # hop limit <= 1
    PORT_DOWN = 11  # out-port link down (ENETDOWN / no carrier)
    QUEUE_FULL = 12  # egress buffer overflow of a non-trimmable packet (or of the high class)
    TOO_BIG = 13  # frame longer than the switch's receive slot (max_frame_bytes)
    INTERNAL = 14  # a bug caught by the switch loop's guard (should stay 0)
    TX_ERROR = 15  # the kernel refused to send the frame (ENOBUFS, EMSGSIZE, ...)
    SPOOFED_SOURCE = 16  # in through a guarded port from outside its source_prefix

    @property
    def key(self) -> str:
        return self.name.lower()


class Forward(NamedTuple):
    port: int
    frame: bytearray


class ToSwitch(NamedTuple):
    """A frame for the switch itself (PFC), from :meth:`Pipeline.process`."""

    frame: bytearray


class Drop(NamedTuple):
    reason: DropReason


_DROPS = {r: Drop(r) for r in DropReason}


class DropCounter:
    """Per-reason drop counts of one port: the one place every drop is counted."""

    __slots__ = ("by_reason",)

    def __init__(self) -> None:
        self.by_reason = [0] * (max(DropReason) + 1)

    def add(self, reason: int, n: int = 1) -> None:
        self.by_reason[reason] += n

    @property
    def total(self) -> int:
        return sum(self.by_reason)

    def as_dict(self) -> dict[str, int]:
        return {r.key: self.by_reason[r] for r in DropReason}


# Drop reasons decided before the payload length is compared with the frame's length: a
# frame too short for its payload length is MALFORMED only if none of these applies first.
_PRE_LENGTH = frozenset((DropReason.NOT_MY_MAC, DropReason.NOT_IPV6, DropReason.MALFORMED))
SHIFT_UNIT = 1 << 16  # decision code = out-port | shifts * SHIFT_UNIT (see Pipeline)
# For the switch itself (a PFC frame): a port number no switch has (mrc-switch has at most
# 1024 ports), so the C forwarder refuses the decision and hands the frame to Python.
TO_SWITCH = SHIFT_UNIT - 1
_ETHERTYPE_MAC_CONTROL = layout.ETHERTYPE_MAC_CONTROL
_PFC_DST = layout.PFC_DST_MAC


def rewrite(f: bytearray | memoryview, code: int, l2: bytes, block_bytes: int) -> None:
    """Apply a forward decision to a whole frame in place (the twin of the rewrite in
    csrc/mrc_fwd.c): hop limit - 1, destination shifted by ``code >> 16`` uSIDs (the bytes
    after the block move left, zero-filled), Ethernet dst/src = ``l2`` (12 bytes)."""
    f[OFF_HOP] -= 1
    k = 2 * (code >> 16)
    if k:
        a = OFF_DST + block_bytes
        f[a : OFF_L4 - k] = f[a + k : OFF_L4]
        f[OFF_L4 - k : OFF_L4] = bytes(k)
    f[0:12] = l2


class Pipeline:
    """The forwarding decision for one switch; immutable after construction (but for its
    memo of decisions, which the static table never invalidates).

    A decision is an ``int`` code: ``-DropReason`` for a drop, else ``port | shifts << 16``
    (out-port index, and how many uSIDs the destination consumes here: 0 when forwarded
    unshifted). It depends only on the in-port and the frame's first 54 bytes (Ethernet and
    IPv6 headers), provided the frame holds at least the IPv6 payload length; so it is
    memoised per in-port by those 54 bytes (:meth:`header_cache`), which is what lets the
    switch decide a frame with one dict lookup. :meth:`decide` adds the frame-length checks
    and the rewrite; :meth:`process` is the pure form.
    """

    __slots__ = (
        "_table",
        "_routes",
        "_own_keys",
        "_block",
        "_key_len",
        "_key_end",
        "_blk_end",
        "_shifter",
        "_tail_mask",
        "_macs",
        "_l2",
        "_cache",
        "_hdr_caches",
        "_guards",
        "_mac_control",
    )

    def __init__(
        self,
        table: StaticTable,
        port_macs: Sequence[bytes],
        peer_macs: Sequence[bytes],
        source_prefixes: Sequence[tuple[int, int] | None] | None = None,
        mac_control: bool = False,
    ) -> None:
        if len(port_macs) != len(peer_macs) or len(port_macs) < len(table.port_names):
            raise ValueError("need one MAC and one peer MAC per port")
        self._table = table
        self._routes = dict(table.routes)
        self._own_keys = frozenset(table.own_keys)
        self._block = bytes(table.block)
        lb = table.lblen
        self._key_len = (lb + USID_BITS) // 8
        self._key_end = OFF_DST + self._key_len
        self._blk_end = OFF_DST + lb // 8
        self._shifter = usid.shifter(lb, USID_BITS)  # the one uSID shift
        self._tail_mask = self._shifter.tail_mask  # after the active uSID
        self._macs = [bytes(m) for m in port_macs]
        self._l2 = [bytes(p) + bytes(m) for m, p in zip(port_macs, peer_macs, strict=True)]
        # destination -> code; the table never changes, so entries never go stale
        self._cache: dict[bytes, int] = {}
        # per in-port: 54 header bytes -> code
        self._hdr_caches: list[dict[bytes, int]] = [{} for _ in port_macs]
        # per in-port: (shift, network >> shift) of its source guard, or None
        guards = list(source_prefixes or [None] * len(port_macs))
        if len(guards) != len(port_macs):
            raise ValueError("need one source prefix (or None) per port")
        self._mac_control = mac_control
        self._guards = [None if g is None else (128 - g[1], g[0] >> (128 - g[1])) for g in guards]

    @property
    def table(self) -> StaticTable:
        return self._table

    @property
    def block_bytes(self) -> int:
        return len(self._block)

    @property
    def l2_headers(self) -> list[bytes]:
        """Per out-port: the 12 bytes Ethernet dst + src written on forwarded frames."""
        return list(self._l2)

    def header_cache(self, in_port: int) -> dict[bytes, int]:
        """The memo of :meth:`decide_header` for one in-port (read it, never write it)."""
        return self._hdr_caches[in_port]

    def shift(self, addr: int) -> int:
        """The uSID shift on a 128-bit address: drop the active uSID, zero-fill the tail."""
        return self._shifter.shift(addr)

    def final_address(self, addr: int) -> int:
        """The address a packet carries at its destination: shifted until end of carrier."""
        return self._shifter.final(addr)

    def route(self, dst: bytes) -> int:
        """The decision for a destination address alone (memoised by :meth:`decide_header`):
        ``port | shifts << 16``, or -DropReason."""
        key = dst[: self._key_len]
        port = self._routes.get(key)
        if port is not None:
            return port  # in the table, not ours: forwarded unshifted
        if key not in self._own_keys:
            if dst[: self._blk_end - OFF_DST] != self._block:
                return -DropReason.WRONG_BLOCK
            return -DropReason.NOT_MINE
        a = int.from_bytes(dst, "big")
        shift = self._shifter.shift
        tail_mask = self._tail_mask
        shifts = 0
        while True:
            if not a & tail_mask:
                return -DropReason.END_OF_CARRIER
            a = shift(a)
            shifts += 1
            key = a.to_bytes(16, "big")[: self._key_len]
            if key not in self._own_keys:  # the kernel re-enters seg6local for its own uSID
                break
        port = self._routes.get(key)
        if port is None:
            if key[-2:] == b"\x00\x00":
                return -DropReason.ZERO_USID
            return -DropReason.NO_ROUTE
        return port | shifts * SHIFT_UNIT

    def decide_header(self, hdr: bytes, in_port: int) -> int:
        """The decision for a frame whose first 54 bytes are ``hdr`` (exactly 54), assuming
        it holds its whole IPv6 payload; memoised in :meth:`header_cache`. Never raises."""
        cache = self._hdr_caches[in_port]
        code = cache.get(hdr)
        if code is None:
            code = self._decide_header(hdr, in_port)
            if len(cache) >= CACHE_ENTRIES:
                cache.clear()  # bounded whatever a flood of random headers does
            cache[hdr] = code
        return code

    def _decide_header(self, hdr: bytes, in_port: int) -> int:
        # one unpack for every field the decision needs (cheaper than indexing them one by one)
        eth_dst, ethertype, ver, _plen, hop, src, dst = _HDR.unpack_from(hdr)
        if ethertype == _ETHERTYPE_MAC_CONTROL and eth_dst == _PFC_DST and self._mac_control:
            return TO_SWITCH
        if eth_dst != self._macs[in_port]:
            return -DropReason.NOT_MY_MAC
        if ethertype != _ETHERTYPE_IPV6:
            return -DropReason.NOT_IPV6
        if ver >> 4 != _IPV6_VERSION:
            return -DropReason.MALFORMED
        s0 = src[0]
        if s0 == 0xFF or (s0 == 0xFE and src[1] & 0xC0 == 0x80) or src in _BAD_SOURCES:
            return -DropReason.BAD_SOURCE
        guard = self._guards[in_port]
        if guard is not None and int.from_bytes(src, "big") >> guard[0] != guard[1]:
            return -DropReason.SPOOFED_SOURCE  # decided per header: memoised like the rest
        code = self._cache.get(dst)
        if code is None:
            code = self.route(dst)
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.clear()
            self._cache[dst] = code
        if code < 0:
            return code
        if hop <= 1:
            return -DropReason.HOP_LIMIT  # ip6_forward checks it after the lookup
        return code

    def decide(self, f: bytearray, in_port: int) -> int:
        """Forward in place: returns the out-port index (>= 0), or -DropReason.

        Mutates ``f`` (destination, hop limit, MACs, trailing bytes past the payload length);
        on a drop its content is unspecified. Never raises for any content of ``f``.
        """
        n = len(f)
        if n < OFF_L4:
            if n < ETH_LEN:
                return -DropReason.MALFORMED
            if self._mac_control and f[0:6] == _PFC_DST and f[12:14] == b"\x88\x08":
                return TO_SWITCH
            if f[0:6] != self._macs[in_port]:
                return -DropReason.NOT_MY_MAC
            if f[_OFF_ETHERTYPE] != _ETHERTYPE_HI or f[_OFF_ETHERTYPE + 1] != _ETHERTYPE_LO:
                return -DropReason.NOT_IPV6
            return -DropReason.MALFORMED
        code = self.decide_header(bytes(f[:OFF_L4]), in_port)
        if (code < 0 and -code in _PRE_LENGTH) or code == TO_SWITCH:
            return code
        end = OFF_L4 + (f[_OFF_PLEN] << 8 | f[_OFF_PLEN + 1])
        if end != n:
            if end > n:
                return -DropReason.MALFORMED
            del f[end:]  # ipv6_rcv trims the frame to the payload length
        if code < 0:
            return code
        port = code & 0xFFFF
        rewrite(f, code, self._l2[port], len(self._block))
        return port

    def process(
        self, frame: bytes | bytearray | memoryview, in_port: int
    ) -> Forward | Drop | ToSwitch:
        """The pure form: never mutates ``frame``; returns a new frame on Forward."""
        f = bytearray(frame)
        r = self.decide(f, in_port)
        if r == TO_SWITCH:
            return ToSwitch(f)
        if r >= 0:
            return Forward(r, f)
        return _DROPS[DropReason(-r)]
