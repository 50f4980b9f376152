"""The C receive engine (csrc/mrc_rxe.c) against its twin, the Python responder: the same
frames in, the same control frames, events, counters and memory out."""

from __future__ import annotations

import random
from dataclasses import asdict, replace

import pytest

from mrcnic import wire
from mrcnic.io.batch import RecvRing
from mrcnic.sim.fabric import host_net
from mrcnic.transport import rx_engine
from mrcnic.transport.qp_types import QpAttributes, QpConfig, QpErrorEvent
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.transport.rx_engine import engine_from_env
from mrcnic.verbs import Device, RemoteBuffer
from mrcnic.wire import layout, usid
from tests.batches import fill, receive_batches

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)


def _pair(
    engine: str, seed: int, others: bool = False, **cfg_fields: object
) -> tuple[Device, Device, object, object, object]:
    """``others``: the receiving device serves two more QPs first (an MRC and a RoCEv2 one),
    so that the pair's engine is not the device's first entry."""
    a = Device(host_net(SHAPE, 0), 100e6, seed=seed, engine="py")
    b = Device(host_net(SHAPE, 2), 100e6, seed=seed, engine=engine)
    cfg = QpConfig(base_rtt_s=1e-3, seed=seed, start_psn=(seed * 7919) & 0xFFFFFF, **cfg_fields)
    if others:
        for transport in ("mrc", "rocev2"):
            oa, ob = a.create_qp(cfg, transport), b.create_qp(cfg, transport)
            oa.connect(QpAttributes.from_json(ob.export()))
            ob.connect(QpAttributes.from_json(oa.export()))
    qa, qb = a.create_qp(cfg), b.create_qp(cfg)
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    mr = b.register(bytearray(1 << 18))
    return a, b, qa, qb, mr


def _mutate(frame: bytes, rng: random.Random) -> list[bytes]:
    """What a fabric (or a forger) may do to a data frame."""
    r = rng.random()
    f = bytearray(frame)
    if r < 0.08:
        return []  # lost
    if r < 0.16:
        return [frame, frame]  # duplicated
    if r < 0.24:
        f[layout.OFF_TC_LO] |= 0x30  # CE
        return [bytes(f)]
    if r < 0.30:
        return [wire.trim_frame(frame, lasthop=rng.random() < 0.5)]
    if r < 0.34:
        f[-10] ^= 0x40  # a payload bit: the ICRC fails
        return [bytes(f)]
    if r < 0.37:
        f[layout.OFF_SRC + 15] ^= 1  # another host
        return [bytes(f)]
    if r < 0.40:
        return [frame[: rng.randrange(20, len(frame))]]  # cut short
    return [frame]


def _run(
    engine: str, seed: int, batch: bool = False, rounds: int = 1, others: bool = False
) -> dict:
    """``batch``: the frames arrive in receive batches (the C engine's dispatch), not one by
    one. ``rounds`` > 1: that many rounds of writes, each delivered whole (shuffled, some
    duplicated or marked CE, none lost) before the next is posted."""
    rng = random.Random(seed)
    a, b, qa, qb, mr = _pair(engine, seed, others)
    rb = RemoteBuffer.of(mr)
    if rounds == 1 and rng.random() < 0.3:
        qa.post_write(99, b"y" * 64, RemoteBuffer(rb.va + 7, rb.rkey ^ 1, 64))  # bad R_Key
    t = 1.0
    out: list = []
    ring = RecvRing(9216, 64)

    def ctrl() -> None:  # b's control frames: recorded, and with rounds, to the sender
        got = [bytes(x) for _p, x in b.control_frames_to_send()]
        out.append(got)
        if rounds > 1:
            for f in got:
                a.receive_frame(f, t)

    for r in range(rounds):
        for i in range(12):
            n = rng.choice([100, 4096, 9000, 20000])
            off = rng.randrange(0, (1 << 18) - n)
            imm = rng.randrange(1 << 32) if rng.random() < 0.4 else None
            data = bytes(rng.randrange(256) for _ in range(64)) * (n // 64) + b"x" * (n % 64)
            qa.post_write(r * 12 + i, data, RemoteBuffer(rb.va + off, rb.rkey, n), imm=imm)
        for _turn in range(1 if rounds == 1 else 400):
            frames = [f for _p, f in a.frames_to_send(t)]
            if rounds > 1 and not frames and qa.core.idle:
                break  # (this round's writes are all acknowledged)
            pending: list[bytes] = []
            for f in frames:
                if rounds == 1:
                    pending += _mutate(f, rng)
                else:
                    g = bytearray(f)
                    if rng.random() < 0.25:
                        g[layout.OFF_TC_LO] |= 0x30  # CE
                    pending += [bytes(g)] * (1 + (rng.random() < 0.1))
            rng.shuffle(pending)  # sprayed: any order
            while pending:
                t += 1e-5
                if batch:
                    k = rng.randrange(1, 65)
                    got, pending = pending[:k], pending[k:]
                    fill(ring, got)
                    b.receive_batch(ring, len(got), t)
                else:
                    b.receive_frame(pending.pop(0), t)
                ctrl()
                if rng.random() < 0.2:
                    t += 2e-3  # the delayed ACK fires
                    b.handle_timer(t)
                    ctrl()
            if rounds > 1:
                t += 2e-3
                b.handle_timer(t)
                ctrl()
                a.handle_timer(t)
    return {
        "ctrl": out,
        "events": [repr(e) for e in qb.poll_events()] + [repr(e) for e in qb.poll_recv()],
        "stats": asdict(qb.core.stats),
        "memory": bytes(mr.buffer),
        "placed": mr.bytes_placed,
        "timer": qb.core.get_timer(),
    }


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_engine_matches_the_python_responder(seed: int) -> None:
    c, py = _run("c", seed), _run("py", seed)
    assert c["stats"] == py["stats"]
    assert c["events"] == py["events"]
    assert c["memory"] == py["memory"] and c["placed"] == py["placed"]
    assert c["ctrl"] == py["ctrl"]
    assert c["timer"] == py["timer"]


@needs_c
def test_the_parity_cases_reach_every_path() -> None:
    """The 40 cases above are not vacuous: between them they take every branch."""
    tot: dict[str, int] = {}
    events = 0
    for seed in range(40):
        r = _run("c", seed)
        for k, v in r["stats"].items():
            tot[k] = tot.get(k, 0) + v
        events += len(r["events"])
    for k in ("rx_duplicates", "rx_trimmed", "rx_ecn_marked", "tx_nacks", "rx_malformed",
              "rx_foreign", "rx_refused", "tx_sacks"):  # fmt: skip
        assert tot[k] > 0, k
    assert events > 0


@needs_c
def test_the_engines_are_really_different_code() -> None:
    _a, bc, _qa, qbc, _mr = _pair("c", 1)
    _a, bp, _qa, qbp, _mr = _pair("py", 1)
    assert qbc.core._rxe is not None and qbp.core._rxe is None
    assert bc.engine_name == "c" and bp.engine_name == "py"


def test_engine_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRC_NIC_ENGINE", "py")
    assert engine_from_env() == "py"
    monkeypatch.setenv("MRC_NIC_ENGINE", "fast")
    with pytest.raises(ValueError, match="not an engine"):
        engine_from_env()
    with pytest.raises(ValueError, match="not an engine"):
        Device(host_net(SHAPE, 0), 100e6, engine="fast")


# -- issue 25: completion semantics, the same on both engines ------------------------------


def _without_ts(frame: bytes) -> bytes:
    """The same data frame without the timestamp extension (BTH T flag clear), as
    ``wire.encode_mrc`` builds it: docs/design/wire.md makes the extension optional."""
    f = wire.parse_frame(frame)
    m = f.mrc
    mrc = wire.encode_mrc(
        wire.MrcPacket(
            replace(m.bth, ts_present=False), meth=m.meth, reth=m.reth, imm=m.imm,
            payload=bytes(m.payload),
        )
    )  # fmt: skip
    out = bytearray(frame[: layout.OFF_BTH]) + mrc
    n = len(out) - layout.OFF_UDP
    out[layout.OFF_PAYLOAD_LENGTH : layout.OFF_PAYLOAD_LENGTH + 2] = n.to_bytes(2, "big")
    out[layout.OFF_UDP_LENGTH : layout.OFF_UDP_LENGTH + 2] = n.to_bytes(2, "big")
    return bytes(out)


def _deliver(engine: str, writes, order=None, strip_ts=False, seed=3) -> dict:
    """Post ``writes`` ((wr_id, offset, data, imm) into the responder's region, or a
    RemoteBuffer instead of an offset) from the Python requester and hand every data frame
    to a responder of ``engine``, in ``order`` (a function of the frame list)."""
    a, b, qa, qb, mr = _pair(engine, seed)
    rb = RemoteBuffer.of(mr)
    for wr_id, where, data, imm in writes:
        if not isinstance(where, RemoteBuffer):
            where = RemoteBuffer(rb.va + where, rb.rkey, len(data))
        qa.post_write(wr_id, data, where, imm=imm)
    frames = [f for _p, f in a.frames_to_send(1.0)]
    if strip_ts:
        frames = [_without_ts(f) for f in frames]
    if order is not None:
        frames = order(frames)
    t = 1.0
    ctrl = []
    for f in frames:
        t += 1e-5
        b.receive_frame(f, t)
        ctrl.append([bytes(x) for _p, x in b.control_frames_to_send()])
    events, recv = qb.poll_events(), qb.poll_recv()
    return {
        "ctrl": ctrl,
        "events": [repr(e) for e in events] + [repr(e) for e in recv],
        "imms": [(e.imm, e.byte_len) for e in recv],
        "errors": [(e.status.name, e.reason) for e in events if isinstance(e, QpErrorEvent)],
        "stats": asdict(qb.core.stats),
        "memory": bytes(mr.buffer),
        "state": qb.state.name,
        "frames": frames,
    }


ENGINES = ["py", pytest.param("c", marks=needs_c)]


@pytest.mark.parametrize("engine", ENGINES)
def test_frames_without_the_timestamp_extension_are_placed(engine: str) -> None:
    """Issue 25: both responders read RETH where it is when the T flag is clear (they took
    the first 8 bytes of RETH for the timestamp and refused the frame as a bad R_Key)."""
    data = bytes(range(256)) * 40  # 10240 bytes: FIRST, MIDDLE, LAST
    writes = [(1, 0, data, None), (2, 20000, b"flag", 0xF1A6), (3, 30000, b"z" * 5000, 7)]
    r = _deliver(engine, writes, strip_ts=True)
    assert not any(f[layout.OFF_BTH + 4] & layout.BTH_FLAG_TS for f in r["frames"])
    st = r["stats"]
    assert st["rx_refused"] == 0 and st["rx_malformed"] == 0
    assert st["rx_placed_packets"] == len(r["frames"])
    mem = r["memory"]
    assert mem[: len(data)] == data and mem[20000:20004] == b"flag"
    assert mem[30000:35000] == b"z" * 5000
    assert r["imms"] == [(0xF1A6, 4), (7, 5000)] and r["state"] == "READY"


@needs_c
@pytest.mark.parametrize("strip_ts", [False, True])
def test_the_engines_agree_on_frames_with_and_without_a_timestamp(strip_ts: bool) -> None:
    data = bytes(range(256)) * 40
    writes = [(1, 0, data, None), (2, 20000, b"flag", 0xF1A6), (3, 30000, b"z" * 5000, 7)]
    c, py = (_deliver(e, writes, strip_ts=strip_ts) for e in ("c", "py"))
    for k in ("ctrl", "events", "stats", "memory", "state"):
        assert c[k] == py[k], k


def _long_write(rb: RemoteBuffer) -> RemoteBuffer:
    return RemoteBuffer(rb.va, rb.rkey, 300_000)  # a record that lies: the region is 256 KiB


ORDERS = {
    "sent": None,
    "reversed": lambda fs: fs[::-1],
    "middles_first": lambda fs: fs[1:-1] + fs[:1] + fs[-1:],
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("case", ["longer_than_region", "overhangs_the_end"])
def test_a_write_that_does_not_fit_its_region_changes_nothing(engine, order, case) -> None:
    """Issue 25: a write whose range does not fit its region changes no byte, whichever of
    its packets arrives first (each packet was checked for its own range only: the packets
    inside the region landed before the first one outside was refused)."""
    size = 1 << 18
    if case == "longer_than_region":
        n, off = 300_000, 0
    else:
        n, off = 20_000, size - 10_000  # its first two packets lie inside the region
    a, b, qa, qb, mr = _pair(engine, 3)  # (only for the region's address and key)
    rb = RemoteBuffer.of(mr)
    where = RemoteBuffer(rb.va + off, rb.rkey, n)
    r = _deliver(engine, [(1, where, bytes([7]) * n, None)], order=ORDERS[order])
    assert r["memory"] == bytes(size)
    st = r["stats"]
    assert st["rx_placed_packets"] == 0 and st["rx_out_of_bounds"] == 1
    assert r["state"] == "ERROR" and [s for s, _ in r["errors"]] == ["REMOTE_ACCESS_ERROR"]
    assert st["rx_closed"] == len(r["frames"]) - 1  # nothing after the refusal is looked at


@pytest.mark.parametrize("engine", ENGINES)
def test_a_refused_write_ends_the_responder(engine) -> None:
    """Issue 25: after refusing a write the responder places nothing more of the QP's data
    (it stayed READY and placed the rest of an earlier write still being repaired)."""
    a, b, qa, qb, mr = _pair(engine, 4)
    rb = RemoteBuffer.of(mr)
    bad = RemoteBuffer(rb.va, rb.rkey ^ 1, 100)
    r = _deliver(
        engine,
        [(1, 0, b"\x11" * 10_000, None), (2, bad, b"\x22" * 100, None)],
        order=lambda fs: fs[-1:] + fs[:-1],  # the refused write's packet comes first
    )
    assert r["memory"] == bytes(1 << 18)
    assert r["stats"]["rx_bad_rkey"] == 1 and r["stats"]["rx_closed"] == 3
    ((status, reason),) = r["errors"]
    assert status == "REMOTE_ACCESS_ERROR" and f"{rb.rkey ^ 1:#x}" in reason
    assert "no region has that R_Key" in reason
    nacks = [wire.parse_frame(f).mrc.nack for fs in r["ctrl"] for f in fs]
    assert [n.reason for n in nacks] == [wire.NackReason.REMOTE_ACCESS_ERROR]


@needs_c
@pytest.mark.parametrize("order", ORDERS)
def test_the_engines_agree_on_refusals(order) -> None:
    a, b, qa, qb, mr = _pair("py", 3)
    rb = RemoteBuffer.of(mr)
    writes = [
        (1, 0, b"\x11" * 10_000, None),
        (2, RemoteBuffer(rb.va + (1 << 18) - 10_000, rb.rkey, 20_000), b"\x22" * 20_000, 5),
        (3, 50_000, b"\x33" * 9000, None),
    ]
    c, py = (_deliver(e, writes, order=ORDERS[order]) for e in ("c", "py"))
    for k in ("ctrl", "events", "stats", "memory", "state", "errors"):
        assert c[k] == py[k], k
    assert c["state"] == "ERROR"


@needs_c
@pytest.mark.parametrize("rounds", [1, 4])
@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_tables_that_start_at_one_entry_grow_and_shrink_as_the_twin_runs(
    seed: int, batch: bool, rounds: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receive engine's tables start small and grow when a frame needs them
    (``mrc_rxe_move``, from the per-frame path and from a receive batch's dispatch): with
    one entry each at first, every run moves them many times, and still does what the Python
    responder does, frame for frame."""
    monkeypatch.setattr(rx_engine, "FIRST_RX_MSGS", 1)
    monkeypatch.setattr(rx_engine, "FIRST_CE_EVS", 1)
    moves = []
    real = rx_engine.CRxEngine._move

    def counted(self, msg_cap: int, ce_cap: int) -> bool:
        was = (self.q.msg_cap, msg_cap, self.q.ce_cap, ce_cap)
        if real(self, msg_cap, ce_cap):
            moves.append(was)
            return True
        return False

    monkeypatch.setattr(rx_engine.CRxEngine, "_move", counted)
    others = seed % 2 == 1  # (the pair's engine behind two others on its device)
    c, py = _run("c", seed, batch, rounds, others), _run("py", seed, batch, rounds, others)
    assert c["stats"] == py["stats"]
    assert c["events"] == py["events"]
    assert c["memory"] == py["memory"] and c["placed"] == py["placed"]
    assert c["ctrl"] == py["ctrl"]
    assert any(new > old > 0 for old, new, _o, _n in moves)  # messages' table grew
    if rounds > 1:  # went back as the messages completed, grew again later, at MSNs its
        assert any(new < old for old, new, _o, _n in moves)  # first sizes no longer start at
        assert sum(new > old > 0 for old, new, _o, _n in moves) > 2 * 4
        assert any(new > old > 0 for _o, _n, old, new in moves)  # and the CE table grew


@needs_c
@pytest.mark.parametrize("batch", [False, True])
def test_more_writes_with_immediate_completing_at_once_than_a_batch_has_events_for(
    batch: bool,
) -> None:
    """100 one-packet writes with immediate (the peer allows 128 in flight) arrive with the
    first one last: its packet completes all 100 at once, more than the 64 events the C
    engine reports between two flushes. It reports them in rounds (deliver_pending,
    mrc_rxe_resume), the same 100 ImmReceived in the same order as the Python responder,
    and takes nothing past its arrays."""

    def run(engine: str) -> dict:
        a, b, qa, qb, mr = _pair(engine, 5, max_wimm_inflight=128)
        rb = RemoteBuffer.of(mr)
        for i in range(100):
            qa.post_write(i, bytes([i]) * 64, RemoteBuffer(rb.va + 64 * i, rb.rkey, 64), imm=i)
        frames = [f for _p, f in a.frames_to_send(1.0)]
        assert len(frames) == 100
        frames = frames[1:] + frames[:1]
        if batch:
            receive_batches(b, frames, 1.001)
        else:
            for f in frames:
                b.receive_frame(f, 1.001)
        return {
            "recv": [repr(e) for e in qb.poll_recv(1000)],
            "events": [repr(e) for e in qb.poll_events()],
            "stats": asdict(qb.core.stats),
            "memory": bytes(mr.buffer),
        }

    c, py = run("c"), run("py")
    assert len(c["recv"]) == 100 and c["recv"] == py["recv"]
    assert c["events"] == py["events"] and c["stats"] == py["stats"]
    assert c["memory"] == py["memory"]


@needs_c
def test_a_batch_prepares_and_serves_only_the_qps_it_names() -> None:
    """Four QPs on the receiving device; one batch carries interleaved writes of two of them.
    mrc_rxe_scan lists exactly those two (the shell prepares and flushes only them), and what
    each QP ends with is what the Python responder gets from the same frames one by one."""

    def run(engine: str) -> tuple[list[dict], Device]:
        a = Device(host_net(SHAPE, 0), 100e6, seed=9, engine="py")
        b = Device(host_net(SHAPE, 2), 100e6, seed=9, engine=engine)
        cfg = QpConfig(base_rtt_s=1e-3, seed=9)
        pairs = []
        for _ in range(4):
            qa, qb = a.create_qp(cfg), b.create_qp(cfg)
            qa.connect(QpAttributes.from_json(qb.export()))
            qb.connect(QpAttributes.from_json(qa.export()))
            pairs.append((qa, qb))
        mr = b.register(bytearray(1 << 16))
        rb = RemoteBuffer.of(mr)
        for k in (1, 3):  # QPs 1 and 3 write; 0 and 2 stay idle
            qa = pairs[k][0]
            qa.post_write(k, bytes([k]) * 9000, RemoteBuffer(rb.va + 16384 * k, rb.rkey, 9000))
        frames = [f for _p, f in a.frames_to_send(1.0)]
        frames = frames[::2] + frames[1::2]  # the two QPs' packets interleaved, out of order
        if engine == "c":
            receive_batches(b, frames, 1.001)
        else:
            for f in frames:
                b.receive_frame(f, 1.001)
        out = [
            {"recv": [repr(e) for e in qb.poll_recv(100)], "events": [repr(e) for e in
             qb.poll_events()], "stats": asdict(qb.core.stats)}
            for _qa, qb in pairs
        ]  # fmt: skip
        out.append({"memory": bytes(mr.buffer), "ctrl": len(b.frames_to_send(1.002))})
        return out, b

    c, b = run("c")
    py, _ = run("py")
    assert c == py
    dev = b._rx_engines.dev
    named = {b._rx_engines._entries[dev.touched[t]].qp.qpn for t in range(dev.n_touched)}
    qpns = sorted(b.qps)
    assert named == {qpns[1], qpns[3]}
    assert c[1]["stats"]["rx_data_packets"] > 0 and c[0]["stats"]["rx_data_packets"] == 0
