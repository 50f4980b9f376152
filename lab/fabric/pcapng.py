"""A minimal pcapng writer (and reader, for tests): a section header, one interface per
captured port (Ethernet, nanosecond timestamps, the interface's name), enhanced packet
blocks with the direction flag (inbound / outbound). What Wireshark, tshark and scapy read.

Format: IETF draft-ietf-opsawg-pcapng; every block little-endian and padded to 32 bits.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

SHB, IDB, EPB = 0x0A0D0D0A, 0x00000001, 0x00000006
BYTE_ORDER_MAGIC = 0x1A2B3C4D
LINKTYPE_ETHERNET = 1
OPT_END, OPT_COMMENT = 0, 1
IF_NAME, IF_DESCRIPTION, IF_TSRESOL = 2, 3, 9
EPB_FLAGS = 2
INBOUND, OUTBOUND = 1, 2  # epb_flags bits 0-1
SHB_HARDWARE, SHB_USERAPPL = 2, 4


def _pad4(b: bytes) -> bytes:
    return b + bytes(-len(b) % 4)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + _pad4(value)


def _block(kind: int, body: bytes) -> bytes:
    total = 12 + len(body)
    return struct.pack("<II", kind, total) + body + struct.pack("<I", total)


class PcapngWriter:
    """Write frames to ``fh`` as pcapng: :meth:`add_interface` first, then :meth:`write`."""

    def __init__(self, fh: BinaryIO, app: str = "mrc-lab capture") -> None:
        self.fh = fh
        opts = _option(SHB_USERAPPL, app.encode()) + _option(OPT_END, b"")
        body = struct.pack("<IHHq", BYTE_ORDER_MAGIC, 1, 0, -1) + opts
        fh.write(_block(SHB, body))
        self.interfaces: list[str] = []
        self.packets = 0

    def add_interface(self, name: str, description: str = "", snaplen: int = 262144) -> int:
        """An Ethernet interface with nanosecond timestamps; returns its id."""
        opts = _option(IF_NAME, name.encode())
        if description:
            opts += _option(IF_DESCRIPTION, description.encode())
        opts += _option(IF_TSRESOL, bytes([9])) + _option(OPT_END, b"")
        self.fh.write(_block(IDB, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, snaplen) + opts))
        self.interfaces.append(name)
        return len(self.interfaces) - 1

    def write(self, iface: int, ts_ns: int, frame: bytes, outbound: bool | None = None,
              orig_len: int | None = None) -> None:  # fmt: skip
        """One frame of interface ``iface`` at ``ts_ns`` (Unix time, ns); ``outbound`` sets
        the direction flag (None: unknown)."""
        opts = b""
        if outbound is not None:
            flags = OUTBOUND if outbound else INBOUND
            opts = _option(EPB_FLAGS, struct.pack("<I", flags)) + _option(OPT_END, b"")
        head = struct.pack(
            "<IIIII", iface, (ts_ns >> 32) & 0xFFFFFFFF, ts_ns & 0xFFFFFFFF, len(frame),
            len(frame) if orig_len is None else orig_len,
        )  # fmt: skip
        self.fh.write(_block(EPB, head + _pad4(bytes(frame)) + opts))
        self.packets += 1


def read(fh: BinaryIO) -> Iterator[tuple[int, int, bytes, int | None]]:
    """(interface id, ts_ns, frame, direction flag or None) of every packet: enough to check
    what :class:`PcapngWriter` wrote (little-endian sections with ns resolution only)."""
    data = fh.read()
    at = 0
    while at + 12 <= len(data):
        kind, total = struct.unpack_from("<II", data, at)
        if total < 12 or at + total > len(data):
            raise ValueError(f"truncated block at {at}")
        if kind == EPB:
            iface, hi, lo, cap, _orig = struct.unpack_from("<IIIII", data, at + 8)
            frame = data[at + 28 : at + 28 + cap]
            flags = None
            o = at + 28 + cap + (-cap % 4)
            while o + 4 <= at + total - 4:
                code, ln = struct.unpack_from("<HH", data, o)
                if code == OPT_END:
                    break
                if code == EPB_FLAGS and ln == 4:
                    flags = struct.unpack_from("<I", data, o + 4)[0] & 3
                o += 4 + ln + (-ln % 4)
            yield iface, hi << 32 | lo, frame, flags
        at += total
