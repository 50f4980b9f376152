"""Hypothesis parity: the C core (mrcnic.fast with BACKEND "c") and the pure-Python twin
(mrcnic.fast.twin) give identical results, state and errors on the same inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcnic import fast
from mrcnic.fast import twin
from tests.simd import cpu_flags, simd_loop

pytestmark = pytest.mark.skipif(
    fast.BACKEND != "c", reason="C core not loaded (MRC_PURE_PYTHON=1 or mrcnic._mrcfast missing)"
)

if fast.BACKEND == "c":
    from mrcnic._mrcfast import lib
else:  # pragma: no cover - the module is skipped
    lib = None

MASK = 0xFFFFFF
U32 = st.integers(0, (1 << 32) - 1)
U64_END = 1 << 64
PSN = st.one_of(
    st.integers(0, MASK),
    st.sampled_from([0, 1, MASK, MASK - 1, 1 << 23, (1 << 23) - 1, (1 << 23) + 1]),
)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """The result, or the exception type, so error behaviour is compared too."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:
        return ("raise", type(exc))


# --- PSN arithmetic: the C functions against the twin -------------------------------------------


@SETTINGS
@given(a=PSN, b=PSN, n=st.integers(-(1 << 30), 1 << 30))
def test_psn_arithmetic_parity(a: int, b: int, n: int) -> None:
    assert lib.mrc_psn_add(a, n) == twin.psn_add(a, n)
    assert lib.mrc_psn_diff(a, b) == twin.psn_diff(a, b)
    assert bool(lib.mrc_psn_lt(a, b)) == twin.psn_lt(a, b)
    assert -(1 << 23) <= twin.psn_diff(a, b) < (1 << 23)
    assert twin.psn_add(b, twin.psn_diff(a, b)) == a


# --- PsnWindow: random operation sequences on both ----------------------------------------------


@st.composite
def window_scenarios(draw: st.DrawFn) -> tuple[int, int, list[tuple[str, int]]]:
    size = draw(st.sampled_from([64, 128, 256, 1024, 65536]))
    start = draw(
        st.one_of(
            st.integers(0, MASK),
            st.sampled_from([0, MASK, MASK - 5, MASK - size + 1, (MASK - size // 2) & MASK]),
        )
    )
    # deltas relative to the current expected PSN: around the ack, around the window's far
    # edge, and anywhere in the 24-bit space
    delta = st.one_of(
        st.integers(-3, 80),
        st.integers(size - 70, size + 3),
        st.integers(-(1 << 23) - 2, -(1 << 23) + 2),
        st.integers(0, MASK),
    )
    op = st.one_of(
        st.tuples(st.just("mark"), delta),
        st.tuples(st.just("mark"), delta),
        st.tuples(st.just("mark_run"), st.integers(0, 130)),
        st.tuples(st.just("test"), delta),
        st.tuples(st.just("advance"), st.just(0)),
        st.tuples(
            st.just("sack"),
            st.one_of(st.integers(0, 130), st.integers(max(size - 70, 0), size + 3)),
        ),
        st.tuples(st.just("holes"), st.just(0)),
    )
    return size, start, draw(st.lists(op, max_size=60))


def _state(w: Any) -> tuple[int, int, int, int, int, int]:
    return (w.cack_psn, w.expected_psn, w.highest_psn, w.holes(), w.sack_bitmap(), w.size)


@SETTINGS
@given(scenario=window_scenarios())
def test_window_parity(scenario: tuple[int, int, list[tuple[str, int]]]) -> None:
    size, start, ops = scenario
    c, py = fast.PsnWindow(size, start), twin.PsnWindow(size, start)
    assert _state(c) == _state(py)
    for name, arg in ops:
        if name == "mark":
            psn = (py.expected_psn + arg) & MASK
            assert c.mark(psn) == py.mark(psn), (name, psn)
        elif name == "mark_run":  # a contiguous run from the current expected PSN
            for i in range(arg):
                psn = (py.expected_psn + i) & MASK
                assert c.mark(psn) == py.mark(psn)
        elif name == "test":
            psn = (py.expected_psn + arg) & MASK
            assert c.test(psn) == py.test(psn)
        elif name == "advance":
            assert c.advance() == py.advance()
        elif name == "sack":
            assert c.sack_bitmap(arg) == py.sack_bitmap(arg)
        else:
            assert c.holes() == py.holes()
        assert _state(c) == _state(py), (name, arg)
    assert 0 <= py.holes() <= size


@settings(max_examples=15, deadline=None)
@given(
    start=PSN,
    deltas=st.lists(
        st.one_of(st.integers(0, 200), st.integers((1 << 22) - 200, (1 << 22) + 1)), max_size=40
    ),
)
def test_window_parity_largest_size(start: int, deltas: list[int]) -> None:
    size = 1 << 22
    c, py = fast.PsnWindow(size, start), twin.PsnWindow(size, start)
    for d in deltas:
        psn = (py.expected_psn + d) & MASK
        assert c.mark(psn) == py.mark(psn)
        assert c.advance() == py.advance()
        assert _state(c) == _state(py)
        assert c.sack_bitmap(size - 64) == py.sack_bitmap(size - 64)


@SETTINGS
@given(psn=st.one_of(st.integers(-(1 << 40), -1), st.integers(1 << 24, 1 << 70)))
def test_window_bad_psn_parity(psn: int) -> None:
    c, py = fast.PsnWindow(64), twin.PsnWindow(64)
    assert outcome(c.mark, psn) == outcome(py.mark, psn) == ("raise", ValueError)
    assert outcome(c.test, psn) == outcome(py.test, psn) == ("raise", ValueError)


@SETTINGS
@given(size=st.integers(-10, (1 << 23) + 10), start=st.integers(-5, (1 << 24) + 5))
def test_window_constructor_parity(size: int, start: int) -> None:
    got_c = outcome(lambda: _state(fast.PsnWindow(size, start)))
    got_py = outcome(lambda: _state(twin.PsnWindow(size, start)))
    assert got_c == got_py


# --- place: regions anywhere in a larger buffer -------------------------------------------------


@st.composite
def placements(draw: st.DrawFn) -> tuple[int, int, int, int, int, bytes]:
    region_len = draw(st.one_of(st.integers(0, 300), st.just(4096)))
    before = draw(st.sampled_from([0, 1, 7, 64]))  # 0: region at the buffer's start
    after = draw(st.sampled_from([0, 1, 9]))  # 0: region at the buffer's end
    base = draw(
        st.one_of(
            st.integers(0, U64_END - 1),
            st.sampled_from([0, 0x1000, U64_END - region_len - 1, U64_END - max(region_len, 1)]),
        )
    )
    off = draw(
        st.one_of(
            st.integers(-3, region_len + 3),
            st.sampled_from([0, region_len, region_len // 2]),
            st.integers(-(1 << 64), 1 << 64),
        )
    )
    va = min(max(base + off, 0), U64_END - 1)
    n = draw(
        st.one_of(
            st.integers(0, 40),
            st.sampled_from([0, region_len, max(region_len - 1, 0), region_len + 1]),
        )
    )
    payload = draw(st.binary(min_size=n, max_size=n))
    return region_len, before, after, base, va, payload


@SETTINGS
@given(p=placements(), kind=st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_place_parity(p: tuple[int, int, int, int, int, bytes], kind: str) -> None:
    region_len, before, after, base, va, payload = p
    pay: Any = {
        "bytes": payload,
        "bytearray": bytearray(payload),
        "memoryview": memoryview(payload),
    }[kind]
    init = bytes((i * 37 + 11) & 0xFF for i in range(before + region_len + after))
    buf_c, buf_py = bytearray(init), bytearray(init)
    reg_c = memoryview(buf_c)[before : before + region_len]
    reg_py = memoryview(buf_py)[before : before + region_len]
    rc_c = fast.place(reg_c, base, va, pay)
    rc_py = twin.place(reg_py, base, va, pay)
    assert rc_c == rc_py
    assert buf_c == buf_py
    off = va - base
    fits = off >= 0 and off + len(payload) <= region_len
    assert rc_py == (twin.PLACE_OK if fits else twin.PLACE_ERR_BOUNDS)
    want = bytearray(init)
    if fits:
        want[before + off : before + off + len(payload)] = payload
    assert buf_py == want  # nothing outside the placed bytes changes, nothing at all on error


@SETTINGS
@given(base=st.integers(-(1 << 65), 1 << 65), va=st.integers(-(1 << 65), 1 << 65))
def test_place_address_range_parity(base: int, va: int) -> None:
    c = outcome(fast.place, bytearray(16), base, va, b"ab")
    py = outcome(twin.place, bytearray(16), base, va, b"ab")
    assert c == py


# --- checksum ---------------------------------------------------------------------------------


DATA = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=4000, max_size=4100),
    st.sampled_from([b"", b"\x00", b"\xff", b"\xff" * 4097, b"\x00" * 64, b"\xff\xff" * 32]),
)


def _as(kind: str, data: bytes) -> Any:
    return {"bytes": data, "bytearray": bytearray(data), "memoryview": memoryview(data)}[kind]


@SETTINGS
@given(
    data=DATA,
    initial=st.one_of(U32, st.just(0)),
    kind=st.sampled_from(["bytes", "bytearray", "memoryview"]),
    simd=st.booleans(),
)
def test_csum_partial_parity(data: bytes, initial: int, kind: str, simd: bool) -> None:
    """Both of the C sum's loops (AVX2 and 64-bit words) against the twin."""
    with simd_loop(lib.mrc_csum_simd, int(simd)):
        got = fast.csum_partial(_as(kind, data), initial)
    assert got == twin.csum_partial(data, initial)
    assert 0 <= got <= 0xFFFF


def test_the_csum_uses_avx2_where_the_cpu_has_it() -> None:
    """So the parity test above runs the AVX2 loop on a machine of the project's kind (all
    have AVX2), and a CPU without it gets the 64-bit loop instead of an illegal instruction."""
    has = "avx2" in cpu_flags()
    with simd_loop(lib.mrc_csum_simd, 1) as on:
        assert on == int(has)
    with simd_loop(lib.mrc_csum_simd, 0) as on:
        assert on == 0


@SETTINGS
@given(s=U32)
def test_csum_fold_parity(s: int) -> None:
    assert fast.csum_fold(s) == twin.csum_fold(s)


@SETTINGS
@given(
    src=st.binary(min_size=16, max_size=16),
    dst=st.binary(min_size=16, max_size=16),
    udp=DATA,
    kind=st.sampled_from(["bytes", "bytearray", "memoryview"]),
)
def test_udp6_checksum_parity(src: bytes, dst: bytes, udp: bytes, kind: str) -> None:
    got = fast.udp6_checksum(_as(kind, src), dst, _as(kind, udp))
    assert got == twin.udp6_checksum(src, dst, udp)
    assert 1 <= got <= 0xFFFF


@SETTINGS
@given(src_len=st.integers(0, 40), dst_len=st.integers(0, 40))
def test_udp6_address_length_parity(src_len: int, dst_len: int) -> None:
    args = (b"\x01" * src_len, b"\x02" * dst_len, b"payload")
    assert outcome(fast.udp6_checksum, *args) == outcome(twin.udp6_checksum, *args)


@SETTINGS
@given(initial=st.one_of(st.integers(-(1 << 40), -1), st.integers(1 << 32, 1 << 70)))
def test_csum_bad_accumulator_parity(initial: int) -> None:
    assert outcome(fast.csum_partial, b"x", initial) == outcome(twin.csum_partial, b"x", initial)
    assert outcome(fast.csum_fold, initial) == outcome(twin.csum_fold, initial)
