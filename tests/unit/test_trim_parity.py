"""One trim rule (mrcnic.wire.trim), three places that trim: the same frames, each arriving at
a port whose data queue is full, get the same fate everywhere: which are trimmed, the bytes
of every trimmed header, which are dropped, which pass at high priority as they came, and the
counters. The places: the rule itself (``TrimRule.overflow``), the switch's queues
(``mrcswitch.queue.EgressQueue``, its Python twin, and csrc/mrc_equeue.c through
``mrcswitch.cqueue``) and the simulator's fabric link (``mrcnic.sim.fabric.Link``)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.sim.fabric import Link, LinkSpec
from mrcnic.wire import (
    BTH,
    METH,
    RETH,
    Dscp,
    Ecn,
    ImmDt,
    MrcPacket,
    Opcode,
    TimestampExt,
    layout,
    usid,
)
from mrcnic.wire.trim import TrimRule
from mrcswitch import cqueue
from mrcswitch.config import PortConfig
from mrcswitch.queue import EgressQueue, Verdict

pytestmark = pytest.mark.skipif(cqueue.BACKEND != "c", reason="C module mrc_equeue not built")

SRC = bytes.fromhex("fcbbbb00100130000000000000000001")
MAC = bytes(6)
BUFFER = 3000  # the data class (switch) / queue (simulator), filled before the frames come
MAX_FRAME = 4096
DATA_OPS = sorted(layout.MRC_DATA_OPS)
RC_OPS = sorted(layout.RC_DATA_OPS)

# what becomes of one frame: ("trim", header bytes), ("drop", b""), ("high", frame as it came)
Fate = tuple[str, bytes]


def set_tc(f: bytearray, dscp: int, ecn: int) -> None:
    f[layout.OFF_TC_HI] = 0x60 | dscp >> 2
    f[layout.OFF_TC_LO] = (dscp & 3) << 6 | ecn << 4 | (f[layout.OFF_TC_LO] & 0x0F)


def mrc_frame(op: int, ts: bool, payload_len: int, dscp: int, ecn: int, usids) -> bytearray:
    dst = usid.encode(list(usids))
    pkt = MrcPacket(
        bth=BTH(opcode=op, dest_qp=7, psn=42, ts_present=ts),
        meth=METH(msn=1, rqmsn=0),
        ts=TimestampExt(tx_ts_ns=123) if ts else None,
        reth=RETH(va=0x1000, rkey=5, length=payload_len),
        imm=ImmDt(imm=0xABCD) if wire.has_imm(op) else None,
        payload=bytes(range(256)) * (payload_len // 256) + bytes(payload_len % 256),
    )
    f = wire.build_frame(eth_src=MAC, eth_dst=MAC, ip_src=SRC, ip_dst=dst,
                         final_dst=usid.final_of(dst), ev=0x12345678, mrc=wire.encode_mrc(pkt),
                         dscp=dscp, ecn=ecn)  # fmt: skip
    return bytearray(f)


def build(spec) -> bytes:
    """A frame from its spec: a complete MRC data frame, or one spoilt in a way that decides
    whether it may be trimmed (the opcode, the UDP port, the next header, the length)."""
    dscp, ecn, op, ts, payload_len, usids, spoil, arg = spec
    f = mrc_frame(op, ts, payload_len, dscp, ecn, usids)
    if spoil == "rc_opcode":  # a RoCEv2 RC write: the codec could cut it, a switch must not
        f[layout.OFF_BTH] = RC_OPS[arg % len(RC_OPS)]
    elif spoil == "other_opcode":  # SACK, NACK, probes, ...: not data
        f[layout.OFF_BTH] = arg % 256
    elif spoil == "udp_port":
        f[layout.OFF_UDP_DST_PORT + 1] ^= 1 + arg % 255
    elif spoil == "next_header":
        f[layout.OFF_NEXT_HEADER] = layout.IPPROTO_UDP ^ (1 + arg % 255)
    elif spoil == "cut":  # headers incomplete (or just complete)
        f = f[: max(16, layout.OFF_BTH + arg % 60)]
    elif spoil == "byte":  # anything may arrive
        f[arg % len(f)] = (arg >> 8) % 256
        set_tc(f, dscp, ecn)
    return bytes(f)


DSCPS = st.sampled_from([*Dscp, Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX, Dscp.TRIMMABLE, 1, 63])
SPOIL = st.sampled_from(
    ["none", "none", "none", "rc_opcode", "other_opcode", "udp_port", "next_header", "cut", "byte"]
)
frame_spec = st.tuples(DSCPS, st.sampled_from(list(Ecn)), st.sampled_from(DATA_OPS), st.booleans(),
                       st.integers(0, 1500), st.lists(st.integers(1, 0xFFFF), min_size=1,
                                                      max_size=6), SPOIL,
                       st.integers(0, 2**16))  # fmt: skip


def filler() -> bytes:
    """Exactly BUFFER bytes of untrimmable data: the queue is then full for any frame."""
    f = bytearray(BUFFER)
    f[12:14] = b"\x86\xdd"
    set_tc(f, Dscp.NO_TRIM, Ecn.NOT_ECT)
    return bytes(f)


def by_rule(frames: list[bytes], rule: TrimRule) -> tuple[list[Fate], int, int]:
    """The rule applied to each frame (a full queue: every data frame overflows)."""
    fates: list[Fate] = []
    for f in frames:
        if layout.frame_dscp(f) in layout.HIGH_PRIORITY_DSCPS:
            fates.append(("high", f))
            continue
        t = rule.overflow(f)
        fates.append(("drop", b"") if t is None else ("trim", t))
    return fates, sum(x[0] == "trim" for x in fates), sum(x[0] == "drop" for x in fates)


def by_switch(q: EgressQueue | cqueue.CEgressQueue, frames: list[bytes]):
    assert q.enqueue(bytearray(filler()), 0) is Verdict.QUEUED and q.data_bytes == BUFFER
    verdicts = [q.enqueue(bytearray(f), 0) for f in frames]
    out = [bytes(x) for x in q.dequeue(10**15, len(frames) + 1)]
    assert out[-1] == filler()  # the high class (in arrival order) first, then the filler
    high = iter(out[:-1])
    fates: list[Fate] = []
    for v in verdicts:
        if v is Verdict.TRIMMED:
            fates.append(("trim", next(high)))
        elif v is Verdict.HIGH:
            fates.append(("high", next(high)))
        else:
            assert v is Verdict.DROPPED  # nothing fits, so nothing is queued as data
            fates.append(("drop", b""))
    assert next(high, None) is None
    return fates, q.trims, verdicts.count(Verdict.DROPPED)


def by_sim(frames: list[bytes], last_hop: bool, trim: bool):
    link = Link("l", LinkSpec(rate_bps=8e6, queue_bytes=BUFFER, ecn_bytes=0, trim=trim,
                              last_hop=last_hop))  # fmt: skip
    rng = random.Random(1)
    assert link.transmit(0.0, filler(), rng) is not None
    fates: list[Fate] = []
    for f in frames:
        r = link.transmit(0.0, f, rng)
        if r is None:
            fates.append(("drop", b""))
        else:
            kind = "high" if layout.frame_dscp(f) in layout.HIGH_PRIORITY_DSCPS else "trim"
            fates.append((kind, r[1]))
    assert link.marks == 0  # an overflowing frame is never marked
    return fates, link.trims, link.drops


def port_cfg(**kw) -> PortConfig:
    p = dict(name="p", interface="v0", peer="", peer_mac=MAC, mac=None, rate_bps=8_000_000,
             buffer_bytes=BUFFER, high_buffer_bytes=10**7, burst_bytes=10**8, ecn=True,
             ecn_threshold_bytes=0, trimming=True, last_hop=False, trim_bytes=0)  # fmt: skip
    p.update(kw)
    return PortConfig(**p)


@settings(max_examples=200, deadline=None)
@given(st.lists(frame_spec, min_size=1, max_size=25), st.booleans(), st.booleans())
def test_the_rule_the_switch_queues_and_the_simulator_trim_alike(specs, last_hop, trim):
    frames = [build(s) for s in specs]
    want = by_rule(frames, TrimRule(trim, last_hop))
    cfg = port_cfg(trimming=trim, last_hop=last_hop)
    assert by_switch(cqueue.CEgressQueue(cfg, 32, 0, max_frame_bytes=MAX_FRAME), frames) == want
    assert by_switch(EgressQueue(cfg, 32, 0), frames) == want
    assert by_sim(frames, last_hop, trim) == want


@settings(max_examples=150, deadline=None)
@given(st.lists(frame_spec, min_size=1, max_size=15), st.booleans(),
       st.sampled_from([0, 94, 102, 120, 300, 5000]),
       st.sampled_from([16, 32, 48, 64, 80, 96, 112]))  # fmt: skip
def test_the_c_queue_keeps_and_shifts_as_the_rule(specs, last_hop, keep_bytes, lblen):
    """What the simulator does not vary: bytes kept (trim_bytes) and the locator block."""
    frames = [build(s) for s in specs]
    want = by_rule(frames, TrimRule(True, last_hop, keep_bytes, lblen))
    cfg = port_cfg(last_hop=last_hop, trim_bytes=keep_bytes)
    c = cqueue.CEgressQueue(cfg, lblen, 0, max_frame_bytes=MAX_FRAME)
    assert by_switch(c, frames) == want
    assert by_switch(EgressQueue(cfg, lblen, 0), frames) == want


def test_the_known_cases():
    """Pinned: what a switch trims and what it does not, in all three places."""
    ok = mrc_frame(Opcode.WRITE_ONLY_IMM, True, 800, Dscp.TRIMMABLE, Ecn.ECT0, (0x2001, 3))
    specs = [
        (Dscp.TRIMMABLE, Ecn.ECT0, Opcode.WRITE_MIDDLE, True, 1000, (0x2001, 0x1002, 3), "none", 0),
        (Dscp.TRIMMABLE_RETX, Ecn.CE, Opcode.WRITE_LAST_IMM, False, 10, (5,), "none", 0),
        (Dscp.NO_TRIM, Ecn.ECT0, Opcode.WRITE_ONLY, True, 500, (7,), "none", 0),
        (Dscp.TRIMMABLE, Ecn.ECT0, Opcode.WRITE_ONLY, True, 500, (7,), "rc_opcode", 4),
        (Dscp.TRIMMABLE, Ecn.ECT0, Opcode.WRITE_ONLY, True, 500, (7,), "udp_port", 0),
        (Dscp.TRIMMABLE, Ecn.ECT0, Opcode.WRITE_ONLY, True, 0, (7,), "cut", 30),  # 92 < 102 bytes
        (Dscp.CONTROL, Ecn.ECT0, Opcode.WRITE_ONLY, True, 500, (7,), "none", 0),
    ]  # fmt: skip
    frames = [build(s) for s in specs] + [bytes(ok)]
    for last_hop in (False, True):
        want = by_rule(frames, TrimRule(True, last_hop))
        assert [k for k, _ in want[0]] == [
            "trim", "trim", "drop", "drop", "drop", "drop", "high", "trim",
        ]  # fmt: skip
        assert want[1:] == (3, 4)
        header = want[0][7][1]
        assert header == wire.trim_frame(ok, lasthop=last_hop) and len(header) == 62 + 44
        dscp = Dscp.TRIMMED_LASTHOP if last_hop else Dscp.TRIMMED
        assert layout.frame_dscp(header) == dscp and layout.frame_ecn(header) == Ecn.ECT0
        cfg = port_cfg(last_hop=last_hop)
        assert by_switch(cqueue.CEgressQueue(cfg, 32, 0, max_frame_bytes=MAX_FRAME), frames) == (
            want
        )
        assert by_switch(EgressQueue(cfg, 32, 0), frames) == want
        assert by_sim(frames, last_hop, True) == want
