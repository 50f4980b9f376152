"""mrcswitch.pipeline: kernel-compatible uSID forwarding as a pure function; never raises."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrcswitch.config import config_from_dict
from mrcswitch.pipeline import Drop, DropCounter, DropReason, Forward, Pipeline
from mrcswitch.table import build_table

OWN, OWN2, B, C, T1 = 0x1100, 0x1101, 0x3001, 0x3002, 0x2001
MACS = [bytes([2, 0, 0, 0, 1, i]) for i in range(3)]
PEERS = [bytes([2, 0, 0, 0, 2, i]) for i in range(3)]
SRC = bytes.fromhex("20010db8000000000000000000000001")
CFG = config_from_dict(
    {
        "name": "t",
        "own_usids": [f"{OWN:x}", f"{OWN2:x}"],
        "ports": [
            {"name": n, "interface": f"v{i}", "peer_mac": ":".join(f"{b:02x}" for b in PEERS[i]),
             "rate_mbit": 100, "buffer_bytes": 1 << 20}
            for i, n in enumerate(("a", "b", "c"))
        ],
        "table": {f"{B:x}": "b", f"{C:x}": "c", f"{T1:x}": "c"},
    }
)  # fmt: skip
TABLE = build_table(CFG)
PIPE = Pipeline(TABLE, MACS, PEERS)
ROUTES = {B: 1, C: 2, T1: 2}
OWNS = {OWN, OWN2}


def frame(
    dst: bytes,
    *,
    hop: int = 64,
    in_port: int = 0,
    src: bytes = SRC,
    payload=b"x" * 20,
    plen: int | None = None,
    ethertype: bytes = b"\x86\xdd",
    version: int = 6,
) -> bytes:
    udp = b"\x9c\x40\x12\xb7" + (8 + len(payload)).to_bytes(2, "big") + b"\0\0" + payload
    n = len(udp) if plen is None else plen
    ip = (version << 28 | 0x12345).to_bytes(4, "big") + n.to_bytes(2, "big") + bytes([17, hop])
    return MACS[in_port] + PEERS[in_port] + ethertype + ip + src + dst + udp  # fmt: skip


def addr(*usids: int) -> bytes:
    return (bytes.fromhex("fcbbbb00") + b"".join(u.to_bytes(2, "big") for u in usids) + bytes(16))[
        :16
    ]


def model(dst: bytes, hop: int) -> tuple[int, bytes, int] | DropReason:
    """Reference: RFC 9800 / seg6local next-csid, shifting bytes (independent of usid.UsidShift,
    the one shift the switch and mrcnic.wire.usid share)."""
    if dst[:4] != bytes.fromhex("fcbbbb00"):
        return DropReason.WRONG_BLOCK
    active = int.from_bytes(dst[4:6], "big")
    if active not in OWNS:
        if active not in ROUTES:
            return DropReason.NOT_MINE
    else:
        while int.from_bytes(dst[4:6], "big") in OWNS:
            if not any(dst[6:]):  # nothing after the active uSID
                return DropReason.END_OF_CARRIER
            dst = dst[:4] + dst[6:] + bytes(2)  # drop the active uSID, zero-fill
        active = int.from_bytes(dst[4:6], "big")
        if active not in ROUTES:
            return DropReason.ZERO_USID if active == 0 else DropReason.NO_ROUTE
    if hop <= 1:
        return DropReason.HOP_LIMIT
    return ROUTES[active], dst, hop - 1


usid_values = st.sampled_from([0, OWN, OWN2, B, C, T1, 0x4444, 0xFFFF])


@settings(max_examples=400, deadline=None)
@given(st.lists(usid_values, min_size=1, max_size=6), st.integers(0, 255))
def test_matches_reference_model(usids, hop):
    dst = addr(*usids)
    f = frame(dst, hop=hop)
    got = PIPE.process(f, 0)
    want = model(dst, hop)
    if isinstance(want, DropReason):
        assert got == Drop(want)
    else:
        port, new_dst, new_hop = want
        assert isinstance(got, Forward) and got.port == port
        out = got.frame
        assert out[38:54] == new_dst and out[21] == new_hop
        assert out[0:6] == PEERS[port] and out[6:12] == MACS[port]
        # nothing else changed
        assert out[12:21] == f[12:21] and out[22:38] == f[22:38] and out[54:] == f[54:]


@pytest.mark.parametrize(
    ("dst", "hop", "expect"),
    [
        (addr(OWN, B), 64, (1, addr(B), 63)),
        (addr(OWN, C, 0x77, 0x88, 0x99, 0xAA), 2, (2, addr(C, 0x77, 0x88, 0x99, 0xAA), 1)),
        (addr(B, 5), 9, (1, addr(B, 5), 8)),  # in the table, not ours: unshifted
        (addr(OWN, OWN2, B), 5, (1, addr(B), 4)),  # consecutive own uSIDs: one decrement
        (addr(OWN, T1, OWN, B), 5, (2, addr(T1, OWN, B), 4)),
        (addr(OWN, B, 0, C), 5, (1, addr(B, 0, C), 4)),  # the 0 is the next switch's problem
        (addr(OWN), 64, DropReason.END_OF_CARRIER),
        (addr(OWN, B), 1, DropReason.HOP_LIMIT),
        (addr(OWN, B), 0, DropReason.HOP_LIMIT),
        (addr(B), 1, DropReason.HOP_LIMIT),
        (addr(OWN, 0, B), 64, DropReason.ZERO_USID),
        (addr(OWN, 0x4444), 64, DropReason.NO_ROUTE),
        (addr(0x4444, B), 64, DropReason.NOT_MINE),
        (addr(0, B), 64, DropReason.NOT_MINE),
        (bytes.fromhex("fcbbbb01") + addr(OWN, B)[4:], 64, DropReason.WRONG_BLOCK),
        (bytes.fromhex("20010db8") + bytes(12), 64, DropReason.WRONG_BLOCK),
    ],
)
def test_named_cases(dst, hop, expect):
    got = PIPE.process(frame(dst, hop=hop), 0)
    if isinstance(expect, DropReason):
        assert got == Drop(expect)
    else:
        assert isinstance(got, Forward)
        assert (got.port, bytes(got.frame[38:54]), got.frame[21]) == expect


def test_frame_level_drops():
    good = frame(addr(OWN, B))
    assert PIPE.process(good[:13], 0) == Drop(DropReason.MALFORMED)
    assert PIPE.process(good[:53], 0) == Drop(DropReason.MALFORMED)  # truncated IPv6 header
    assert PIPE.process(good[:-1], 0) == Drop(DropReason.MALFORMED)  # payload length lies
    assert PIPE.process(frame(addr(OWN, B), ethertype=b"\x08\x00"), 0) == Drop(DropReason.NOT_IPV6)
    assert PIPE.process(frame(addr(OWN, B), version=4), 0) == Drop(DropReason.MALFORMED)
    assert PIPE.process(good, 1) == Drop(DropReason.NOT_MY_MAC)  # addressed to port 0's MAC
    for src in (
        "ff020000000000000000000000000001",
        "fe800000000000000000000000000001",
        "00000000000000000000000000000000",
        "00000000000000000000000000000001",
    ):
        assert PIPE.process(frame(addr(OWN, B), src=bytes.fromhex(src)), 0) == Drop(
            DropReason.BAD_SOURCE)  # fmt: skip


def test_trailing_bytes_past_payload_length_are_cut_like_ipv6_rcv():
    f = frame(addr(OWN, B), payload=b"y" * 30, plen=8 + 10)
    got = PIPE.process(f, 0)
    assert isinstance(got, Forward) and len(got.frame) == 14 + 40 + 18
    # payload length 0: an empty IPv6 packet is still forwarded (the kernel does too)
    got = PIPE.process(frame(addr(OWN, B), plen=0), 0)
    assert isinstance(got, Forward) and len(got.frame) == 54


def test_process_does_not_mutate_its_input():
    f = bytearray(frame(addr(OWN, B)))
    before = bytes(f)
    assert isinstance(PIPE.process(f, 0), Forward)
    assert f == before


def test_shift_is_one_expression_over_128_bits():
    a = int.from_bytes(addr(OWN, B, C, 4, 5, 6), "big")
    assert PIPE.shift(a).to_bytes(16, "big") == addr(B, C, 4, 5, 6)
    assert PIPE.final_address(a).to_bytes(16, "big") == addr(6)


def test_drop_counter_counts_by_name():
    c = DropCounter()
    c.add(DropReason.HOP_LIMIT)
    c.add(DropReason.QUEUE_FULL, 3)
    d = c.as_dict()
    assert d["hop_limit"] == 1 and d["queue_full"] == 3 and c.total == 4
    assert set(d) == {r.name.lower() for r in DropReason}


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.integers(0, 2))
def test_never_raises_on_random_bytes(data, in_port):
    r = PIPE.process(data, in_port)
    assert isinstance(r, Forward | Drop)


@st.composite
def mutated(draw):
    f = bytearray(frame(addr(*draw(st.lists(usid_values, min_size=1, max_size=6))),
                        hop=draw(st.integers(0, 255))))  # fmt: skip
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(f) - 1))
        f[i] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(f) + 8))
    return bytes(f[:cut]) + bytes(max(0, cut - len(f)))


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_never_raises_on_mutated_frames(f):
    r = PIPE.process(f, 0)
    if isinstance(r, Forward):
        out = r.frame
        # whatever was forwarded is a consistent IPv6 frame with a decremented hop limit
        assert out[12:14] == b"\x86\xdd" and len(out) == 54 + (out[18] << 8 | out[19])
        assert out[21] == f[21] - 1
    else:
        assert isinstance(r.reason, DropReason)


def test_a_guarded_port_drops_sources_outside_its_prefix():
    import ipaddress

    from mrcswitch.config import ConfigError

    net = ipaddress.IPv6Network("2001:db8::/64")
    pipe = Pipeline(TABLE, MACS, PEERS, [(int(net.network_address), 64), None, None])
    ok = frame(addr(OWN, B), src=SRC)
    spoofed = frame(addr(OWN, B), src=bytes.fromhex("20010db8000000010000000000000001"))
    assert isinstance(pipe.process(ok, 0), Forward)
    assert pipe.process(spoofed, 0) == Drop(DropReason.SPOOFED_SOURCE)
    assert isinstance(pipe.process(frame(addr(OWN, B), src=spoofed[22:38], in_port=1), 1), Forward)
    assert DropReason.SPOOFED_SOURCE.key == "spoofed_source"
    port = {"interface": "v0", "peer_mac": "02:00:00:00:02:00", "rate_mbit": 1,
            "buffer_bytes": 1 << 20, "source_prefix": "2001:db8::/64"}  # fmt: skip
    cfg = config_from_dict({"name": "g", "own_usids": ["1100"], "ports": [port], "table": {}})
    assert cfg.ports[0].source_prefix == (int(net.network_address), 64)
    with pytest.raises(ConfigError, match="source_prefix"):
        config_from_dict(
            {
                "name": "g",
                "own_usids": ["1100"],
                "table": {},
                "ports": [{**port, "source_prefix": "2001:db8::1/64"}],
            }  # fmt: skip
        )
