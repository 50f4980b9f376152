"""Whole frames: Ethernet + IPv6 + UDP + the MRC part. The EV split (UDP source port and flow
label), the UDP checksum over the final destination, build_frame/parse_frame, and trim_frame:
the cut of a trim (which frames a full queue trims is mrcnic.wire.trim, the one rule).
Layouts: docs/design/wire.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mrcnic.wire import roce_icrc, usid
from mrcnic.wire.headers import (
    _DSCP_OF,
    _ECN_OF,
    _ETH,
    _IP6,
    _UDP,
    UDP,
    Ethernet,
    IPv6,
    _new_Ethernet,
    _new_IPv6,
    _new_UDP,
)
from mrcnic.wire.layout import (
    BTH_FLAG_TS,
    BTH_SIZE,
    DEFAULT_HOP_LIMIT,
    DSCP_SHIFT,
    ECN_SHIFT,
    ETH_SIZE,
    ETHERTYPE_IPV6,
    EV_LABEL_BITS,
    EV_LABEL_MASK,
    EV_MASK,
    FLOW_LABEL_MASK,
    FRAME_HEADERS_SIZE,
    ICRC_SIZE,
    IPPROTO_UDP,
    IPV6_OFF_NEXT_HEADER,
    IPV6_SIZE,
    IPV6_VERSION,
    IPV6_W0_VERSION,
    MRC_DATA_OPS,
    MRC_UDP_PORT,
    OFF_BTH,
    OFF_BTH_FLAGS,
    OFF_DST,
    OFF_ETHERTYPE,
    OFF_IPV6,
    OFF_PAYLOAD_LENGTH,
    OFF_SRC,
    OFF_UDP,
    OFF_UDP_CHECKSUM,
    OFF_UDP_LENGTH,
    RC_DATA_OPS,
    TRIMMED_DSCPS,
    UDP_OFF_CHECKSUM,
    UDP_OFF_DST_PORT,
    UDP_SIZE,
    Dscp,
    Ecn,
    set_dscp,
)
from mrcnic.wire.packet import MrcPacket, _decode_mrc, headers_size
from mrcnic.wire.util import (
    BytesLike,
    WireError,
    _check_bytes,
    _check_uint,
    _range_error,
    _truncated,
    fast_constructor,
)

_U16 = struct.Struct(">H")


# --------------------------------------------------------------------------------------------
# EV split and UDP checksum


def ev_to_udp_flow(ev: int) -> tuple[int, int]:
    """EV -> (UDP source port, IPv6 flow label): the port carries the high 16 bits, the flow
    label the low 16 bits (its top 4 bits are 0)."""
    if not 0 <= ev <= EV_MASK:
        raise _range_error("EV", "ev", ev, 32)
    return ev >> EV_LABEL_BITS, ev & EV_LABEL_MASK


def udp_flow_to_ev(src_port: int, flow_label: int) -> int:
    """(UDP source port, IPv6 flow label) -> EV. The flow label's top 4 bits are not part of
    the EV and are ignored."""
    if not 0 <= src_port <= 0xFFFF:
        raise _range_error("EV", "src_port", src_port, 16)
    if not 0 <= flow_label <= FLOW_LABEL_MASK:
        raise _range_error("EV", "flow_label", flow_label, 20)
    return src_port << EV_LABEL_BITS | (flow_label & EV_LABEL_MASK)


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
        sport = ev >> EV_LABEL_BITS
        ulen = UDP_SIZE + len(mrc)
        w0 = IPV6_W0_VERSION | dscp << DSCP_SHIFT | ecn << ECN_SHIFT | (ev & EV_LABEL_MASK)
        head = _ETH.pack(bytes(eth_dst), bytes(eth_src), ETHERTYPE_IPV6) + _IP6.pack(
            w0, ulen, IPPROTO_UDP, hop_limit, ip_src, bytes(ip_dst)
        )
        if mrc and mrc[0] in roce_icrc.ICRC_OPS and dscp not in TRIMMED_DSCPS:
            # a RoCEv2 packet: IBTA's ICRC covers the IP and UDP headers too (roce_icrc)
            whole = head + _UDP.pack(sport, MRC_UDP_PORT, ulen, 0) + mrc
            end = len(whole) - ICRC_SIZE
            # over the destination the frame will carry at its end (its ip_dst shifted out)
            mrc = mrc[: len(mrc) - ICRC_SIZE] + roce_icrc.icrc(
                whole, end, roce_icrc.final_dst(whole)
            )
        # bytes all the way: the C checksum takes bytes without building a buffer view
        csum = udp_checksum(ip_src, final_dst, _UDP.pack(sport, MRC_UDP_PORT, ulen, 0) + mrc)
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
        return self.udp.src_port << EV_LABEL_BITS | (self.ip6.flow_label & EV_LABEL_MASK)

    @property
    def trimmed(self) -> bool:
        """The DSCP says a switch trimmed this packet."""
        return self.ip6.dscp in TRIMMED_DSCPS


_new_Frame = fast_constructor(Frame)


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
        raise WireError("Ethernet", f"not IPv6: ethertype 0x{et:04x}", OFF_ETHERTYPE)
    w0, plen, nh, hl, ip_src, ip_dst = _IP6.unpack_from(mv, OFF_IPV6)
    if w0 >> 28 != IPV6_VERSION:
        raise WireError("IPv6", f"version {w0 >> 28}, not 6", OFF_IPV6)
    if nh != IPPROTO_UDP:
        raise WireError("IPv6", f"not UDP: next header {nh}", OFF_IPV6 + IPV6_OFF_NEXT_HEADER)
    if plen > n - OFF_UDP:
        raise WireError(
            "IPv6", f"payload length {plen} but only {n - OFF_UDP} bytes follow", OFF_PAYLOAD_LENGTH
        )
    sport, dport, ulen, csum = _UDP.unpack_from(mv, OFF_UDP)
    if dport != MRC_UDP_PORT:
        raise WireError(
            "UDP", f"not MRC port: destination port {dport}", OFF_UDP + UDP_OFF_DST_PORT
        )
    if ulen != plen:
        raise WireError("UDP", f"length {ulen} != IPv6 payload length {plen}", OFF_UDP_LENGTH)
    if ulen < UDP_SIZE:
        raise WireError("UDP", f"length {ulen} < {UDP_SIZE}", OFF_UDP_LENGTH)
    dscp = (w0 >> DSCP_SHIFT) & 0x3F
    ip6 = _new_IPv6(
        ip_src, ip_dst, plen, nh, hl, _DSCP_OF.get(dscp, dscp), _ECN_OF[(w0 >> ECN_SHIFT) & 3],
        w0 & FLOW_LABEL_MASK,
    )  # fmt: skip
    if not headers_only:
        if trimmed is None:
            trimmed = dscp in TRIMMED_DSCPS
        mrc = _decode_mrc(mv[OFF_BTH : OFF_UDP + plen], trimmed, OFF_BTH, rc_frame=True)
        rc = not trimmed and mv[OFF_BTH] in roce_icrc.ICRC_OPS and mrc.icrc is not None
        if rc and not roce_icrc.icrc_ok(mv, OFF_UDP + plen):  # a RoCEv2 packet: IBTA's ICRC
            at = OFF_UDP + plen - ICRC_SIZE
            want = roce_icrc.icrc(mv, at, roce_icrc.final_dst(mv)).hex()
            raise WireError(
                "ICRC", f"mismatch: carried {bytes(mv[at : at + ICRC_SIZE]).hex()}, the IBTA "
                f"ICRC is {want}", at,
            )  # fmt: skip
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


def trim_frame(
    frame: BytesLike,
    *,
    final_dst: BytesLike | None = None,
    lasthop: bool = False,
    keep: int = 0,
    lblen: int = 32,
) -> bytes:
    """What a trimming switch forwards instead of a data frame it cannot queue: the cut
    (``mrcnic.wire.trim`` decides which frames, and calls this; csrc/mrc_equeue.c is its C twin).

    The frame is cut to max(keep, its MRC headers) bytes, never more than it has (keep=0: right
    after its headers, no payload, no ICRC); its DSCP becomes TRIMMED (TRIMMED_LASTHOP if
    lasthop) with ECN kept; the IPv6 payload length and UDP length shrink to match; and the UDP
    checksum is recomputed over final_dst. Without final_dst that is the frame's destination
    shifted until end of carrier (``usid.final_destination`` with an lblen-bit locator block,
    unvalidated), as a switch computes it mid-fabric. Only data frames (MRC or RC opcodes) with
    all their headers can be trimmed; anything else raises WireError.
    """
    mv = frame if type(frame) is memoryview else memoryview(frame)
    n = len(mv)
    if n < OFF_BTH + BTH_SIZE:
        raise _truncated("BTH", BTH_SIZE, OFF_BTH, n - OFF_BTH)
    op = mv[OFF_BTH]
    if op not in MRC_DATA_OPS and op not in RC_DATA_OPS:
        raise WireError("BTH", f"only data packets are trimmed, not opcode 0x{op:02x}", OFF_BTH)
    size = headers_size(op, mv[OFF_BTH_FLAGS] & BTH_FLAG_TS != 0)
    end = OFF_BTH + size
    if n < end:
        raise _truncated("MRC", size, OFF_BTH, n - OFF_BTH)
    if keep > end:
        end = keep if keep < n else n
    out = bytearray(mv[:end])
    set_dscp(out, Dscp.TRIMMED_LASTHOP if lasthop else Dscp.TRIMMED)
    ulen = end - OFF_UDP
    _U16.pack_into(out, OFF_PAYLOAD_LENGTH, ulen)
    _U16.pack_into(out, OFF_UDP_LENGTH, ulen)
    _U16.pack_into(out, OFF_UDP_CHECKSUM, 0)
    if final_dst is None:
        final_dst = usid.final_destination(out[OFF_DST:OFF_UDP], lblen)
    # bytes, not bytearray slices: the C checksum takes bytes without building buffer views
    csum = udp_checksum(bytes(out[OFF_SRC:OFF_DST]), final_dst, bytes(out[OFF_UDP:]))
    _U16.pack_into(out, OFF_UDP_CHECKSUM, csum)
    return bytes(out)
