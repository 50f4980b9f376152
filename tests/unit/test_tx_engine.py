"""The C send engine (csrc/mrc_txe.c) against its twin, the Python requester: the same
writes, acknowledgments, losses and timers in, the same frames, events, counters and
timers out, step by step."""

from __future__ import annotations

import heapq
import random
import zlib
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from mrcnic import wire
from mrcnic.io.batch import RecvRing
from mrcnic.sim.fabric import host_net
from mrcnic.transport import tx_engine
from mrcnic.transport.cc import (
    LOSS_SACK,
    LOSS_TIMEOUT,
    LOSS_TRIM,
    LOSS_TRIM_LAST_HOP,
    AckSample,
    CcParams,
    LossSample,
    UetNscc,
    register_cc,
)
from mrcnic.transport.ev import EvConfig
from mrcnic.transport.qp_types import QpAttributes, QpConfig, QpState
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.verbs import Device, RemoteBuffer
from mrcnic.wire import layout, usid
from tests.batches import SLOT_BYTES, fill
from tests.nscc_state import nscc_state
from tests.simd import cpu_flags, simd_loop

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)
REGION = 1 << 20


class _RecordingNscc(UetNscc):
    """UET's NSCC (so the window moves as with the default), writing down every call an engine
    makes into it, samples whole: an algorithm written before ``on_loss``."""

    name = "test-recording-nscc"

    def __init__(self, p: CcParams, **options: object) -> None:
        super().__init__(p, **options)
        self.calls: list = []

    def on_ack(self, s: AckSample) -> None:
        self.calls.append(("ack", s))
        super().on_ack(s)

    def on_trim(self, last_hop: bool, now_s: float) -> None:
        self.calls.append(("trim", last_hop, now_s))
        super().on_trim(last_hop, now_s)

    def on_timeout(self, now_s: float) -> None:
        self.calls.append(("timeout", now_s))
        super().on_timeout(now_s)

    def on_rcv_penalty(self, penalty: int, now_s: float) -> None:
        self.calls.append(("penalty", penalty, now_s))
        super().on_rcv_penalty(penalty, now_s)


class _RecordingNsccWithLoss(_RecordingNscc):
    """The same, with the optional ``on_loss``."""

    name = "test-recording-nscc-loss"

    def on_loss(self, s: LossSample) -> None:
        self.calls.append(("loss", s))


register_cc(_RecordingNscc.name, _RecordingNscc)
register_cc(_RecordingNsccWithLoss.name, _RecordingNsccWithLoss)


def _config(rng: random.Random, seed: int, cc: str = "nscc") -> QpConfig:
    start = rng.choice([0, 0xFFFFFF - 40, rng.randrange(1 << 24)])
    return QpConfig(
        cc=cc,
        base_rtt_s=1e-3,
        seed=seed,
        start_psn=start,
        mtu_bytes=rng.choice([1024, 4096]),
        window_psns=rng.choice([64, 65536]),
        max_wimm_inflight=rng.choice([2, 64]),
        retry_limit=rng.choice([3, 7]),
        ev=EvConfig(ev_count=rng.choice([4, 16, 128]), backup_per_plane=rng.choice([0, 2, 8])),
    )


def _mangle(frame: bytes, rng: random.Random, to_sender: bool) -> list[bytes]:
    r = rng.random()
    f = bytearray(frame)
    if r < 0.06:
        return []  # lost
    if r < 0.09:
        return [frame, frame]
    if to_sender:
        if r < 0.11:
            f[-6] ^= 0x10  # the ICRC fails
            return [bytes(f)]
        if r < 0.12:
            f[layout.OFF_SRC + 15] ^= 1  # another host
            return [bytes(f)]
        return [frame]
    if r < 0.15:
        f[layout.OFF_TC_LO] |= 0x30  # CE
        return [bytes(f)]
    if r < 0.19 and frame[layout.OFF_BTH] in layout.MRC_DATA_OPS:
        return [wire.trim_frame(frame, lasthop=rng.random() < 0.5)]
    return [frame]


def _forge(qp: object, rng: random.Random, t: float) -> None:
    """A well-formed acknowledgment with hostile fields (what a third host or a confused peer
    may send; the ICRC and the source are right, since these go past the frame checks)."""
    core = qp.core
    if core.state is not QpState.READY:
        return  # (receive_frame takes nothing for a QP in ERROR)
    sb_una = core.sb.snd_una if core._txe is None else core._txe.q.snd_una
    psn = (sb_una + rng.randrange(-70, 200)) & 0xFFFFFF
    if rng.random() < 0.7:
        core._rx_sack(
            psn, rng.choice([0, 1, 63, 500, 0xFFFF]), rng.getrandbits(64), rng.getrandbits(32),
            rng.randrange(4), rng.random() < 0.2, rng.randrange(128), rng.getrandbits(64),
            rng.random() < 0.2, t,
        )  # fmt: skip
    else:
        reason = rng.choice([1, 2, 3, 4, 5])  # (6 and 7 end the QP: the seeded runs do that)
        core._rx_nack(wire.NACK(reason, psn, 0, (psn - rng.randrange(300)) & 0xFFFFFF,
                                rng.getrandbits(64)), t)  # fmt: skip
    core._drain_ev_events()


def _run(
    engine: str,
    seed: int,
    steps: int = 160,
    hostile: bool = False,
    cc: str = "nscc",
    ev_overrides: dict | None = None,
) -> dict:
    rng = random.Random(seed)
    a = Device(host_net(SHAPE, 0), 100e6, seed=seed, engine=engine)
    b = Device(host_net(SHAPE, 2), 100e6, seed=seed, engine="py")
    cfg = _config(rng, seed, cc)
    if ev_overrides:  # (after _config: the same draws as without)
        cfg = replace(cfg, ev=replace(cfg.ev, **ev_overrides))
    qa, qb = a.create_qp(cfg), b.create_qp(cfg)
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    assert (qa.core._txe is not None) == (engine == "c")
    mr = b.register(bytearray(REGION))
    rb = RemoteBuffer.of(mr)
    ring = RecvRing(SLOT_BYTES, 64)
    t = 1.0
    q: list = []  # (arrival, seq, to_sender, frame)
    seq = 0
    trace: list = []
    wr = 0
    dead_path = rng.random() < 0.3  # one plane loses everything for a while
    for step in range(steps):
        if step % 20 == 0 and step < 120 and qa.core.state is QpState.READY:
            for _ in range(rng.randrange(1, 4)):
                n = rng.choice([0, 100, 4096, 9000, 30000, 70000])
                off = rng.randrange(0, REGION - n)
                imm = rng.randrange(1 << 32) if rng.random() < 0.3 else None
                data = bytes([wr & 0xFF]) * n
                qa.post_write(wr, data, RemoteBuffer(rb.va + off, rb.rkey, n), imm=imm)
                wr += 1
        if step == 50 and rng.random() < 0.4:
            qa.core.port_status(1, False, t)
        if step == 90:
            qa.core.port_status(1, True, t)
        t += rng.choice([1e-5, 1e-4, 5e-4, 2e-3])
        batch = []
        while q and q[0][0] <= t:
            arr, _s, to_a, f = heapq.heappop(q)
            if to_a:
                batch.append((arr, f))
            else:
                b.receive_frame(f, arr)
        if batch:
            if rng.random() < 0.5:  # a receive batch, as the shell hands it over
                fill(ring, [f for _arr, f in batch[:64]])
                a.receive_batch(ring, min(64, len(batch)), t)
                for _arr, f in batch[64:]:
                    a.receive_frame(f, t)
            else:
                for arr, f in batch:
                    a.receive_frame(f, arr)
        if hostile and rng.random() < 0.3:
            _forge(qa, rng, t)
        for dev in (a, b):
            tm = dev.get_timer()
            if tm is not None and tm <= t:
                dev.handle_timer(t)
        out = a.frames_to_send(t)
        trace.append(("a", step, [(p, bytes(f)) for p, f in out], a.get_timer()))
        for p, f in out:
            lost_plane = dead_path and 30 <= step < 60 and p == 0
            for g in [] if lost_plane else _mangle(bytes(f), rng, False):
                seq += 1
                heapq.heappush(q, (t + rng.uniform(2e-4, 3e-3), seq, False, g))
        for _p, f in b.frames_to_send(t):
            for g in _mangle(bytes(f), rng, True):
                seq += 1
                heapq.heappush(q, (t + rng.uniform(2e-4, 2e-3), seq, True, g))
        events = []
        while (e := qa.core.next_event()) is not None:
            events.append(repr(e))
        trace.append(("events", step, events))
        st = asdict(qa.core.get_stats())
        st.pop("state_bytes")  # what each engine allocates: differs by design
        # the retransmission timer's peak (the stats name the QP's RTO, not the timer's)
        st["rto_peak"] = (qa.core._rto_peak, qa.core._rto_peak_at_s, qa.core._host_stall_s,
                          qa.core._host_stall_at_s)  # fmt: skip
        if type(qa.core.cc) is UetNscc:  # NSCC's whole state: C's (copied out) and Python's
            st["nscc"] = nscc_state(qa.core.cc)
        trace.append(("stats", step, st))
        calls = getattr(qa.core.cc, "calls", None)
        if calls is not None:  # a recording algorithm: what it was told this step
            trace.append(("cc", step, list(calls)))
            calls.clear()
    return {
        "trace": trace,
        "ev": [asdict(s) for s in qa.ev_stats()],
        "recovery": qa.core.loss_recovery_s(),
        "memory": bytes(mr.buffer),
        "idle": qa.core.idle,
    }


def _first_difference(c: list, py: list) -> str:
    for x, y in zip(c, py, strict=False):
        if x != y:
            if isinstance(x[-1], dict):
                keys = [k for k in x[-1] if x[-1][k] != y[-1].get(k)]
                return f"{x[:2]}: " + ", ".join(f"{k} c={x[-1][k]} py={y[-1][k]}" for k in keys)
            return f"c:  {str(x)[:600]}\npy: {str(y)[:600]}"
    return f"lengths {len(c)} {len(py)}"


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_engine_matches_the_python_requester(seed: int) -> None:
    c, py = _run("c", seed), _run("py", seed)
    assert c["trace"] == py["trace"], _first_difference(c["trace"], py["trace"])
    assert c["ev"] == py["ev"]
    assert c["recovery"] == py["recovery"]
    assert c["memory"] == py["memory"]
    assert c["idle"] == py["idle"]


@needs_c
@pytest.mark.parametrize("seed", range(20))
def test_hostile_acknowledgments_leave_both_engines_in_the_same_state(seed: int) -> None:
    """SACKs and NACKs with random fields (cumulative acks behind and beyond what was sent,
    full and sparse bitmaps, unknown EVs, marks, penalties, timestamps) on top of the seeded
    runs: the C engine neither crashes nor does anything its twin does not."""
    c, py = _run("c", seed, hostile=True), _run("py", seed, hostile=True)
    assert c["trace"] == py["trace"], _first_difference(c["trace"], py["trace"])
    assert c["ev"] == py["ev"]


@needs_c
@pytest.mark.parametrize("cc", [_RecordingNscc.name, _RecordingNsccWithLoss.name])
@pytest.mark.parametrize("seed", range(24))
def test_congestion_control_is_told_the_same_by_both_engines(seed: int, cc: str) -> None:
    """Every call into the congestion control (acknowledgments with their EV and bytes in
    flight, trims, timeouts, penalties, and for an algorithm that has it every lost packet),
    the same in both engines, in the same order, at the same step."""
    hostile = seed % 3 == 2
    c, py = _run("c", seed, hostile=hostile, cc=cc), _run("py", seed, hostile=hostile, cc=cc)
    assert c["trace"] == py["trace"], _first_difference(c["trace"], py["trace"])


def _tiny_rings(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The C send engine's rings started at 2 records, 1 write and 1 repair; returns the list
    every later move of any engine is recorded in (sizes before and asked, and whether made)."""
    monkeypatch.setattr(tx_engine, "FIRST_REC_CAP", 2)
    monkeypatch.setattr(tx_engine, "FIRST_MSG_CAP", 1)
    monkeypatch.setattr(tx_engine, "FIRST_RECOVERY_LOG", 1)
    moves: list[dict] = []
    real = tx_engine.CTxEngine._move

    def counted(self, rec_cap: int, msg_cap: int, recov_cap: int) -> bool:
        q = self.q
        was = {"rec": q.rec_cap, "msg": q.msg_cap, "recov": q.recov_cap}
        ok = real(self, rec_cap, msg_cap, recov_cap)
        if was["rec"]:  # (an engine's first rings, from none, are not a move)
            moves.append({"was": was, "rec": rec_cap, "msg": msg_cap, "recov": recov_cap, "ok": ok})
        return ok

    monkeypatch.setattr(tx_engine.CTxEngine, "_move", counted)
    return moves


@needs_c
@pytest.mark.parametrize("seed", range(16))
def test_rings_that_start_tiny_grow_and_shrink_as_the_twin_runs(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send engine's rings start small, grow when it asks (MRC_TXE_GROW; a post to a full
    ring of writes; a recovery log about to wrap) and go back to their first sizes at rest,
    every live entry re-indexed (``mrc_txe_move``). Started at 2 records, 1 write and 1
    repair, every run moves them many times, and still sends what the Python requester
    sends, frame for frame, with the same repair times and memory."""
    moves = _tiny_rings(monkeypatch)
    hostile = seed % 4 == 3
    c, py = _run("c", seed, hostile=hostile), _run("py", seed, hostile=hostile)
    assert c["trace"] == py["trace"], _first_difference(c["trace"], py["trace"])
    assert c["ev"] == py["ev"]
    assert c["recovery"] == py["recovery"]
    assert c["memory"] == py["memory"]
    assert c["idle"] == py["idle"]
    assert any(m["rec"] > m["was"]["rec"] for m in moves)  # records grew
    assert any(m["msg"] > m["was"]["msg"] for m in moves)  # and the ring of writes


@needs_c
def test_the_tiny_rings_shrink_and_the_recovery_log_grows(monkeypatch) -> None:
    """Across the runs above, the rings went back to their first sizes at rest, and the
    recovery log grew rather than forget a repair."""
    moves = _tiny_rings(monkeypatch)
    for seed in range(16):
        _run("c", seed)
    assert any(m["was"]["rec"] > 2 and (m["rec"], m["msg"], m["ok"]) == (2, 1, True) for m in moves)
    assert max(m["recov"] for m in moves if m["ok"]) >= 8


@needs_c
def test_congestion_control_hears_of_every_kind_of_loss_with_its_ev() -> None:
    """The runs above tell an algorithm with ``on_loss`` of losses found from SACKs, trims (in
    the fabric and at the last hop) and timeouts, each with the EV it was sent on; and give
    every acknowledgment its EV and the bytes in flight."""
    causes: dict[str, int] = {}
    acks_with_ev = ecn_acks_with_ev = 0
    planes = SHAPE.planes
    for seed in range(12):
        for entry in _run("c", seed, cc=_RecordingNsccWithLoss.name)["trace"]:
            if entry[0] != "cc":
                continue
            for call in entry[2]:
                s = call[1]
                if call[0] == "loss":
                    causes[s.cause] = causes.get(s.cause, 0) + 1
                    assert s.ev >= 0 and s.plane == s.ev % planes and s.lost_bytes >= 0
                    assert s.path // SHAPE.t1 == s.plane and s.inflight_bytes >= 0
                elif call[0] == "ack":
                    assert s.inflight_bytes >= 0
                    if s.ev >= 0:
                        assert s.plane == s.ev % planes and s.path // SHAPE.t1 == s.plane
                        acks_with_ev += 1
                        ecn_acks_with_ev += s.ecn
    for cause in (LOSS_SACK, LOSS_TRIM, LOSS_TRIM_LAST_HOP, LOSS_TIMEOUT):
        assert causes.get(cause, 0) > 0, (cause, causes)
    assert acks_with_ev > 0 and ecn_acks_with_ev > 0


@needs_c
def test_the_parity_cases_reach_every_path() -> None:
    """The cases above are not vacuous: between them they take every branch that matters."""
    tot: dict[str, int] = {}
    for seed in range(30):
        st = _run("c", seed)["trace"][-1][2]
        for k, v in st.items():
            if isinstance(v, int):
                tot[k] = tot.get(k, 0) + v
    for k in ("tx_data_packets", "retransmissions", "rx_sacks", "rx_nacks", "sack_losses",
              "timeouts", "completions", "rx_malformed", "rx_foreign", "spurious_timeouts"):  # fmt: skip
        assert tot.get(k, 0) > 0, k


@needs_c
@pytest.mark.parametrize("simd", [1, 0])
def test_the_icrc_is_zlibs_crc32(simd: int) -> None:
    """csrc/mrc_crc.c (AVX-512 folding where the CPU has it, then libdeflate's CRC-32 when
    the build found it, else zlib's) computes what Python's zlib.crc32 does, on every length
    around the folding loop's steps: the two engines' frames carry the same ICRC."""
    lib = _c_module().lib
    rng = random.Random(1)
    with simd_loop(lib.mrc_crc32_simd, simd):
        for n in [*range(0, 700), 4136, 4150, 9000, 65537]:
            b = rng.randbytes(n)
            start = rng.randrange(1 << 32)
            assert lib.mrc_crc32(0, b, n) == zlib.crc32(b)
            assert lib.mrc_crc32(start, b, n) == zlib.crc32(b, start)
            assert lib.mrc_crc32(zlib.crc32(b[:3]), b[3:], max(0, n - 3)) == zlib.crc32(b)


@needs_c
def test_the_icrc_folds_with_avx512_where_the_cpu_has_it() -> None:
    """So the test above runs the folding loop on a machine of the project's kind, and a CPU
    without AVX-512 VPCLMULQDQ gets the library's CRC instead of an illegal instruction. The
    loop's constants are x^n mod P, bit-reflected and shifted left by one: derived here again."""
    lib = _c_module().lib
    has = {"avx512f", "vpclmulqdq", "pclmulqdq", "sse4_1"} <= cpu_flags()
    with simd_loop(lib.mrc_crc32_simd, 1) as on:
        assert on == int(has)
    with simd_loop(lib.mrc_crc32_simd, 0) as on:
        assert on == 0

    def k(n: int) -> int:
        r = 1
        for _ in range(n):
            r <<= 1
            if r & (1 << 32):
                r ^= 0x104C11DB7
        return int(f"{r:032b}"[::-1], 2) << 1

    with open(Path(__file__).resolve().parents[2] / "csrc" / "mrc_crc.c") as f:
        src = f.read()
    for d in (2048, 512, 384, 256, 128):
        assert f"K{d + 32} = {k(d + 32):#x}" in src and f"K{d - 32} = {k(d - 32):#x}" in src
    assert f"K64 = {k(64):#x}" in src


@pytest.mark.parametrize("engine", ["py", pytest.param("c", marks=needs_c)])
def test_a_qp_without_progress_fails_on_both_engines(engine: str) -> None:
    """Issue 25's no-progress rule with each send engine: every transmission of one packet
    is lost and answered by a trim NACK echoing its timestamp (repairs that never time
    out); the QP fails with RETRY_EXCEEDED once nothing was acknowledged for its budget,
    (retry_limit + 2) x max_rto_s, and its write completes with that status."""
    from mrcnic.transport.frames import NACK, OP_NACK
    from mrcnic.transport.qp_types import QpErrorEvent, WcStatus, WriteCompleted

    a = Device(host_net(SHAPE, 0), 100e6, seed=1, engine=engine)
    b = Device(host_net(SHAPE, 2), 100e6, seed=1, engine="py")
    cfg = QpConfig(base_rtt_s=1e-3, seed=1, max_rto_s=0.02)
    qa, qb = a.create_qp(cfg), b.create_qp(cfg)
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    assert (qa.core._txe is not None) == (engine == "c")
    mr = b.register(bytearray(4096))
    qa.post_write(1, bytes(3000), RemoteBuffer.of(mr))
    t, stuck, to_a = 1.0, -1, []
    events: list = []
    while t < 1.5 and qa.core.state is QpState.READY:
        for _p, f in a.frames_to_send(t):
            f = bytes(f)
            if f[layout.OFF_BTH] in layout.MRC_DATA_OPS:
                psn = int.from_bytes(f[layout.OFF_BTH + 9 : layout.OFF_BTH + 12], "big")
                stuck = psn if stuck < 0 else stuck
                if psn == stuck:
                    ts = int.from_bytes(f[layout.OFF_BTH + 16 : layout.OFF_BTH + 24], "big")
                    ev = wire.udp_flow_to_ev(
                        int.from_bytes(f[54:56], "big"), int.from_bytes(f[15:18], "big") & 0xFFFF
                    )
                    body = NACK.pack(int(wire.NackReason.TRIMMED) << 24 | psn, ev, 0, ts)
                    rev = qb.core.evs.reverse[0]
                    to_a.append((t + 2e-4, qb.core._ctrl_frame(OP_NACK, psn, body, rev)[1]))
                    continue
            b.receive_frame(f, t)
        to_a += [(t + 2e-4, bytes(f)) for _p, f in b.frames_to_send(t)]
        t += 1e-4
        for arr, f in [x for x in to_a if x[0] <= t]:
            a.receive_frame(f, arr)
        to_a = [x for x in to_a if x[0] > t]
        for dev in (a, b):
            tm = dev.get_timer()
            if tm is not None and tm <= t:
                dev.handle_timer(t)
        while (e := qa.core.next_event()) is not None:
            events.append(e)
    errors = [e for e in events if isinstance(e, QpErrorEvent)]
    assert [e.status for e in errors] == [WcStatus.RETRY_EXCEEDED]
    assert "no progress" in errors[0].reason and qa.core.stats.timeouts == 0
    assert errors[0].time_s - 1.0 == pytest.approx(9 * 0.02, abs=2e-3)
    comps = [(e.wr_id, e.status) for e in events if isinstance(e, WriteCompleted)]
    assert comps == [(1, WcStatus.RETRY_EXCEEDED)]
