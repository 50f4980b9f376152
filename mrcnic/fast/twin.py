"""Pure-Python twins of the C core (csrc/ -> mrcnic._mrcfast), with the API of mrcnic.fast.

Each function and class here behaves exactly like its C counterpart, bit for bit, including
the errors it raises; hypothesis tests (tests/unit/test_fast*.py) hold the two together.
mrcnic.fast falls back to this module when MRC_PURE_PYTHON=1 or the C module cannot load.
"""

from __future__ import annotations

from typing import TypeAlias

# any object with the buffer protocol; collections.abc.Buffer needs Python 3.12
Buffer: TypeAlias = bytes | bytearray | memoryview

__all__ = [
    "MARK_DUP",
    "MARK_NEW",
    "MARK_OOR",
    "PLACE_ERR_BOUNDS",
    "PLACE_OK",
    "PSN_MASK",
    "PSN_MODULUS",
    "WINDOW_MAX",
    "WINDOW_MIN",
    "PsnWindow",
    "csum_fold",
    "csum_partial",
    "place",
    "psn_add",
    "psn_diff",
    "psn_lt",
    "udp6_checksum",
]

PSN_MODULUS = 1 << 24
PSN_MASK = PSN_MODULUS - 1
_PSN_HALF = 1 << 23

MARK_NEW = 0  # first time seen, inside the window
MARK_DUP = 1  # already seen, or behind the cumulative ack
MARK_OOR = 2  # at or beyond expected_psn + size: outside the window, not recorded

PLACE_OK = 0
PLACE_ERR_BOUNDS = -1

WINDOW_MIN = 64
WINDOW_MAX = 1 << 22

_U32_END = 1 << 32
_U64_END = 1 << 64
_U64_MASK = _U64_END - 1


# --- 24-bit PSN arithmetic -------------------------------------------------------------------


def psn_add(a: int, n: int) -> int:
    """a + n modulo 2^24 (n may be negative)."""
    return (a + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b as a serial-number distance in [-2^23, 2^23)."""
    return ((a - b + _PSN_HALF) & PSN_MASK) - _PSN_HALF


def psn_lt(a: int, b: int) -> bool:
    """True iff a comes before b (RFC 1982 style over 2^24)."""
    return ((a - b + _PSN_HALF) & PSN_MASK) < _PSN_HALF


def check_window_args(size: int, start_psn: int) -> None:
    """Raise ValueError unless size is a power of two in [64, 2^22] and start_psn is 24-bit."""
    if not isinstance(size, int) or size < WINDOW_MIN or size > WINDOW_MAX or size & (size - 1):
        raise ValueError(f"window size must be a power of two in [{WINDOW_MIN}, {WINDOW_MAX}]")
    if not isinstance(start_psn, int) or not 0 <= start_psn <= PSN_MASK:
        raise ValueError(f"start_psn must be in [0, {PSN_MASK:#x}]")


def _bad_psn(psn: int) -> ValueError:
    return ValueError(f"PSN {psn!r} outside [0, {PSN_MASK:#x}]")


def _bad_offset(offset: int) -> ValueError:
    return ValueError(f"SACK offset {offset!r} outside [0, 2^32)")


# --- the responder's PSN tracking window --------------------------------------------------------


class PsnWindow:
    """The responder's PSN tracking window.

    `_bits` is a Python int holding bit i for PSN expected_psn + i (the C version keeps a
    circular bitmap instead); bits behind expected_psn are shifted out by advance(). `_nset`
    counts its set bits, so holes() needs no popcount.
    """

    __slots__ = ("_bits", "_expected", "_highest", "_nset", "_size")

    def __init__(self, size: int = 65536, start_psn: int = 0) -> None:
        check_window_args(size, start_psn)
        self._size = size
        self._expected = start_psn
        self._highest = (start_psn - 1) & PSN_MASK
        self._bits = 0
        self._nset = 0

    def mark(self, psn: int) -> int:
        """Record psn: MARK_NEW, MARK_DUP or MARK_OOR (not recorded)."""
        if not 0 <= psn <= PSN_MASK:
            raise _bad_psn(psn)
        d = (psn - self._expected) & PSN_MASK
        if d >= _PSN_HALF:
            return MARK_DUP
        if d >= self._size:
            return MARK_OOR
        bit = 1 << d
        if self._bits & bit:
            return MARK_DUP
        self._bits |= bit
        self._nset += 1
        if d >= ((self._highest - self._expected + 1) & PSN_MASK):
            self._highest = psn
        return MARK_NEW

    def test(self, psn: int) -> bool:
        """True iff psn was received (always True behind the cumulative ack)."""
        if not 0 <= psn <= PSN_MASK:
            raise _bad_psn(psn)
        d = (psn - self._expected) & PSN_MASK
        if d >= _PSN_HALF:
            return True
        if d >= self._size:
            return False
        return bool(self._bits >> d & 1)

    def advance(self) -> int:
        """Move the cumulative ack past every contiguous received PSN; return how many."""
        bits = self._bits
        if not bits & 1:  # O(1) answer for the common "hole at the ack" case
            return 0
        # (bits + 1) & ~bits isolates the lowest clear bit: its index is the run of ones
        n = ((bits + 1) & ~bits).bit_length() - 1
        self._bits = bits >> n
        self._nset -= n
        self._expected = (self._expected + n) & PSN_MASK
        return n

    @property
    def cack_psn(self) -> int:
        return (self._expected - 1) & PSN_MASK

    @property
    def expected_psn(self) -> int:
        return self._expected

    @property
    def highest_psn(self) -> int:
        return self._highest

    @property
    def size(self) -> int:
        return self._size

    def sack_bitmap(self, offset: int = 0) -> int:
        """64 bits: bit i set iff PSN expected_psn + offset + i was received."""
        if not 0 <= offset < _U32_END:
            raise _bad_offset(offset)
        if offset >= self._size:
            return 0  # nothing is ever recorded past the window
        # mask before shifting: costs O(offset), not O(window) like shifting the whole int
        return (self._bits & (_U64_MASK << offset)) >> offset

    def holes(self) -> int:
        """PSNs missing between expected_psn and highest_psn inclusive."""
        span = (self._highest - self._expected + 1) & PSN_MASK
        return span - self._nset

    def __repr__(self) -> str:
        return (
            f"PsnWindow(size={self._size}, cack_psn={self.cack_psn:#x}, "
            f"highest_psn={self._highest:#x}, holes={self.holes()})"
        )


# --- out-of-order placement -----------------------------------------------------------------


def place(region: Buffer, base_va: int, va: int, payload: Buffer) -> int:
    """Copy payload into region at va - base_va; PLACE_ERR_BOUNDS (nothing written) if any
    byte would fall outside the region. base_va and va must be in [0, 2^64) (ValueError)."""
    if not (0 <= base_va < _U64_END and 0 <= va < _U64_END):
        raise ValueError("base_va and va must be in [0, 2^64)")
    with memoryview(region) as reg, memoryview(payload) as pay:
        if reg.readonly:
            raise BufferError("place() needs a writable region (bytearray, writable memoryview)")
        _need_contiguous(reg, pay)
        off = va - base_va
        n = pay.nbytes
        if off < 0 or off > reg.nbytes or n > reg.nbytes - off:
            return PLACE_ERR_BOUNDS
        if n:
            reg.cast("B")[off : off + n] = pay.cast("B")
    return PLACE_OK


# --- RFC 1071 Internet checksum -------------------------------------------------------------


def _need_contiguous(*views: memoryview) -> None:
    # the C side reads raw memory and refuses strided buffers the same way
    for v in views:
        if not v.c_contiguous:
            raise BufferError("buffer is not C-contiguous")


def _fold16(s: int) -> int:
    # The canonical one's-complement representative: 0 only for an all-zero sum, else the
    # residue mod 0xFFFF in 1..0xFFFF (what end-around-carry folding yields, in any grouping).
    return 0 if s == 0 else (s - 1) % 0xFFFF + 1


def _sum_be(data: Buffer) -> tuple[int, int]:
    """(length in bytes, a value congruent mod 0xFFFF to the sum of the 16-bit words)."""
    # The big-endian integer of the data is congruent mod 0xFFFF to the sum of its 16-bit
    # words (2^16 = 1 mod 0xFFFF); an odd tail byte is padded with a zero low byte.
    if type(data) is bytes or type(data) is bytearray:  # the common case, without a view
        n = len(data)
        v = int.from_bytes(data, "big")
    else:
        with memoryview(data) as mv:
            _need_contiguous(mv)
            n = mv.nbytes
            v = int.from_bytes(mv, "big")
    return n, (v << 8 if n & 1 else v)


def csum_partial(data: Buffer, initial: int = 0) -> int:
    """RFC 1071 one's-complement sum of data plus initial, folded to 16 bits (not
    complemented): 0 only when initial is 0 and every byte is 0, else 1..0xFFFF."""
    if not 0 <= initial < _U32_END:
        raise ValueError("initial must be in [0, 2^32)")
    return _fold16(_sum_be(data)[1] + initial)


def csum_fold(s: int) -> int:
    """Fold a 32-bit accumulator to 16 bits and complement it."""
    if not 0 <= s < _U32_END:
        raise ValueError("checksum accumulator must be in [0, 2^32)")
    return ~_fold16(s) & 0xFFFF


def udp6_checksum(src: Buffer, dst: Buffer, udp: Buffer) -> int:
    """UDP-over-IPv6 checksum including the pseudo-header; 0 is returned as 0xFFFF."""
    src_len, src_sum = _sum_be(src)
    dst_len, dst_sum = _sum_be(dst)
    udp_len, udp_sum = _sum_be(udp)
    if src_len != 16 or dst_len != 16:
        raise ValueError("src and dst must be 16-byte IPv6 addresses")
    ulen = udp_len & 0xFFFFFFFF  # the pseudo-header's 32-bit upper-layer length
    total = src_sum + dst_sum + (ulen >> 16) + (ulen & 0xFFFF) + 17 + udp_sum
    return ~_fold16(total) & 0xFFFF or 0xFFFF
