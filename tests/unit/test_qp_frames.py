"""The QP's hot-path frame templates produce exactly what mrcnic.wire builds and parses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.transport.ev import EvConfig, EvInput
from mrcnic.transport.memory import MemoryTable
from mrcnic.transport.qp import QueuePair
from mrcnic.transport.qp_types import NetConfig, PortAddr, QpConfig, peek_dest_qp
from mrcnic.wire import usid

SHAPE = usid.ClosShape(planes=4, t0=2, t1=2, hosts_per_t0=2)


def pair(mtu: int = 512) -> tuple[QueuePair, QueuePair]:
    def net(h: int) -> NetConfig:
        return NetConfig(
            SHAPE,
            h,
            tuple(PortAddr(bytes((2, 1, 0, h, p, 1)), bytes((2, 1, 0, h, p, 2))) for p in range(4)),
        )

    cfg = QpConfig(mtu_bytes=mtu, ev=EvConfig(ev_count=8, backup_per_plane=1), base_rtt_s=1e-4)
    a = QueuePair(0x123, net(0), MemoryTable(1), 4e8, cfg)
    b = QueuePair(0x456, net(3), MemoryTable(2), 4e8, cfg)
    a.connect(b.local_attributes())
    b.connect(a.local_attributes())
    return a, b


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 2000), imm=st.none() | st.integers(0, 2**32 - 1), va=st.integers(0, 2**63)
)
def test_data_frames_match_wire(size, imm, va):
    a, b = pair()
    data = bytes(range(256)) * (size // 256 + 1)
    a.post_write(9, data[:size], va, 0xABCD1234, imm=imm)
    frames = a.frames_to_send(1.25)
    assert frames
    for k, (port, raw) in enumerate(frames):
        f = wire.parse_frame(raw)  # checks ICRC, lengths, IPv6, UDP port
        ev = f.ev
        assert port == ev % 4 == usid.ev_plane(SHAPE, ev)
        assert f.ip6.dst == usid.ev_address(SHAPE, 0, 3, ev)
        assert f.ip6.src == usid.host_address(SHAPE, 0, port)
        assert f.ip6.dscp == wire.Dscp.TRIMMABLE and f.ip6.ecn == wire.Ecn.ECT0
        assert f.eth.src == bytes((2, 1, 0, 0, port, 1)) and f.eth.dst == bytes(
            (2, 1, 0, 0, port, 2)
        )
        m = f.mrc
        assert m.bth.dest_qp == 0x456 and m.bth.ts_present and not m.bth.rtx
        assert m.reth.va == va + 512 * k and m.reth.length == size and m.reth.rkey == 0xABCD1234
        assert m.ts.tx_ts_ns == 1_250_000_000
        assert bytes(m.payload) == data[512 * k : min(size, 512 * (k + 1))]
        last = k == len(frames) - 1
        assert m.bth.ack_req == last
        assert (m.imm is not None and m.imm.imm == imm) == (last and imm is not None)
        assert peek_dest_qp(raw) == 0x456
        # the same headers through wire.build_frame give the same bytes (UDP checksum included)
        rebuilt = wire.build_frame(
            eth_src=f.eth.src,
            eth_dst=f.eth.dst,
            ip_src=f.ip6.src,
            ip_dst=f.ip6.dst,
            final_dst=usid.final_address(SHAPE, 3, port),
            ev=ev,
            mrc=wire.encode_mrc(m),
            dscp=f.ip6.dscp,
            ecn=f.ip6.ecn,
        )
        assert rebuilt == raw


def test_control_frames_match_wire():
    a, b = pair()
    mr = b.memory.register(bytearray(4096))
    a.post_write(1, b"x" * 1500, mr.base_va, mr.rkey)
    frames = a.frames_to_send(0.0)
    b.receive_frame(frames[-1][1], 1e-4)  # the last packet asks for an ACK
    out = b.frames_to_send(1e-4)
    assert len(out) == 1
    port, raw = out[0]
    f = wire.parse_frame(raw)
    assert f.ip6.dscp == wire.Dscp.CONTROL and f.mrc.bth.opcode == wire.Opcode.SACK
    assert f.ev in b.evs.reverse and port == f.ev % 4
    s = f.mrc.sack
    assert s.cack_psn == (a.start_psn - 1) & 0xFFFFFF and s.bitmap & 0b100
    # a clock at 0 is sent as 1 ns: 0 would mean "no timestamp" (no RTT sample) in the SACK
    assert s.reflected_ts_ns == 1 and s.ev == wire.parse_frame(frames[-1][1]).ev
    rebuilt = wire.build_frame(
        eth_src=f.eth.src,
        eth_dst=f.eth.dst,
        ip_src=f.ip6.src,
        ip_dst=f.ip6.dst,
        final_dst=usid.final_address(SHAPE, 0, port),
        ev=f.ev,
        mrc=wire.encode_mrc(f.mrc),
        dscp=wire.Dscp.CONTROL,
    )
    assert rebuilt == raw


def _rebuilt(raw: bytes, final_host: int) -> bytes:
    """The frame as wire.build_frame makes it from its own parsed headers."""
    f = wire.parse_frame(raw)
    return wire.build_frame(
        eth_src=f.eth.src,
        eth_dst=f.eth.dst,
        ip_src=f.ip6.src,
        ip_dst=f.ip6.dst,
        final_dst=usid.final_address(SHAPE, final_host, f.ev % 4),
        ev=f.ev,
        mrc=wire.encode_mrc(f.mrc),
        dscp=f.ip6.dscp,
        ecn=f.ip6.ecn,
    )


@settings(max_examples=25, deadline=None)
@given(mtu=st.integers(1, 700), size=st.integers(0, 1500), imm=st.none() | st.integers(0, 9))
def test_odd_mtus_and_retransmissions_match_wire(mtu, size, imm):
    """Any MTU (odd payloads in the middle of a message too) and the retransmission path
    (DSCP TRIMMABLE_RETX, the rtx bit, a later timestamp) build the bytes wire builds."""
    a, _b = pair(mtu)
    data = bytes((i * 7) & 0xFF for i in range(size))
    a.post_write(3, data, 0x1000, 0x55, imm=imm)
    frames = a.frames_to_send(0.5)
    assert len(frames) == max(1, -(-size // mtu))
    for _, raw in frames:
        assert _rebuilt(raw, 3) == raw
    # every packet times out: the retransmissions go out from the retransmit queue
    t = a.get_timer()
    a.handle_timer(t)
    again = [(p, raw) for p, raw in a.frames_to_send(t) if wire.is_data(raw[62])]  # not probes
    assert len(again) == len(frames)
    for (_, first), (_, raw) in zip(frames, again, strict=True):
        f, g = wire.parse_frame(first), wire.parse_frame(raw)
        assert g.ip6.dscp == wire.Dscp.TRIMMABLE_RETX and g.mrc.bth.rtx
        assert g.mrc.bth.psn == f.mrc.bth.psn and bytes(g.mrc.payload) == bytes(f.mrc.payload)
        assert g.mrc.ts.tx_ts_ns == int(t * 1e9)
        assert _rebuilt(raw, 3) == raw


def test_nack_and_probe_frames_match_wire():
    a, b = pair()
    a.post_write(1, b"y" * 700, 0x10, 0xBAD)  # no such R_Key at b: REMOTE_ACCESS_ERROR
    for _, raw in a.frames_to_send(0.0):
        b.receive_frame(raw, 1e-4)
    out = b.frames_to_send(1e-4)
    assert out
    for _, raw in out:
        f = wire.parse_frame(raw)
        assert f.mrc.bth.opcode == wire.Opcode.NACK
        assert f.mrc.nack.reason == wire.NackReason.REMOTE_ACCESS_ERROR
        assert _rebuilt(raw, 0) == raw
    assert b.state.name == "ERROR"  # a responder that refused a write takes no more frames
    a, b = pair()
    slot = a.evs.active[0]
    a.evs.apply(slot, EvInput.TIMEOUT, 0.0)  # a dead path: probes follow
    a.handle_timer(1e-3)  # the ASSUMED_BAD EV is probed at once
    probes = [raw for _, raw in a.frames_to_send(1e-3) if raw[62] == wire.Opcode.RPROBE]
    assert probes
    for raw in probes:
        assert _rebuilt(raw, 3) == raw
    b.receive_frame(probes[0], 2e-3)  # the answer: an ACK (0xD1) with the SACK body
    answers = b.frames_to_send(2e-3)
    assert [wire.parse_frame(r).mrc.bth.opcode for _, r in answers] == [wire.Opcode.ACK]
    assert _rebuilt(answers[0][1], 0) == answers[0][1]
