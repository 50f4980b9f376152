"""Link state of ports: netlink ``RTMGRP_LINK`` notifications and ``SIOCGIFFLAGS`` checks.

A port is *up* when it is administratively up and has carrier (``IFF_UP | IFF_RUNNING``).
The NIC (:mod:`mrcnic.io.aio`) and the switch (:mod:`mrcswitch.links`) learn of a change
two ways, both from here:

- :class:`LinkWatcher`: a non-blocking netlink socket subscribed to ``RTMGRP_LINK`` in the
  namespace it was opened in. Put :meth:`LinkWatcher.fileno` in the event loop (asyncio
  ``add_reader``, epoll); when it is readable, :meth:`LinkWatcher.read` returns the
  :class:`LinkEvent` of every ``RTM_NEWLINK``/``RTM_DELLINK`` waiting, and whether the kernel
  dropped some (the socket overflowed: check every link);
- :func:`link_flags` / :func:`link_up`: one ``SIOCGIFFLAGS`` ioctl, the cheap periodic
  fallback and the check at open time.

The messages are parsed here with :mod:`struct` (:func:`parse_link_messages`: the fixed
``nlmsghdr`` + ``ifinfomsg`` and the ``IFLA_IFNAME`` attribute), not with pyroute2:
``import pyroute2`` of any submodule runs the package's ``__init__``, which imports all of
pyroute2 (~100 ms of CPU per process, measured), and the lab starts one switch process per
switch. The unit tests hold this parser to pyroute2's encoder and decoder instead
(tests/unit/test_linkstate.py); docs/design/architecture.md, "Netlink: where pyroute2 is used".
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
from dataclasses import dataclass

from mrcnic.io.afpacket import set_buffer

SIOCGIFFLAGS = 0x8913
IFF_UP = 0x1
IFF_RUNNING = 0x40  # operationally up: carrier present
RTMGRP_LINK = 0x1
RTM_NEWLINK = 16
RTM_DELLINK = 17
IFLA_IFNAME = 3
NETLINK_RCVBUF_BYTES = 1 << 20  # room for a burst (a lab taking many links down at once)

_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_RTA = struct.Struct("=HH")  # rtattr: len, type
_IFREQ_FLAGS = struct.Struct("16sH14x")  # struct ifreq with ifr_flags


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """One link notification: ``flags`` are the interface's flags (``IFF_*``) after the
    change, None when the interface was deleted; ``ifname`` None if the message had none."""

    ifindex: int
    flags: int | None
    ifname: str | None = None

    @property
    def up(self) -> bool:
        return flags_up(self.flags)


def flags_up(flags: int | None) -> bool:
    """Administratively up and with carrier; False for an absent interface (None)."""
    return flags is not None and bool(flags & IFF_UP) and bool(flags & IFF_RUNNING)


def _ifname(data: bytes | memoryview, off: int, end: int) -> str | None:
    """IFLA_IFNAME from the attributes in data[off:end], None if absent or malformed."""
    while off + _RTA.size <= end:
        ln, typ = _RTA.unpack_from(data, off)
        if ln < _RTA.size or off + ln > end:
            return None
        if typ & 0x3FFF == IFLA_IFNAME:  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
            raw = bytes(data[off + _RTA.size : off + ln])
            return raw.split(b"\0", 1)[0].decode(errors="replace")
        off += (ln + 3) & ~3
    return None


def parse_link_messages(data: bytes | memoryview) -> list[LinkEvent]:
    """The :class:`LinkEvent` of every RTM_NEWLINK / RTM_DELLINK in a netlink datagram, in
    order; other message types are skipped. A malformed tail is ignored (the periodic check
    covers anything missed)."""
    out: list[LinkEvent] = []
    off = 0
    n = len(data)
    while off + _NLMSG.size <= n:
        length, mtype, _flags, _seq, _pid = _NLMSG.unpack_from(data, off)
        if length < _NLMSG.size or off + length > n:
            break
        body = off + _NLMSG.size
        if mtype in (RTM_NEWLINK, RTM_DELLINK) and length >= _NLMSG.size + _IFINFO.size:
            _fam, _type, index, flags, _change = _IFINFO.unpack_from(data, body)
            name = _ifname(data, body + _IFINFO.size, off + length)
            out.append(LinkEvent(index, flags if mtype == RTM_NEWLINK else None, name))
        off += (length + 3) & ~3
    return out


def link_flags(ifname: str, sock: socket.socket | None = None) -> int | None:
    """The interface's flags (``IFF_*``) by SIOCGIFFLAGS, None if there is no such interface.
    Asked through ``sock`` (any socket: the answer comes from *its* namespace, which is how a
    process drives ports in another namespace), else through a throwaway socket of the
    calling thread's namespace."""
    req = _IFREQ_FLAGS.pack(ifname.encode(), 0)
    try:
        if sock is not None:
            res = fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, req)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                res = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req)
    except OSError:
        return None
    return _IFREQ_FLAGS.unpack(res)[1]


def link_up(ifname: str, sock: socket.socket | None = None) -> bool:
    """:func:`link_flags` says up and with carrier."""
    return flags_up(link_flags(ifname, sock))


class LinkWatcher:
    """Link notifications of the namespace the watcher was opened in (the calling thread's).

    ``LinkWatcher.open()`` returns None where netlink is not available (the periodic
    :func:`link_flags` check then does all the work). Reading never blocks.
    """

    __slots__ = ("sock", "overflows")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.overflows = 0  # times the kernel dropped notifications (socket full)

    @classmethod
    def open(cls, rcvbuf: int = NETLINK_RCVBUF_BYTES) -> LinkWatcher | None:
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        except OSError:
            return None
        try:
            set_buffer(s, "rcv", rcvbuf)
            s.bind((0, RTMGRP_LINK))
            s.setblocking(False)
        except OSError:
            s.close()
            return None
        return cls(s)

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> tuple[list[LinkEvent], bool]:
        """Every notification waiting, and True if some were lost (ENOBUFS: the socket
        overflowed; re-check every link)."""
        events: list[LinkEvent] = []
        lost = False
        recv = self.sock.recv
        while True:
            try:
                data = recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the error is reported once: read on
                    lost = True
                    self.overflows += 1
                    continue
                break
            if not data:
                break
            events.extend(parse_link_messages(data))
        return events, lost

    def close(self) -> None:
        self.sock.close()
