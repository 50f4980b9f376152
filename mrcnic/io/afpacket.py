"""AF_PACKET sockets: the constants and the one way the NIC and the switch open their ports.

A port has two sockets. The receive socket (:func:`open_rx_socket`) is created with protocol
0 and only then bound to ``ETH_P_ALL``: a socket created listening and bound afterwards costs
the kernel an RCU grace period (``synchronize_net``, ~10 ms per port). It does not see our own
transmissions (``PACKET_IGNORE_OUTGOING``), and a PACKET_MMAP ring (``batch.MmapRing``) can be
set up on it before it is bound (``before_bind``), so that every frame lands in the ring. The
send socket (:func:`open_tx_socket`) is bound with protocol 0: it receives nothing, so it
never wakes anyone up. Both are non-blocking.

Buffers are set with ``SO_*BUFFORCE`` (root: no ``rmem_max``/``wmem_max`` cap), falling
back to the capped option.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Callable

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_STATISTICS = 6  # struct tpacket_stats {tp_packets, tp_drops}; reading resets it
PACKET_VERSION = 10
PACKET_IGNORE_OUTGOING = 23  # do not hand our own transmissions back to us
TPACKET_V2 = 1
SO_SNDBUFFORCE = 32  # Linux: SO_SNDBUF without the wmem_max cap (root)
SO_RCVBUFFORCE = 33  # Linux: SO_RCVBUF without the rmem_max cap (root)
SOCK_BUF_BYTES = 4 << 20
# What a send or receive on a port whose link is down (or gone) fails with.
NETDOWN_ERRNOS = (errno.ENETDOWN, errno.ENXIO, errno.ENODEV)


def set_buffer(sock: socket.socket, which: str, nbytes: int = SOCK_BUF_BYTES) -> None:
    """The socket's ``which`` ("rcv" or "snd") buffer: forced past the sysctl cap when we
    may (root), else as large as the cap allows."""
    force, capped = {
        "rcv": (SO_RCVBUFFORCE, socket.SO_RCVBUF),
        "snd": (SO_SNDBUFFORCE, socket.SO_SNDBUF),
    }[which]
    try:
        sock.setsockopt(socket.SOL_SOCKET, force, nbytes)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, capped, nbytes)


def open_rx_socket(
    ifname: str,
    *,
    rcvbuf: int = SOCK_BUF_BYTES,
    before_bind: Callable[[socket.socket], object] | None = None,
) -> socket.socket:
    """A receive socket on ``ifname`` (in the current namespace): every frame but our own.
    ``before_bind(sock)`` runs on the unbound socket (to set up a receive ring); if anything
    fails the socket is closed and the error raised (what ``before_bind`` made is the
    caller's to clean up)."""
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        set_buffer(rx, "rcv", rcvbuf)
        if before_bind is not None:
            before_bind(rx)
        rx.bind((ifname, ETH_P_ALL))
        rx.setblocking(False)
    except BaseException:
        rx.close()
        raise
    return rx


def open_tx_socket(ifname: str, *, sndbuf: int | None = SOCK_BUF_BYTES) -> socket.socket:
    """A send-only socket on ``ifname`` (in the current namespace); ``sndbuf`` None keeps
    the kernel's default buffer."""
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        if sndbuf is not None:
            set_buffer(tx, "snd", sndbuf)
        tx.bind((ifname, 0))
        tx.setblocking(False)
    except BaseException:
        tx.close()
        raise
    return tx


def hw_address(sock: socket.socket) -> bytes:
    """The MAC address of the interface a bound AF_PACKET socket is on."""
    return bytes(sock.getsockname()[4][:6])  # (ifname, proto, pkttype, hatype, addr)


def socket_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped on this socket since the last call (its buffer or ring was
    full); reading the counters resets them."""
    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops
