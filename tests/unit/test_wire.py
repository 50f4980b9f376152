"""mrcnic.wire: round trips, golden bytes, malformed input, trimmed packets, EV split, frames."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import zlib

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mrcnic import wire as w
from mrcnic.wire import (
    AETH,
    BTH,
    METH,
    NACK,
    RETH,
    SACK,
    UDP,
    EndpointKind,
    EndpointMsg,
    Ethernet,
    ImmDt,
    IPv6,
    MrcPacket,
    NackReason,
    Opcode,
    ReliabilityProbe,
    SackMark,
    TimestampExt,
    WireError,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def uint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(0, (1 << bits) - 1)


# ---------------------------------------------------------------------------------------------
# Strategies (imported by test_scapy_mrc.py)

ethernets = st.builds(Ethernet, st.binary(min_size=6, max_size=6), st.binary(min_size=6, max_size=6),
                      uint(16))  # fmt: skip
ipv6s = st.builds(
    IPv6,
    st.binary(min_size=16, max_size=16),
    st.binary(min_size=16, max_size=16),
    uint(16),
    uint(8),
    uint(8),
    uint(6),
    uint(2),
    uint(20),
)
udps = st.builds(UDP, uint(16), uint(16), uint(16), uint(16))


def bths(opcode: st.SearchStrategy[int] | None = None, ts_present=None):
    return st.builds(
        BTH,
        uint(8) if opcode is None else opcode,
        uint(24),
        uint(24),
        st.booleans(),
        st.booleans(),
        uint(2),
        uint(4),
        uint(16),
        st.booleans(),
        st.booleans(),
        st.booleans(),
        st.booleans() if ts_present is None else ts_present,
        st.booleans(),
    )


meths = st.builds(METH, uint(16), uint(16))
tss = st.builds(TimestampExt, uint(64))
reths = st.builds(RETH, uint(64), uint(32), uint(32))
imms = st.builds(ImmDt, uint(32))
sacks = st.builds(
    SACK,
    uint(24),
    uint(16),
    uint(64),
    uint(32),
    st.sampled_from(SackMark),
    st.booleans(),
    uint(7),
    uint(16),
    uint(64),
    uint(64),
)
nacks = st.builds(NACK, st.sampled_from(NackReason), uint(24), uint(32), uint(24), uint(64))
rprobes = st.builds(ReliabilityProbe, uint(32), uint(32), uint(64))
endpoints = st.builds(EndpointMsg, st.sampled_from(EndpointKind), uint(32), uint(32), uint(32),
                      uint(64))  # fmt: skip
aeths = st.builds(AETH, uint(8), uint(24))

# (dataclass strategy, encoder, decoder, size, header name)
HEADERS = [
    (ethernets, w.encode_ethernet, w.decode_ethernet, w.ETH_SIZE, "Ethernet"),
    (ipv6s, w.encode_ipv6, w.decode_ipv6, w.IPV6_SIZE, "IPv6"),
    (udps, w.encode_udp, w.decode_udp, w.UDP_SIZE, "UDP"),
    (bths(), w.encode_bth, w.decode_bth, w.BTH_SIZE, "BTH"),
    (meths, w.encode_meth, w.decode_meth, w.METH_SIZE, "METH"),
    (tss, w.encode_ts, w.decode_ts, w.TS_SIZE, "TS"),
    (reths, w.encode_reth, w.decode_reth, w.RETH_SIZE, "RETH"),
    (imms, w.encode_imm, w.decode_imm, w.IMM_SIZE, "ImmDt"),
    (sacks, w.encode_sack, w.decode_sack, w.SACK_SIZE, "SACK"),
    (nacks, w.encode_nack, w.decode_nack, w.NACK_SIZE, "NACK"),
    (rprobes, w.encode_rprobe, w.decode_rprobe, w.RPROBE_SIZE, "RPROBE"),
    (endpoints, w.encode_endpoint, w.decode_endpoint, w.ENDPOINT_SIZE, "EndpointMsg"),
    (aeths, w.encode_aeth, w.decode_aeth, w.AETH_SIZE, "AETH"),
]
HEADER_IDS = [h[4] for h in HEADERS]


@st.composite
def mrc_packets(draw, opcode: int | None = None) -> MrcPacket:
    """A valid MrcPacket of any known opcode (or the one given)."""
    op = draw(st.sampled_from(Opcode)) if opcode is None else Opcode(opcode)
    if w.is_data(op):
        bth = draw(bths(st.just(op)))
        return MrcPacket(
            bth,
            meth=draw(meths),
            ts=draw(tss) if bth.ts_present else None,
            reth=draw(reths),
            imm=draw(imms) if w.has_imm(op) else None,
            payload=draw(st.binary(max_size=64)),
        )
    bth = draw(bths(st.just(op)))
    if w.is_rc_data(op):
        return MrcPacket(
            bth,
            reth=draw(reths) if w.has_reth(op) else None,
            imm=draw(imms) if w.has_imm(op) else None,
            payload=draw(st.binary(max_size=64)),
        )
    body = {
        Opcode.ACK: ("sack", sacks.map(lambda s: dataclasses.replace(s, bitmap=0))),
        Opcode.SACK: ("sack", sacks),
        Opcode.NACK: ("nack", nacks),
        Opcode.RPROBE: ("probe", rprobes),
        Opcode.EP_REQUEST: ("endpoint", endpoints),
        Opcode.EP_RESPONSE: ("endpoint", endpoints),
        Opcode.RC_ACK: ("aeth", aeths),
    }[op]
    return MrcPacket(bth, **{body[0]: draw(body[1])})


def canonical(pkt: MrcPacket) -> MrcPacket:
    """What decode_mrc returns for pkt except the ICRC it found."""
    return dataclasses.replace(pkt, icrc=None, payload=bytes(pkt.payload))


# ---------------------------------------------------------------------------------------------
# Per-header round trips and bad input


@pytest.mark.parametrize(("strategy", "enc", "dec", "size", "name"), HEADERS, ids=HEADER_IDS)
def test_header_round_trip(strategy, enc, dec, size, name):
    @FAST
    @given(h=strategy, prefix=st.binary(max_size=8))
    def check(h, prefix):
        raw = enc(h)
        assert len(raw) == size
        assert dec(raw) == h
        assert dec(memoryview(prefix + raw + b"junk"), len(prefix)) == h
        assert dec(bytearray(raw)) == h
        assert enc(dec(raw)) == raw

    check()


@pytest.mark.parametrize(("strategy", "enc", "dec", "size", "name"), HEADERS, ids=HEADER_IDS)
def test_header_truncated_raises_wire_error(strategy, enc, dec, size, name):
    @settings(max_examples=10, deadline=None)
    @given(h=strategy)
    def check(h):
        raw = enc(h)
        for cut in range(size):
            with pytest.raises(WireError) as ei:
                dec(raw[:cut])
            assert ei.value.header == name
            assert "truncated" in ei.value.reason
            assert ei.value.offset == 0
        with pytest.raises(WireError):
            dec(raw, 1)
        with pytest.raises(WireError):
            dec(raw, -1)

    check()


@pytest.mark.parametrize(("strategy", "enc", "dec", "size", "name"), HEADERS, ids=HEADER_IDS)
def test_header_random_bytes_decode_or_wire_error(strategy, enc, dec, size, name):
    @settings(max_examples=100, deadline=None)
    @given(raw=st.binary(max_size=size + 4), offset=st.integers(-2, size + 4))
    def check(raw, offset):
        try:
            h = dec(raw, offset)
        except WireError:
            return
        assert len(enc(h)) == size  # whatever decodes, re-encodes

    check()


def _fields_and_bits():
    """(header instance, field, bits) for every integer field with a width limit."""
    return [
        (Ethernet(bytes(6), bytes(6), 0x86DD), "ethertype", 16),
        (IPv6(bytes(16), bytes(16), 0), "payload_length", 16),
        (IPv6(bytes(16), bytes(16), 0), "dscp", 6),
        (IPv6(bytes(16), bytes(16), 0), "ecn", 2),
        (IPv6(bytes(16), bytes(16), 0), "flow_label", 20),
        (IPv6(bytes(16), bytes(16), 0), "hop_limit", 8),
        (IPv6(bytes(16), bytes(16), 0), "next_header", 8),
        (UDP(1), "src_port", 16),
        (UDP(1), "dst_port", 16),
        (UDP(1), "length", 16),
        (UDP(1), "checksum", 16),
        (BTH(0xC6, 1, 2), "opcode", 8),
        (BTH(0xC6, 1, 2), "dest_qp", 24),
        (BTH(0xC6, 1, 2), "psn", 24),
        (BTH(0xC6, 1, 2), "pad_count", 2),
        (BTH(0xC6, 1, 2), "tver", 4),
        (BTH(0xC6, 1, 2), "pkey", 16),
        (METH(1, 2), "msn", 16),
        (METH(1, 2), "rqmsn", 16),
        (TimestampExt(1), "tx_ts_ns", 64),
        (RETH(1, 2, 3), "va", 64),
        (RETH(1, 2, 3), "rkey", 32),
        (RETH(1, 2, 3), "length", 32),
        (ImmDt(1), "imm", 32),
        (SACK(1), "cack_psn", 24),
        (SACK(1), "sack_offset", 16),
        (SACK(1), "bitmap", 64),
        (SACK(1), "ev", 32),
        (SACK(1), "rcv_cwnd_pen", 7),
        (SACK(1), "ooo_count", 16),
        (SACK(1), "reflected_ts_ns", 64),
        (SACK(1), "received_bytes", 64),
        (NACK(NackReason.TRIMMED, 1), "psn", 24),
        (NACK(NackReason.TRIMMED, 1), "ev", 32),
        (NACK(NackReason.TRIMMED, 1), "cack_psn", 24),
        (NACK(NackReason.TRIMMED, 1), "reflected_ts_ns", 64),
        (ReliabilityProbe(1, 2, 3), "probe_id", 32),
        (ReliabilityProbe(1, 2, 3), "ev", 32),
        (ReliabilityProbe(1, 2, 3), "tx_ts_ns", 64),
        (EndpointMsg(EndpointKind.EV_PROBE, 1), "ident", 32),
        (EndpointMsg(EndpointKind.EV_PROBE, 1), "ev", 32),
        (EndpointMsg(EndpointKind.EV_PROBE, 1), "port_mask", 32),
        (EndpointMsg(EndpointKind.EV_PROBE, 1), "ts_ns", 64),
        (AETH(0, 1), "syndrome", 8),
        (AETH(0, 1), "msn", 24),
    ]


ENCODER_OF = {
    Ethernet: w.encode_ethernet,
    IPv6: w.encode_ipv6,
    UDP: w.encode_udp,
    BTH: w.encode_bth,
    METH: w.encode_meth,
    TimestampExt: w.encode_ts,
    RETH: w.encode_reth,
    ImmDt: w.encode_imm,
    SACK: w.encode_sack,
    NACK: w.encode_nack,
    ReliabilityProbe: w.encode_rprobe,
    EndpointMsg: w.encode_endpoint,
    AETH: w.encode_aeth,
}


@pytest.mark.parametrize(("h", "field", "bits"), _fields_and_bits(),
                         ids=lambda x: x if isinstance(x, str) else None)  # fmt: skip
def test_encode_validates_ranges(h, field, bits):
    enc = ENCODER_OF[type(h)]
    enc(dataclasses.replace(h, **{field: (1 << bits) - 1}))  # the largest value fits
    for bad in (1 << bits, -1, 1 << 70):
        with pytest.raises(WireError) as ei:
            enc(dataclasses.replace(h, **{field: bad}))
        assert field in ei.value.reason


garbage = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.binary(max_size=20),
)


@pytest.mark.parametrize(("strategy", "enc", "dec", "size", "name"), HEADERS, ids=HEADER_IDS)
def test_encoders_raise_only_wire_error_on_garbage(strategy, enc, dec, size, name):
    @settings(max_examples=60, deadline=None)
    @given(h=strategy, data=st.data())
    def check(h, data):
        field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(h)]))
        bad = dataclasses.replace(h, **{field: data.draw(garbage)})
        try:
            raw = enc(bad)
        except WireError:
            return
        assert len(raw) == size

    check()


@FAST
@given(pkt=mrc_packets(), data=st.data())
def test_encode_mrc_raises_only_wire_error_on_garbage(pkt, data):
    part = data.draw(st.sampled_from(["bth", "payload", *(
        f for f in ("meth", "ts", "reth", "imm", "sack", "nack", "probe", "endpoint", "aeth")
        if getattr(pkt, f) is not None)]))  # fmt: skip
    if part == "payload":
        bad = dataclasses.replace(pkt, payload=data.draw(garbage))
    else:
        value = getattr(pkt, part)
        field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(value)]))
        bad = dataclasses.replace(
            pkt, **{part: dataclasses.replace(value, **{field: data.draw(garbage)})}
        )
    with contextlib.suppress(WireError):
        w.encode_mrc(bad)


def test_encode_validates_named_cases_from_the_brief():
    with pytest.raises(WireError, match="psn"):
        w.encode_bth(BTH(Opcode.WRITE_ONLY, 1, 1 << 24))
    with pytest.raises(WireError, match="rcv_cwnd_pen"):
        w.encode_sack(SACK(0, rcv_cwnd_pen=128))


def test_encode_rejects_undefined_enum_values_and_bad_byte_fields():
    with pytest.raises(WireError, match="mark"):
        w.encode_sack(SACK(0, mark=3))
    with pytest.raises(WireError, match="reason"):
        w.encode_nack(NACK(0, 1))
    with pytest.raises(WireError, match="reason"):
        w.encode_nack(NACK(99, 1))
    with pytest.raises(WireError, match="kind"):
        w.encode_endpoint(EndpointMsg(0, 1))
    with pytest.raises(WireError, match="dst"):
        w.encode_ethernet(Ethernet(bytes(5), bytes(6), 0x86DD))
    with pytest.raises(WireError, match="src"):
        w.encode_ipv6(IPv6(bytes(15), bytes(16), 0))
    with pytest.raises(WireError, match="psn"):
        w.encode_bth(BTH(Opcode.WRITE_ONLY, 1, "7"))  # type: ignore[arg-type]


def test_decode_rejects_undefined_enum_values_with_wire_error():
    sack = bytearray(w.encode_sack(SACK(5)))
    sack[0] |= 0xC0  # mark 3
    with pytest.raises(WireError) as ei:
        w.decode_sack(sack)
    assert ei.value.header == "SACK" and "mark" in ei.value.reason
    nack = bytearray(w.encode_nack(NACK(NackReason.NO_BITMAP, 5)))
    for bad in (0, 8, 255):
        nack[0] = bad
        with pytest.raises(WireError, match="reason"):
            w.decode_nack(nack)
    ep = bytearray(w.encode_endpoint(EndpointMsg(EndpointKind.PORT_STATUS, 5)))
    ep[0] = 9
    with pytest.raises(WireError, match="kind"):
        w.decode_endpoint(ep)


def test_decode_ignores_reserved_bits():
    raw = bytearray(w.encode_sack(SACK(5, rcv_cwnd_pen=127)))
    raw[0] |= 0x1F
    raw[6] |= 0x80
    raw[7] = 0xFF
    raw[22:24] = b"\xff\xff"
    assert w.decode_sack(raw) == SACK(5, rcv_cwnd_pen=127)
    bth = bytearray(w.encode_bth(BTH(Opcode.WRITE_FIRST, 3, 4)))
    bth[4] |= 0x0F
    bth[8] |= 0x7F
    assert w.decode_bth(bth) == BTH(Opcode.WRITE_FIRST, 3, 4)


def test_ipv6_version_must_be_6():
    raw = bytearray(w.encode_ipv6(IPv6(bytes(16), bytes(16), 8)))
    raw[0] = (4 << 4) | (raw[0] & 0xF)
    with pytest.raises(WireError, match="version"):
        w.decode_ipv6(raw)


def test_decoded_enums_are_members():
    ip = w.decode_ipv6(w.encode_ipv6(IPv6(bytes(16), bytes(16), 8, dscp=12, ecn=3)))
    assert ip.dscp is w.Dscp.TRIMMED and ip.ecn is w.Ecn.CE
    assert w.decode_ipv6(w.encode_ipv6(IPv6(bytes(16), bytes(16), 8, dscp=5))).dscp == 5
    assert w.decode_bth(w.encode_bth(BTH(0xDC, 1, 2))).opcode is Opcode.SACK
    assert w.decode_bth(w.encode_bth(BTH(0x42, 1, 2))).opcode == 0x42  # any value decodes here
    assert w.decode_aeth(w.encode_aeth(AETH(0x60, 1))).syndrome is w.AethSyndrome.NAK_PSN_SEQ_ERR


# ---------------------------------------------------------------------------------------------
# Golden bytes (written by hand from the layouts in docs/design/wire.md, not produced by the code)

GOLDEN = [
    (
        BTH(
            Opcode.WRITE_FIRST,
            0x000102,
            0xABCDEF,
            se=True,
            pad_count=3,
            tver=0,
            pkey=0xFFFF,
            fecn=True,
            rtx=True,
            ts_present=True,
            ack_req=True,
        ),  # fmt: skip
        "c6 b0 ffff b0 000102 80 abcdef",
        w.encode_bth,
        w.decode_bth,
    ),
    (BTH(Opcode.SACK, 0x2, 0), "dc 00 ffff 00 000002 00 000000", w.encode_bth, w.decode_bth),
    (
        BTH(Opcode.RC_ACK, 7, 9, mig=True, tver=0xF, becn=True),
        "11 4f ffff 40 000007 00 000009",
        w.encode_bth,
        w.decode_bth,
    ),
    (METH(0x1234, 0xFFFF), "1234 ffff", w.encode_meth, w.decode_meth),
    (TimestampExt(0x0102030405060708), "0102030405060708", w.encode_ts, w.decode_ts),
    (
        RETH(0x7F0000001000, 0xDEADBEEF, 65536),
        "00007f0000001000 deadbeef 00010000",
        w.encode_reth,
        w.decode_reth,
    ),  # fmt: skip
    (ImmDt(0xCAFEF00D), "cafef00d", w.encode_imm, w.decode_imm),
    (
        SACK(
            cack_psn=4,
            sack_offset=0,
            bitmap=0x76,
            ev=0x00010002,
            mark=SackMark.ALWAYS_SKIP,
            ece=True,
            rcv_cwnd_pen=127,
            ooo_count=2,
            reflected_ts_ns=1000,
            received_bytes=4096,
        ),
        "a0 000004 0000 7f 00 0000000000000076 00010002 0002 0000"
        " 00000000000003e8 0000000000001000",
        w.encode_sack,
        w.decode_sack,
    ),  # fmt: skip
    (
        NACK(NackReason.PSN_OOR_WINDOW, 0x123456, 0xFFFFFFFF, 0x000FFF, 7),
        "05 123456 ffffffff 00 000fff 0000000000000007",
        w.encode_nack,
        w.decode_nack,
    ),
    (
        ReliabilityProbe(1, 2, 3),
        "00000001 00000002 0000000000000003",
        w.encode_rprobe,
        w.decode_rprobe,
    ),  # fmt: skip
    (
        EndpointMsg(EndpointKind.PORT_STATUS, 7, 0x11223344, 0b1011, 99),
        "02 000000 00000007 11223344 0000000b 0000000000000063",
        w.encode_endpoint,
        w.decode_endpoint,
    ),
    (AETH(0x60, 0x000100), "60 000100", w.encode_aeth, w.decode_aeth),
    (
        IPv6(
            bytes.fromhex("fcbbbb00000100000000000000000000"),
            bytes.fromhex("fcbbbb0000010c010000000000000000"),
            100,
            dscp=46,
            ecn=2,
            flow_label=0x5678,
            hop_limit=63,
        ),  # fmt: skip
        "6b a0 5678 0064 11 3f fcbbbb00000100000000000000000000 fcbbbb0000010c010000000000000000",
        w.encode_ipv6,
        w.decode_ipv6,
    ),
    (UDP(0x1234, 4791, 60, 0xBEEF), "1234 12b7 003c beef", w.encode_udp, w.decode_udp),
]


@pytest.mark.parametrize(("h", "hexstr", "enc", "dec"), GOLDEN,
                         ids=[type(g[0]).__name__ for g in GOLDEN])  # fmt: skip
def test_golden_bytes(h, hexstr, enc, dec):
    raw = bytes.fromhex(hexstr.replace(" ", ""))
    assert enc(h) == raw
    assert dec(raw) == h


def test_golden_data_packet():
    pkt = MrcPacket(
        BTH(Opcode.WRITE_ONLY_IMM, 0x10, 0x20, ts_present=True, ack_req=True),
        meth=METH(3, 1),
        ts=TimestampExt(0x10),
        reth=RETH(0x1000, 0x55, 4),
        imm=ImmDt(0xA5A5A5A5),
        payload=b"\x01\x02\x03\x04",
    )
    body = bytes.fromhex(
        "cb 00 ffff 10 000010 80 000020"
        " 0003 0001"
        " 0000000000000010"
        " 0000000000001000 00000055 00000004"
        " a5a5a5a5"
        " 01020304".replace(" ", "")
    )
    raw = w.encode_mrc(pkt)
    assert raw == body + struct.pack(">I", zlib.crc32(body))
    assert canonical(w.decode_mrc(raw)) == pkt


# ---------------------------------------------------------------------------------------------
# Whole MRC packets


@pytest.mark.parametrize("opcode", list(Opcode), ids=lambda o: o.name)
def test_mrc_round_trip_every_opcode(opcode):
    @settings(max_examples=15, deadline=None)
    @given(pkt=mrc_packets(opcode))
    def check(pkt):
        test_mrc_round_trip.hypothesis.inner_test(pkt)

    check()


@FUZZ
@given(pkt=mrc_packets())
def test_mrc_round_trip(pkt):
    raw = w.encode_mrc(pkt)
    got = w.decode_mrc(raw)
    assert got.icrc == zlib.crc32(raw[:-4])
    assert raw[-4:] == struct.pack(">I", got.icrc)
    assert canonical(got) == pkt
    assert w.encode_mrc(got) == raw
    assert len(raw) == w.headers_size(pkt.bth.opcode, pkt.bth.ts_present) + len(pkt.payload) + 4


@FAST
@given(pkt=mrc_packets(), cut=st.data())
def test_mrc_every_truncation_raises_wire_error(pkt, cut):
    raw = w.encode_mrc(pkt)
    for n in range(len(raw)):
        with pytest.raises(WireError):
            w.decode_mrc(raw[:n])


@FAST
@given(pkt=mrc_packets(), data=st.data())
def test_mrc_any_bit_flip_is_detected(pkt, data):
    raw = bytearray(w.encode_mrc(pkt))
    bit = data.draw(st.integers(0, len(raw) * 8 - 1))
    raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(WireError):
        w.decode_mrc(raw)


def test_mrc_icrc_mismatch_names_the_icrc():
    raw = bytearray(
        w.encode_mrc(MrcPacket(BTH(Opcode.RPROBE, 5, 0), probe=ReliabilityProbe(1, 2, 3)))
    )
    raw[-1] ^= 0xFF
    with pytest.raises(WireError) as ei:
        w.decode_mrc(raw)
    assert ei.value.header == "ICRC" and "mismatch" in ei.value.reason
    assert ei.value.offset == len(raw) - 4


def test_mrc_payload_is_zero_copy():
    buf = bytearray(
        w.encode_mrc(MrcPacket(BTH(Opcode.WRITE_MIDDLE, 1, 2), meth=METH(0, 0), reth=RETH(0, 0, 8),
                               payload=b"abcdefgh"))
    )  # fmt: skip
    pkt = w.decode_mrc(buf)
    assert isinstance(pkt.payload, memoryview) and pkt.payload.obj is buf
    assert bytes(pkt.payload) == b"abcdefgh"


def test_mrc_unknown_opcode_raises_wire_error():
    known = {int(o) for o in Opcode}
    for op in range(256):
        if op in known:
            continue
        body = bytes([op]) + bytes(11) + bytes(40)
        with pytest.raises(WireError) as ei:
            w.decode_mrc(body + struct.pack(">I", zlib.crc32(body)))
        assert ei.value.header == "BTH" and "opcode" in ei.value.reason
        with pytest.raises(WireError):
            w.encode_mrc(MrcPacket(BTH(op, 1, 1), sack=SACK(0)))


def test_control_packet_with_trailing_bytes_is_rejected():
    body = w.encode_bth(BTH(Opcode.SACK, 1, 0)) + w.encode_sack(SACK(3)) + b"\0\0"
    with pytest.raises(WireError, match="trailing"):
        w.decode_mrc(body + struct.pack(">I", zlib.crc32(body)))


@pytest.mark.parametrize(
    "pkt",
    [
        MrcPacket(BTH(Opcode.WRITE_FIRST, 1, 1), meth=METH(0, 0)),  # no RETH
        MrcPacket(BTH(Opcode.WRITE_FIRST, 1, 1), reth=RETH(0, 0, 0)),  # no METH
        MrcPacket(BTH(Opcode.WRITE_FIRST, 1, 1, ts_present=True), meth=METH(0, 0),
                  reth=RETH(0, 0, 0)),  # TS flag without TS
        MrcPacket(BTH(Opcode.WRITE_FIRST, 1, 1), meth=METH(0, 0), ts=TimestampExt(1),
                  reth=RETH(0, 0, 0)),  # TS without flag
        MrcPacket(BTH(Opcode.WRITE_ONLY_IMM, 1, 1), meth=METH(0, 0), reth=RETH(0, 0, 0)),  # no imm
        MrcPacket(BTH(Opcode.WRITE_ONLY, 1, 1), meth=METH(0, 0), reth=RETH(0, 0, 0),
                  imm=ImmDt(1)),  # imm on a non-imm opcode
        MrcPacket(BTH(Opcode.WRITE_ONLY, 1, 1), meth=METH(0, 0), reth=RETH(0, 0, 0),
                  sack=SACK(0)),  # a body on a data packet
        MrcPacket(BTH(Opcode.SACK, 1, 1)),  # no body
        MrcPacket(BTH(Opcode.SACK, 1, 1), nack=NACK(1, 1)),  # wrong body
        MrcPacket(BTH(Opcode.SACK, 1, 1), sack=SACK(0), nack=NACK(1, 1)),  # two bodies
        MrcPacket(BTH(Opcode.SACK, 1, 1), sack=SACK(0), payload=b"x"),  # payload on control
        MrcPacket(BTH(Opcode.NACK, 1, 1), nack=NACK(1, 1), meth=METH(0, 0)),
        MrcPacket(BTH(Opcode.RC_WRITE_MIDDLE, 1, 1), reth=RETH(0, 0, 0)),  # RC RETH on MIDDLE
        MrcPacket(BTH(Opcode.RC_WRITE_FIRST, 1, 1)),  # RC FIRST without RETH
        MrcPacket(BTH(Opcode.RC_WRITE_ONLY, 1, 1), reth=RETH(0, 0, 0), meth=METH(0, 0)),
    ],
)  # fmt: skip
def test_encode_mrc_rejects_inconsistent_packets(pkt):
    with pytest.raises(WireError):
        w.encode_mrc(pkt)


# ---------------------------------------------------------------------------------------------
# Trimmed packets


@FAST
@given(pkt=mrc_packets(), extra=st.binary(max_size=16))
def test_trimmed_decode(pkt, extra):
    hdrs = w.encode_mrc(pkt, trimmed=True)
    assert len(hdrs) == w.headers_size(pkt.bth.opcode, pkt.bth.ts_present)
    assert w.encode_mrc(pkt).startswith(hdrs)
    want = dataclasses.replace(pkt, payload=b"", icrc=None)
    for raw in (hdrs, hdrs + extra):  # a switch may keep more than the headers
        got = w.decode_mrc(raw, trimmed=True)
        assert got == want and got.icrc is None and len(got.payload) == 0
    for n in range(len(hdrs)):
        with pytest.raises(WireError):
            w.decode_mrc(hdrs[:n], trimmed=True)


def test_smallest_legal_trim_of_a_data_packet():
    assert w.MRC_DATA_HEADERS_SIZE == 40
    assert w.headers_size(Opcode.WRITE_MIDDLE, True) == 40
    assert w.headers_size(Opcode.WRITE_LAST_IMM, True) == 44
    assert w.headers_size(Opcode.WRITE_MIDDLE, False) == 32
    assert w.headers_size(Opcode.SACK) == 52
    assert w.headers_size(Opcode.RC_WRITE_MIDDLE) == 12
    assert w.headers_size(Opcode.RC_WRITE_ONLY_IMM) == 32
    with pytest.raises(WireError):
        w.headers_size(0x42)


# ---------------------------------------------------------------------------------------------
# EV split, opcode helpers, SACK bitmap


@given(ev=uint(32))
def test_ev_split_round_trip(ev):
    port, flow = w.ev_to_udp_flow(ev)
    assert 0 <= port <= 0xFFFF and 0 <= flow <= 0xFFFF
    assert w.udp_flow_to_ev(port, flow) == ev


def test_ev_split_halves():
    assert w.ev_to_udp_flow(0x12345678) == (0x1234, 0x5678)
    assert w.udp_flow_to_ev(0x1234, 0xF5678) == 0x12345678  # top flow-label bits are not EV bits
    for bad in (-1, 1 << 32):
        with pytest.raises(WireError):
            w.ev_to_udp_flow(bad)
    with pytest.raises(WireError):
        w.udp_flow_to_ev(1 << 16, 0)
    with pytest.raises(WireError):
        w.udp_flow_to_ev(0, 1 << 20)


def test_opcode_helpers():
    data = {0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xCB}
    for op in range(256):
        assert w.is_data(op) == (op in data)
        assert w.is_rc_data(op) == (0x06 <= op <= 0x0B)
        assert w.has_imm(op) == (op in {0xC9, 0xCB, 0x09, 0x0B})
    assert w.has_reth(Opcode.WRITE_MIDDLE) and not w.has_reth(Opcode.RC_WRITE_MIDDLE)
    assert w.is_first(Opcode.WRITE_ONLY_IMM) and not w.is_first(Opcode.WRITE_LAST)
    assert w.is_last(Opcode.WRITE_LAST_IMM) and not w.is_last(Opcode.WRITE_MIDDLE)


def test_brief_sack_example():
    # PSNs 0-11 sent, 5 and 8 lost: cack_psn=4, bitmap from PSN 5 = 0 1 1 0 1 1 1
    received = [p for p in range(12) if p not in (5, 8)]
    cack = max(p for p in range(12) if all(q in received for q in range(p + 1)))
    assert cack == 4
    bitmap = w.sack_bitmap_of(cack, [p for p in received if p > cack])
    assert [(bitmap >> i) & 1 for i in range(7)] == [0, 1, 1, 0, 1, 1, 1]
    assert bitmap == 0b1110110
    pkt = MrcPacket(BTH(Opcode.SACK, 9, 0), sack=SACK(cack_psn=cack, bitmap=bitmap, ev=0xABCD))
    got = w.decode_mrc(w.encode_mrc(pkt)).sack
    assert got.cack_psn == 4 and got.bitmap_psns() == [6, 7, 9, 10, 11]
    lost = [p for p in range(cack + 1, 12) if p not in got.bitmap_psns()]
    assert lost == [5, 8]


@given(cack=uint(24), offset=uint(16), psns=st.sets(st.integers(0, 63), max_size=64))
def test_sack_bitmap_wraps_mod_2_24(cack, offset, psns):
    base = (cack + 1 + offset) & w.PSN_MASK
    abs_psns = {(base + i) & w.PSN_MASK for i in psns}
    bm = w.sack_bitmap_of(cack, abs_psns, offset)
    assert bm == sum(1 << i for i in psns)
    assert set(SACK(cack, offset, bm).bitmap_psns()) == abs_psns


# ---------------------------------------------------------------------------------------------
# Frames


def ref_udp6_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 8200 section 8.1 / RFC 1071, written independently of mrcnic.fast."""
    data = src + dst + struct.pack(">IxxxB", len(udp), 17) + udp
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s & 0xFFFF) or 0xFFFF


FIRST_HOP = bytes.fromhex("fcbbbb00000110012c0300000000000a")  # block:T0:T1:T0b:DL::
FINAL_DST = bytes.fromhex("fcbbbb000000000000000000000000a0")
SRC = bytes.fromhex("fcbbbb00aaaa00000000000000000001")


def frame_of(pkt: MrcPacket, *, ev=0x00070003, dscp=w.Dscp.TRIMMABLE, ecn=w.Ecn.ECT0, hop=64):
    return w.build_frame(
        eth_src=b"\x02\0\0\0\0\x01",
        eth_dst=b"\x02\0\0\0\0\x02",
        ip_src=SRC,
        ip_dst=FIRST_HOP,
        final_dst=FINAL_DST,
        ev=ev,
        mrc=w.encode_mrc(pkt),
        dscp=dscp,
        ecn=ecn,
        hop_limit=hop,
    )


@FAST
@given(pkt=mrc_packets(), ev=uint(32), dscp=uint(6), ecn=uint(2), hop=uint(8))
def test_frame_round_trip(pkt, ev, dscp, ecn, hop):
    assume(dscp not in (w.Dscp.TRIMMED, w.Dscp.TRIMMED_LASTHOP))
    raw = frame_of(pkt, ev=ev, dscp=dscp, ecn=ecn, hop=hop)
    f = w.parse_frame(raw)
    assert f.eth == Ethernet(b"\x02\0\0\0\0\x02", b"\x02\0\0\0\0\x01", w.ETHERTYPE_IPV6)
    mrc_len = len(w.encode_mrc(pkt))
    assert f.ip6 == IPv6(SRC, FIRST_HOP, 8 + mrc_len, 17, hop, dscp, ecn, ev & 0xFFFF)
    assert (f.udp.src_port, f.udp.dst_port, f.udp.length) == (ev >> 16, 4791, 8 + mrc_len)
    assert f.ev == ev and not f.trimmed
    assert canonical(f.mrc) == pkt
    assert bytes(f.raw) == raw
    # the checksum covers the final destination, not the first-hop one
    udp = bytearray(raw[w.OFF_UDP :])
    udp[6:8] = b"\0\0"
    assert f.udp.checksum == ref_udp6_checksum(SRC, FINAL_DST, bytes(udp))
    assert w.udp_checksum(SRC, FINAL_DST, udp) == f.udp.checksum
    assert w.verify_udp_checksum(f, FINAL_DST)
    headers = w.parse_frame(raw, headers_only=True)
    assert headers.mrc is None and headers.ip6 == f.ip6


def test_checksum_at_destination_after_the_shift():
    pkt = MrcPacket(BTH(Opcode.WRITE_ONLY, 1, 2), meth=METH(0, 0), reth=RETH(0, 1, 3),
                    payload=b"xyz")  # fmt: skip
    raw = bytearray(frame_of(pkt))
    assert not w.verify_udp_checksum(w.parse_frame(raw))  # in flight: dst is the first hop
    raw[w.OFF_IPV6 + 24 : w.OFF_IPV6 + 40] = FINAL_DST  # what the last switch delivers
    assert w.verify_udp_checksum(w.parse_frame(raw))


@FAST
@given(pkt=mrc_packets(), dscp=st.sampled_from([w.Dscp.TRIMMED, w.Dscp.TRIMMED_LASTHOP]))
def test_trimmed_frame_is_recognised_by_dscp(pkt, dscp):
    hdrs = w.encode_mrc(pkt, trimmed=True)
    raw = w.build_frame(eth_src=bytes(6), eth_dst=bytes(6), ip_src=SRC, ip_dst=FINAL_DST,
                        final_dst=FINAL_DST, ev=1, mrc=hdrs, dscp=dscp)  # fmt: skip
    f = w.parse_frame(raw)
    assert f.trimmed and f.mrc == dataclasses.replace(pkt, payload=b"", icrc=None)
    with pytest.raises(WireError):  # forced untrimmed: no ICRC to find
        w.parse_frame(raw, trimmed=False)


def test_parse_frame_ignores_ethernet_padding():
    pkt = MrcPacket(BTH(Opcode.ACK, 3, 0), sack=SACK(7))
    raw = frame_of(pkt) + bytes(10)
    assert canonical(w.parse_frame(raw).mrc) == pkt


def _frame_error(raw: bytes | bytearray) -> WireError:
    with pytest.raises(WireError) as ei:
        w.parse_frame(raw)
    return ei.value


def test_parse_frame_rejects_what_is_not_ours():
    raw = frame_of(MrcPacket(BTH(Opcode.ACK, 3, 0), sack=SACK(7)))
    bad = bytearray(raw)
    bad[12:14] = b"\x08\x00"
    assert _frame_error(bad).header == "Ethernet"
    bad = bytearray(raw)
    bad[14] = 0x40
    e = _frame_error(bad)
    assert e.header == "IPv6" and "version" in e.reason
    bad = bytearray(raw)
    bad[20] = 6  # TCP
    e = _frame_error(bad)
    assert e.header == "IPv6" and "UDP" in e.reason
    bad = bytearray(raw)
    bad[56:58] = b"\x00\x35"
    e = _frame_error(bad)
    assert e.header == "UDP" and "not MRC port" in e.reason
    bad = bytearray(raw)
    bad[18:20] = struct.pack(">H", len(raw) - 54 + 1)  # payload length that lies
    e = _frame_error(bad)
    assert e.header == "IPv6" and e.offset == 18
    bad = bytearray(raw)
    bad[58:60] = struct.pack(">H", len(raw) - 54 - 1)  # UDP length disagrees
    assert _frame_error(bad).header == "UDP"


def test_wire_error_message_names_header_offset_and_sizes():
    bth = w.encode_bth(BTH(Opcode.WRITE_ONLY, 1, 1))[:5]
    raw = w.build_frame(eth_src=bytes(6), eth_dst=bytes(6), ip_src=SRC, ip_dst=FINAL_DST,
                        final_dst=FINAL_DST, ev=0, mrc=bth, dscp=0)  # fmt: skip
    e = _frame_error(raw)
    assert str(e) == "BTH: truncated: need 12 bytes at offset 62, have 5"
    assert (e.header, e.offset) == ("BTH", 62)
    assert isinstance(e, ValueError)
    body_err = _frame_error(frame_of(MrcPacket(BTH(Opcode.SACK, 3, 0), sack=SACK(7)))[:-10])
    assert body_err.header == "IPv6"  # the cut frame's IPv6 payload length now lies


def test_error_offsets_are_frame_offsets():
    pkt = MrcPacket(BTH(Opcode.SACK, 3, 0), sack=SACK(7))
    raw = bytearray(frame_of(pkt, dscp=w.Dscp.CONTROL))
    raw[w.OFF_BTH + 12] |= 0xC0  # SACK mark 3, then fix the ICRC so the body is reached
    raw[-4:] = struct.pack(">I", zlib.crc32(raw[w.OFF_BTH : -4]))
    e = _frame_error(raw)
    assert (e.header, e.offset) == ("SACK", w.OFF_BTH + 12)
    raw[-1] ^= 1
    e = _frame_error(raw)
    assert (e.header, e.offset) == ("ICRC", len(raw) - 4)


@FAST
@given(pkt=mrc_packets())
def test_every_frame_prefix_raises_wire_error(pkt):
    raw = frame_of(pkt)
    for n in range(len(raw)):
        with pytest.raises(WireError):
            w.parse_frame(raw[:n])


def test_build_frame_validates():
    ok = dict(eth_src=bytes(6), eth_dst=bytes(6), ip_src=SRC, ip_dst=FINAL_DST,
              final_dst=FINAL_DST, ev=0, mrc=b"", dscp=0)  # fmt: skip
    w.build_frame(**ok)
    for key, bad in [("eth_src", bytes(5)), ("ip_dst", bytes(4)), ("final_dst", bytes(17)),
                     ("ev", 1 << 32), ("dscp", 64), ("ecn", 4), ("hop_limit", 256),
                     ("mrc", bytes(65535))]:  # fmt: skip
        with pytest.raises(WireError):
            w.build_frame(**{**ok, key: bad})


# ---------------------------------------------------------------------------------------------
# Fuzz: random input raises WireError or decodes, nothing else


@FUZZ
@given(raw=st.binary(max_size=160), trimmed=st.sampled_from([None, True, False]))
def test_fuzz_parse_frame(raw, trimmed):
    with contextlib.suppress(WireError):
        w.parse_frame(raw, trimmed=trimmed)


@FUZZ
@given(raw=st.binary(max_size=120), trimmed=st.booleans())
def test_fuzz_decode_mrc(raw, trimmed):
    with contextlib.suppress(WireError):
        w.decode_mrc(raw, trimmed=trimmed)


@FUZZ
@given(
    op=st.sampled_from(Opcode) | uint(8),
    rest=st.binary(max_size=100),
    trimmed=st.booleans(),
)
def test_fuzz_decode_mrc_past_the_icrc(op, rest, trimmed):
    # a valid ICRC gets random headers through to the body decoders
    body = bytes([op]) + rest
    try:
        pkt = w.decode_mrc(body + struct.pack(">I", zlib.crc32(body)), trimmed=trimmed)
    except WireError:
        return
    assert pkt.bth.opcode == op


@FUZZ
@given(
    head=st.sampled_from(
        [
            frame_of(MrcPacket(BTH(Opcode.SACK, 3, 0), sack=SACK(7)), dscp=w.Dscp.CONTROL),
            frame_of(MrcPacket(BTH(Opcode.WRITE_FIRST, 3, 0, ts_present=True), meth=METH(0, 0),
                               ts=TimestampExt(0), reth=RETH(0, 0, 0), payload=b"abcd")),
        ]
    ),
    data=st.data(),
)  # fmt: skip
def test_fuzz_mutated_frames(head, data):
    raw = bytearray(head)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(uint(8))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    with contextlib.suppress(WireError):
        w.parse_frame(raw)


data_opcodes = st.sampled_from([o for o in Opcode if w.is_data(o) or w.is_rc_data(o)])


@FAST
@given(pkt=data_opcodes.flatmap(mrc_packets), lasthop=st.booleans(), ecn=uint(2), ev=uint(32))
def test_trim_frame_is_the_headers_of_the_frame(pkt, lasthop, ecn, ev):
    frame = frame_of(pkt, ev=ev, ecn=ecn)
    trimmed = w.trim_frame(frame, final_dst=FINAL_DST, lasthop=lasthop)
    dscp = w.Dscp.TRIMMED_LASTHOP if lasthop else w.Dscp.TRIMMED
    assert trimmed == w.build_frame(
        eth_src=b"\x02\0\0\0\0\x01",
        eth_dst=b"\x02\0\0\0\0\x02",
        ip_src=SRC,
        ip_dst=FIRST_HOP,
        final_dst=FINAL_DST,
        ev=ev,
        mrc=w.encode_mrc(pkt, trimmed=True),
        dscp=dscp,
        ecn=ecn,
    )
    f = w.parse_frame(trimmed)
    assert f.trimmed and f.ip6.dscp == dscp and f.ip6.ecn == ecn and f.ev == ev
    assert f.mrc == dataclasses.replace(pkt, payload=b"", icrc=None)
    assert w.verify_udp_checksum(f, FINAL_DST)


def test_trim_frame_refuses_what_is_not_data():
    sack = frame_of(MrcPacket(BTH(Opcode.SACK, 3, 0), sack=SACK(7)), dscp=w.Dscp.CONTROL)
    with pytest.raises(WireError, match="only data"):
        w.trim_frame(sack, final_dst=FINAL_DST)
    data = frame_of(MrcPacket(BTH(Opcode.WRITE_FIRST, 1, 1), meth=METH(0, 0), reth=RETH(0, 0, 0)))
    for n in (0, w.OFF_BTH + 5, w.OFF_BTH + 20):
        with pytest.raises(WireError):
            w.trim_frame(data[:n], final_dst=FINAL_DST)
