"""Behaviour of mrcnic.fast (the C core) and mrcnic.fast.twin (its pure-Python twin).

Every test runs against both implementations; C-vs-Python parity under random inputs is in
test_fast_parity.py, checksum golden values in test_fast_checksum.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

from mrcnic import fast
from mrcnic.fast import twin as fast_twin

MASK = 0xFFFFFF


@pytest.fixture(params=["c", "python"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "python":
        return fast_twin
    if fast.BACKEND != "c":
        pytest.skip("C core not loaded (MRC_PURE_PYTHON=1 or mrcnic._mrcfast missing)")
    return fast


# --- PSN arithmetic ---------------------------------------------------------------------------


def test_psn_arithmetic_wraps_at_24_bits(impl: ModuleType) -> None:
    assert impl.psn_add(MASK, 1) == 0
    assert impl.psn_add(0, -1) == MASK
    assert impl.psn_add(0xFFFFF0, 0x20) == 0x10
    assert impl.psn_diff(0x10, 0xFFFFF0) == 0x20
    assert impl.psn_diff(0xFFFFF0, 0x10) == -0x20
    assert impl.psn_diff(0, 1 << 23) == -(1 << 23)  # the range is [-2^23, 2^23)
    assert impl.psn_lt(0xFFFFF0, 0x10)
    assert not impl.psn_lt(0x10, 0xFFFFF0)
    assert not impl.psn_lt(5, 5)


# --- PsnWindow --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 32, 63, 96, 1000, (1 << 22) + 64, 1 << 23, -64])
def test_window_rejects_bad_size(impl: ModuleType, size: int) -> None:
    with pytest.raises(ValueError):
        impl.PsnWindow(size)


@pytest.mark.parametrize("start", [-1, 1 << 24])
def test_window_rejects_bad_start(impl: ModuleType, start: int) -> None:
    with pytest.raises(ValueError):
        impl.PsnWindow(64, start)


def test_window_initial_state(impl: ModuleType) -> None:
    w = impl.PsnWindow(start_psn=0)
    assert w.size == 65536
    assert w.expected_psn == 0
    assert w.cack_psn == MASK
    assert w.highest_psn == MASK
    assert w.holes() == 0
    assert w.sack_bitmap() == 0
    assert w.advance() == 0
    assert not w.test(0)
    assert w.test(MASK)  # behind the cumulative ack counts as received


def test_window_brief_worked_example(impl: ModuleType) -> None:
    # MRC-BRIEF: PSNs 0-11 sent, 5 and 8 lost -> cack_psn 4, bitmap from 5 = 0 1 1 0 1 1 1
    w = impl.PsnWindow(64, 0)
    for psn in range(12):
        if psn not in (5, 8):
            assert w.mark(psn) == impl.MARK_NEW
    assert w.advance() == 5
    assert w.cack_psn == 4
    assert w.expected_psn == 5
    assert w.highest_psn == 11
    assert w.sack_bitmap() == 0b1110110
    assert w.holes() == 2
    assert w.mark(5) == impl.MARK_NEW
    assert w.advance() == 3
    assert w.cack_psn == 7
    assert w.holes() == 1


def test_window_duplicates(impl: ModuleType) -> None:
    w = impl.PsnWindow(64, 100)
    assert w.mark(110) == impl.MARK_NEW
    assert w.mark(110) == impl.MARK_DUP
    assert w.mark(100) == impl.MARK_NEW
    assert w.advance() == 1
    assert w.mark(100) == impl.MARK_DUP  # now behind the cumulative ack
    assert w.mark(99) == impl.MARK_DUP
    assert w.mark((w.expected_psn - (1 << 23)) & MASK) == impl.MARK_DUP  # 2^23 behind: still DUP
    assert w.mark((w.expected_psn - (1 << 23) - 1) & MASK) == impl.MARK_OOR  # reads as ahead


def test_window_wraps_around_24_bits(impl: ModuleType) -> None:
    size = 65536
    w = impl.PsnWindow(size, 0xFFFFF0)
    last_in = (0xFFFFF0 + size - 1) & MASK
    assert last_in == 0x00FFEF
    assert w.mark(0xFFFFF0) == impl.MARK_NEW
    assert w.mark(0xFFFFFF) == impl.MARK_NEW
    assert w.mark(0x000000) == impl.MARK_NEW
    assert w.mark(last_in) == impl.MARK_NEW
    assert w.mark(last_in + 1) == impl.MARK_OOR
    assert not w.test(last_in + 1)  # OOR is not recorded
    assert w.mark(0xFFFFEF) == impl.MARK_DUP  # just behind
    # just over 2^23 behind reads as far ahead: outside the window
    assert w.mark((0xFFFFF0 - (1 << 23) - 1) & MASK) == impl.MARK_OOR
    assert w.highest_psn == last_in
    assert w.advance() == 1
    assert w.holes() == (15 + 0xFFF0) - 3  # span 0xFFFFF1..0x00FFEF, 3 of it received
    for psn in range(0xFFFFF1, 0xFFFFFF):
        w.mark(psn)
    assert w.advance() == 16  # 0xFFFFF1..0xFFFFFE, then 0xFFFFFF and 0x000000 marked earlier
    assert w.cack_psn == 0x000000
    assert w.expected_psn == 0x000001
    assert w.test(0xFFFFF5)
    assert w.mark(last_in + 1) == impl.MARK_NEW  # the window moved forward


def test_window_edges(impl: ModuleType) -> None:
    size = 128
    w = impl.PsnWindow(size, 1000)
    assert w.mark(1000 + size) == impl.MARK_OOR
    assert w.mark(1000 + size - 1) == impl.MARK_NEW
    assert w.sack_bitmap(size - 1) == 1
    assert w.sack_bitmap(size - 64) == 1 << 63
    assert w.sack_bitmap(size) == 0  # past the window
    assert w.sack_bitmap((1 << 32) - 1) == 0
    # bits past the window end wrap onto the bitmap's start: they must not leak
    assert w.mark(1000) == impl.MARK_NEW
    assert w.sack_bitmap(size - 10) == 1 << 9
    assert w.holes() == size - 2
    assert w.advance() == 1
    assert w.mark(1000 + size) == impl.MARK_NEW


def test_window_fills_and_drains_completely(impl: ModuleType) -> None:
    size = 64
    w = impl.PsnWindow(size, MASK - 30)
    for i in range(size):
        assert w.mark((MASK - 30 + i) & MASK) == impl.MARK_NEW
    assert w.sack_bitmap() == (1 << 64) - 1
    assert w.holes() == 0
    assert w.advance() == size
    assert w.cack_psn == (MASK - 31 + size) & MASK
    assert w.sack_bitmap() == 0
    assert w.advance() == 0
    assert w.mark((MASK - 30) & MASK) == impl.MARK_DUP


def test_window_largest_size(impl: ModuleType) -> None:
    size = 1 << 22
    w = impl.PsnWindow(size, 0xFFFF00)
    far = (0xFFFF00 + size - 1) & MASK
    assert w.mark(far) == impl.MARK_NEW
    assert w.mark((far + 1) & MASK) == impl.MARK_OOR
    assert w.holes() == size - 1
    assert w.sack_bitmap(size - 1) == 1


def test_window_sack_bitmap_at_offsets(impl: ModuleType) -> None:
    w = impl.PsnWindow(1024, 0)
    received = {1, 3, 63, 64, 65, 130, 500}
    for psn in received:
        w.mark(psn)
    for offset in (0, 1, 2, 60, 64, 100, 450, 1000):
        want = sum(1 << i for i in range(64) if offset + i in received)
        assert w.sack_bitmap(offset) == want, offset


@pytest.mark.parametrize("psn", [-1, 1 << 24, 1 << 40])
def test_window_rejects_bad_psn(impl: ModuleType, psn: int) -> None:
    w = impl.PsnWindow(64)
    with pytest.raises(ValueError):
        w.mark(psn)
    with pytest.raises(ValueError):
        w.test(psn)


@pytest.mark.parametrize("offset", [-1, 1 << 32])
def test_window_rejects_bad_offset(impl: ModuleType, offset: int) -> None:
    with pytest.raises(ValueError):
        impl.PsnWindow(64).sack_bitmap(offset)


# --- place ------------------------------------------------------------------------------------


def test_place_copies_at_offset(impl: ModuleType) -> None:
    region = bytearray(16)
    assert impl.place(region, 0x1000, 0x1004, b"abcd") == impl.PLACE_OK
    assert region == bytearray(4) + b"abcd" + bytearray(8)
    assert impl.place(region, 0x1000, 0x100C, memoryview(b"WXYZ")) == impl.PLACE_OK
    assert region[12:] == b"WXYZ"


@pytest.mark.parametrize(
    ("va", "n", "ok"),
    [
        (0x1000, 16, True),  # the whole region
        (0x1010, 0, True),  # zero-length at the very end
        (0x1000, 0, True),
        (0x1011, 0, False),  # zero-length past the end
        (0x0FFF, 1, False),  # below base
        (0x0FFF, 0, False),
        (0x1001, 16, False),  # one byte over
        (0x100F, 2, False),
        (0x100F, 1, True),
        (0x2000, 1, False),
    ],
)
def test_place_bounds(impl: ModuleType, va: int, n: int, ok: bool) -> None:
    buf = bytearray(b"\xee" * 48)
    region = memoryview(buf)[16:32]  # guard bytes either side must never change
    want = impl.PLACE_OK if ok else impl.PLACE_ERR_BOUNDS
    assert impl.place(region, 0x1000, va, b"\x11" * n) == want
    assert buf[:16] == b"\xee" * 16
    assert buf[32:] == b"\xee" * 16
    if not ok:
        assert buf == bytearray(b"\xee" * 48)


def test_place_at_top_of_address_space(impl: ModuleType) -> None:
    region = bytearray(4096)
    base = (1 << 64) - 4096
    assert impl.place(region, base, (1 << 64) - 8, b"12345678") == impl.PLACE_OK
    assert region[-8:] == b"12345678"
    assert impl.place(region, base, (1 << 64) - 8, b"123456789") == impl.PLACE_ERR_BOUNDS
    assert impl.place(region, 0, (1 << 64) - 1, b"x") == impl.PLACE_ERR_BOUNDS


@pytest.mark.parametrize(("base", "va"), [(0, -1), (-1, 0), (0, 1 << 64), (1 << 64, 1 << 64)])
def test_place_rejects_out_of_range_addresses(impl: ModuleType, base: int, va: int) -> None:
    with pytest.raises(ValueError):
        impl.place(bytearray(8), base, va, b"")


def test_place_refuses_read_only_region(impl: ModuleType) -> None:
    with pytest.raises(BufferError):
        impl.place(b"\x00" * 8, 0, 0, b"x")
    with pytest.raises(BufferError):
        impl.place(memoryview(bytearray(8)).toreadonly(), 0, 0, b"x")


# --- checksum ---------------------------------------------------------------------------------


def test_csum_rfc1071_example(impl: ModuleType) -> None:
    # RFC 1071 section 3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2, the checksum 220d
    data = bytes.fromhex("0001f203f4f5f6f7")
    assert impl.csum_partial(data) == 0xDDF2
    assert impl.csum_fold(impl.csum_partial(data)) == 0x220D


def test_csum_partial_edge_values(impl: ModuleType) -> None:
    assert impl.csum_partial(b"") == 0
    assert impl.csum_partial(b"", 0x12345) == 0x2346
    assert impl.csum_partial(b"\x00" * 100) == 0
    assert impl.csum_partial(b"\xff\xff") == 0xFFFF
    assert impl.csum_partial(b"\x01") == 0x0100  # odd byte is the high byte of its word
    assert impl.csum_partial(b"\xff\xff", 1) == 1  # end-around carry
    assert impl.csum_fold(0) == 0xFFFF
    assert impl.csum_fold(0xFFFF) == 0
    assert impl.csum_fold(0xFFFFFFFF) == 0


@pytest.mark.parametrize("bad", [-1, 1 << 32])
def test_csum_rejects_bad_accumulator(impl: ModuleType, bad: int) -> None:
    with pytest.raises(ValueError):
        impl.csum_partial(b"ab", bad)
    with pytest.raises(ValueError):
        impl.csum_fold(bad)


def test_udp6_checksum_rejects_bad_addresses(impl: ModuleType) -> None:
    with pytest.raises(ValueError):
        impl.udp6_checksum(b"\x00" * 15, b"\x00" * 16, b"\x00" * 8)
    with pytest.raises(ValueError):
        impl.udp6_checksum(b"\x00" * 16, bytearray(4), b"\x00" * 8)


def test_buffers_must_be_contiguous(impl: ModuleType) -> None:
    strided = memoryview(bytearray(16))[::2]
    with pytest.raises(BufferError):
        impl.csum_partial(strided)
    with pytest.raises(BufferError):
        impl.place(strided, 0, 0, b"x")


# --- backend selection ------------------------------------------------------------------------


def _run_python(code: str, **env: str) -> str:
    full_env = {k: v for k, v in os.environ.items() if k != "MRC_PURE_PYTHON"} | env
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def test_backend_pure_python_by_env() -> None:
    code = """
        import mrcnic.fast as f, mrcnic.fast.twin as t
        print(f.BACKEND, f.PsnWindow is t.PsnWindow, f.udp6_checksum is t.udp6_checksum)
    """
    assert _run_python(code, MRC_PURE_PYTHON="1") == "python True True"


def test_backend_falls_back_with_warning_when_c_missing() -> None:
    code = """
        import sys, warnings
        sys.modules["mrcnic._mrcfast"] = None  # makes the import raise ImportError
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import mrcnic.fast as f
        print(f.BACKEND, [w.category.__name__ for w in caught if "mrcnic._mrcfast" in str(w.message)])
    """
    assert _run_python(code) == "python ['RuntimeWarning']"


def test_backend_is_c_when_built() -> None:
    if fast.BACKEND != "c":
        pytest.skip("C core not loaded in this process")
    assert _run_python("import mrcnic.fast as f; print(f.BACKEND)") == "c"


def test_constants_match_c_enums() -> None:
    if fast.BACKEND != "c":
        pytest.skip("C core not loaded in this process")
    from mrcnic._mrcfast import lib

    assert (lib.MRC_MARK_NEW, lib.MRC_MARK_DUP, lib.MRC_MARK_OOR) == (
        fast_twin.MARK_NEW,
        fast_twin.MARK_DUP,
        fast_twin.MARK_OOR,
    )
    assert (lib.MRC_PLACE_OK, lib.MRC_PLACE_ERR_BOUNDS) == (
        fast_twin.PLACE_OK,
        fast_twin.PLACE_ERR_BOUNDS,
    )
    assert (lib.MRC_PSNWIN_MIN, lib.MRC_PSNWIN_MAX) == (fast_twin.WINDOW_MIN, fast_twin.WINDOW_MAX)
    assert lib.MRC_PSN_MASK == fast_twin.PSN_MASK
