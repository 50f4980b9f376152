"""One source for wire facts: csrc/mrc_wire.h and the modules that once wrote their own
offsets, opcode sets and DSCP/ECN bits agree with mrcnic.wire.layout, and the simulator,
the switch and the codec trim (and shift uSIDs) the same way."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import wire
from mrcnic.rocev2 import qp as roce_qp
from mrcnic.sim import fabric
from mrcnic.transport import frames as mrc_qp
from mrcnic.wire import BTH, METH, RETH, ImmDt, MrcPacket, Opcode, TimestampExt, layout, trim, usid
from mrcnic.wire import rocev2 as roce_wire
from mrcnic.wire.layout import Dscp, Ecn
from mrcswitch import config as sw_config
from mrcswitch import pipeline, queue
from mrcswitch.table import build_table

ROOT = Path(__file__).resolve().parents[2]

try:
    from mrcnic._mrcfast import lib as _lib
except ImportError:  # pragma: no cover (the C module is built by make setup)
    _lib = None
needs_c = pytest.mark.skipif(_lib is None, reason="the C module mrcnic._mrcfast is not built")

# Every constant of csrc/mrc_wire.h and the Python value it must equal: MRC_WIRE_<NAME> is
# layout.<NAME>, MRC_WIRE_DSCP_/ECN_/OP_<M> the member M of layout.Dscp/Ecn/Opcode.
C_FACTS: dict[str, int] = {
    "MRC_WIRE_LAYOUT_VERSION": layout.LAYOUT_VERSION,
    "MRC_WIRE_ETH_SIZE": layout.ETH_SIZE,
    "MRC_WIRE_IPV6_SIZE": layout.IPV6_SIZE,
    "MRC_WIRE_UDP_SIZE": layout.UDP_SIZE,
    "MRC_WIRE_BTH_SIZE": layout.BTH_SIZE,
    "MRC_WIRE_METH_SIZE": layout.METH_SIZE,
    "MRC_WIRE_TS_SIZE": layout.TS_SIZE,
    "MRC_WIRE_RETH_SIZE": layout.RETH_SIZE,
    "MRC_WIRE_IMM_SIZE": layout.IMM_SIZE,
    "MRC_WIRE_ICRC_SIZE": layout.ICRC_SIZE,
    "MRC_WIRE_IPV6_ADDR_SIZE": layout.IPV6_ADDR_SIZE,
    "MRC_WIRE_USID_SIZE": layout.USID_SIZE,
    "MRC_WIRE_ETHERTYPE_IPV6": layout.ETHERTYPE_IPV6,
    "MRC_WIRE_IPV6_VERSION": layout.IPV6_VERSION,
    "MRC_WIRE_IPPROTO_UDP": layout.IPPROTO_UDP,
    "MRC_WIRE_MRC_UDP_PORT": layout.MRC_UDP_PORT,
    "MRC_WIRE_OFF_ETHERTYPE": layout.OFF_ETHERTYPE,
    "MRC_WIRE_OFF_IPV6": layout.OFF_IPV6,
    "MRC_WIRE_OFF_TC_HI": layout.OFF_TC_HI,
    "MRC_WIRE_OFF_TC_LO": layout.OFF_TC_LO,
    "MRC_WIRE_OFF_PAYLOAD_LENGTH": layout.OFF_PAYLOAD_LENGTH,
    "MRC_WIRE_OFF_NEXT_HEADER": layout.OFF_NEXT_HEADER,
    "MRC_WIRE_OFF_HOP_LIMIT": layout.OFF_HOP_LIMIT,
    "MRC_WIRE_OFF_SRC": layout.OFF_SRC,
    "MRC_WIRE_OFF_DST": layout.OFF_DST,
    "MRC_WIRE_OFF_UDP": layout.OFF_UDP,
    "MRC_WIRE_OFF_UDP_DST_PORT": layout.OFF_UDP_DST_PORT,
    "MRC_WIRE_OFF_UDP_LENGTH": layout.OFF_UDP_LENGTH,
    "MRC_WIRE_OFF_UDP_CHECKSUM": layout.OFF_UDP_CHECKSUM,
    "MRC_WIRE_OFF_BTH": layout.OFF_BTH,
    "MRC_WIRE_OFF_BTH_FLAGS": layout.OFF_BTH_FLAGS,
    "MRC_WIRE_BTH_FLAG_TS": layout.BTH_FLAG_TS,
    "MRC_WIRE_BTH_FLAG_RTX": layout.BTH_FLAG_RTX,
    "MRC_WIRE_BTH_ACKREQ": layout.BTH_ACKREQ - (1 << 32),  # an int enum in C: the same bits
    "MRC_WIRE_OP_ACK": Opcode.ACK,
    "MRC_WIRE_OP_SACK": Opcode.SACK,
    "MRC_WIRE_OP_NACK": Opcode.NACK,
    **{
        f"MRC_WIRE_NACK_{r.name}": int(r)
        for r in layout.NackReason
        if r.name
        in ("TRIMMED", "TRIMMED_LASTHOP", "PSN_OOR_WINDOW", "UNEXP_EVENT", "REMOTE_ACCESS_ERROR")
    },
    "MRC_WIRE_SACK_MARK_SKIP_ONCE": int(layout.SackMark.SKIP_ONCE),
    "MRC_WIRE_SACK_MARK_ALWAYS_SKIP": int(layout.SackMark.ALWAYS_SKIP),
    "MRC_WIRE_TC_HI_DSCP_MASK": layout.TC_HI_DSCP_MASK,
    "MRC_WIRE_TC_LO_DSCP_MASK": layout.TC_LO_DSCP_MASK,
    "MRC_WIRE_TC_LO_ECN_MASK": layout.TC_LO_ECN_MASK,
    "MRC_WIRE_TC_LO_ECN_SHIFT": layout.TC_LO_ECN_SHIFT,
    **{f"MRC_WIRE_DSCP_{m.name}": int(m) for m in Dscp},
    **{f"MRC_WIRE_ECN_{m.name}": int(m) for m in Ecn},
    "MRC_WIRE_OP_WRITE_FIRST": Opcode.WRITE_FIRST,
    "MRC_WIRE_OP_WRITE_MIDDLE": Opcode.WRITE_MIDDLE,
    "MRC_WIRE_OP_WRITE_LAST": Opcode.WRITE_LAST,
    "MRC_WIRE_OP_WRITE_LAST_IMM": Opcode.WRITE_LAST_IMM,
    "MRC_WIRE_OP_WRITE_ONLY_IMM": Opcode.WRITE_ONLY_IMM,
    **{
        f"MRC_WIRE_OP_{m.name}": int(m)
        for m in Opcode
        if m.name.startswith("RC_WRITE_") or m.name == "RC_ACK"
    },
    "MRC_WIRE_DEFAULT_PKEY": layout.DEFAULT_PKEY,
    "MRC_WIRE_BTH_FLAG_BECN": layout.BTH_FLAG_BECN,
}


@needs_c
def test_every_c_wire_fact_is_the_layout_value():
    in_c = {n for n in dir(_lib) if n.startswith("MRC_WIRE_")}
    assert in_c == set(C_FACTS), "csrc/mrc_wire.h and this test's C_FACTS list differ"
    wrong = {n: (getattr(_lib, n), int(v)) for n, v in C_FACTS.items() if getattr(_lib, n) != v}
    assert not wrong, f"C value != Python value: {wrong}"
    assert _lib.mrc_wire_layout_version() == layout.LAYOUT_VERSION  # the build is not stale


# Wire facts other C headers still keep a copy of (their own enums), held to the same values.
C_COPIES: dict[str, int] = {
    "MRC_FWD_HDR_LEN": layout.OFF_UDP,  # csrc/mrc_fwd.h: Ethernet + IPv6 headers
    "MRC_FWD_OFF_PLEN": layout.OFF_PAYLOAD_LENGTH,
    "MRC_FWD_OFF_HOP": layout.OFF_HOP_LIMIT,
    "MRC_FWD_OFF_DST": layout.OFF_DST,
    # csrc/mrc_roce.h: the RoCEv2 facts of mrcnic.wire.rocev2
    "MRC_ROCE_OP_CNP": roce_wire.OP_CNP,
    "MRC_ROCE_CNP_RESERVED_SIZE": roce_wire.CNP_RESERVED_SIZE,
    "MRC_ROCE_SYN_ACK": roce_wire.SYN_ACK,
    "MRC_ROCE_SYN_NAK_PSN_SEQ": roce_wire.SYN_NAK_PSN_SEQ,
    "MRC_ROCE_SYN_NAK_INVALID_REQUEST": roce_wire.SYN_NAK_INVALID_REQUEST,
    "MRC_ROCE_SYN_NAK_REMOTE_ACCESS": roce_wire.SYN_NAK_REMOTE_ACCESS,
}


@needs_c
def test_the_copies_in_other_c_headers_are_the_layout_values():
    assert {n: getattr(_lib, n) for n in C_COPIES} == C_COPIES


def test_the_sets_c_derives_from_its_constants_are_the_layout_sets():
    # mrc_equeue.c: data = WRITE_FIRST..WRITE_ONLY_IMM, ImmDt on WRITE_LAST_IMM/WRITE_ONLY_IMM
    assert set(range(Opcode.WRITE_FIRST, Opcode.WRITE_ONLY_IMM + 1)) == layout.MRC_DATA_OPS
    assert {Opcode.WRITE_LAST_IMM, Opcode.WRITE_ONLY_IMM} == layout.MRC_IMM_OPS
    assert {Dscp.CONTROL, Dscp.TRIMMED, Dscp.TRIMMED_LASTHOP} == layout.HIGH_PRIORITY_DSCPS
    assert {Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX} == layout.TRIMMABLE_DSCPS
    assert {Ecn.ECT0, Ecn.ECT1} == layout.ECN_CAPABLE
    assert 8 * layout.USID_SIZE == usid.DEFAULT_FORMAT.nflen == sw_config.USID_BITS


def test_layout_offsets_add_up():
    assert layout.OFF_UDP == layout.ETH_SIZE + layout.IPV6_SIZE == layout.OFF_DST + 16
    assert layout.OFF_BTH == layout.FRAME_HEADERS_SIZE
    assert sw_config.MIN_TRIM_BYTES == layout.OFF_BTH + layout.MRC_DATA_HEADERS_SIZE == 102


def test_the_hot_paths_take_their_facts_from_layout():
    """The module-level aliases are the layout's own objects, not copies typed again."""
    assert mrc_qp.IMM_OPS is layout.MRC_IMM_OPS
    assert mrc_qp.DSCPS_TRIMMED is layout.TRIMMED_DSCPS
    assert (mrc_qp.OFF_UDP, mrc_qp.OFF_UCSUM, mrc_qp.OFF_BTH) == (
        layout.OFF_UDP, layout.OFF_UDP_CHECKSUM, layout.OFF_BTH,
    )  # fmt: skip
    assert (mrc_qp.TS_BIT, mrc_qp.RTX_BIT, mrc_qp.ACKREQ) == (
        layout.BTH_FLAG_TS, layout.BTH_FLAG_RTX, layout.BTH_ACKREQ,
    )  # fmt: skip
    assert roce_qp._IMM_OPS is layout.RC_IMM_OPS and roce_qp._RETH_OPS is layout.RC_RETH_OPS
    assert roce_qp._LAST_OPS is layout.RC_LAST_OPS
    assert fabric._DSCP_HIGH is queue._HIGH_DSCP is layout.HIGH_PRIORITY_DSCPS
    assert trim._TRIMMABLE_DSCPS is layout.TRIMMABLE_DSCPS
    assert trim._DATA_OPCODES is layout.MRC_DATA_OPS and trim._IMM_OPCODES is layout.MRC_IMM_OPS
    assert (pipeline.OFF_HOP, pipeline.OFF_DST, pipeline.OFF_L4) == (
        layout.OFF_HOP_LIMIT, layout.OFF_DST, layout.OFF_UDP,
    )  # fmt: skip


# Module-level names in the hot paths that hold wire facts: none may be a bare number again.
_FACT_NAME = re.compile(
    r"^_?(OFF|DSCP|OP|RC|ECN|TS_BIT|TS_FLAG|RTX_BIT|ACKREQ|IMM_OP|LAST_OPS|RETH_OPS|PREFIX|TRIM_KEEP|"
    r"HIGH_DSCP|TRIMMABLE_DSCP|DATA_OPCODES|ETH_LEN|IPV6_LEN)"
)
_FACT_MODULES = (
    "mrcnic/transport/frames.py",
    "mrcnic/rocev2/qp.py",
    "mrcnic/sim/fabric.py",
    "mrcswitch/queue.py",
    "mrcswitch/pipeline.py",
    "mrcnic/wire/trim.py",
)


@pytest.mark.parametrize("path", _FACT_MODULES)
def test_no_wire_fact_is_a_literal_again(path):
    tree = ast.parse((ROOT / path).read_text())
    bad = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        names = [
            t.id
            for target in node.targets
            for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            if isinstance(t, ast.Name)
        ]
        if not any(_FACT_NAME.match(n) for n in names):
            continue
        literals = [
            c.value
            for c in ast.walk(node.value)
            if isinstance(c, ast.Constant) and type(c.value) is int
        ]
        if literals:
            bad.append(f"line {node.lineno}: {', '.join(names)} = ... {literals}")
    assert not bad, f"{path} writes wire facts as numbers (use mrcnic.wire.layout): {bad}"


# -- one trim ---------------------------------------------------------------------------------

SRC = bytes.fromhex("fcbbbb00 3400 3c00 0000 0000 0000 0000")
DATA_OPS = [o for o in Opcode if wire.is_data(o)]


def data_frame(op: int, usids: list[int], payload: bytes, ecn: int) -> bytes:
    dst = usid.encode(usids)
    pkt = MrcPacket(
        BTH(op, dest_qp=7, psn=42, ts_present=True),  # the QP always sends a timestamp
        meth=METH(1, 0),
        ts=TimestampExt(123),
        reth=RETH(0x1000, 5, len(payload)),
        imm=ImmDt(0xABCD) if wire.has_imm(op) else None,
        payload=payload,
    )
    return wire.build_frame(eth_src=b"\x02" * 6, eth_dst=b"\x04" * 6, ip_src=SRC, ip_dst=dst,
                            final_dst=usid.final_of(dst), ev=0x12345678,
                            mrc=wire.encode_mrc(pkt), dscp=Dscp.TRIMMABLE, ecn=ecn)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(DATA_OPS),
    st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=6),
    st.binary(max_size=300),
    st.sampled_from(list(Ecn)),
    st.booleans(),
)
def test_the_trim_rule_and_the_codec_trim_the_same_bytes(op, usids, payload, ecn, last_hop):
    f = data_frame(op, usids, payload, ecn)
    rule = trim.TrimRule(last_hop=last_hop).overflow(bytearray(f))
    final = usid.final_of(usid.encode(usids))
    codec = wire.trim_frame(f, final_dst=final, lasthop=last_hop)
    assert rule == codec
    t = wire.parse_frame(codec)
    assert t.trimmed and t.ip6.ecn == ecn and wire.verify_udp_checksum(t, final)
    assert t.ip6.dscp == (Dscp.TRIMMED_LASTHOP if last_hop else Dscp.TRIMMED)


def test_trim_keeps_what_the_switch_asks_for():
    f = data_frame(Opcode.WRITE_MIDDLE, [0x2001, 0x1002, 3], bytes(500), Ecn.ECT0)
    for keep, want in ((0, 102), (101, 102), (200, 200), (10_000, len(f))):
        t = wire.trim_frame(f, keep=keep)
        assert len(t) == want and t == trim.trim(f, keep_bytes=keep)
        assert (t[18] << 8 | t[19]) == want - layout.OFF_UDP


# -- one uSID shift ---------------------------------------------------------------------------


def test_every_shift_is_the_one_shift():
    a = usid.encode([0x1100, 0x3001, 0x3002, 4, 5])
    v = int.from_bytes(a, "big")
    one = usid.shifter(32, 16)
    assert one.shift(v).to_bytes(16, "big") == usid.shift(a) == usid.encode([0x3001, 0x3002, 4, 5])
    assert one.final(v).to_bytes(16, "big") == usid.final_of(a) == usid.encode([5])
    assert usid.final_destination(a, 32) == usid.encode([5])
    cfg = sw_config.config_from_dict(
        {
            "name": "t",
            "own_usids": ["1100"],
            "ports": [{"name": "a", "interface": "v0", "peer_mac": "02:00:00:00:00:01",
                       "rate_mbit": 100, "buffer_bytes": 1 << 20}],
            "table": {"3001": "a"},
        }
    )  # fmt: skip
    pipe = pipeline.Pipeline(build_table(cfg), [b"\x02" * 6], [b"\x04" * 6])
    assert pipe._shifter is one  # the switch shares the shift, not a copy of it
    assert pipe.shift(v) == one.shift(v) and pipe.final_address(v) == one.final(v)


def test_shift_at_every_block_length_is_the_byte_shift():
    for lblen in range(16, 113, 16):
        one = usid.shifter(lblen, 16)
        lb = lblen // 8
        for seed in range(20):
            a = bytes((seed * 37 + i * 11) & 0xFF for i in range(16))
            want = a[:lb] + a[lb + 2 :] + bytes(2) if lb + 2 <= 16 else a
            assert one.shift(int.from_bytes(a, "big")).to_bytes(16, "big") == want
