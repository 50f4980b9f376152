"""Golden tests of the UDP-over-IPv6 checksum: against a fixed known-good value, against
scapy (an independent implementation), and against a literal RFC 1071 loop."""

from __future__ import annotations

import ipaddress
import logging
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import fast
from mrcnic.fast import twin as fast_twin

logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
scapy_layers = pytest.importorskip("scapy.layers.inet6")
scapy_inet = pytest.importorskip("scapy.layers.inet")
IPv6, UDP = scapy_layers.IPv6, scapy_inet.UDP


@pytest.fixture(scope="module", params=["c", "python"])
def impl(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "python":
        return fast_twin
    if fast.BACKEND != "c":
        pytest.skip("C core not loaded (MRC_PURE_PYTHON=1 or mrcnic._mrcfast missing)")
    return fast


def naive_udp6_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 1071 exactly as written: 16-bit words, end-around carry, complement."""
    pseudo = src + dst + len(udp).to_bytes(4, "big") + b"\x00\x00\x00\x11"
    data = pseudo + udp + (b"\x00" if len(udp) % 2 else b"")
    s = 0
    for i in range(0, len(data), 2):
        s += data[i] << 8 | data[i + 1]
        s = (s & 0xFFFF) + (s >> 16)
    c = ~s & 0xFFFF
    return c or 0xFFFF


def scapy_udp6(src: str, dst: str, sport: int, dport: int, payload: bytes) -> tuple[bytes, int]:
    """The UDP segment scapy builds (checksum field zeroed) and the checksum it computed."""
    raw = bytes(IPv6(src=src, dst=dst) / UDP(sport=sport, dport=dport) / payload)
    udp = bytearray(raw[40:])
    chksum = int.from_bytes(udp[6:8], "big")
    udp[6:8] = b"\x00\x00"
    return bytes(udp), chksum


def packed(addr: str) -> bytes:
    return ipaddress.IPv6Address(addr).packed


# The UDP segment (checksum 0x6319 in place) of
# IPv6(src="fcbb:bb00:1001::2", dst="fcbb:bb00:3005::")/UDP(sport=0xbeef, dport=4791)
# /b"MRC golden payload\x00\x01\x02", as scapy 2.8 builds it.
GOLDEN_UDP = bytes.fromhex("beef12b7001d63194d524320676f6c64656e207061796c6f6164000102")
GOLDEN_CHKSUM = 0x6319


def test_golden_value(impl: ModuleType) -> None:
    udp = GOLDEN_UDP[:6] + b"\x00\x00" + GOLDEN_UDP[8:]
    src, dst = packed("fcbb:bb00:1001::2"), packed("fcbb:bb00:3005::")
    assert impl.udp6_checksum(src, dst, udp) == GOLDEN_CHKSUM
    assert naive_udp6_checksum(src, dst, udp) == GOLDEN_CHKSUM
    # a receiver verifies by summing with the checksum in place: the sum is all ones
    assert impl.udp6_checksum(src, dst, GOLDEN_UDP) == 0xFFFF


def test_golden_value_matches_scapy() -> None:
    udp, chksum = scapy_udp6(
        "fcbb:bb00:1001::2", "fcbb:bb00:3005::", 0xBEEF, 4791, b"MRC golden payload\x00\x01\x02"
    )
    assert chksum == GOLDEN_CHKSUM
    assert udp[:6] + GOLDEN_UDP[6:8] + udp[8:] == GOLDEN_UDP


def test_zero_checksum_is_sent_as_ffff(impl: ModuleType) -> None:
    # pick the last payload word so the one's-complement sum is all ones: the checksum would
    # compute to 0, which UDP over IPv6 must send as 0xFFFF (RFC 8200 section 8.1)
    src, dst = packed("2001:db8::1"), packed("2001:db8::2")
    head = (1234).to_bytes(2, "big") + (4791).to_bytes(2, "big") + (12).to_bytes(2, "big")
    udp0 = head + b"\x00\x00" + b"ab" + b"\x00\x00"
    fill = naive_udp6_checksum(src, dst, udp0)
    udp = udp0[:10] + fill.to_bytes(2, "big")
    assert naive_udp6_checksum(src, dst, udp) == 0xFFFF
    assert impl.udp6_checksum(src, dst, udp) == 0xFFFF


@pytest.mark.parametrize("n", [0, 1, 64, 1472, 4096, 8952, 65527])
def test_sizes_against_scapy(impl: ModuleType, n: int) -> None:
    payload = bytes((i * 131 + 7) & 0xFF for i in range(n))
    udp, chksum = scapy_udp6("fcbb:bb00:1:2:3::", "fcbb:bb00:ffff::1", 65535, 4791, payload)
    got = impl.udp6_checksum(packed("fcbb:bb00:1:2:3::"), packed("fcbb:bb00:ffff::1"), udp)
    assert got == chksum


ADDR = st.binary(min_size=16, max_size=16).map(lambda b: str(ipaddress.IPv6Address(b)))


@settings(max_examples=150, deadline=None)
@given(
    src=ADDR,
    dst=ADDR,
    sport=st.integers(0, 65535),
    dport=st.integers(0, 65535),
    payload=st.binary(max_size=1500),
)
def test_against_scapy(
    impl: ModuleType, src: str, dst: str, sport: int, dport: int, payload: bytes
) -> None:
    udp, chksum = scapy_udp6(src, dst, sport, dport, payload)
    assert impl.udp6_checksum(packed(src), packed(dst), udp) == chksum
    assert naive_udp6_checksum(packed(src), packed(dst), udp) == chksum


@settings(max_examples=150, deadline=None)
@given(a=st.binary(max_size=200).filter(lambda b: len(b) % 2 == 0), b=st.binary(max_size=200))
def test_csum_partial_chains(impl: ModuleType, a: bytes, b: bytes) -> None:
    # a sum over a message can be built chunk by chunk (chunks after the first start even)
    whole = impl.csum_partial(a + b)
    assert impl.csum_partial(b, impl.csum_partial(a)) == whole
    assert impl.csum_fold(whole) == impl.csum_fold(impl.csum_partial(a) + impl.csum_partial(b))
