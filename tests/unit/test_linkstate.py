"""mrcnic.io.linkstate without root: the netlink parser held to pyroute2's encoder and decoder,
the watcher's read loop over a fake socket, and SIOCGIFFLAGS on loopback. Real link changes
in a namespace are tests/lab/test_linkstate_netns.py."""

from __future__ import annotations

import errno
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.marshal import MarshalRtnl

from mrcnic.io import linkstate
from mrcnic.io.linkstate import (
    IFF_RUNNING,
    IFF_UP,
    RTM_DELLINK,
    RTM_NEWLINK,
    LinkEvent,
    LinkWatcher,
    flags_up,
    parse_link_messages,
)

RTM_NEWADDR = 20
IFF_LOOPBACK = 0x8


def link_msg(mtype: int, index: int, flags: int, ifname: str | None = "veth0", **attrs) -> bytes:
    """An RTM_NEWLINK / RTM_DELLINK as pyroute2 encodes it."""
    m = ifinfmsg()
    m["header"]["type"] = mtype
    m["index"] = index
    m["flags"] = flags
    m["change"] = 0xFFFFFFFF
    nla = [("IFLA_MTU", attrs.get("mtu", 1500))]
    if ifname is not None:
        nla.insert(attrs.get("name_at", 0), ("IFLA_IFNAME", ifname))
    nla.append(("IFLA_OPERSTATE", "UP" if flags_up(flags) else "DOWN"))
    m["attrs"] = nla
    m.encode()
    return bytes(m.data)


def addr_msg(index: int) -> bytes:
    m = ifaddrmsg()
    m["header"]["type"] = RTM_NEWADDR
    m["family"] = socket.AF_INET6
    m["prefixlen"] = 64
    m["index"] = index
    m["attrs"] = [("IFA_ADDRESS", "fcbb:bb00::1")]
    m.encode()
    return bytes(m.data)


def pyroute2_events(data: bytes) -> list[LinkEvent]:
    """What pyroute2's decoder makes of the same bytes, as LinkEvents."""
    out = []
    for m in MarshalRtnl().parse(data):
        mtype = m["header"]["type"]
        if mtype in (RTM_NEWLINK, RTM_DELLINK):
            flags = m["flags"] if mtype == RTM_NEWLINK else None
            out.append(LinkEvent(m["index"], flags, m.get_attr("IFLA_IFNAME")))
    return out


def test_one_message_of_each_kind():
    up = IFF_UP | IFF_RUNNING
    data = link_msg(RTM_NEWLINK, 5, up, "p0") + link_msg(RTM_DELLINK, 6, 0, "p1")
    data += addr_msg(7)  # another message type: skipped
    assert parse_link_messages(data) == [LinkEvent(5, up, "p0"), LinkEvent(6, None, "p1")]
    assert parse_link_messages(data) == pyroute2_events(data)
    ev = parse_link_messages(data)
    assert ev[0].up and not ev[1].up


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=15)
_link = st.tuples(
    st.sampled_from([RTM_NEWLINK, RTM_DELLINK]),
    st.integers(min_value=1, max_value=2**31 - 1),
    st.integers(min_value=0, max_value=2**32 - 1),
    st.one_of(st.none(), _names),
    st.integers(min_value=0, max_value=2),  # where IFLA_IFNAME sits among the attributes
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_link, st.integers(min_value=1, max_value=1000)), max_size=12))
def test_parser_agrees_with_pyroute2(items):
    data = b"".join(
        addr_msg(x) if isinstance(x, int) else link_msg(x[0], x[1], x[2], x[3], name_at=x[4])
        for x in items
    )
    assert parse_link_messages(data) == pyroute2_events(data)


@settings(max_examples=100, deadline=None)
@given(st.lists(_link, min_size=1, max_size=5), st.data())
def test_a_cut_datagram_keeps_its_whole_messages(items, data):
    msgs = [link_msg(*x[:4], name_at=x[4]) for x in items]
    whole = b"".join(msgs)
    cut = data.draw(st.integers(min_value=0, max_value=len(whole)))
    got = parse_link_messages(whole[:cut])
    n, size = 0, 0
    while n < len(msgs) and size + len(msgs[n]) <= cut:
        size += len(msgs[n])
        n += 1
    assert got == parse_link_messages(whole)[:n]


def test_garbage_is_ignored():
    assert parse_link_messages(b"") == []
    assert parse_link_messages(b"\xff" * 7) == []
    assert parse_link_messages(b"\xff" * 64) == []
    # a length below the header's own size would never end: stop
    assert parse_link_messages(b"\x03\x00\x00\x00\x10\x00" + bytes(10)) == []
    # an RTM_NEWLINK too short for its ifinfomsg: skipped, the next one is read
    short = (16).to_bytes(4, "little") + RTM_NEWLINK.to_bytes(2, "little") + bytes(10)
    ok = link_msg(RTM_NEWLINK, 9, IFF_UP)
    assert parse_link_messages(short + ok) == [LinkEvent(9, IFF_UP, "veth0")]
    # a bad attribute: the event stands, without a name
    bad = bytearray(link_msg(RTM_NEWLINK, 3, IFF_UP, "xy"))
    bad[32:34] = (200).to_bytes(2, "little")  # the first rtattr's length runs past the end
    assert parse_link_messages(bytes(bad)) == [LinkEvent(3, IFF_UP, None)]


def test_flags_up():
    assert flags_up(IFF_UP | IFF_RUNNING)
    assert flags_up(IFF_UP | IFF_RUNNING | IFF_LOOPBACK)
    assert not flags_up(IFF_UP)  # admin up, no carrier
    assert not flags_up(IFF_RUNNING)
    assert not flags_up(0)
    assert not flags_up(None)  # gone


# --- the watcher's read loop ------------------------------------------------------------------


class FakeNetlink:
    """recv() hands out the given datagrams and errors in order, then EAGAIN."""

    def __init__(self, items: list[bytes | OSError]) -> None:
        self.items = list(items)
        self.closed = False

    def recv(self, _n: int) -> bytes:
        if not self.items:
            raise BlockingIOError(errno.EAGAIN, "empty")
        x = self.items.pop(0)
        if isinstance(x, OSError):
            raise x
        return x

    def fileno(self) -> int:
        return 99

    def close(self) -> None:
        self.closed = True


def test_watcher_reads_every_datagram_and_reports_losses():
    a = link_msg(RTM_NEWLINK, 4, IFF_UP, "p0")
    b = link_msg(RTM_NEWLINK, 4, IFF_UP | IFF_RUNNING, "p0") + link_msg(RTM_DELLINK, 5, 0, "p1")
    fake = FakeNetlink([a, OSError(errno.ENOBUFS, "overflow"), b])
    w = LinkWatcher(fake)  # type: ignore[arg-type]
    events, lost = w.read()
    assert lost and w.overflows == 1
    assert [(e.ifindex, e.up) for e in events] == [(4, False), (4, True), (5, False)]
    assert w.read() == ([], False)
    assert w.fileno() == 99
    w.close()
    assert fake.closed


def test_watcher_stops_on_other_errors():
    fake = FakeNetlink([OSError(errno.EBADF, "bad"), link_msg(RTM_NEWLINK, 1, 0)])
    assert LinkWatcher(fake).read() == ([], False)  # type: ignore[arg-type]


def test_watcher_opens_without_root():
    w = LinkWatcher.open()
    if w is None:
        pytest.skip("no netlink here")
    try:
        assert w.fileno() >= 0
        assert w.read() == ([], False)  # nothing changed: nothing waiting, no blocking
    finally:
        w.close()


# --- SIOCGIFFLAGS -----------------------------------------------------------------------------


def test_link_flags_of_loopback_and_of_nothing():
    flags = linkstate.link_flags("lo")
    assert flags is not None and flags & IFF_LOOPBACK
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        assert linkstate.link_flags("lo", s) == flags  # asked through a given socket
    assert linkstate.link_up("lo") == flags_up(flags)
    assert linkstate.link_flags("mrc-no-such0") is None
    assert not linkstate.link_up("mrc-no-such0")
