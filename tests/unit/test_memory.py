"""Registered memory: keys, bounds, permissions, deregistration; nothing written on refusal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.transport.memory import Access, MemoryRegionError, MemoryTable, PlaceStatus


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


# -- the per-region fast path (checks once per region, bounds per packet) ----------------------


def _warm(mt: MemoryTable, mr) -> None:
    """One accepted placement: later ones under this key take the cached fast path."""
    assert mt.place(mr.rkey, mr.base_va, b"") is PlaceStatus.OK


@settings(max_examples=200, deadline=None)
@given(off=st.integers(-300, 600), n=st.integers(0, 300))
def test_place_is_all_or_nothing_on_the_fast_path(off, n):
    mt = MemoryTable(seed=2)
    outer = bytearray(b"\xee" * 700)
    mr = mt.register(memoryview(outer)[100:600])
    _warm(mt, mr)
    status = mt.place(mr.rkey, mr.base_va + off, memoryview(b"\x11" * n))
    inside = off >= 0 and off + n <= 500
    assert (status is PlaceStatus.OK) == inside
    assert (status is PlaceStatus.OUT_OF_BOUNDS) == (not inside)
    assert outer[:100] == b"\xee" * 100 and outer[600:] == b"\xee" * 100
    expect = bytearray(b"\xee" * 500)
    if inside:
        expect[off : off + n] = b"\x11" * n
    assert outer[100:600] == expect
    assert mr.bytes_placed == (n if inside else 0)


def test_fast_path_follows_deregistration_and_permission_changes():
    mt = MemoryTable(seed=4)
    buf = bytearray(64)
    mr = mt.register(buf)
    _warm(mt, mr)
    assert mt.place(mr.rkey, mr.base_va, b"a") is PlaceStatus.OK
    mr.access = Access.LOCAL_WRITE  # remote write withdrawn: the very next packet is refused
    assert mt.place(mr.rkey, mr.base_va + 1, b"b") is PlaceStatus.NO_PERMISSION
    mr.access = Access.LOCAL_WRITE | Access.REMOTE_WRITE
    assert mt.place(mr.rkey, mr.base_va + 1, b"b") is PlaceStatus.OK
    mt.deregister(mr)
    assert mt.place(mr.rkey, mr.base_va + 2, b"c") is PlaceStatus.BAD_RKEY
    assert bytes(buf[:3]) == b"ab\0"
    # a new region that happens to get a key of the old one is not confused with it
    mr2 = mt.register(bytearray(8))
    _warm(mt, mr2)
    assert mt.place(mr2.rkey, mr.base_va, b"x") is PlaceStatus.OUT_OF_BOUNDS


def test_fast_path_follows_a_replaced_buffer_and_base():
    mt = MemoryTable(seed=5)
    mr = mt.register(bytearray(16))
    _warm(mt, mr)
    small = bytearray(4)
    mr.buffer = memoryview(small)  # a shrunk region: bounds come from the new buffer
    assert mt.place(mr.rkey, mr.base_va + 8, b"z") is PlaceStatus.OUT_OF_BOUNDS
    assert mt.place(mr.rkey, mr.base_va + 3, b"z") is PlaceStatus.OK and small[3:] == b"z"
    mr.base_va += 4096
    assert mt.place(mr.rkey, mr.base_va - 4096, b"y") is PlaceStatus.OUT_OF_BOUNDS


def test_fast_path_takes_any_buffer_format_and_huge_addresses():
    mt = MemoryTable(seed=6)
    buf = bytearray(16)
    mr = mt.register(buf)
    _warm(mt, mr)
    words = memoryview(bytearray(b"\x01\x02\x03\x04" * 2)).cast("I")  # 2 items, 8 bytes
    assert mt.place(mr.rkey, mr.base_va + 8, words) is PlaceStatus.OK
    assert bytes(buf[8:]) == b"\x01\x02\x03\x04" * 2
    # the last word would cross the end in bytes, though not in items: refused, nothing written
    assert mt.place(mr.rkey, mr.base_va + 12, words) is PlaceStatus.OUT_OF_BOUNDS
    assert mt.place(mr.rkey, (1 << 64) - 1, b"x") is PlaceStatus.OUT_OF_BOUNDS
    assert bytes(buf[:8]) == bytes(8)


@settings(max_examples=300, deadline=None)
@given(
    region=st.integers(1, 5000),
    mtu=st.sampled_from([16, 64, 256]),
    start=st.integers(-3000, 8000),
    length=st.integers(0, 6000),
)
def test_a_packet_refuses_its_message_only_when_the_message_does_not_fit(
    region, mtu, start, length
):
    """What a packet says of its whole message (issue 25): a message that fits its region
    is never refused by any of its packets; one that does not is refused by its first, last
    and only packet, and by every packet when it is longer than the region."""
    from mrcnic.transport.frames import OP_FIRST, OP_LAST, OP_MIDDLE, OP_ONLY
    from mrcnic.transport.memory import message_fits

    base = 10_000
    end = base + region
    s = base + start
    fits = base <= s and s + length <= end
    n = max(1, -(-length // mtu))
    for k in range(n):
        plen = min(mtu, length - k * mtu)
        op = OP_ONLY if n == 1 else OP_FIRST if k == 0 else OP_LAST if k == n - 1 else OP_MIDDLE
        said = message_fits(op, s + k * mtu, plen, length, mtu, base, end)
        if fits:
            assert said, (op, k)
        elif op != OP_MIDDLE or length > region:
            assert not said, (op, k)
