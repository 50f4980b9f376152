"""Registered memory: keys, bounds, permissions, deregistration; nothing written on refusal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.memory import Access, MemoryRegionError, MemoryTable, PlaceStatus


def test_register_gives_distinct_nonzero_keys_and_disjoint_ranges():
    mt = MemoryTable(seed=3)
    regions = [mt.register(bytearray(5000)) for _ in range(20)]
    assert len({r.rkey for r in regions}) == 20 and all(r.rkey for r in regions)
    spans = sorted((r.base_va, r.end_va) for r in regions)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False))


def test_keys_are_seed_reproducible_and_unseeded_random():
    assert (
        MemoryTable(seed=9).register(bytearray(8)).rkey
        == MemoryTable(seed=9).register(bytearray(8)).rkey
    )
    keys = {MemoryTable().register(bytearray(8)).rkey for _ in range(8)}
    assert len(keys) > 1


def test_place_checks_key_permission_bounds():
    mt = MemoryTable(seed=1)
    buf = bytearray(100)
    mr = mt.register(buf)
    assert mt.place(mr.rkey, mr.base_va + 10, b"abc") is PlaceStatus.OK
    assert buf[10:13] == b"abc"
    assert mt.place(mr.rkey ^ 1, mr.base_va, b"x") is PlaceStatus.BAD_RKEY
    assert mt.place(mr.rkey, mr.base_va + 98, b"xyz") is PlaceStatus.OUT_OF_BOUNDS
    assert mt.place(mr.rkey, mr.base_va - 1, b"x") is PlaceStatus.OUT_OF_BOUNDS
    assert buf[98:] == b"\0\0" and buf[:10] == bytes(10)
    ro = mt.register(bytearray(10), access=Access.LOCAL_WRITE)
    assert mt.place(ro.rkey, ro.base_va, b"x") is PlaceStatus.NO_PERMISSION
    mt.deregister(mr)
    assert mt.place(mr.rkey, mr.base_va, b"q") is PlaceStatus.BAD_RKEY
    assert buf[0] == 0 and not mr.valid


def test_register_refuses_bad_buffers():
    mt = MemoryTable(seed=1)
    with pytest.raises(MemoryRegionError):
        mt.register(bytearray())
    with pytest.raises(MemoryRegionError):
        mt.register(memoryview(b"readonly"))


@settings(max_examples=200, deadline=None)
@given(off=st.integers(-300, 600), n=st.integers(0, 300))
def test_place_is_all_or_nothing(off, n):
    mt = MemoryTable(seed=2)
    outer = bytearray(b"\xee" * 700)
    mr = mt.register(memoryview(outer)[100:600])  # guard bytes around the region
    status = mt.place(mr.rkey, mr.base_va + off, b"\x11" * n)
    inside = off >= 0 and off + n <= 500
    assert (status is PlaceStatus.OK) == inside
    assert outer[:100] == b"\xee" * 100 and outer[600:] == b"\xee" * 100
    expect = bytearray(b"\xee" * 500)
    if inside:
        expect[off : off + n] = b"\x11" * n
    assert outer[100:600] == expect
