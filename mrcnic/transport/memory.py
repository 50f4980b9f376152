"""Registered memory: regions, random 32-bit R_Keys, bounds and permission checks.

A :class:`MemoryRegion` is a caller's writable buffer exposed to the peer at a virtual
address range ``[base_va, base_va + length)`` under an R_Key.  The responder never trusts a
length or an address from the wire: every placement goes through :meth:`MemoryTable.place`,
which checks the key, the permission and the bounds, and writes nothing when any check fails.

The key and permission checks are done once per region, not once per packet: the first
accepted placement under an R_Key caches the region's buffer and bounds, and later packets
only compare their byte range with those bounds (Python ints: no overflow) and copy with a
memoryview slice assignment, which cannot write outside the buffer either.  The cache entry
is dropped by :meth:`MemoryTable.deregister`, and it is used only while the region's
``access``, ``buffer`` and ``base_va`` are the very objects it was made from, so changing
any of them (e.g. withdrawing REMOTE_WRITE) takes effect on the next packet.  The first
placement, and any payload that is not a plain byte buffer, goes through the C placement
code (``mrcnic.fast.place``), which checks the bounds again.
"""

from __future__ import annotations

import enum
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from mrcnic import fast
from mrcnic.errors import MrcError
from mrcnic.wire.layout import Opcode


class Access(enum.IntFlag):
    """Access flags of a region (ibverbs names; MRC has RDMA Write only, no Read/Atomics)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2


class PlaceStatus(enum.IntEnum):
    """Why a remote write was refused (OK = placed).  Every non-OK becomes a remote access NACK."""

    OK = 0
    BAD_RKEY = 1  # no region with that key (never registered, or deregistered)
    NO_PERMISSION = 2  # region lacks REMOTE_WRITE
    OUT_OF_BOUNDS = 3  # any byte outside the region


_OK = PlaceStatus.OK

_OP_FIRST, _OP_MIDDLE, _OP_LAST, _OP_LAST_IMM = (
    int(Opcode.WRITE_FIRST), int(Opcode.WRITE_MIDDLE), int(Opcode.WRITE_LAST),
    int(Opcode.WRITE_LAST_IMM),
)  # fmt: skip


def message_fits(op: int, va: int, plen: int, length: int, mtu: int, base: int, end: int) -> bool:
    """Does the whole message of a data packet lie inside ``[base, end)``? From what every
    packet carries (its opcode, its own VA and payload length, the message's length) and
    the MTU both ends agreed on: every packet but the last carries exactly ``mtu`` bytes and
    the VA advances by ``mtu`` per packet. A first, only or last packet gives the message's
    start exactly; a middle one ``k`` packets in (``1 <= k <= n - 2``, ``k`` unknown) one of
    the starts ``va - k mtu``, and it fits when one of them puts the whole message inside.
    Sizes that do not fit the opcode fit no message (our requester never sends them).
    C: ``message_span`` and ``message_fits`` in ``csrc/mrc_rxe.c``."""
    if plen > mtu:
        return False
    steps = 0  # the message starts at hi - j * mtu for one j in [0, steps]
    if op == _OP_FIRST:
        if plen != mtu or length <= mtu:
            return False
        hi = va
    elif op == _OP_MIDDLE:
        steps = -(-length // mtu) - 3
        if plen != mtu or steps < 0:
            return False
        hi = va - mtu
    elif op in (_OP_LAST, _OP_LAST_IMM):
        rest = length - plen
        if length <= mtu or not plen or rest % mtu:
            return False
        hi = va - rest
    else:  # ONLY, ONLY_IMM
        if plen != length:
            return False
        hi = va
    top = end - length  # the last start that fits
    if hi < base or top < base:
        return False
    if hi <= top:
        return True
    j = -(-(hi - top) // mtu)  # the highest start at or below top
    return j <= steps and hi - j * mtu >= base


class MemoryRegionError(MrcError, ValueError):
    """Invalid registration request (empty or read-only buffer, bad address)."""


# Synthetic virtual addresses: regions get page-aligned VAs in a user-space-looking range, so a
# peer sees realistic 64-bit addresses and two regions never overlap.
_VA_BASE = 0x7F00_0000_0000
_PAGE = 4096


@dataclass(slots=True, eq=False)
class MemoryRegion:
    """One registered region.  ``buffer`` is the caller's memory, written in place."""

    rkey: int
    base_va: int
    buffer: memoryview
    access: Access
    valid: bool = True
    bytes_placed: int = field(default=0)

    @property
    def length(self) -> int:
        return len(self.buffer)

    @property
    def end_va(self) -> int:
        return self.base_va + len(self.buffer)

    def contains(self, va: int, length: int) -> bool:
        return self.base_va <= va and va + length <= self.end_va


class MemoryTable:
    """The R_Key registry of one device (or one QP's protection domain).

    ``seed`` makes R_Keys reproducible (the simulator and tests); without it keys come from
    ``secrets`` so a peer cannot guess them.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed) if seed is not None else None
        self._by_rkey: dict[int, MemoryRegion] = {}
        # rkey -> (region, access, buffer, base_va, end_va) of regions a remote write was
        # accepted into: the per-packet fast path of place()
        self._placeable: dict[int, tuple[MemoryRegion, Access, memoryview, int, int]] = {}
        self._next_va = _VA_BASE + (self._rand32() & 0xFFFF) * _PAGE
        #: called when a region is registered or withdrawn (whoever keeps a copy of the table:
        #: the simulator's C fabric, mrcnic.sim.cfabric)
        self.on_change: Callable[[], None] | None = None

    def _rand32(self) -> int:
        return self._rng.getrandbits(32) if self._rng is not None else secrets.randbits(32)

    def register(
        self,
        buffer: bytearray | memoryview,
        access: Access = Access.LOCAL_WRITE | Access.REMOTE_WRITE,
        base_va: int | None = None,
    ) -> MemoryRegion:
        """Register ``buffer``; returns the region with a fresh random R_Key (never 0)."""
        view = memoryview(buffer)
        if view.readonly:
            raise MemoryRegionError("buffer is read-only: register a bytearray or writable view")
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if len(view) == 0:
            raise MemoryRegionError("cannot register an empty buffer")
        if base_va is None:
            base_va = self._next_va
            self._next_va += (len(view) + 2 * _PAGE - 1) // _PAGE * _PAGE  # plus a guard page
        if base_va < 0 or base_va + len(view) > 1 << 64:
            raise MemoryRegionError(f"base_va {base_va:#x} + length does not fit in 64 bits")
        rkey = 0
        while rkey == 0 or rkey in self._by_rkey:
            rkey = self._rand32()
        mr = MemoryRegion(rkey=rkey, base_va=base_va, buffer=view, access=Access(access))
        self._by_rkey[rkey] = mr
        if self.on_change is not None:
            self.on_change()
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        """Withdraw a region: later writes under its key are refused (BAD_RKEY)."""
        if self._by_rkey.get(mr.rkey) is mr:
            del self._by_rkey[mr.rkey]
        ent = self._placeable.get(mr.rkey)
        if ent is not None and ent[0] is mr:
            del self._placeable[mr.rkey]
        mr.valid = False
        if self.on_change is not None:
            self.on_change()

    def lookup(self, rkey: int) -> MemoryRegion | None:
        return self._by_rkey.get(rkey)

    def check(self, rkey: int, va: int, length: int) -> PlaceStatus:
        """Would a remote write of ``length`` bytes at ``va`` under ``rkey`` be accepted?"""
        mr = self._by_rkey.get(rkey)
        if mr is None:
            return PlaceStatus.BAD_RKEY
        if not mr.access & Access.REMOTE_WRITE:
            return PlaceStatus.NO_PERMISSION
        if length < 0 or not mr.contains(va, length):
            return PlaceStatus.OUT_OF_BOUNDS
        return PlaceStatus.OK

    def place(
        self,
        rkey: int,
        va: int,
        payload: bytes | memoryview,
        op: int = 0,
        length: int = 0,
        mtu: int = 0,
    ) -> PlaceStatus:
        """Write a remote payload after checking key, permission and bounds; all or nothing.
        With the packet's opcode, its message's ``length`` and the QP's ``mtu`` (a data
        packet's) the whole message must fit the region too (:func:`message_fits`), so a
        write that does not fit changes no byte whichever of its packets comes first."""
        ent = self._placeable.get(rkey)
        if ent is not None:
            mr, access, buf, base, end = ent
            if mr.access is access and mr.buffer is buf and mr.base_va == base:
                n = len(payload)
                if (
                    base <= va
                    and va + n <= end
                    and (not mtu or message_fits(op, va, n, length, mtu, base, end))
                ):
                    off = va - base
                    try:
                        buf[off : off + n] = payload
                    except (TypeError, ValueError):  # not a flat byte buffer: the C path copes
                        return self._place_checked(rkey, va, payload, op, length, mtu)
                    mr.bytes_placed += n
                    return _OK
        # first packet of a region, a refusal, or a changed region: every check, in C
        return self._place_checked(rkey, va, payload, op, length, mtu)

    def _place_checked(
        self, rkey: int, va: int, payload: bytes | memoryview, op: int, length: int, mtu: int
    ) -> PlaceStatus:
        """The full checks and the C placement; caches the region for the fast path."""
        mr = self._by_rkey.get(rkey)
        if mr is None:
            return PlaceStatus.BAD_RKEY
        access = mr.access
        if not access & Access.REMOTE_WRITE:
            return PlaceStatus.NO_PERMISSION
        if mtu and not message_fits(op, va, len(payload), length, mtu, mr.base_va, mr.end_va):
            return PlaceStatus.OUT_OF_BOUNDS
        if fast.place(mr.buffer, mr.base_va, va, payload) != fast.PLACE_OK:
            return PlaceStatus.OUT_OF_BOUNDS
        mr.bytes_placed += len(payload)
        buf = mr.buffer
        self._placeable[rkey] = (mr, access, buf, mr.base_va, mr.base_va + len(buf))
        return PlaceStatus.OK

    def __len__(self) -> int:
        return len(self._by_rkey)
