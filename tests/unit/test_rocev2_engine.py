"""The RoCEv2 baseline's C data path (csrc/mrc_roce.c, mrcnic/rocev2/c_engine.py) against its
twin, the Python RoceQueuePair: two devices exchanging writes over a wire that loses,
duplicates, reorders, marks CE and corrupts frames, with timers firing; both engines must send
the same frames and end with the same events, counters and memory."""

from __future__ import annotations

import random
from dataclasses import asdict

import pytest

from mrcnic.rocev2.c_engine import FIRST_MSG_CAP, CRoceQueuePair
from mrcnic.rocev2.qp import RoceQueuePair
from mrcnic.sim.fabric import host_net
from mrcnic.transport.qp_types import QpAttributes, QpConfig, QpState, WcStatus
from mrcnic.transport.rx_engine import c_module as _c_module
from mrcnic.verbs import Device, RemoteBuffer
from mrcnic.wire import layout, usid
from tests.batches import receive_batches

needs_c = pytest.mark.skipif(_c_module() is None, reason="the C module is not built")
SHAPE = usid.ClosShape(planes=2, t0=2, t1=2, hosts_per_t0=2)
MEM = 1 << 18


def _pair(engine: str, seed: int, start_psn: int | None = None, **opts):
    a = Device(host_net(SHAPE, 0), 100e6, seed=seed, engine=engine)
    b = Device(host_net(SHAPE, 2), 100e6, seed=seed, engine=engine)
    cc = tuple(opts.items())
    psn = (seed * 7919) & 0xFFFFFF if start_psn is None else start_psn
    cfg = QpConfig(base_rtt_s=1e-3, seed=seed, start_psn=psn, cc_options=cc)
    qa, qb = a.create_qp(cfg, transport="rocev2"), b.create_qp(cfg, transport="rocev2")
    qa.connect(QpAttributes.from_json(qb.export()))
    qb.connect(QpAttributes.from_json(qa.export()))
    ma, mb = a.register(bytearray(MEM)), b.register(bytearray(MEM))
    return a, b, qa, qb, ma, mb


def _mutate(frame: bytes, rng: random.Random, p: float) -> list[bytes]:
    r = rng.random()
    if r >= p:
        return [frame]
    r /= p
    f = bytearray(frame)
    if r < 0.35:
        return []  # lost
    if r < 0.5:
        return [frame, frame]  # duplicated
    if r < 0.75:
        f[layout.OFF_TC_LO] |= 0x30  # CE
        return [bytes(f)]
    if r < 0.85:
        f[-9] ^= 0x40  # a bit near the end: the ICRC fails
        return [bytes(f)]
    if r < 0.92:
        return [frame[: rng.randrange(20, len(frame))]]  # cut short
    f[layout.OFF_BTH] = 0x15  # an opcode the baseline does not use
    return [bytes(f)]


def _deliver(dev: Device, frames: list[bytes], t: float, batch: bool) -> None:
    if not batch:
        for f in frames:
            dev.receive_frame(f, t)
        return
    receive_batches(dev, frames, t, per_batch=max(1, len(frames)))  # one batch


def _run(engine: str, seed: int, batch: bool = False, start_psn: int | None = None, **opts) -> dict:
    rng = random.Random(seed)
    a, b, qa, qb, ma, mb = _pair(engine, seed, start_psn, **opts)
    ra, rb = RemoteBuffer.of(ma), RemoteBuffer.of(mb)
    p = rng.choice([0.0, 0.05, 0.2])
    for i in range(rng.randrange(1, 40)):
        n = rng.choice([0, 1, 100, 4096, 9000, 20000, 65536])
        off = rng.randrange(0, MEM - n)
        imm = rng.randrange(1 << 32) if rng.random() < 0.4 else None
        data = bytes(rng.randrange(256) for _ in range(min(n, 97))) * (n // 97 + 1)
        qa.post_write(i, data[:n], RemoteBuffer(rb.va + off, rb.rkey, n), imm=imm)
        if rng.random() < 0.3:
            qb.post_write(1000 + i, data[: n // 2], RemoteBuffer(ra.va + off, ra.rkey, n // 2))
    if rng.random() < 0.1:  # a write the peer refuses
        qa.post_write(99, b"z" * 64, RemoteBuffer(rb.va + 8, rb.rkey ^ 1, 64))
    t = 1.0
    sent: list[bytes] = []
    for _step in range(400):
        t += rng.choice([1e-6, 3e-5, 2e-4, 3e-3])
        for src, dst in ((a, b), (b, a)):
            for q in (qa, qb):  # the C engine's timer in one call: the twin's rule, as it stands
                if isinstance(q.core, CRoceQueuePair):
                    assert q.core.get_timer() == RoceQueuePair.get_timer(q.core)
            src.handle_timer(t)
            frames = [bytes(f) for _p, f in src.frames_to_send(t)]
            sent += frames
            wire: list[bytes] = []
            for f in frames:
                wire += _mutate(f, rng, p)
            if rng.random() < 0.3:
                rng.shuffle(wire)
            _deliver(dst, wire, t, batch)
        if qa.core.idle and qb.core.idle and qa.core.get_timer() is None:
            break
    out = {"sent": sent}
    for name, q, m in (("a", qa, ma), ("b", qb, mb)):
        st = asdict(q.core.get_stats())
        st.pop("state_bytes")
        out[name] = {
            "events": [repr(e) for e in q.poll_events()]
            + [repr(e) for e in q.poll_cq()]
            + [repr(e) for e in q.poll_recv()],
            "stats": st,
            "memory": bytes(m.buffer),
            "placed": m.bytes_placed,
            "timer": q.core.get_timer(),
            "state": q.state.name,
        }
    return out


def _same(c: dict, py: dict) -> None:
    for side in ("a", "b"):
        for k in ("stats", "events", "placed", "timer", "state"):
            assert c[side][k] == py[side][k], (side, k)
        assert c[side]["memory"] == py[side]["memory"], side
    assert len(c["sent"]) == len(py["sent"])
    assert c["sent"] == py["sent"]


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_the_c_engine_matches_the_python_qp(seed: int) -> None:
    _same(_run("c", seed), _run("py", seed))


@needs_c
@pytest.mark.parametrize("seed", range(30, 40))
def test_the_c_engine_matches_through_receive_batches(seed: int) -> None:
    _same(_run("c", seed, batch=True), _run("py", seed))


@needs_c
@pytest.mark.parametrize("seed", range(40, 46))
def test_the_engines_agree_with_the_paper_dcqcn_no_nak_retries_and_a_delayed_ack(
    seed: int,
) -> None:
    opts = {"dcqcn_profile": "paper", "nak_retries": False, "ack_delay_s": 2e-4}
    _same(_run("c", seed, **opts), _run("py", seed, **opts))


@needs_c
@pytest.mark.parametrize("seed", range(46, 50))
def test_the_engines_agree_across_the_psn_wrap(seed: int) -> None:
    start = 0xFFFFFF - 7 * (seed - 45)  # the PSNs wrap to 0 within the first writes
    _same(_run("c", seed, start_psn=start), _run("py", seed, start_psn=start))


@needs_c
def test_the_parity_cases_reach_every_path() -> None:
    """The cases above are not vacuous: between them they take every branch."""
    tot: dict[str, int] = {}
    states = set()
    for seed in range(46):
        opts = {"dcqcn_profile": "paper", "nak_retries": False, "ack_delay_s": 2e-4}
        r = _run("c", seed, batch=30 <= seed < 40, **(opts if seed >= 40 else {}))
        for side in ("a", "b"):
            for k, v in r[side]["stats"].items():
                tot[k] = tot.get(k, 0) + v
            states.add(r[side]["state"])
    for k in ("retransmissions", "rx_duplicates", "rx_out_of_order", "rx_ecn_marked",
              "tx_cnps", "rx_cnps", "tx_nacks", "rx_nacks", "gbn_rewinds", "timeouts",
              "rx_malformed", "rx_refused", "rx_acks", "rx_stale", "completions",
              "cnps_suppressed"):  # fmt: skip
        assert tot[k] > 0, k
    assert {"READY", "ERROR"} <= states


@needs_c
def test_a_c_device_makes_c_rocev2_qps_and_a_python_one_makes_twins() -> None:
    a, b, qa, qb, _ma, _mb = _pair("c", 1)
    assert type(qa.core) is CRoceQueuePair
    _a, _b, pa, _pb, _ma, _mb = _pair("py", 1)
    assert type(pa.core) is RoceQueuePair


@needs_c
def test_the_ring_of_writes_grows_and_the_state_stays_small() -> None:
    """A QP holds what it uses: the ring doubles under many writes; a QP at rest is small."""
    a, b, qa, qb, _ma, mb = _pair("c", 2)
    rest = qa.stats().state_bytes
    assert rest <= 64 * 1024
    rb = RemoteBuffer.of(mb)
    n = 5 * FIRST_MSG_CAP
    for i in range(n):
        qa.post_write(i, b"w" * 64, RemoteBuffer(rb.va + 64 * i, rb.rkey, 64))
    assert qa.stats().state_bytes > rest
    t = 1.0
    while not qa.core.idle and t < 3.0:
        t += 1e-3
        for src, dst in ((a, b), (b, a)):
            src.handle_timer(t)
            for _p, f in src.frames_to_send(t):
                dst.receive_frame(bytes(f), t)
    done = qa.poll_cq(10 * n)
    assert [c.wr_id for c in done] == list(range(n))
    assert all(c.status is WcStatus.SUCCESS for c in done)
    assert bytes(mb.buffer[: 64 * n]) == b"w" * 64 * n


@needs_c
def test_a_refused_write_fails_both_engines_alike() -> None:
    for engine in ("c", "py"):
        a, b, qa, qb, _ma, mb = _pair(engine, 3)
        rb = RemoteBuffer.of(mb)
        qa.post_write(7, b"q" * 100, RemoteBuffer(rb.va, rb.rkey ^ 5, 100))
        t = 1.0
        for _ in range(5):
            t += 1e-3
            for src, dst in ((a, b), (b, a)):
                for _p, f in src.frames_to_send(t):
                    dst.receive_frame(bytes(f), t)
        assert qb.state is QpState.ERROR, engine
        err = [e for e in qb.poll_events() if hasattr(e, "reason")]
        assert err and "incoming write refused (BAD_RKEY" in err[0].reason, engine
        assert [c.status for c in qa.poll_cq()] == [WcStatus.REMOTE_ACCESS_ERROR], engine


def _blackhole(engine: str) -> dict:
    """Writes into a fabric that delivers nothing after the first few frames: timeouts with
    their doubling until the retry count runs out."""
    a, b, qa, qb, _ma, mb = _pair(engine, 4)
    rb = RemoteBuffer.of(mb)
    for i in range(3):
        qa.post_write(i, bytes([i]) * 9000, RemoteBuffer(rb.va + 9000 * i, rb.rkey, 9000))
    t, sent, delivered = 1.0, [], 0
    for _ in range(200):
        t = max(t + 1e-4, qa.core.get_timer() or t)
        a.handle_timer(t)
        for _p, f in a.frames_to_send(t):
            sent.append(bytes(f))
            if delivered < 2:
                delivered += 1
                b.receive_frame(bytes(f), t)
        b.handle_timer(t)
        b.frames_to_send(t)  # (its ACKs are lost too)
        if qa.state is QpState.ERROR:
            break
    st = asdict(qa.core.get_stats())
    st.pop("state_bytes")
    return {"sent": sent, "events": [repr(e) for e in qa.poll_events() + qa.poll_cq()],
            "stats": st, "t": t}  # fmt: skip


@needs_c
def test_the_engines_agree_when_the_retry_count_runs_out() -> None:
    c, py = _blackhole("c"), _blackhole("py")
    assert c == py
    assert "RETRY_EXCEEDED" in " ".join(c["events"]) and c["stats"]["timeouts"] == 7
