"""SRv6 uSID containers (RFC 9800 NEXT-C-SID) and the algorithmic EV -> path -> address map.

A destination address is ``block | uSID1 | uSID2 | ... | 0...``: a locator block of
``lblen`` bits followed by up to ``(128 - lblen) // nflen`` micro-SIDs.  A switch owning
``block:mine::/48`` consumes its uSID by shifting the rest left ("uN" behaviour).  A uSID of
value 0 ends the container, so the first zero uSID is where the path ends.

The second half of this module is the address plan of a multi-plane two-tier Clos (see
docs/design/architecture.md, a contract): ``uSID = plane << 12 | role << 10 | index`` and
``plane = ev % planes``, ``t1 = (ev // planes) % t1_count``.  A NIC keeps one
:class:`DestTemplate` per destination and derives any EV's address from it, so per-EV state
is a 32-bit number, never a 128-bit address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import cache

from mrcnic.errors import MrcError

ADDR_BYTES = 16
ADDR_BITS = 128
_ADDR_MASK = (1 << ADDR_BITS) - 1


class UsidError(MrcError, ValueError):
    """An address, uSID list or plan parameter that is not valid; the message says what."""


@dataclass(frozen=True, slots=True)
class UsidFormat:
    """The NEXT-C-SID carrier format: a locator block followed by fixed-width uSIDs."""

    block: bytes = bytes.fromhex("fcbbbb00")
    lblen: int = 32
    nflen: int = 16

    def __post_init__(self) -> None:
        if self.nflen not in (16, 32):
            raise UsidError(f"nflen must be 16 or 32 bits, not {self.nflen}")
        if self.lblen % 16 or not 16 <= self.lblen <= 96:
            raise UsidError(f"lblen must be a multiple of 16 in 16..96, not {self.lblen}")
        if len(self.block) * 8 != self.lblen:
            raise UsidError(
                f"block is {len(self.block) * 8} bits but lblen is {self.lblen}: "
                f"give the block as exactly {self.lblen // 8} bytes"
            )
        if self.max_usids < 1:
            raise UsidError("lblen leaves no room for a uSID")

    @property
    def max_usids(self) -> int:
        return (ADDR_BITS - self.lblen) // self.nflen

    @property
    def usid_mask(self) -> int:
        return (1 << self.nflen) - 1

    @property
    def block_int(self) -> int:
        return int.from_bytes(self.block, "big") << (ADDR_BITS - self.lblen)

    @classmethod
    def from_prefix(cls, text: str, nflen: int = 16) -> UsidFormat:
        """``UsidFormat.from_prefix("fcbb:bb00::/32")``."""
        try:
            net = ipaddress.IPv6Network(text, strict=True)
        except ValueError as e:
            raise UsidError(f"bad locator block {text!r}: {e}") from None
        lblen = net.prefixlen
        if lblen % 16 or not 16 <= lblen <= 96:
            raise UsidError(
                f"locator block {text!r}: prefix length must be a multiple of 16 in 16..96"
            )
        return cls(block=net.network_address.packed[: lblen // 8], lblen=lblen, nflen=nflen)

    def prefix_text(self) -> str:
        return f"{ipaddress.IPv6Address(self.block_int)}/{self.lblen}"


DEFAULT_FORMAT = UsidFormat()


class UsidShift:
    """The uSID shift (RFC 9800 NEXT-C-SID, Linux ``seg6local End flavors next-csid``) for one
    carrier format, on a 128-bit address held as an int: the one place it is written. Every
    shift in the project (this module's :func:`shift`, the switch's pipeline and its queue's
    trims, the simulator's trims) is :attr:`shift` or :meth:`final`. No validation: callers
    that need a well-formed carrier check it first (:func:`validate`).

    ``block_mask``: the locator block's bits; ``carrier_mask``: every bit after the block;
    ``tail_mask``: every bit after the active uSID (all zero = end of carrier).
    """

    __slots__ = ("lblen", "nflen", "block_mask", "carrier_mask", "tail_mask", "shift")

    def __init__(self, lblen: int = 32, nflen: int = 16) -> None:
        if lblen <= 0 or nflen <= 0 or lblen + nflen > ADDR_BITS:
            raise UsidError(f"no room for a {nflen}-bit uSID after a {lblen}-bit block")
        after_block = ADDR_BITS - lblen
        self.lblen = lblen
        self.nflen = nflen
        self.carrier_mask = carrier = (1 << after_block) - 1
        self.block_mask = block = _ADDR_MASK & ~carrier
        self.tail_mask = (1 << (after_block - nflen)) - 1

        # A closure, not a method: the switch calls it on its hot path, and a plain function
        # over local constants is cheaper than a bound method reading its instance.
        def shift(value: int) -> int:
            """Consume the active uSID: keep the block, move the rest left by one uSID,
            zero-filling the tail."""
            return (value & block) | ((value << nflen) & carrier)

        self.shift = shift

    def final(self, value: int) -> int:
        """Shifted until end of carrier (nothing after the active uSID): the address the
        destination sees, and the one a UDP checksum covers."""
        tail = self.tail_mask
        shift = self.shift
        while value & tail:
            value = shift(value)
        return value


@cache
def shifter(lblen: int = 32, nflen: int = 16) -> UsidShift:
    """The (shared) :class:`UsidShift` of a carrier format."""
    return UsidShift(lblen, nflen)


def final_destination(
    addr: bytes | bytearray | memoryview, lblen: int = 32, nflen: int = 16
) -> bytes:
    """``addr`` (16 bytes) shifted until end of carrier, unvalidated: what a switch computes
    for a packet it trims mid-fabric (the destination's block and uSIDs are not checked)."""
    return shifter(lblen, nflen).final(int.from_bytes(addr, "big")).to_bytes(ADDR_BYTES, "big")


def _as_int(addr: bytes | bytearray | memoryview) -> int:
    if len(addr) != ADDR_BYTES:
        raise UsidError(f"an IPv6 address is 16 bytes, got {len(addr)}")
    return int.from_bytes(addr, "big")


def _slots(value: int, fmt: UsidFormat) -> list[int]:
    """Every uSID slot of the address, zeros included, left to right."""
    tail_bits = ADDR_BITS - fmt.lblen
    mask = fmt.usid_mask
    return [(value >> (tail_bits - (i + 1) * fmt.nflen)) & mask for i in range(fmt.max_usids)]


def _check_block(value: int, fmt: UsidFormat) -> None:
    if value >> (ADDR_BITS - fmt.lblen) != fmt.block_int >> (ADDR_BITS - fmt.lblen):
        raise UsidError(
            f"{ipaddress.IPv6Address(value)} is not in the locator block {fmt.prefix_text()}"
        )


def encode(usids: Sequence[int], fmt: UsidFormat = DEFAULT_FORMAT) -> bytes:
    """Build a destination address carrying ``usids`` (1..max_usids, none zero)."""
    if not 1 <= len(usids) <= fmt.max_usids:
        raise UsidError(f"a container holds 1 to {fmt.max_usids} uSIDs, got {len(usids)}")
    value = fmt.block_int
    shift = ADDR_BITS - fmt.lblen
    for i, usid in enumerate(usids):
        if not 0 < usid <= fmt.usid_mask:
            what = "0 is reserved (it ends the container)" if usid == 0 else "out of range"
            raise UsidError(f"uSID #{i + 1} = {usid}: {what}")
        shift -= fmt.nflen
        value |= usid << shift
    return value.to_bytes(ADDR_BYTES, "big")


def validate(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> None:
    """Raise :class:`UsidError` for a wrong block, an empty container or a zero in the middle."""
    value = _as_int(addr)
    _check_block(value, fmt)
    slots = _slots(value, fmt)
    if slots[0] == 0:
        raise UsidError(f"{to_text(addr)}: no uSID after the block")
    if 0 in slots:
        first_zero = slots.index(0)
        if any(slots[first_zero:]):
            raise UsidError(
                f"{to_text(addr)}: zero uSID at position {first_zero + 1} followed by more uSIDs"
            )


def decode(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> list[int]:
    """The uSIDs an address carries, in order (validated)."""
    validate(addr, fmt)
    slots = _slots(_as_int(addr), fmt)
    return slots[: slots.index(0)] if 0 in slots else slots


def active_usid(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> int:
    """The uSID right after the block: the one the next switch matches."""
    value = _as_int(addr)
    _check_block(value, fmt)
    return (value >> (ADDR_BITS - fmt.lblen - fmt.nflen)) & fmt.usid_mask


def shift(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> bytes:
    """Consume the active uSID: shift the rest left by one uSID, zero-filling the tail."""
    value = _as_int(addr)
    _check_block(value, fmt)
    return shifter(fmt.lblen, fmt.nflen).shift(value).to_bytes(ADDR_BYTES, "big")


def is_end_of_carrier(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> bool:
    """True when nothing follows the active uSID (RFC 9800 "end of carrier")."""
    value = _as_int(addr)
    _check_block(value, fmt)
    return value & shifter(fmt.lblen, fmt.nflen).tail_mask == 0


def final_of(addr: bytes, fmt: UsidFormat = DEFAULT_FORMAT) -> bytes:
    """The address a packet carries after its last shift (the one UDP checksums cover)."""
    validate(addr, fmt)
    return shifter(fmt.lblen, fmt.nflen).final(_as_int(addr)).to_bytes(ADDR_BYTES, "big")


def to_text(addr: bytes) -> str:
    return str(ipaddress.IPv6Address(bytes(addr)))


def from_text(text: str) -> bytes:
    try:
        return ipaddress.IPv6Address(text).packed
    except ValueError as e:
        raise UsidError(f"bad IPv6 address {text!r}: {e}") from None


# --- The address plan of a multi-plane two-tier Clos -------------------------------------


class Role(IntEnum):
    """What a uSID names (bits 11-10); 0 is reserved so that no uSID is ever 0."""

    T0 = 1
    T1 = 2
    DOWNLINK = 3


PLANE_BITS = 4
ROLE_BITS = 2
INDEX_BITS = 10
MAX_PLANES = 1 << PLANE_BITS
MAX_INDEX = (1 << INDEX_BITS) - 1


def make_usid(plane: int, role: Role, index: int) -> int:
    if not 0 <= plane < MAX_PLANES:
        raise UsidError(f"plane {plane} out of range 0..{MAX_PLANES - 1}")
    if not 0 <= index <= MAX_INDEX:
        raise UsidError(f"index {index} out of range 0..{MAX_INDEX}")
    return plane << (ROLE_BITS + INDEX_BITS) | int(Role(role)) << INDEX_BITS | index


def split_usid(usid: int) -> tuple[int, Role, int]:
    """Inverse of :func:`make_usid`: ``(plane, role, index)``."""
    if not 0 < usid <= 0xFFFF:
        raise UsidError(f"uSID {usid} out of range 1..65535")
    role_bits = (usid >> INDEX_BITS) & ((1 << ROLE_BITS) - 1)
    if role_bits == 0:
        raise UsidError(f"uSID {usid:#06x} has the reserved role 0")
    return usid >> (ROLE_BITS + INDEX_BITS), Role(role_bits), usid & MAX_INDEX


def t0_usid(plane: int, t0: int) -> int:
    return make_usid(plane, Role.T0, t0)


def t1_usid(plane: int, t1: int) -> int:
    return make_usid(plane, Role.T1, t1)


def downlink_usid(plane: int, k: int) -> int:
    return make_usid(plane, Role.DOWNLINK, k)


@dataclass(frozen=True, slots=True)
class ClosShape:
    """The shape of a multi-plane two-tier Clos: what the EV -> address map needs."""

    planes: int = 8
    t0: int = 2
    t1: int = 2
    hosts_per_t0: int = 2
    fmt: UsidFormat = DEFAULT_FORMAT

    def __post_init__(self) -> None:
        if not 1 <= self.planes <= MAX_PLANES:
            raise UsidError(f"planes must be 1..{MAX_PLANES}, not {self.planes}")
        for name, n in (("t0", self.t0), ("t1", self.t1), ("hosts_per_t0", self.hosts_per_t0)):
            if not 1 <= n <= MAX_INDEX + 1:
                raise UsidError(f"{name} must be 1..{MAX_INDEX + 1}, not {n}")
        if self.fmt.nflen != 16 or self.fmt.max_usids < 4:
            raise UsidError("the Clos plan needs 16-bit uSIDs and room for 4 of them")

    @property
    def host_count(self) -> int:
        return self.t0 * self.hosts_per_t0

    def _check_host(self, host: int) -> None:
        if not 0 <= host < self.host_count:
            raise UsidError(f"host {host} out of range 0..{self.host_count - 1}")

    def host_t0(self, host: int) -> int:
        self._check_host(host)
        return host // self.hosts_per_t0

    def host_downlink(self, host: int) -> int:
        self._check_host(host)
        return host % self.hosts_per_t0

    def _check_plane(self, plane: int) -> None:
        if not 0 <= plane < self.planes:
            raise UsidError(f"plane {plane} out of range 0..{self.planes - 1}")


def ev_plane(shape: ClosShape, ev: int) -> int:
    return ev % shape.planes


def ev_t1(shape: ClosShape, ev: int) -> int:
    return (ev // shape.planes) % shape.t1


def path_usids(shape: ClosShape, src_host: int, dst_host: int, ev: int) -> list[int]:
    """``[T0a, DL]`` under one T0, ``[T0a, T1, T0b, DL]`` across the spine."""
    if not 0 <= ev <= 0xFFFFFFFF:
        raise UsidError(f"EV {ev} is not a 32-bit value")
    plane = ev_plane(shape, ev)
    src_t0, dst_t0 = shape.host_t0(src_host), shape.host_t0(dst_host)
    dl = downlink_usid(plane, shape.host_downlink(dst_host))
    if src_t0 == dst_t0:
        return [t0_usid(plane, src_t0), dl]
    return [t0_usid(plane, src_t0), t1_usid(plane, ev_t1(shape, ev)), t0_usid(plane, dst_t0), dl]


def ev_address(shape: ClosShape, src_host: int, dst_host: int, ev: int) -> bytes:
    return encode(path_usids(shape, src_host, dst_host, ev), shape.fmt)


def final_address(shape: ClosShape, dst_host: int, plane: int) -> bytes:
    """``block:DL::``: what the destination finally sees (and the UDP checksum covers)."""
    shape._check_plane(plane)
    return encode([downlink_usid(plane, shape.host_downlink(dst_host))], shape.fmt)


def host_address(shape: ClosShape, host: int, plane: int) -> bytes:
    """A host's source address on a plane, ``block:T0:DL::``, unique in the fabric."""
    shape._check_plane(plane)
    return encode(
        [t0_usid(plane, shape.host_t0(host)), downlink_usid(plane, shape.host_downlink(host))],
        shape.fmt,
    )


def host_of_address(shape: ClosShape, addr: bytes) -> tuple[int, int]:
    """``(host, plane)`` of a host's source address ``block:T0:DL::`` (the inverse of
    :func:`host_address`); UsidError for anything else."""
    usids = decode(bytes(addr), shape.fmt)
    if len(usids) != 2:
        raise UsidError(f"{to_text(bytes(addr))} is not a host address (block:T0:DL::)")
    plane, role, t0 = split_usid(usids[0])
    plane2, role2, dl = split_usid(usids[1])
    if role is not Role.T0 or role2 is not Role.DOWNLINK or plane2 != plane:
        raise UsidError(f"{to_text(bytes(addr))} is not a host address (block:T0:DL::)")
    shape._check_plane(plane)
    if not (0 <= t0 < shape.t0 and 0 <= dl < shape.hosts_per_t0):
        raise UsidError(f"{to_text(bytes(addr))} names no host of this fabric")
    return t0 * shape.hosts_per_t0 + dl, plane


class DestTemplate:
    """A NIC's per-destination template: any EV's address in a few integer operations.

    Holds, per plane, the address with every uSID filled in but the T1 slot, so that
    :meth:`address` only ORs the T1 uSID in (nothing per EV is stored).
    """

    __slots__ = ("shape", "src_host", "dst_host", "_base", "_final", "_t1_shift", "_spine")

    def __init__(self, shape: ClosShape, src_host: int, dst_host: int) -> None:
        self.shape = shape
        self.src_host = src_host
        self.dst_host = dst_host
        self._spine = shape.host_t0(src_host) != shape.host_t0(dst_host)
        self._t1_shift = ADDR_BITS - shape.fmt.lblen - 2 * shape.fmt.nflen
        bases: list[int] = []
        finals: list[bytes] = []
        for plane in range(shape.planes):
            usids = path_usids(shape, src_host, dst_host, plane)  # ev == plane -> t1 index 0
            if self._spine:
                usids[1] = 0  # the T1 slot, filled per EV
                value = shape.fmt.block_int
                s = ADDR_BITS - shape.fmt.lblen
                for u in usids:
                    s -= shape.fmt.nflen
                    value |= u << s
            else:
                value = int.from_bytes(encode(usids, shape.fmt), "big")
            bases.append(value)
            finals.append(final_address(shape, dst_host, plane))
        self._base = tuple(bases)
        self._final = tuple(finals)

    @property
    def crosses_spine(self) -> bool:
        return self._spine

    def plane(self, ev: int) -> int:
        return ev % self.shape.planes

    def address(self, ev: int) -> bytes:
        shape = self.shape
        plane = ev % shape.planes
        value = self._base[plane]
        if self._spine:
            t1 = (ev // shape.planes) % shape.t1
            value |= t1_usid(plane, t1) << self._t1_shift
        return value.to_bytes(ADDR_BYTES, "big")

    def final(self, ev: int) -> bytes:
        return self._final[ev % self.shape.planes]


@dataclass(frozen=True, slots=True)
class PathInfo:
    """Where an address leads: the reverse of :func:`ev_address`."""

    plane: int
    src_t0: int
    t1: int | None
    dst_t0: int
    downlink: int
    dst_host: int


def decode_path(shape: ClosShape, addr: bytes) -> PathInfo:
    """Read plane, T1 and destination back out of a path address."""
    usids = decode(addr, shape.fmt)
    parts = [split_usid(u) for u in usids]
    planes = {p for p, _, _ in parts}
    if len(planes) != 1:
        raise UsidError(f"{to_text(addr)}: uSIDs from more than one plane {sorted(planes)}")
    plane = planes.pop()
    shape._check_plane(plane)
    roles = [r for _, r, _ in parts]
    idx = [i for _, _, i in parts]
    if roles == [Role.T0, Role.DOWNLINK]:
        src_t0, t1, dst_t0, dl = idx[0], None, idx[0], idx[1]
    elif roles == [Role.T0, Role.T1, Role.T0, Role.DOWNLINK]:
        src_t0, t1, dst_t0, dl = idx
        if src_t0 == dst_t0:
            raise UsidError(f"{to_text(addr)}: crosses the spine back to the same T0")
        if t1 >= shape.t1:
            raise UsidError(f"{to_text(addr)}: T1 {t1} does not exist (t1={shape.t1})")
    else:
        names = "-".join(r.name for r in roles)
        raise UsidError(f"{to_text(addr)}: {names} is not a path of a two-tier Clos")
    if src_t0 >= shape.t0 or dst_t0 >= shape.t0:
        raise UsidError(f"{to_text(addr)}: T0 index beyond t0={shape.t0}")
    if dl >= shape.hosts_per_t0:
        raise UsidError(f"{to_text(addr)}: downlink {dl} beyond hosts_per_t0={shape.hosts_per_t0}")
    return PathInfo(plane, src_t0, t1, dst_t0, dl, dst_t0 * shape.hosts_per_t0 + dl)
