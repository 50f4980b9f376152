"""The C-side memo of the pipeline's decisions (csrc/mrc_fcache.c) and its Python twin.

:class:`DecisionCache` is one in-port's fixed-size, open-addressing table of
``54 header bytes -> decision record``: exactly the keys and values of
:meth:`mrcswitch.pipeline.Pipeline.header_cache`, stored where C can read them, so that
:meth:`mrcswitch.fastpath.Planner.bind_wake` forwards a whole batch in one C call. Python
makes every decision (on a miss) and inserts it; the table only replays them. It is never
invalidated: the forwarding table is static and a decision does not depend on port state
(a down port is honoured through its budget, -1, which queues its frames into Python).
A full probe window evicts the key's home entry, so the table stays bounded.
"""

from __future__ import annotations

import errno
import struct

from mrcnic.io import batch as batch_io

# csrc/mrc_fcache.h (tests/unit/test_switch_c_constants.py holds each to the C module's value)
ENTRY_BYTES = 64  # MRC_FCACHE_ENTRY
PROBES = 8  # MRC_FCACHE_PROBES
KEY_LEN = 54  # MRC_FWD_HDR_LEN
KEY_AT = 1  # MRC_FCACHE_KEY_AT: an entry's key starts here (byte 0: used)
CODE_AT = 56  # MRC_FCACHE_CODE_AT: its decision record (int32, native order)
DEFAULT_ENTRIES = 4096
_CODE = struct.Struct("=i")

_mod = batch_io._mod


def fnv1a(key: bytes | memoryview) -> int:
    """FNV-1a, 32 bits: the hash of csrc/mrc_fcache.c."""
    h = 2166136261
    for b in bytes(key):
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def _entries_ok(table_len: int) -> int:
    entries = table_len // ENTRY_BYTES
    if entries <= 0 or table_len % ENTRY_BYTES or entries & (entries - 1):
        return 0
    return entries


def insert_py(table: memoryview, key: bytes, code: int) -> int:
    """Twin of mrc_fcache_insert."""
    entries = _entries_ok(len(table))
    if len(key) != KEY_LEN or not entries:
        return -errno.EINVAL
    home = fnv1a(key) & (entries - 1)
    at = home * ENTRY_BYTES
    for j in range(min(PROBES, entries)):
        e = ((home + j) & (entries - 1)) * ENTRY_BYTES
        if table[e] == 0 or table[e + KEY_AT : e + KEY_AT + KEY_LEN] == key:
            at = e
            break
    table[at] = 1
    table[at + KEY_AT : at + KEY_AT + KEY_LEN] = key
    _CODE.pack_into(table, at + CODE_AT, code)
    return 0


def lookup_py(table: memoryview, key: bytes) -> int | None:
    """Twin of mrc_fcache_lookup: the stored record, or None."""
    entries = _entries_ok(len(table))
    if len(key) != KEY_LEN or not entries:
        raise ValueError("mrc_fcache_lookup: bad key or table")
    home = fnv1a(key) & (entries - 1)
    for j in range(min(PROBES, entries)):
        e = ((home + j) & (entries - 1)) * ENTRY_BYTES
        if table[e] == 0:
            return None
        if table[e + KEY_AT : e + KEY_AT + KEY_LEN] == key:
            return _CODE.unpack_from(table, e + CODE_AT)[0]
    return None


class DecisionCache:
    """One in-port's decision table (``entries``: a power of two). ``ptr`` (C) and ``view``
    (bytes) are the table; ``table_len`` its size in bytes."""

    __slots__ = ("entries", "table_len", "ptr", "view", "_use_c")

    def __init__(self, entries: int = DEFAULT_ENTRIES, *, use_c: bool | None = None) -> None:
        if entries <= 0 or entries & (entries - 1):
            raise ValueError("entries must be a power of two")
        self._use_c = (_mod is not None) if use_c is None else use_c
        if self._use_c and _mod is None:
            raise RuntimeError("the C module mrcnic._mrcfast with mrc_fcache is not available")
        self.entries = entries
        self.table_len = entries * ENTRY_BYTES
        if self._use_c:
            self.ptr = _mod.ffi.new("uint8_t[]", self.table_len)
            self.view = memoryview(_mod.ffi.buffer(self.ptr))
        else:
            self.ptr = None
            self.view = memoryview(bytearray(self.table_len))

    def insert(self, key: bytes, code: int) -> None:
        if self._use_c:
            r = _mod.lib.mrc_fcache_insert(self.ptr, self.table_len, key, len(key), code)
        else:
            r = insert_py(self.view, key, code)
        if r < 0:
            raise ValueError("mrc_fcache_insert: the key is 54 bytes")

    def get(self, key: bytes) -> int | None:
        if self._use_c:
            out = _mod.ffi.new("int32_t *")
            r = _mod.lib.mrc_fcache_lookup(self.ptr, self.table_len, key, len(key), out)
            if r < 0:
                raise ValueError("mrc_fcache_lookup: the key is 54 bytes")
            return out[0] if r else None
        return lookup_py(self.view, key)

    def __len__(self) -> int:
        return sum(1 for e in range(0, self.table_len, ENTRY_BYTES) if self.view[e])
