"""The C core (csrc/ compiled by cffi into mrcnic._mrcfast) behind a Python API.

Exports the PSN tracking window, out-of-order placement and the Internet checksum. The C
module is used by default; with MRC_PURE_PYTHON=1 in the environment, or when the C module
fails to import (reported with a RuntimeWarning naming the cause), every name is bound to its
pure-Python twin in mrcnic.fast.twin instead, which has the identical API and results.
BACKEND says which one is live: "c" or "python". See docs/design/core.md.

The wrappers do only what safety and the documented errors need: C checks every bound, and
out-of-range integers surface as cffi OverflowError, re-raised here as ValueError.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType

from mrcnic.fast import twin as _twin
from mrcnic.fast.twin import (
    MARK_DUP,
    MARK_NEW,
    MARK_OOR,
    PLACE_ERR_BOUNDS,
    PLACE_OK,
    PSN_MASK,
    PSN_MODULUS,
    WINDOW_MAX,
    WINDOW_MIN,
    Buffer,
    _bad_offset,
    _bad_psn,
    check_window_args,
    # PSN arithmetic stays in Python under both backends: a cffi call (~60-90 ns) costs more
    # than the arithmetic itself. The C versions exist for C callers and parity tests.
    psn_add,
    psn_diff,
    psn_lt,
)

__all__ = [
    "BACKEND",
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


def _load_c_module() -> ModuleType | None:
    if os.environ.get("MRC_PURE_PYTHON") == "1":
        return None
    try:
        from mrcnic import _mrcfast
    except ImportError as exc:
        warnings.warn(
            f"mrcnic.fast: the C core mrcnic._mrcfast failed to import ({exc}); using the "
            "pure-Python twin (slower). Rebuild it with `make setup`.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return _mrcfast


_mod = _load_c_module()

if _mod is None:
    BACKEND = "python"
    PsnWindow = _twin.PsnWindow
    place = _twin.place
    csum_partial = _twin.csum_partial
    csum_fold = _twin.csum_fold
    udp6_checksum = _twin.udp6_checksum
else:
    BACKEND = "c"
    _ffi = _mod.ffi
    _lib = _mod.lib
    # bound once: each saves an attribute lookup per call on the hot path
    _new = _ffi.new
    _from_buffer = _ffi.from_buffer
    _psnwin_init = _lib.mrc_psnwin_init
    _psnwin_mark = _lib.mrc_psnwin_mark
    _psnwin_test = _lib.mrc_psnwin_test
    _psnwin_advance = _lib.mrc_psnwin_advance
    _psnwin_sack = _lib.mrc_psnwin_sack_bitmap
    _psnwin_holes = _lib.mrc_psnwin_holes
    _c_place = _lib.mrc_place
    _c_csum_partial = _lib.mrc_csum_partial
    _c_csum_fold = _lib.mrc_csum_fold
    _c_udp6 = _lib.mrc_udp6_checksum

    class PsnWindow:  # type: ignore[no-redef]
        """The responder's PSN tracking window (see mrcnic.fast.twin.PsnWindow for the
        semantics). The struct and its bitmap are allocated here; C never allocates."""

        __slots__ = ("_bits", "_w")

        def __init__(self, size: int = 65536, start_psn: int = 0) -> None:
            check_window_args(size, start_psn)
            nwords = size // 64
            self._bits = _new("uint64_t[]", nwords)  # the struct points here: keep it alive
            self._w = _new("mrc_psnwin_t *")
            if _psnwin_init(self._w, self._bits, nwords, size, start_psn) != 0:
                raise ValueError("mrc_psnwin_init refused the window arguments")

        def mark(self, psn: int) -> int:
            try:
                r = _psnwin_mark(self._w, psn)
            except OverflowError:
                raise _bad_psn(psn) from None
            if r < 0:
                raise _bad_psn(psn)
            return r

        def test(self, psn: int) -> bool:
            try:
                r = _psnwin_test(self._w, psn)
            except OverflowError:
                raise _bad_psn(psn) from None
            if r < 0:
                raise _bad_psn(psn)
            return r == 1

        def advance(self) -> int:
            return _psnwin_advance(self._w)

        @property
        def cack_psn(self) -> int:
            return (self._w.expected - 1) & PSN_MASK

        @property
        def expected_psn(self) -> int:
            return self._w.expected

        @property
        def highest_psn(self) -> int:
            return self._w.highest

        @property
        def size(self) -> int:
            return self._w.size

        def sack_bitmap(self, offset: int = 0) -> int:
            try:
                return _psnwin_sack(self._w, offset)
            except OverflowError:
                raise _bad_offset(offset) from None

        def holes(self) -> int:
            return _psnwin_holes(self._w)

        def __repr__(self) -> str:
            return (
                f"PsnWindow(size={self.size}, cack_psn={self.cack_psn:#x}, "
                f"highest_psn={self.highest_psn:#x}, holes={self.holes()})"
            )

    def place(region: Buffer, base_va: int, va: int, payload: Buffer) -> int:
        """Copy payload into region at va - base_va; PLACE_ERR_BOUNDS (nothing written) if any
        byte would fall outside the region. base_va and va must be in [0, 2^64)."""
        reg = _from_buffer("char[]", region, True)  # positional: the keyword costs ~100 ns
        if type(payload) is not bytes:  # cffi passes bytes straight through, others need a view
            payload = _from_buffer(payload)
        try:
            return _c_place(reg, len(reg), base_va, va, payload, len(payload))
        except OverflowError:
            raise ValueError("base_va and va must be in [0, 2^64)") from None

    def csum_partial(data: Buffer, initial: int = 0) -> int:
        """RFC 1071 one's-complement sum of data plus initial, folded to 16 bits (not
        complemented): 0 only when initial is 0 and every byte is 0, else 1..0xFFFF."""
        if type(data) is not bytes:
            data = _from_buffer(data)
        try:
            return _c_csum_partial(data, len(data), initial)
        except OverflowError:
            raise ValueError("initial must be in [0, 2^32)") from None

    def csum_fold(s: int) -> int:
        """Fold a 32-bit accumulator to 16 bits and complement it."""
        try:
            return _c_csum_fold(s)
        except OverflowError:
            raise ValueError("checksum accumulator must be in [0, 2^32)") from None

    def udp6_checksum(src: Buffer, dst: Buffer, udp: Buffer) -> int:
        """UDP-over-IPv6 checksum including the pseudo-header; 0 is returned as 0xFFFF."""
        try:  # fast path: all three are bytes, which cffi passes without a view
            r = _c_udp6(src, len(src), dst, len(dst), udp, len(udp))
        except TypeError:
            src, dst, udp = _from_buffer(src), _from_buffer(dst), _from_buffer(udp)
            r = _c_udp6(src, len(src), dst, len(dst), udp, len(udp))
        if r < 0:
            raise ValueError("src and dst must be 16-byte IPv6 addresses")
        return r
