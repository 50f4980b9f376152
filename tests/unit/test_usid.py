"""uSID codec (RFC 9800 NEXT-C-SID) and the EV -> path -> address plan."""

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic.wire import usid
from mrcnic.wire.usid import (
    DEFAULT_FORMAT,
    ClosShape,
    DestTemplate,
    Role,
    UsidError,
    UsidFormat,
)

usid_values = st.integers(min_value=1, max_value=0xFFFF)
usid_lists = st.lists(usid_values, min_size=1, max_size=6)


def test_encode_matches_the_text_form_linux_uses():
    addr = usid.encode([0x0100, 0x0200, 0x0300])
    assert usid.to_text(addr) == "fcbb:bb00:100:200:300::"


def test_shift_consumes_the_active_usid_and_zero_fills():
    addr = usid.from_text("fcbb:bb00:100:200:300:400:500:600")
    assert usid.active_usid(addr) == 0x100
    shifted = usid.shift(addr)
    assert usid.to_text(shifted) == "fcbb:bb00:200:300:400:500:600:0"
    assert usid.decode(shifted) == [0x200, 0x300, 0x400, 0x500, 0x600]


def test_end_of_carrier():
    assert usid.is_end_of_carrier(usid.encode([0x100]))
    assert not usid.is_end_of_carrier(usid.encode([0x100, 0x200]))
    assert usid.final_of(usid.encode([1, 2, 3])) == usid.encode([3])


@given(usid_lists)
def test_encode_decode_round_trip(usids):
    assert usid.decode(usid.encode(usids)) == usids


@given(usid_lists)
def test_shifting_walks_the_list(usids):
    addr = usid.encode(usids)
    for i in range(len(usids)):
        assert usid.active_usid(addr) == usids[i]
        assert usid.is_end_of_carrier(addr) == (i == len(usids) - 1)
        addr = usid.shift(addr)
    assert usid.to_text(addr) == "fcbb:bb00::"


@pytest.mark.parametrize(
    ("usids", "needle"),
    [([], "1 to 6"), ([1] * 7, "1 to 6"), ([1, 0, 2], "reserved"), ([0x10000], "out of range")],
)
def test_encode_refuses_bad_lists(usids, needle):
    with pytest.raises(UsidError, match=needle):
        usid.encode(usids)


def test_validate_names_what_is_wrong():
    with pytest.raises(UsidError, match="not in the locator block"):
        usid.validate(usid.from_text("2001:db8:100::"))
    with pytest.raises(UsidError, match="zero uSID at position 2"):
        usid.validate(usid.from_text("fcbb:bb00:100:0:300::"))
    with pytest.raises(UsidError, match="no uSID"):
        usid.validate(usid.from_text("fcbb:bb00::"))
    with pytest.raises(UsidError, match="16 bytes"):
        usid.shift(b"\x00" * 15)


def test_other_blocks_and_widths():
    fmt = UsidFormat.from_prefix("fc00:0:1::/48")
    assert fmt.max_usids == 5
    addr = usid.encode([7, 8], fmt)
    assert usid.to_text(addr) == "fc00:0:1:7:8::"
    assert usid.to_text(usid.shift(addr, fmt)) == "fc00:0:1:8::"
    wide = UsidFormat(nflen=32)
    assert wide.max_usids == 3
    assert usid.decode(usid.encode([0x12345678], wide), wide) == [0x12345678]
    with pytest.raises(UsidError, match="lblen"):
        UsidFormat(block=b"\xfc", lblen=8)
    with pytest.raises(UsidError, match="prefix length"):
        UsidFormat.from_prefix("fcbb::/20")
    assert DEFAULT_FORMAT.prefix_text() == "fcbb:bb00::/32"


def test_usid_numbering_is_readable_in_a_capture():
    assert usid.t0_usid(0, 0) == 0x0400
    assert usid.t1_usid(1, 3) == 0x1803
    assert usid.downlink_usid(7, 1) == 0x7C01
    for u in (0x0400, 0x1803, 0x7C01):
        plane, role, index = usid.split_usid(u)
        assert usid.make_usid(plane, role, index) == u
    with pytest.raises(UsidError, match="reserved role"):
        usid.split_usid(0x0005)
    with pytest.raises(UsidError):
        usid.make_usid(16, Role.T0, 0)


shapes = st.builds(
    ClosShape,
    planes=st.integers(1, 16),
    t0=st.integers(1, 64),
    t1=st.integers(1, 64),
    hosts_per_t0=st.integers(1, 256),
)


@st.composite
def shape_and_pair(draw):
    shape = draw(shapes)
    src = draw(st.integers(0, shape.host_count - 1))
    dst = draw(st.integers(0, shape.host_count - 1))
    ev = draw(st.integers(0, 0xFFFFFFFF))
    return shape, src, dst, ev


@settings(max_examples=300)
@given(shape_and_pair())
def test_ev_address_decodes_back_to_its_path(args):
    shape, src, dst, ev = args
    addr = usid.ev_address(shape, src, dst, ev)
    info = usid.decode_path(shape, addr)
    assert info.plane == ev % shape.planes
    assert info.dst_host == dst
    assert info.src_t0 == shape.host_t0(src)
    if shape.host_t0(src) == shape.host_t0(dst):
        assert info.t1 is None
    else:
        assert info.t1 == (ev // shape.planes) % shape.t1


@settings(max_examples=300)
@given(shape_and_pair())
def test_template_agrees_with_the_plain_function(args):
    shape, src, dst, ev = args
    tpl = DestTemplate(shape, src, dst)
    assert tpl.address(ev) == usid.ev_address(shape, src, dst, ev)
    assert tpl.final(ev) == usid.final_of(tpl.address(ev))
    assert tpl.plane(ev) == ev % shape.planes


@settings(max_examples=100)
@given(shape_and_pair())
def test_shifting_a_path_ends_at_the_final_address(args):
    shape, src, dst, ev = args
    addr = usid.ev_address(shape, src, dst, ev)
    hops = 0
    while not usid.is_end_of_carrier(addr):
        addr = usid.shift(addr)
        hops += 1
    assert hops == (1 if shape.host_t0(src) == shape.host_t0(dst) else 3)
    assert addr == usid.final_address(shape, dst, ev % shape.planes)


def test_every_path_between_t0s_is_reachable_with_a_small_ev_set():
    shape = ClosShape(planes=8, t0=2, t1=2, hosts_per_t0=2)
    paths = {usid.ev_address(shape, 0, 3, ev) for ev in range(128)}
    assert len(paths) == shape.planes * shape.t1


def test_host_addresses_are_unique():
    shape = ClosShape(planes=4, t0=3, t1=2, hosts_per_t0=5)
    addrs = {
        usid.host_address(shape, h, p) for h in range(shape.host_count) for p in range(shape.planes)
    }
    assert len(addrs) == shape.host_count * shape.planes
    assert all(ipaddress.IPv6Address(a) in ipaddress.IPv6Network("fcbb:bb00::/32") for a in addrs)


def test_decode_path_refuses_what_is_not_a_path():
    shape = ClosShape()
    with pytest.raises(UsidError, match="more than one plane"):
        usid.decode_path(shape, usid.encode([usid.t0_usid(0, 0), usid.downlink_usid(1, 0)]))
    with pytest.raises(UsidError, match="not a path"):
        usid.decode_path(shape, usid.encode([usid.t1_usid(0, 0)]))
    with pytest.raises(UsidError, match="T1 5 does not exist"):
        bad = [usid.t0_usid(0, 0), usid.t1_usid(0, 5), usid.t0_usid(0, 1), usid.downlink_usid(0, 0)]
        usid.decode_path(shape, usid.encode(bad))
    with pytest.raises(UsidError, match="host 4 out of range"):
        usid.ev_address(shape, 0, 4, 0)
