"""csrc/mrc_equeue.c (mrcswitch.cqueue.CEgressQueue) vs its twin mrcswitch.queue.EgressQueue:
same verdicts, frames, counters and tokens after every step (fake clock; AF_UNIX pairs)."""

from __future__ import annotations

import errno
import random
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrcnic import wire
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
    trim,
    usid,
)
from mrcswitch import cqueue
from mrcswitch.config import PortConfig
from mrcswitch.queue import EgressQueue, Verdict

pytestmark = pytest.mark.skipif(cqueue.BACKEND != "c", reason="C module mrc_equeue not built")

SRC = bytes.fromhex("fcbbbb00100130000000000000000001")
MAC = bytes(6)
DATA_OPS = [Opcode(op) for op in range(0xC6, 0xCC)]


def port_cfg(**kw) -> PortConfig:
    """A PortConfig built directly (no validation): small and odd bounds are the point."""
    p = dict(name="p", interface="v0", peer="", peer_mac=MAC, mac=None, rate_bps=8_000_000,
             buffer_bytes=20000, high_buffer_bytes=12000, burst_bytes=10000, ecn=True,
             ecn_threshold_bytes=5000, trimming=True, last_hop=False, trim_bytes=0)  # fmt: skip
    p.update(kw)
    return PortConfig(**p)


def set_tc(f: bytearray, dscp: int, ecn: int) -> None:
    f[14] = 0x60 | dscp >> 2
    f[15] = (dscp & 3) << 6 | ecn << 4 | (f[15] & 0x0F)


def mrc_frame(op, ts, payload_len, dscp, ecn, usids) -> bytearray:
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


DSCPS = st.sampled_from([*Dscp, Dscp.TRIMMABLE, Dscp.TRIMMABLE_RETX, 1, 63])
ECNS = st.sampled_from(list(Ecn))

# (kind, dscp, ecn, a, b, c): what frame() builds from it
mrc_spec = st.tuples(st.just("mrc"), DSCPS, ECNS, st.sampled_from(DATA_OPS), st.booleans(),
                     st.integers(0, 2500), st.lists(st.integers(1, 0xFFFF), min_size=1,
                                                    max_size=6))  # fmt: skip
mangled_spec = st.tuples(st.just("mangled"), DSCPS, ECNS, st.integers(0, 200),
                         st.integers(0, 255), st.integers(16, 400), st.just(()))  # fmt: skip
raw_spec = st.tuples(st.just("raw"), DSCPS, ECNS, st.integers(16, 2600), st.integers(0, 2**32),
                     st.just(0), st.just(()))  # fmt: skip
frame_spec = st.one_of(mrc_spec, mrc_spec, mangled_spec, raw_spec)


def frame(spec) -> bytearray:
    kind, dscp, ecn, a, b, c, d = spec
    if kind == "mrc":
        return mrc_frame(a, b, c, dscp, ecn, d)
    if kind == "mangled":  # a complete MRC frame with one byte changed, then cut
        f = mrc_frame(Opcode.WRITE_LAST_IMM, bool(a & 1), 100, dscp, ecn, (0x2001, 0x1002))
        f[a % len(f)] = b
        set_tc(f, dscp, ecn)
        return f[: max(16, min(c, len(f)))]
    f = bytearray(random.Random(b).randbytes(a))  # anything else: random bytes
    set_tc(f, dscp, ecn)
    return f


def make_pair(cfg: PortConfig, lblen: int, max_frame: int, now_ns: int = 0):
    return EgressQueue(cfg, lblen, now_ns), cqueue.CEgressQueue(
        cfg, lblen, now_ns, max_frame_bytes=max_frame
    )


def assert_same_state(py: EgressQueue, c: cqueue.CEgressQueue) -> None:
    assert (len(py), py.high_bytes, py.data_bytes, py.depth_bytes, py.max_depth_bytes) == (
        len(c), c.high_bytes, c.data_bytes, c.depth_bytes, c.max_depth_bytes)  # fmt: skip
    assert (py.ecn_marks, py.trims, py.refilled_ns) == (c.ecn_marks, c.trims, c.refilled_ns)
    assert (py.rate_per_ns, py.burst_bytes) == (c.rate_per_ns, c.burst_bytes)
    assert py._tokens == c.ptr.tokens  # bit for bit: same double arithmetic, same order
    assert (len(py.high), len(py.data)) == (c.ptr.high_frames, c.ptr.data_frames)


def run_ops(py: EgressQueue, c: cqueue.CEgressQueue, max_frame: int, ops) -> None:
    now = 0
    for op in ops:
        now += op[1]
        if op[0] == "enq":
            f = frame(op[2])
            fc = bytearray(f)
            vc = c.enqueue(fc, now)
            if len(f) > max_frame:  # the switch drops these on receive; C drops them here
                assert vc is Verdict.DROPPED and fc == f
            else:
                vp = py.enqueue(f, now)
                assert vc is vp
                assert fc == f  # marked in place (CE) alike
        elif op[0] == "deq":
            assert [bytes(x) for x in c.dequeue(now, op[2])] == [
                bytes(x) for x in py.dequeue(now, op[2])
            ]
        elif op[0] == "budget":
            b = py.fast_budget(now)
            assert c.fast_budget(now) == b
            if b > 0:
                take = b * op[2] // 4
                py.consume(take)
                c.consume(take)
        elif op[0] == "next":
            assert c.next_send_ns(now) == py.next_send_ns(now)
        else:
            assert c.flush() == py.flush()
        assert_same_state(py, c)


ops_strategy = st.lists(
    st.one_of(
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("deq"), st.integers(0, 10_000_000), st.integers(-1, 70)),
        st.tuples(st.just("budget"), st.integers(0, 3_000_000), st.integers(0, 8)),
        st.tuples(st.just("next"), st.integers(0, 1_000_000), st.just(0)),
        st.tuples(st.just("flush"), st.integers(0, 10), st.just(0)),
    ),
    min_size=10,
    max_size=60,
)

cfg_strategy = st.builds(
    port_cfg,
    rate_bps=st.sampled_from([1_000_000, 8_000_000, 100_000_000, 3_333_333, 10**10]),
    buffer_bytes=st.integers(100, 8000),
    high_buffer_bytes=st.integers(100, 3000),
    burst_bytes=st.integers(0, 8000),
    ecn=st.booleans(),
    ecn_threshold_bytes=st.integers(0, 4000),
    trimming=st.booleans(),
    last_hop=st.booleans(),
    trim_bytes=st.sampled_from([0, 0, 94, 120, 300, 5000]),
)


@settings(max_examples=250, deadline=None)
@given(cfg_strategy, st.sampled_from([16, 32, 48, 64, 96, 112]), st.integers(200, 2600),
       ops_strategy)  # fmt: skip
def test_c_queue_matches_the_twin_step_by_step(cfg, lblen, max_frame, ops):
    py, c = make_pair(cfg, lblen, max_frame)
    run_ops(py, c, max_frame, ops)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([16, 32, 48, 64, 80, 96, 112]), st.binary(min_size=16, max_size=16),
       st.sampled_from(DATA_OPS), st.booleans(), st.integers(0, 600),
       st.sampled_from([0, 94, 100, 101, 5000]), st.booleans(), ECNS)  # fmt: skip
def test_every_overflowing_frame_is_trimmed_by_the_one_rule(
    lblen, dst, op, ts, payload_len, trim_bytes, last_hop, ecn
):
    """Data class too small for anything: every trimmable frame takes the trim path, over
    any destination (the final-destination shift at every block length)."""
    cfg = port_cfg(buffer_bytes=1, high_buffer_bytes=100_000, trim_bytes=trim_bytes,
                   last_hop=last_hop)  # fmt: skip
    py, c = make_pair(cfg, lblen, 4096)
    f = mrc_frame(op, ts, payload_len, Dscp.TRIMMABLE, ecn, (0x2001,))
    f[38:54] = dst
    want = trim.TrimRule(True, last_hop, trim_bytes, lblen).overflow(f)
    assert want is not None
    assert c.enqueue(bytes(f), 0) is py.enqueue(f, 0) is Verdict.TRIMMED
    assert c.dequeue(10**12, 1) == py.dequeue(10**12, 1) == [want]
    assert_same_state(py, c)


def test_trimmed_checksum_and_marking_agree_on_known_frames():
    """The cases the random test must not miss, pinned: trims (mid-fabric and last hop, with
    and without ts/imm), CE marks, high-class overflow."""
    for last_hop in (False, True):
        cfg = port_cfg(buffer_bytes=3000, high_buffer_bytes=400, ecn_threshold_bytes=1000,
                       last_hop=last_hop)  # fmt: skip
        py, c = make_pair(cfg, 32, 4096)
        verdicts = []
        for op in DATA_OPS:
            for ts in (False, True):
                f = mrc_frame(op, ts, 1000, Dscp.TRIMMABLE_RETX, Ecn.ECT1, (0x2001, 0x1002, 3))
                fc = bytearray(f)
                v = c.enqueue(fc, 0)
                assert v is py.enqueue(f, 0) and fc == f
                verdicts.append(v)
                assert_same_state(py, c)
        assert {Verdict.QUEUED, Verdict.MARKED, Verdict.TRIMMED, Verdict.DROPPED} <= set(verdicts)
        out_c, out_py = c.dequeue(10**12, 100), py.dequeue(10**12, 100)
        assert out_c == out_py and len(out_c) > 3


# --- mrc_eq_send ----------------------------------------------------------------------------


def unix_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (a, b):
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return a, b


def drain(b: socket.socket) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(b.recv(1 << 16))
        except BlockingIOError:
            return got


def twin_send(py: EgressQueue, now_ns: int) -> list[bytearray]:
    out: list[bytearray] = []
    while True:
        batch = py.dequeue(now_ns, cqueue.SEND_BATCH)
        out += batch
        if len(batch) < cqueue.SEND_BATCH:
            return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(frame_spec, max_size=150), st.integers(0, 2_000_000)),
                max_size=4),
       st.integers(0, 20_000))  # fmt: skip
def test_send_puts_the_twins_frames_on_the_wire(rounds, burst):
    cfg = port_cfg(rate_bps=10**9, buffer_bytes=60_000, high_buffer_bytes=8000,
                   burst_bytes=burst)  # fmt: skip
    py, c = make_pair(cfg, 32, 2600)
    a, b = unix_pair()
    now = 0
    with a, b:
        for specs, dt in rounds:
            now += dt
            for spec in specs:
                f = frame(spec)
                if len(f) <= 2600:
                    assert c.enqueue(bytearray(f), now) is py.enqueue(f, now)
            want = twin_send(py, now)
            n, sent, failed, err, nbytes = c.send(a.fileno(), now)
            assert (n, sent, failed, err) == (len(want), len(want), 0, 0)
            assert nbytes == sum(map(len, want))
            assert drain(b) == [bytes(x) for x in want]
            assert_same_state(py, c)


def test_send_on_a_bad_fd_fails_every_frame_and_still_empties_like_the_twin():
    cfg = port_cfg(rate_bps=10**9, buffer_bytes=100_000, burst_bytes=30_000)
    py, c = make_pair(cfg, 32, 2000)
    for i in range(200):
        f = bytearray(random.Random(i).randbytes(100 + i))
        set_tc(f, Dscp.CONTROL if i % 7 == 0 else Dscp.NO_TRIM, Ecn.NOT_ECT)
        assert c.enqueue(bytearray(f), 0) is py.enqueue(f, 0)
    now = 0
    while len(py):
        want = py.dequeue(now, cqueue.SEND_BATCH)  # one batch: send stops after a failure
        n, sent, failed, err, nbytes = c.send(-1, now)
        assert (n, sent, failed, err, nbytes) == (len(want), 0, len(want), errno.EBADF, 0)
        assert_same_state(py, c)
        now += 50_000
    assert c.send(-1, now) == (0, 0, 0, 0, 0)


def test_send_to_a_closed_peer_counts_failures():
    py, c = make_pair(port_cfg(), 32, 2000)
    for _ in range(5):
        f = bytearray(500)
        set_tc(f, Dscp.NO_TRIM, Ecn.NOT_ECT)
        c.enqueue(f, 0)
    a, b = unix_pair()
    b.close()
    with a:
        n, sent, failed, err, nbytes = c.send(a.fileno(), 0)
    assert n == failed and n > 0 and sent == 0 and err != 0 and nbytes == 0
    assert len(c) == 5 - n


# --- mrc_eq_init and the storage ------------------------------------------------------------


def raw_queue(**kw):
    ffi, lib = cqueue._mod.ffi, cqueue._mod.lib
    q = ffi.new("struct mrc_equeue *")
    cfg = dict(rate_per_ns=0.125, burst_bytes=10000.0, buffer_bytes=20000,
               high_buffer_bytes=12000, ecn_threshold_bytes=0, max_frame_bytes=4096, lblen=32)  # fmt: skip
    cfg.update(kw)
    for k, v in cfg.items():
        setattr(q, k, v)
    return ffi, lib, q


@pytest.mark.parametrize(
    "bad",
    [dict(rate_per_ns=0.0), dict(rate_per_ns=-1.0), dict(rate_per_ns=float("nan")),
     dict(rate_per_ns=float("inf")), dict(burst_bytes=-1.0), dict(burst_bytes=float("nan")),
     dict(buffer_bytes=0), dict(high_buffer_bytes=-5), dict(max_frame_bytes=0),
     dict(buffer_bytes=1 << 40), dict(lblen=0), dict(lblen=24), dict(lblen=128)],
)  # fmt: skip
def test_init_rejects_a_bad_config_and_changes_nothing(bad):
    ffi, lib, q = raw_queue(**bad)
    n = lib.mrc_eq_mem_bytes(q.buffer_bytes, q.high_buffer_bytes, q.max_frame_bytes)
    mem = ffi.new("uint8_t[]", max(n, 1 << 16))
    q.tokens = 7.0
    assert lib.mrc_eq_init(q, mem, len(mem), 5) == -errno.EINVAL
    assert q.mem == ffi.NULL and q.tokens == 7.0 and q.last_ns == 0
    out = ffi.new("int64_t[4]")
    assert lib.mrc_eq_enqueue(q, b"x" * 100, 100) == -errno.EINVAL  # not initialised
    assert lib.mrc_eq_dequeue(q, 0, 0, ffi.NULL, 0, ffi.NULL) == -errno.EINVAL
    assert lib.mrc_eq_send(q, -1, 0, out) == -errno.EINVAL


def test_init_rejects_short_memory():
    ffi, lib, q = raw_queue()
    n = lib.mrc_eq_mem_bytes(20000, 12000, 4096)
    assert 0 < n < 4 * (20000 + 12000 + 2 * 4096) + 1024  # no per-slot max_frame storage
    mem = ffi.new("uint8_t[]", n)
    assert lib.mrc_eq_init(q, mem, n - 1, 0) == -errno.EINVAL
    assert lib.mrc_eq_init(q, ffi.NULL, n, 0) == -errno.EINVAL
    assert lib.mrc_eq_init(q, mem, n, 3) == 0
    assert q.tokens == 10000.0 and q.last_ns == 3
    assert lib.mrc_eq_mem_bytes(0, 1, 1) == lib.mrc_eq_mem_bytes(1, 1, 0) == 0


def test_enqueue_drops_runts_and_giants():
    _, c = make_pair(port_cfg(), 32, 1000)
    for n in (0, 1, 15, 1001, 5000):
        f = bytearray(n)
        assert c.enqueue(f, 0) is Verdict.DROPPED
    assert c.enqueue(bytearray(16), 0) is Verdict.QUEUED
    assert c.enqueue(bytearray(1000), 0) is Verdict.QUEUED
    assert len(c) == 2


def numbered(i: int, n: int, dscp: int) -> bytearray:
    f = bytearray(i.to_bytes(4, "big") * (n // 4 + 1))[:n]
    set_tc(f, dscp, Ecn.NOT_ECT)
    return f


@pytest.mark.parametrize("dscp", [Dscp.NO_TRIM, Dscp.CONTROL])
@pytest.mark.parametrize("sizes", ["min", "max", "mixed", "odd"])
def test_storage_never_runs_out_before_the_byte_bound(dscp, sizes):
    """Keep the class at its bound across many wraps: every refusal is the bound's."""
    max_frame, bound = 1500, 9000
    cfg = port_cfg(buffer_bytes=bound, high_buffer_bytes=bound, burst_bytes=10**12,
                   rate_bps=10**12, ecn=False)  # fmt: skip
    _, c = make_pair(cfg, 32, max_frame)
    rng = random.Random(sizes)
    pick = {
        "min": lambda: 16,
        "max": lambda: max_frame,
        "mixed": lambda: rng.choice((16, max_frame, max_frame - 1, 17, 23)),
        "odd": lambda: rng.randint(16, max_frame),
    }[sizes]
    queued: list[bytes] = []
    i = 0
    for _ in range(300):
        while True:  # fill to the bound
            f = numbered(i, pick(), dscp)
            fits = sum(map(len, queued)) + len(f) <= bound
            v = c.enqueue(f, 0)
            assert (v is not Verdict.DROPPED) == fits
            if not fits:
                break
            queued.append(bytes(f))
            i += 1
        k = rng.randint(1, max(1, len(queued)))
        out = c.dequeue(0, k)
        assert [bytes(x) for x in out] == queued[:k]  # whole, in order, across wraps
        del queued[:k]
    assert [bytes(x) for x in c.dequeue(0, 10**6)] == queued
    assert len(c) == 0 and c.depth_bytes == 0


def test_dequeue_beyond_one_c_call_keeps_the_order():
    """max_frames above the C batch and frames filling the copy-out buffer: the wrapper's
    repeated C calls give the twin's single answer."""
    cfg = port_cfg(buffer_bytes=600_000, high_buffer_bytes=70_000, burst_bytes=10**9,
                   rate_bps=10**12)  # fmt: skip
    py, c = make_pair(cfg, 32, 9000)
    for i in range(300):
        f = numbered(i, 9000 if i % 3 == 0 else 16 + i, Dscp.CONTROL if i % 5 == 0 else 0)
        assert c.enqueue(bytearray(f), 0) is py.enqueue(f, 0)
    assert c.dequeue(10, 250) == py.dequeue(10, 250)
    assert_same_state(py, c)
    assert c.dequeue(20, 1000) == py.dequeue(20, 1000)
    assert_same_state(py, c)


def test_factory_follows_the_backend(monkeypatch):
    q = cqueue.make_egress_queue(port_cfg(), 32, 0, 4096)
    assert isinstance(q, cqueue.CEgressQueue) and q.ptr is not None
    monkeypatch.setattr(cqueue, "_mod", None)
    assert type(cqueue.make_egress_queue(port_cfg(), 32, 0, 4096)) is EgressQueue


# --- the lossless class (PFC): in-port tags, per in-port bound, pause ------------------------

LOSSLESS_DSCPS = st.sampled_from([Dscp.LOSSLESS, Dscp.LOSSLESS, Dscp.TRIMMABLE, Dscp.CONTROL, 1])
lossless_frame_spec = st.one_of(
    st.tuples(st.just("mrc"), LOSSLESS_DSCPS, ECNS, st.sampled_from(DATA_OPS), st.booleans(),
              st.integers(0, 2500), st.lists(st.integers(1, 0xFFFF), min_size=1, max_size=4)),
    st.tuples(st.just("raw"), LOSSLESS_DSCPS, ECNS, st.integers(16, 2600),
              st.integers(0, 2**32), st.just(0), st.just(())),
)  # fmt: skip
lossless_ops = st.lists(
    st.one_of(
        st.tuples(st.just("enq"), st.integers(0, 50_000), lossless_frame_spec, st.integers(-1, 3)),
        st.tuples(st.just("enq"), st.integers(0, 50_000), lossless_frame_spec, st.integers(0, 3)),
        st.tuples(st.just("deq"), st.integers(0, 10_000_000), st.integers(0, 70), st.just(0)),
        st.tuples(st.just("pause"), st.integers(0, 100_000), st.integers(-1_000, 5_000_000),
                  st.just(0)),
        st.tuples(st.just("budget"), st.integers(0, 3_000_000), st.integers(0, 8), st.just(0)),
        st.tuples(st.just("next"), st.integers(0, 1_000_000), st.just(0), st.just(0)),
        st.tuples(st.just("flush"), st.integers(0, 10), st.just(0), st.just(0)),
    ),
    min_size=10,
    max_size=60,
)  # fmt: skip


@settings(max_examples=250, deadline=None)
@given(cfg_strategy, st.integers(200, 12_000), st.integers(100, 6000), st.booleans(),
       lossless_ops)  # fmt: skip
def test_lossless_class_matches_the_twin_step_by_step(cfg, ll_buffer, in_limit, ll_ecn, ops):
    from mrcswitch.config import LosslessClass

    ll = LosslessClass(dscp=Dscp.LOSSLESS, buffer_bytes=ll_buffer, in_limit_bytes=in_limit,
                       ecn=ll_ecn)  # fmt: skip
    in_py, in_c = cqueue.new_in_bytes(3, c=False), cqueue.new_in_bytes(3, c=True)
    py = EgressQueue(cfg, 32, 0, ll, in_py)
    c = cqueue.make_egress_queue(cfg, 32, 0, 9000, ll, in_c)
    assert isinstance(c, cqueue.CEgressQueue)
    now = 0
    for op in ops:
        now += op[1]
        if op[0] == "enq":
            f = frame(op[2])
            fc = bytearray(f)
            assert c.enqueue(fc, now, op[3]) is py.enqueue(f, now, op[3])
            assert fc == f
        elif op[0] == "deq":
            assert [bytes(x) for x in c.dequeue(now, op[2])] == [
                bytes(x) for x in py.dequeue(now, op[2])
            ]
        elif op[0] == "pause":
            py.paused_until_ns = c.paused_until_ns = max(0, now + op[2])
        elif op[0] == "budget":
            b = py.fast_budget(now)
            assert c.fast_budget(now) == b
            if b > 0:
                py.consume(b * op[2] // 4)
                c.consume(b * op[2] // 4)
        elif op[0] == "next":
            assert c.next_send_ns(now) == py.next_send_ns(now)
        else:
            assert c.flush() == py.flush()
        assert_same_state(py, c)
        assert (py.lossless_bytes, len(py.lossless), py.lossless_drops) == (
            c.lossless_bytes, c.ptr.lossless_frames, c.lossless_drops)  # fmt: skip
        assert list(in_py) == list(in_c)
        assert sum(in_py) == sum(len(f) for f, p in py.lossless if p >= 0)


# --- the wire: link propagation delay ---------------------------------------------------------


def make_delay_pair(cfg: PortConfig, max_frame: int):
    py = EgressQueue(cfg, 32, 0, max_frame_bytes=max_frame)
    return py, cqueue.CEgressQueue(cfg, 32, 0, max_frame_bytes=max_frame)


def one_queue(impl: str, cfg: PortConfig, max_frame: int):
    """The twin ("py") or the C queue ("c") alone, for the tests both must pass."""
    if impl == "py":
        return EgressQueue(cfg, 32, 0, max_frame_bytes=max_frame)
    return cqueue.CEgressQueue(cfg, 32, 0, max_frame_bytes=max_frame)


def plain_frame(n: int, tag: int = 0) -> bytearray:
    """An n-byte data frame of the untrimmable class, byte 100 = tag."""
    f = bytearray(n)
    set_tc(f, Dscp.NO_TRIM, Ecn.NOT_ECT)
    f[100] = tag
    return f


def assert_same_wire(py: EgressQueue, c: cqueue.CEgressQueue) -> None:
    assert_same_state(py, c)
    assert (py.delay_ns, py.wire_bytes, py.wire_bound_bytes, py.wire_stalls, len(py.wire)) == (
        c.delay_ns, c.wire_bytes, c.wire_bound_bytes, c.wire_stalls, c.ptr.wire_frames)  # fmt: skip


wire_ops = st.lists(
    st.one_of(
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("enq"), st.integers(0, 50_000), frame_spec),
        st.tuples(st.just("deq"), st.integers(0, 3_000_000), st.integers(1, 70)),
        st.tuples(st.just("next"), st.integers(0, 1_000_000), st.just(0)),
        st.tuples(st.just("budget"), st.integers(0, 1_000_000), st.just(0)),
        st.tuples(
            st.just("delay"),
            st.integers(0, 1_000_000),
            st.sampled_from([0, 0, 1, 10_000, 300_000, 2_000_000]),
        ),  # fmt: skip
        st.tuples(st.just("flush"), st.integers(0, 10), st.just(0)),
    ),
    min_size=10,
    max_size=80,
)


@settings(max_examples=250, deadline=None)
@given(cfg_strategy, st.sampled_from([0, 5_000, 1_000_000]), wire_ops)
def test_the_wire_matches_the_twin_step_by_step(cfg, delay0, ops):
    """Frames out, release order, counters and next_send_ns of the C wire against the twin,
    through delays set, shortened, cleared while frames are in flight, and flushes."""
    py, c = make_delay_pair(cfg, 2600)
    py.set_delay(delay0)
    c.set_delay(delay0)
    now = 0
    for op in ops:
        now += op[1]
        if op[0] == "enq":
            f = frame(op[2])
            if len(f) <= 2600:
                fc = bytearray(f)
                assert c.enqueue(fc, now) is py.enqueue(f, now)
                assert fc == f
        elif op[0] == "deq":
            assert [bytes(x) for x in c.dequeue(now, op[2])] == [
                bytes(x) for x in py.dequeue(now, op[2])
            ]
        elif op[0] == "next":
            assert c.next_send_ns(now) == py.next_send_ns(now)
        elif op[0] == "budget":
            assert c.fast_budget(now) == py.fast_budget(now)
        elif op[0] == "delay":
            py.set_delay(op[2])
            c.set_delay(op[2])
        else:
            assert c.flush() == py.flush()
        assert_same_wire(py, c)


@pytest.mark.parametrize("impl", ["py", "c"])
def test_a_frame_arrives_one_delay_after_it_leaves(impl):
    """At 8 Mb/s a 1,000-byte frame takes 1 ms to send; with 5 ms of delay the second frame
    of a back-to-back pair leaves the port 1 ms after the first, both 5 ms late."""
    cfg = port_cfg(rate_bps=8_000_000, buffer_bytes=20_000, burst_bytes=1000)
    q = one_queue(impl, cfg, 2600)
    q.set_delay(5_000_000)
    assert q.fast_budget(0) == -1  # nothing leaves at once over a delayed link
    frames = [plain_frame(1000, i) for i in range(2)]
    for f in frames:
        assert q.enqueue(bytearray(f), 0) is Verdict.QUEUED
    assert q.dequeue(0, 64) == []  # the first is on the wire, the second waits for tokens
    assert q.depth_bytes == 1000 and len(q) == 2 and q.wire_bytes == 1000
    assert q.next_send_ns(0) == 1_000_001  # tokens for the second before the first lands
    assert q.dequeue(1_000_001, 64) == []
    assert q.wire_bytes == 2000 and q.depth_bytes == 0
    assert q.next_send_ns(1_000_001) == 5_000_000
    assert q.dequeue(4_999_999, 64) == []
    assert q.dequeue(5_000_000, 64) == [frames[0]]
    assert q.next_send_ns(5_000_000) == 6_000_001
    assert q.dequeue(6_000_001, 64) == [frames[1]]
    assert len(q) == 0 and q.next_send_ns(6_000_001) is None
    assert q.wire_stalls == 0


@pytest.mark.parametrize("impl", ["py", "c"])
def test_a_shorter_delay_never_reorders_and_zero_drains_back_to_the_fast_path(impl):
    cfg = port_cfg(rate_bps=10**9, buffer_bytes=100_000, burst_bytes=50_000)
    q = one_queue(impl, cfg, 2600)
    q.set_delay(1_000_000)
    mk = [plain_frame(500, i) for i in range(6)]
    for f in mk[:3]:
        q.enqueue(bytearray(f), 0)
    assert q.dequeue(0, 64) == []  # three on the wire until 1 ms
    q.set_delay(10_000)  # shorter: new frames must still land after the three
    for f in mk[3:]:
        q.enqueue(bytearray(f), 100)
    assert q.dequeue(200_000, 64) == []
    assert q.dequeue(1_000_000, 64) == mk
    q.set_delay(0)
    assert q.fast_budget(1_000_000) > 0  # the wire is empty: frames may leave at once again
    assert q.flush() == 0


@pytest.mark.parametrize("impl", ["py", "c"])
def test_frames_in_flight_die_with_the_link_and_paced_callers_never_stall(impl):
    cfg = port_cfg(rate_bps=100_000_000, buffer_bytes=60_000, burst_bytes=12_500)
    q = one_queue(impl, cfg, 4200)
    q.set_delay(4_000_000)
    assert q.wire_bound_bytes == 12_500 + 50_000 + 4200  # burst + rate x delay + a frame
    now, out = 0, 0
    for _ in range(2000):  # a saturated link, a caller on time: the bound never binds
        while q.depth_bytes + 4100 <= 60_000:
            assert q.enqueue(plain_frame(4100), now) is Verdict.QUEUED
        out += len(q.dequeue(now, 64))
        now = q.next_send_ns(now)
    assert q.wire_stalls == 0 and out > 900
    on_wire = q.ptr.wire_frames if impl == "c" else len(q.wire)
    assert on_wire > 5 and q.wire_bytes > 5 * 4100  # a delay's worth of frames in flight
    held = len(q)
    assert held > on_wire  # and more queued behind them
    assert q.flush() == held  # the link went down: queued and in flight, all gone
    assert len(q) == 0 and q.wire_bytes == 0


def test_set_delay_refuses_out_of_range_and_changes_nothing():
    for q in (EgressQueue(port_cfg(), 32, 0), cqueue.CEgressQueue(port_cfg(), 32, 0)):
        for bad in (-1, 1_000_000_001):
            with pytest.raises(ValueError):
                q.set_delay(bad)
        assert q.delay_ns == 0 and q.fast_budget(0) > 0


def test_send_holds_frames_until_their_release():
    cfg = port_cfg(rate_bps=10**9, buffer_bytes=60_000, burst_bytes=30_000)
    py, c = make_delay_pair(cfg, 2600)
    py.set_delay(50_000)
    c.set_delay(50_000)
    a, b = unix_pair()
    with a, b:
        for i in range(20):
            f = bytearray(random.Random(i).randbytes(300 + i))
            set_tc(f, Dscp.CONTROL if i % 5 == 0 else Dscp.NO_TRIM, Ecn.NOT_ECT)
            assert c.enqueue(bytearray(f), 0) is py.enqueue(f, 0)
        for now in (0, 49_999, 50_000, 80_000, 200_000):
            want = twin_send(py, now)
            n, sent, failed, err, nbytes = c.send(a.fileno(), now)
            assert (n, sent, failed, err) == (len(want), len(want), 0, 0)
            assert drain(b) == [bytes(x) for x in want]
            assert_same_wire(py, c)
            if now < 50_000:
                assert want == []
        assert len(py) == len(c) == 0
