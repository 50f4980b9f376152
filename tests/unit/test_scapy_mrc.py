"""mrcnic.wire.scapy_layers agrees with mrcnic.wire field by field, and scapy accepts our checksums."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.config import conf
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, in6_chksum
from scapy.layers.l2 import Ether
from scapy.packet import Padding, Raw, raw
from test_wire import FINAL_DST, FIRST_HOP, SRC, mrc_packets

from mrcnic import wire as w
from mrcnic.wire import scapy_layers as sm


@pytest.fixture(autouse=True, scope="module")
def loud_dissector():
    """Scapy turns a dissector's exception into a Raw layer; make it fail the test instead."""
    old = conf.debug_dissector
    conf.debug_dissector = True
    yield
    conf.debug_dissector = old


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# wire.MrcPacket part -> scapy layer
LAYER_OF = {
    "bth": sm.MRC_BTH,
    "meth": sm.MRC_METH,
    "ts": sm.MRC_TS,
    "reth": sm.MRC_RETH,
    "imm": sm.MRC_ImmDt,
    "sack": sm.MRC_SACK,
    "nack": sm.MRC_NACK,
    "probe": sm.MRC_RProbe,
    "endpoint": sm.MRC_Endpoint,
    "aeth": sm.MRC_AETH,
}
PART_ORDER = ("bth", "meth", "ts", "reth", "imm", "sack", "nack", "probe", "endpoint", "aeth")


def frame_of(pkt: w.MrcPacket, *, ev: int, dscp: int, trimmed: bool = False) -> bytes:
    return w.build_frame(
        eth_src=b"\x02\0\0\0\0\x01",
        eth_dst=b"\x02\0\0\0\0\x02",
        ip_src=SRC,
        ip_dst=FIRST_HOP,
        final_dst=FINAL_DST,
        ev=ev,
        mrc=w.encode_mrc(pkt, trimmed=trimmed),
        dscp=dscp,
    )


def to_scapy(pkt: w.MrcPacket):
    """The same packet built from scapy layers (ICRC left for scapy to compute)."""
    layers = sm.MRC_BTH()
    for part in PART_ORDER:
        value = getattr(pkt, part)
        if value is None:
            continue
        fields = {f.name: int(getattr(value, f.name)) for f in dataclasses.fields(value)}
        layer = LAYER_OF[part](**fields)
        layers = layer if part == "bth" else layers / layer
    return layers / sm.MRC_Payload(load=bytes(pkt.payload))


def assert_same_fields(dissected, decoded: w.MrcPacket) -> None:
    for part, layer_cls in LAYER_OF.items():
        value = getattr(decoded, part)
        layer = dissected.getlayer(layer_cls)
        if value is None:
            assert layer is None, f"scapy found a {layer_cls.__name__} wire.py did not"
            continue
        assert layer is not None, f"scapy lacks {layer_cls.__name__}"
        for f in dataclasses.fields(value):
            assert layer.getfieldval(f.name) == getattr(value, f.name), f"{part}.{f.name}"
        for name in layer.fields:  # reserved bits: zero in everything we build
            if name.startswith("rsvd"):
                assert layer.getfieldval(name) == 0, f"{part}.{name}"


@pytest.mark.parametrize("opcode", list(w.Opcode), ids=lambda o: o.name)
def test_scapy_and_wire_agree_on_every_opcode(opcode):
    @settings(max_examples=8, deadline=None)
    @given(pkt=mrc_packets(opcode), ev=st.integers(0, 2**32 - 1), dscp=st.sampled_from([0, 4, 46]))
    def check(pkt, ev, dscp):
        check_frame_agreement(pkt, ev, dscp)

    check()


@SETTINGS
@given(pkt=mrc_packets(), ev=st.integers(0, 2**32 - 1), dscp=st.sampled_from([4, 8, 46, 0]))
def test_scapy_and_wire_agree_on_frames(pkt, ev, dscp):
    check_frame_agreement(pkt, ev, dscp)


def check_frame_agreement(pkt, ev, dscp):
    raw_frame = frame_of(pkt, ev=ev, dscp=dscp)
    frame = w.parse_frame(raw_frame)
    p = Ether(raw_frame)
    ip6, udp = p[IPv6], p[UDP]
    assert ip6.tc == frame.ip6.dscp << 2 | frame.ip6.ecn
    assert (ip6.fl, ip6.plen, ip6.nh, ip6.hlim) == (ev & 0xFFFF, frame.ip6.payload_length, 17, 64)
    assert (udp.sport, udp.dport, udp.len, udp.chksum) == (
        ev >> 16,
        4791,
        frame.udp.length,
        frame.udp.checksum,
    )
    assert_same_fields(p, frame.mrc)
    trailer = p[sm.MRC_Payload]
    assert trailer.load == bytes(frame.mrc.payload)
    assert trailer.icrc == frame.mrc.icrc
    assert not p.haslayer(Raw) and not p.haslayer(Padding)
    assert raw(p) == raw_frame


@SETTINGS
@given(pkt=mrc_packets(), dscp=st.sampled_from([w.Dscp.TRIMMED, w.Dscp.TRIMMED_LASTHOP]))
def test_scapy_dissects_trimmed_frames(pkt, dscp):
    raw_frame = frame_of(pkt, ev=7, dscp=dscp, trimmed=True)
    p = Ether(raw_frame)
    assert_same_fields(p, w.parse_frame(raw_frame).mrc)
    assert not p.haslayer(sm.MRC_Payload) and not p.haslayer(Raw)


@SETTINGS
@given(pkt=mrc_packets())
def test_scapy_built_packets_decode_with_wire(pkt):
    built = raw(to_scapy(pkt))
    assert built == w.encode_mrc(pkt)  # same layout and same ICRC
    assert_same_fields(sm.MRC_BTH(built), w.decode_mrc(built))


@SETTINGS
@given(pkt=mrc_packets(), ev=st.integers(0, 2**32 - 1))
def test_scapy_accepts_our_udp_checksum_at_the_final_destination(pkt, ev):
    raw_frame = frame_of(pkt, ev=ev, dscp=4)
    p = Ether(raw_frame)
    sent = p[UDP].chksum
    udp_zeroed = bytearray(raw(p[UDP]))
    udp_zeroed[6:8] = b"\0\0"
    # on its way the destination is the first-hop carrier, which the checksum does not cover
    assert (in6_chksum(17, p[IPv6], bytes(udp_zeroed)) or 0xFFFF) != sent
    p[IPv6].dst = str(ipaddress.IPv6Address(FINAL_DST))  # what the last switch delivers
    del p[UDP].chksum
    rebuilt = Ether(raw(p))
    assert rebuilt[UDP].chksum == sent
    udp_zeroed = bytearray(raw(rebuilt[UDP]))
    udp_zeroed[6:8] = b"\0\0"
    assert (in6_chksum(17, rebuilt[IPv6], bytes(udp_zeroed)) or 0xFFFF) == sent


def test_unknown_opcode_is_left_raw():
    body = bytes([0x42]) + bytes(11) + b"rest"
    p = sm.MRC_BTH(body)
    assert p.opcode == 0x42 and p[Raw].load == b"rest"


def test_scapy_icrc_is_filled_in_when_left_none():
    pkt = w.MrcPacket(w.BTH(w.Opcode.SACK, 3, 0), sack=w.SACK(4, bitmap=0x76, ev=0x10003))
    raw_frame = frame_of(pkt, ev=0x10003, dscp=46)
    p = Ether(raw_frame)
    p[sm.MRC_Payload].icrc = None
    p.clear_cache()  # scapy reuses a dissected layer's bytes until told otherwise
    assert raw(p) == raw_frame


@pytest.mark.parametrize("layer", sm.MRC_LAYERS, ids=lambda c: c.__name__)
def test_layer_sizes_match_wire(layer):
    sizes = {
        sm.MRC_BTH: w.BTH_SIZE,
        sm.MRC_METH: w.METH_SIZE,
        sm.MRC_TS: w.TS_SIZE,
        sm.MRC_RETH: w.RETH_SIZE,
        sm.MRC_ImmDt: w.IMM_SIZE,
        sm.MRC_SACK: w.SACK_SIZE,
        sm.MRC_NACK: w.NACK_SIZE,
        sm.MRC_RProbe: w.RPROBE_SIZE,
        sm.MRC_Endpoint: w.ENDPOINT_SIZE,
        sm.MRC_AETH: w.AETH_SIZE,
        sm.MRC_Payload: w.ICRC_SIZE,
    }
    assert len(raw(layer())) == sizes[layer]
